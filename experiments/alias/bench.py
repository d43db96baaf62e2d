"""``nslab bench aliases``: N aliases by one ``ip -batch`` vs one ``ip addr add`` each."""
from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

import click

from nslab.run.bench import save


def bench_aliases(n: int, repeat: int, results_root: str) -> Dict[str, object]:
    """N aliases by one ``ip -batch`` vs one ``ip addr add`` per alias, same run."""
    from rich.console import Console

    from nslab.runtime import caps
    from nslab.runtime.lab import Lab
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
    from nslab.cmdline.cliutil import setup_logging
    setup_logging(ctx.obj, f"bench-aliases-{int(time.time())}")
    bench_aliases(n, repeat, ctx.obj.results)


def _web_watcher(run_id: str):
    """``nslab watch RUN --web`` on a free port, with one page reading its
    event stream (as a browser would): ``(process, reader thread, events seen)``."""
    import urllib.request
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    proc = subprocess.Popen([nslab, "watch", run_id, "--web", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    m = re.search(r"http://[\d.]+:\d+/", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"nslab watch --web did not start: {line.strip()}")
    seen = [0]

    def read() -> None:
        try:
            with urllib.request.urlopen(m.group(0) + "events") as resp:
                for raw in resp:
                    if raw.startswith(b"data: "):
                        seen[0] += 1
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return proc, reader, seen


def bench_watch(n: int, duration: float, repeat: int, results_root: str) -> Dict[str, object]:
    """One alias-study point, measured ``repeat`` times with ``nslab watch --web``
    open (and a page reading it) and as many times without, interleaved, same lab."""

    from rich.console import Console

    from nslab.runtime import caps
    from nslab.runtime.lab import Lab
    from nslab.store.results import ResultStore
    from nslab.store.stats import difference, summarize

    from .config import AliasConfig
    from .runner import AliasRunner
    from .study import AliasStudy
    caps.require_root("nslab bench watch")
    console = Console()
    cfg = AliasConfig(aliases=[n], duration=duration, repeat=repeat)
    (topo,) = AliasStudy().labs(cfg).values()
    order = [w for _ in range(repeat) for w in random.sample([False, True], 2)]
    got: Dict[bool, List[float]] = {False: [], True: []}
    events = 0
    with tempfile.TemporaryDirectory() as tmp, Lab(topo) as lab:
        runner = AliasRunner(lab, cfg, ResultStore(path=tmp))
        runner.setup()
        try:
            for i, watched in enumerate(order):
                watcher = _web_watcher(lab.run_id) if watched else None
                try:
                    time.sleep(1.5 if watched else 0)  # the page is connected and sampling
                    m, _, summary = runner.measure({"n": n, "mode": "alias", "repeat": i})
                finally:
                    if watcher is not None:
                        watcher[0].terminate()
                        watcher[0].wait(timeout=10)
                        events += watcher[2][0]
                got[watched].append(m["receiver_bps"])
                console.print(f"[{i + 1}/{len(order)}] {'watched  ' if watched else 'unwatched'} "
                              f"{summary}")
        finally:
            runner.finish()
    plain, web = summarize(got[False]), summarize(got[True])
    diff = difference(got[True], got[False])
    spread = plain.max - plain.min
    ok = abs(diff.value) < spread if spread > 0 else diff.value == 0
    out = {"benchmark": "watch", "n": n, "duration": duration, "repeat": repeat,
           "unwatched_bps": got[False], "watched_bps": got[True], "events_received": events,
           "difference_bps": diff.value,
           "difference_ci": None if diff.ci is None else [diff.ci.low, diff.ci.high],
           "unwatched_range_bps": spread, "within_spread": ok}
    console.print(
        f"alias point N={n}, {duration:g} s, {repeat} repeats each, interleaved:\n"
        f"  without watch --web: median {plain.median / 1e6:.1f} Mbit/s, range "
        f"{plain.min / 1e6:.1f}-{plain.max / 1e6:.1f} ({spread / 1e6:.2f} Mbit/s)\n"
        f"  with watch --web and a page reading it ({events} events): median "
        f"{web.median / 1e6:.1f} Mbit/s, range {web.min / 1e6:.1f}-{web.max / 1e6:.1f}\n"
        f"  watched - unwatched: {diff.fmt(1e-6, 2, ' Mbit/s', sign=True)}; "
        f"{'less' if ok else 'NOT less'} than the unwatched repeats' own range")
    out["saved"] = save(results_root, "watch", out)
    return out


@click.command("watch")
@click.option("--n", "n", type=click.IntRange(1, 254), default=16, show_default=True,
              help="Aliases (one iperf2 client each).")
@click.option("--duration", type=click.FloatRange(2, 600), default=5.0, show_default=True)
@click.option("--repeat", type=click.IntRange(2, 50), default=4, show_default=True)
@click.pass_context
def watch_cmd(ctx: click.Context, n: int, duration: float, repeat: int) -> None:
    """An alias point with `nslab watch --web` open vs without, interleaved, same lab."""
    from nslab.cmdline.cliutil import setup_logging
    setup_logging(ctx.obj, f"bench-watch-{int(time.time())}")
    bench_watch(n, duration, repeat, ctx.obj.results)
