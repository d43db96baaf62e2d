"""``nslab bench boot``: a guest's boot from the compressed kernel vs the
uncompressed PVH kernel inside it (:mod:`nslab.hosts.bootimage`), same run.

Each repeat boots a bare guest (its command: ``true``) of the same kernel
both ways, in alternating order (so that a host slowing down through the run
does not favour one), under TCG, with the virtual bed's instruction-counted
clock unless ``--no-icount``. Prints the median wall time of each and their
ratio, and the time to the kernel's first message, read from the console as
it is written.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from typing import Dict, List, Optional

import click

from ..hosts import vm
from ..run.bench import save

#: The kernel's first line on its console.
FIRST_LINE = "Linux version "


def boot_once(kernel: str, compressed: bool, qemu_opts: List[str], out: str) -> Dict[str, float]:
    """One bare guest to its power-off: wall seconds, and seconds to its
    kernel's first message (NaN when the console never showed it)."""
    g = vm.Guest("boot", "true", out, cpus=1, memory="1G", timeout=600.0, kernel=kernel,
                 kvm=False, cwd="/", qemu_opts=qemu_opts, compressed=compressed)
    first = float("nan")
    with vm.start(g) as running:
        while running.proc.poll() is None:
            if first != first:  # NaN: not seen yet
                try:
                    with open(running.console_path, errors="replace") as f:
                        if FIRST_LINE in f.read():
                            first = time.monotonic() - running.t0
                except OSError:
                    pass
            time.sleep(0.05)
        res = running.wait()
    if not res.ok:
        why = "timed out" if res.timed_out else f"exit {res.returncode}"
        raise click.ClickException(f"a guest of {kernel} did not boot ({why}); its console: "
                                   f"{running.console_path}")
    return {"wall_s": res.seconds, "first_message_s": first}


def bench_boot(kernel_name: Optional[str], repeat: int, shift: Optional[int],
               results_root: str) -> Dict[str, object]:
    """Boot ``repeat`` bare guests each way, alternating; print and save the medians."""
    from rich.console import Console
    from rich.table import Table
    vm.require()
    kernel = vm.find_kernel(name=kernel_name)
    image = vm.boot_image(kernel)
    if image == kernel:
        raise click.ClickException(f"{kernel} has no uncompressed PVH kernel to compare "
                                   "(see the log for why)")
    opts = ["-icount", f"shift={shift},sleep=off"] if shift is not None else []
    runs: Dict[str, List[Dict[str, float]]] = {"compressed": [], "pvh": []}
    with tempfile.TemporaryDirectory(prefix="nslab-bench-boot-") as out:
        for i in range(repeat):
            order = ["compressed", "pvh"] if i % 2 == 0 else ["pvh", "compressed"]
            for way in order:
                r = boot_once(kernel, way == "compressed", opts, out)
                runs[way].append(r)
                click.echo(f"[{i + 1}/{repeat}] {way}: {r['wall_s']:.1f} s, first message at "
                           f"{r['first_message_s']:.1f} s", err=True)

    def med(way: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[way])

    out_d: Dict[str, object] = {
        "benchmark": "boot", "kernel": vm.kernel_release(kernel), "repeat": repeat,
        "icount_shift": shift, "runs": runs,
        "compressed_s": med("compressed", "wall_s"), "pvh_s": med("pvh", "wall_s"),
        "compressed_first_s": med("compressed", "first_message_s"),
        "pvh_first_s": med("pvh", "first_message_s")}
    out_d["ratio"] = float(out_d["compressed_s"]) / float(out_d["pvh_s"])  # type: ignore[arg-type]
    t = Table(title=f"A bare guest of {out_d['kernel']} under TCG"
                    + (f", icount shift {shift}" if shift is not None else "")
                    + f": median of {repeat}, same run")
    for col in ("kernel booted", "to its first message (s)", "to power-off (s)"):
        t.add_column(col)
    t.add_row("vmlinuz (compressed)", f"{out_d['compressed_first_s']:.1f}",
              f"{out_d['compressed_s']:.1f}")
    t.add_row("vmlinux inside it (PVH)", f"{out_d['pvh_first_s']:.1f}", f"{out_d['pvh_s']:.1f}")
    Console().print(t)
    Console().print(f"the PVH boot is {out_d['ratio']:.2f}x as fast "
                    f"({float(out_d['compressed_s']) - float(out_d['pvh_s']):.1f} s less)")  # type: ignore[arg-type]
    out_d["saved"] = save(results_root, "boot", out_d)
    return out_d


@click.command("boot")
@click.option("--kernel", "kernel_name", default=None,
              help="A cached kernel by name (bookworm, trixie; default: this machine's release's).")
@click.option("--repeat", type=click.IntRange(1, 20), default=3, show_default=True)
@click.option("--icount-shift", "shift", type=click.IntRange(0, 10), default=3, show_default=True,
              help="The virtual bed's clock (icount shift); 0 is a valid shift, --no-icount none.")
@click.option("--no-icount", is_flag=True, help="Boot without an instruction-counted clock.")
@click.pass_context
def boot_cmd(ctx: click.Context, kernel_name: Optional[str], repeat: int, shift: int,
             no_icount: bool) -> None:
    """A guest's boot: compressed kernel vs the PVH kernel inside it, same run."""
    from .cliutil import setup_logging
    setup_logging(ctx.obj, f"bench-boot-{int(time.time())}")
    bench_boot(kernel_name, repeat, None if no_icount else shift, ctx.obj.results)
