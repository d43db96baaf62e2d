"""Host interference accounting on captured /proc data (tests/data/proc, made
by its capture.py on the development VM), and the RFC 2544 rules built on it."""
import os

import pytest

from nslab.traffic.interference import (SchedTimes, Snapshot, Task, Watch, account, others_share,
                                        parse_cpu_list, parse_task_schedstat, top_others, worst)
from nslab.experiments.rfc2544.model import baseline_of, cost_unmeasured, disturbed
from nslab.store.reporting import named

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "proc")
KERNELS = sorted(d for d in os.listdir(DATA) if os.path.isdir(os.path.join(DATA, d)))


def roles(kdir):
    with open(os.path.join(kdir, "roles")) as f:
        return {k: int(v) for k, v in (line.split() for line in f)}


def snap(kdir, which, root_pid):
    s = Watch([0, 1], proc=os.path.join(kdir, which), root_pid=root_pid).snapshot()
    with open(os.path.join(kdir, which, "t")) as f:
        s.t = float(f.read())
    return s


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_hog_pinned_to_cpu1_shows_as_half_of_cpu1_and_not_on_cpu0(kernel):
    kdir = os.path.join(DATA, kernel)
    r = roles(kdir)
    # Nothing is the bed's but the softirq threads (root 0: no harness tree).
    a, b = snap(kdir, "a", 0), snap(kdir, "b", 0)
    assert {r["hog"], r["self"], r["idle"]} <= set(a.tasks)
    assert a.tasks[r["hog"]].cpus == frozenset({1}) and a.tasks[r["self"]].cpus == frozenset({0})
    assert not a.tasks[r["hog"]].bed
    found = account(a, b, [0, 1])
    hog_ms = (b.tasks[r["hog"]].times.run_ns - a.tasks[r["hog"]].times.run_ns) / 1e6
    # The hog spins 10 ms of every 20: about half the window.
    assert 0.4 <= hog_ms / 1000 / found[1].window_s <= 0.6
    # CPU1's others: the hog and the sleeper (allowed everywhere: an upper bound)
    idle_ms = (b.tasks[r["idle"]].times.run_ns - a.tasks[r["idle"]].times.run_ns) / 1e6
    assert found[1].other_ms == pytest.approx(hog_ms + idle_ms)
    assert 40 <= found[1].other_pct <= 60
    # CPU0 saw only the capturing process (not the bed here) and the sleeper.
    assert found[0].other_pct < 10
    assert worst(found) == (1, found[1].other_pct)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_harness_tree_is_the_beds_own(kernel):
    kdir = os.path.join(DATA, kernel)
    r = roles(kdir)
    # With the capturing process as the harness, its children (the hog, the
    # sleeper) are the bed's: nothing else ran on CPU1.
    a, b = snap(kdir, "a", r["self"]), snap(kdir, "b", r["self"])
    assert a.tasks[r["hog"]].bed and a.tasks[r["self"]].bed
    # each thread's process, parent and start, from its stat (fields 4, 22)
    with open(os.path.join(kdir, "a", str(r["hog"]), "task", str(r["hog"]), "stat")) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    hog = a.tasks[r["hog"]]
    assert (hog.pid, hog.ppid, hog.start) == (r["hog"], int(fields[1]), int(fields[19]))
    assert hog.ppid == r["self"] and hog.start > 0
    found = account(a, b, [0, 1])
    assert found[1].other_ms == 0 and found[0].other_ms == 0


def test_task_schedstat_and_cpu_lists():
    assert parse_task_schedstat("42899459 791373 40\n").run_ns == 42899459
    assert parse_task_schedstat("42899459 791373 40\n").wait_ns == 791373
    with pytest.raises(ValueError):
        parse_task_schedstat("")
    assert parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert parse_cpu_list("1") == {1}


def task(run_ms, cpus, bed=False, wait_ms=0, name=""):
    return Task(SchedTimes(int(run_ms * 1e6), int(wait_ms * 1e6)), frozenset(cpus), bed, name)


def test_the_other_tasks_that_took_the_time_are_named_largest_first():
    a = Snapshot(0.0, {1: task(0, {1}, bed=True, name="nslab-pktgen"),
                       2: task(0, {0, 1}, name="chromium"), 3: task(0, {1}, name="kworker/1:0"),
                       4: task(0, {1}, name="kworker/1:2"), 5: task(0, {0}, name="apt")})
    b = Snapshot(1.0, {1: task(900, {1}, bed=True, name="nslab-pktgen"),
                       2: task(120, {0, 1}, name="chromium"),
                       3: task(5, {1}, name="kworker/1:0"), 4: task(4, {1}, name="kworker/1:2"),
                       5: task(300, {0}, name="apt"), 6: task(0, {1}, name="idle-born")})
    found = account(a, b, [0, 1])
    # the bed's own thread is never named; a kernel worker's threads add up by CPU
    assert found[1].top == (("chromium", 120.0), ("kworker/1", 9.0))
    assert found[0].top[0] == ("apt", 300.0)
    assert found[1].as_dict()["top"] == [["chromium", 120.0], ["kworker/1", 9.0]]
    assert top_others(a, b, 2) == (("apt", 300.0), ("chromium", 120.0))
    # the reason a trial gives names them, as a record stores them
    why = disturbed({"dut": found[1].as_dict(), "gen": {"other_pct": 0}}, 5.0)
    assert why == ("host interference: 13 % of the DUT CPU's time went to other tasks "
                   "(over 5 %; most to chromium (120 ms), kworker/1 (9 ms))")
    assert named([]) == "" and named(None) == "" and named([["x"]]) == ""
    assert named([["apt", 12.4], ["memfd:sealed-91", 0.2]]) == "most to apt (12 ms)"


def test_a_thread_born_inside_the_window_counts_from_zero_and_each_once_in_the_share():
    a = Snapshot(0.0, {1: task(100, {1}, bed=True), 2: task(50, {0, 1})})
    b = Snapshot(1.0, {1: task(500, {1}, bed=True, wait_ms=3), 2: task(250, {0, 1}),
                       3: task(400, {1})})  # 3: a hog started mid-window
    found = account(a, b, [0, 1])
    assert found[1].other_ms == pytest.approx(200 + 400) and found[0].other_ms == pytest.approx(200)
    assert found[1].bed_wait_ms == pytest.approx(3) and found[1].other_pct == pytest.approx(60)
    # over both CPUs each thread counts once: (200 + 400) ms of 2 CPU-seconds
    assert others_share(a, b, 2) == pytest.approx(30.0)
    assert others_share(a, a, 2) == 0.0


def test_the_lab_s_own_wait_bounds_what_other_tasks_took_from_it():
    """The bed's threads' wait for a CPU, summed, over all CPUs: a thread born
    inside the window counts from zero; other tasks' waits are not the lab's."""
    from nslab.traffic.interference import bed_wait_share, displaced_share, top_bed_waits
    a = Snapshot(0.0, {1: task(100, {1}, bed=True, wait_ms=10), 2: task(50, {0, 1}, wait_ms=5)})
    b = Snapshot(2.0, {1: task(500, {1}, bed=True, wait_ms=50), 2: task(950, {0, 1}, wait_ms=900),
                       3: task(10, {0}, bed=True, wait_ms=40)})
    # (40 + 40) ms of 4 CPU-seconds; the hog's own 895 ms of waiting is not the lab's
    assert bed_wait_share(a, b, 2) == pytest.approx(2.0)
    assert bed_wait_share(a, a, 2) == 0.0
    # the hog ran 900 ms of the 4 CPU-seconds (22.5 %), but the lab waited 2 %
    assert others_share(a, b, 2) == pytest.approx(22.5)
    assert displaced_share(22.5, 2.0) == 2.0 and displaced_share(3.0, 40.0) == 3.0
    # the lab's SCHED_IDLE thread (the virtual RFC 2544 bed's QEMU beside the
    # other studies) waits whenever anything runs: by design, not counted
    a.tasks[4] = Task(SchedTimes(0, 0), frozenset({0, 1}), True, "qemu", idle=True)
    b.tasks[4] = Task(SchedTimes(10**9, 2 * 10**9), frozenset({0, 1}), True, "qemu", idle=True)
    assert bed_wait_share(a, b, 2) == pytest.approx(2.0)
    assert [n for n, _ in top_bed_waits(a, b)] == ["?"]


def _captured_exits():
    """The two exits captured on this kernel (6.18, taskstats version 16): a
    shell child of the capturing process, and a thread of that process."""
    from nslab.traffic.exits import parse
    from tests.conftest import data
    with open(data("taskstats/exits-linux-6.18.bin"), "rb") as f:
        raw = f.read()
    chunks, off = [], 0
    while off < len(raw):
        n = int.from_bytes(raw[off:off + 4], "little")
        chunks.append(raw[off + 4:off + 4 + n])
        off += 4 + n
    return chunks, [e for c in chunks for e in parse(c)]


def test_a_captured_exit_is_read_at_the_record_s_fixed_offsets():
    """Each exit's thread, process, parent, policy, wait and run time, read
    where struct taskstats keeps them whatever a newer kernel appends; two
    messages in one datagram are both read; a netlink error (a registration
    the kernel refused) raises; other families' messages are skipped."""
    import struct

    from nslab.traffic.exits import Ended, parse
    chunks, got = _captured_exits()
    assert got == [Ended(22970, 22965, 0, 101801, "sh", tgid=22970, run_ns=310571,
                         elapsed_ns=3_890_000),
                   Ended(22971, 22964, 0, 0, "python", tgid=22965, run_ns=96138,
                         elapsed_ns=1_588_000)]
    assert parse(chunks[0] + chunks[1]) == got  # 596 bytes each: aligned
    family = struct.unpack_from("<H", chunks[0], 4)[0]
    assert parse(chunks[0], family) == got[:1] and parse(chunks[0], family + 1) == []
    error = struct.pack("<IHHII", 36, 2, 0, 0, 0) + struct.pack("<i", -22) + bytes(16)
    with pytest.raises(ValueError, match="netlink error 22"):
        parse(error)


def test_a_malformed_exit_message_raises_so_that_exits_count_as_lost():
    """A message or an attribute that does not fit, or an exit without its
    record, is not skipped: the listener takes its exits for lost."""
    import struct

    from nslab.traffic.exits import parse
    chunks, _ = _captured_exits()
    with pytest.raises(ValueError, match="netlink message"):
        parse(chunks[0][:300])
    with pytest.raises(ValueError, match="after the last netlink message"):
        parse(chunks[0] + bytes(8))
    bad = bytearray(chunks[0])
    struct.pack_into("<H", bad, 20, 4000)  # the first attribute's length
    with pytest.raises(ValueError, match="netlink attribute"):
        parse(bytes(bad))


def _listener_on(datagrams, canary):
    """An exit listener reading ``datagrams`` from a socket pair, its canary
    thread ``canary``."""
    import socket

    from nslab.traffic.exits import Exits
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for d in datagrams:
        theirs.send(d)
    theirs.close()
    exits = Exits()
    exits._sock, exits._canary, exits._me = mine, canary, 22965  # the capturing process
    return exits


def test_the_listener_counts_only_once_its_canary_came_with_its_run_time(monkeypatch):
    """The canary's exit must come (else the registration was refused), and
    with a run time (else this kernel's reports carry no CPU times, and
    every wait would read 0)."""
    import struct

    from nslab.traffic import exits as exits_mod
    monkeypatch.setattr(exits_mod, "CANARY_S", 0.05)
    chunks, got = _captured_exits()
    exits = _listener_on(chunks, canary=22971)
    assert exits.drain() == got[:1] and not exits.why
    exits = _listener_on(chunks[:1], canary=22971)
    assert exits.drain() is None and "never came" in exits.why
    silent = bytearray(chunks[1])
    record = silent.index(b"python") - exits_mod.OFF["ac_comm"]
    struct.pack_into("<Q", silent, record + exits_mod.OFF["cpu_run_virtual_total"], 0)
    exits = _listener_on([chunks[0], bytes(silent)], canary=22971)
    assert exits.drain() is None and "without its run time" in exits.why
    exits = _listener_on([chunks[0][:300], chunks[1]], canary=22971)
    assert exits.drain() is None and exits.lost
    # a refused registration (a netlink error in answer): no listener, not
    # lost exits, so others' share alone decides
    error = struct.pack("<IHHII", 36, 2, 0, 0, 0) + struct.pack("<i", -22) + bytes(16)
    exits = _listener_on([error, chunks[0], chunks[1]], canary=22971)
    assert exits.drain() is None and not exits.lost and exits.refused
    assert "refused its registration (netlink error 22)" in exits.why
    # only the first report of the canary's id is the canary: a later thread
    # given its id is counted
    exits = _listener_on([chunks[1], chunks[0], chunks[1]], canary=22971)
    assert exits.drain() == got[:2]
    # a report of the canary's id from another process is not the canary
    exits = _listener_on(chunks, canary=22971)
    exits._me = 1
    assert exits.drain() is None and "never came" in exits.why


@pytest.fixture
def tick_4ms(monkeypatch):
    """This kernel's tick taken as 4 ms (HZ=250), whatever the machine's."""
    from nslab.traffic import interference
    monkeypatch.setattr(interference, "_this_kernel_stint", lambda: 4_000_000)


def test_an_exit_report_leaves_out_at_most_one_tick_of_run_time():
    """The stint a thread exits in is folded into its run time at a tick or a
    switch that never come: one tick at most, from the kernel's config; a
    NO_HZ_FULL kernel may go without ticks (None: the thread's life bounds
    it); no config says, the longest tick Linux has."""
    from nslab.traffic.interference import LONGEST_TICK_NS, last_stint_ns
    assert last_stint_ns("CONFIG_NO_HZ_IDLE=y\nCONFIG_HZ=250\n") == 4_000_000
    assert last_stint_ns("CONFIG_HZ=1000\n") == 1_000_000
    # built with NO_HZ_FULL, but ticking on every CPU (none named nohz_full)
    assert last_stint_ns("CONFIG_NO_HZ_FULL=y\nCONFIG_HZ=1000\n") == 1_000_000
    assert last_stint_ns("CONFIG_NO_HZ_FULL=y\nCONFIG_HZ=1000\n", "(null)") == 1_000_000
    assert last_stint_ns("CONFIG_NO_HZ_FULL=y\nCONFIG_HZ=1000\n", "1-3") is None
    assert last_stint_ns("", "1-3") is None  # CPUs named: whatever the config says
    assert last_stint_ns("") == LONGEST_TICK_NS == 10_000_000


def test_without_a_tick_another_s_exit_adds_its_whole_life(monkeypatch):
    from nslab.traffic import interference
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import OTHER, resolve_ended
    monkeypatch.setattr(interference, "_this_kernel_stint", lambda: None)
    a = Snapshot(0.0, {30: task(0, {0})})
    gone = resolve_ended(a, Snapshot(1.0), [Ended(31, 30, 0, 0, "cc1", tgid=31, run_ns=10,
                                                   elapsed_ns=90_000_000)])
    assert gone[0].owner == OTHER and gone[0].run_ns == 90_001_000
    # a thread that lived for hours adds no more than the window
    gone = resolve_ended(a, Snapshot(1.0), [Ended(32, 30, 0, 0, "sshd", tgid=32, run_ns=10,
                                                   elapsed_ns=7_200 * 10**9)])
    assert gone[0].run_ns == 10 + 10**9


def test_threads_that_ended_inside_the_window_count_where_they_were_the_lab_s(tick_4ms):
    """A lab thread the first snapshot saw counts from there; one born inside
    the window is its process's (the lab's, or another's); a process born
    and gone inside it is its parent's; a SCHED_IDLE thread is no one's;
    one of nobody known counts both as the lab's wait and as others' run
    time (each bound stays one). Other tasks' ended threads add their run
    time to others' share."""
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import (IDLE, LAB, OTHER, UNKNOWN, bed_wait_share,
                                            resolve_ended, top_bed_waits)
    a = Snapshot(0.0, {10: task(0, {0}, bed=True, wait_ms=4),      # the lab's, seen at a
                       20: task(30, {0}, wait_ms=1),               # another's
                       30: task(0, {0}),                           # another's process
                       40: task(0, {0}, bed=True),                 # the lab's process
                       7: task(0, {0})})                           # the lab root's parent
    ms = 1_000_000
    ended = [Ended(10, 99, 0, 10 * ms, "iperf", tgid=10, run_ns=1 * ms),  # 10 - 4 ms waited
             Ended(20, 1, 0, 50 * ms, "hog", tgid=20, run_ns=80 * ms,   # another's thread
                   elapsed_ns=900 * ms),
             Ended(21, 1, 0, 9 * ms, "hog", tgid=20, run_ns=20 * ms,    # born in another's
                   elapsed_ns=900 * ms),
             Ended(31, 30, 0, 70 * ms, "make", tgid=31, elapsed_ns=1 * ms),  # another's child
             Ended(41, 7, 0, 3 * ms, "iperf", tgid=40),             # born in the lab's
             Ended(42, 40, 5, 90 * ms, "qemu", tgid=42),            # SCHED_IDLE
             Ended(43, 40, 0, 2 * ms, "nslab", tgid=43),            # a child of the lab's
             Ended(44, 555, 0, 1 * ms, "?", tgid=44, run_ns=5 * ms,   # nobody known
                   elapsed_ns=7 * ms)]
    b = Snapshot(2.0, {10: task(0, {0}, bed=True),
                       40: task(0, {0}, bed=True, wait_ms=8, name="nslab")})
    gone = resolve_ended(a, b, ended)
    assert [g.owner for g in gone] == [LAB, OTHER, OTHER, OTHER, LAB, IDLE, LAB, UNKNOWN]
    assert [g.wait_ns // ms for g in gone if g.lab] == [6, 3, 2, 1]
    # a kernel that does not report thread groups (before taskstats 12): a
    # thread the first snapshot did not see is nobody known's (the lab's
    # root's or another's alike: both name their process's parent); one
    # it saw is what it saw
    assert resolve_ended(a, b, [Ended(45, 7, 0, 5 * ms, "nslab")])[0].owner == UNKNOWN
    assert resolve_ended(a, b, [Ended(10, 99, 0, 5 * ms, "iperf")])[0].owner == LAB
    # 8 ms alive at the end, 12 ms ended: 20 ms of 4 CPU-seconds
    assert bed_wait_share(a, b, 2, gone) == pytest.approx(0.5)
    # by name, the live and the ended together: nslab 8 + 2 ms, iperf 6 + 3
    assert top_bed_waits(a, b, gone) == (("nslab", 10.0), ("iperf", 9.0), ("?", 1.0))
    # the hog's ended threads ran 80 - 30 and 20 ms, the make child none, the
    # thread of nobody known 5, each with its last stint at its most: a tick,
    # 4 ms, and no more of its life than it did not run (the make child's
    # 1 ms, the other's 7 - 5 ms), a microsecond more: 86.002 ms of 4 s
    assert others_share(a, b, 2, gone) == pytest.approx(2.15005)


def test_a_process_chain_born_inside_the_window_is_followed_up_to_whom_it_came_from(tick_4ms):
    """make -> gcc -> cc1, all born and gone inside the window under another's
    shell: each is another's, by the reports of the exits that came with
    them; a child of a lab process born since and still alive at the end is
    the lab's, by the second snapshot's parents."""
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import LAB, OTHER, UNKNOWN, resolve_ended
    a = Snapshot(0.0, {30: task(0, {0}, name="bash"), 40: task(0, {0}, bed=True)})
    ms = 1_000_000
    chain = [Ended(53, 52, 0, 1 * ms, "cc1", tgid=53, run_ns=40 * ms, elapsed_ns=50 * ms),
             Ended(52, 51, 0, 1 * ms, "gcc", tgid=52, run_ns=2 * ms, elapsed_ns=60 * ms),
             Ended(51, 30, 0, 1 * ms, "make", tgid=51, run_ns=3 * ms, elapsed_ns=3_500_000)]
    b = Snapshot(1.0, {60: Task(SchedTimes(0, 0), frozenset({0}), True, "mnexec", pid=60,
                                ppid=40)})
    kid = Ended(61, 60, 0, 2 * ms, "iperf", tgid=61, run_ns=1 * ms)
    gone = resolve_ended(a, b, chain + [kid])
    assert [g.owner for g in gone] == [OTHER, OTHER, OTHER, LAB]
    # 40 + 4, 2 + 4, 3 + 0.501 ms (the make lived 3.5 ms, to the us): 53.501 ms of 1 s
    assert others_share(a, b, 1, gone) == pytest.approx(5.3501)
    # without the make's report, the cc1 and gcc are nobody known's
    assert [g.owner for g in resolve_ended(a, b, chain[:2])] == [UNKNOWN, UNKNOWN]


def test_a_thread_id_given_again_inside_the_window_counts_from_its_own_start(tick_4ms):
    """pid_max wraps: a thread id the first snapshot saw may be another
    thread's at the second, or in an exit report. A later start, or counters
    lower than the first snapshot's, say it is a new thread: it counts from
    zero, and is classified as one born since."""
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import LAB, OTHER, resolve_ended
    old = Task(SchedTimes(500_000_000, 9_000_000), frozenset({0}), False, "old", pid=70,
               ppid=1, start=100)
    a = Snapshot(0.0, {70: old, 40: task(0, {0}, bed=True)})
    again = Task(SchedTimes(600_000_000, 20_000_000), frozenset({0}), True, "iperf", pid=70,
                 ppid=40, start=250)
    b = Snapshot(1.0, {70: again, 40: task(0, {0}, bed=True)})
    # a later start: all its 20 ms of wait is inside the window, not 11
    from nslab.traffic.interference import bed_wait_share
    assert bed_wait_share(a, b, 1) == pytest.approx(2.0)
    same = Task(SchedTimes(600_000_000, 20_000_000), frozenset({0}), False, "old", pid=70,
                ppid=1, start=100)
    assert others_share(a, Snapshot(1.0, {70: same}), 1) == pytest.approx(10.0)
    # an exit whose counters are lower than what the first snapshot saw:
    # another thread, born since, in the lab's process 40
    ms = 1_000_000
    gone = resolve_ended(a, b, [Ended(70, 40, 0, 3 * ms, "iperf", tgid=70, run_ns=4 * ms)])
    assert gone[0].owner == LAB and (gone[0].run_ns, gone[0].wait_ns) == (4 * ms, 3 * ms)
    # the same thread, its counters on from the first snapshot's
    gone = resolve_ended(a, b, [Ended(70, 1, 0, 10 * ms, "old", tgid=70, run_ns=501 * ms,
                                      elapsed_ns=600 * ms)])
    # 1 ms run on from the first snapshot's, and its last stint at its most
    assert gone[0].owner == OTHER and (gone[0].run_ns, gone[0].wait_ns) == (5 * ms, 1 * ms)


def test_a_record_of_version_12_on_has_its_thread_group_and_an_older_one_none():
    """ac_tgid came with taskstats version 12."""
    import struct

    from nslab.traffic.exits import parse
    chunks, got = _captured_exits()
    raw = bytearray(chunks[0])
    assert struct.unpack_from("<H", raw, 36)[0] == 16  # the record, after its headers
    struct.pack_into("<H", raw, 36, 12)
    assert parse(bytes(raw))[0].tgid == 22970
    struct.pack_into("<H", raw, 36, 11)
    assert parse(bytes(raw))[0].tgid is None


def test_exits_the_kernel_dropped_make_the_listener_say_so(monkeypatch):
    """ENOBUFS: the kernel dropped exits; the reports that came are not a
    bound, and the listener says why."""
    import errno

    from nslab.traffic import exits as exits_mod
    monkeypatch.setattr(exits_mod, "CANARY_S", 0.05)
    chunks, _ = _captured_exits()

    class Sock:
        def __init__(self, items):
            self.items = list(items)

        def recv(self, n, flags=0):
            if not self.items:
                raise BlockingIOError
            item = self.items.pop(0)
            if isinstance(item, Exception):
                raise item
            return item

        def close(self):
            pass
    exits = exits_mod.Exits()
    exits._sock, exits._canary, exits._me = Sock([chunks[0], OSError(errno.ENOBUFS, "no buffer"),
                                                  chunks[1]]), 22971, 22965
    assert exits.drain() is None and exits.lost and "ENOBUFS" in exits.why


def test_a_second_exit_of_a_known_id_is_a_new_thread_s(tick_4ms):
    """An id is given again only once its exit report is out: of two reports
    of an id the first snapshot saw, only the first is that thread; the
    second is a thread born since, its process's (here the lab's)."""
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import LAB, OTHER, resolve_ended
    ms = 1_000_000
    a = Snapshot(0.0, {70: task(100, {0}, wait_ms=5), 40: task(0, {0}, bed=True)})
    gone = resolve_ended(a, Snapshot(1.0), [
        Ended(70, 1, 0, 6 * ms, "old", tgid=70, run_ns=110 * ms, elapsed_ns=10**10),
        Ended(70, 40, 0, 200 * ms, "iperf", tgid=40, run_ns=300 * ms, elapsed_ns=10**9)])
    assert [(g.owner, g.wait_ns // ms) for g in gone] == [(OTHER, 1), (LAB, 200)]


def test_a_thread_born_in_an_idle_process_is_of_its_own_policy():
    """The virtual bed's QEMU runs at SCHED_IDLE; a thread of normal policy
    born in a process whose main thread is idle is the process's owner's."""
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import LAB, OTHER, resolve_ended
    idle_lab = Task(SchedTimes(0, 0), frozenset({0}), True, "qemu", idle=True)
    idle_other = Task(SchedTimes(0, 0), frozenset({0}), False, "boinc", idle=True)
    a = Snapshot(0.0, {50: idle_lab, 60: idle_other})
    gone = resolve_ended(a, Snapshot(1.0), [Ended(51, 1, 0, 0, "worker", tgid=50),
                                            Ended(61, 1, 0, 0, "worker", tgid=60)])
    assert [g.owner for g in gone] == [LAB, OTHER]


def test_an_orphan_born_inside_the_window_may_be_the_lab_s(tick_4ms):
    """An orphan is given to init, or to a subreaper above the lab
    (systemd --user: the lab's root's ancestors are ``adopters``): a chain of
    processes born since that ends at one is nobody known's (both bounds),
    and so is the wait of a process born since whose parent, at the window's
    end, is one. A process seen at the start is what it was."""
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import UNKNOWN, bed_wait_share, resolve_ended
    ms = 1_000_000
    a = Snapshot(0.0, {1: task(0, {0}, name="systemd"), 40: task(0, {0}, bed=True),
                       500: task(0, {0}, name="systemd"),
                       95: Task(SchedTimes(0, 0), frozenset({0}), False, "cron", pid=95,
                                ppid=1)},
                 adopters=frozenset({1, 500}))
    gone = resolve_ended(a, Snapshot(1.0), [Ended(81, 80, 0, 3 * ms, "iperf", tgid=81),
                                            Ended(80, 1, 0, 2 * ms, "sh", tgid=80),
                                            Ended(83, 500, 0, 2 * ms, "sh", tgid=83)])
    assert [g.owner for g in gone] == [UNKNOWN, UNKNOWN, UNKNOWN]
    orphan = Task(SchedTimes(10 * ms, 30 * ms), frozenset({0}), False, "iperf", pid=90,
                  ppid=1)
    adopted = Task(SchedTimes(10 * ms, 20 * ms), frozenset({0}), False, "iperf", pid=96,
                   ppid=500)
    # a new thread of a process seen at the start whose parent is init: cron's
    cron_thread = Task(SchedTimes(10 * ms, 50 * ms), frozenset({0}), False, "cron", pid=95,
                       ppid=1)
    b = Snapshot(1.0, {1: task(0, {0}, name="systemd"), 40: task(0, {0}, bed=True),
                       90: orphan, 96: adopted, 97: cron_thread})
    # the orphans' 30 + 20 ms count as the lab's wait; cron's thread does not
    assert bed_wait_share(a, b, 1) == pytest.approx(5.0)


def test_a_lab_process_whose_parent_went_stays_the_lab_s(tick_4ms):
    """A lab process alive at both ends whose parent exited inside the window
    is no longer below the lab's root at the end: it is still the lab's (its
    wait counts), by the first snapshot, and by what the watch saw before."""
    from nslab.traffic.interference import bed_wait_share
    ms = 1_000_000
    a = Snapshot(0.0, {60: Task(SchedTimes(0, 0), frozenset({0}), True, "iperf", pid=60,
                                ppid=40, start=5)})
    b = Snapshot(1.0, {60: Task(SchedTimes(5 * ms, 70 * ms), frozenset({0}), False, "iperf",
                                pid=60, ppid=1, start=5)})
    assert bed_wait_share(a, b, 1) == pytest.approx(7.0)
    assert others_share(a, b, 1) == 0.0


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_watch_keeps_what_it_found_the_lab_s_and_knows_the_root_s_ancestors(kernel):
    kdir = os.path.join(DATA, kernel)
    r = roles(kdir)
    w = Watch([0, 1], proc=os.path.join(kdir, "a"), root_pid=r["self"])
    a = w.snapshot()
    assert a.tasks[r["hog"]].bed and 1 in a.adopters
    # the hog is below the capturing process: its ancestors adopt its orphans
    assert r["self"] in Watch([0, 1], proc=os.path.join(kdir, "a"),
                              root_pid=r["hog"]).snapshot().adopters
    # the root gone (a root no scan finds): what the watch found the lab's
    # at its start (same start) stays the lab's; a new watch does not know it
    w.proc, w.root_pid = os.path.join(kdir, "b"), 999_999
    assert w.snapshot().tasks[r["hog"]].bed
    fresh = Watch([0, 1], proc=os.path.join(kdir, "b"), root_pid=999_999).snapshot()
    assert not fresh.tasks[r["hog"]].bed


def test_an_exit_without_its_wall_time_adds_at_most_the_window():
    from nslab.traffic.exits import Ended
    from nslab.traffic.interference import unfolded_ns
    e = Ended(1, 0, 0, 0, "x", tgid=1, run_ns=5)
    assert unfolded_ns(e, None, 10**9) == 10**9
    assert unfolded_ns(e, 4_000_000, 10**9) == 4_000_000
    assert unfolded_ns(e, 4_000_000, 1_000_000) == 1_000_000


def test_a_kernel_that_shows_no_waits_is_not_taken_for_a_bed_that_never_waited():
    """The lab's threads (its ended ones too) ran over a tenth of a second
    and none waited at all: this kernel does not count waits."""
    from nslab.traffic.interference import LAB, OTHER, Gone, counts_waits
    a = Snapshot(0.0, {1: task(0, {0}, bed=True)})
    b = Snapshot(1.0, {1: task(60, {0}, bed=True)})
    assert counts_waits(a, b)  # 60 ms: too little to say
    assert not counts_waits(a, b, [Gone("iperf", LAB, 50_000_000, 0)])
    assert counts_waits(a, b, [Gone("iperf", LAB, 50_000_000, 1000)])
    # another's exit says nothing of the lab's waits
    assert counts_waits(a, b, [Gone("make", OTHER, 500_000_000, 0)])


def test_a_trial_is_disturbed_above_the_threshold_on_either_cpu_dut_first():
    quiet = {"dut": {"other_pct": 1.0}, "gen": {"other_pct": 2.0}}
    assert disturbed(quiet, 5.0) is None and disturbed(None, 5.0) is None
    why = disturbed({"dut": {"other_pct": 23.4}, "gen": {"other_pct": 40.0}}, 5.0)
    assert why == ("host interference: 23 % of the DUT CPU's time went to other tasks "
                   "(over 5 %)")
    assert "generator/sink CPU" in disturbed({"dut": {"other_pct": 0}, "gen": {"other_pct": 9}}, 5)


def test_the_baseline_leaves_out_disturbed_windows_and_takes_a_low_quantile():
    # One window of six caught a neighbour's burst (the 100 % baseline).
    w = [{"busy_pct": b, "other_pct": o} for b, o in
         [(3.1, 0.5), (2.9, 0.4), (100.0, 96.0), (3.4, 0.6), (3.0, 0.5), (2.8, 0.3)]]
    got = baseline_of(w, 5.0)
    assert got["ok"] and got["busy_pct"] == 2.9 and got["clean_windows"] == 5
    # Busy with nothing offered and no other task to show for it: refused.
    busy = [{"busy_pct": b, "other_pct": 1.0} for b in (60, 55, 70, 65, 58, 62)]
    got = baseline_of(busy, 5.0)
    assert not got["ok"] and got["busy_pct"] == 58 and "no other task" in got["why"]
    # Every window disturbed (a hog on the DUT's CPU): busy less the others'
    # time stands in, and the baseline says it is not clean.
    hog = [{"busy_pct": b, "other_pct": o} for b, o in
           [(53.0, 50.0), (55.0, 51.0), (52.0, 49.5), (56.0, 52.0)]]
    got = baseline_of(hog, 5.0)
    assert not got["ok"] and got["busy_pct"] == pytest.approx(2.5)
    assert got["why"].startswith("host interference: other tasks took 50 %")
    with pytest.raises(ValueError):
        baseline_of([], 5.0)


def test_a_cost_trial_without_a_figure_says_why():
    assert cost_unmeasured({"dut_forwarded_fps": 0.0}) == "the DUT forwarded nothing"
    assert "not above its idle baseline" in cost_unmeasured({"dut_forwarded_fps": 5e4,
                                                             "dut_busy_pct": 3.0})


def test_rfc2544_claims_leave_out_disturbed_searches_and_say_why(tmp_path):
    """A stored run whose bridge search at 64 B stayed disturbed by other tasks
    (the DUT's CPU the worse one), in a lab whose baseline was not clean: the
    knee claim has one search left and is undecided with the interference
    reason; the CPU claim says the baseline could carry no occupancy figure."""
    import json
    import shutil

    from nslab.experiments.rfc2544.study import Rfc2544Study
    from tests.conftest import data
    run = tmp_path / "nl0001"
    shutil.copytree(data("rfc2544_run"), run)
    lines = (run / "records.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        r = json.loads(line)
        if r["params"] == {"dut": "bridge", "frame": 64, "repeat": 0, "test": "throughput"}:
            m = r["measurements"]
            m["searches_fps"] = [m["throughput_fps"], 40000.0]
            m["searches_disturbed"] = [False, True]
            m["occupancy_at_throughput_pct"] = [97.0]
            m["probes"][-1]["invalid"] = ["host interference: 48 % of the DUT CPU's time went "
                                          "to other tasks (over 5 %) (3 tries)"]
            m["probes"][-1]["dut_other_pct"] = 47.6
            m["probes"][-1]["gen_other_pct"] = 2.0
            # this lab's baseline was disturbed: the runner kept no occupancy
            m["occupancy_at_throughput_pct"] = []
            m["baseline_ok"] = False
            r["schema_version"] = 2
        out.append(json.dumps(r))
    (run / "records.jsonl").write_text("\n".join(out) + "\n")
    claims = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}
    knee = claims["The bridge saturates at ~66 kfps of 64-byte frames (Table 3)"]
    assert knee.verdict == "undecided"
    assert knee.why.startswith("host interference left out 1 of 2 searches of the bridge at "
                               "64 B; host interference left out 1 trial of this run (at worst "
                               "other tasks took 48 % of the DUT CPU's time): "), knee.why
    cpu = claims["bridge: the CPU is the limit (it saturates at the throughput)"]
    assert cpu.verdict == "undecided" and cpu.why.startswith(
        "host interference: other tasks disturbed the idle baseline of the bridge's CPU "
        "(1 of 1 measurements): no occupancy figure from them; host interference left out 1 "
        "trial of this run")


def test_the_routers_knee_is_judged_over_sweeps(tmp_path):
    """One load sweep gives one knee: undecided, saying what to run. Two sweeps
    (a second repeat, or a second sampling round) give the DUT CPU's
    occupancy where latency jumped, with its interval against saturation."""
    import json
    import shutil

    from nslab.experiments.rfc2544.study import Rfc2544Study
    from tests.conftest import data
    run = tmp_path / "nl0002"
    shutil.copytree(data("rfc2544_run"), run)
    name = "router: latency stays low until the DUT CPU saturates, then jumps"
    one = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}[name]
    assert one.verdict == "undecided" and one.why.startswith("1 sweep(s) with a knee")
    lines = (run / "records.jsonl").read_text().splitlines()
    extra = []
    for line in lines:
        r = json.loads(line)
        if r["params"] == {"dut": "router", "frame": 64, "repeat": 0, "test": "loss"}:
            r["params"]["repeat"] = 1
            for t in r["measurements"]["trials"]:
                t["dut_occupancy_pct"] = min(100.0, t["dut_occupancy_pct"] * 0.98)
            extra.append(json.dumps(r))
    (run / "records.jsonl").write_text("\n".join(lines + extra) + "\n")
    two = {c.claim: c for c in Rfc2544Study().report(str(run)).claims}[name]
    assert "over 2 sweeps" in two.measured and two.verdict == "agrees", two


#: A point's host figure as a run beside a busy neighbour leaves it.
BUSY = {"other_pct": {"0": 30.0, "1": 30.0}, "worst_cpu": 0, "worst_pct": 27.5,
        "source": "task scan: share of all CPUs", "reruns": 1, "disturbed": True,
        "threshold_pct": 10.0}


def _all_disturbed(run, change=None):
    """Mark every point of the stored run ``run`` disturbed (``change(record)``
    edits each point's record too)."""
    import json
    out = []
    for line in (run / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind", "point") == "point":
            r["host"] = dict(BUSY)
            if change is not None:
                change(r)
        out.append(json.dumps(r))
    (run / "records.jsonl").write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("study, src", [("alias", "alias_run")])
def test_points_left_out_for_host_interference_say_so_in_every_undecided_claim(tmp_path, study,
                                                                                src):
    """Every point of a stored run marked disturbed (as a run beside a busy
    neighbour leaves it): no claim is decided, none disappears, and each says
    host interference left its points out."""
    import shutil

    from nslab.run.registry import studies
    from tests.conftest import data
    run = tmp_path / "nl0003"
    shutil.copytree(data(src), run)
    before = [c.claim for c in studies()[study]().report(str(run)).claims]
    _all_disturbed(run)
    claims = studies()[study]().report(str(run)).claims
    assert claims and all(c.verdict == "undecided" for c in claims)
    assert set(c.claim for c in claims) <= set(before)
    for c in claims:
        assert "host interference: other tasks took up to 28 % of the CPUs" in c.why, c


def test_a_sched_idle_task_takes_no_time_another_wanted():
    """SCHED_IDLE (policy 5, field 41 of a thread's stat) runs only where no
    other task wants the CPU: it is not counted among the other tasks (the
    virtual RFC 2544 bed's QEMU runs so beside the other studies)."""
    from nslab.traffic.interference import (SchedTimes, Snapshot, Task, account, others_share,
                                            sched_policy, top_others)
    stat = "4242 (qemu-system-x86) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 31) + " 5 0"
    assert sched_policy(stat) == 5 and sched_policy("garbage") is None
    with open("/proc/self/stat") as f:
        # this very process's policy, as the kernel says it (CI runs Debian 13's
        # unit tier at SCHED_IDLE, beside the host's labs)
        assert sched_policy(f.read()) == os.sched_getscheduler(0)
    cpus = frozenset({0, 1})
    a, b = Snapshot(0.0), Snapshot(1.0)
    a.tasks[1] = Task(SchedTimes(0, 0), cpus, False, "qemu", idle=True)
    b.tasks[1] = Task(SchedTimes(900_000_000, 0), cpus, False, "qemu", idle=True)
    a.tasks[2] = Task(SchedTimes(0, 0), cpus, False, "firefox")
    b.tasks[2] = Task(SchedTimes(100_000_000, 0), cpus, False, "firefox")
    assert others_share(a, b, 2) == 5.0  # firefox's 0.1 s of 2 CPU-seconds, not qemu's
    assert account(a, b, [0])[0].other_pct == 10.0
    assert [n for n, _ in top_others(a, b)] == ["firefox"]


def _ecmp_disturbed(tmp_path, scale_sums=1.0):
    """The stored ECMP run with every trial marked disturbed, its SUMs times ``scale_sums``."""
    import shutil

    from tests.conftest import data
    run = tmp_path / "nl0004"
    shutil.copytree(data("ecmp_run"), run)

    def lower(r):
        r["measurements"]["sum_bps"] *= scale_sums
    _all_disturbed(run, lower)
    return run


def test_ecmp_splits_measured_on_a_busy_host_stand_and_a_higher_sum_only_when_it_agrees(
        tmp_path):
    """Which link a stream takes is a hash of its header fields: a trial the
    host disturbed keeps its split, so the split claims read as on a quiet
    host, saying so. Its SUM can only read lower: "above one link" decided
    "agrees" with disturbed trials in stands; "disagrees" would not."""
    from nslab.experiments.ecmp.study import EcmpStudy
    from tests.conftest import data
    import shutil
    shutil.copytree(data("ecmp_run"), tmp_path / "quiet")
    quiet = {c.claim: c for c in EcmpStudy().report(str(tmp_path / "quiet")).claims}
    busy = {c.claim: c for c in EcmpStudy().report(str(_ecmp_disturbed(tmp_path))).claims}
    assert set(busy) == set(quiet)
    for name, c in busy.items():
        assert c.verdict == quiet[name].verdict, (name, c)
        assert "disturbed kept for their split" in c.why, c
    spread = next(c for c in busy.values() if c.claim.startswith("L4 hashing spreads"))
    assert spread.verdict == "agrees" and "so 'above' stands" in spread.why
    # the same trials, their SUMs under half (under one link): only the
    # disturbed trials say so, and a "disagrees" from them does not stand
    low = {c.claim: c for c in EcmpStudy().report(str(_ecmp_disturbed(tmp_path / "low", 0.45)))
           .claims}
    spread = next(c for c in low.values() if c.claim.startswith("L4 hashing spreads"))
    assert spread.verdict == "undecided", spread
    assert "only 'agrees' would stand" in spread.why
    assert "host interference: other tasks took up to 28 % of the CPUs" in spread.why


def test_failover_outages_under_a_bound_stand_when_the_host_was_busy_and_nothing_else(tmp_path):
    """Every trial of the stored failover run marked disturbed: a claim that an
    outage or a route's change took *under* a bound after a link between two
    routers went down (values a busy host can only lengthen there) keeps its
    quiet-host "agrees", saying the disturbed trials are in. After a silent
    failure a protocol timer decides, and a peer the host made late makes it
    fire sooner: those trials stay out, and the row says after which event.
    A band ("2 to 3.5 s") or a comparison stays undecided too; each says the
    host left its points out and that a quiet host decides it."""
    import shutil

    from nslab.run.registry import studies
    from tests.conftest import data
    run = tmp_path / "nl0005"
    shutil.copytree(data("failover_run"), run)
    quiet = {c.claim: c for c in studies()["ecmp-failover"]().report(str(run)).claims}

    def between_routers(r):
        # what the runner records of this run's links now (server2 -- a spine)
        for e in r["measurements"]["events"]:
            if e["do"] == "link-down":
                e["switch"] = False
    _all_disturbed(run, between_routers)
    busy = {c.claim: c for c in studies()["ecmp-failover"]().report(str(run)).claims}
    assert set(busy) == set(quiet)
    stand = {"A link that goes down is detected at once: the probe's outage is under 300 ms "
             "without BFD", "server2 withdraws the failed nexthop within 1 s of a link going down"}
    assert stand <= set(busy)
    for name, c in busy.items():
        if name in stand:
            assert quiet[name].verdict == "agrees", quiet[name]
            assert c.verdict == "agrees" and "so 'under' stands" in c.why, c
            assert "(with " in c.measured and " disturbed trial(s))" in c.measured, c
            continue
        assert c.verdict == "undecided", c
        assert "host interference: other tasks took up to 28 % of the CPUs" in c.why, c
        assert c.decide.startswith("a quiet host"), c
    bfd = busy["With BFD a silent failure is detected in about the detect time (under 1 s)"]
    assert quiet[bfd.claim].verdict == "agrees"
    assert ("a busy host may have made it read shorter: the disturbed trials after "
            "link-blackhole (a peer the host made late fires a protocol timer sooner) stay "
            "out") in bfd.why, bfd
    # records made before the runner said whether a link's end is a switch:
    # a link taken down to a switch leaves its other nodes to a timer, so
    # they do not join either
    shutil.rmtree(run)
    shutil.copytree(data("failover_run"), run)
    _all_disturbed(run)
    old = {c.claim: c for c in studies()["ecmp-failover"]().report(str(run)).claims}
    for name in stand:
        assert old[name].verdict == "undecided", old[name]
        assert "after link-down (ends unknown) (its record is older" in old[name].why, old[name]


def test_failover_times_measured_while_the_lab_s_timers_were_on_time_are_kept(tmp_path):
    """Every trial of the stored failover run marked disturbed, each with its
    samplers' longest wait past a timer (``host.late_ms``). Where every CPU's
    stayed within 10 ms, what the host took it took in pieces too short to
    move a protocol timer: each claim on a time that timers decide (an
    outage, a route's convergence) reads as on a quiet host, and says how
    many disturbed trials it kept. TCP goodput depends on the CPU's share,
    not on a timer: its claim stays out as before. One CPU 40 ms late in
    every trial: nothing is kept, as without samplers."""
    import shutil

    from nslab.run.registry import studies
    from tests.conftest import data
    run = tmp_path / "nl0005"
    shutil.copytree(data("failover_run"), run)
    quiet = {c.claim: c for c in studies()["ecmp-failover"]().report(str(run)).claims}

    def late(ms):
        def change(r):
            r["host"]["late_ms"] = {"0": 0.0, "1": ms}
        return change
    _all_disturbed(run, late(4.5))
    on = {c.claim: c for c in studies()["ecmp-failover"]().report(str(run)).claims}
    # this stored run's claims are all on outages and convergence
    assert set(on) == set(quiet) and len(on) == 5
    for name, c in on.items():
        assert (c.verdict, c.measured) == (quiet[name].verdict, quiet[name].measured), name
        assert " trial(s) the host disturbed kept: the lab's timers were late by at most " \
               "10 ms on every CPU" in c.why, c
    undecided = [c for c in on.values() if c.verdict == "undecided"]
    assert undecided  # this run's band: too few trials, quiet or not
    for c in undecided:
        assert ("a thread at the lab's priority woke up to 4 ms past its timer; 8 of them "
                "stayed within 10 ms on every CPU, and the times timers decide were kept "
                "from those)") in c.why, c
    # a value the CPU's share moves, not a timer, stays out however on time
    from types import SimpleNamespace

    from nslab.experiments.filestudy.analysis import kept_out
    rec = SimpleNamespace(host=SimpleNamespace(disturbed=True, late_ms={"0": 0.0}))
    assert kept_out(rec, "tcp-after") and kept_out(rec, "goodput-tcp")
    assert not kept_out(rec, "outage-probe.gap_ms")
    assert not kept_out(rec, "convergence-server2.withdrawn_ms")
    shutil.rmtree(run)
    shutil.copytree(data("failover_run"), run)
    _all_disturbed(run, late(40.0))
    off = {c.claim: c for c in studies()["ecmp-failover"]().report(str(run)).claims}
    for name, c in off.items():
        assert "kept:" not in c.why, c
    bfd = "With BFD a silent failure is detected in about the detect time (under 1 s)"
    assert quiet[bfd].verdict == "agrees" and off[bfd].verdict == "undecided"
    assert "woke up to 40 ms past its timer)" in off[bfd].why, off[bfd]


def test_only_the_values_a_busy_host_can_only_lengthen_are_one_sided():
    from nslab.experiments.filestudy.analysis import RAISED_BY_A_BUSY_HOST, one_sided
    from nslab.experiments.filestudy.model import METRIC_VALUES
    owners = {v: [k for k, vs in METRIC_VALUES.items() if v in vs] for v in RAISED_BY_A_BUSY_HOST}
    assert owners == {"gap_ms": ["outage"], "withdrawn_ms": ["convergence"],
                      "restored_ms": ["convergence"]}
    assert one_sided("outage-probe.gap_ms") and one_sided("convergence-server2.withdrawn_ms")
    for v in ("goodput-tcp", "outage-probe.lost", "ping.p99_ms", "x.cpu_pct", "tcp-after"):
        assert not one_sided(v), v


def test_disturbed_trials_never_overrule_what_the_undisturbed_ones_decided():
    """An outage claim the undisturbed trials decided keeps their verdict,
    whatever the disturbed ones say: they only ever help an undecided one."""
    from types import SimpleNamespace

    from nslab.experiments.filestudy.analysis import judge_claim
    from nslab.experiments.filestudy.model import ClaimSpec

    def rec(gap, busy):
        # a link between two routers taken down: no timer decides the outage
        down = SimpleNamespace(do="link-down", target="a:a-eth0-b:b-eth0", switch=False)
        return SimpleNamespace(
            params={"f": "x"}, host=SimpleNamespace(disturbed=busy),
            measurements=SimpleNamespace(invalid=[], values={"outage-probe.gap_ms": gap},
                                         events=[down]))
    spec = ClaimSpec.model_validate({"claim": "under 300", "value": "outage-probe.gap_ms",
                                     "where": {"f": "x"}, "below": 300})
    # the undisturbed trials disagree (well over 300); many disturbed ones at 20 ms
    recs = [rec(900.0, False), rec(910.0, False), rec(905.0, False)] + \
        [rec(20.0, True) for _ in range(30)]
    assert judge_claim(spec, recs).verdict == "disagrees"
    # undecided on their own (one value): the disturbed ones may decide it
    c = judge_claim(spec, [rec(25.0, False)] + [rec(20.0 + i, True) for i in range(5)])
    assert c.verdict == "agrees" and "so 'under' stands" in c.why
    # and a disturbed "disagrees" never stands
    c = judge_claim(spec, [rec(25.0, False)] + [rec(900.0 + i, True) for i in range(5)])
    assert c.verdict == "undecided"


def test_disturbed_trials_join_an_under_claim_only_after_events_no_timer_waits_on():
    """A late peer sends its last packet before a silent failure earlier, or
    loses it across the failure: BFD's detection or BGP's hold time then
    fires sooner, so a busy host can shorten that outage. Disturbed trials
    join an "under" claim only when every event of theirs is one after which
    the value can only read longer: a link between two routers taken down
    (the outage and the withdrawal), a killed bgpd (the withdrawal only: its
    node's zebra takes its routes away, and a late zebra starts the outage
    later)."""
    from types import SimpleNamespace

    from nslab.experiments.filestudy.analysis import judge_claim, untimed
    from nslab.experiments.filestudy.model import ClaimSpec

    def ev(do, **kw):
        return SimpleNamespace(do=do, target=kw.pop("target", "a:a-eth0-b:b-eth0"), **kw)

    def rec(value, busy, *events, name="outage-probe.gap_ms"):
        return SimpleNamespace(
            params={"f": "x"}, host=SimpleNamespace(disturbed=busy),
            measurements=SimpleNamespace(invalid=[], values={name: value}, events=list(events)))
    down, down_sw = ev("link-down", switch=False), ev("link-down", switch=True)
    kill = {d: ev("daemon-kill", target=f"spine1/{d}") for d in ("bgpd", "bfdd", "zebra")}
    gap, wd = "outage-probe.gap_ms", "convergence-server2.withdrawn_ms"
    assert untimed(rec(1, True, down), gap) and untimed(rec(1, True, down), wd)
    assert untimed(rec(1, True, kill["bgpd"]), wd) and not untimed(rec(1, True, kill["bgpd"]), gap)
    for v in (gap, wd):
        assert not untimed(rec(1, True, down_sw), v)
        assert not untimed(rec(1, True, ev("link-down")), v)  # a record before `switch`
        assert not untimed(rec(1, True, kill["bfdd"]), v) and not untimed(rec(1, True, kill["zebra"]), v)
        assert not untimed(rec(1, True), v)  # no event: its outage has some other cause
        for timer in ("link-blackhole", "daemon-stop", "link-netem", "link-rate", "link-up"):
            assert not untimed(rec(1, True, down, ev(timer)), v), timer
    spec = ClaimSpec.model_validate({"claim": "under 1 s", "value": gap,
                                     "where": {"f": "x"}, "below": 1000})
    quiet_one = rec(300.0, False, down)
    c = judge_claim(spec, [quiet_one] + [rec(300.0 + i, True, down) for i in range(4)])
    assert c.verdict == "agrees" and "so 'under' stands" in c.why, c
    c = judge_claim(spec, [quiet_one] + [rec(300.0 + i, True, ev("link-blackhole"),
                                             ev("link-restore")) for i in range(4)])
    assert c.verdict == "undecided" and "(with" not in c.measured, c
    assert "the disturbed trials after link-blackhole, link-restore (a peer" in c.why, c
    c = judge_claim(spec, [quiet_one] + [rec(300.0 + i, True, kill["bfdd"]) for i in range(4)])
    assert c.verdict == "undecided" and "after daemon-kill/bfdd (a peer" in c.why, c
    # each event with its own reason, those of one reason together; trials
    # without events named too
    c = judge_claim(spec, [quiet_one] + [rec(300.0, True, kill["bgpd"]), rec(301.0, True),
                                         rec(302.0, True, ev("sysctl")),
                                         rec(303.0, True, ev("link-down")),
                                         rec(304.0, True, down_sw),
                                         rec(305.0, True, ev("link-blackhole")),
                                         rec(306.0, True, ev("daemon-stop"))])
    assert c.verdict == "undecided", c
    assert "; a busy host may have made it read shorter: the disturbed trials after " in c.why
    for said in ("after daemon-kill/bgpd (its node's zebra, made late, starts the outage later)",
                 "after daemon-stop, link-blackhole (a peer the host made late fires a "
                 "protocol timer sooner)",
                 "after link-down (ends unknown) (its record is older than the events' "
                 "switch field",
                 "after link-down (to a switch) (the switch keeps the carrier up",
                 "with no event (what it measured has some other cause",
                 "after sysctl (nslab cannot tell which way a busy host moves what a "
                 "sysctl does)"):
        assert f" and those {said}" in c.why or f"the disturbed trials {said}" in c.why, \
            (said, c.why)
    assert c.why.endswith(") stay out"), c.why
    # the time a route took to come back: BGP's timers, whatever the event
    back = ClaimSpec.model_validate({"claim": "back in 5 s", "value": "conv.restored_ms",
                                     "where": {"f": "x"}, "below": 5000})
    c = judge_claim(back, [rec(3000.0, False, down, name="conv.restored_ms")]
                    + [rec(3000.0 + i, True, kill["bgpd"], name="conv.restored_ms")
                       for i in range(4)])
    assert c.verdict == "undecided" and "after daemon-kill/bgpd (a route comes back on BGP's " \
        "timers" in c.why and "zebra" not in c.why, c
    # disturbed trials without a value: one a busy host can only raise may have
    # gone past the trial's end (a quiet host decides); any other was not measured
    c = judge_claim(spec, [rec(None, True, ev("link-blackhole")) for _ in range(3)])
    assert c.why.startswith("no undisturbed trial") and c.decide.startswith("a quiet host"), c
    rate = ClaimSpec.model_validate({"claim": "fast", "value": "goodput", "where": {"f": "x"},
                                     "above": 10})
    c = judge_claim(rate, [rec(None, True, name="goodput") for _ in range(3)])
    assert c.why == "nothing measured there" and not c.decide.startswith("a quiet host"), c
    # all of them disturbed: no value, and a quiet host decides it
    c = judge_claim(spec, [rec(300.0 + i, True, ev("link-blackhole")) for i in range(4)])
    assert c.verdict == "undecided" and c.why.startswith("no undisturbed trial"), c
    assert c.decide.startswith("a quiet host"), c
    # a band, and a comparison, whose trials the host disturbed
    band = ClaimSpec.model_validate({"claim": "2 to 3.5 s", "value": gap,
                                     "where": {"f": "x"}, "within": [2000, 3500]})
    c = judge_claim(band, [rec(2500.0 + i, True, down) for i in range(4)])
    assert c.verdict == "undecided" and c.why.startswith("no undisturbed trial"), c
    assert c.decide.startswith("a quiet host"), c
    vs = ClaimSpec.model_validate({"claim": "x above y", "value": gap, "where": {"f": "x"},
                                   "versus": {"where": {"g": 1}}, "higher": True})
    c = judge_claim(vs, [rec(2500.0, False, down), rec(2600.0, True, down)])
    assert c.verdict == "undecided", c
    assert c.why.startswith("fewer than two values on a side"), c  # nothing at g=1

    def at(params, value, busy):
        r = rec(value, busy, down)
        r.params = params
        return r
    c = judge_claim(vs, [at({"f": "x"}, 2500.0, False), at({"f": "x"}, 2600.0, True),
                         at({"f": "x", "g": 1}, 300.0, True), at({"f": "x", "g": 1}, 310.0, True)])
    assert c.verdict == "undecided" and c.why.startswith("too few undisturbed trials"), c
    assert c.decide.startswith("a quiet host"), c



#: /proc/stat's first lines on the development VM (Linux 6.18, 2 vCPUs), 2026-12-01
PROC_STAT = ("cpu  3235559 2630 883371 2663662 16970 0 233348 31837 0 0\n"
             "cpu0 1617000 1300 441000 1331000 8400 0 116000 15900 0 0\n")


def test_steal_is_read_from_proc_stat_and_taken_as_a_share_of_all_cpus():
    from nslab.traffic.interference import parse_steal, steal_share
    assert parse_steal(PROC_STAT, 100) == 31837 * 10_000_000
    assert parse_steal("cpu  1 2 3 4\n", 100) is None  # a kernel without the field
    assert parse_steal("", 100) is None and parse_steal(PROC_STAT, 0) is None
    a, b = Snapshot(10.0, steal_ns=0), Snapshot(12.0, steal_ns=400_000_000)
    assert steal_share(a, b, 2) == pytest.approx(10.0)  # 0.4 s of 2 CPUs x 2 s
    assert steal_share(a, Snapshot(12.0), 2) is None


def test_the_watch_reads_steal_where_there_is_a_proc_stat(tmp_path):
    """Over a captured /proc without a stat file, steal is not known."""
    from nslab.traffic.interference import Watch
    (tmp_path / "stat").write_text(PROC_STAT)
    assert Watch([0], proc=str(tmp_path)).snapshot().steal_ns == \
        31837 * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    (tmp_path / "stat").unlink()
    assert Watch([0], proc=str(tmp_path)).snapshot().steal_ns is None


def test_the_watch_counts_nowhere_the_processes_it_is_told_to_leave_out():
    """The lateness samplers wait by design: their time and their waits are
    neither the lab's nor others' (``ignore_pids``)."""
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        seen = {t.pid for t in Watch([0]).snapshot().tasks.values()}
        left = {t.pid for t in Watch([0], ignore_pids=[child.pid]).snapshot().tasks.values()}
    finally:
        child.kill()
        child.wait()
    assert child.pid in seen and child.pid not in left
    assert os.getpid() in left
