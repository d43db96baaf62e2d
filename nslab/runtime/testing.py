"""Pytest helpers for lab tests, the way nslab's own integration tests are written.

In a ``conftest.py``::

    pytest_plugins = ["nslab.runtime.testing"]

then::

    from nslab.runtime.testing import needs

    @needs("iperf", "netem")
    def test_delay(make_lab):
        lab = make_lab(pair(delay="5ms"))
        lab["h1"].run(["ping", "-c1", lab["h2"].ip])

Labs made by ``make_lab`` are always torn down, pass or fail, and the test
fails if a run left a tagged object behind.

``needs(...)`` takes tools (``iperf``, ``ovs-vsctl``) and capabilities as
``nslab doctor`` names them (``root``, ``netem``, ``ovs_kernel``, ``vrf``...).
A missing one skips the test with the reason, except where the environment
says the machine has a stock kernel (``NSLAB_STOCK_KERNEL=1``, set by ``make
test-kernel`` inside its guest): there a missing capability fails the test, so
that a feature is never reported as tested when it was not.

SIGTERM and SIGHUP end a run as Ctrl-C does, through every teardown (where
they were at their defaults: a run under ``nohup`` keeps SIGHUP ignored). A
run spread over workers (pytest-xdist) ends its workers as xdist does.

A test marked ``quiet`` whose call fails while the hypervisor steals CPU
time (5 % of the CPUs or more in some second), and whose set-up and
teardown passed, runs again, at most twice (:func:`pytest_runtest_protocol`).

Markers (registered here): ``root`` (skipped without root), ``slow``,
``kernel`` (needs a stock kernel's features or depends on the kernel; run by
``make test-kernel`` on every stock kernel), ``guest`` (a flow that runs here
and again in the stock-kernel guest of the last kernel, Debian 13's by
default), ``vm`` (starts QEMU guests itself; run by ``make test-kernel``),
``versioned`` (exercises a tool or library whose version differs between
Debian 12 and 13: the Debian 13 tier runs the unit tier and these; every
other integration and smoke test runs once, in the host tier).
"""
from __future__ import annotations

import os
import shutil
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import pytest

from .clean import discover
from .lab import Lab
from ..model.topo import Topology
from . import caps as capsmod

STOCK_KERNEL_ENV = "NSLAB_STOCK_KERNEL"
#: Set to ``debian13`` by ``make test-debian13``: there, integration and smoke tests
#: not marked ``versioned`` skip (they ran in the host tier).
TIER_ENV = "NSLAB_TIER"
MARKERS = {
    "root": "needs root and real network tooling (skipped without root)",
    "slow": "takes more than a few seconds",
    "kernel": "needs features of stock kernels (netem, the openvswitch module, ...) or depends "
              "on the kernel (which sysctls it namespaces): skipped where a feature is missing, "
              "run by `make test-kernel` in the guest of every stock kernel",
    "guest": "a flow that runs on this host and again in `make test-kernel`'s guest of the "
             "last kernel of KERNEL_DISTS (Debian 13's, with its userland, by default)",
    "vm": "starts QEMU guests (two boxes, real NIC drivers): run by `make test-kernel`",
    "needs": "needs(*tools_or_capabilities): skip (or fail on a stock kernel) when missing",
    "quiet": "reads a CPU's idle time as a measure (the real RFC 2544 bed's DUT occupancy): "
             "`make test` runs these while nothing else runs, not even at idle priority",
    "timed": "asserts a wall-clock time (a server stops within 2 s of a signal, a sender "
             "ends with its trial): Debian 13's unit tier runs at the idle policy beside the "
             "host's labs, where a process can wait seconds for a CPU, so `make test` runs "
             "these there apart, at normal priority (TIMED=skip, then TIMED=only)",
    "versioned": "exercises a tool or library whose version differs between Debian 12 and 13 "
                 "(FRR, OVS, iperf, iproute2, ethtool, dumpcap, OpenSSH, Python and mininet, "
                 "the C toolchain): runs in the host tier and again in the Debian 13 tier "
                 "(NSLAB_TIER=debian13), where the integration and smoke tests without it "
                 "skip: what they check is nslab's own logic, run once, in the host tier",
}


def stock_kernel() -> bool:
    """True inside ``make test-kernel``'s guest: missing features are failures there."""
    return os.environ.get(STOCK_KERNEL_ENV) == "1"


def needs(*names: str) -> "pytest.MarkDecorator":
    """Mark a test as needing tools and/or capabilities (see the module docstring)."""
    return pytest.mark.needs(*names)


def missing(names: Tuple[str, ...]) -> List[str]:
    """Which of ``names`` this machine lacks (tools by PATH, the rest by the probe)."""
    out = []
    caps = None
    for name in names:
        if name == "root":
            if os.geteuid() != 0:
                out.append("root")
            continue
        if shutil.which(name) or os.path.exists(name):
            continue
        if os.geteuid() != 0:
            out.append(name)
            continue
        if caps is None:
            caps = capsmod.probe()
        cap = caps.get(name) or caps.get(f"tool:{name}")
        if cap is None or not cap.ok:
            out.append(name)
    return out


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


#: The handlers :func:`pytest_configure` replaced, restored at the end
_REPLACED: Dict[int, Any] = {}


def pytest_configure(config: "pytest.Config") -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # SIGTERM and SIGHUP end a run like Ctrl-C, through every test's teardown:
    # by default they end Python at once, and a test's guests (QEMU in
    # sessions of their own, which no run tag names) and labs outlived it.
    # Only a signal still at its default is taken (one ignored, as under
    # nohup, or handled by the caller stays so), and only in the main thread.
    import signal
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            _REPLACED[sig] = signal.signal(sig, _interrupted)


def pytest_unconfigure(config: "pytest.Config") -> None:
    import signal
    while _REPLACED:
        sig, old = _REPLACED.popitem()
        signal.signal(sig, old)


def once_here(item: "pytest.Item") -> bool:
    """True for a test that runs once, in the host tier, and skips here: in the
    Debian 13 tier, an integration or smoke test not marked ``versioned``."""
    if os.environ.get(TIER_ENV) != "debian13" or item.get_closest_marker("versioned"):
        return False
    where = str(getattr(item, "path", item.fspath)).replace(os.sep, "/")
    return "/tests/integration/" in where or "/tests/smoke/" in where


def pytest_runtest_setup(item: "pytest.Item") -> None:
    if once_here(item):
        pytest.skip("runs once, in the host tier (not marked versioned: what it checks is "
                    "nslab's own logic, not a tool's version)")
    wanted: Tuple[str, ...] = ()
    if item.get_closest_marker("root") is not None:
        wanted += ("root",)
    for mark in item.iter_markers("needs"):
        wanted += tuple(mark.args)
    if not wanted:
        return
    lack = missing(tuple(dict.fromkeys(wanted)))
    if not lack:
        return
    if lack == ["root"] or "root" in lack:
        pytest.skip("needs root (network namespaces)")
    if stock_kernel():
        pytest.fail(f"the stock kernel under test lacks {', '.join(lack)}")
    hint = " (run `make test-kernel` for a stock kernel)" \
        if item.get_closest_marker("kernel") is not None else ""
    pytest.skip(f"needs {', '.join(lack)}{hint}")


#: A test marked ``quiet`` (:func:`watched`) that fails while the
#: hypervisor withheld at least this share of the CPUs (%) over some second
#: of it is run again. Idle here, one second's steal peaks at 1 %; in the
#: quiet tier's tests of 2 s or more, at 0-19 %; in one CI run a burst of
#: 27 % over an iperf run held a shaped link's TCP at 757-771 Mbit/s (941
#: quiet).
STEAL_RERUN_PCT = 5.0
#: at most this many runs again, each only after a disturbed failure
STEAL_RERUNS = 2
#: the steal sampler's period (s): one second's share is its peak
STEAL_SAMPLE_S = 1.0


class StealWatch:
    """The hypervisor's steal while a block runs (``/proc/stat``, every CPU),
    sampled every ``every`` seconds in a thread: ``total`` over the block and
    ``peak``, the largest one period's, each as a share of all CPUs (%); both
    None where the kernel does not say. The part after the last sample, and
    a block shorter than a period, count as a whole period (the kernel
    counts steal in whole ticks: one of 10 ms in a block of 20 ms is not
    half of the machine gone). :meth:`mark` keeps the peak up to now
    (``marked``): the end of a test's call, before its teardown."""

    def __init__(self, every: Optional[float] = None,
                 read: Optional[Callable[[], Optional[int]]] = None) -> None:
        from .proc import read_steal_ns
        self.every = STEAL_SAMPLE_S if every is None else every
        self.read = read or read_steal_ns
        self.ncpus = os.cpu_count() or 1
        self.total: Optional[float] = None
        self.peak: Optional[float] = None
        self.marked: Optional[float] = None
        self.first: Optional[Tuple[float, int]] = None
        self.last: Optional[Tuple[float, int]] = None
        self._lock = threading.Lock()

    def _share(self, a: Tuple[float, int], b: Tuple[float, int], floor: float = 1e-9) -> float:
        from .proc import steal_pct
        return steal_pct(b[1] - a[1], b[0] - a[0], self.ncpus, floor)

    def _sample(self) -> Optional[Tuple[float, int]]:
        import time
        steal = self.read()
        return None if steal is None else (time.monotonic(), steal)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            now = self._sample()
            with self._lock:
                if now is None or self.last is None:
                    return
                self.peak = max(self.peak or 0.0, self._share(self.last, now))
                self.last = now

    def _peak_until(self, now: Optional[Tuple[float, int]]) -> Optional[float]:
        """The peak with the part since the last sample, as one period's."""
        if now is None or self.last is None:
            return self.peak
        return max(self.peak or 0.0, self._share(self.last, now, self.every))

    def mark(self) -> None:
        """Keep the peak up to now in ``marked``."""
        with self._lock:
            self.marked = self._peak_until(self._sample())

    def __enter__(self) -> "StealWatch":
        self.first = self.last = self._sample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steal-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        end = self._sample()
        if self.first is not None and end is not None:
            self.total = self._share(self.first, end, self.every)
            self.peak = self._peak_until(end)

    def says(self, to_mark: bool = False) -> str:
        """The steal in words, for a report; ``to_mark``: the peak up to
        :meth:`mark` (where it was marked)."""
        peak, until = ((self.marked, " up to the call's end") if to_mark and self.marked is not None
                       else (self.peak, ""))
        if peak is None or self.total is None:
            return "steal not known"
        return (f"the hypervisor stole {peak:.1f} % of the CPUs in the worst "
                f"{self.every:g} s{until} ({self.total:.1f} % over the whole run)")


def watched(item: "pytest.Item") -> bool:
    """Whether a failure of ``item`` under the hypervisor's steal runs it
    again: the tests marked ``quiet`` (they measure rates and CPU time with
    nothing else running). Not other tests: a functional test's
    intermittent failure must show, whatever the steal."""
    return item.get_closest_marker("quiet") is not None


#: the watch over the test running now (its call marks the peak at its end)
_WATCH = pytest.StashKey["StealWatch"]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: "pytest.Item") -> Iterator[None]:
    yield  # (an old-style wrapper: it goes on after the call, failed or not)
    watch = item.stash.get(_WATCH, None)
    if watch is not None:
        watch.mark()


def _rearm_timeout(item: "pytest.Item") -> None:
    """pytest-timeout arms one timer around a test's whole protocol and
    cancels it at its first failure (``pytest_exception_interact``): each
    run again gets a timer of its own."""
    plugin = item.config.pluginmanager.get_plugin("timeout")
    settings = getattr(plugin, "_get_item_settings", lambda item: None)(item)
    if settings is not None and settings.timeout and settings.timeout > 0 \
            and not settings.func_only:
        item.config.hook.pytest_timeout_cancel_timer(item=item)
        item.config.hook.pytest_timeout_set_timer(item=item, settings=settings)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: "pytest.Item", nextitem: Optional["pytest.Item"]) -> Optional[bool]:
    """Tests marked ``quiet`` (:func:`watched`) run under a
    :class:`StealWatch`. One whose call fails while the hypervisor stole at
    least ``STEAL_RERUN_PCT`` % of the CPUs in some second up to the call's
    end, and whose set-up and teardown passed, runs again, at most
    ``STEAL_RERUNS`` times, each under a timeout of its own: a bed the host
    took from gives no verdict. Its assertions are unchanged, a failure
    with no such steal stands at once, and the last run's result is the
    test's; each disturbed run is said on the terminal and in the report's
    sections (its captured output labelled with its run), and every run's
    steal is a JUnit property (``steal``)."""
    if not watched(item):
        return None
    from _pytest.runner import runtestprotocol
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    said: List[str] = []
    for attempt in range(1, STEAL_RERUNS + 2):
        if attempt > 1:
            _rearm_timeout(item)
        before = len(item._report_sections)
        with StealWatch() as watch:
            item.stash[_WATCH] = watch
            try:
                reports = runtestprotocol(item, nextitem=nextitem, log=False)
            finally:
                del item.stash[_WATCH]
        peak = watch.marked if watch.marked is not None else watch.peak
        said.append(f"run {attempt}: {watch.says(to_mark=True)}")
        failed = any(r.failed for r in reports if r.when == "call")
        clean = not any(r.failed for r in reports if r.when != "call")
        if not (failed and clean and peak is not None and peak >= STEAL_RERUN_PCT) \
                or attempt > STEAL_RERUNS:
            break
        said[-1] += ": failed on a disturbed bed, run again"
        item._report_sections[before:] = [(f"{when} (run {attempt})", key, text) for
                                          when, key, text in item._report_sections[before:]]
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"{item.nodeid}: {said[-1]}", yellow=True)
    for r in reports:
        if len(said) > 1:
            r.sections.append(("quiet: runs on a disturbed bed", "\n".join(said)))
        if r.when == "teardown":
            r.user_properties.append(("steal", "; ".join(said)))
        item.ihook.pytest_runtest_logreport(report=r)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """A factory: ``make_lab(topology, **kwargs)`` returns a started :class:`Lab`."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    labs: List[Lab] = []

    def _make(topology: Topology, **kwargs: Any) -> Lab:
        lab = Lab(topology, **kwargs)
        lab.start()
        labs.append(lab)
        return lab

    yield _make
    for lab in reversed(labs):
        lab.stop()
    leftovers = {r: i.describe() for r, i in discover().items()
                 if r in {lab.run_id for lab in labs} and not i.empty}
    assert not leftovers, f"lab objects left behind: {leftovers}"


def left_behind() -> Dict[str, Any]:
    """Every run that left tagged objects and whose owner is gone
    (:func:`~nslab.runtime.clean.discover`, less the runs a live process
    owns: another test's lab, or a guest `make test` runs beside the tests):
    what a test that killed or tore down its labs expects to be empty."""
    return {r: i for r, i in discover().items()
            if not i.empty and not _owned(i.journal, i.controller)}


def _owned(journal: Any, controller: Any) -> bool:
    """Whether a live process owns a run, by its journal or its controller
    record (what a run's tagged objects and state files are spared for)."""
    from .clean import run_is_live
    return bool(run_is_live(journal) or run_is_live(controller))


def state_left(before: Set[str]) -> Set[str]:
    """Names in the state directory (``/run/nslab``) that are not in
    ``before``, less those of runs a live process owns (journal or controller:
    another test's lab, or the virtual bed's guest `make test` runs beside the
    tests, which may start a run while a test counts what it left)."""
    from ..model.naming import RUN_RE, STATE_DIR
    from .clean import read_controller, read_journal
    try:
        now = set(os.listdir(STATE_DIR))
    except OSError:
        return set()
    out = set()
    for name in now - before:
        rid = name.split(".", 1)[0]
        if RUN_RE.fullmatch(rid) and _owned(read_journal(rid), read_controller(rid)):
            continue
        out.add(name)
    return out


def hold_rx_timestamps() -> Any:
    """A socket that asks for receive timestamps, to keep open while tests run
    in a guest under QEMU's TCG (close it at the end).

    The kernel switches its time-stamping of received packets on and off (the
    static key ``netstamp_needed_key``) as the first socket asking for it opens
    and the last closes: every iperf server's TCP connection does (iperf 2.1.8
    and 2.2.1 both set ``SO_TIMESTAMP``), so the key flips many times a test.
    Each flip patches live kernel code on every CPU; under TCG with two vCPUs a
    CPU met a patch point mid-flip and the Debian 13 guest kernel died (``Oops:
    int3`` in ``netif_rx_internal``, then a panic: seen once in two guest runs
    here). Real CPUs and KVM do not do that. One socket held for the whole run
    keeps the key on, so it is patched once, before any test."""
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMP", 29), 1)
    return s


def junit_summary(path: str, width: int = 400) -> List[str]:
    """What a pytest JUnit XML file says, in a few lines: the counts, then
    ``FAILED``/``ERROR`` with the test's id and its failure's message (folded
    onto one line, cut at ``width``) for each test that did not pass.

    Made for the end of a long CI log, where only the last lines may be read:
    ``make test-kernel`` prints one per tier. A missing or unreadable file is
    said as such (a guest that timed out or died writes none).
    """
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        return [f"no JUnit XML ({e.__class__.__name__}: {path})"]
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    bad: List[str] = []
    for case in root.iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/")
        test = f"{module}.py::{case.get('name')}" if module else str(case.get("name"))
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        kind = {"failure": "failed"}.get(kind, kind)
        counts[kind] += 1
        if kind in ("failed", "error"):
            el = case.find("failure" if kind == "failed" else "error")
            msg = " ".join(((el.get("message") if el is not None else "") or "").split())
            if el is not None and msg in ("", "collection failure"):  # say the cause
                last = [l.strip() for l in (el.text or "").splitlines() if l.strip()]
                msg = " ".join(filter(None, [msg, last[-1] if last else ""]))
            if len(msg) > width:
                msg = msg[:width - 3] + "..."
            bad.append(f"{'FAILED' if kind == 'failed' else 'ERROR'} {test}: {msg}")
    line = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no tests"
    return [line] + bad


def console_trouble(text: str, most: int = 4) -> List[str]:
    """The lines of a guest's serial console that say its kernel failed: the
    first oops or BUG and where (its ``RIP``, the task), and a panic, without
    the timestamps. Empty when the kernel said nothing of the kind."""
    import re
    keep = re.compile(r"(Oops:|BUG:|Kernel panic|RIP: 0010:|CPU: \d+ (UID: \d+ )?PID: \d+ Comm: |"
                      r"general protection fault|watchdog: BUG)")
    out: List[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\[\s*\d+\.\d+\]\s*", "", line).strip()
        if keep.search(line) and line not in out:
            out.append(line)
            if len(out) >= most:
                break
    panic = next((l for l in (re.sub(r"^\[\s*\d+\.\d+\]\s*", "", x).strip()
                              for x in text.splitlines()) if l.startswith("Kernel panic")), None)
    if panic and panic not in out:
        out[-1:] = [panic]
    return out
