"""Benchmarks of building labs: ``nslab bench build|dataplane|clos``."""
from __future__ import annotations

import logging
import os
import shutil
import statistics
import sys
import time
from typing import Dict, List, Tuple, TypedDict

from typing_extensions import NotRequired

import click

from .basic import pair
from nslab.cmdline.cliutil import int_list, setup_logging
from nslab.model.naming import new_run_id, ns_name, root_intf
from nslab.model.render import line, text
from nslab.ovs.bridge import foreign_bridges
from nslab.run.bench import PeakMemory, quiesce, save, time_command
from nslab.errors import InputError
from nslab.runtime import caps
from nslab.runtime.lab import Lab
from nslab.runtime.proc import pids_with_tag, run

log = logging.getLogger(__name__)

#: Mininet's switch equivalent to ours (Mininet's LinuxBridge needs brctl; its
#: OVS bridge must use the userspace datapath where the kernel module is missing).
MN_SWITCH = {"bridge": "lxbr", "ovs": "ovsbr,datapath={dp}"}


def _foreign_ovs_bridges() -> List[str]:
    if not shutil.which("ovs-vsctl"):
        return []
    return foreign_bridges()


def bench_build(ks: List[int], switch: str, repeat: int, with_mininet: bool,
                results_root: str) -> Dict[str, object]:
    """Run the build benchmark, print a table and save it as JSON."""
    caps.require_root("nslab bench build")
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    mn_ok = with_mininet and shutil.which("mn") is not None
    if mn_ok and switch == "bridge" and not shutil.which("brctl"):
        log.warning("Mininet's lxbr switch needs brctl (apt install bridge-utils): skipping Mininet")
        mn_ok = False
    if mn_ok and _foreign_ovs_bridges():
        # On any error Mininet runs its global cleanup, which deletes every OVS
        # bridge: never risk a user's bridges for a benchmark.
        log.warning("skipping plain Mininet: this machine has OVS bridges nslab did not create, "
                    "and Mininet's error cleanup would delete them")
        mn_ok = False
    dp = "user"
    held = False
    if switch == "ovs":
        from nslab.ovs.daemon import USER, datapath_type, ensure_running
        # held for the whole benchmark, like `nslab ovs start`: nslab's labs do
        # not stop them between runs, and Mininet's side finds them up
        held = ensure_running(USER)
        dp = "kernel" if datapath_type() == "system" else "user"
    try:
        rows = _build_rows(ks, switch, repeat, mn_ok, dp, nslab, results_root)
    finally:
        if held:
            from nslab.ovs.daemon import stop_if_ours
            stop_if_ours()
    return _build_report(rows, switch, repeat, results_root)


def kernel_floor(k: int, switch: str, datapath: str = "netdev") -> Tuple[float, int]:
    """The kernel's own cost for the objects of ``single,k``, built and torn
    down with the fewest calls: one ``ip -batch`` adds k+1 namespaces, one
    creates k veth pairs directly in them, and the switch is one more call (a
    Linux bridge with its ports up: ``ip -n SW -batch``; OVS: one
    ``ovs-vsctl`` transaction adding the bridge and every port). Teardown
    deletes the bridge (OVS) and every namespace in one call. No addresses,
    host links left down, no IPv6 start-up: what no lab can go below.

    Returns (seconds, peak KiB of memory used). Objects carry a fresh run id,
    so ``nslab clean`` finds them if this is interrupted."""
    rid = new_run_id()
    hosts = [ns_name(rid, f"h{i}") for i in range(1, k + 1)]
    sw = ns_name(rid, "s1")
    ovs = switch == "ovs"
    namespaces = hosts + ([] if ovs else [sw])
    ports = [root_intf(rid, i) for i in range(1, k + 1)]
    br = f"{rid}-b1"
    t0 = time.monotonic()
    try:
        with PeakMemory() as peak:
            run(["ip", "-batch", "-"], input=text([line("netns", "add", n) for n in namespaces]))
            run(["ip", "-batch", "-"], input=text([
                line("link", "add", "name", "eth0", "netns", h, "type", "veth", "peer", "name", p,
                     *([] if ovs else ["netns", sw])) for h, p in zip(hosts, ports)]))
            if ovs:
                from nslab.ovs.bridge import add_bridge
                run(["ip", "-batch", "-"], input=text([line("link", "set", "dev", p, "up")
                                                       for p in ports]))
                add_bridge(br, rid, "s1", ports, datapath)
            else:
                run(["ip", "-n", sw, "-batch", "-"], input=text(
                    [line("link", "add", "name", "s1", "type", "bridge")] +
                    [line("link", "set", "dev", p, "master", "s1") for p in ports] +
                    [line("link", "set", "dev", p, "up") for p in ports] +
                    [line("link", "set", "dev", "s1", "up")]))
            if ovs:
                from nslab.ovs.bridge import del_bridge
                del_bridge(br)
            run(["ip", "-batch", "-"], input=text([line("netns", "del", n) for n in namespaces]))
        return time.monotonic() - t0, peak.peak_kb
    finally:
        if ovs:
            from nslab.ovs.bridge import del_bridge
            del_bridge(br)
        run(["ip", "-force", "-batch", "-"], check=False,
            input=text([line("netns", "del", n) for n in namespaces
                        if os.path.exists(f"/run/netns/{n}")]) or "\n")


class BuildRow(TypedDict):
    """One size of the build benchmark (seconds, KiB; the ``_all`` lists are every repeat)."""

    k: int
    nslab_s: float
    nslab_all: List[float]
    nslab_no_ipv6_s: float
    nslab_no_ipv6_all: List[float]
    floor_s: float
    floor_all: List[float]
    vs_floor: float
    no_ipv6_vs_floor: float
    nslab_ms_per_node: float
    nslab_kib_per_node: float
    floor_kib_per_node: float
    memory_kib: Dict[str, List[int]]
    mininet_s: NotRequired[float]
    mininet_all: NotRequired[List[float]]
    ratio: NotRequired[float]
    mininet_kib_per_node: NotRequired[float]


def _build_rows(ks: List[int], switch: str, repeat: int, mn_ok: bool, dp: str, nslab: str,
                results_root: str) -> List[BuildRow]:
    from rich.console import Console
    rows: List[BuildRow] = []
    console = Console()
    for k in ks:
        ours: List[float] = []
        ours_v4: List[float] = []
        theirs: List[float] = []
        floor: List[float] = []
        mem: Dict[str, List[int]] = {"nslab": [], "nslab_no_ipv6": [], "mininet": [], "floor": []}
        up = [nslab, "--results", os.path.join(results_root, "bench"), "topo", "up",
              "single", "--k", str(k), "--switch", switch, "--for", "0"]
        for _ in range(repeat):
            # the four side by side in each round, so drift hits them alike;
            # each starts on an idle machine (quiesce), so none pays for the
            # kernel's leftover work from the one before
            quiesce()
            secs, kb = kernel_floor(k, switch, "system" if dp == "kernel" else "netdev")
            floor.append(secs)
            mem["floor"].append(kb)
            quiesce()
            ours.append(time_command(up, memory=mem["nslab"]))
            quiesce()
            ours_v4.append(time_command(up + ["--no-ipv6"], memory=mem["nslab_no_ipv6"]))
            if mn_ok:
                quiesce()
                theirs.append(time_command(["mn", "--topo", f"single,{k}", "--switch",
                                            MN_SWITCH[switch].format(dp=dp), "--controller", "none",
                                            "--test", "none"], cwd="/tmp", memory=mem["mininet"]))
        row: BuildRow = {
            "k": k, "nslab_s": statistics.median(ours), "nslab_all": ours,
            "nslab_no_ipv6_s": statistics.median(ours_v4), "nslab_no_ipv6_all": ours_v4,
            "floor_s": statistics.median(floor), "floor_all": floor,
            "vs_floor": statistics.median(ours) / statistics.median(floor),
            "no_ipv6_vs_floor": statistics.median(ours_v4) / statistics.median(floor),
            "nslab_ms_per_node": 1000 * statistics.median(ours) / (k + 1),
            "nslab_kib_per_node": statistics.median(mem["nslab"]) / (k + 1),
            "floor_kib_per_node": statistics.median(mem["floor"]) / (k + 1),
            "memory_kib": mem}
        if theirs:
            row["mininet_s"] = statistics.median(theirs)
            row["mininet_all"] = theirs
            row["ratio"] = statistics.median(theirs) / statistics.median(ours)
            row["mininet_kib_per_node"] = statistics.median(mem["mininet"]) / (k + 1)
        rows.append(row)
        console.print(f"k={k}: kernel floor {row['floor_s']:.2f} s, nslab {row['nslab_s']:.2f} s, "
                      f"nslab --no-ipv6 {row['nslab_no_ipv6_s']:.2f} s" +
                      (f", mininet {row['mininet_s']:.2f} s" if theirs else ""))
    return rows


def _build_report(rows: List[BuildRow], switch: str, repeat: int,
                  results_root: str) -> Dict[str, object]:
    from rich.console import Console
    from rich.table import Table
    console = Console(width=max(200, Console().width))
    t = Table(title=f"build + teardown of single,k ({switch}; median of {repeat}, fresh process each, "
                    "each from an idle machine; kernel floor: the same objects in 3-4 calls, no "
                    "addresses, host links down, no IPv6 start-up)")
    for col in ("k", "kernel floor (s)", "nslab (s)", "nslab --no-ipv6 (s)", "mininet (s)",
                "nslab / floor", "--no-ipv6 / floor", "mininet / nslab", "nslab ms/node",
                "nslab MiB/node", "mininet MiB/node"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["k"]), f"{r['floor_s']:.2f}", f"{r['nslab_s']:.2f}",
                  f"{r['nslab_no_ipv6_s']:.2f}",
                  f"{r['mininet_s']:.2f}" if "mininet_s" in r else "-",
                  f"{r['vs_floor']:.1f}x", f"{r['no_ipv6_vs_floor']:.1f}x",
                  f"{r['ratio']:.1f}x" if "ratio" in r else "-",
                  f"{r['nslab_ms_per_node']:.1f}", f"{r['nslab_kib_per_node'] / 1024:.2f}",
                  f"{r['mininet_kib_per_node'] / 1024:.2f}" if "mininet_kib_per_node" in r else "-")
    console.print(t)
    out = {"benchmark": "build", "switch": switch, "repeat": repeat, "rows": rows}
    console.print(f"saved {save(results_root, f'build-{switch}', out)}")
    return out


def daemon_memory(run_id: str) -> Dict[str, float]:
    """Mean resident memory (MiB) per daemon kind among the run's processes
    (``zebra``, ``bgpd``, ``bfdd``), by process name."""
    import psutil

    by: Dict[str, List[float]] = {}
    for pid in pids_with_tag(run_id):
        try:
            p = psutil.Process(pid)
            name, rss = p.name(), p.memory_info().rss
        except psutil.Error:
            continue
        if name in ("zebra", "bgpd", "bfdd"):
            by.setdefault(name, []).append(rss / 2**20)
    return {k: statistics.mean(v) for k, v in by.items()}


def bench_clos(shapes: List[tuple], repeat: int, results_root: str,
               passive_spines: str = "auto", update_delay: int = 10) -> Dict[str, object]:
    """From FRR daemon start to ECMP routes on every server/leaf, per fabric shape
    (``passive_spines`` and ``update_delay`` as for the ``clos`` topology)."""
    from rich.console import Console
    from rich.table import Table

    from nslab.frr import wait_for_ecmp

    from .clos import clos, expected_routes, resolve_passive_spines
    caps.require_root("nslab bench clos")
    caps.require(["frr", "ecmp"], "nslab bench clos")
    console = Console()
    rows = []
    for spines, leaves in shapes:
        conv, build, mem, lab_kib = [], [], [], []
        for _ in range(repeat):
            t = clos(spines=spines, servers=leaves, passive_spines=passive_spines,
                     update_delay=update_delay)
            with PeakMemory() as peak:
                with Lab(t) as lab:
                    conv.append(wait_for_ecmp(lab, expected_routes(t), timeout=120))
                    build.append(lab.build_seconds)
                    mem.append(daemon_memory(lab.run_id))
            lab_kib.append(peak.peak_kb)
        per = {name: statistics.median(m[name] for m in mem) for name in mem[0]}
        rows.append({"spines": spines, "servers": leaves,
                     "passive_spines": resolve_passive_spines(passive_spines, spines * leaves),
                     "convergence_s": statistics.median(conv),
                     "convergence_all": conv, "build_s": statistics.median(build),
                     "daemon_rss_mib": per, "lab_peak_mib": statistics.median(lab_kib) / 1024})
        console.print(f"{spines}x{leaves}: converged {rows[-1]['convergence_s']:.2f} s after FRR start")
    table = Table(title=f"BGP-unnumbered clos: FRR start to ECMP routes everywhere (median of "
                  f"{repeat}); update-delay {update_delay} s")
    for col in ("spines x servers", "nodes", "passive spines", "lab build (s)", "convergence (s)",
                "min-max (s)", "MiB per zebra / bgpd", "lab peak MiB"):
        table.add_column(col, justify="right")
    for r in rows:
        rss = r["daemon_rss_mib"]
        table.add_row(f"{r['spines']} x {r['servers']}", str(r["spines"] + r["servers"]),
                      "yes" if r["passive_spines"] else "no", f"{r['build_s']:.2f}",
                      f"{r['convergence_s']:.2f}",
                      f"{min(r['convergence_all']):.2f}-{max(r['convergence_all']):.2f}",
                      " / ".join(f"{rss[d]:.1f}" if d in rss else "-" for d in ("zebra", "bgpd")),
                      f"{r['lab_peak_mib']:.0f}")
    console.print(table)
    out = {"benchmark": "clos", "repeat": repeat, "rows": rows, "passive_spines": passive_spines,
           "update_delay": update_delay,
           "timers": "keepalive 1, hold 3, advertisement-interval 0, coalesce-time 100"}
    console.print(f"saved {save(results_root, 'clos', out)}")
    return out


def bench_dataplane(seconds: float, repeat: int, results_root: str) -> Dict[str, object]:
    """TCP over the lab's ``pair`` vs two bare namespaces on one veth, alternating."""
    from rich.console import Console

    from nslab.traffic.iperf import parse, run_client, start_server, wait_listening
    from nslab.runtime.proc import Process, run

    caps.require_root("nslab bench dataplane")
    lab_bps, bare_bps = [], []
    rid = new_run_id()
    a, b = f"{rid}-bare1", f"{rid}-bare2"
    try:
        run(["ip", "netns", "add", a])
        run(["ip", "netns", "add", b])
        run(["ip", "link", "add", "name", "v0", "netns", a, "type", "veth", "peer", "name", "v1",
             "netns", b])
        run(["ip", "-n", a, "addr", "add", "10.9.9.1/24", "dev", "v0"])
        run(["ip", "-n", b, "addr", "add", "10.9.9.2/24", "dev", "v1"])
        run(["ip", "-n", a, "link", "set", "v0", "up"])
        run(["ip", "-n", b, "link", "set", "v1", "up"])
        srv = Process(["iperf", "-s"], netns=b, run_id=rid)
        with Lab(pair()) as lab:
            start_server(lab["h2"])
            wait_listening(lab["h2"])
            time.sleep(0.3)
            for _ in range(repeat):
                lab_bps.append(run_client(lab["h1"], lab["h2"].require_ip(), time=seconds).total_bps)
                res = run(["iperf", "-c", "10.9.9.2", "-t", f"{seconds:g}"], netns=a, run_id=rid,
                          timeout=seconds + 30)
                bare_bps.append(parse(res.stdout).total_bps)
        srv.stop()
    finally:
        run(["ip", "netns", "del", a], check=False)
        run(["ip", "netns", "del", b], check=False)
    lab_med, bare_med = statistics.median(lab_bps), statistics.median(bare_bps)
    out: Dict[str, object] = {"benchmark": "dataplane", "seconds": seconds, "repeat": repeat,
                              "lab_bps": lab_med, "bare_bps": bare_med, "ratio": lab_med / bare_med,
                              "lab_all": lab_bps, "bare_all": bare_bps}
    Console().print(f"unshaped TCP, {seconds:g} s x {repeat}: lab pair {lab_med / 1e9:.2f} Gbit/s, "
                    f"bare veth {bare_med / 1e9:.2f} Gbit/s: lab/bare = {lab_med / bare_med:.2f}")
    out["saved"] = save(results_root, "dataplane", out)
    return out


@click.command("build")
@click.option("--sizes", default="2,8,32,64,256,1000", show_default=True, help="Host counts k.")
@click.option("--switch", type=click.Choice(["bridge", "ovs"]), default="bridge", show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--no-mininet", is_flag=True, help="Skip plain Mininet.")
@click.pass_context
def build_cmd(ctx: click.Context, sizes: str, switch: str, repeat: int, no_mininet: bool) -> None:
    """Build+teardown time of `single,k`: nslab, plain Mininet (`mn --test none`) and the kernel floor."""
    setup_logging(ctx.obj, f"bench-build-{int(time.time())}")
    bench_build(int_list(sizes, "--sizes"), switch, repeat, not no_mininet, ctx.obj.results)


@click.command("clos")
@click.option("--shapes", default="2x2,4x8", show_default=True, help="SPINESxSERVERS list.")
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--passive-spines", type=click.Choice(["auto", "true", "false"]), default="auto",
              show_default=True, help="Only servers open BGP sessions (auto: from 256 sessions).")
@click.option("--update-delay", type=click.IntRange(0, 3600), default=10, show_default=True,
              help="bgpd's read-only time after start, s (0 = off).")
@click.pass_context
def clos_cmd(ctx: click.Context, shapes: str, repeat: int, passive_spines: str,
             update_delay: int) -> None:
    """Time from FRR start to ECMP routes installed everywhere, per clos size."""
    parsed: List[Tuple[int, int]] = []
    for item in shapes.split(","):
        try:
            s, n = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise InputError(f"--shapes: {item!r} is not SPINESxSERVERS (e.g. 2x2)") from None
        parsed.append((s, n))
    setup_logging(ctx.obj, f"bench-clos-{int(time.time())}")
    bench_clos(parsed, repeat, ctx.obj.results, passive_spines, update_delay)


@click.command("dataplane")
@click.option("--seconds", type=float, default=3, show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.pass_context
def dataplane_cmd(ctx: click.Context, seconds: float, repeat: int) -> None:
    """TCP through the lab's pair vs two bare namespaces on one veth (the lab's overhead)."""
    setup_logging(ctx.obj, f"bench-dataplane-{int(time.time())}")
    bench_dataplane(seconds, repeat, ctx.obj.results)
