"""``nslab topo``: topologies by hand (ready ones, YAML, Mininet custom files
with ``--custom``): check, list, draw and export them without root, build one
(``up``), and list the labs running on this machine (``ps``, also ``nslab ps``).
"""
from __future__ import annotations

import inspect
import json
import re
import textwrap
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import click

from ..errors import InputError
from ..model.limits import active
from ..model.multihost import parse_hosts
from ..model.naming import new_run_id
from ..model.topo import schema
from ..run.registry import topologies
from ..run.topoload import CUSTOM_HELP
from ..model.fields import LABEL_RE
from ..runtime.lab import Lab
from ..runtime.running import RunningLab, age_text, running_labs, same_topology
from ..safeio import printable
from .cliutil import echo, hosts_options, install_signals, limit_option, print_lab, setup_logging

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table

    from ..hosts.remote import MultiLab


@click.group()
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
    """List the ready topologies, each with its options and their defaults."""
    import shutil
    width = min(100, shutil.get_terminal_size((100, 24)).columns)
    for i, (name, fn) in enumerate(sorted(topologies().items())):
        summary, options = describe_topology(fn)
        if i:
            echo("")
        lines = textwrap.wrap(f"{name}: {summary}", width, subsequent_indent="  ")
        for opt, desc in options:
            lines += textwrap.wrap(desc, width, initial_indent=f"  {opt:<24} ",
                                   subsequent_indent=" " * 27)
        for line in lines:
            echo(line)
    echo("")
    echo("Give options after the name: nslab topo up single --k 3 --bw 100Mbit")


#: reStructuredText roles and literals a docstring uses, and what plain text shows.
_RST = [(re.compile(r":[a-z]+:`~?(?:[\w.]*\.)?([^`]+)`"), r"\1"), (re.compile(r"``([^`]+)``"), r"\1")]


def plain(text: str) -> str:
    """A docstring's reStructuredText as plain text (``x`` and :func:`a.b` read
    as x and b), its lines joined."""
    for pattern, repl in _RST:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def describe_topology(fn: Callable[..., Any]) -> Tuple[str, List[Tuple[str, str]]]:
    """A ready topology's first paragraph, and ``(--option, what it does
    (default: ...))`` for each of its parameters, from its signature and the
    ``Args:`` section of its docstring (Google style)."""
    doc = inspect.getdoc(fn) or ""
    paragraphs = doc.split("\n\n")
    summary = plain(paragraphs[0]) if paragraphs and paragraphs[0].strip() else ""
    args: Dict[str, str] = {}
    lines = doc.splitlines()
    if "Args:" in lines:
        current = None
        for line in lines[lines.index("Args:") + 1:]:
            if line.strip() and not line.startswith(" "):
                break  # the next section
            m = re.match(r"^ {4}(\w+)(?: \([^)]*\))?: (.*)$", line)
            if m:
                current = m.group(1)
                args[current] = m.group(2)
            elif current and line.strip():
                args[current] += " " + line.strip()
    options = []
    for pname, param in inspect.signature(fn).parameters.items():
        if pname.startswith("_") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = param.default
        desc = plain(args.get(pname, "")).rstrip(".") or "(not described)"
        opt = f"--{pname.replace('_', '-')}"
        if isinstance(default, bool):  # --x turns it on, --x false off
            desc += f" (on unless {opt} false)" if default else " (a flag)"
        else:
            number = isinstance(default, int) or re.search(r"\bint\b", str(param.annotation))
            opt += " N" if number else " VALUE"
            if default is not param.empty and default is not None:
                desc += f" (default: {default})"
        options.append((opt, desc))
    return summary, options


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


def kind_image_options(f: Any) -> Any:
    """An option per registered kind that names a container image
    (``--frr-image``), defaulting to the kind's own (:mod:`nslab.model.kinds`)."""
    from ..model.kinds import registered
    for kind in reversed(list(registered().values())):
        if kind.image is not None:
            f = click.option(kind.image.flag, f"{kind.name}_image", default=kind.image.default,
                             show_default=True,
                             help=f"Image of the nodes with {', '.join(kind.image.options)} "
                                  f"({kind.name}); its tag's version picks the config layout.")(f)
    return f


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
@kind_image_options
@click.option("--interface-names", default="keep", show_default=True, metavar="keep|eth",
              help="keep nslab's interface names, or rename to eth1, eth2... per node.")
@click.option("--no-mgmt", is_flag=True,
              help="No management network (network-mode: none): only the topology's links.")
@custom_option
@limit_option
@click.pass_context
def topo_export(ctx: click.Context, /, topology: str, fmt: str, output: Optional[str],
                name: Optional[str], image: str, interface_names: str,
                no_mgmt: bool, custom: Optional[str], **kind_images: str) -> None:
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
    images = {k[:-len("_image")]: v for k, v in kind_images.items() if k.endswith("_image")}
    if len(images) != len(kind_images):  # every other option has a parameter of its own
        extra = sorted(set(kind_images) - {f"{k}_image" for k in images})
        raise InputError(f"unexpected options: {', '.join(extra)}")
    text, messages = export_command(t, fmt, output, name=name, image=image, images=images,
                                    interface_names=interface_names, mgmt=not no_mgmt)
    for m in messages:
        echo(m, err=True)
    if text is not None:
        click.echo(text, nl=False)


@topo.command("up", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("topology")
@click.option("--cli", "with_cli", is_flag=True, help="Run the Mininet CLI on the lab.")
@click.option("--for", "hold", type=float, default=None,
              help="Keep it up this many seconds, then tear down (default: until Ctrl-C).")
@click.option("--no-ipv6", is_flag=True,
              help="No IPv6 addresses on host and switch links (routers keep them), so they send "
                   "no DAD, MLD or router solicitations, which a bridge floods to every port.")
@click.option("--name", default=None,
              help="Name this lab (default: the topology's name); `nslab topo ps` shows it.")
@click.option("--again", is_flag=True,
              help="Build it even if a lab of the same name is up already.")
@hosts_options
@custom_option
@limit_option
@click.pass_context
def topo_up(ctx: click.Context, topology: str, with_cli: bool, hold: Optional[float],
            no_ipv6: bool, name: Optional[str], again: bool, hosts: Optional[str],
            ssh_config: Optional[str], remote_nslab: Optional[str],
            custom: Optional[str]) -> None:
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
      nslab topo up pair --name second-pair

    A lab whose name (the topology's, or --name) is up already is refused:
    give this one --name NAME, or --again to build a second one anyway
    (`nslab topo ps` lists what is up).

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
    if name is not None:
        t = t.model_copy(update={"name": lab_name(name)})
    if not again:
        refuse_if_up(t.name, named=name is not None)
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
        from .checkcli import remember_checks
        if remember_checks(lab.run_id, topology):  # its checks, for `nslab check` with none named
            echo(f"checks: {printable(topology)} has checks: `nslab check {lab.run_id}` runs them",
                 err=True)
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


def lab_name(name: str) -> str:
    """``--name``'s value, or one line saying what a name may be."""
    if not LABEL_RE.fullmatch(name):
        raise InputError(f"--name {name!r}: use 1-120 printable ASCII characters")
    return name


def refuse_if_up(name: str, named: bool, labs: Optional[Sequence[RunningLab]] = None) -> None:
    """One line if a lab named ``name`` is running on this machine already
    (``named``: the name came from ``--name``), naming it and how to build
    this one anyway. Best effort: two labs started at the same instant both
    pass."""
    up = same_topology(name, labs)
    if not up:
        return
    which = "; ".join(f"{lab.label()}, pid {lab.pid}" for lab in up)
    what = f"a lab named {name!r}" if named else f"topology {name!r}"
    raise InputError(f"{what} is already up: {which}; give this one another name (--name "
                     "NAME) or build it again anyway (--again); `nslab topo ps` lists the "
                     "running labs")


# -- ps ---------------------------------------------------------------------------------
def ps_table(labs: Sequence[RunningLab], now: float) -> Table:
    """The running labs as a rich table (every name as plain text)."""
    from rich.table import Table
    from rich.text import Text
    t = Table(title=Text(f"{len(labs)} lab{'' if len(labs) == 1 else 's'} running"))
    for col in ("run", "topology", "nodes", "up", "pid", "host(s)"):
        t.add_column(col, justify="right" if col in ("nodes", "up", "pid") else "left")
    for lab in labs:
        age = lab.age(now)
        t.add_row(*(Text(printable(cell)) for cell in (
            lab.run, lab.topology, "?" if lab.nodes is None else str(lab.nodes),
            "?" if age is None else age_text(age), str(lab.pid), lab.where())))
    return t


@click.command("ps")
@click.option("--json", "as_json", is_flag=True,
              help="A JSON array instead: run, topology, nodes, created_unix_s, age_s, pid, "
                   "hosts, role (local, controller or part).")
def ps_cmd(as_json: bool) -> None:
    """List the labs running on this machine: run id, topology, nodes, age,
    pid and host(s). No root needed.

    Read from the labs' journals (/run/nslab/<run>.json) and the records of
    the labs across machines controlled from here; a lab counts while the
    process that built it lives. The run id is what `nslab watch RUN`,
    `nslab capture TARGET RUN` and `nslab clean --run RUN` take.
    """
    from rich.console import Console
    labs = running_labs()
    now = time.time()
    if as_json:
        click.echo(json.dumps([lab.to_json(now) for lab in labs], indent=1))
    elif not labs:
        echo("no lab is running on this host (start one: nslab topo up pair)")
    else:
        Console().print(ps_table(labs, now))


topo.add_command(ps_cmd)

