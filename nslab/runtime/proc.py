"""Running commands: argv lists only, in the root namespace or a named one.

Every process started here carries ``NSLAB_RUN=<run id>`` in its environment so
that ``nslab clean`` can find it after a crash and kill only what the lab started.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import (IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, TypeVar, Union)

from ..errors import CommandError, ReadinessError
from .netlink import attrs

log = logging.getLogger(__name__)

TAG_ENV = "NSLAB_RUN"
T = TypeVar("T")


@dataclass
class Result:
    """The outcome of a finished command."""

    argv: List[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def netns_argv(netns: Optional[str], argv: Sequence[str]) -> List[str]:
    """Prefix ``argv`` so that it runs inside the named network namespace."""
    argv = [str(a) for a in argv]
    if netns is None:
        return argv
    return ["ip", "netns", "exec", netns] + argv


def tagged_env(run_id: Optional[str], extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for a child: ours plus the run tag."""
    env = dict(os.environ)
    if run_id:
        env[TAG_ENV] = run_id
    if extra:
        env.update(extra)
    return env


#: Multiplies every timeout of :func:`run`, :meth:`Process.wait` and the
#: capability probes: the virtual RFC 2544 bed's guest sets it, because there a
#: read from the host's files lets the guest's instruction-counted clock jump
#: ahead (an idle vCPU skips to its next timer), so a command that takes a
#: second of the host's time can take a minute of the guest's.
TIMEOUT_SCALE_ENV = "NSLAB_TIMEOUT_SCALE"


def timeout_scale() -> float:
    """The factor :data:`TIMEOUT_SCALE_ENV` asks for (1 unless set to a number over 1)."""
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_SCALE_ENV, "1")))
    except ValueError:
        return 1.0


def scaled(timeout: Optional[float]) -> Optional[float]:
    """``timeout`` times :func:`timeout_scale` (None stays None)."""
    return None if timeout is None else timeout * timeout_scale()


def run(argv: Sequence[str], *, netns: Optional[str] = None, run_id: Optional[str] = None,
        check: bool = True, input: Optional[str] = None, timeout: Optional[float] = 60,
        env: Optional[Mapping[str, str]] = None, where: str = "") -> Result:
    """Run a command to completion and capture its output.

    Args:
        argv: the command as a list; never a shell string.
        netns: the named namespace to run it in (None: root namespace).
        run_id: the lab run that owns the process (sets ``NSLAB_RUN``).
        check: raise :class:`CommandError` on a non-zero exit.
        input: text fed to stdin.
        timeout: seconds before the command is killed and an error raised.
        env: extra environment variables.
        where: a short label (node name) for error messages.
    """
    full = netns_argv(netns, argv)
    log.debug("run%s: %s", f" [{netns}]" if netns else "", " ".join(full))
    try:
        # a tool's output is read as UTF-8, a stray byte replaced: iperf 2.2.1
        # printed one (0xa5) in a guest, and the whole alias client failed on it
        cp = subprocess.run(full, input=input, capture_output=True, text=True,
                            encoding="utf-8", errors="replace",
                            timeout=scaled(timeout), env=tagged_env(run_id, env))
    except FileNotFoundError as exc:
        raise CommandError(full, None, "", f"{exc.filename}: not found", where) from None
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise CommandError(full, None, out, f"timed out after {timeout} s", where) from None
    res = Result(full, cp.returncode, cp.stdout, cp.stderr)
    if check and cp.returncode != 0:
        raise CommandError(full, cp.returncode, cp.stdout, cp.stderr, where)
    return res


class Process:
    """A background process the lab started; stopped by PID with a signal ladder.

    In a named namespace it runs under ``ip netns exec`` (which also mounts the
    namespace's own ``/sys`` for it), or, with ``direct``, is forked from a
    thread that entered the namespace (``setns``): no ``ip`` to start first,
    but ``/sys`` shows what it shows the lab (for programs that need only the
    namespace's sockets and netlink, like nslab-pktgen's UDP paths)."""

    def __init__(self, argv: Sequence[str], *, netns: Optional[str] = None,
                 run_id: Optional[str] = None, stdout: Union[int, IO, None] = subprocess.PIPE,
                 stderr: Union[int, IO, None] = subprocess.PIPE,
                 env: Optional[Mapping[str, str]] = None, where: str = "",
                 name: str = "", stdin: Union[int, IO, None] = subprocess.DEVNULL,
                 direct: bool = False) -> None:
        self.argv = [str(a) for a in argv] if direct else netns_argv(netns, argv)
        self.where = where
        self.name = name or os.path.basename(str(argv[0]))
        log.debug("spawn%s: %s", f" [{netns}]" if netns else "", " ".join(self.argv))

        def spawn() -> "subprocess.Popen[str]":
            return subprocess.Popen(self.argv, stdin=stdin, stdout=stdout, stderr=stderr,
                                    text=True, encoding="utf-8", errors="replace",
                                    env=tagged_env(run_id, env), start_new_session=True)
        try:
            self.popen = _spawned_in(netns, spawn) if direct and netns else spawn()
        except FileNotFoundError as exc:
            raise CommandError(self.argv, None, "", f"{exc.filename}: not found", where) from None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def readline(self) -> str:
        """The next line of the process's output: ``""`` at its end, or if its
        output is not a pipe (``stdout=`` a file)."""
        out = self.popen.stdout
        return out.readline() if out is not None else ""

    def wait(self, timeout: Optional[float] = None) -> Result:
        """Wait for the process and return its result (output if it was piped)."""
        try:
            out, err = self.popen.communicate(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            self.stop()
            out, err = self.popen.communicate()
            raise CommandError(self.argv, None, out or "", f"timed out after {timeout} s",
                               self.where) from None
        return Result(self.argv, self.popen.returncode, out or "", err or "")

    def stop(self, grace: float = 2.0) -> Optional[int]:
        """SIGINT, then SIGTERM, then SIGKILL the process group; reap it."""
        if self.popen.poll() is not None:
            return self.popen.returncode
        for sig, wait in ((signal.SIGINT, grace / 2), (signal.SIGTERM, grace / 2),
                          (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                break
            try:
                return self.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        try:
            return self.popen.wait(timeout=1)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
            log.warning("process %s (%d) would not die", self.name, self.pid)
            return None


def stop_all(procs: Sequence["Process"], grace: float = 2.0) -> None:
    """Stop many processes at once: each signal of the ladder goes to every live
    process group, then one shared wait, so N processes cost one grace period."""
    live = [p for p in procs if p.popen.poll() is None]
    for sig, wait in ((signal.SIGINT, grace / 2), (signal.SIGTERM, grace / 2), (signal.SIGKILL, 5.0)):
        for p in live:
            try:
                os.killpg(p.popen.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            live = [p for p in live if p.popen.poll() is None]
            if live:
                time.sleep(0.02)
        if not live:
            break
    for p in procs:
        try:
            p.popen.wait(timeout=0.5)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
            log.warning("process %s (%d) would not die", p.name, p.pid)
        for stream in (p.popen.stdin, p.popen.stdout, p.popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def kill_pids(pids: Sequence[int], grace: float = 1.0) -> None:
    """TERM then KILL a list of PIDs (ones found by tag, not our children)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                if sig == signal.SIGTERM:  # a stopped process (paused_tree) acts on it
                    os.kill(pid, signal.SIGCONT)
                live.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if not live:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            live = [p for p in live if pid_running(p)]
            if not live:
                return
            time.sleep(0.05)
        pids = live


def process_start_time(pid: int) -> Optional[float]:
    """When the process started, in seconds since the machine booted (the
    ``starttime`` field of ``/proc/PID/stat``, in clock ticks), or None if it
    is gone.

    A pid together with its start time names one process for good: a pid
    reused by a later process has another start time. The time is counted from
    boot, never from the epoch: a start time in seconds since the epoch (boot
    time plus this, psutil's ``create_time``) moves whenever the wall clock is
    stepped, and a live run would then look dead to ``nslab clean`` (in CI a
    clean stopped a live run's guest so).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces and ")"
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[19]) / _CLOCK_TICKS  # fields[0] is field 3 (state): 22 is [19]
    except (IndexError, ValueError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Start times recorded by nslab before 2026-12 were seconds since the epoch;
#: no machine has been up this long.
_EPOCH_STARTS = 1e9


def same_process(pid: object, recorded: object) -> bool:
    """True if ``pid`` runs and is the process whose start time
    (:func:`process_start_time`) was ``recorded``. Both come from files, so
    anything that is not a pid and a time is no live process. A start time
    an older nslab recorded (seconds since the epoch) is compared as it was."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return False
    if recorded >= _EPOCH_STARTS:
        import psutil
        try:
            return bool(psutil.Process(pid).create_time() == recorded)
        except (psutil.Error, OSError):
            return False
    return process_start_time(pid) == recorded


def parse_steal(stat: str, ticks_per_s: int) -> Optional[int]:
    """The steal time of all CPUs together, in ns, from ``/proc/stat``'s
    first line (``cpu user nice system idle iowait irq softirq steal ...``,
    in ticks of ``ticks_per_s``); None when the line has no such field."""
    for line in stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            if len(parts) < 9 or ticks_per_s <= 0:
                return None
            try:
                return int(parts[8]) * 1_000_000_000 // ticks_per_s
            except ValueError:
                return None
    return None


def read_steal_ns(proc: str = "/proc") -> Optional[int]:
    """The hypervisor's steal of all CPUs together so far, in ns (:func:`parse_steal`
    of ``<proc>/stat``); None where it is not known."""
    try:
        with open(f"{proc}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return parse_steal(text, _CLOCK_TICKS)


def steal_pct(steal_ns: int, seconds: float, ncpus: int, floor: float = 1e-9) -> float:
    """``steal_ns`` of steal over ``seconds`` (at least ``floor``) as a share
    of ``ncpus`` CPUs (%); a counter that went back counts as none."""
    return max(0, steal_ns) / 1e9 / (max(seconds, floor) * max(1, ncpus)) * 100


def boot_clock() -> float:
    """Now, on the clock of :func:`process_start_time` (seconds since boot,
    ``CLOCK_BOOTTIME``), so that "started after this instant" compares like with like."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_name(pid: int) -> str:
    """The process's command name, or ``?`` if it is gone."""
    import psutil
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return "?"


def pid_running(pid: int) -> bool:
    """True if ``pid`` runs (a zombie, finished but not reaped, does not count)."""
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False


def pid_namespace(pid: Union[int, str] = "self") -> Optional[str]:
    """The PID namespace of ``pid`` (``pid:[inode]``), or None if it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def root_dir(pid: Union[int, str] = "self") -> Optional[Tuple[int, int]]:
    """The root directory of ``pid`` (its device and inode: a chroot's differs
    from the machine's), or None if it is gone."""
    try:
        st = os.stat(f"/proc/{pid}/root")
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pids_with_tag(run_id: Optional[str] = None, elsewhere: bool = False) -> Dict[int, str]:
    """PIDs whose environment carries ``NSLAB_RUN`` (any run, or ``run_id``),
    in this PID namespace and under this root directory only; with
    ``elsewhere``, those in this PID namespace under another root instead.

    nslab starts no PID namespace of its own and no chroot, so a tagged process
    in another PID namespace, or under another root directory (the Debian 13
    tier's chroot shares this machine's PIDs), was started by the nslab of
    another system sharing this kernel (a container, a test's pseudo-host with
    its own ``/run``, a chroot): its runs and their journals are that system's,
    and only that system's ``nslab clean`` can tell them live.
    """
    return tagged_pids(run_id)[1 if elsewhere else 0]


def tagged_pids(run_id: Optional[str] = None) -> Tuple[Dict[int, str], Dict[int, str]]:
    """Both sets of :func:`pids_with_tag` from one scan of the processes:
    those under this root directory, and those under another."""
    import psutil
    found: Tuple[Dict[int, str], Dict[int, str]] = ({}, {})
    me, here, root = os.getpid(), pid_namespace(), root_dir()
    for proc in psutil.process_iter(["environ"]):
        if proc.pid == me:
            continue
        env = proc.info.get("environ") or {}  # None: gone or not readable
        rid = env.get(TAG_ENV)
        if rid is None or (run_id is not None and rid != run_id) \
                or pid_namespace(proc.pid) != here:
            continue
        theirs = root_dir(proc.pid)
        if theirs is not None:
            found[1 if root is not None and theirs != root else 0][proc.pid] = rid
    return found


def where_is(proc: "Process") -> str:
    """Where a process that did not come up stands, for its error line: its
    exit status if it ended, else the program it runs now, its state and the
    kernel function it waits in (``/proc/<pid>/stat``, ``wchan``): a
    process still in ``ip netns exec`` never reached its own program."""
    rc = proc.popen.poll()
    if rc is not None:
        return f"it ended with exit status {rc}"
    base = f"/proc/{proc.pid}"
    try:
        with open(f"{base}/stat") as f:
            head, _, rest = f.read().rpartition(")")
        comm, state = head.partition("(")[2], rest.split()[0]
    except (OSError, IndexError):
        return "it is running, its state unknown"
    try:
        with open(f"{base}/wchan") as f:
            wchan = f.read().strip()
    except OSError:
        wchan = ""
    return (f"it is running as {comm!r}, state {state}"
            + (f", waiting in {wchan}" if wchan and wchan != "0" else ""))


def wait_path(path: str, timeout: float, what: str) -> None:
    """Wait until ``path`` exists (a socket, a ready file); raise naming ``what``."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise ReadinessError(f"{what} did not appear within {timeout} s ({path})")
        time.sleep(0.02)


def tree(pid: int, top: bool = True) -> List[Any]:
    """The ``psutil.Process`` of ``pid`` (unless not ``top``) and of each of
    its descendants, as they are now; empty if ``pid`` is gone."""
    import psutil
    try:
        p = psutil.Process(pid)
        return ([p] if top else []) + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def thread_ids(procs: Iterable[Any]) -> List[int]:
    """The thread ids of each of ``procs`` (``psutil.Process``), as they are
    now; a process that ended meanwhile has none."""
    import psutil
    out: List[int] = []
    for p in procs:
        try:
            out += [t.id for t in p.threads()]
        except psutil.NoSuchProcess:
            pass
    return out


def pin_threads(pid: int, cpus: "set[int]") -> Dict[int, "set[int]"]:
    """Pin every thread of ``pid`` to ``cpus``; returns each thread's former
    CPU set, for :func:`restore_threads`. Threads that end meanwhile are skipped."""
    former: Dict[int, "set[int]"] = {}
    for tid in thread_ids(tree(pid)[:1]):
        try:
            former[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            former.pop(tid, None)
    log.info("pinned %d threads of pid %d to CPUs %s", len(former), pid, sorted(cpus))
    return former


def restore_threads(former: Mapping[int, "set[int]"]) -> None:
    """Give threads pinned by :func:`pin_threads` their former CPU sets back."""
    for tid, cpus in former.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            pass


@contextlib.contextmanager
def paused_tree(pid: int, prefix: str = "") -> Iterator[List[int]]:
    """Stop (``SIGSTOP``) the descendants of ``pid`` whose process name
    starts with ``prefix`` (all of them, and ``pid`` first, without one) for
    the block, and continue them (``SIGCONT``) when it ends, however it ends;
    yields the PIDs stopped. For a guest whose clock counts instructions
    (``prefix="qemu"``): stopped, its answers do not move, and it takes no CPU
    time from what runs beside it, while the processes that watch it stay
    awake to stop it if their parent dies. Processes that end meanwhile are
    skipped."""
    import psutil
    stopped: List[int] = []
    try:
        for p in tree(pid, top=not prefix):
            try:
                if p.name().startswith(prefix):
                    p.send_signal(signal.SIGSTOP)
                    stopped.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        yield stopped
    finally:
        for p in reversed(stopped):
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass


def unidle_tree(pid: int, passes: int = 10) -> int:
    """Move every thread of ``pid`` and of all its descendants from the
    ``SCHED_IDLE`` policy to the caller's own (``SCHED_OTHER`` or
    ``SCHED_BATCH``; a real-time caller's becomes ``SCHED_OTHER``; nice
    unchanged); returns how many threads moved, none when the caller is at
    ``SCHED_IDLE`` itself (``chrt --idle 0 nslab reproduce``: the job it
    waits for then stays at the policy it asked for). Beside a task that
    wants its CPU all the time, a ``SCHED_IDLE`` thread gets next to nothing
    (0.3 % of the CPU here, beside one busy loop at nice 0), so a job that
    was to take only the time no other task wanted must leave that policy
    once it is the job left to wait for. A thread or child started
    meanwhile by a thread not yet moved inherits the idle policy, so the
    walk is repeated until a pass moves none (at most ``passes``); after
    such a pass every new thread inherits the new policy. Threads that end
    meanwhile are skipped."""
    mine = os.sched_getscheduler(0)
    if mine == os.SCHED_IDLE:
        return 0
    to = mine if mine in (os.SCHED_OTHER, os.SCHED_BATCH) else os.SCHED_OTHER
    moved = 0
    for _ in range(passes):
        this = 0
        for tid in thread_ids(tree(pid)):
            try:
                if os.sched_getscheduler(tid) == os.SCHED_IDLE:
                    os.sched_setscheduler(tid, to, os.sched_param(0))
                    this += 1
            except (ProcessLookupError, PermissionError):
                pass
        moved += this
        if not this:
            break
    return moved


# -- many namespaces at once --------------------------------------------------------
CLONE_NEWNET = 0x40000000


@dataclass
class NetnsJob:
    """One command to run inside one named namespace, or the root one if
    ``netns`` is None (see :func:`run_in_namespaces`)."""

    netns: Optional[str]
    argv: List[str]
    input: Optional[str] = None
    where: str = ""


def _setns(fd: int) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _enter(netns: str) -> None:
    """Move the calling thread into ``/run/netns/<netns>`` and prove it did.

    The proof (the thread's namespace inode equals the named one) matters: a
    command run after a silent failure would act on the host's namespace."""
    path = f"/run/netns/{netns}"
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(fd)
        want = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    if os.stat("/proc/thread-self/ns/net").st_ino != want:
        raise OSError(f"setns into {netns} did not take")


@contextlib.contextmanager
def _thread_namespace_restored() -> Iterator[int]:
    """For a worker thread that will ``setns``: yields a descriptor of the
    thread's namespace at entry, and moves the thread back there on exit."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield home
    finally:
        try:
            _setns(home)
        finally:
            os.close(home)


def _go(netns: Optional[str], home: int) -> None:
    """Move the calling thread into ``netns``, or back ``home`` for None."""
    if netns is None:
        _setns(home)
    else:
        _enter(netns)


def _spawned_in(netns: str, spawn: Callable[[], "subprocess.Popen[str]"]
                ) -> "subprocess.Popen[str]":
    """``spawn()`` called from a thread inside ``netns``: the child is born there."""
    got: Dict[str, Any] = {}

    def work() -> None:
        try:
            with _thread_namespace_restored() as home:
                _go(netns, home)
                got["p"] = spawn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            got["e"] = exc
    t = threading.Thread(target=work, name=f"spawn-{netns}")
    t.start()
    t.join()
    if "e" in got:
        raise got["e"]
    return got["p"]


def run_in_namespaces(jobs: Sequence[NetnsJob], run_id: Optional[str] = None,
                      workers: Optional[int] = None, timeout: float = 60) -> List[Result]:
    """Run every job to completion, each inside its namespace, a few at once.

    A worker thread enters the namespace (``setns``) and forks the command from
    there, so the child is born inside it. ``ip -n NS`` and ``ip netns exec``
    cost more per call: each builds a mount namespace and remounts ``/sys``
    (4-10 ms a call here, against ~1.2 ms this way with two workers). The
    commands must not need the namespace's ``/sys`` (``ip``, ``tc`` and
    ``/proc/sys`` writes do not).

    Returns the results in job order. Raises the first job's
    :class:`CommandError` (by job order) after every started job has ended;
    jobs not yet started are skipped after a failure (see
    :func:`in_each_namespace`, which runs them).
    """
    if not jobs:
        return []
    return in_each_namespace(
        jobs, lambda job: run(job.argv, run_id=run_id, input=job.input, timeout=timeout,
                              where=job.where or job.netns or "root"),
        "netns", workers or (os.cpu_count() or 1), netns_of=lambda job: job.netns)


# -- link state without a process per namespace --------------------------------------
_IFLA_IFNAME, _IFLA_OPERSTATE = 3, 16
#: ``IF_OPER_*`` values that mean frames flow: up, or unknown (lo, some virtual devices).
OPER_FLOWING = {6, 0}


def _nl_dump(msg_type: int, header: bytes) -> Iterator[bytes]:
    """The messages of one ``NETLINK_ROUTE`` dump request (``msg_type`` with its
    family header ``header``) in the calling thread's namespace: each message's
    bytes after the 16-byte netlink header."""
    NLM_F_REQUEST, NLM_F_DUMP, NLMSG_DONE, NLMSG_ERROR = 1, 0x300, 3, 2
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as s:
        s.send(struct.pack("=IHHII", 16 + len(header), msg_type, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
               + header)
        while True:
            data = s.recv(1 << 20)
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if length < 16 or kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    raise OSError(f"netlink dump {msg_type} failed")
                yield data[off + 16:off + length]
                off += (length + 3) & ~3


def _link_dump() -> Dict[str, Tuple[int, int]]:
    """``{ifname: (flags, operstate)}`` of the calling thread's namespace, from
    one ``RTM_GETLINK`` dump on a netlink socket (no process). Hand-rolled
    rather than pyroute2: its ``IPRoute()`` took ~2 ms to open per namespace,
    2 s for a 1000-host lab, where this takes ~70 ms."""
    RTM_GETLINK = 18
    out: Dict[str, Tuple[int, int]] = {}
    for msg in _nl_dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)):
        flags = struct.unpack_from("=I", msg, 8)[0]
        name, oper = None, 0
        for atype, val in attrs(msg, 16):
            if atype == _IFLA_IFNAME:
                name = val.split(b"\0", 1)[0].decode()
            elif atype == _IFLA_OPERSTATE:
                oper = val[0]
        if name is not None:
            out[name] = (flags, oper)
    return out


def parse_route_messages(messages: Iterable[bytes]) -> Dict[str, int]:
    """``{prefix: nexthops}`` of the IPv4 routes of the main table in
    ``RTM_NEWROUTE`` messages (bytes after the netlink header), as ``ip -j
    route show`` would count them: a multipath route's nexthops, 1 for a route
    via a gateway (IPv4 or, as BGP unnumbered installs, IPv6), 0 for a route
    on a link or a blackhole. Host routes are written with their /32."""
    RT_TABLE_MAIN = 254
    RTA_DST, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE, RTA_VIA = 1, 5, 9, 15, 18
    out: Dict[str, int] = {}
    for msg in messages:
        if len(msg) < 12:
            continue
        family, dst_len, _src, _tos, table = struct.unpack_from("=5B", msg)
        if family != 2:
            continue
        dst, hops = "0.0.0.0", 0
        for atype, val in attrs(msg, 12):
            if atype == RTA_TABLE and len(val) >= 4:
                table = struct.unpack_from("=I", val)[0]
            elif atype == RTA_DST and len(val) == 4:
                dst = ".".join(str(b) for b in val)
            elif atype in (RTA_GATEWAY, RTA_VIA):
                hops = max(hops, 1)
            elif atype == RTA_MULTIPATH:
                n, o = 0, 0
                while o + 8 <= len(val):
                    rtnh_len = struct.unpack_from("=H", val, o)[0]
                    if rtnh_len < 8:
                        break
                    n += 1
                    o += (rtnh_len + 3) & ~3
                hops = n
        if table != RT_TABLE_MAIN:
            continue
        out["default" if dst_len == 0 else f"{dst}/{dst_len}"] = hops
    return out


def nexthop_count(route: Dict) -> int:
    """Nexthops of one route of ``ip -j route show``: its list, or 1 via a gateway."""
    return len(route.get("nexthops", [])) or (1 if route.get("gateway") or route.get("via") else 0)


def ip_json_routes(text: str) -> Dict[str, int]:
    """``{prefix: nexthops}`` from ``ip -j route show`` output, counted as
    :func:`parse_route_messages` counts them."""
    out: Dict[str, int] = {}
    for r in json.loads(text or "[]"):
        dst = r["dst"]
        if dst != "default" and "/" not in dst:
            dst = f"{dst}/32"  # ip prints host routes without their /32
        out[dst] = nexthop_count(r)
    return out


def _route_dump() -> Dict[str, int]:
    """The calling thread's namespace's IPv4 main table, ``{prefix: nexthops}``,
    from one ``RTM_GETROUTE`` dump (no process)."""
    RTM_GETROUTE = 26
    return parse_route_messages(_nl_dump(RTM_GETROUTE, struct.pack("=8BI", socket.AF_INET,
                                                                   0, 0, 0, 0, 0, 0, 0, 0)))


def in_each_namespace(namespaces: Sequence[Any], fn: Callable[[Any], T], name: str,
                      workers: int = 1,
                      netns_of: Callable[[Any], Optional[str]] = lambda ns: ns) -> List[T]:
    """``fn(ns)`` called inside each namespace (None: the caller's), from
    ``workers`` threads (named ``name-K``) that enter them in turn (no
    process); the results in the order given. After a failure no namespace is
    started, and the failure of the earliest namespace is raised once every
    thread has ended.

    ``namespaces`` may hold other items (jobs), with ``netns_of(item)`` the
    namespace each one runs in; ``fn`` then gets the item."""
    out: Dict[int, T] = {}
    errors: Dict[int, BaseException] = {}
    todo = list(enumerate(namespaces))
    todo.reverse()
    lock = threading.Lock()

    def work() -> None:
        with _thread_namespace_restored() as home:
            while True:
                with lock:
                    if not todo or errors:
                        return
                    i, item = todo.pop()
                try:
                    _go(netns_of(item), home)
                    out[i] = fn(item)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    with lock:
                        errors[i] = exc

    threads = [threading.Thread(target=work, name=f"{name}-{k}", daemon=True)
               for k in range(max(1, min(workers, len(namespaces))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[min(errors)]
    return [out[i] for i in range(len(namespaces))]


def route_tables(namespaces: Sequence[Optional[str]]) -> List[Dict[str, int]]:
    """Each namespace's IPv4 main table as ``{prefix: nexthops}``, read from one
    thread that enters each in turn: no process per namespace (forking ``ip -j
    route`` in 64 busy namespaces, every quarter second, took CPU from the
    routers being waited for)."""
    return in_each_namespace(namespaces, lambda ns: _route_dump(), "netns-routes")


def links_not_flowing(namespaces: Sequence[Optional[str]],
                      only: Optional[Dict[Optional[str], Sequence[str]]] = None,
                      workers: int = 1) -> List[Tuple[Optional[str], str]]:
    """``(netns, ifname)`` of interfaces that are administratively up but whose
    operational state is not up yet (no carrier, or the kernel's link watcher
    has not activated their queue: frames sent meanwhile are dropped).

    Read from a thread inside each namespace, with no process per namespace.
    ``only``: per namespace, the interfaces to look at (default: all)."""
    IFF_UP = 1
    out: List[Tuple[Optional[str], str]] = []
    for ns, links in zip(namespaces, in_each_namespace(namespaces, lambda ns: _link_dump(), "netns-links",
                                                        workers)):
        want = None if only is None else set(only.get(ns, ()))
        out += [(ns, name) for name, (flags, oper) in links.items()
                if (want is None or name in want) and flags & IFF_UP and oper not in OPER_FLOWING]
    return out
