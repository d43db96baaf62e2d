"""RFC 2544 report from stored results: the paper's Table 3 format per DUT,
figures like the paper's 10/13 (latency vs frame size), 11/14 (throughput vs
frame size at low and high input rate), latency vs offered load (log axis),
and the claims (:mod:`.claims`, over :mod:`.tables`)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from nslab.model.shaping import frame_rate, parse_rate
from nslab.store.reporting import StudyReport, load_run, render_study, study_report

from .claims import bed_scale, claims
from .records import SCHEMA, RfcRecord, Trials
from .tables import DUT_ORDER, back_to_back_rows, by_test, intrinsic, table3, trials_of

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def write_report(run_dir: str) -> StudyReport:
    run = load_run(run_dir, SCHEMA, "rfc2544")
    recs, prov, cfg = run.records, run.prov, run.cfg
    pub = run.published
    duts = sorted({r.params.dut for r in recs}, key=DUT_ORDER.index)
    rate = cfg.get("link_rate", "100Mbit")
    scale = bed_scale(prov)
    line_bps = None if str(rate).lower() == "none" else parse_rate(rate) * scale
    throughput = sorted(by_test(recs, "throughput"), key=lambda r: (r.params.dut, r.params.frame))
    latency = sorted(by_test(recs, "latency"), key=lambda r: (r.params.dut, r.params.frame))
    found = claims(recs, duts, pub, prov)
    from nslab.store.stats import level
    md, body = render_study(TEMPLATES, "report.md.j2", level=level(), topologies=run.topologies,
                            prov=prov,
                            cfg=cfg, duts=duts, setups=prov.get("setups") or {},
                            throughput=throughput, latency=latency,
                            table3={d: table3(recs, d) for d in duts}, b2b=back_to_back_rows(recs),
                            paper=pub["table3_bridge_overload_64B"], claims=found,
                            intrinsic=intrinsic(recs), vbed=prov.get("virtual_bed"),
                            clock_offset=clock_offset(recs))
    return study_report(run_dir, md, "RFC 2544 study", found,
                        (lambda: plot(run_dir, recs, duts, pub, line_bps, scale)) if recs else None,
                        body)


def clock_offset(recs: List[RfcRecord]) -> bool:
    """Did the tester's clock run apart from the DUT's in some trial at a fixed
    load (the virtual bed's, since records kept its offset)?"""
    return any(t.tester_clock_offset_pct for r in recs if isinstance(r.measurements, Trials)
               for t in r.measurements.trials)


def plot(run_dir: str, recs: List[RfcRecord], duts: List[str], pub: Dict[str, Any],
         line_bps: Optional[float], scale: float = 1.0) -> Dict[str, str]:
    """The four figures; the paper's curves at the bed's ``scale`` of its rates
    (its latencies at 1/scale)."""
    from nslab.store.plotting import pyplot
    plt = pyplot()

    from nslab.store.plotting import save_figure
    colors = {"bridge": "C0", "router": "C1", "ovs": "C2"}
    sc = f" (at scale {scale:g})" if scale != 1 else ""
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    ax = axes[0][0]  # Fig 10/13
    for dut in duts:
        pts = sorted((r.params.frame, trials_of(r)[0].latency_us.avg)
                     for r in by_test(recs, "latency") if r.params.dut == dut)
        if pts:
            ax.plot(*zip(*pts), marker="o", color=colors[dut], label=f"{dut} (ours)")
    ax.axhline(25 / scale, color="grey", ls=":", label="paper: bridge ~25 us" + sc)
    ax.axhline(30 / scale, color="grey", ls="--", lw=0.8, label="paper: router ~+5 us" + sc)
    ax.set(title="Latency vs frame size at 1,000 fps (cf. Fig. 10, 13)", xlabel="frame size (bytes)",
           ylabel="latency (us)")
    ax.legend(fontsize=7)
    ax.grid(True)
    ax = axes[0][1]  # Fig 11/14
    for dut in duts:
        lo, hi = [], []
        for r in by_test(recs, "loss"):
            if r.params.dut != dut:
                continue
            trials = sorted(trials_of(r), key=lambda t: t.target_fps)
            near = min(trials, key=lambda t: abs(t.target_fps - 1000))
            lo.append((r.params.frame, near.throughput_bps / 1e6))
            hi.append((r.params.frame, trials[-1].throughput_bps / 1e6))
        if lo:
            ax.plot(*zip(*sorted(lo)), marker="s", ls="--", color=colors[dut], label=f"{dut}, low input rate")
            ax.plot(*zip(*sorted(hi)), marker="o", color=colors[dut], label=f"{dut}, highest input rate")
    ax.scatter([1500], [96 * scale], marker="*", s=120, color="grey",
               label="paper: bridge 96 Mbit/s at 1500 B" + sc)
    if line_bps:
        ax.axhline(line_bps / 1e6, color="k", lw=0.6, ls=":", label="link rate")
    ax.set(title="Throughput vs frame size (cf. Fig. 11, 14)", xlabel="frame size (bytes)",
           ylabel="throughput (Mbit/s of frames)")
    ax.legend(fontsize=7)
    ax.grid(True)
    ax = axes[1][0]  # latency vs load, log
    for dut in duts:
        rows = table3(recs, dut)
        bad = [x for x in rows if x["invalid"]]
        rows = [x for x in rows if not x["invalid"]]
        if rows:
            ax.plot([x["fps"] for x in rows], [max(x["latency_us"], 1) for x in rows], marker="o",
                    color=colors[dut], label=f"{dut} (ours)")
        if bad:
            ax.scatter([x["fps"] for x in bad], [max(x["latency_us"], 1) for x in bad], marker="x",
                       color="lightgrey", label=f"{dut}: excluded by the fidelity guard")
    t3 = pub["table3_bridge_overload_64B"]["rows"]
    ax.plot([r[0] * scale for r in t3], [r[2] / scale for r in t3], marker="s", ls=":",
            color="grey", label="paper: bridge (Table 3)" + sc)
    if line_bps:
        ax.axvline(frame_rate(line_bps, 64), color="k", lw=0.6, ls=":", label="64 B line rate")
    ax.set(xscale="log", yscale="log", title="Latency vs offered load, 64-byte frames",
           xlabel="offered frames/s", ylabel="latency (us)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.4)
    ax = axes[1][1]  # CPU occupancy vs load
    for dut in duts:
        rows = table3(recs, dut)
        bad = [x for x in rows if x["invalid"]]
        rows = [x for x in rows if not x["invalid"]]
        if rows:
            ax.plot([x["fps"] for x in rows], [x["cpu_pct"] for x in rows], marker="o",
                    color=colors[dut], label=f"{dut} (ours)")
        if bad:
            ax.scatter([x["fps"] for x in bad], [x["cpu_pct"] for x in bad], marker="x",
                       color="lightgrey", label=f"{dut}: excluded by the fidelity guard")
    ax.plot([r[0] * scale for r in t3 if r[4] is not None],
            [r[4] for r in t3 if r[4] is not None],
            marker="s", ls=":", color="grey", label="paper: bridge CPU" + sc)
    ax.set(xscale="log", title="DUT CPU occupancy vs offered load, 64 bytes", xlabel="offered frames/s",
           ylabel="occupancy (%)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.4)
    return save_figure(fig, run_dir, "rfc2544", dpi=100)
