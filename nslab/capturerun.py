"""Packet capture on a running lab, live: where its interfaces are now, and
dumpcap running inside a node's namespace, tagged with the lab's run.

Targets, filters and dumpcap's command line are :mod:`nslab.capture` (pure,
read by reports too); this module touches the running lab.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import IO, Any, Callable, Dict, List, Optional, Protocol, Sequence, Union

from .capture import READY, TOOL, LabMap, Where, packets_of
from .errors import InputError, LabError
from .fields import IFNAME_RE, NAME_RE
from .naming import ALIAS_PREFIX


def _ip_links(netns: Optional[str]) -> List[dict]:
    from .proc import run
    argv = ["ip", "-j", "link", "show"] if netns is None else \
        ["ip", "-n", netns, "-j", "link", "show"]
    res = run(argv, check=False)
    try:
        out = json.loads(res.stdout or "[]")
    except ValueError:
        return []
    return [x for x in out if isinstance(x, dict)] if isinstance(out, list) else []


def root_ports(run: str, links: Optional[List[dict]] = None) -> Dict[str, Dict[str, str]]:
    """``{node: {intf: device}}`` of the run's interfaces in the root
    namespace, from their ``ifalias nslab:<run>:<node>:<intf>``."""
    out: Dict[str, Dict[str, str]] = {}
    for link in _ip_links(None) if links is None else links:
        alias, dev = str(link.get("ifalias", "")), str(link.get("ifname", ""))
        parts = alias.split(":")
        if (alias.startswith(ALIAS_PREFIX) and len(parts) == 4 and parts[1] == run
                and NAME_RE.fullmatch(parts[2]) and IFNAME_RE.fullmatch(parts[3])
                and IFNAME_RE.fullmatch(dev)):
            out.setdefault(parts[2], {})[parts[3]] = dev
    return out


def load_topology(run: str) -> Optional[Any]:
    """The topology the lab ``run`` wrote beside its journal (bounded JSON),
    or None (a lab started by an older nslab: its namespaces are used)."""
    from . import bounded
    from .clean import topology_path
    from .topo import Topology
    try:
        data = bounded.load(topology_path(run))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise InputError(f"{topology_path(run)}: not a topology: {exc}") from None
    return Topology.from_dict(data)


def lab_map(run: str, nodes: Sequence[str]) -> LabMap:
    """The live map of lab ``run``: its topology (written beside its
    journal), its namespaces, its root-namespace ports; the interfaces in
    the namespaces of ``nodes`` (the only ones listed)."""
    from .clean import read_journal
    from .watch import namespaces
    topo = load_topology(run)
    journal = read_journal(run) or {}
    host = journal.get("host") if isinstance(journal.get("host"), str) else None
    nss = namespaces(run)
    roots = root_ports(run)
    links = [(a, ia, b, ib) for _, a, ia, b, ib in topo.interfaces()] if topo is not None else []
    every = list(topo.nodes) if topo is not None else sorted(set(nss) | set(roots))
    topo_intfs: Dict[str, List[str]] = {}
    for a, ia, b, ib in links:
        topo_intfs.setdefault(a, []).append(ia)
        topo_intfs.setdefault(b, []).append(ib)
    netns: Dict[str, Optional[str]] = {}
    ports: Dict[str, Dict[str, str]] = {}
    extra: Dict[str, List[str]] = {}
    for node in every:
        if node in nss:
            netns[node] = nss[node]
            if node in nodes:
                live = [str(x.get("ifname", "")).split("@")[0] for x in _ip_links(nss[node])]
                ports[node] = {i: i for i in topo_intfs.get(node, []) if i in live}
                if topo is None:
                    ports[node] = {i: i for i in live if i != "lo"}
                extra[node] = [i for i in live if i not in ports[node] and IFNAME_RE.fullmatch(i)]
        elif node in roots:
            netns[node] = None
            order = topo_intfs.get(node) or sorted(roots[node])
            ports[node] = {i: roots[node][i] for i in order if i in roots[node]}
    return LabMap(run, every, links, netns, ports, extra, host)


class Capture:
    """A running dumpcap, inside one namespace of a lab (or the root one),
    tagged with the lab's run (``NSLAB_RUN``): the lab's teardown and
    ``nslab clean`` stop it like any lab process.

    Args:
        where: what to capture (:func:`nslab.capture.resolve`).
        argv: dumpcap's command line (:func:`nslab.capture.dumpcap_argv`).
        run_id: the lab's run.
        stdout: where pcapng goes when ``argv`` writes to ``-`` (a file
            opened through :mod:`nslab.safeio`, or None: this process's stdout).
    """

    def __init__(self, where: Where, argv: Sequence[str], run_id: str,
                 stdout: Union[IO, int, None] = None) -> None:
        from .proc import Process
        self.where = where
        self.lines: List[str] = []
        self._ready = threading.Event()
        self.proc = Process(argv, netns=where.netns, run_id=run_id, stdout=stdout,
                            stderr=subprocess.PIPE, where=where.node, name=TOOL)
        self._reader = threading.Thread(target=self._read, name="dumpcap-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.proc.popen.stderr
        assert stream is not None
        for line in stream:
            line = line.rstrip("\n")
            self.lines.append(line[:500])
            del self.lines[:-200]  # a ring's "File: ..." lines: keep the last ones
            if line.startswith(READY):
                self._ready.set()
        self._ready.set()  # ended: wait_ready() looks at the exit

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until dumpcap captures; raise one line with its message if it
        ended first (an unknown interface, a filter it refuses)."""
        if not self._ready.wait(timeout):
            self.stop()
            raise LabError(f"dumpcap on {self.where.label} did not start capturing within "
                           f"{timeout:g} s")
        if any(l.startswith(READY) for l in self.lines):
            return
        self.proc.popen.wait()
        self._reader.join(timeout=5)
        raise self.failure()

    def failure(self) -> LabError:
        """The error dumpcap's output describes (a refused filter is the caller's input)."""
        msg = self.message() or f"exit {self.proc.popen.returncode}"
        if "capture filter" in msg:
            return InputError(f"capture filter refused by dumpcap on {self.where.label}: {msg}")
        return LabError(f"dumpcap on {self.where.label} failed: {msg}")

    def message(self) -> str:
        """dumpcap's own error message (its ``dumpcap: ...`` lines), if any."""
        said = [l.removeprefix("dumpcap: ").strip() for l in self.lines
                if l.startswith("dumpcap: ") or l.startswith("(")]
        return " ".join(s for s in said if s)[:300]

    @property
    def packets(self) -> Optional[int]:
        """How many packets dumpcap wrote (once it has ended), if it said."""
        return packets_of(self.lines)

    def alive(self) -> bool:
        return self.proc.alive()

    def stop(self, grace: float = 4.0) -> Optional[int]:
        """SIGINT (dumpcap finishes its file), then SIGTERM, then SIGKILL."""
        rc = self.proc.stop(grace)
        self._reader.join(timeout=5)
        return rc

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        try:
            rc = self.proc.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(timeout=5)
        return rc


def run_alive(run: str) -> bool:
    """Is the lab ``run`` still up (its owning process alive)?"""
    from .clean import read_journal, run_is_live
    return run_is_live(read_journal(run))


class Followed(Protocol):
    """What :func:`follow` needs of a capture: a :class:`Capture` here, or a
    :class:`nslab.captureremote.RemoteCapture` on another host."""

    def wait(self, timeout: Optional[float] = None) -> Optional[int]: ...

    def stop(self) -> Optional[int]: ...


def follow(cap: Followed, run: str, poll: float = 0.5, settle: float = 3.0,
           alive: Optional[Callable[[], bool]] = None,
           reader_gone: Optional[Callable[[], bool]] = None) -> str:
    """Wait until ``cap`` ends by itself (count, duration, its reader gone),
    the lab ends (then stop it), or ``reader_gone()`` says the pipe it writes
    into has no reader (then stop it: a dumpcap with nothing to capture would
    not find out); ``"done"``, ``"lab gone"`` or ``"reader gone"``. A dumpcap
    that failed is given ``settle`` seconds to see whether the lab is going
    (its teardown stops tagged processes before it removes the journal).
    ``alive()`` says whether the lab is up (default: its journal's owner
    lives)."""
    up = alive if alive is not None else (lambda: run_alive(run))
    while True:
        rc = cap.wait(timeout=poll)
        if rc is not None:
            deadline = time.monotonic() + (settle if rc not in (0, -2, -13) else 0.0)
            while up():
                if time.monotonic() >= deadline:
                    return "done"
                time.sleep(0.1)
            return "lab gone"
        if not up():
            cap.stop()
            return "lab gone"
        if reader_gone is not None and reader_gone():
            cap.stop()
            return "reader gone"


def pipe_closed(fd: int) -> bool:
    """Has the reader of the pipe (or socket) ``fd`` writes into gone? (poll
    reports an error or a hang-up on the writing end; a file never does)."""
    import select
    p = select.poll()
    p.register(fd, 0)  # POLLERR and POLLHUP are always reported
    try:
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except OSError:
        return False


def wait_started(caps: Sequence[Capture], timeout: float = 10.0) -> None:
    """Wait for every capture to start; stop them all and raise if one does not."""
    deadline = time.monotonic() + timeout
    try:
        for c in caps:
            c.wait_ready(max(0.1, deadline - time.monotonic()))
    except BaseException:
        for c in caps:
            c.stop()
        raise
