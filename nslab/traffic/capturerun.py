"""Packet capture on a running lab, live: where its interfaces are now, and
dumpcap running inside a node's namespace, tagged with the lab's run.

Targets, filters and dumpcap's command line are :mod:`nslab.traffic.capture` (pure,
read by reports too); this module touches the running lab.
"""
from __future__ import annotations

import json
import select
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from typing import IO, Callable, Dict, List, Optional, Protocol, Sequence, Union

from .capture import READY, TOOL, LabMap, Where, packets_of
from ..errors import InputError, LabError
from ..model.fields import IFNAME_RE, NAME_RE
from ..model.naming import ALIAS_PREFIX
from ..runtime.clean import read_topology as load_topology
from ..runtime.proc import run
from ..runtime import clean
from . import watch
from ..runtime.proc import Process


def _ip_links(netns: Optional[str]) -> List[dict]:
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


def lab_map(run: str, nodes: Sequence[str], peers: bool = False) -> LabMap:
    """The live map of lab ``run``: its topology (written beside its
    journal), its namespaces, its root-namespace ports; the interfaces in
    the namespaces of ``nodes`` (the only ones listed), and of the nodes
    linked to them with ``peers`` (``--as-wire`` changes both ends)."""
    topo = load_topology(run)
    journal = clean.read_journal(run) or {}
    host = journal.get("host") if isinstance(journal.get("host"), str) else None
    nss = watch.namespaces(run)
    roots = root_ports(run)
    links = [(a, ia, b, ib) for _, a, ia, b, ib in topo.interfaces()] if topo is not None else []
    if peers:
        nodes = list(nodes) + [b if a in nodes else a for a, _, b, _ in links
                               if (a in nodes) != (b in nodes)]
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


class CaptureProcess(ABC):
    """What a capture here (:class:`Capture`) and one on another host
    (:class:`nslab.traffic.captureremote.RemoteCapture`) offer: a process whose
    stderr a thread reads into ``lines``, waited for and stopped the same way.
    A subclass starts ``proc``, then :meth:`_read_stderr`, and says when it is
    ready and why it failed."""

    #: Seconds :meth:`stop` gives the process to finish by default.
    STOP_GRACE = 4.0
    #: How the line of its stderr that says it captures begins.
    READY_LINE: str
    #: What is captured, for messages (``h1:h1-eth0``, ``... on HOST``).
    label: str
    lines: List[str]
    proc: Process
    _ready: threading.Event
    _reader: threading.Thread

    @abstractmethod
    def wait_ready(self) -> None:
        """Wait until the capture captures; raise one line if it ended first."""

    @abstractmethod
    def message(self) -> str:
        """What the capture said when it failed, if anything."""

    @abstractmethod
    def failure(self) -> LabError:
        """The error the capture's output describes."""

    @property
    @abstractmethod
    def packets(self) -> Optional[int]:
        """How many packets it wrote (once it has ended), if it said."""

    def _read_stderr(self, name: str) -> None:
        """Start the thread (``name``) that reads the process's stderr into
        ``lines`` (the last 200, each cut at 500 characters)."""
        self.lines = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name=name, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.proc.popen.stderr
        assert stream is not None
        for line in stream:
            line = line.rstrip("\n")
            self.lines.append(self._kept(line[:500]))
            del self.lines[:-200]  # a ring's "File: ..." lines: keep the last ones
            if line.startswith(self.READY_LINE):
                self._ready.set()
        self._ready.set()  # ended: wait_ready() looks at the exit

    def _kept(self, line: str) -> str:
        """A line of stderr as ``lines`` keeps it."""
        return line

    def _cleanup(self) -> None:
        """What to release once the process has ended (nothing here)."""

    def _ended(self, rc: Optional[int]) -> Optional[int]:
        self._reader.join(timeout=5)
        self._cleanup()
        return rc

    def alive(self) -> bool:
        return self.proc.alive()

    def stop(self, grace: Optional[float] = None) -> Optional[int]:
        """Stop the process (:attr:`STOP_GRACE` seconds by default for it to finish
        its file: SIGINT, then SIGTERM, then SIGKILL)."""
        return self._ended(self.proc.stop(self.STOP_GRACE if grace is None else grace))

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Its exit status once it has ended, or None after ``timeout`` seconds."""
        try:
            rc = self.proc.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self._ended(rc)


class Capture(CaptureProcess):
    """A running dumpcap, inside one namespace of a lab (or the root one),
    tagged with the lab's run (``NSLAB_RUN``): the lab's teardown and
    ``nslab clean`` stop it like any lab process.

    Args:
        where: what to capture (:func:`nslab.traffic.capture.resolve`).
        argv: dumpcap's command line (:func:`nslab.traffic.capture.dumpcap_argv`).
        run_id: the lab's run.
        stdout: where pcapng goes when ``argv`` writes to ``-`` (a file
            opened through :mod:`nslab.safeio`, or None: this process's stdout).
    """

    READY_LINE = READY

    def __init__(self, where: Where, argv: Sequence[str], run_id: str,
                 stdout: Union[IO, int, None] = None) -> None:
        self.where = where
        self.label = where.label
        self.proc = Process(argv, netns=where.netns, run_id=run_id, stdout=stdout,
                            stderr=subprocess.PIPE, where=where.node, name=TOOL)
        self._read_stderr("dumpcap-stderr")

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until dumpcap captures; raise one line with its message if it
        ended first (an unknown interface, a filter it refuses)."""
        if not self._ready.wait(timeout):
            self.stop()
            raise LabError(f"dumpcap on {self.where.label} did not start capturing within "
                           f"{timeout:g} s")
        if any(l.startswith(READY) for l in self.lines):
            return
        self._ended(self.proc.popen.wait())
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


def run_alive(run: str) -> bool:
    """Is the lab ``run`` still up (its owning process alive)?"""
    return clean.run_is_live(clean.read_journal(run))


class Followed(Protocol):
    """What :func:`follow` needs of a capture: a :class:`Capture` here, or a
    :class:`nslab.traffic.captureremote.RemoteCapture` on another host."""

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
