"""ECMP study report from stored files only: the post's table format, the
distribution of splits per policy next to chance, the claims, and two plots."""
from __future__ import annotations

import os
import statistics
from collections import Counter
from typing import Any, Dict, List

from nslab.reporting import Claim, StudyReport, load_run, render, write_markdown_and_html
from nslab.shaping import goodput_ceiling, parse_rate

from .model import chance
from .records import SCHEMA, EcmpRecord

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def post_format(rec: EcmpRecord) -> str:
    """One trial like the post: per-stream lines and the SUM, each with its link."""
    m = rec.measurements
    lines = [f"policy {rec.params.policy}, trial {rec.params.trial + 1} (split {m.split})"]
    for s in m.streams:
        lines.append(f"[{int(s.id):3d}] local port {s.local_port}  "
                     f"{s.bps / 1e6:6.0f} Mbits/sec  via {s.link or '?'}")
    lines.append(f"[SUM] {m.sum_bps / 1e6:6.0f} Mbits/sec")
    return "\n".join(lines)


def distribution(records: List[EcmpRecord]) -> Dict[int, Counter]:
    out: Dict[int, Counter] = {}
    for r in records:
        out.setdefault(r.params.policy, Counter())[r.measurements.split or "?"] += 1
    return out


def claims(records: List[EcmpRecord], cfg: Dict[str, Any]) -> List[Claim]:
    dist = distribution(records)
    streams, spines = int(cfg.get("streams", 3)), int(cfg.get("spines", 2))
    one = f"{streams}+" + "+".join(["0"] * (spines - 1))
    exp = chance(streams, spines)
    out: List[Claim] = []
    if 0 in dist:
        n0 = sum(dist[0].values())
        out.append(Claim("L3 hashing keeps -P3 on one link (991 Mbit/s)",
                         f"policy 0: {dist[0].get(one, 0)}/{n0} trials all on one link",
                         "reproduced" if dist[0].get(one, 0) == n0 else "not reproduced",
                         f"{n0} trials; deterministic for one address pair", "seed 002"))
    if 1 in dist:
        n1 = sum(dist[1].values())
        spread_n = n1 - dist[1].get(one, 0)
        sums = [r.measurements.sum_bps / 1e6 for r in records if r.params.policy == 1]
        out.append(Claim("L4 hashing spreads the streams over both links (1.97 Gbit/s)",
                         f"policy 1: {spread_n}/{n1} trials used both links; best SUM "
                         f"{max(sums):.0f} Mbit/s",
                         "reproduced" if spread_n > 0 else "not seen in these trials",
                         f"{n1} trials", "seed 002"))
        out.append(Claim("With L4, some attempts still hash all streams onto one link",
                         f"{dist[1].get(one, 0)}/{n1} trials all on one link; chance "
                         f"{exp.get(one, 0) * 100:.0f} %",
                         "reproduced" if dist[1].get(one, 0) > 0 else
                         f"not seen (chance of none in {n1} trials: "
                         f"{(1 - exp.get(one, 0)) ** n1 * 100:.0f} %)",
                         f"{n1} trials: a binomial count, wide interval at small n", "seed 002"))
    return out


def write_report(run_dir: str) -> StudyReport:
    run = load_run(run_dir, SCHEMA, "ecmp")
    recs, prov, cfg = run.records, run.prov, run.cfg
    # runs before the Study API kept these at the top of the provenance
    setup = {**{k: prov[k] for k in ("convergence_s", "policy_set_in") if k in prov},
             **next(iter((prov.get("setups") or {}).values()), {})}
    pub = run.published
    streams, spines = int(cfg.get("streams", 3)), int(cfg.get("spines", 2))
    expect = chance(streams, spines)
    dist = distribution(recs)
    splits = []
    for policy, c in sorted(dist.items()):
        n = sum(c.values())
        for split in sorted(set(c) | set(expect), key=lambda s: -expect.get(s, 0)):
            splits.append((policy, split, c.get(split, 0), 100 * c.get(split, 0) / n,
                           100 * expect.get(split, 0)))
    pub_by_policy = {t["policy"]: t for t in pub["trials"]}
    sums = []
    for policy in sorted(dist):
        vals = [r.measurements.sum_bps / 1e6 for r in recs if r.params.policy == policy]
        p = pub_by_policy.get(policy)
        sums.append((policy, statistics.median(vals), min(vals), max(vals), p["sum"] if p else ""))
    found = claims(recs, cfg)
    ordered = sorted(recs, key=lambda r: (r.params.policy, r.params.trial))
    md = render(TEMPLATES, "report.md.j2", prov=prov, cfg=cfg, setup=setup, streams=streams,
                spines=spines, splits=splits, sums=sums, pub=pub,
                trials=[post_format(r) for r in ordered], claims=found)
    files = write_markdown_and_html(run_dir, "report", md, "ECMP study")
    figures: List[str] = []
    if recs:
        out = plot(run_dir, recs, cfg, pub)
        files.update(out)
        figures.append(out["plot_png"])
    return StudyReport(files=files, claims=found, markdown=md, figures=figures)


def plot(run_dir: str, recs: List[EcmpRecord], cfg: Dict[str, Any], pub: Dict[str, Any]) -> Dict[str, str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nslab.plotting import save_figure
    policies = sorted({r.params.policy for r in recs})
    spines = int(cfg.get("spines", 2))
    links = [f"server2-eth{s}" for s in range(spines)]
    fig, axes = plt.subplots(1, len(policies) + 1, figsize=(4.2 * (len(policies) + 1), 4.5),
                             gridspec_kw={"width_ratios": [3] * len(policies) + [2]})
    colors = {l: f"C{i}" for i, l in enumerate(links)}
    for ax, policy in zip(axes, policies):
        rs = sorted([r for r in recs if r.params.policy == policy], key=lambda r: r.params.trial)
        for i, r in enumerate(rs):
            bottom = 0.0
            for s in sorted(r.measurements.streams, key=lambda s: s.link or ""):
                h = s.bps / 1e6
                ax.bar(i + 1, h, bottom=bottom, color=colors.get(s.link or "", "grey"),
                       edgecolor="white")
                bottom += h
            ax.text(i + 1, bottom + 15, r.measurements.split or "?", ha="center", fontsize=7)
        ax.set_xticks(range(1, len(rs) + 1))
        ax.set_title(f"policy {policy}: per-stream Mbit/s by link")
        ax.set_xlabel("trial")
        ax.set_ylabel("Mbit/s")
        ax.grid(True, axis="y")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[l]) for l in links]
    axes[0].legend(handles, [f"{l} (spine{i + 1})" for i, l in enumerate(links)], fontsize=7)
    ax = axes[-1]
    for j, policy in enumerate(policies):
        sums = [r.measurements.sum_bps / 1e6 for r in recs if r.params.policy == policy]
        ax.scatter([j] * len(sums), sums, color="C0", alpha=0.7, label="ours" if j == 0 else None)
        for t in pub["trials"]:
            if t["policy"] == policy:
                ax.scatter([j + 0.15], [t["sum"]], marker="s", color="grey",
                           label="published" if j == 0 else None)
    rate = str(cfg.get("link_rate", "1Gbit"))
    if rate.lower() != "none":
        one = goodput_ceiling(parse_rate(rate), framing=bool(cfg.get("framing"))) / 1e6
        ax.axhline(one, ls="--", color="k", lw=0.8, label=f"one link ({one:.0f})")
        ax.axhline(2 * one, ls="-.", color="k", lw=0.8, label=f"two links ({2 * one:.0f})")
    ax.set_xticks(range(len(policies)), [f"policy {p}" for p in policies])
    ax.set_ylabel("SUM Mbit/s")
    ax.set_title("SUM per trial")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y")
    return save_figure(fig, run_dir, "ecmp")
