"""The alias study's report, from stored files only (no root): the posts' table
format, a written comparison, the claims, and the plot (PNG + SVG)."""
from __future__ import annotations

import os
import statistics
from typing import Any, Dict, List, Optional, Tuple

from nslab.reporting import Claim, StudyReport, load_run, render, write_markdown_and_html
from nslab.shaping import goodput_ceiling

from .model import rise
from .records import SCHEMA, AliasRecord, valid

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
METHODS = [
    ("receiver_bps", "receiver window (primary)"),
    ("clients_sum_bps", "sum of clients' reports (posts' method)"),
]
Summary = Dict[Tuple[str, str], Dict[int, Dict[str, float]]]


def summarize(records: List[AliasRecord]) -> Summary:
    """``{(mode, metric): {n: {median, min, max, count}}}`` over the valid points."""
    groups: Dict[Tuple[str, str, int], List[float]] = {}
    for r in records:
        if not valid(r):
            continue  # the fidelity check failed: not a measurement of what it claims
        m = r.measurements
        for metric in [k for k, _ in METHODS] + ["cpu_busy_pct", "start_margin_s"]:
            groups.setdefault((r.params.mode, metric, r.params.n), []).append(float(getattr(m, metric)))
    out: Summary = {}
    for (mode, metric, n), vals in sorted(groups.items()):
        out.setdefault((mode, metric), {})[n] = {
            "median": statistics.median(vals), "min": min(vals), "max": max(vals), "count": len(vals)}
    return out


def table(summary: Summary, pub: Dict[str, Any]) -> Tuple[List[int], List[Tuple[str, Dict[int, float]]]]:
    """The posts' table: columns N, rows Kbits/sec (published series, then ours)."""
    rows: List[Tuple[str, Dict[int, float]]] = []
    for s in pub["series"]:
        rows.append((f"published: {s['label']}", {int(k): v for k, v in s["points"].items()}))
    for mode in ("alias", "parallel"):
        for metric, label in METHODS:
            if (mode, metric) in summary:
                rows.append((f"{mode}: {label}",
                             {n: v["median"] / 1e3 for n, v in summary[(mode, metric)].items()}))
    ns = sorted({n for _, vals in rows for n in vals})
    return ns, rows


def method_lines(summary: Summary) -> List[str]:
    out = []
    for mode in ("alias", "parallel"):
        for metric, label in METHODS:
            data = summary.get((mode, metric))
            if not data:
                continue
            med = {n: v["median"] for n, v in data.items()}
            r = rise(med)
            spread = max([(v["max"] - v["min"]) / v["median"] for v in data.values()
                          if v["median"]] or [0.0])
            verdict = ("no N above 16 measured" if r is None else
                       f"{r * 100:+.1f} % from N<=16 to N={max(med)}: " +
                       ("rises" if r > max(0.02, spread) else "flat within the spread"))
            out.append(f"{mode}, {label}: {verdict} (largest spread between repeats "
                       f"{spread * 100:.1f} %).")
    return out


def claims(records: List[AliasRecord], summary: Summary) -> List[Claim]:
    """The posts' claims beside what we measured."""
    reps = max((r.params.repeat for r in records), default=0) + 1
    rec = summary.get(("alias", "receiver_bps"), {})
    cs = summary.get(("alias", "clients_sum_bps"), {})
    par = summary.get(("parallel", "receiver_bps"), {})
    if not rec:
        return []
    ns = sorted(rec)
    spread = max(v["max"] - v["min"] for v in rec.values()) / statistics.median(
        [v["median"] for v in rec.values()])
    r_rec = rise({n: v["median"] for n, v in rec.items()})
    r_cs = rise({n: v["median"] for n, v in cs.items()}) if cs else None
    flat = r_rec is not None and abs(r_rec) <= max(0.02, spread)
    conf = (f"{reps} repeats per N, largest spread between repeats {spread * 100:.1f} %" if reps > 1
            else "1 repeat per N: no spread measured; run --full for 3 repeats")
    out = [Claim("Linux IP aliasing adds no measurable overhead",
                 f"receiver throughput from N={ns[0]} to N={ns[-1]}: {r_rec * 100:+.1f} %"
                 if r_rec is not None else "one N only",
                 "agrees" if flat or (r_rec is not None and r_rec > 0) else "disagrees", conf,
                 "seeds 000, 001")]
    out.append(Claim("Throughput rises with the number of aliases (posts: +7.6 %, +7.8 %)",
                     (f"at the receiver {r_rec * 100:+.1f} %; in the clients' summed reports "
                      f"{r_cs * 100:+.1f} %") if r_rec is not None and r_cs is not None else "n/a",
                     "not at the receiver: the rise appears only in the summed client reports"
                     if flat and r_cs is not None and r_cs > max(0.02, spread) else
                     ("reproduced" if r_rec and r_rec > max(0.02, spread) else "not reproduced"),
                     conf, "seeds 000, 001"))
    common = sorted(set(par) & set(rec))
    if common:
        n = common[-1]
        diff = (par[n]["median"] - rec[n]["median"]) / rec[n]["median"]
        pcs = summary.get(("parallel", "clients_sum_bps"), {}).get(n)
        out.append(Claim("The rise comes from more TCP connections, not from the aliases",
                         f"N={n}: {n} connections to one address ({par[n]['median'] / 1e6:.0f} "
                         f"Mbit/s) vs one per alias ({rec[n]['median'] / 1e6:.0f}): "
                         f"{diff * 100:+.1f} %" + (f"; iperf's own SUM for -P {n}: "
                                                     f"{pcs['median'] / 1e6:.0f} Mbit/s" if pcs else ""),
                         "aliases and connections behave alike; the link was full either way, so "
                         "the extra 'throughput' is a reporting artefact, not more parallel windows",
                         conf, "seed 001 (J. J. Ciarlante's explanation)"))
    return out


def write_report(run_dir: str) -> StudyReport:
    """Write ``report.md``/``report.html`` and ``alias.png``/``.svg`` into ``run_dir``."""
    run = load_run(run_dir, SCHEMA, "alias")
    records, prov, cfg = run.records, run.prov, run.cfg
    pub = run.published
    summary = summarize(records)
    ns, rows = table(summary, pub)
    excluded = [r for r in records if r.measurements.invalid]
    unchecked = sum(1 for r in records if r.measurements.invalid is None)
    p2 = {int(k): v / 1e3 for k, v in pub["series"][1]["points"].items()}
    found = claims(records, summary)
    md = render(TEMPLATES, "report.md.j2", prov=prov, cfg=cfg, pub=pub, ns=ns, rows=rows,
                published_rises=[(s["label"], rise({int(k): v for k, v in s["points"].items()}))
                                 for s in pub["series"]],
                methods=method_lines(summary), excluded=excluded, unchecked=unchecked,
                rec=summary.get(("alias", "receiver_bps"), {}),
                cs=summary.get(("alias", "clients_sum_bps"), {}), post2=p2, claims=found)
    files = write_markdown_and_html(run_dir, "report", md, "Alias study")
    figures: List[str] = []
    if records:
        out = plot(run_dir, summary, pub, cfg)
        files.update(out)
        figures.append(out["plot_png"])
    return StudyReport(files=files, claims=found, markdown=md, figures=figures)


def plot(run_dir: str, summary: Summary, pub: Dict[str, Any], cfg: Dict[str, Any]) -> Dict[str, str]:
    """Mbit/s vs # of aliases (points and a smooth line), published series, the TCP
    goodput ceiling; a second panel for start margin and CPU."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from nslab.plotting import save_figure
    from nslab.shaping import parse_rate
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 8), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.4]})
    for s, marker in zip(pub["series"], ("s", "^", "v")):
        xs = sorted(int(k) for k in s["points"])
        ax.plot(xs, [s["points"][str(x)] / 1e3 for x in xs], marker=marker, ls=":", color="grey",
                alpha=0.8, label=f"published: {s['label']}")
    styles = {("alias", "receiver_bps"): ("C0", "o", "-"),
              ("alias", "clients_sum_bps"): ("C1", "o", "--"),
              ("parallel", "receiver_bps"): ("C2", "D", "-"),
              ("parallel", "clients_sum_bps"): ("C3", "D", "--")}
    for (mode, metric), (color, marker, ls) in styles.items():
        data = summary.get((mode, metric))
        if not data:
            continue
        xs = sorted(data)
        med = np.array([data[x]["median"] for x in xs]) / 1e6
        lo = med - np.array([data[x]["min"] for x in xs]) / 1e6
        hi = np.array([data[x]["max"] for x in xs]) / 1e6 - med
        ax.errorbar(xs, med, yerr=[lo, hi], fmt=marker, color=color, capsize=3,
                    label=f"ours, {mode}: {dict(METHODS)[metric]}")
        if len(xs) >= 3:
            fine = np.linspace(min(xs), max(xs), 200)
            ax.plot(fine, np.interp(fine, xs, med), ls=ls, color=color, alpha=0.6)
    rate = str(cfg.get("rate", "1Gbit"))
    if rate.lower() != "none":
        ceil = goodput_ceiling(parse_rate(rate), cfg.get("mss") or 1448, bool(cfg.get("framing"))) / 1e6
        ax.axhline(ceil, color="k", lw=0.8, ls="-.", label=f"TCP goodput ceiling ({ceil:.0f} Mbit/s)")
    ax.set_ylabel("Mbits/sec")
    ax.set_title("Throughput vs number of IP aliases")
    ax.grid(True)
    ax.legend(fontsize=7, loc="lower left")
    for mode, color in (("alias", "C0"), ("parallel", "C2")):
        cpu = summary.get((mode, "cpu_busy_pct"))
        if cpu:
            xs = sorted(cpu)
            ax2.plot(xs, [cpu[x]["median"] for x in xs], marker="o", color=color,
                     label=f"CPU busy % ({mode})")
    ax3 = ax2.twinx()
    marg: Optional[Dict[int, Dict[str, float]]] = summary.get(("alias", "start_margin_s"))
    if marg:
        xs = sorted(marg)
        ax3.plot(xs, [marg[x]["min"] for x in xs], marker="x", color="C1", ls="--",
                 label="start margin, s (min; < 0 = a client started late)")
        ax3.set_ylabel("start margin (s)")
    ax2.set_ylabel("CPU busy %")
    ax2.set_xlabel("# of aliases")
    ax2.grid(True)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    return save_figure(fig, run_dir, "alias")
