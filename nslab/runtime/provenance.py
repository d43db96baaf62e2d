"""Provenance: the machine and tool facts of a run (kernel, CPU, virtualization,
tool versions, git commit) and, for a built lab, each node's sysctls, offloads,
qdiscs and drivers. Collected here, beside the capability probes; the store
(:mod:`nslab.store.results`) only writes what it is given."""
from __future__ import annotations

import functools
import logging
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

from ..errors import LabError
from . import caps
from .node import LabLike, LabNode

log = logging.getLogger(__name__)


def _out(argv: List[str], netns: Optional[str] = None) -> str:
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


#: The checkout's commit, asked once per process (:func:`git_commit`) or as
#: the host found it (:func:`use_git_commit`).
_GIT: Dict[str, Optional[str]] = {}


def git_commit() -> Optional[str]:
    """The checkout's commit (``-dirty`` with uncommitted changes), asked once
    per process; None outside a git checkout."""
    if "commit" not in _GIT:
        here = os.path.dirname(os.path.abspath(__file__))
        out = _out(["git", "-C", here, "rev-parse", "HEAD"])
        dirty = out and _out(["git", "-C", here, "status", "--porcelain",
                              "--untracked-files=no"])
        _GIT["commit"] = (out + ("-dirty" if dirty else "")) if out else None
    return _GIT["commit"]


def use_git_commit(commit: Optional[str]) -> None:
    """Record ``commit`` as the checkout's, without asking git: a guest runs its
    host's checkout (shared read-only), which the host asked."""
    _GIT["commit"] = commit


def tool_facts() -> Dict[str, Any]:
    """The tools' versions and the checkout's commit (what a guest that runs
    this machine's programs takes from here: :func:`use_tool_facts`)."""
    return {"versions": caps.versions(), "git_commit": git_commit()}


def use_tool_facts(facts: Any) -> None:
    """Take the tools' versions and the commit from ``facts`` (as
    :func:`tool_facts` gave them on the host; read from a run's provenance, so
    anything but short strings is left out and asked for here instead)."""
    if not isinstance(facts, dict):
        return

    def short(v: Any) -> bool:
        return v is None or (isinstance(v, str) and len(v) <= 100)

    vers = facts.get("versions")
    if isinstance(vers, dict) and vers and all(isinstance(k, str) and short(v)
                                               for k, v in vers.items()):
        caps.use_versions(vers)
    commit = facts.get("git_commit")
    if "git_commit" in facts and short(commit):
        use_git_commit(commit)


def collect_provenance(lab: Optional[LabLike] = None, sysctls: Iterable[str] = (),
                       extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Machine and tool facts for a run, plus per-node sysctls, offloads and qdiscs."""
    prov: Dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(), "kernel": platform.release(), "kernel_build": platform.version(),
        "machine": platform.machine(), "virtualization": _virtualization(),
        "cpus": os.cpu_count(), "cpu_model": _cpu_model(), "python": platform.python_version(),
        **tool_facts(),
        "argv": list(sys.argv),
    }
    if lab is not None:
        nodes: Dict[str, Any] = {}
        for node in lab:
            if node.netns is None:
                continue
            info: Dict[str, Any] = {"netns": node.netns, "intfs": node.intfs, "addrs": node.addrs}
            host = getattr(node, "host", None)  # a node on another host (nslab.hosts.remote)
            if host is not None:
                info["host"] = host
            out = functools.partial(_in_node, node)
            if sysctls:
                info["sysctls"] = {k: out(["sysctl", "-n", k]) for k in sysctls}
            info["qdiscs"] = out(["tc", "-s", "qdisc", "show"])
            info["offloads"] = {i: _offloads(node.netns, i, out) for i in node.intfs[:4]}
            info["drivers"] = {i: _driver(node.netns, i, out) for i in node.intfs[:4]}
            nodes[node.name] = info
        prov["lab"] = {"run_id": lab.run_id, "topology": lab.topology.name,
                       "datapath": lab.datapath, "nodes": nodes}
        for ext in getattr(lab, "extensions", {}).values():
            prov["lab"].update(ext.facts(lab))
    if extra:
        prov.update(extra)
    return prov


def _in_node(node: LabNode, argv: List[str]) -> str:
    """``argv``'s output in ``node`` (through SSH for a node on another host)."""
    if getattr(node, "host", None) is None:
        return _out(argv, node.netns)
    try:
        return node.run(argv, check=False, timeout=20).stdout.strip()
    except (LabError, OSError) as exc:  # provenance is best effort: the fact is left out
        log.warning("provenance: %s on %s: %s", " ".join(argv), getattr(node, "name", node), exc)
        return ""


def _offloads(netns: Optional[str], intf: str, run_out: Optional[Callable[[List[str]], str]] = None
              ) -> Dict[str, str]:
    out = (run_out or (lambda a: _out(a, netns)))(["ethtool", "-k", intf])
    keep = ("tx-checksumming", "tcp-segmentation-offload", "generic-segmentation-offload",
            "generic-receive-offload")
    res = {}
    for line in out.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in keep:
            res[k.strip()] = v.strip()
    return res


def interface_driver(intf: str, netns: Optional[str] = None) -> Dict[str, str]:
    """``ethtool -i``: the driver behind an interface (veth, e1000, 8139cp, ...)."""
    return _driver(netns, intf)


def _driver(netns: Optional[str], intf: str,
            run_out: Optional[Callable[[List[str]], str]] = None) -> Dict[str, str]:
    """``ethtool -i``: the driver behind an interface (veth, e1000, 8139cp, ...)."""
    out = (run_out or (lambda a: _out(a, netns)))(["ethtool", "-i", intf])
    keep = ("driver", "version", "firmware-version", "bus-info")
    return {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in out.splitlines())
            if k.strip() in keep}


def _virtualization() -> str:
    """What the machine runs on (``none``, ``kvm``, ``qemu``...), as systemd-detect-virt says."""
    out = _out(["systemd-detect-virt"])
    return out or "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
