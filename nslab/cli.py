"""The ``nslab`` command line. Errors: one line, the log path, non-zero exit."""
from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import click

from . import __version__
from .errors import InputError, LabError

log = logging.getLogger("nslab")
RESULTS_ENV = "NSLAB_RESULTS"


class _Ctx:
    def __init__(self, results: str, verbose: int) -> None:
        self.results = results
        self.verbose = verbose
        self.log_path: Optional[str] = None


def setup_logging(ctx: _Ctx, run_id: str) -> str:
    """Log everything to ``<results>/logs/<run>.log``; INFO (or DEBUG with -v) to stderr."""
    log_dir = os.path.join(ctx.results, "logs")
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, f"{run_id}.log")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    fh = logging.FileHandler(path)
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(fh)
    sh = logging.StreamHandler(sys.stderr)
    sh.setLevel(logging.DEBUG if ctx.verbose > 1 else logging.INFO if ctx.verbose else logging.WARNING)
    sh.setFormatter(logging.Formatter("nslab: %(message)s"))
    root.addHandler(sh)
    ctx.log_path = path
    return path


def _sigterm(signum, frame):  # noqa: ANN001
    raise KeyboardInterrupt


def install_signals() -> None:
    """SIGTERM and SIGHUP (terminal closed) end a command like Ctrl-C: through teardown."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _sigterm)


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
      nslab reproduce --quick           the three studies, quickly, with a report
      nslab clean                       remove what a crashed run left behind
    """
    ctx.obj = _Ctx(results, verbose)


# -- doctor -----------------------------------------------------------------------------
@cli.command()
def doctor() -> None:
    """Show what this machine offers and what the lab will use.

    Exits non-zero only if something required is missing.
    """
    from rich.console import Console
    from rich.table import Table

    from . import caps
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
    console = Console()
    console.print(t)
    if not found.get("root", None) or not found["root"].ok:
        console.print("Kernel features are probed only as root (they need a scratch namespace).")
    if missing_required:
        names = ", ".join(f"{c.name} ({c.fix})" for c in missing_required)
        raise InputError(f"required: {names}")


# -- topo -------------------------------------------------------------------------------
def _extra_kwargs(args: List[str]) -> Dict[str, Any]:
    """Turn ``--k 4 --switch ovs --framing`` into ``{"k": "4", "switch": "ovs", "framing": True}``."""
    out: Dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise InputError(f"unexpected argument {a!r}")
        key = a[2:].replace("-", "_")
        if "=" in key:
            key, val = key.split("=", 1)
            out[key] = val
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[key] = args[i + 1]
            i += 1
        else:
            out[key] = True
        i += 1
    return out


def _coerce(fn: Callable, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    sig = inspect.signature(fn)
    params = sig.parameters
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    out = {}
    for k, v in kwargs.items():
        if k not in params and not accepts_any:
            known = ", ".join("--" + p.replace("_", "-") for p in params
                              if params[p].kind != params[p].VAR_KEYWORD)
            raise InputError(f"unknown option --{k.replace('_', '-')} for this topology "
                             f"(options: {known or 'none'})")
        default = params[k].default if k in params else None
        if isinstance(default, bool) and isinstance(v, str):
            v = v.lower() in ("1", "true", "yes", "on")
        elif isinstance(default, int) and not isinstance(default, bool) and isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                raise InputError(f"--{k}: expected an integer, got {v!r}") from None
        out[k] = v
    return out


def load_topology(spec: str, options: Dict[str, Any]):
    """A topology from a registered name, a YAML file or a Mininet ``--custom`` Python file."""
    from .topo import Topology
    if spec.endswith((".yaml", ".yml")):
        if options:
            raise InputError("a YAML topology takes no options (put them in the file)")
        return Topology.from_yaml(spec)
    if spec.endswith(".py") or ".py:" in spec:
        return _load_custom(spec, options)
    from nslab import topologies
    fn = topologies.get(spec)
    return fn(**_coerce(fn, options))


def _load_custom(spec: str, options: Dict[str, Any]):
    """``file.py[:name]`` with a Mininet-style ``topos`` dict."""
    import importlib.util

    from .topo import Topology
    path, _, name = spec.partition(":")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    mod_spec = importlib.util.spec_from_file_location("nslab_custom_topo", path)
    mod = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
    try:
        mod_spec.loader.exec_module(mod)  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - a user's file
        raise InputError(f"{path}: cannot load: {type(exc).__name__}: {exc}") from None
    topos = getattr(mod, "topos", {})
    if not topos:
        raise InputError(f"{path}: defines no 'topos' dict (as Mininet's --custom files do)")
    name = name or next(iter(topos))
    if name not in topos:
        raise InputError(f"{path}: no topology {name!r} (has: {', '.join(topos)})")
    switch = options.pop("switch", "bridge")
    builder = topos[name]
    try:
        topo = builder(**options)
    except TypeError as exc:
        raise InputError(f"{path}:{name}: {exc}") from None
    return Topology.from_mininet(topo, name=name, switch_type=switch)


@cli.group()
def topo() -> None:
    """Build topologies by hand (ready ones, YAML or Mininet custom files)."""


@topo.command("schema")
def topo_schema() -> None:
    """Print the JSON Schema of the YAML topology format (for editors and CI).

    \b
    e.g. nslab topo schema > nslab-topology.schema.json
    then, in VS Code's YAML extension, a first line
    # yaml-language-server: $schema=nslab-topology.schema.json
    """
    import json

    from .topo import schema
    click.echo(json.dumps(schema(), indent=2))


@topo.command("check")
@click.argument("path")
def topo_check(path: str) -> None:
    """Validate a YAML topology without building it (no root needed)."""
    from .topo import Topology
    t = Topology.from_yaml(path)
    click.echo(f"{path}: valid: {len(t.nodes)} nodes, {len(t.links)} links "
               f"({', '.join(t.needs())})")


@topo.command("list")
def topo_list() -> None:
    """List the ready topologies and their options."""
    from nslab import topologies
    topologies._load_optional()
    for name, fn in sorted(topologies.REGISTRY.items()):
        opts = " ".join(f"--{p.replace('_', '-')}" for p in inspect.signature(fn).parameters
                        if not p.startswith("_"))
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        click.echo(f"{name:10} {doc}\n{'':10} options: {opts}")


@topo.command("up", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("topology")
@click.option("--cli", "with_cli", is_flag=True, help="Run the Mininet CLI on the lab.")
@click.option("--for", "hold", type=float, default=None,
              help="Keep it up this many seconds, then tear down (default: until Ctrl-C).")
@click.pass_context
def topo_up(ctx: click.Context, topology: str, with_cli: bool, hold: Optional[float]) -> None:
    """Build TOPOLOGY, print its nodes and how to enter them, tear down on exit.

    \b
    TOPOLOGY is a ready name (see `nslab topo list`), a .yaml file, or a
    Mininet custom file (file.py or file.py:name). Topology options follow:
      nslab topo up single --k 4 --switch ovs --bw 1000
      nslab topo up pair --bw 100Mbit --framing
      nslab topo up examples/two-hosts.yaml --cli
    """
    from .lab import Lab
    from .naming import new_run_id
    opts = _extra_kwargs(ctx.args)
    t = load_topology(topology, opts)
    run_id = new_run_id()
    setup_logging(ctx.obj, run_id)
    install_signals()
    with Lab(t, run_id=run_id) as lab:
        _print_lab(lab)
        if with_cli:
            from .mncli import run_cli
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


def _print_lab(lab) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"lab {lab.run_id}: {lab.topology.name} (built in {lab.build_seconds:.2f} s)")
    for col in ("node", "kind", "interfaces", "enter with"):
        t.add_column(col)
    for row in lab.describe():
        t.add_row(*row)
    Console().print(t)


# -- clean ------------------------------------------------------------------------------
@cli.command()
@click.option("--run", "run_id", default=None, help="Only this run id (e.g. nl3f2a).")
@click.option("--dry-run", is_flag=True, help="Show what would be removed.")
@click.option("--force", is_flag=True, help="Also remove runs whose process is still alive.")
def clean(run_id: Optional[str], dry_run: bool, force: bool) -> None:
    """Remove what crashed runs left behind: only objects tagged with a run id."""
    from . import caps
    from .clean import clean as do_clean
    from .naming import check_run_id
    if run_id:
        check_run_id(run_id)
    caps.require_root("nslab clean")
    report = do_clean(run_id, dry_run=dry_run, force=force)
    if not report:
        click.echo("nothing to clean")
        return
    for rid, items in report.items():
        click.echo(f"{'would remove' if dry_run else 'removed'} run {rid}:")
        for item in items:
            click.echo(f"  {item}")


# -- demo -------------------------------------------------------------------------------
@cli.command()
@click.option("--switch", type=click.Choice(["bridge", "ovs"]), default="bridge", show_default=True)
@click.option("--bw", default="1Gbit", show_default=True, help="Link rate.")
@click.option("--time", "duration", type=float, default=3, show_default=True)
@click.pass_context
def demo(ctx: click.Context, switch: str, bw: str, duration: float) -> None:
    """Two hosts on a switch: ping, then a shaped iperf2 TCP test."""
    from .iperf import run_client, start_server
    from .lab import Lab
    from .naming import new_run_id
    from .shaping import format_rate
    from .topologies import single
    t = single(k=2, switch=switch, bw=bw)
    run_id = new_run_id()
    setup_logging(ctx.obj, run_id)
    install_signals()
    with Lab(t, run_id=run_id) as lab:
        _print_lab(lab)
        h1, h2 = lab["h1"], lab["h2"]
        ping = h1.run(["ping", "-c", "3", "-i", "0.2", h2.ip])
        click.echo(ping.stdout.strip().splitlines()[-1])
        start_server(h2)
        _wait_listen(h2)
        rep = run_client(h1, h2.ip, time=duration)
        click.echo(f"iperf2 TCP h1 -> h2 over a {format_rate(t.links[0].shaping.rate)} "
                   f"{switch} link: {format_rate(rep.total_bps)}")


def _wait_listen(node, port: int = 5001, timeout: float = 5.0) -> None:
    """Wait until something listens on ``port`` in ``node``."""
    from .iperf import wait_listening
    wait_listening(node, port, timeout)


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
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def vm_run(ctx: click.Context, cpus: int, memory: str, timeout: float, out: Optional[str],
           command: tuple) -> None:
    """Run COMMAND (as root, in this directory) on the stock kernel, e.g.

    \b
      nslab vm run -- .venv/bin/nslab doctor
      nslab vm run -- .venv/bin/nslab topo up pair --delay 20ms --for 10

    The guest sees this machine's files read-only (results go to --out, shared
    read-write); its kernel has netem, the openvswitch module, VRF, 802.1Q...
    """
    import re
    import shlex

    from . import vm as vmmod
    from .caps import require_root
    if not re.fullmatch(r"[0-9]{1,5}[MG]", memory):
        raise InputError(f"--memory {memory!r}: use e.g. 512M or 2G")
    require_root("nslab vm run")
    vmmod.require()
    out = out or os.path.join(ctx.obj.results, "vm", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    info = vmmod.describe()
    click.echo(f"booting {info['kernel']} ({info['accelerator']}); console: {out}", err=True)
    res = vmmod.run(vmmod.Guest("vm", " ".join(shlex.quote(c) for c in command), os.path.abspath(out),
                                cpus=cpus, memory=memory, timeout=timeout))
    click.echo(res.stdout, nl=False)
    if res.timed_out:
        raise LabError(f"the guest ran past --timeout {timeout:g} s and was killed "
                       f"(console: {out}/vm.console.log)")
    if res.returncode:
        raise SystemExit(res.returncode)


# -- bench ------------------------------------------------------------------------------
@cli.group()
def bench() -> None:
    """Benchmarks: ratios measured side by side in one run."""


@bench.command("build")
@click.option("--sizes", default="2,8,32,64", show_default=True, help="Host counts k.")
@click.option("--switch", type=click.Choice(["bridge", "ovs"]), default="bridge", show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--no-mininet", is_flag=True, help="Skip plain Mininet.")
@click.pass_context
def bench_build(ctx: click.Context, sizes: str, switch: str, repeat: int, no_mininet: bool) -> None:
    """Build+teardown time of `single,k` for nslab vs plain Mininet (`mn --test none`)."""
    from .bench import bench_build as run_bench
    ks = _int_list(sizes, "--sizes")
    setup_logging(ctx.obj, f"bench-build-{int(time.time())}")
    run_bench(ks, switch, repeat, not no_mininet, ctx.obj.results)


@bench.command("clos")
@click.option("--shapes", default="2x2,4x8", show_default=True, help="SPINESxSERVERS list.")
@click.option("--repeat", type=int, default=3, show_default=True)
@click.pass_context
def bench_clos_cmd(ctx: click.Context, shapes: str, repeat: int) -> None:
    """Time from FRR start to ECMP routes installed everywhere, per clos size."""
    from .bench import bench_clos
    parsed = []
    for item in shapes.split(","):
        try:
            s, n = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise InputError(f"--shapes: {item!r} is not SPINESxSERVERS (e.g. 2x2)") from None
        parsed.append((s, n))
    setup_logging(ctx.obj, f"bench-clos-{int(time.time())}")
    bench_clos(parsed, repeat, ctx.obj.results)


@bench.command("aliases")
@click.option("--n", "n", type=int, default=254, show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.pass_context
def bench_aliases_cmd(ctx: click.Context, n: int, repeat: int) -> None:
    """N aliases in one ip -batch vs one ip addr add each."""
    from .bench import bench_aliases
    setup_logging(ctx.obj, f"bench-aliases-{int(time.time())}")
    bench_aliases(n, repeat, ctx.obj.results)


@bench.command("generator")
@click.option("--sizes", default="64,512,1518", show_default=True)
@click.pass_context
def bench_generator_cmd(ctx: click.Context, sizes: str) -> None:
    """The RFC 2544 generator's ceiling vs iperf2 UDP and line rates."""
    from .bench import bench_generator
    setup_logging(ctx.obj, f"bench-generator-{int(time.time())}")
    bench_generator(_int_list(sizes, "--sizes"), ctx.obj.results)


@bench.command("dataplane")
@click.option("--seconds", type=float, default=3, show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.pass_context
def bench_dataplane_cmd(ctx: click.Context, seconds: float, repeat: int) -> None:
    """TCP through the lab's pair vs two bare namespaces on one veth (the lab's overhead)."""
    from .bench import bench_dataplane
    setup_logging(ctx.obj, f"bench-dataplane-{int(time.time())}")
    bench_dataplane(seconds, repeat, ctx.obj.results)


@bench.command("all")
@click.pass_context
def bench_all_cmd(ctx: click.Context) -> None:
    """Every benchmark, one after the other, each side by side in itself."""
    from . import bench as b
    setup_logging(ctx.obj, f"bench-all-{int(time.time())}")
    b.bench_build([2, 8, 32, 64], "bridge", 3, True, ctx.obj.results)
    b.bench_aliases(254, 3, ctx.obj.results)
    b.bench_clos([(2, 2), (4, 8)], 3, ctx.obj.results)
    b.bench_generator([64, 512, 1518], ctx.obj.results)
    b.bench_dataplane(3, 3, ctx.obj.results)


def _int_list(text: str, what: str) -> List[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise InputError(f"{what}: empty list")
    return vals


#: Modules that add commands to the CLI (each has ``register(cli)``).
PLUGINS: List[str] = ["nslab.experiments.cli", "nslab.reproduce", "nslab.ovs.cli"]


def _register_plugins() -> None:
    """Attach the study commands that live in their own modules."""
    import importlib
    for mod in PLUGINS:
        importlib.import_module(mod).register(cli)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: run the CLI, turn LabError into one line and exit code."""
    _register_plugins()
    try:
        cli.main(args=argv, prog_name="nslab", standalone_mode=False, obj=None)
        return 0
    except click.exceptions.Abort:
        click.echo("nslab: interrupted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("nslab: interrupted; the lab was torn down", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except LabError as exc:
        logp = _current_log()
        log.debug("error", exc_info=True)
        click.echo(f"nslab: error: {exc}" + (f" (log: {logp})" if logp else ""), err=True)
        return 2 if isinstance(exc, InputError) else 1


def _current_log() -> Optional[str]:
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
