"""``nslab bench generator``: the RFC 2544 generator's ceiling vs iperf2 and line rates."""
from __future__ import annotations

import json
import os
import statistics
import time
from typing import Dict, List, Optional

import click

from nslab.run.bench import save
from nslab.errors import LabError


MODES = ("udp", "packet", "xdp", "live")
#: The XDP sink measures the one-way latency of every 16th frame here: reading
#: the clock for every frame was over a third of its cost per frame, enough to
#: make it slower than the generator (measured: 192 ns a frame vs 84 ns).
SINK_LATENCY_EVERY = 16
#: The XDP sink's NAPI thread runs SCHED_FIFO at this priority (see ``napi_on``).
SINK_FIFO = 50
#: Frame-spaced pacing (``--spacing frames``) is measured up to twice 1 GbE line rate.
SPACED_UP_TO_LINE = 2.0
#: Below this rate nslab-pktgen paces spaced frames from user space, one a slot
#: (its LIVE_SPACED_MAX_GAP_NS, 20 us), which the slots rows already show.
SPACED_FROM_PPS = 50_000.0


def _send(lab, size: int, rate: float, seconds: float, mode: str, cpu: int,
          sink_cpu: int, sink_mode: str = "xdp", spaced: bool = False,
          napi: Optional[int] = None) -> Dict[str, object]:
    """One send from h1 to h2's sink (``sink_mode``: a UDP socket, or an XDP
    program on h2-eth0, which then runs in h2-eth0's NAPI thread on
    ``sink_cpu``): the generator's and the sink's reports. ``spaced``: the live
    path spaces every frame in the kernel (``--spacing frames``). The sink's
    report gains ``napi_cpu_s``, the CPU time h2-eth0's NAPI thread (pid
    ``napi``, from ``napi_on``) used while the generator sent (where the XDP
    sink does all its work)."""

    from nslab.traffic.pktgen import pktgen_path

    from .bed import thread_cpu_seconds
    pg = pktgen_path()
    h1, h2 = lab["h1"], lab["h2"]
    mac = h2.run(["cat", "/sys/class/net/h2-eth0/address"]).stdout.strip()
    sample = ["--latency-every", str(SINK_LATENCY_EVERY)] if sink_mode == "xdp" else []
    sink = h2.popen(["taskset", "-c", str(sink_cpu), pg, "recv", "--port", "9",
                     "--duration", f"{seconds + 5:.3f}", "--warmup", "0.2", "--mode", sink_mode,
                     "--iface", "h2-eth0", *sample], name="pktgen-recv")
    if "ready" not in sink.readline():
        from nslab.errors import LabError
        raise LabError(f"the sink did not start: {sink.wait(timeout=5).stderr.strip()}")
    if napi:
        # The XDP sink does all its work in the NAPI thread: SCHED_FIFO keeps
        # other tasks from holding it off. The UDP sink's reader shares that CPU
        # and a FIFO thread flooded with frames would starve it: SCHED_OTHER.
        fifo = sink_mode == "xdp"
        os.sched_setscheduler(napi, os.SCHED_FIFO if fifo else os.SCHED_OTHER,
                              os.sched_param(SINK_FIFO if fifo else 0))
    c0 = thread_cpu_seconds(napi) if napi else 0.0
    g = h1.run(["taskset", "-c", str(cpu), pg, "send", "--dst", h2.ip, "--port", "9",
                "--size", str(size), "--rate", f"{rate:.3f}", "--duration", f"{seconds:.3f}",
                "--mode", mode, "--iface", "h1-eth0", "--dst-mac", mac,
                *(["--spacing", "frames"] if spaced else [])], timeout=seconds + 30)
    c1 = thread_cpu_seconds(napi) if napi else 0.0
    time.sleep(0.3)
    sink.stop()
    gj = json.loads(g.stdout.strip().splitlines()[-1])
    sj = json.loads(sink.wait(timeout=30).stdout.strip().splitlines()[-1])
    sj["pps"] = sj["received"] / max(1e-9, gj["elapsed"])
    sj["napi_cpu_s"] = c1 - c0 if napi else None
    return {"gen": gj, "sink": sj}


def sink_cost_ceiling(received: int, napi_cpu_s: Optional[float]) -> Optional[float]:
    """The XDP sink's ceiling from its cost: frames per second of its CPU's busy
    time (its program runs in the NAPI thread), or None without a measurement."""
    if not napi_cpu_s or napi_cpu_s <= 0 or received <= 0:
        return None
    return received / napi_cpu_s


def bench_generator(sizes: List[int], modes: List[str], seconds: float, repeat: int,
                    results_root: str) -> Dict[str, object]:
    """nslab-pktgen's ceiling per send path and frame size on one CPU into an
    unshaped veth (received by the XDP sink on the other CPU, so that the sink
    does not set it), each sink's ceiling on the other CPU (the UDP socket and
    the XDP program, fed by the fastest path), pacing accuracy below the
    ceiling, iperf2's UDP ceiling on the same path, and the line rates: all
    measured in one run."""
    from nslab.runtime import caps
    from nslab.runtime.lab import Lab
    from nslab.traffic.pktgen import kernel_pktgen_present, load_kernel_pktgen, unload_kernel_pktgen
    from nslab.topologies import pair

    from .bed import CpuSplitLock
    caps.require_root("nslab bench generator")
    rows: List[Dict[str, object]] = []
    pacing: List[Dict[str, object]] = []
    loaded = load_kernel_pktgen()
    anchor = kernel_pktgen_present()
    try:
        with CpuSplitLock(), Lab(pair()) as lab:
            napi = _measure(lab, sizes, modes, seconds, repeat, anchor, rows, pacing)
    finally:
        if loaded:
            unload_kernel_pktgen()
    _print_tables(rows, pacing, modes, seconds, repeat, anchor)
    out = {"benchmark": "generator", "rows": rows, "pacing": pacing, "modes": list(modes),
           "seconds": seconds, "repeat": repeat, "sink_napi_thread_on_other_cpu": napi,
           "kernel_pktgen": anchor}
    out["saved"] = save(results_root, "generator", out)
    return out


def _measure(lab, sizes: List[int], modes: List[str], seconds: float, repeat: int, anchor: bool,
             rows: List[Dict[str, object]], pacing: List[Dict[str, object]]) -> bool:
    """Fill ``rows`` (ceilings per frame size) and ``pacing``; True if the sink's
    NAPI thread runs on the other CPU."""
    from nslab.traffic.iperf import parse, start_server
    from nslab.traffic.pktgen import run_kernel_pktgen
    from nslab.model.shaping import frame_rate

    from .bed import GEN_CPU, napi_on
    # the sink on the other CPU; on a machine of one (a guest with one vCPU) on
    # the generator's, which its figures then say (sink_other_cpu is False)
    DUT_CPU = 1 if (os.cpu_count() or 1) > 1 else GEN_CPU
    lab.static_arp()
    lab["h1"].run(["ethtool", "-K", "h1-eth0", "tso", "off", "gso", "off"], check=False)
    napi = napi_on(lab["h2"], "h2-eth0", DUT_CPU)
    start_server(lab["h2"], extra=["-u"])
    gen_sink = "xdp"
    try:
        _send(lab, sizes[0], 1000, 0.2, "udp", GEN_CPU, DUT_CPU, "xdp", napi=napi)
    except LabError as exc:
        gen_sink = "udp"
        click.echo(f"the XDP sink does not attach here ({str(exc).splitlines()[-1]}): generator "
                   "ceilings are measured into the UDP sink", err=True)
    for size in sizes:
        row: Dict[str, object] = {"frame": size, "line_100M_fps": frame_rate(100e6, size),
                                  "line_1G_fps": frame_rate(1e9, size)}
        udp_sink_best = 0.0
        sink_runs: Dict[str, List[Dict[str, object]]] = {}
        for mode in list(modes):
            gens, lost = [], []
            try:
                for _ in range(repeat):
                    r = _send(lab, size, 0, seconds, mode, GEN_CPU, DUT_CPU, gen_sink, napi=napi)
                    gens.append(float(r["gen"]["pps"]))
                    lost.append(int(r["gen"]["sent"]) - int(r["sink"]["received"]))
                    sink_runs.setdefault(mode, []).append({
                        "sent": int(r["gen"]["sent"]), "received": int(r["sink"]["received"]),
                        "napi_cpu_s": r["sink"]["napi_cpu_s"], "elapsed": r["gen"]["elapsed"]})
                    if gen_sink == "udp":
                        udp_sink_best = max(udp_sink_best, float(r["sink"]["pps"]))
            except LabError as exc:  # a path this kernel lacks: said, then left out
                click.echo(f"{mode}: not available here ({str(exc).splitlines()[-1]})", err=True)
                modes.remove(mode)
                continue
            row[f"{mode}_pps"] = statistics.median(gens)
            row[f"{mode}_runs"] = gens
            row[f"{mode}_lost"] = lost
            click.echo(f"{size} B {mode}: {statistics.median(gens):,.0f} frames/s "
                       f"(runs {', '.join(f'{g:,.0f}' for g in gens)}; not at the {gen_sink} sink: "
                       f"{', '.join(str(x) for x in lost)})", err=True)
        if not modes:
            raise LabError("no send path of nslab-pktgen works here")
        # The UDP socket sink's ceiling, fed by the fastest path.
        fastest = max(modes, key=lambda m: float(row[f"{m}_pps"]))
        for _ in range(repeat):
            r = _send(lab, size, 0, seconds, fastest, GEN_CPU, DUT_CPU, "udp", napi=napi)
            udp_sink_best = max(udp_sink_best, float(r["sink"]["pps"]))
        if anchor:
            mac = lab["h2"].run(["cat", "/sys/class/net/h2-eth0/address"]).stdout.strip()
            kp = [run_kernel_pktgen(lab["h1"], "h1-eth0", lab["h2"].ip, mac, size, seconds,
                                    GEN_CPU)["pps"] for _ in range(repeat)]
            row["kernel_pktgen_pps"] = statistics.median(kp)
            row["kernel_pktgen_runs"] = kp
            click.echo(f"{size} B kernel pktgen: {row['kernel_pktgen_pps']:,.0f} frames/s "
                       f"(runs {', '.join(f'{g:,.0f}' for g in kp)})", err=True)
        res = lab["h1"].run(["taskset", "-c", str(GEN_CPU), "iperf", "-c", lab["h2"].ip, "-u",
                             "-b", "10G", "-l", str(max(16, size - 46)), "-t",
                             str(max(1, int(seconds)))], check=False, timeout=60)
        rep = parse(res.stdout)
        row["iperf2_pps"] = (rep.streams[0].bytes / max(16, size - 46) / rep.streams[0].duration
                             if rep.streams else 0.0)
        # The XDP sink at the fastest path's unpaced maximum: the share it took,
        # and its ceiling from its cost (frames per busy second of its CPU).
        if gen_sink == "xdp" and sink_runs.get(fastest):
            runs = sink_runs[fastest]
            ceilings = [c for c in (sink_cost_ceiling(x["received"], x["napi_cpu_s"])
                                    for x in runs) if c]
            row["sink_runs"] = runs
            row["sink_taken_pct"] = min(100.0 * x["received"] / max(1, x["sent"]) for x in runs)
            row["sink_busy_pct"] = statistics.median(
                100.0 * float(x["napi_cpu_s"] or 0) / max(1e-9, float(x["elapsed"])) for x in runs)
            row["sink_ceiling_pps"] = statistics.median(ceilings) if ceilings else None
        else:
            row["sink_ceiling_pps"] = None
        row["udp_sink_ceiling_pps"] = udp_sink_best
        rows.append(row)
    # Pacing below the ceiling: rate error and the spread of the gaps between
    # the generator's send times, as the sink saw them.
    line = round(frame_rate(1e9, sizes[0]))  # 1 GbE line rate, the goal
    for mode, spaced in [(m, False) for m in modes] + ([("live", True)] if "live" in modes else []):
        ceiling = min(float(rows[0][f"{mode}_pps"]),
                      float(rows[0]["sink_ceiling_pps"] or rows[0]["udp_sink_ceiling_pps"]))
        for rate in sorted({1000.0, 100_000.0, float(line), round(0.5 * ceiling, -3)}):
            if rate >= 0.9 * ceiling or (spaced and not SPACED_FROM_PPS <= rate
                                         <= SPACED_UP_TO_LINE * line):
                continue
            r = _send(lab, sizes[0], rate, seconds, mode, GEN_CPU, DUT_CPU, gen_sink, spaced,
                      napi=napi)
            g, sk = r["gen"], r["sink"]
            pacing.append({"mode": mode, "spacing": "frames" if spaced else "slots",
                           "path": g["path"], "frame": sizes[0], "target_pps": rate,
                           "sent_pps": g["pps"], "rate_error_pct": 100 * (g["pps"] - rate) / rate,
                           "batch": g["batch"], "gap_us": sk["send_gap_us"],
                           "lost": int(g["sent"]) - int(sk["received"]),
                           "lost_pct": 100.0 * (int(g["sent"]) - int(sk["received"]))
                           / max(1, int(g["sent"]))})
    return napi is not None


def _print_tables(rows: List[Dict[str, object]], pacing: List[Dict[str, object]],
                  modes: List[str], seconds: float, repeat: int, anchor: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    best = {r["frame"]: max(float(r[f"{m}_pps"]) for m in modes) for r in rows}
    t = Table(title="generator ceiling, one CPU, unshaped veth (frames/s, median of "
                    f"{repeat} x {seconds:g} s); XDP sink: its ceiling from its CPU time, and "
                    "the share it took of the fastest path (its CPU busy)")
    kcols = ("kernel pktgen", "best / kernel pktgen") if anchor else ()
    for col in ("frame", *modes, *kcols[:1], "iperf2 UDP", *kcols[1:], "best / iperf2",
                "best / UDP mode", "best / 1G line", "XDP sink", "sink / best",
                "sink took (CPU)", "UDP sink", "1 Gbit/s line"):
        t.add_column(col, justify="right")
    for r in rows:
        b = best[r["frame"]]
        k = float(r.get("kernel_pktgen_pps") or 0)
        kcells = (f"{k:,.0f}", f"{b / k:.2f}x" if k else "-") if anchor else ()
        sc = float(r.get("sink_ceiling_pps") or 0)
        t.add_row(str(r["frame"]), *(f"{float(r[f'{m}_pps']):,.0f}" for m in modes),
                  *kcells[:1], f"{float(r['iperf2_pps']):,.0f}", *kcells[1:],
                  f"{b / float(r['iperf2_pps']):.2f}x" if r["iperf2_pps"] else "-",
                  f"{b / float(r['udp_pps']):.2f}x" if r.get("udp_pps") else "-",
                  f"{b / float(r['line_1G_fps']):.2f}",
                  f"{sc:,.0f}" if sc else "-", f"{sc / b:.2f}x" if sc else "-",
                  (f"{float(r['sink_taken_pct']):.2f} % ({float(r['sink_busy_pct']):.0f} %)"
                   if r.get("sink_taken_pct") is not None else "-"),
                  f"{float(r.get('udp_sink_ceiling_pps') or 0):,.0f}",
                  f"{float(r['line_1G_fps']):,.0f}")
    # Wide enough for every column's header on one line (a pipe reads as 80).
    console = Console(width=max(260, Console().width))
    console.print(t)
    pt = Table(title=f"pacing below the ceiling ({rows[0]['frame']} B; slots: a batch per "
                     "slot; frames spaced: each frame waits in the kernel until due)")
    # gap mean: between frames n and n + 1 that both arrived; per frame: the
    # window's span over every frame sent in it (the two part where frames are lost)
    for col in ("path", "target", "sent", "rate error", "batch", "gap mean us", "per frame us",
                "gap sd us", "gap max us", "gaps >= 100 us", "lost"):
        pt.add_column(col, justify="right")
    for p in pacing:
        gp = p["gap_us"]
        name = f"{p['mode']} (frames spaced)" if p.get("path") == "live-spaced" else str(p["mode"])
        pt.add_row(name, f"{p['target_pps']:,.0f}", f"{p['sent_pps']:,.0f}",
                   f"{p['rate_error_pct']:+.3f} %", str(p["batch"]), f"{gp['avg']:.2f}",
                   f"{gp['per_frame']:.2f}" if "per_frame" in gp else "-",
                   f"{gp['stdev']:.2f}", f"{gp['max']:.1f}", str(gp["long"] if "long" in gp else "-"),
                   f"{p['lost']} ({float(p.get('lost_pct', 0)):.3f} %)")
    console.print(pt)
    if not anchor:
        click.echo("kernel pktgen (the anchor): not on this kernel (no pktgen module); "
                   "the stock-kernel guest has it", err=True)


@click.command("generator")
@click.option("--sizes", default="64,512,1518", show_default=True)
@click.option("--modes", default=",".join(MODES), show_default=True,
              help="nslab-pktgen send paths to measure")
@click.option("--seconds", type=click.FloatRange(0.5, 60), default=2.0, show_default=True)
@click.option("--repeat", type=click.IntRange(1, 20), default=3, show_default=True)
@click.pass_context
def generator_cmd(ctx: click.Context, sizes: str, modes: str, seconds: float, repeat: int) -> None:
    """nslab-pktgen's send paths vs iperf2 UDP and line rates, the sink's ceiling, pacing."""
    from nslab.cmdline.cliutil import int_list, setup_logging
    from nslab.errors import InputError
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in chosen if m not in MODES]
    if bad or not chosen:
        raise InputError(f"--modes: unknown {', '.join(bad) or '(none given)'} "
                         f"(use {', '.join(MODES)})")
    setup_logging(ctx.obj, f"bench-generator-{int(time.time())}")
    bench_generator(int_list(sizes, "--sizes"), chosen, seconds, repeat, ctx.obj.results)


def bench_search(dut: str, size: int, repeat: int, trial: float, dut_cost: Optional[int],
                 results_root: str) -> Dict[str, object]:
    """The RFC 2544 binary search and MLRsearch on the same DUT in one run,
    alternating, ``repeat`` times each: results, trials, time, agreement."""
    from rich.console import Console
    from rich.table import Table

    from nslab.runtime import caps
    from nslab.runtime.lab import Lab
    from nslab.store.stats import mean, relative_difference
    from nslab.topologies.rfc2544 import dut_chain

    from .config import Rfc2544Config
    from .bed import CpuSplitLock
    from .runner import Rfc2544Runner
    caps.require_root("nslab bench search")
    cfg = Rfc2544Config(duts=[dut], frame_sizes=[size], trial=trial, dut_cost=dut_cost)
    rows: Dict[str, List[Dict[str, float]]] = {"RFC 2544 binary": [], "MLRsearch NDR": []}
    with CpuSplitLock(), Lab(dut_chain(dut, link_rate=cfg.link_rate, framing=True)) as lab:
        runner = Rfc2544Runner(lab, cfg, dut, None)
        info = runner.setup()
        for i in range(repeat):
            t0 = time.monotonic()
            probes: List[Dict[str, object]] = []
            # as the study's searches: the calibration's target first, dithers of its own
            fps, _, _ = runner.search(size, probes, runner.prior_fps(size),
                                      runner.search_rng(size, 0, i))
            rows["RFC 2544 binary"].append({"fps": fps, "trials": len(probes),
                                            "wall_s": time.monotonic() - t0})
            m = runner.mlr(size)
            rows["MLRsearch NDR"].append({"fps": m["goals"]["NDR"]["fps"], "trials": m["trials"],
                                          "wall_s": m["wall_s"],
                                          "pdr": m["goals"]["PDR"]["fps"]})
            click.echo(f"[{i + 1}/{repeat}] binary {fps:,.0f} fps in {len(probes)} trials; "
                       f"MLRsearch NDR {m['goals']['NDR']['fps']:,.0f}, PDR "
                       f"{m['goals']['PDR']['fps']:,.0f} fps in {m['trials']} trials", err=True)
    t = Table(title=f"throughput search, {dut} at {size} B, {repeat} runs each, same DUT "
                    f"({info.get('dut_cost_filters')} filters)")
    for col in ("search", "fps (mean, 95 % t)", "trials (mean)", "time s (mean)"):
        t.add_column(col, justify="right")
    for name, rs in rows.items():
        t.add_row(name, mean([r["fps"] for r in rs]).fmt(1, 0), f"{statistics.fmean(r['trials'] for r in rs):.1f}",
                  f"{statistics.fmean(r['wall_s'] for r in rs):.1f}")
    Console().print(t)
    b, m_ = rows["RFC 2544 binary"], rows["MLRsearch NDR"]
    agree = relative_difference([r["fps"] for r in m_], [r["fps"] for r in b])
    time_ratio = statistics.fmean(r["wall_s"] for r in b) / statistics.fmean(r["wall_s"] for r in m_)
    click.echo(f"MLRsearch NDR vs binary search: {agree.fmt(100, 1, ' %', sign=True)}; "
               f"time binary/MLRsearch {time_ratio:.2f}x")
    out = {"benchmark": "search", "dut": dut, "frame": size, "setup": info, "rows": rows,
           "ndr_vs_binary": agree.value, "time_ratio_binary_over_mlr": time_ratio}
    out["saved"] = save(results_root, "search", out)
    return out


@click.command("search")
@click.option("--dut", type=click.Choice(["bridge", "router", "ovs"]), default="bridge",
              show_default=True)
@click.option("--frame", type=click.IntRange(64, 1518), default=64, show_default=True)
@click.option("--repeat", type=click.IntRange(1, 20), default=3, show_default=True)
@click.option("--trial", type=click.FloatRange(0.5, 60), default=1.0, show_default=True,
              help="seconds of the binary search's trials and MLRsearch's longest")
@click.option("--dut-cost", type=click.IntRange(0, 5000), default=None,
              help="filters on the DUT (default: calibrate to the paper's knee)")
@click.pass_context
def search_cmd(ctx: click.Context, dut: str, frame: int, repeat: int, trial: float,
               dut_cost: Optional[int]) -> None:
    """RFC 2544 binary search vs MLRsearch on the same DUT: trials, time, agreement."""
    from nslab.cmdline.cliutil import setup_logging
    setup_logging(ctx.obj, f"bench-search-{int(time.time())}")
    bench_search(dut, frame, repeat, trial, dut_cost, ctx.obj.results)
