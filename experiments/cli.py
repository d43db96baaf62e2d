"""``nslab run <study>``, ``nslab report`` and the alias study's two-box commands."""
from __future__ import annotations

import os
import signal
import sys
from typing import List, Optional

import click

from nslab.errors import InputError


def _ints(text: str, what: str) -> List[int]:
    from nslab.cli import _int_list
    return _int_list(text, what)


def _start(ctx: click.Context):
    from nslab.cli import install_signals, setup_logging
    from nslab.naming import new_run_id
    run_id = new_run_id()
    setup_logging(ctx.obj, run_id)
    install_signals()
    return run_id


def _run_study(ctx: click.Context, study: str, fn, cfg, out: Optional[str],
               resume: Optional[str], report: str, plot: str, head: Optional[str] = None) -> None:
    """Validate, run ``fn`` with logging and signals set up, keep what was measured on
    Ctrl-C (and say how to resume), then print where the results are."""
    if not resume:
        cfg.validate()
    run_id = _start(ctx)
    root = out or ctx.obj.results
    store_dir = resume or os.path.join(root, study, run_id)
    try:
        path = fn(cfg, root, run_id=run_id, resume=resume)
    except KeyboardInterrupt:
        if os.path.isdir(store_dir):
            click.echo(f"nslab: interrupted; measured points are kept in {store_dir}; resume with "
                       f"`nslab run {study} --resume {store_dir}`", err=True)
        raise
    click.echo(f"results: {path}")
    text = open(os.path.join(path, head or report)).read()
    click.echo(text.split("## Published")[0])
    click.echo(f"report: {os.path.join(path, report)}; plot: {os.path.join(path, plot)}")


@click.group("run")
def run_group() -> None:
    """Run a study: alias, ecmp, rfc2544."""


@run_group.command("alias")
@click.option("--aliases", default=None, help="N values (default: the posts' 1,2,4,...,254).")
@click.option("--duration", type=float, default=10, show_default=True, help="Seconds per point.")
@click.option("--repeat", type=int, default=3, show_default=True, help="Repeats (order shuffled).")
@click.option("--rate", default="1Gbit", show_default=True, help="Link rate ('none' = unshaped).")
@click.option("--framing", is_flag=True, help="Count Ethernet framing: TCP tops out near GbE's 941.")
@click.option("--switch", type=click.Choice(["none", "bridge", "ovs"]), default="none",
              show_default=True, help="One veth, or through a Linux bridge / OVS.")
@click.option("--mss", type=int, default=None, help="TCP MSS (iperf -M), e.g. 1448 as in post 2.")
@click.option("--nodelay", is_flag=True, help="TCP_NODELAY (iperf -N).")
@click.option("--cc", default=None, help="Congestion control (iperf -Z), e.g. bbr or cubic.")
@click.option("--variants", default=None,
              help="alias (one client per alias, as the posts) and/or parallel (-P N to one "
                   "address, the control). Default: alias; --quick: alias,parallel.")
@click.option("--uplink", default=None,
              help="Two-box mode: the client behind OVS with this NIC as uplink; the server is "
                   "the other box running `nslab alias serve`.")
@click.option("--force", is_flag=True, help="Allow the NIC of the default route or SSH session.")
@click.option("--quick", is_flag=True, help="N = 1, 16, 254; one repeat; 3 s per point.")
@click.option("--out", default=None, help="Results root (default: --results).")
@click.option("--resume", default=None, help="Continue an interrupted run directory.")
@click.pass_context
def run_alias(ctx, aliases, duration, repeat, rate, framing, switch, mss, nodelay, cc, variants,
              uplink, force, quick, out, resume) -> None:
    """Throughput vs number of IP aliases (seeds 000, 001, 003)."""
    from nslab.experiments import alias
    cfg = alias.AliasConfig(
        aliases=_ints(aliases, "--aliases") if aliases else
        (list(alias.QUICK_ALIASES) if quick else list(alias.POST_ALIASES)),
        duration=3 if quick and duration == 10 else duration,
        repeat=1 if quick and repeat == 3 else repeat,
        rate=rate, framing=framing, switch=switch, mss=mss, nodelay=nodelay, cc=cc,
        uplink=uplink, force=force,
        modes=tuple(v.strip() for v in (variants or ("alias,parallel" if quick else "alias"))
                    .split(",") if v.strip()))
    _run_study(ctx, "alias", alias.run, cfg, out, resume, "comparison.md", "alias.png",
               head="table.md")


@run_group.command("ecmp")
@click.option("--policy", "policies", default="0,1", show_default=True,
              help="fib_multipath_hash_policy values (0 L3, 1 L4, 2 L3 inner, 3 custom).")
@click.option("--trials", type=int, default=10, show_default=True, help="Trials per policy.")
@click.option("--streams", type=int, default=3, show_default=True, help="iperf -P streams.")
@click.option("--duration", type=float, default=10, show_default=True, help="Seconds per trial.")
@click.option("--spines", type=int, default=2, show_default=True)
@click.option("--link-rate", default="1Gbit", show_default=True, help="Rate of every fabric link.")
@click.option("--framing", is_flag=True, help="Count Ethernet framing on the links.")
@click.option("--quick", is_flag=True, help="3 trials per policy, 3 s each.")
@click.option("--out", default=None, help="Results root (default: --results).")
@click.option("--resume", default=None, help="Continue an interrupted run directory.")
@click.pass_context
def run_ecmp(ctx, policies, trials, streams, duration, spines, link_rate, framing, quick, out,
             resume) -> None:
    """L3 vs L4 ECMP hashing over a BGP-unnumbered clos (seed 002)."""
    from nslab.experiments import ecmp
    cfg = ecmp.EcmpConfig(policies=_ints(policies, "--policy"),
                          trials=3 if quick and trials == 10 else trials, streams=streams,
                          duration=3 if quick and duration == 10 else duration, spines=spines,
                          link_rate=link_rate, framing=framing)
    if not resume:
        cfg.validate()
    click.echo(f"the hash policy is set in {ecmp.SENDER}'s namespace: the sender is the only "
               "node that chooses between equal-cost paths here", err=True)
    _run_study(ctx, "ecmp", ecmp.run, cfg, out, resume, "report.md", "ecmp.png")


@run_group.command("rfc2544")
@click.option("--dut", "duts", default="bridge,router", show_default=True,
              help="DUTs: bridge, router, ovs.")
@click.option("--frame-sizes", default="64,128,256,512,1024,1280,1518", show_default=True)
@click.option("--link-rate", default="100Mbit", show_default=True,
              help="Rate of both links, framing counted (100Mbit as the paper, 1Gbit, ...).")
@click.option("--tests", default="throughput,latency,loss", show_default=True,
              help="Any of throughput, latency, loss, back-to-back.")
@click.option("--trial", type=float, default=2.0, show_default=True, help="Seconds per trial.")
@click.option("--loss-tolerance", type=float, default=0.0, show_default=True, help="Percent.")
@click.option("--resolution", type=float, default=0.02, show_default=True,
              help="Throughput search stops within this fraction of line rate; back-to-back "
                   "within this fraction of its bracket.")
@click.option("--repeat", type=int, default=1, show_default=True)
@click.option("--b2b-repeat", type=int, default=3, show_default=True,
              help="Back-to-back searches per frame size (RFC 2544 asks for 50); --quick: 1.")
@click.option("--dut-cost", type=int, default=None,
              help="u32 filters on the DUT's ingress to emulate a slower CPU (default 700, "
                   "calibrated here to put the 64-byte knee near the paper's; 0 = bare veth).")
@click.option("--quick", is_flag=True, help="bridge and router, 64 and 1518 bytes, short trials.")
@click.option("--out", default=None)
@click.option("--resume", default=None)
@click.pass_context
def run_rfc2544(ctx, duts, frame_sizes, link_rate, tests, trial, loss_tolerance, resolution,
                repeat, b2b_repeat, dut_cost, quick, out, resume) -> None:
    """RFC 2544 of a Linux bridge vs a Linux router (and OVS) as DUT (seed 004)."""
    from nslab.experiments import rfc2544 as r
    cfg = r.Rfc2544Config(
        duts=[d.strip() for d in duts.split(",") if d.strip()],
        frame_sizes=_ints(frame_sizes, "--frame-sizes"), link_rate=link_rate,
        tests=[t.strip() for t in tests.split(",") if t.strip()], trial=trial,
        loss_tolerance=loss_tolerance, resolution=resolution, repeat=repeat,
        b2b_repeat=b2b_repeat, dut_cost=r.DEFAULT_DUT_COST if dut_cost is None else dut_cost)
    if quick:
        cfg.frame_sizes = [64, 1518] if frame_sizes == "64,128,256,512,1024,1280,1518" else cfg.frame_sizes
        cfg.trial = 0.5 if trial == 2.0 else trial
        cfg.warmup = 0.2
        cfg.resolution = 0.05 if resolution == 0.02 else resolution
        cfg.quick_loads = True
        cfg.b2b_repeat = 1 if b2b_repeat == 3 else b2b_repeat
    _run_study(ctx, "rfc2544", r.run, cfg, out, resume, "report.md", "rfc2544.png")


@click.group("rfc2544")
def rfc2544_group() -> None:
    """RFC 2544 helpers."""


@rfc2544_group.command("theory")
@click.option("--link-rate", default="100Mbit", show_default=True)
@click.option("--frame-sizes", default="64,128,256,512,1024,1280,1518", show_default=True)
def rfc2544_theory(link_rate: str, frame_sizes: str) -> None:
    """The theoretical maximum frame rate per frame size (preamble, gap and FCS counted)."""
    from nslab.experiments.rfc2544 import theory_table
    from nslab.shaping import parse_rate
    rate = parse_rate(link_rate)
    sizes = _ints(frame_sizes, "--frame-sizes")
    for s in sizes:
        if s < 64:
            raise InputError(f"frame size {s} is under Ethernet's minimum of 64 bytes")
    click.echo(f"{'frame (bytes)':>14} {'max frames/s':>14} {'Mbit/s of frames':>17}")
    for size, fps, bps in theory_table(rate, sizes):
        click.echo(f"{size:>14} {fps:>14,.0f} {bps / 1e6:>17.2f}")


@click.command("vtysh", context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.option("--run", "run_id", default=None, help="Run id (default: the only live run with NODE).")
@click.option("-c", "commands", multiple=True, help="Command(s) to run; none = interactive.")
def vtysh(node: str, run_id: Optional[str], commands) -> None:
    """FRR's vtysh on NODE of a running lab, e.g. nslab vtysh server1 -c 'show bgp summary'."""
    import subprocess

    from nslab.clean import discover, run_is_live, workdir
    from nslab.topo import check_name
    check_name(node)
    live = [r for r, inv in discover().items() if run_is_live(inv.journal)
            and os.path.isdir(os.path.join(workdir(r), "frr", node))]
    if run_id:
        live = [r for r in live if r == run_id]
    if not live:
        raise InputError(f"no running lab has an FRR node {node!r}" + (f" in run {run_id}" if run_id else ""))
    if len(live) > 1:
        raise InputError(f"several runs have node {node!r} ({', '.join(live)}): give --run")
    argv = ["ip", "netns", "exec", f"{live[0]}-{node}", "vtysh", "--vty_socket",
            os.path.join(workdir(live[0]), "frr", node)]
    for c in commands:
        argv += ["-c", c]
    sys.exit(subprocess.call(argv))


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def report(run_dir: str) -> None:
    """Redraw plots and tables of RUN_DIR from its stored results (no root needed)."""
    from nslab.results import ResultStore
    if os.path.exists(os.path.join(run_dir, "mode")):  # a `nslab reproduce` directory
        from nslab.reproduce import write_report
        for name, path in write_report(run_dir).items():
            click.echo(f"{name}: {path}")
        return
    store = ResultStore.open(run_dir)
    exp = store.provenance().get("experiment") or os.path.basename(os.path.dirname(run_dir.rstrip("/")))
    writers = _report_writers()
    if exp not in writers:
        raise InputError(f"{run_dir}: no report for experiment {exp!r}")
    for name, path in writers[exp](run_dir).items():
        click.echo(f"{name}: {path}")


def _report_writers():
    from nslab.experiments.alias_report import write_report as alias_report
    writers = {"alias": alias_report}
    try:
        from nslab.experiments.ecmp_report import write_report as ecmp_report
        writers["ecmp"] = ecmp_report
    except ImportError:
        pass
    try:
        from nslab.experiments.rfc2544_report import write_report as rfc_report
        writers["rfc2544"] = rfc_report
    except ImportError:
        pass
    return writers


# -- two-box mode ---------------------------------------------------------------------
@click.group("alias")
def alias_group() -> None:
    """The alias study on two real machines (the posts' server.sh and client.sh)."""


@alias_group.command("serve")
@click.option("--iface", required=True, help="Interface to put the aliases on (e.g. eth1).")
@click.option("--aliases", "n", type=int, required=True, help="Number of aliases N.")
@click.option("--addr-template", default="192.168.2.%d", show_default=True)
@click.option("--prefix", type=int, default=16, show_default=True)
@click.option("--for", "hold", type=float, default=None, help="Serve this long (default: until Ctrl-C).")
def alias_serve(iface: str, n: int, addr_template: str, prefix: int, hold: Optional[float]) -> None:
    """Add N labelled aliases to IFACE and bind one iperf2 server to each; undo on exit."""
    from nslab.experiments.twobox import serve
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    serve(iface, n, addr_template, prefix, hold, echo=click.echo)


@alias_group.command("client")
@click.option("--addr-template", default="192.168.2.%d", show_default=True)
@click.option("--workers", "n", type=int, required=True, help="Number of clients N (one per alias).")
@click.option("--time", "duration", type=float, default=10, show_default=True)
@click.option("--mss", type=int, default=None)
@click.option("--nodelay", is_flag=True)
def alias_client(addr_template: str, n: int, duration: float, mss: Optional[int], nodelay: bool) -> None:
    """Run N synchronised iperf2 clients, client i to alias i; print the sum like client.sh."""
    from nslab.experiments.twobox import client
    res = client(addr_template, n, duration, mss=mss, nodelay=nodelay)
    click.echo(f"clients reported: {res['reported']}/{n}")
    click.echo(f"sum of the clients' reports: {res['sum_kbps']:.0f} Kbits/sec")


def register(cli: click.Group) -> None:
    cli.add_command(run_group)
    cli.add_command(report)
    cli.add_command(alias_group)
    cli.add_command(vtysh)
    cli.add_command(rfc2544_group)
