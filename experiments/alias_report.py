"""Alias study report: reads result files only (no root), writes a table in the
posts' format, a written comparison and the plot (PNG + SVG)."""
from __future__ import annotations

import os
import statistics
from typing import Any, Dict, List, Optional, Tuple

from nslab.published import load_published
from nslab.plotting import save_figure
from nslab.results import ResultStore

METHODS = [
    ("receiver_bps", "receiver window (primary)"),
    ("clients_sum_bps", "sum of clients' reports (posts' method)"),
]


def summarize(records: List[Dict[str, Any]]) -> Dict[Tuple[str, str], Dict[int, Dict[str, float]]]:
    """``{(mode, metric): {n: {median, min, max, count}}}``."""
    groups: Dict[Tuple[str, str, int], List[float]] = {}
    for r in records:
        p, m = r["params"], r["measurements"]
        if m.get("invalid"):
            continue  # the fidelity check failed: not a measurement of what it claims
        for metric in [k for k, _ in METHODS] + ["cpu_busy_pct", "start_margin_s"]:
            if metric in m:
                groups.setdefault((p["mode"], metric, int(p["n"])), []).append(float(m[metric]))
    out: Dict[Tuple[str, str], Dict[int, Dict[str, float]]] = {}
    for (mode, metric, n), vals in sorted(groups.items()):
        out.setdefault((mode, metric), {})[n] = {
            "median": statistics.median(vals), "min": min(vals), "max": max(vals), "count": len(vals)}
    return out


def rise(series: Dict[int, float]) -> Optional[float]:
    """Relative change from the small-N plateau (N <= 16) to the largest N."""
    ns = sorted(series)
    small = [series[n] for n in ns if n <= 16]
    if not small or ns[-1] <= 16:
        return None
    base = statistics.median(small)
    return (series[ns[-1]] - base) / base if base else None


def table_rows(summary, mode: str) -> List[Tuple[str, Dict[int, float]]]:
    rows = []
    for metric, label in METHODS:
        if (mode, metric) in summary:
            rows.append((f"{mode}: {label}",
                         {n: v["median"] / 1e3 for n, v in summary[(mode, metric)].items()}))
    return rows


def format_table(rows: List[Tuple[str, Dict[int, float]]], ns: List[int]) -> str:
    """Markdown in the posts' format: ``# of alias | 1 | 2 | ...`` then Kbits/sec rows."""
    lines = ["| # of alias | " + " | ".join(str(n) for n in ns) + " |",
             "|---|" + "---|" * len(ns)]
    for label, vals in rows:
        cells = [f"{vals[n]:,.0f}" if n in vals else "" for n in ns]
        lines.append(f"| *Kbits/sec* ({label}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(run_dir: str) -> Dict[str, str]:
    """Write ``table.md``, ``comparison.md``, ``alias.png``/``.svg`` into ``run_dir``."""
    store = ResultStore.open(run_dir)
    records = store.records("point")
    prov = store.provenance()
    cfg = prov.get("config", {})
    pub = load_published("alias")
    summary = summarize(records)
    ns = sorted({int(r["params"]["n"]) for r in records})
    rows: List[Tuple[str, Dict[int, float]]] = []
    for s in pub["series"]:
        rows.append((f"published: {s['label']}", {int(k): v for k, v in s["points"].items()}))
    for mode in ("alias", "parallel"):
        rows += table_rows(summary, mode)
    all_ns = sorted(set(ns) | {int(k) for s in pub["series"] for k in s["points"]})
    table = format_table(rows, all_ns)
    with open(os.path.join(run_dir, "table.md"), "w") as f:
        f.write(f"# Alias study: Kbits/sec vs number of aliases (median of repeats)\n\n{table}\n")
    excluded = [r for r in records if r["measurements"].get("invalid")]
    comparison = compare(summary, pub, cfg, prov, excluded)
    with open(os.path.join(run_dir, "comparison.md"), "w") as f:
        f.write(comparison)
    paths = {"table": os.path.join(run_dir, "table.md"),
             "comparison": os.path.join(run_dir, "comparison.md")}
    if records:
        paths.update(plot(run_dir, summary, pub, cfg))
    return paths


def compare(summary, pub, cfg, prov, excluded=()) -> str:
    """A short written comparison: medians/spread per N next to the published values,
    and whether the rise with N appears under each method."""
    lines = ["# Alias study: comparison with the posts", ""]
    lines.append(f"Measured on {prov.get('host', '?')} (kernel {prov.get('kernel', '?')}, "
                 f"{prov.get('cpus', '?')} CPUs, {prov.get('cpu_model', '?')}); link "
                 f"{cfg.get('rate')} {'with' if cfg.get('framing') else 'without'} framing, switch "
                 f"{cfg.get('switch')}, {cfg.get('duration')} s per point, {cfg.get('repeat')} repeats"
                 f"{', MSS ' + str(cfg['mss']) if cfg.get('mss') else ''}"
                 f"{', TCP_NODELAY' if cfg.get('nodelay') else ''}.")
    lines.append("")
    if excluded:
        lines.append(f"**{len(excluded)} point(s) excluded** by the fidelity checks (the window did "
                     "not lie inside the traffic):")
        for r in excluded:
            p = r["params"]
            lines.append(f"- {p['mode']} N={p['n']} repeat {p['repeat']}: "
                         f"{'; '.join(r['measurements']['invalid'])}")
        lines.append("")
    for s in pub["series"]:
        r = rise({int(k): v for k, v in s["points"].items()})
        if r is not None:
            lines.append(f"- Published, {s['label']}: {r * 100:+.1f} % from N<=16 to N=254.")
    lines.append("")
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
            lines.append(f"- {mode}, {label}: {verdict} (largest spread between repeats "
                         f"{spread * 100:.1f} %).")
    lines.append("")
    lines.append("| N | published (post 2, tcp) Mbit/s | receiver window Mbit/s (min-max) | "
                 "clients' sum Mbit/s (min-max) |")
    lines.append("|---|---|---|---|")
    p2 = {int(k): v / 1e3 for k, v in pub["series"][1]["points"].items()}
    rec = summary.get(("alias", "receiver_bps"), {})
    cs = summary.get(("alias", "clients_sum_bps"), {})
    for n in sorted(rec):
        def fmt(d):
            return f"{d['median'] / 1e6:.1f} ({d['min'] / 1e6:.1f}-{d['max'] / 1e6:.1f})" if d else ""
        lines.append(f"| {n} | {p2.get(n, float('nan')):.1f} | {fmt(rec.get(n))} | {fmt(cs.get(n))} |")
    lines.append("")
    lines.append("Reading: the receiver window counts payload the server's sockets received during "
                 "a fixed interval inside the run, with all clients started at one instant; the "
                 "clients' sum adds each client's own average, which overstates the total when "
                 "clients end at different times. The `parallel` rows use one address and "
                 "`iperf -P N`: if they match the `alias` rows, the number of connections, not the "
                 "aliases, explains what the posts saw.")
    return "\n".join(lines) + "\n"


def plot(run_dir: str, summary, pub, cfg) -> Dict[str, str]:
    """Mbit/s vs # of aliases (points and a smooth line), published series, the TCP
    goodput ceiling; a second panel for start margin and CPU."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from nslab.shaping import parse_rate

    from .alias import goodput_ceiling
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
        label = dict(METHODS)[metric]
        ax.errorbar(xs, med, yerr=[lo, hi], fmt=marker, color=color, capsize=3,
                    label=f"ours, {mode}: {label}")
        if len(xs) >= 3:
            fine = np.linspace(min(xs), max(xs), 200)
            ax.plot(fine, np.interp(fine, xs, med), ls=ls, color=color, alpha=0.6)
    try:
        rate = parse_rate(cfg.get("rate", "1Gbit"))
        ceil = goodput_ceiling(rate, cfg.get("mss") or 1448, bool(cfg.get("framing"))) / 1e6
        ax.axhline(ceil, color="k", lw=0.8, ls="-.", label=f"TCP goodput ceiling ({ceil:.0f} Mbit/s)")
    except Exception:  # noqa: BLE001 - unshaped link: no ceiling line
        pass
    ax.set_ylabel("Mbits/sec")
    ax.set_title("Throughput vs number of IP aliases")
    ax.grid(True)
    ax.legend(fontsize=7, loc="lower left")
    for (mode, color) in (("alias", "C0"), ("parallel", "C2")):
        cpu = summary.get((mode, "cpu_busy_pct"))
        if cpu:
            xs = sorted(cpu)
            ax2.plot(xs, [cpu[x]["median"] for x in xs], marker="o", color=color,
                     label=f"CPU busy % ({mode})")
    ax3 = ax2.twinx()
    marg = summary.get(("alias", "start_margin_s"))
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
