"""The ``nslab`` command line. Errors: one line, the log path, non-zero exit.

The core's commands live here; studies, topologies, OVS and FRR add theirs
through entry points (``nslab.commands``, ``nslab.studies``, ``nslab.bench``),
so this module imports none of them.
"""
from __future__ import annotations

import inspect
import json
import ipaddress
import logging
import os
import platform
import re
import shlex
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

import click

from .. import __version__
from ..model.limits import active
from ..model.naming import check_run_id, new_run_id
from ..model.topo import schema
from ..run.registry import commands, load_group, topologies
from ..runtime import caps
from ..runtime.caps import require_root
from ..runtime.clean import clean as do_clean
from ..runtime import lab as lab_mod
from ..runtime.lab import Lab
from .cliutil import (RESULTS_ENV, Ctx, current_log, echo, install_signals, limit_option,
                      print_lab, setup_logging, terminal_safety)
from ..run.topoload import CUSTOM_HELP
from .capturecli import capture_cmd
from ..errors import InputError, LabError
from .export import export_cmd
from .reproduce import reproduce_cmd
from .runcli import report, run_group
from ..safeio import make_dirs, printable
from ..model.multihost import parse_hosts

if TYPE_CHECKING:  # pragma: no cover
    from ..hosts.remote import MultiLab

log = logging.getLogger("nslab")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nslab")
@click.option("--results", default=lambda: os.environ.get(RESULTS_ENV, "results"),
              show_default="results", help="Where results and logs go.")
@click.option("-v", "--verbose", count=True, help="More output (-vv: debug).")
@click.pass_context
def cli(ctx: click.Context, results: str, verbose: int) -> None:
    """nslab: a network-namespace lab that reproduces classic Linux networking studies.

    \b
    Start here:
      nslab doctor                      what this machine offers
      nslab topo up single --k 3 --cli  a switch with 3 hosts and the Mininet CLI
      nslab run --list                  the studies, and their presets
      nslab reproduce --quick           every study, quickly, with a report
      nslab clean                       remove what a crashed run left behind
    """
    ctx.obj = Ctx(results, verbose)


# -- doctor -----------------------------------------------------------------------------
@cli.command()
def doctor() -> None:
    """Show what this machine offers and what the lab will use.

    Exits non-zero only if something required is missing.
    """
    from rich.console import Console
    from rich.table import Table

    from rich.markup import escape

    from ..runtime import caps, platforms
    found = caps.probe()
    vers = caps.versions()
    t = Table(title="nslab doctor", show_lines=False)
    t.add_column("capability")
    t.add_column("status")
    t.add_column("the lab will use / how to fix")
    order = ["root", "netns", "veth", "bridge", "ovs", "ovs_kernel", "ovs_running", "htb", "tbf",
             "netem", "ecmp", "rps", "u32", "macvlan", "vlan", "vrf", "bond", "dummy", "frr"]
    order += [k for k in found if k.startswith("tool:")]
    missing_required = []
    for key in order:
        c = found.get(key)
        if c is None:
            continue
        status = "[green]yes[/]" if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]no[/]")
        note = c.detail if c.ok or not c.fix else f"{c.detail} — {c.fix}"
        t.add_row(key, status, note)
        if c.required and not c.ok:
            missing_required.append(c)
    for name, v in vers.items():
        t.add_row(f"version:{name}", "[green]yes[/]" if v else "[yellow]no[/]", v or "not installed")
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
        console.print(f"  fit for {study}: {'[green]yes[/]' if ok else '[red]no[/]'} ({why})")
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

    RUN is a lab's run id (`nslab clean --dry-run` lists them); with no RUN and
    exactly one lab up, that one. With --web, a local page shows the lab's
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


# -- topo -------------------------------------------------------------------------------
@cli.group()
def topo() -> None:
    """Build topologies by hand (ready ones, YAML, or Mininet custom files with --custom)."""


def custom_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--custom FILE``: TOPOLOGY is one of the ``topos`` of a Mininet custom
    file, which nslab runs (the one way a command runs a Python topology)."""
    return click.option("--custom", metavar="FILE.py", default=None, help=CUSTOM_HELP)(f)


def _custom_log(ctx: click.Context, custom: Optional[str]) -> None:
    """With ``--custom``, a log file first: a Python error in the file is one
    line, its traceback in the log."""
    if custom is not None:
        setup_logging(ctx.obj, f"topo-{time.strftime('%Y%m%d-%H%M%S')}")


@topo.command("schema")
def topo_schema() -> None:
    """Print the JSON Schema of the YAML topology format (for editors and CI).

    \b
    e.g. nslab topo schema > nslab-topology.schema.json
    then, in VS Code's YAML extension, a first line
    # yaml-language-server: $schema=nslab-topology.schema.json
    """

    click.echo(json.dumps(schema(), indent=2))


@topo.command("check", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True})
@click.argument("path")
@custom_option
@limit_option
@click.pass_context
def topo_check(ctx: click.Context, path: str, custom: Optional[str]) -> None:
    """Validate a YAML topology (or a ready one with its options) without
    building it, and show its size against the limits (no root needed).
    With --custom FILE, PATH is a topology of that Mininet custom file, and
    nslab runs the file to get it (as root under sudo).

    \b
      nslab topo check examples/two-hosts.yaml
      nslab topo check tree --depth 3 --fanout 4
      nslab topo check --custom topologies/basic.py nslab_pair
    """
    from ..run.topoload import extra_kwargs, load_topology
    _custom_log(ctx, custom)
    t = load_topology(path, extra_kwargs(ctx.args), custom)
    nodes, links, namespaces = t.size()
    echo(f"{path}: valid: {nodes} nodes, {links} links, {namespaces} namespaces "
         f"({', '.join(t.needs())})")
    echo(f"limits per lab: {active().describe(('nodes', 'links', 'namespaces'))} "
         "(raise with --limit KEY=N)")


@topo.command("list")
def topo_list() -> None:
    """List the ready topologies and their options."""
    for name, fn in sorted(topologies().items()):
        opts = " ".join(f"--{p.replace('_', '-')}" for p in inspect.signature(fn).parameters
                        if not p.startswith("_"))
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        echo(f"{name:10} {doc}")
        echo(f"{'':10} options: {opts}")


@topo.command("draw", context_settings={"ignore_unknown_options": True,
                                         "allow_extra_args": True})
@click.argument("topology")
@click.option("-o", "--output", required=True,
              help="The picture: FILE.svg, FILE.png, FILE.pdf or FILE.dot.")
@custom_option
@limit_option
@click.pass_context
def topo_draw(ctx: click.Context, topology: str, output: str, custom: Optional[str]) -> None:
    """Draw TOPOLOGY (a ready name or a .yaml file, with its options) with
    Graphviz: nodes by kind, links with interface names and shaping. No root
    needed; but with --custom FILE, TOPOLOGY is a topology of that Mininet
    custom file, and nslab runs the file (as root under sudo).

    \b
      nslab topo draw clos --spines 2 --servers 3 -o clos.svg
      nslab topo draw examples/two-hosts.yaml -o two.png
      nslab topo draw --custom topologies/basic.py nslab_single -o single.svg
    """
    from ..store.draw import draw
    from ..run.topoload import extra_kwargs, load_topology
    _custom_log(ctx, custom)
    t = load_topology(topology, extra_kwargs(ctx.args), custom)
    echo(draw(t, output))


@topo.command("export", context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True})
@click.argument("topology")
@click.option("--format", "fmt", default="containerlab", show_default=True,
              help="containerlab: a .clab.yml for containerlab (one host) or clabernetes "
                   "(Kubernetes).")
@click.option("-o", "--output", default=None, metavar="FILE.clab.yml",
              help="Write here, with the FRR routers' files in a folder beside it "
                   "(default: standard output, for a topology without FRR routers).")
@click.option("--name", default=None, help="The lab's name (default: the topology's).")
@click.option("--image", default="wbitt/network-multitool:alpine-extra", show_default=True,
              help="Image of the hosts, plain routers and switches (needs ip and tc).")
@click.option("--frr-image", default="quay.io/frrouting/frr:10.3.1", show_default=True,
              help="Image of the FRR routers; its tag's version picks the config layout.")
@click.option("--interface-names", default="keep", show_default=True, metavar="keep|eth",
              help="keep nslab's interface names, or rename to eth1, eth2... per node.")
@click.option("--no-mgmt", is_flag=True,
              help="No management network (network-mode: none): only the topology's links.")
@custom_option
@limit_option
@click.pass_context
def topo_export(ctx: click.Context, topology: str, fmt: str, output: Optional[str],
                name: Optional[str], image: str, frr_image: str, interface_names: str,
                no_mgmt: bool, custom: Optional[str]) -> None:
    """Write TOPOLOGY (a ready name with its options, or a .yaml file) for
    another tool. No root needed; but with --custom FILE, TOPOLOGY is a
    topology of that Mininet custom file, and nslab runs the file (as root
    under sudo). What carries over and what does not: docs/multi-host.md.

    \b
      nslab topo export clos --spines 2 --servers 4 -o clos.clab.yml
      nslab topo export examples/two-hosts.yaml > two-hosts.clab.yml
    """
    from ..runtime.clab import export_command
    from ..run.topoload import extra_kwargs, load_topology
    _custom_log(ctx, custom)
    t = load_topology(topology, extra_kwargs(ctx.args), custom)
    text, messages = export_command(t, fmt, output, name=name, image=image, frr_image=frr_image,
                                    interface_names=interface_names, mgmt=not no_mgmt)
    for m in messages:
        echo(m, err=True)
    if text is not None:
        click.echo(text, nl=False)


HOSTS_HELP = ("Build the lab across these hosts (ssh destinations; NAME=ADDRESS gives the "
              "address the others reach it at). See docs/multi-host.md.")


def hosts_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--hosts``, ``--ssh-config``, ``--remote-nslab``: a lab across machines."""
    f = click.option("--remote-nslab", default=None, metavar="PATH",
                     help="The nslab command on the hosts (default: the same path as here).")(f)
    f = click.option("--ssh-config", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="An ssh -F file (default: your own SSH configuration).")(f)
    return click.option("--hosts", default=None, metavar="A,B[,C]", help=HOSTS_HELP)(f)


@topo.command("up", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("topology")
@click.option("--cli", "with_cli", is_flag=True, help="Run the Mininet CLI on the lab.")
@click.option("--for", "hold", type=float, default=None,
              help="Keep it up this many seconds, then tear down (default: until Ctrl-C).")
@click.option("--no-ipv6", is_flag=True,
              help="No IPv6 addresses on host and switch links (routers keep them), so they send "
                   "no DAD, MLD or router solicitations, which a bridge floods to every port.")
@hosts_options
@custom_option
@limit_option
@click.pass_context
def topo_up(ctx: click.Context, topology: str, with_cli: bool, hold: Optional[float],
            no_ipv6: bool, hosts: Optional[str], ssh_config: Optional[str],
            remote_nslab: Optional[str], custom: Optional[str]) -> None:
    """Build TOPOLOGY, print its nodes and how to enter them, tear down on exit.

    \b
    TOPOLOGY is a ready name (see `nslab topo list`) or a .yaml file; with
    --custom FILE, a topology of that Mininet custom file, which nslab runs
    as root. Topology options follow:
      nslab topo up single --k 4 --switch ovs --bw 1000
      nslab topo up pair --bw 100Mbit --framing
      nslab topo up examples/two-hosts.yaml --cli
      nslab topo up --custom topologies/basic.py nslab_pair
      nslab topo up clos --spines 2 --servers 2 --hosts box1,box2
      nslab topo up single --k 1000 --no-ipv6

    
    A file may ask for changes to this machine's network; only the command
    line applies them: --uplink IFACE (a NIC as an OVS uplink), --force (an
    uplink that carries the default route or SSH), --allow-controller TARGET
    (an OpenFlow controller off the loopback).
    """
    from ..run.topoload import extra_kwargs, grants_from_options, load_topology
    opts = extra_kwargs(ctx.args)
    host_grants = grants_from_options(topology, opts)
    run_id = new_run_id()
    if custom is not None:  # a Python error in it: one line, the traceback in the log
        setup_logging(ctx.obj, run_id)
    t = load_topology(topology, opts, custom)
    if no_ipv6:
        t = t.without_ipv6()  # also `ipv6: false` in a topology file
    if custom is None:
        setup_logging(ctx.obj, run_id)
    install_signals()
    lab_cm: Union[Lab, MultiLab]
    if hosts:
        from ..hosts.remote import MultiLab
        if with_cli:
            raise InputError("--cli needs every node on this machine; with --hosts, enter a node "
                             "with the `ssh ... ip netns exec ...` line printed for it")
        lab_cm = MultiLab(t, parse_hosts(hosts), placement=t.placement or None, run_id=run_id,
                          ssh_config=ssh_config, remote_nslab=remote_nslab,
                          host_grants=host_grants)
        echo(f"building {t.name} across {', '.join(lab_cm.hosts)} "
             f"({len(lab_cm.tunnels)} links become VXLAN tunnels)", err=True)
    else:
        lab_cm = Lab(t, run_id=run_id, host_grants=host_grants)
    with lab_cm as lab:
        print_lab(lab)
        if with_cli:
            from .mncli import run_cli
            assert isinstance(lab, Lab)  # --cli with --hosts was refused above
            run_cli(lab)
        elif hold is not None:
            time.sleep(hold)
        else:
            click.echo("Lab is up. Press Ctrl-C to tear it down.")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                click.echo("\ntearing down...")
    click.echo(f"lab {run_id} torn down")


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
        from ..hosts.remote import clean_hosts
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
    from ..hosts.remote import agent_up
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
        cli.main(args=argv, prog_name="nslab", standalone_mode=False, obj=None)
        return 0
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
