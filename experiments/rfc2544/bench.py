"""``nslab bench generator``: the RFC 2544 generator's ceiling vs iperf2 and line rates."""
from __future__ import annotations

import time
from typing import Dict, List

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
