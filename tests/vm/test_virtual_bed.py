"""The RFC 2544 virtual bed, end to end: the study in a QEMU guest whose clock
counts instructions (nslab.experiments.rfc2544.virtual). A tiny run twice,
the two side by side on fresh guests (each the other's host load), gives
the same frame counts; the report says what the bed is; a guest whose
controller is killed is stopped by `nslab clean`, and one interrupted with
Ctrl-C stops with its controller (those two runs also side by side); the
records measured before stay. Run by `make test-kernel` (the tests marked
vm), on Debian 12's stock kernel; in CI, beside the host's labs at the
SCHED_IDLE policy (scripts/ci.py), where a guest gets only the CPU time the
labs leave: the timeouts here guard against a hang, they time nothing (a CI
run on a slower machine took over 600 s for the two tiny runs one after the
other, 329 s here)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.timeout(2400)]
#: Seconds a tiny run may take before the test calls it hung (the guest's own
#: deadline, nslab.experiments.rfc2544.virtual.deadline_s, is 1,620 s).
HUNG = 2000

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
#: Tiny: one DUT cost given (no calibration), no bed floor, two searches and
#: two latency trials per DUT, one round.
TINY = ["--quick", "--bed", "virtual", "--tests", "throughput,latency", "--dut-cost", "100",
        "--no-bed-floor", "--searches", "2", "--latency-trials", "2", "--rounds", "1"]


@pytest.fixture(scope="module", autouse=True)
def _guests_here():
    from nslab.hosts import vm
    try:
        vm.require()
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        pytest.skip(f"no stock-kernel guests here: {exc}")


def _launch(root, *extra) -> subprocess.Popen:
    """A tiny run in its own session, its output in files beside its results."""
    os.makedirs(root, exist_ok=True)
    return subprocess.Popen([NSLAB, "--results", str(root), "run", "rfc2544", *TINY, *extra],
                            stdout=open(root / "stdout", "w"), stderr=open(root / "stderr", "w"),
                            text=True, start_new_session=True)


def _interrupt(p: subprocess.Popen) -> None:
    """Ctrl-C a run still going (its whole session), and wait for it to stop."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=120)


def _finish(root, p: subprocess.Popen):
    try:
        rc = p.wait(timeout=HUNG)
    except subprocess.TimeoutExpired:
        _interrupt(p)
        raise
    err = (root / "stderr").read_text()
    assert rc == 0, err[-4000:]
    (run,) = (root / "rfc2544").iterdir()
    recs = [json.loads(line) for line in open(run / "records.jsonl")]
    return run, recs, err


def _trials(recs):
    """(dut, test, target fps) -> (frames sent, frames received, latency avg) of
    every trial, the searches' probes included."""
    out = {}
    for r in recs:
        p, m = r["params"], r["measurements"]
        for t in m.get("trials") or m.get("probes") or []:
            key = (p["dut"], p["test"], round(t["target_fps"], 1))
            out.setdefault(key, []).append(t)
    return out


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """The tiny study, run twice on fresh guests, side by side."""
    roots = [tmp_path_factory.mktemp(f"vbed{i}") for i in range(2)]
    procs = [_launch(root) for root in roots]
    try:
        return [_finish(root, p) for root, p in zip(roots, procs)]
    finally:
        for p in procs:
            _interrupt(p)


def test_the_virtual_bed_is_what_the_run_and_its_report_say(twice):
    run, recs, err = twice[0]
    assert {(r["params"]["dut"], r["params"]["test"]) for r in recs} == {
        ("bridge", "throughput"), ("bridge", "latency"), ("router", "throughput"),
        ("router", "latency")}
    prov = json.load(open(run / "provenance.json"))
    vb = prov["virtual_bed"]
    assert vb["icount_shift"] == prov["config"]["vcpu_shift"] and vb["vcpus"] == 1
    assert vb["wall_s"] > 0 and vb["qemu"].startswith("QEMU")
    # the guest's kernel is Debian's, not this machine's
    assert prov["kernel"] == vb["kernel"] and prov["cpus"] == 1
    assert prov["setups"]["bridge"]["cpu_model"].startswith("one vCPU (the virtual bed)")
    # the guest runs this machine's programs: their versions and the commit are
    # the ones asked here, recorded with the bed (not asked again through 9p)
    host = vb["host_tools"]
    assert host["versions"]["iperf2"] and host["versions"]["iproute2"]
    assert {k: v for k, v in prov["versions"].items() if k != "kernel"} == \
        {k: v for k, v in host["versions"].items() if k != "kernel"}
    assert prov["versions"]["kernel"] == vb["kernel"] and prov["git_commit"] == host["git_commit"]
    md = open(run / "report.md").read()
    assert "**The virtual bed.**" in md and "-icount shift=" in md
    assert "[guest" in err and "virtual bed:" in err  # progress relayed as it came
    for t in (t for ts in _trials(recs).values() for t in ts):
        assert not (t.get("invalid") or []), t  # nothing on this bed is the host's doing


def _probes(recs, dut):
    """The throughput searches' probes on ``dut``, in the order they ran."""
    (r,) = [r for r in recs if r["params"]["dut"] == dut and r["params"]["test"] == "throughput"]
    return r["measurements"]["probes"]


def _same_trial(x, y, what, knee):
    """Two trials at one rate. Where the vCPU had time to spare (well below
    the DUT's knee, ``knee``: the lower of the two runs' throughputs, at most
    90 % of it; nothing lost; the DUT's occupancy under :data:`SPARE_PCT` in
    both runs), the DUT forwards what the tester sends, and the tester's
    pacing on the one vCPU it shares with the DUT repeats to within 2 % (in
    a CI run here the router at 2,503 fps was sent 2,505 and 2,483 fps, 0.9 %
    apart; the other such trials within 0.3 %). Where it had none, nearer
    the knee or past it, the frames the DUT holds at the window's edges vary
    from run to run, and the window's received rate with them: within 10 %.
    In one CI run the bridge at 3,585 fps (84 % of its knee, the DUT's
    occupancy 93 % and 94 %) lost nothing in either run, and received 0.2 %
    more than offered in one window and 3.6 % more in the other: 3,515 and
    3,741 fps, 6.4 % apart. Its trials at other rates received between 3.4 %
    less and 2.6 % more than offered in the window with nothing lost.

    Either way a window's count of evenly paced frames is its length times
    the rate, rounded up or down, so two windows' counts may differ by one
    frame beside that: at 50 fps a 0.5 s window held 24 frames in one CI run
    and 25 in the other (48.02 and 49.99 fps, 4 % apart, when the searches
    before it had probed other rates and the trial began at another phase
    of the guest's tick)."""
    spare = max(x["dut_occupancy_pct"], y["dut_occupancy_pct"]) < SPARE_PCT
    below = (x["target_fps"] <= 0.9 * knee and x["loss_pct"] == 0 and y["loss_pct"] == 0
             and spare)
    tol = 0.02 if below else 0.10
    # the sink's window (a search's probe keeps none: at its rates a frame is
    # under 0.2 % of them, well inside either bound)
    windows = [t.get("counter_windows_s", {}).get("sink") for t in (x, y)]
    frame = 1 / min(windows) if all(windows) else 0.0
    assert abs(x["received_fps"] - y["received_fps"]) <= tol * x["received_fps"] + frame, \
        (what, below, x["received_fps"], y["received_fps"])


#: The DUT's occupancy (its share of the one vCPU) under which the vCPU has
#: time to spare beside the tester's share.
SPARE_PCT = 85.0


def test_a_tiny_run_twice_gives_the_same_frame_counts(twice):
    """The same rates offered twice on the instruction-counted clock (the
    searches' dither is seeded there): each DUT's throughput, what the claims
    read, agrees within the spread of each run's own searches, the nominal
    rate's latency takes one of two values, and each trial forwards the same
    frames (:func:`_same_trial`).

    A search adapts: each probe's rate follows from the one before passing or
    failing. Its probes are the same trials in both runs until a probe at the
    DUT's threshold passes in one run and fails in the other; from there the
    paths part. That probe lost frames in one run at most: no more than its
    rate's excess over the DUT's throughput (the guest's clock counts
    instructions, but its file system and console are the host's, whose
    replies land at instants the host's timing decides: near the knee the
    DUT's rate moves by about 1 % from trial to trial, so a probe 2.7 % above
    the knee lost 0, 1.5 and 2.6 % in three trials of two runs)."""
    a, b = (_trials(recs) for _, recs, _ in twice)
    recs = [r for _, r, _ in twice]
    tp = [{(r["params"]["dut"]): r["measurements"]["throughput_fps"] for r in rs
           if r["params"]["test"] == "throughput"} for rs in recs]
    knee = {dut: min(tp[0][dut], tp[1][dut]) for dut in tp[0]}
    fixed = [k for k in a if k[1] != "throughput"]
    assert fixed and set(fixed) == {k for k in b if k[1] != "throughput"}
    for key in fixed:
        for x, y in zip(a[key], b[key]):
            _same_trial(x, y, key, knee[key[0]])
    for (dut, test, fps), ts in a.items():
        if test == "latency" and fps < 1000:  # the nominal rate, at the bed's scale
            # each trial's mean latency takes one of at most two values, each
            # repeating to 1 %: where the tester's frames land against the
            # guest's timers (a CI run here: the router's two trials 298.9 and
            # 315.4 us in one run, 315.3 and 315.3 in the other; the bridge
            # 296.1 and 297.1)
            modes: list = []
            for t in ts + b[(dut, test, fps)]:
                avg = t["latency_us"]["avg"]
                if not any(abs(avg - m) <= 0.01 * m for m in modes):
                    modes.append(avg)
            assert len(modes) <= 2, (dut, fps, [t["latency_us"] for t in ts + b[(dut, test, fps)]])
    for dut in ("bridge", "router"):
        pa, pb = _probes(recs[0], dut), _probes(recs[1], dut)
        assert round(pa[0]["target_fps"], 1) == round(pb[0]["target_fps"], 1)
        for i, (x, y) in enumerate(zip(pa, pb)):
            if round(x["target_fps"], 1) != round(y["target_fps"], 1):
                # the probe before, at one rate in both runs, passed in one and
                # failed in the other: it lay in the band where the DUT's rate
                # lies, and what it lost is no more than its rate's excess over
                # the lower run's throughput (1 % spared): it delivered that
                # throughput. A CI run here: the bridge at 4,356.4 fps lost
                # 2.565 % in one run (4,244.7 fps delivered, against throughputs
                # of 4,241.6 and 4,264.2) and none in the other, where the same
                # rate's retry lost 1.501 %.
                prev = (pa[i - 1], pb[i - 1])
                delivered = [p["target_fps"] * (1 - p["loss_pct"] / 100) for p in prev]
                assert min(delivered) >= 0.99 * knee[dut], \
                    (dut, i, prev[0]["target_fps"], [p["loss_pct"] for p in prev], delivered,
                     knee[dut])
                break
            _same_trial(x, y, (dut, "throughput", x["target_fps"]), knee[dut])
    # each DUT's throughput: the two runs' searches, each run's range widened
    # by half a step either side, overlap. A search ends within a step of the
    # rate where the DUT starts to lose frames, but that rate is a band, not
    # a point: a probe there loses a few frames or none, as the phase of the
    # guest's timers against the trial falls (a CI run's router lost 0.54 %
    # at 3,984 fps and none at 4,031; the bridge none at 4,200 and 1.51 % at
    # 4,200 in one search). Where a run's searches land in that band, its
    # own spread says so, and the other run's lie within it.
    for dut in tp[0]:
        ra, rb = (_throughput(rs, dut) for rs in recs)
        step = ra["step_fps"]
        assert step and step == rb["step_fps"]
        apart = max(min(ra["searches_fps"]), min(rb["searches_fps"])) - \
            min(max(ra["searches_fps"]), max(rb["searches_fps"]))
        assert apart <= step, (dut, ra["searches_fps"], rb["searches_fps"], step)


def _throughput(recs, dut):
    (m,) = [r["measurements"] for r in recs
            if r["params"]["dut"] == dut and r["params"]["test"] == "throughput"]
    return m


def _tagged(run_id):
    """Pids of processes carrying the run's tag (QEMU among them)."""
    from nslab.runtime.proc import pids_with_tag
    return sorted(pid for pid, rid in pids_with_tag(run_id).items() if rid == run_id)


def _first_record(root, p: subprocess.Popen, deadline: float):
    """Wait until the run under ``root`` has its first record (the guest
    measured); its run directory and id."""
    while time.monotonic() < deadline:
        runs = list((root / "rfc2544").glob("*/records.jsonl")) if (root / "rfc2544").exists() \
            else []
        if runs and os.path.getsize(runs[0]) > 0:
            return runs[0].parent, runs[0].parent.name
        assert p.poll() is None, (root / "stderr").read_text()[-3000:]
        time.sleep(1)
    raise AssertionError(f"the guest measured nothing in {HUNG} s")


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """Two tiny runs side by side, each once its guest has measured: the first
    to be killed, the second to be interrupted. Whatever a failed test leaves
    running is interrupted at the end."""
    roots = [tmp_path_factory.mktemp(f"stop{i}") for i in range(2)]
    # forty latency trials after the first record: the runs are still measuring
    # when the tests stop them
    procs = [_launch(root, "--latency-trials", "40") for root in roots]
    try:
        deadline = time.monotonic() + HUNG
        yield [(p, *_first_record(root, p, deadline)) for root, p in zip(roots, procs)]
    finally:
        for p in procs:
            _interrupt(p)


def test_a_killed_controller_leaves_a_guest_that_clean_stops(started):
    """`nslab clean` stops the guest of the killed run and leaves the other
    run, whose controller lives, alone."""
    from nslab.runtime.clean import journal_path
    (p, run, rid), (other, _, other_rid) = started
    assert _tagged(rid), "QEMU does not carry the run's tag"
    os.killpg(p.pid, signal.SIGKILL)  # the controller (and its session) dies, QEMU lives
    p.wait(timeout=30)
    assert _tagged(rid) and os.path.exists(journal_path(rid))
    res = subprocess.run([NSLAB, "clean"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert not _tagged(rid) and not os.path.exists(journal_path(rid))
    assert os.path.getsize(run / "records.jsonl") > 0  # what it measured stays
    assert other.poll() is None and _tagged(other_rid), "clean stopped a live run's guest"


def test_ctrl_c_stops_the_guest_with_its_controller(started):
    from nslab.runtime.clean import journal_path
    _, (p, run, rid) = started
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(timeout=120) != 0
    deadline = time.monotonic() + 30
    while _tagged(rid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _tagged(rid) and not os.path.exists(journal_path(rid))
    assert os.path.getsize(run / "records.jsonl") > 0
