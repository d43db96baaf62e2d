"""ECMP study report from stored results only: the post's table format, the
distribution of splits per policy next to chance, and two plots."""
from __future__ import annotations

import os
import statistics
from collections import Counter
from typing import Any, Dict, List

from nslab.published import load_published
from nslab.plotting import save_figure
from nslab.results import ResultStore

from .ecmp import chance


def post_format(rec: Dict[str, Any]) -> str:
    """One trial like the post: per-stream lines and the SUM, each with its link."""
    m = rec["measurements"]
    lines = [f"policy {rec['params']['policy']}, trial {rec['params']['trial'] + 1} "
             f"(split {m.get('split')})"]
    for s in m["streams"]:
        lines.append(f"[{int(s['id']):3d}] local port {s['local_port']}  "
                     f"{s['bps'] / 1e6:6.0f} Mbits/sec  via {s['link'] or '?'}")
    lines.append(f"[SUM] {m['sum_bps'] / 1e6:6.0f} Mbits/sec")
    return "\n".join(lines)


def distribution(records: List[Dict[str, Any]]) -> Dict[int, Counter]:
    out: Dict[int, Counter] = {}
    for r in records:
        out.setdefault(int(r["params"]["policy"]), Counter())[r["measurements"].get("split") or "?"] += 1
    return out


def write_report(run_dir: str) -> Dict[str, str]:
    store = ResultStore.open(run_dir)
    recs = store.records("point")
    prov = store.provenance()
    cfg = prov.get("config", {})
    pub = load_published("ecmp")
    streams, spines = int(cfg.get("streams", 3)), int(cfg.get("spines", 2))
    expect = chance(streams, spines)
    dist = distribution(recs)
    lines = ["# ECMP study: fib_multipath_hash_policy L3 vs L4", ""]
    lines.append(f"Measured on {prov.get('host', '?')} (kernel {prov.get('kernel', '?')}, "
                 f"{prov.get('cpus', '?')} CPUs): clos {spines} spines x 2 servers, links "
                 f"{cfg.get('link_rate')}, `iperf -c 10.0.200.1 -P{streams}` for "
                 f"{cfg.get('duration')} s, {cfg.get('trials')} trials per policy. BGP converged "
                 f"{prov.get('convergence_s', 0):.2f} s after FRR started.")
    lines.append("")
    lines.append(f"The hash policy was set in the sender's namespace ({prov.get('policy_set_in')}), "
                 "the only node that chooses between equal-cost nexthops here. Each stream's link "
                 "comes from captures on the sender's uplinks (source port -> interface).")
    lines += ["", "## Splits per policy, next to chance", "",
              f"| policy | split (streams per link) | trials | observed | chance for {streams} "
              f"streams on {spines} links |", "|---|---|---|---|---|"]
    for policy, c in sorted(dist.items()):
        n = sum(c.values())
        for split in sorted(set(c) | set(expect), key=lambda s: -expect.get(s, 0)):
            lines.append(f"| {policy} | {split} | {c.get(split, 0)} | "
                         f"{100 * c.get(split, 0) / n:.0f} % | {100 * expect.get(split, 0):.0f} % |")
    lines += ["", "## SUM per policy (Mbit/s)", "", "| policy | median | min | max | published |",
              "|---|---|---|---|---|"]
    pub_by_policy = {t["policy"]: t for t in pub["trials"]}
    for policy in sorted(dist):
        sums = [r["measurements"]["sum_bps"] / 1e6 for r in recs if r["params"]["policy"] == policy]
        p = pub_by_policy.get(policy)
        lines.append(f"| {policy} | {statistics.median(sums):.0f} | {min(sums):.0f} | {max(sums):.0f} | "
                     f"{p['sum'] if p else ''} |")
    lines += ["", "## Published (seed 002)", "", "```"]
    for t in pub["trials"]:
        lines.append(f"policy {t['policy']}: streams {t['streams']} Mbits/sec, SUM {t['sum']} "
                     f"({t['links_inferred']}, inferred by the author from the rates)")
    lines += ["```", "", "## Every trial, in the post's format", "", "```"]
    lines += [post_format(r) + "\n" for r in sorted(recs, key=lambda r: (r["params"]["policy"],
                                                                        r["params"]["trial"]))]
    lines.append("```")
    path = os.path.join(run_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = {"report": path}
    if recs:
        out.update(plot(run_dir, recs, cfg, pub))
    return out


def plot(run_dir: str, recs, cfg, pub) -> Dict[str, str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nslab.shaping import parse_rate

    from .alias import goodput_ceiling
    policies = sorted({r["params"]["policy"] for r in recs})
    spines = int(cfg.get("spines", 2))
    links = [f"server2-eth{s}" for s in range(spines)]
    fig, axes = plt.subplots(1, len(policies) + 1, figsize=(4.2 * (len(policies) + 1), 4.5),
                             gridspec_kw={"width_ratios": [3] * len(policies) + [2]})
    colors = {l: f"C{i}" for i, l in enumerate(links)}
    for ax, policy in zip(axes, policies):
        rs = sorted([r for r in recs if r["params"]["policy"] == policy],
                    key=lambda r: r["params"]["trial"])
        for i, r in enumerate(rs):
            bottom = 0.0
            for s in sorted(r["measurements"]["streams"], key=lambda s: s["link"] or ""):
                h = s["bps"] / 1e6
                ax.bar(i + 1, h, bottom=bottom, color=colors.get(s["link"], "grey"),
                       edgecolor="white")
                bottom += h
            ax.text(i + 1, bottom + 15, r["measurements"].get("split") or "?", ha="center", fontsize=7)
        ax.set_xticks(range(1, len(rs) + 1))
        ax.set_title(f"policy {policy}: per-stream Mbit/s by link")
        ax.set_xlabel("trial")
        ax.set_ylabel("Mbit/s")
        ax.grid(True, axis="y")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[l]) for l in links]
    axes[0].legend(handles, [f"{l} (spine{i + 1})" for i, l in enumerate(links)], fontsize=7)
    ax = axes[-1]
    for j, policy in enumerate(policies):
        sums = [r["measurements"]["sum_bps"] / 1e6 for r in recs if r["params"]["policy"] == policy]
        ax.scatter([j] * len(sums), sums, color="C0", alpha=0.7, label="ours" if j == 0 else None)
        for t in pub["trials"]:
            if t["policy"] == policy:
                ax.scatter([j + 0.15], [t["sum"]], marker="s", color="grey",
                           label="published" if j == 0 else None)
    try:
        one = goodput_ceiling(parse_rate(cfg.get("link_rate", "1Gbit")), framing=bool(cfg.get("framing"))) / 1e6
        ax.axhline(one, ls="--", color="k", lw=0.8, label=f"one link ({one:.0f})")
        ax.axhline(2 * one, ls="-.", color="k", lw=0.8, label=f"two links ({2 * one:.0f})")
    except Exception:  # noqa: BLE001 - unshaped: no capacity lines
        pass
    ax.set_xticks(range(len(policies)), [f"policy {p}" for p in policies])
    ax.set_ylabel("SUM Mbit/s")
    ax.set_title("SUM per trial")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y")
    return save_figure(fig, run_dir, "ecmp")
