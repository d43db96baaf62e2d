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
    out = {"benchmark": "build", "switch": switch, "repeat": repeat, "rows": rows,
           "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    path = os.path.join(results_root, "bench", f"build-{switch}-{int(time.time())}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    console.print(f"saved {path}")
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
           "timers": "keepalive 1, hold 3, advertisement-interval 0, coalesce-time 100",
           "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    path = os.path.join(results_root, "bench", f"clos-{int(time.time())}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    console.print(f"saved {path}")
    return out
