"""Results: ``results/<experiment>/<run-id>/`` with JSON Lines records.

Each record carries ``schema_version``, the point's parameters, its
measurements, paths of raw outputs (relative to the run directory) and a
reference to the run's provenance (``provenance.json``: kernel, tool versions,
sysctls, offloads, qdisc stats, git commit, timestamps). Records are appended
and flushed one by one, so a sweep that stops keeps what it measured, and a
resumed sweep skips points already present.
"""
from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

from .errors import InputError

SCHEMA_VERSION = 1
RECORDS = "records.jsonl"
PROVENANCE = "provenance.json"


def point_key(params: Dict[str, Any]) -> str:
    """A stable key for a parameter point (used to skip points on resume)."""
    return json.dumps(params, sort_keys=True, default=str)


class ResultStore:
    """One experiment run's directory.

    Args:
        root: the results root (``results``).
        experiment: experiment name (``alias``, ``ecmp``, ``rfc2544``, ``demo``).
        run_id: the lab run id; reused on resume.
        path: an explicit run directory (overrides root/experiment/run_id).
    """

    def __init__(self, root: str = "results", experiment: str = "demo", run_id: str = "",
                 path: Optional[str] = None) -> None:
        self.path = path or os.path.join(root, experiment, run_id)
        self.experiment = experiment
        self.run_id = run_id
        #: the schema version new records are written with (the study's)
        self.schema_version = SCHEMA_VERSION
        os.makedirs(self.raw_dir, exist_ok=True)

    @classmethod
    def open(cls, path: str) -> "ResultStore":
        """Open an existing run directory (for resume or reports)."""
        if not os.path.isfile(os.path.join(path, RECORDS)) and \
                not os.path.isfile(os.path.join(path, PROVENANCE)):
            raise InputError(f"{path}: not a results directory (no {RECORDS})")
        prov = {}
        try:
            with open(os.path.join(path, PROVENANCE)) as f:
                prov = json.load(f)
        except (OSError, ValueError):
            pass
        return cls(path=path, experiment=prov.get("experiment", ""), run_id=prov.get("run_id", ""))

    @property
    def raw_dir(self) -> str:
        return os.path.join(self.path, "raw")

    def raw_path(self, name: str) -> str:
        """Absolute path for a raw output file; record it relative with :meth:`rel`."""
        return os.path.join(self.raw_dir, name)

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.path)

    def write_provenance(self, prov: Dict[str, Any]) -> None:
        """Write ``provenance.json``; a resumed run keeps the start times of its
        earlier sessions in ``sessions``."""
        prov = dict(prov, schema_version=self.schema_version, experiment=self.experiment,
                    run_id=self.run_id)
        old = self.provenance()
        sessions = list(old.get("sessions", []))
        if old.get("started") and old.get("started") != prov.get("started") \
                and old.get("started") not in sessions:
            sessions.append(old["started"])
        if sessions:
            prov["sessions"] = sessions
        with open(os.path.join(self.path, PROVENANCE), "w") as f:
            json.dump(prov, f, indent=1, sort_keys=True, default=str)

    def provenance(self) -> Dict[str, Any]:
        try:
            with open(os.path.join(self.path, PROVENANCE)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def append(self, params: Dict[str, Any], measurements: Dict[str, Any],
               raw: Iterable[str] = (), kind: str = "point", **extra: Any) -> Dict[str, Any]:
        """Append one record and flush it to disk."""
        rec = {"schema_version": self.schema_version, "experiment": self.experiment,
               "run_id": self.run_id, "kind": kind, "time": time.time(),
               "params": params, "measurements": measurements,
               "raw": [self.rel(p) if os.path.isabs(p) else p for p in raw]}
        rec.update(extra)
        with open(os.path.join(self.path, RECORDS), "a") as f:
            f.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return rec

    def records(self, kind: Optional[str] = None) -> List[Dict[str, Any]]:
        return list(iter_records(os.path.join(self.path, RECORDS), kind))

    def done_keys(self, kind: str = "point") -> set:
        return {point_key(r["params"]) for r in self.records(kind)}


def iter_records(path: str, kind: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """Read records; a torn last line (crash mid-write) is skipped, not fatal."""
    try:
        f = open(path)
    except FileNotFoundError:
        return
    with f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if kind is None or rec.get("kind") == kind:
                yield rec


def _out(argv: List[str], netns: Optional[str] = None) -> str:
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def git_commit() -> Optional[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = _out(["git", "-C", here, "rev-parse", "HEAD"])
    if not out:
        return None
    dirty = _out(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"])
    return out + ("-dirty" if dirty else "")


def collect_provenance(lab: Any = None, sysctls: Iterable[str] = (),
                       extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Machine and tool facts for a run, plus per-node sysctls, offloads and qdiscs."""
    from . import caps
    prov: Dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(), "kernel": platform.release(), "kernel_build": platform.version(),
        "machine": platform.machine(), "virtualization": _virtualization(),
        "cpus": os.cpu_count(), "cpu_model": _cpu_model(), "python": platform.python_version(),
        "versions": caps.versions(), "git_commit": git_commit(),
        "argv": list(__import__("sys").argv),
    }
    if lab is not None:
        nodes: Dict[str, Any] = {}
        for node in lab:
            if node.netns is None:
                continue
            info: Dict[str, Any] = {"netns": node.netns, "intfs": node.intfs, "addrs": node.addrs}
            host = getattr(node, "host", None)  # a node on another host (nslab.remote)
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
        ovs = getattr(lab, "extensions", {}).get("ovs")
        if ovs is not None and getattr(ovs, "uplinks", None):
            prov["lab"]["uplinks"] = {i: {"driver": _driver(None, i),
                                          "ethtool": snap.get("ethtool")}
                                      for i, snap in ovs.uplinks.items()}
    if extra:
        prov.update(extra)
    return prov


def _in_node(node: Any, argv: List[str]) -> str:
    """``argv``'s output in ``node`` (through SSH for a node on another host)."""
    if getattr(node, "host", None) is None:
        return _out(argv, node.netns)
    try:
        return node.run(argv, check=False, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001 - provenance is best effort
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
