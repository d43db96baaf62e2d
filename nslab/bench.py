"""Benchmarks that print ratios measured side by side in one run.

``build``: build and tear down ``single,k`` with nslab and with plain Mininet
(``mn --topo single,k --switch <same> --controller none --test none``), each as
a fresh process, alternating, ``repeat`` times; the median of each is compared.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

from .errors import CapabilityError

log = logging.getLogger(__name__)

#: Mininet's switch equivalent to ours (Mininet's LinuxBridge needs brctl; its
#: OVS bridge must use the userspace datapath where the kernel module is missing).
MN_SWITCH = {"bridge": "lxbr", "ovs": "ovsbr,datapath={dp}"}


def _time(argv: List[str], cwd: Optional[str] = None) -> float:
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd)
    dt = time.monotonic() - t0
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["?"]
        raise CapabilityError(f"benchmark command failed: {' '.join(argv)}: {tail[0]}")
    return dt


def _foreign_ovs_bridges() -> List[str]:
    if not shutil.which("ovs-vsctl"):
        return []
    from .ovs.bridge import foreign_bridges
    return foreign_bridges()


def bench_build(ks: List[int], switch: str, repeat: int, with_mininet: bool,
                results_root: str) -> Dict[str, object]:
    """Run the build benchmark, print a table and save it as JSON."""
    from rich.console import Console
    from rich.table import Table

    from . import caps
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
    if switch == "ovs":
        from .ovs.daemon import datapath_type
        dp = "kernel" if datapath_type() == "system" else "user"
    rows = []
    console = Console()
    for k in ks:
        ours, theirs = [], []
        for _ in range(repeat):
            ours.append(_time([nslab, "--results", os.path.join(results_root, "bench"), "topo", "up",
                               "single", "--k", str(k), "--switch", switch, "--for", "0"]))
            if mn_ok:
                theirs.append(_time(["mn", "--topo", f"single,{k}", "--switch",
                                     MN_SWITCH[switch].format(dp=dp), "--controller", "none",
                                     "--test", "none"], cwd="/tmp"))
        row = {"k": k, "nslab_s": statistics.median(ours), "nslab_all": ours}
        if theirs:
            row.update(mininet_s=statistics.median(theirs), mininet_all=theirs,
                       ratio=statistics.median(theirs) / statistics.median(ours))
        rows.append(row)
        console.print(f"k={k}: nslab {row['nslab_s']:.2f} s" +
                      (f", mininet {row['mininet_s']:.2f} s" if theirs else ""))
    t = Table(title=f"build + teardown of single,k ({switch}; median of {repeat}, fresh process each)")
    for col in ("k", "nslab (s)", "mininet (s)", "mininet / nslab"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["k"]), f"{r['nslab_s']:.2f}",
                  f"{r['mininet_s']:.2f}" if "mininet_s" in r else "-",
                  f"{r['ratio']:.1f}x" if "ratio" in r else "-")
    console.print(t)
    out = {"benchmark": "build", "switch": switch, "repeat": repeat, "rows": rows}
    console.print(f"saved {_save(results_root, f'build-{switch}', out)}")
    return out


def bench_clos(shapes: List[tuple], repeat: int, results_root: str) -> Dict[str, object]:
    """From FRR daemon start to ECMP routes on every server/leaf, per fabric shape."""
    from rich.console import Console
    from rich.table import Table

    from . import caps
    from .frr import wait_for_ecmp
    from .lab import Lab
    from .topologies.clos import clos, expected_routes
    caps.require_root("nslab bench clos")
    caps.require(["frr", "ecmp"], "nslab bench clos")
    console = Console()
    rows = []
    for spines, leaves in shapes:
        conv, build = [], []
        for _ in range(repeat):
            t = clos(spines=spines, servers=leaves)
            with Lab(t) as lab:
                conv.append(wait_for_ecmp(lab, expected_routes(t), timeout=120))
                build.append(lab.build_seconds)
        rows.append({"spines": spines, "servers": leaves, "convergence_s": statistics.median(conv),
                     "convergence_all": conv, "build_s": statistics.median(build)})
        console.print(f"{spines}x{leaves}: converged {rows[-1]['convergence_s']:.2f} s after FRR start")
    t = Table(title=f"BGP-unnumbered clos: FRR start to ECMP routes everywhere (median of {repeat})")
    for col in ("spines x servers", "nodes", "lab build (s)", "convergence (s)", "min-max (s)"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(f"{r['spines']} x {r['servers']}", str(r["spines"] + r["servers"]),
                  f"{r['build_s']:.2f}", f"{r['convergence_s']:.2f}",
                  f"{min(r['convergence_all']):.2f}-{max(r['convergence_all']):.2f}")
    console.print(t)
    out = {"benchmark": "clos", "repeat": repeat, "rows": rows,
           "timers": "keepalive 1, hold 3, advertisement-interval 0, coalesce-time 100"}
    console.print(f"saved {_save(results_root, 'clos', out)}")
    return out


def _save(results_root: str, name: str, out: Dict[str, object]) -> str:
    path = os.path.join(results_root, "bench", f"{name}-{int(time.time())}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    out.setdefault("machine", {"cpus": os.cpu_count(), "kernel": os.uname().release})
    out.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return path


def bench_aliases(n: int, repeat: int, results_root: str) -> Dict[str, object]:
    """N aliases by one ``ip -batch`` vs one ``ip addr add`` per alias, same run."""
    from rich.console import Console

    from . import caps
    from .experiments.alias import add_aliases, alias_addresses
    from .lab import Lab
    from .topologies.alias import alias_pair
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
    out["saved"] = _save(results_root, "aliases", out)
    return out


def bench_generator(sizes: List[int], results_root: str) -> Dict[str, object]:
    """The RFC 2544 generator's ceiling per frame size on one CPU, next to iperf2's
    UDP ceiling and the line rate it must beat (100 Mbit/s and 1 Gbit/s)."""
    from rich.console import Console
    from rich.table import Table

    from . import caps
    from .experiments.rfc2544 import GEN_CPU, Rfc2544Runner, Rfc2544Config
    from .iperf import parse
    from .lab import Lab
    from .shaping import frame_rate
    from .topologies.rfc2544 import dut_chain
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
    out["saved"] = _save(results_root, "generator", out)
    return out


def bench_dataplane(seconds: float, repeat: int, results_root: str) -> Dict[str, object]:
    """TCP over the lab's ``pair`` vs two bare namespaces on one veth, alternating."""
    from rich.console import Console

    from . import caps
    from .iperf import parse, run_client, start_server, wait_listening
    from .lab import Lab
    from .naming import new_run_id
    from .proc import Process, run
    from .topologies import pair
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
                lab_bps.append(run_client(lab["h1"], lab["h2"].ip, time=seconds).total_bps)
                res = run(["iperf", "-c", "10.9.9.2", "-t", f"{seconds:g}"], netns=a, run_id=rid,
                          timeout=seconds + 30)
                bare_bps.append(parse(res.stdout).total_bps)
        srv.stop()
    finally:
        run(["ip", "netns", "del", a], check=False)
        run(["ip", "netns", "del", b], check=False)
    out = {"benchmark": "dataplane", "seconds": seconds, "repeat": repeat,
           "lab_bps": statistics.median(lab_bps), "bare_bps": statistics.median(bare_bps),
           "ratio": statistics.median(lab_bps) / statistics.median(bare_bps),
           "lab_all": lab_bps, "bare_all": bare_bps}
    Console().print(f"unshaped TCP, {seconds:g} s x {repeat}: lab pair {out['lab_bps'] / 1e9:.2f} Gbit/s, "
                    f"bare veth {out['bare_bps'] / 1e9:.2f} Gbit/s: lab/bare = {out['ratio']:.2f}")
    out["saved"] = _save(results_root, "dataplane", out)
    return out
