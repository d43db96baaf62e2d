"""The RFC 2544 study's pure logic: theoretical frame rates and the paper's loads."""
from __future__ import annotations

import random
from typing import Any, Callable, Dict, List, Optional, Tuple

from nslab.model.shaping import frame_rate
from nslab.store.reporting import named

#: The paper's Table 3 input rates (frames/s, 64-byte frames).
PAPER_FPS = [100, 1000, 10000, 20000, 40000, 50000, 55556, 58824, 62500, 64516, 65574, 66225,
             66667, 100000]
QUICK_FPS = [1000, 20000, 40000, 55556, 62500, 66667, 100000]
QUICK_LOAD_PCT = [10, 50, 90, 110]
NOMINAL_FPS = 1000


def nominal_fps(scale: float = 1.0) -> float:
    """The paper's nominal input rate (1,000 fps) on a bed of ``scale`` times
    its rates (the virtual bed's :meth:`~.config.Rfc2544Config.scale`)."""
    return NOMINAL_FPS * scale


#: The virtual bed's guest kernel's tick where its config does not say
#: (:func:`.virtual.kernel_hz`): Debian's amd64 kernels (bookworm's 6.1,
#: trixie's 6.12) are built with CONFIG_HZ=250.
GUEST_TICK_S = 1 / 250
#: The largest offset of the tester's clock from the DUT's (a share of the rate).
MAX_CLOCK_OFFSET = 0.01


def tester_clock_offset(fps: float, seconds: float, nth: int,
                        tick_s: float = GUEST_TICK_S) -> float:
    """The virtual bed's tester clock against its DUT's, as a share of the
    rate, for the ``nth`` trial (from 0) at one load of ``fps`` over a window
    of ``seconds``, on a guest kernel whose tick is ``tick_s``.

    Two boxes run on two oscillators: a tester's frames drift against the
    DUT's timer tick. The virtual bed's tester and DUT run on one clock, so a
    load whose frame period and the tick's are multiples of one another
    (1,000 fps against a 4 ms tick) meets the tick at one phase for the whole
    trial, and its figures take one of two values by where that phase fell
    (the router's occupancy at 1,000 fps: 27.8 or 28.2 %). Offset by this
    share, the frames drift by one frame period (or one tick, the shorter)
    over the window, meeting the tick at every phase once; the sign
    alternates from trial to trial at one load, so the load's mean rate is
    the one asked. At most :data:`MAX_CLOCK_OFFSET`."""
    if fps <= 0 or seconds <= 0:
        return 0.0
    size = min(min(1.0 / fps, tick_s) / seconds, MAX_CLOCK_OFFSET)
    return size if nth % 2 == 0 else -size


def theory_table(link_bps: float, sizes: List[int]) -> List[Tuple[int, float, float]]:
    """(frame size, max frames/s, max bit/s of frames) on a link of ``link_bps``."""
    return [(s, frame_rate(link_bps, s), frame_rate(link_bps, s) * s * 8) for s in sizes]


def loads(frame: int, line_fps: float, paper_rates: bool, quick: bool,
          loads_pct: List[int], scale: float = 1.0) -> List[float]:
    """The offered loads of the loss/load sweep: the paper's rates for 64-byte
    frames (times ``scale`` on a bed that runs at that share of the paper's
    rates), then past line rate; else percentages of line rate."""
    if frame == 64 and paper_rates:
        return ([round(f * scale, 1) for f in (QUICK_FPS if quick else PAPER_FPS)]
                + [round(1.1 * line_fps, 1)])
    pcts = QUICK_LOAD_PCT if quick else loads_pct
    return [round(line_fps * p / 100.0, 1) for p in pcts]


def backlog_prediction(backlog: int, throughput_fps: float, line_fps: float) -> float:
    """The longest burst at line rate a DUT whose input queue holds ``backlog``
    frames and drains at ``throughput_fps`` takes without loss."""
    return backlog / (1 - throughput_fps / line_fps)


def knee_index(latencies: List[float], factor: float = 10.0) -> Optional[int]:
    """The index of the first load whose latency exceeds ``factor`` times the
    lowest latency of the loads before it (None: no knee)."""
    for i in range(1, len(latencies)):
        floor = min(latencies[:i])
        if floor > 0 and latencies[i] > factor * floor:
            return i
    return None


def paper_knee(pub: Dict[str, Any]) -> float:
    """The paper's 64-byte knee from its Table 3 (published data): the highest
    offered load before latency first exceeds 10x its low-load value."""
    rows = sorted(pub["table3_bridge_overload_64B"]["rows"], key=lambda r: r[0])
    i = knee_index([float(r[2]) for r in rows])
    if i is None:
        raise ValueError("the published Table 3 has no knee")
    return float(rows[i - 1][0])


def next_filters(filters: int, capacity_fps: float, target_fps: float) -> int:
    """The next calibration step: a frame's cost at saturation is nearly
    proportional to the filters, so scale the count by capacity / target."""
    if filters <= 0 or capacity_fps <= 0 or target_fps <= 0:
        raise ValueError("calibration needs a positive count, capacity and target")
    return max(1, int(round(filters * capacity_fps / target_fps)))


#: A calibration reading is "saturated" (it measured the DUT's capacity) when
#: the DUT lost more than this share of the frames offered, or its CPU was at
#: least CAL_BUSY_PCT busy. Not "forwarded less than 95 % of the offered rate":
#: at 1.25x the target the generator itself offered ~79 of 83 kfps in its
#: window with no frame lost, and that reading, taken for the DUT's capacity,
#: steered the count the wrong way (measured: 500 -> 587 -> 521 filters).
CAL_LOSS_PCT = 0.5
CAL_BUSY_PCT = 95.0
#: An unsaturated reading says only "more filters": the count grows this much.
CAL_GROWTH = 1.5


def calibration_saturated(m: Dict[str, Any]) -> bool:
    """Whether a calibration reading ``m`` (one trial's measurements at
    overload) was limited by the DUT: frames lost, or its CPU busy. The CPU
    figure is not used while the CPUs are kept awake (it reads 100 % then)."""
    if float(m.get("loss_pct") or 0.0) > CAL_LOSS_PCT:
        return True
    busy = m.get("dut_busy_pct")
    return busy is not None and not m.get("cpus_kept_awake") and float(busy) >= CAL_BUSY_PCT


def calibration_still_says_more(m: Dict[str, Any], target_fps: float, tolerance: float) -> bool:
    """Whether a calibration reading that the host disturbed (other tasks on a
    bed CPU, or the host slowing it) still says "more filters": the DUT
    forwarded more than the target (past ``tolerance``) without saturating.
    A disturbance only takes CPU from the DUT, so given its whole CPU it would
    have forwarded at least as much, unsaturated: its capacity is above the
    target whatever the host did. A saturated disturbed reading says nothing
    (its capacity may be the host's), nor does one short of the target.

    Measured on the development VM, whose host ran both vCPUs slower than
    their fastest for most of a quick run: every reading at 500 filters was
    disturbed and forwarded 82 kfps at 41-62 % busy; taken again at the same
    count each time, the calibration ended there unconfirmed, and the bridge
    then forwarded ~145 kfps, not the 66 kfps target."""
    return (not calibration_saturated(m)
            and float(m.get("received_fps") or 0.0) > target_fps * (1 + tolerance))


def calibration_step(filters: int, m: Dict[str, Any], target_fps: float,
                     tolerance: float) -> Optional[int]:
    """One step of the calibration's search, from the reading ``m`` taken with
    ``filters`` in place: :func:`calibration_next` of its capacity and whether
    it saturated the DUT (:func:`calibration_saturated`)."""
    return calibration_next(filters, float(m["received_fps"]), calibration_saturated(m),
                            target_fps, tolerance)


def calibration_next(filters: int, capacity_fps: float, saturated: bool, target_fps: float,
                     tolerance: float) -> Optional[int]:
    """The next filter count after a capacity of ``capacity_fps`` measured with
    ``filters`` in place: None when the DUT ``saturated`` within ``tolerance``
    of ``target_fps`` (done). A saturated capacity scales the count by
    capacity / target (:func:`next_filters`); an unsaturated one, which bounds
    the capacity from below only, grows it by :data:`CAL_GROWTH`."""
    if not saturated:
        return max(filters + 1, int(round(filters * CAL_GROWTH)))
    if abs(capacity_fps / target_fps - 1) <= tolerance:
        return None
    return next_filters(filters, capacity_fps, target_fps)


#: A dithered bisection splits its bracket at a uniformly random point in this
#: range of it, and brackets a hint at 1 +- HINT_BRACKET x a factor in HINT_DITHER.
SPLIT = (0.35, 0.65)
HINT_BRACKET = 0.2
HINT_DITHER = (0.75, 1.25)


def rate_search(ok: Callable[[float], bool], top: float, step: float,
                hint: Optional[float] = None, rng: Optional[random.Random] = None) -> float:
    """RFC 2544's search for the highest rate up to ``top`` at which ``ok``
    (a trial passed), to within ``step``; 0.0 when none passes.

    With ``hint`` (the calibration's target, or the earlier searches'
    median: :meth:`.search.Tests.prior_fps`) the first two probes bracket it
    (+-20 %), which saves probes without assuming the answer. The bracket
    and every split are dithered (``rng``): with the midpoint, every search
    walked one fixed grid of rates (top / 2^k), and the later searches of a
    point, bracketing the first's result, landed on the same rates as it:
    three searches of one lab came out at 74,591 fps each, and one sequence
    (69,940, 68,973, 68,465 fps) recurred in four labs. Their spread then
    said where the grid fell, not how the DUT varies. Dithered, each
    search's rounding is its own, so the spread of the searches is a
    sample of the DUT's throughput, rounding included."""
    rng = rng or random.Random()
    lo, hi = 0.0, top
    if hint:
        up, down = (HINT_BRACKET * rng.uniform(*HINT_DITHER) for _ in range(2))
        first = [min(top, hint * (1 + up)), hint * (1 - down)]
    else:
        first = [top]
    for fps in first:
        if not lo < fps < hi and fps != top:
            continue
        if ok(fps):
            lo = fps
            break
        hi = fps
    while hi - lo > step:
        mid = lo + (hi - lo) * rng.uniform(*SPLIT)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


#: Frames a DUT's receive queue may hold at any instant while it keeps up:
#: one NAPI poll's budget (net.core.dev_weight, and veth's NAPI weight: 64).
#: The DUT takes its queue 64 frames a poll, so a snapshot lands anywhere in
#: that sawtooth. On the virtual bed (a step of 37 fps over the quick preset's
#: 0.7 s: 26 frames) the sawtooth alone read as "fell behind": in one CI run
#: the bridge at 4,018 and 3,997 fps with 42 and 45 frames left (no loss)
#: failed, while the next run passed 4,166 and 4,200 fps losing nothing, and
#: the two runs' throughputs came out 2.3 % apart.
POLL_BUDGET = 64


def fell_behind(queued: Optional[int], step_fps: float, elapsed_s: float) -> bool:
    """Whether a trial's DUT fell behind the offered rate by more than the
    search's ``step_fps``, from the frames its input queue held as the
    trial's window ended (``queued``, counted from before the generator
    started; None: unknown, not behind). A queue of 5,000 frames (this VM's
    netdev_max_backlog) absorbs 7 kfps of excess for 0.7 s without a loss,
    so a short trial alone passes rates the DUT cannot sustain: the quick
    preset's searches found 73-75 kfps where 3 s readings forwarded
    68.5-69.7 kfps. A queue that grew by more than ``step_fps x elapsed_s``
    beyond one poll's budget (:data:`POLL_BUDGET`, what it holds at an instant
    while the DUT keeps up) says the DUT forwarded at least a step less than
    it was offered: the rate is over its throughput, lost or not."""
    return queued is not None and queued > step_fps * elapsed_s + POLL_BUDGET


def search_step(resolution_fps: float, elapsed_s: float) -> float:
    """A search's step: ``resolution_fps``, or what a trial of ``elapsed_s``
    (warm-up and window) can tell apart if that is coarser: one poll's budget
    over the trial (:func:`fell_behind` cannot see a DUT fall behind by
    less). The quick preset on the virtual bed: 91 fps for 0.7 s, not 37."""
    return max(resolution_fps, POLL_BUDGET / elapsed_s if elapsed_s > 0 else resolution_fps)


#: The fidelity guard's thresholds (after Mininet-HiFi: check that the emulation,
#: not the DUT, was not the bottleneck).
GEN_CPU_SATURATED_PCT = 95.0
GEN_SHORTFALL = 0.95


def trial_invalid(m: Dict[str, Any], line_fps: float) -> List[str]:
    """Why a trial does not measure the DUT (empty: it does). The DUT's own
    saturation is the point of the test; the generator's and the sink's is not.

    * the generator and the sink share one CPU: saturated, it paces late and
      delays timestamps;
    * the generator sent fewer frames than asked (up to line rate; its own
      count over its whole run, exact, unlike a short window's counters);
    * the sink's CPU dropped frames from its input queue (loss outside the DUT);
    * the offered rate is over 90 % of the generator's measured ceiling.
    """
    out = []
    busy = m.get("gen_cpu_busy_pct")
    if busy is not None and busy >= GEN_CPU_SATURATED_PCT and not m.get("cpus_kept_awake"):
        out.append(f"the generator/sink CPU was {busy:.0f} % busy")
    want = min(float(m["target_fps"]), line_fps)
    sent = m.get("gen_pps", m["offered_fps"])  # the generator's own count over its run
    if want > 0 and sent < GEN_SHORTFALL * want:
        out.append(f"the generator sent {sent:,.0f} of {want:,.0f} fps")
    drops = m.get("sink_backlog_drops")
    if drops:
        out.append(f"{drops} frames dropped at the sink's CPU, outside the DUT")
    if m.get("generator_limited"):
        out.append("over 90 % of the generator's ceiling")
    return out


#: The idle baseline of the DUT's CPU is refused above this busy share.
BASELINE_CEILING_PCT = 20.0
#: The low quantile of the baseline's windows taken as the baseline.
BASELINE_QUANTILE = 0.25


def baseline_of(windows: List[Dict[str, float]], threshold_pct: float) -> Dict[str, Any]:
    """The idle baseline from short windows with nothing offered, each
    ``{"busy_pct", "other_pct"}``.

    Windows in which other tasks took more than ``threshold_pct`` of the CPU
    are left out; of the rest, the low quantile (:data:`BASELINE_QUANTILE`) of
    their busy shares is the baseline, so a burst of other work does not
    become every trial's zero. ``ok``: some window was clean and the baseline
    is at most :data:`BASELINE_CEILING_PCT`. With no clean window, the low
    quantile of busy less other tasks' time stands in (``ok`` False, and
    ``why`` says so)."""
    if not windows:
        raise ValueError("a baseline needs at least one window")
    clean = [w for w in windows if w["other_pct"] <= threshold_pct]

    def low(values: List[float]) -> float:
        ranked = sorted(values)
        return ranked[int(BASELINE_QUANTILE * (len(ranked) - 1))]
    out: Dict[str, Any] = {"windows": [dict(w) for w in windows], "quantile": BASELINE_QUANTILE,
                           "clean_windows": len(clean)}
    if clean:
        busy = low([float(w["busy_pct"]) for w in clean])
        out.update(busy_pct=busy, ok=busy <= BASELINE_CEILING_PCT,
                   other_pct=min(float(w["other_pct"]) for w in clean))
        if not out["ok"]:
            out["why"] = (f"the DUT's CPU was {busy:.0f} % busy with nothing offered and no "
                          f"other task to account for it (ceiling {BASELINE_CEILING_PCT:.0f} %)")
    else:
        busy = low([max(0.0, float(w["busy_pct"]) - float(w["other_pct"])) for w in windows])
        worst = low([float(w["other_pct"]) for w in windows])
        out.update(busy_pct=busy, ok=False, other_pct=worst,
                   why=f"host interference: other tasks took {worst:.0f} % of the DUT's CPU or "
                       f"more in every window (over {threshold_pct:g} %)")
    return out


#: What a trial's reason says when the host slowed a bed CPU (no task took it).
SLOWED = "slower than its fastest in this run"


def disturbed(interference: Optional[Dict[str, Dict[str, Any]]],
              threshold_pct: float, slowdown_pct: Optional[float] = None) -> Optional[str]:
    """Why a trial is disturbed by the host (None: it is not): other tasks took
    more than ``threshold_pct`` of the DUT's or the generator's CPU during it,
    or (``slowdown_pct`` given) that CPU ran more than ``slowdown_pct`` slower
    than its fastest in the run at either end of the trial (the hypervisor
    gave it less: :mod:`nslab.traffic.speed`). The DUT's CPU is named first:
    its busy time is the DUT's occupancy."""
    if not interference:
        return None
    for role, what in (("dut", "the DUT CPU"), ("gen", "the generator/sink CPU")):
        got = interference.get(role)
        if not got:
            continue
        if float(got["other_pct"]) > threshold_pct:
            who = named(got.get("top"))
            return (f"host interference: {float(got['other_pct']):.0f} % of {what}'s time went to "
                    f"other tasks (over {threshold_pct:g} %{'; ' + who if who else ''})")
        slow = got.get("slowdown_pct")
        if slowdown_pct is not None and slow is not None and float(slow) > slowdown_pct:
            return (f"host interference: {what} ran {float(slow):.0f} % {SLOWED} (over "
                    f"{slowdown_pct:g} %: the host gave this guest's CPU less)")
    return None


def pass_stands(m: Dict[str, Any], passed: bool, step: float) -> bool:
    """Whether a search probe's pass holds however the host disturbed its
    trial ``m``: nothing but the host is wrong with it (no reason of the
    fidelity guard's in ``invalid`` yet), and the generator sent the probed
    rate to within half the search's ``step`` (its own count over its run,
    ``gen_pps``). A disturbance of the generator's CPU can make it send less,
    and a DUT offered less passes more easily; one of the sink's only adds
    loss; one of the DUT's only takes its CPU. In a quick run here the
    generator's own rate stayed within 0.7 % of every target below line
    rate, its CPU slowed or not (half a step at 64 bytes: 1.5 % of 74 kfps)."""
    return (passed and not m.get("invalid")
            and float(m.get("gen_pps") or 0.0) >= float(m["target_fps"]) - step / 2)


def search_disturbed(probes: List[Dict[str, Any]]) -> bool:
    """Whether host interference may have steered a throughput search: one of
    its probes stayed disturbed after its re-runs and failed. A disturbance
    only takes CPU from the bed (other tasks ran there, or the host slowed
    it), so a disturbed probe that *passed* would have passed with the whole
    CPU too: it steered the search where an undisturbed one would have
    (``stands``). A disturbed failure may be the host's loss, not the DUT's."""
    return any(any(str(w).startswith("host interference") for w in (p.get("invalid") or []))
               and not p.get("stands") for p in probes)


def undisturbed(found: List[float], flags: Optional[List[bool]]) -> List[float]:
    """The searches of ``found`` that no disturbed probe may have steered
    (``flags``: :func:`search_disturbed` of each; None, from an older run:
    none was), in order."""
    return [f for f, bad in zip(found, flags or [False] * len(found)) if not bad]


def point_searches(found: List[float], flags: Optional[List[bool]]) -> List[float]:
    """The searches a point's throughput is the mean of: the undisturbed ones,
    or every one if all were disturbed (the figure is then the host's as much
    as the DUT's, and the claims, which take only undisturbed searches, say so)."""
    return undisturbed(found, flags) or list(found)


def cost_unmeasured(m: Dict[str, Any]) -> str:
    """Why a cost trial gives no CPU time per frame."""
    if m.get("cpus_kept_awake"):
        return "the CPUs were kept awake"
    if not m.get("dut_forwarded_fps"):
        return "the DUT forwarded nothing"
    return (f"the DUT's CPU was {m.get('dut_busy_pct', 0):.0f} % busy, not above its idle "
            "baseline")


#: RFC 2544 (section 23): after a trial the tester waits two seconds for
#: frames still in flight before it counts what arrived.
DRAIN_MAX_S = 2.0
#: A receive count that has not moved for this long, with the DUT holding no
#: frame, is final: what has not arrived by then was lost.
DRAIN_STILL_S = 0.5


def drain_done(sent: int, received: int, still_s: float, dut_holds: Optional[int],
               elapsed_s: float) -> bool:
    """Whether a trial's final count may be read now, ``elapsed_s`` after its
    generator stopped: every frame put on the wire arrived; or the sink's
    count has not moved for :data:`DRAIN_STILL_S` (``still_s``) while the
    DUT holds nothing (``dut_holds``: frames in its input queue or ring;
    None where the kernel does not say, read as empty); or RFC 2544's
    :data:`DRAIN_MAX_S` are up. A fixed half second counted 14 of a
    burst's frames lost that the sink's socket received after it, where
    the DUT's queue at a burst's end took longer to forward."""
    if received >= sent or elapsed_s >= DRAIN_MAX_S:
        return True
    return still_s >= DRAIN_STILL_S and not dut_holds
