"""``nslab bench aliases``: N aliases by one ``ip -batch`` vs one ``ip addr add`` each."""
from __future__ import annotations

import statistics
import time
from typing import Dict

import click

from nslab.bench import save


def bench_aliases(n: int, repeat: int, results_root: str) -> Dict[str, object]:
    """N aliases by one ``ip -batch`` vs one ``ip addr add`` per alias, same run."""
    from rich.console import Console

    from nslab import caps
    from nslab.lab import Lab
    from nslab.topologies.alias import alias_pair

    from .model import alias_addresses
    from .runner import add_aliases
    caps.require_root("nslab bench aliases")
    addrs = alias_addresses("192.168.2.%d", n)
    batch, each = [], []
    with Lab(alias_pair()) as lab:
        srv = lab["srv"]
        for _ in range(repeat):
            batch.append(add_aliases(srv, "eth1", addrs))
            srv.run(["ip", "addr", "flush", "dev", "eth1", "label", "eth1:*"])
            t0 = time.monotonic()
            for i, a in enumerate(addrs, 1):
                srv.run(["ip", "addr", "add", f"{a}/16", "dev", "eth1", "label", f"eth1:{i}"])
            each.append(time.monotonic() - t0)
            srv.run(["ip", "addr", "flush", "dev", "eth1", "label", "eth1:*"])
    out = {"benchmark": "aliases", "n": n, "repeat": repeat, "batch_s": statistics.median(batch),
           "each_s": statistics.median(each), "ratio": statistics.median(each) / statistics.median(batch)}
    Console().print(f"{n} aliases: one ip -batch {out['batch_s']:.3f} s, one `ip addr add` each "
                    f"{out['each_s']:.3f} s: batch is {out['ratio']:.0f}x faster (median of {repeat})")
    out["saved"] = save(results_root, "aliases", out)
    return out



@click.command("aliases")
@click.option("--n", "n", type=int, default=254, show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.pass_context
def aliases_cmd(ctx: click.Context, n: int, repeat: int) -> None:
    """N aliases: one `ip -batch` vs one `ip addr add` each, same run."""
    from nslab.cliutil import setup_logging
    setup_logging(ctx.obj, f"bench-aliases-{int(time.time())}")
    bench_aliases(n, repeat, ctx.obj.results)
