"""``nslab bench generator``: the RFC 2544 generator's ceiling vs iperf2 and line rates."""
from __future__ import annotations

import statistics
import time
from typing import Dict, List, Optional

import click

from nslab.bench import save


def bench_generator(sizes: List[int], results_root: str) -> Dict[str, object]:
    """The RFC 2544 generator's ceiling per frame size on one CPU, next to iperf2's
    UDP ceiling and the line rate it must beat (100 Mbit/s and 1 Gbit/s)."""
    from rich.console import Console
    from rich.table import Table

    from nslab import caps
    from nslab.iperf import parse
    from nslab.lab import Lab
    from nslab.shaping import frame_rate
    from nslab.topologies.rfc2544 import dut_chain

    from .config import Rfc2544Config
    from .runner import GEN_CPU, Rfc2544Runner
    caps.require_root("nslab bench generator")
    rows = []
    with Lab(dut_chain("bridge")) as lab:
        runner = Rfc2544Runner(lab, Rfc2544Config(dut_cost=0), "bridge", None)
        for size in sizes:
            pps = runner.measure_ceiling(size)
            # iperf2's own UDP sender on the same CPU and path, as fast as it goes.
            res = lab["gen"].run(["taskset", "-c", str(GEN_CPU), "iperf", "-c", "10.255.0.2", "-u",
                                  "-b", "10G", "-l", str(max(16, size - 46)), "-t", "1"],
                                 check=False, timeout=30)
            rep = parse(res.stdout)
            iperf_pps = (rep.streams[0].bytes / max(16, size - 46) / rep.streams[0].duration) \
                if rep.streams else 0.0
            rows.append({"frame": size, "pktgen_pps": pps, "iperf2_pps": iperf_pps,
                         "ratio": pps / iperf_pps if iperf_pps else None,
                         "line_100M_fps": frame_rate(100e6, size), "line_1G_fps": frame_rate(1e9, size)})
    t = Table(title="generator ceiling on one CPU (frames/s)")
    for col in ("frame", "nslab-pktgen", "iperf2 UDP", "pktgen / iperf2", "100 Mbit/s line", "1 Gbit/s line"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["frame"]), f"{r['pktgen_pps']:,.0f}", f"{r['iperf2_pps']:,.0f}",
                  f"{r['ratio']:.1f}x" if r["ratio"] else "-", f"{r['line_100M_fps']:,.0f}",
                  f"{r['line_1G_fps']:,.0f}")
    Console().print(t)
    out = {"benchmark": "generator", "rows": rows}
    out["saved"] = save(results_root, "generator", out)
    return out



@click.command("generator")
@click.option("--sizes", default="64,512,1518", show_default=True)
@click.pass_context
def generator_cmd(ctx: click.Context, sizes: str) -> None:
    """The RFC 2544 generator's ceiling vs iperf2 UDP and line rates."""
    from nslab.cliutil import int_list, setup_logging
    setup_logging(ctx.obj, f"bench-generator-{int(time.time())}")
    bench_generator(int_list(sizes, "--sizes"), ctx.obj.results)


def bench_search(dut: str, size: int, repeat: int, trial: float, dut_cost: Optional[int],
                 results_root: str) -> Dict[str, object]:
    """The RFC 2544 binary search and MLRsearch on the same DUT in one run,
    alternating, ``repeat`` times each: results, trials, time, agreement."""
    from rich.console import Console
    from rich.table import Table

    from nslab import caps
    from nslab.lab import Lab
    from nslab.stats import mean, relative_difference
    from nslab.topologies.rfc2544 import dut_chain

    from .config import Rfc2544Config
    from .runner import CpuSplitLock, Rfc2544Runner
    caps.require_root("nslab bench search")
    cfg = Rfc2544Config(duts=[dut], frame_sizes=[size], trial=trial, dut_cost=dut_cost)
    rows: Dict[str, List[Dict[str, float]]] = {"RFC 2544 binary": [], "MLRsearch NDR": []}
    with CpuSplitLock(), Lab(dut_chain(dut, link_rate=cfg.link_rate, framing=True)) as lab:
        runner = Rfc2544Runner(lab, cfg, dut, None)
        info = runner.setup()
        for i in range(repeat):
            t0 = time.monotonic()
            probes: List[Dict[str, object]] = []
            fps, _, _ = runner.search(size, probes)
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
    from nslab.cliutil import setup_logging
    setup_logging(ctx.obj, f"bench-search-{int(time.time())}")
    bench_search(dut, frame, repeat, trial, dut_cost, ctx.obj.results)
