#!/usr/bin/env python3
"""Capture FRR's own dry-run verdicts on the configuration nslab renders, for
the unit tier (tests/unit/test_frr_versions.py).

    sudo .venv/bin/python scripts/capture-frr-dryruns.py tests/data/frr/8.4.4
    sudo .venv/bin/python scripts/capture-frr-dryruns.py tests/data/frr/10.3 --root /path/to/debian13

It renders every configuration file of two nodes (a spine and a server) of a
2x2 clos with BFD, update-delay and passive spines for the FRR found (in
``--root``, a Debian root entered with chroot, or on this machine), writes them
under OUT/<node>/, then runs each daemon's dry run exactly as nslab does
(the same argv, mount prologue included), in a private mount namespace
(``unshare -m``; no network namespace, no daemon left running), and stores
argv, exit code, stdout and stderr in OUT/checks.json. Rejected configurations
are captured too: a ``network`` that is no prefix (every version), and on FRR
10 the per-daemon ``zebra.conf`` of 8.4 and an out-of-range ``mgmtd.conf`` line.
Needs root (unshare, mount, chroot).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nslab.frr.daemon import Daemon, daemon_kinds, node_configs
from nslab.frr.rundir import NodeDir, frr_ids
from nslab.frr.version import FrrVersion, parse_version
from nslab.topologies.clos import clos

#: The topology of the captures; tests/unit/test_frr_versions.py builds the same.
TOPOLOGY = dict(spines=2, servers=2, bfd=True, passive_spines=True, update_delay=10)
NODES = ("spine1", "server1")
RUN_ID = "nl0000"
INNER = "/tmp/nslab-frr-capture"


class _Node:
    def __init__(self, name: str) -> None:
        self.name = name


def _run(argv: List[str], root: Optional[str]) -> subprocess.CompletedProcess:
    full = ["unshare", "-m", "--propagation", "slave"] + (["chroot", root] if root else []) + argv
    return subprocess.run(full, capture_output=True, text=True, timeout=60)


def _placeholders(argv: List[str], case_dir: str) -> List[str]:
    uid, gid = frr_ids()
    out = []
    for a in argv:
        a = a.replace(f"{case_dir}/frr-conf", "{conf}").replace(f"{case_dir}/frr", "{run}")
        out.append(a)
    # the prologue's uid and gid (FRR 10) follow the lib-state directory
    if "mgmtd" in out[4:5]:
        out[10], out[11] = ("{uid}" if out[10] == str(uid) else out[10],
                            "{gid}" if out[11] == str(gid) else out[11])
    return out


def _check(d: Daemon, root: Optional[str], case_dir: str, case: str) -> Dict[str, Any]:
    argv = d.argv(dry_run=True)
    res = _run(argv, root)
    return {"case": case, "node": d.node.name, "daemon": d.NAME, "file": d.config_name,
            "argv": _placeholders(argv, case_dir), "returncode": res.returncode,
            "stdout": res.stdout, "stderr": res.stderr}


def _layout(root: Optional[str], case: str, node: str, files: Dict[str, str],
            version: FrrVersion) -> tuple:
    """Write ``files`` as the node's config dir; return (inner case dir, run, conf)."""
    inner = f"{INNER}/{case}"
    outer = (root or "") + inner
    run_dir, conf_dir = NodeDir(f"{outer}/frr/{node}", "frr"), NodeDir(f"{outer}/frr-conf/{node}", "root")
    run_dir.create()
    conf_dir.create()
    for name, text in files.items():
        conf_dir.write(name, text)
    for top, dirs, names in os.walk(outer):  # the root's frr user has its own ids
        for n in dirs + names:
            os.chmod(os.path.join(top, n), 0o777 if n in dirs else 0o644)
    os.chmod(outer, 0o755)
    return inner, NodeDir(f"{inner}/frr/{node}", "frr"), NodeDir(f"{inner}/frr-conf/{node}", "root")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--root", help="a Debian root to chroot into (default: this machine)")
    args = ap.parse_args()
    root = os.path.abspath(args.root) if args.root else None
    text = subprocess.run((["chroot", root] if root else []) + ["/usr/lib/frr/zebra", "--version"],
                          capture_output=True, text=True, check=True).stdout
    version = parse_version(text)
    if version.mgmtd:  # the mount targets the prologue needs, as nslab makes them
        for path in (version.runstatedir, version.libstatedir):
            os.makedirs((root or "") + path, exist_ok=True)
    shutil.rmtree((root or "") + INNER, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "version.txt"), "w") as f:
        f.write(text)
    topo = clos(**TOPOLOGY)
    intfs = topo.node_interfaces()
    checks: List[Dict[str, Any]] = []
    for node in NODES:
        ctx = {"node": node, "run_id": RUN_ID, "interfaces": intfs[node], "bgp": topo.nodes[node].bgp}
        files = node_configs(ctx, version)
        os.makedirs(os.path.join(args.out, node), exist_ok=True)
        for name, body in files.items():
            with open(os.path.join(args.out, node, name), "w") as f:
                f.write(body)
        case_dir, run_dir, conf_dir = _layout(root, "accepted", node, files, version)
        for kind in daemon_kinds(True, version):
            checks.append(_check(kind(_Node(node), run_dir, conf_dir, ctx, version), root,
                                 case_dir, "accepted"))
    # rejected: a network that is no prefix (typing refuses it; FRR is the second line)
    node = "server1"
    bgp = topo.nodes[node].bgp
    ctx = {"node": node, "run_id": RUN_ID, "interfaces": intfs[node],
           "bgp": bgp.model_copy(update={"networks": ["not-a-prefix"]})}
    rejected = [("bgpd-network-not-a-prefix", "bgpd", node_configs(ctx, version)["bgpd.conf"], ctx)]
    if version.mgmtd:
        old = FrrVersion("8.4.4", 8, 4)
        sctx = {"node": "spine1", "run_id": RUN_ID, "interfaces": intfs["spine1"],
                "bgp": topo.nodes["spine1"].bgp}
        rejected.append(("zebra-conf-of-frr-8.4", "zebra", node_configs(sctx, old)["zebra.conf"],
                         sctx))
        bad = node_configs(sctx, version)["mgmtd.conf"] + "interface spine1-eth0\n ipv6 nd ra-interval 99999\n!\n"
        rejected.append(("mgmtd-ra-interval-out-of-range", "mgmtd", bad, sctx))
    for case, daemon, body, c in rejected:
        files = node_configs(c, version)
        files[f"{daemon}.conf"] = body
        case_dir, run_dir, conf_dir = _layout(root, case, c["node"], files, version)
        kind = next(k for k in daemon_kinds(True, version) if k.NAME == daemon)
        entry = _check(kind(_Node(c["node"]), run_dir, conf_dir, c, version), root, case_dir, case)
        entry["config"] = body
        checks.append(entry)
    with open(os.path.join(args.out, "checks.json"), "w") as f:
        json.dump({"frr": version.text, "root": "debian13 chroot" if root else "host",
                   "checks": checks}, f, indent=1)
        f.write("\n")
    shutil.rmtree((root or "") + INNER, ignore_errors=True)
    for c in checks:
        print(f"{c['case']:34} {c['node']:8} {c['daemon']:6} rc={c['returncode']} "
              f"{(c['stderr'] + c['stdout']).strip().splitlines()[-1:] }")
    return 0


if __name__ == "__main__":
    sys.exit(main())
