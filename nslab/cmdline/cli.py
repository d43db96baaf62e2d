"""The ``nslab`` command line. Errors: one line, the log path, non-zero exit.

The core's commands live here; studies, topologies, OVS and FRR add theirs
through entry points (``nslab.commands``, ``nslab.studies``, ``nslab.bench``),
so this module imports none of them.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import platform
import re
import shlex
import sys
import time
from typing import Any, Dict, List, Optional

import click

from .. import __version__
from ..model.naming import check_run_id
from ..run.registry import commands, load_group
from ..runtime import caps
from ..runtime.caps import require_root
from ..runtime.clean import clean as do_clean
from ..runtime import lab as lab_mod
from .cliutil import RESULTS_ENV, Ctx, current_log, echo, hosts_options, terminal_safety
from .capturecli import capture_cmd
from ..errors import InputError, LabError
from .export import export_cmd
from .reproduce import reproduce_cmd
from .topocli import ps_cmd, topo
from .runcli import report, run_group
from ..safeio import make_dirs, printable

log = logging.getLogger("nslab")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nslab")
@click.option("--results", default=lambda: os.environ.get(RESULTS_ENV, "results"),
              show_default="results", help="Where results and logs go.")
@click.option("-v", "--verbose", count=True, help="More output (-vv: debug).")
@click.option("--cpu-first/--no-cpu-first", default=None,
              help="While a study measures on the host, its processes get the CPU first: "
              "a cpu cgroup of the run's own at 100 times an ordinary task's weight "
              "[default: on; also NSLAB_CPU_FIRST=0 or 1; docs/studies.md#the-cpu-first].")
@click.pass_context
def cli(ctx: click.Context, results: str, verbose: int, cpu_first: Optional[bool]) -> None:
    """nslab: a network-namespace lab that reproduces classic Linux networking studies.

    \b
    Start here:
      nslab doctor                      what this machine offers
      nslab topo up single --k 3 --cli  a switch with 3 hosts and the Mininet CLI
      nslab ps                          the labs running on this machine
      nslab run --list                  the studies, and their presets
      nslab reproduce --quick           every study, quickly, with a report
      nslab clean                       remove what a crashed run left behind
    """
    if cpu_first is not None:
        from ..runtime.cpufirst import FIRST_ENV
        os.environ[FIRST_ENV] = "1" if cpu_first else "0"  # and for the nslab commands it starts
    ctx.obj = Ctx(results, verbose)


# -- doctor -----------------------------------------------------------------------------
@cli.command()
def doctor() -> None:
    """Show what this machine offers and what the lab will use.

    Exits non-zero only if something required is missing.
    """
    from rich.console import Console
    from rich.table import Table

    from rich.markup import escape as markup

    def escape(text: object) -> str:
        """A tool's or the system's words as plain text: no rich markup, no
        control characters (a version string or /etc/os-release is not ours)."""
        return markup(printable(text))

    from ..runtime import caps, platforms
    found = caps.probe()
    vers = caps.versions()
    t = Table(title="nslab doctor", show_lines=False)
    t.add_column("capability")
    t.add_column("status")
    t.add_column("the lab will use / how to fix")
    order = ["root", "netns", "veth", "bridge", "htb", "tbf", "netem", "ecmp", "rps", "u32",
             "macvlan", "vlan", "vrf", "bond", "dummy"]
    order += [k for k in found if k not in order and not k.startswith("tool:")]  # the kinds'
    order += [k for k in found if k.startswith("tool:")]
    missing_required = []
    for key in order:
        c = found.get(key)
        if c is None:
            continue
        status = "[green]yes[/]" if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]no[/]")
        note = c.detail if c.ok or not c.fix else f"{c.detail} — {c.fix}"
        t.add_row(key, status, escape(note))
        if c.required and not c.ok:
            missing_required.append(c)
    for name, v in vers.items():
        t.add_row(f"version:{name}", "[green]yes[/]" if v else "[yellow]no[/]",
                  escape(v) if v else "not installed")
    t.add_row("version:python", "[green]yes[/]", platform.python_version())
    dist = platforms.distribution()
    t.add_row("distribution", "[green]yes[/]" if dist.known else "[yellow]unknown[/]",
              escape(str(dist)))
    console = Console()
    console.print(t)
    for problem in platforms.known_problems(dist, vers):
        console.print(f"[yellow]known problem[/]: {escape(problem)}")
    from ..traffic.noise import fitness, idle_jitter
    noise = idle_jitter()
    console.print(f"host noise: a 1 ms sleep wakes {noise['p50_us']:.0f} us late (median), "
                  f"{noise['p99_us']:.0f} us (p99), {noise['max_us']:.0f} us (max) over "
                  f"{noise['samples']:.0f} sleeps")
    for study, (ok, why) in fitness(noise, os.cpu_count() or 1).items():
        console.print(f"  fit for {study}: {'[green]yes[/]' if ok else '[red]no[/]'} "
                      f"({escape(why)})")
    from . import fitness as study_fitness
    for fit in study_fitness.rfc2544(found):  # by the study's own rules, per bed
        console.print(f"  fit for {fit.what}: {'[green]yes[/]' if fit.ok else '[red]no[/]'} "
                      f"({escape(fit.why)})")
    from ..traffic.interference import accounting_source
    console.print(f"host interference is accounted from {escape(accounting_source())}")
    if not found.get("root", None) or not found["root"].ok:
        console.print("Kernel features are probed only as root (they need a scratch namespace).")
    if missing_required:
        names = ", ".join(f"{c.name} ({c.fix})" for c in missing_required)
        raise InputError(f"required: {names}")


# -- watch ------------------------------------------------------------------------------
@cli.command("watch")
@click.argument("run", required=False)
@click.option("--interval", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--count", type=click.IntRange(1), default=None,
              help="Stop after this many refreshes (default: until Ctrl-C or the lab goes).")
@click.option("--web", is_flag=True,
              help="Serve a page with the topology picture and live rates on its links "
                   "(and /metrics for Prometheus).")
@click.option("--metrics", "metrics_only", is_flag=True,
              help="Serve /metrics alone (Prometheus or OpenMetrics text): per-interface "
                   "counters labelled lab, node, interface. See docs/metrics.md.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="The server's port (--web, --metrics; 0: any free one).")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="The server's address (--web, --metrics); another than 127.0.0.1 exposes "
                   "the lab's counters to the network.")
@click.option("--max-clients", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Pages served live at once (--web); one more is refused (503).")
def watch_cmd(run: Optional[str], interval: float, count: Optional[int], web: bool,
              metrics_only: bool, port: int, bind: str, max_clients: int) -> None:
    """Live per-link rates (bit/s, packets/s, drops) of a running lab.

    RUN is a lab's run id (`nslab topo ps` lists the running labs); with no
    RUN and exactly one lab up, that one. With --web, a local page shows the lab's
    picture, its links coloured and labelled with their live rates, and
    /metrics gives the counters to Prometheus; --metrics serves /metrics alone.
    One sampler reads the counters, whatever the number of pages and scrapers.
    Ctrl-C stops the server within a second.
    """
    try:
        if web or metrics_only:
            from ..traffic.webwatch import serve
            try:
                ipaddress.ip_address(bind)
            except ValueError:
                raise InputError(f"--bind {bind!r}: not an IP address") from None
            serve(run, interval, bind, port, max_clients, page=web)
        else:
            from ..traffic.watch import watch
            watch(run, interval, count)
    except KeyboardInterrupt:
        pass


# -- clean ------------------------------------------------------------------------------
@cli.command()
@click.option("--run", "run_id", default=None, help="Only this run id (e.g. nl3f2a).")
@click.option("--dry-run", is_flag=True, help="Show what would be removed.")
@click.option("--force", is_flag=True, help="Also remove runs whose process is still alive.")
@hosts_options
def clean(run_id: Optional[str], dry_run: bool, force: bool, hosts: Optional[str],
          ssh_config: Optional[str], remote_nslab: Optional[str]) -> None:
    """Remove what crashed runs left behind: only objects tagged with a run id.

    With --hosts, run the same clean on every host of a lab across machines."""
    if run_id:
        check_run_id(run_id)
    if hosts:
        from ..hosts.ssh import clean_hosts
        args = (["--run", run_id] if run_id else []) + (["--dry-run"] if dry_run else []) + \
               (["--force"] if force else [])
        failed = []
        for host, res in clean_hosts(hosts, args, ssh_config, remote_nslab).items():
            echo(f"{host}:")
            for ln in (res.stdout + res.stderr).strip().splitlines():
                echo(f"  {ln}")
            if not res.ok:
                failed.append(host)
        if failed:
            raise LabError(f"nslab clean failed on {', '.join(failed)}")
        return
    caps.require_root("nslab clean")
    report = do_clean(run_id, dry_run=dry_run, force=force)
    if not report:
        click.echo("nothing to clean")
        return
    for rid, items in report.items():
        echo(f"{'would remove' if dry_run else 'removed'} run {rid}:")
        for item in items:
            echo(f"  {item}")


# -- agent (a lab across hosts) ---------------------------------------------------------
@cli.group(hidden=True)
def agent() -> None:
    """What a lab across hosts runs on each host, over SSH (see docs/multi-host.md)."""


@agent.command("up")
def agent_up_cmd() -> None:
    """Build this host's part of a lab (JSON on stdin); keep it until `down` or end of input."""
    from ..hosts.agent import agent_up
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    caps.require_root("nslab agent")
    sys.exit(agent_up(sys.stdin, sys.stdout))


# -- vm ---------------------------------------------------------------------------------
@cli.group()
def vm() -> None:
    """Run nslab on a stock kernel in a QEMU guest (set up by `make test-kernel`)."""


@vm.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--cpus", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--memory", default="2G", show_default=True, help="Guest memory, e.g. 2G.")
@click.option("--timeout", type=click.FloatRange(10, 86400), default=1800, show_default=True,
              help="Seconds before the guest is killed.")
@click.option("--out", default=None, help="Where the console log goes (default: results/vm/<time>).")
@click.option("--kernel", "kernel_name", default=None, metavar="NAME",
              help="Which unpacked kernel: bookworm (Debian 12's), trixie (Debian 13's), or a "
                   "folder in .cache/kernel (default: this machine's release's).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def vm_run(ctx: click.Context, cpus: int, memory: str, timeout: float, out: Optional[str],
           kernel_name: Optional[str], command: tuple) -> None:
    """Run COMMAND (as root, in this directory) on the stock kernel, e.g.

    \b
      nslab vm run -- .venv/bin/nslab doctor
      nslab vm run -- .venv/bin/nslab topo up pair --delay 20ms --for 10

    The guest sees this machine's files read-only (results go to --out, shared
    read-write); its kernel has netem, the openvswitch module, VRF, 802.1Q...
    """

    from ..hosts import vm as vmmod
    if not re.fullmatch(r"[0-9]{1,5}[MG]", memory):
        raise InputError(f"--memory {memory!r}: use e.g. 512M or 2G")
    require_root("nslab vm run")
    vmmod.require()
    out = out or os.path.join(ctx.obj.results, "vm", time.strftime("%Y%m%d-%H%M%S"))
    make_dirs(out)
    kernel = vmmod.find_kernel(name=kernel_name)
    info = vmmod.describe(kernel)
    click.echo(f"booting {info['kernel']} ({info['accelerator']}); console: {out}", err=True)
    res = vmmod.run(vmmod.Guest("vm", " ".join(shlex.quote(c) for c in command), os.path.abspath(out),
                                cpus=cpus, memory=memory, timeout=timeout, kernel=kernel))
    click.echo(res.stdout, nl=False)
    if res.timed_out:
        raise LabError(f"the guest ran past --timeout {timeout:g} s and was killed "
                       f"(console: {out}/vm.console.log)")
    if res.returncode:
        raise SystemExit(res.returncode)


# -- bench ------------------------------------------------------------------------------
class BenchGroup(click.Group):
    """``nslab bench``: benchmarks registered under ``nslab.bench``."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(_benches()) + ["all"]

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name == "all":
            return bench_all_cmd
        return _benches().get(name)


def _benches() -> Dict[str, Any]:
    return load_group("nslab.bench")


@click.group(cls=BenchGroup)
def bench() -> None:
    """Benchmarks: ratios measured side by side in one run."""


@click.command("all")
@click.pass_context
def bench_all_cmd(ctx: click.Context) -> None:
    """Every benchmark with its defaults, one after the other."""
    for name, cmd in sorted(_benches().items()):
        click.echo(f"== bench {name}", err=True)
        ctx.invoke(cmd, **{p.name: p.get_default(ctx) for p in cmd.params if p.name})


cli.add_command(bench)
cli.add_command(run_group)
cli.add_command(report)
cli.add_command(export_cmd)
cli.add_command(reproduce_cmd)
cli.add_command(capture_cmd)
cli.add_command(topo)
cli.add_command(ps_cmd, "ps")


def _register_plugins() -> None:
    """Attach the commands plugins contribute (``nslab.commands``)."""
    for cmd in commands():
        if cmd.name not in cli.commands:
            cli.add_command(cmd)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: run the CLI, turn LabError into one line and exit code.

    The current directory may be a lab folder from anyone, and nslab runs as
    root: the ``nslab`` script starts with its own directory on ``sys.path``
    (never the current one), and any ``""``/``"."`` entry a caller's
    environment put there is dropped before plugins are imported. Whatever
    reaches the terminal has its control characters escaped: the error line,
    warnings and log records (:func:`~nslab.cmdline.cliutil.terminal_safety`).
    """
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    with terminal_safety():
        return _main(argv)


def _main(argv: Optional[List[str]]) -> int:
    try:
        _register_plugins()
        # without standalone mode, click returns ctx.exit(N)'s code (or what
        # the command returned) instead of raising it
        rv = cli.main(args=argv, prog_name="nslab", standalone_mode=False, obj=None)
        return rv if type(rv) is int else 0
    except click.exceptions.Abort:
        click.echo("nslab: interrupted", err=True)
        return 130
    except KeyboardInterrupt:
        n = len(lab_mod.TORN_DOWN)
        click.echo("nslab: interrupted" + ("" if not n else "; the lab was torn down" if n == 1
                                           else f"; its {n} labs were torn down"), err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except LabError as exc:
        logp = current_log()
        log.debug("error", exc_info=True)
        # one line, whatever the message quotes (a YAML key, a file name)
        click.echo(f"nslab: error: {printable(exc)}" + (f" (log: {printable(logp)})" if logp
                                                         else ""), err=True)
        return 2 if isinstance(exc, InputError) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
