"""The RFC 2544 study's records, typed and versioned. A point's measurements
depend on its test: throughput searches, a list of trials (latency, loss,
cost), or back-to-back searches.

Version 2 added the ``cost`` test, several throughput searches per point
(``searches_fps``, ``occupancy_at_throughput_pct``) and several latency trials
at 1,000 fps; version 1 records read as one search each. Version 3: a
throughput point's ``throughput_fps`` is the mean of its searches left in (it
was their median); a version 2 record reads with the mean of the searches it
stored, so that every report says one thing.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

from typing_extensions import Literal

from nslab.store.records import Record, RecordSchema, Strict

from .model import point_searches


class RfcPoint(Strict):
    dut: Literal["bridge", "router", "ovs"]
    frame: int
    test: Literal["throughput", "latency", "loss", "back-to-back", "cost", "mlrsearch"]
    repeat: int


class Latency(Strict):
    """A trial's latencies (us): moments, and, from the user-space sinks (not
    the XDP one, nor records before nslab 0.9), the median and 99th percentile
    of a 0.1-us histogram."""

    min: float
    avg: float
    max: float
    stdev: float
    p50: Optional[float] = None
    p99: Optional[float] = None


class CpuInterference(Strict):
    """Other tasks' time on one of the bed's CPUs during a trial
    (:mod:`nslab.traffic.interference`)."""

    cpu: int
    window_s: float
    other_ms: float
    other_pct: float
    bed_wait_ms: float
    source: str
    #: how much slower than its fastest in the run the CPU ran at the trial's
    #: ends, percent (:mod:`nslab.traffic.speed`; None: older runs)
    slowdown_pct: Optional[float] = None
    #: the other tasks that could have run most there (each counted on every
    #: CPU it may run on): [name, ms], largest first (None: older runs)
    top: Optional[List[Tuple[str, float]]] = None


class Trial(Strict):
    """One trial at one offered rate, counted with kernel counters."""

    frame: int
    target_fps: float
    window_s: float
    offered_fps: float
    offered_bps: float
    received_fps: float
    throughput_bps: float
    frames_sent: int
    frames_received: int
    lost: int
    loss_pct: float
    dut_forwarded_fps: float
    dut_backlog_drops: Optional[int]
    dut_qdisc_drops: int
    gen_qdisc_drops: int
    gen_sent: int
    gen_errors: int
    gen_pps: float
    latency_us: Latency
    latency_samples: int
    dut_busy_pct: float
    dut_occupancy_pct: float
    us_per_packet: Optional[float]
    generator_limited: bool
    #: the fidelity guard (version 2; None: not checked)
    gen_cpu_busy_pct: Optional[float] = None
    sink_backlog_drops: Optional[int] = None
    invalid: Optional[List[str]] = None
    #: both CPUs kept out of idle by lowest-priority spinners (latency trials):
    #: their busy figures are the spinners', not the DUT's
    cpus_kept_awake: Optional[bool] = None
    #: nslab-pktgen's send path (udp, packet, xdp, live), as it reported it
    gen_path: Optional[str] = None
    #: OVS as the DUT: ovs-vswitchd's own share of the DUT's CPU (its threads
    #: pinned there; dut_busy_pct covers them and the kernel's receive work)
    ovs_vswitchd_busy_pct: Optional[float] = None
    #: host interference on the DUT's and the generator's CPU ("dut", "gen")
    interference: Optional[Dict[str, CpuInterference]] = None
    #: disturbed tries measured again before this one
    interference_reruns: Optional[int] = None
    #: the lab's idle baseline was clean, so dut_occupancy_pct means something
    #: (None: older runs)
    baseline_ok: Optional[bool] = None
    #: frames in the DUT CPU's input queue as the window ended (None: older
    #: runs, or a kernel before 5.10)
    dut_queue_frames: Optional[int] = None
    #: the windows of the generator's, the sink's and the DUT's counters,
    #: from when each read came back (None: older runs, whose rates used
    #: ``window_s``)
    counter_windows_s: Optional[Dict[str, float]] = None
    #: the virtual bed's trials at a fixed load: the rate the generator was
    #: asked, target_fps offset by the tester's clock against the DUT's (per
    #: cent; None: no offset, or older runs)
    asked_fps: Optional[float] = None
    tester_clock_offset_pct: Optional[float] = None


class Probe(Strict):
    target_fps: float
    offered_fps: float
    received_fps: float
    loss_pct: float
    dut_occupancy_pct: float
    invalid: Optional[List[str]] = None
    #: nslab-pktgen's send path of the probe's trial
    gen_path: Optional[str] = None
    #: disturbed tries measured again before this one
    interference_reruns: Optional[int] = None
    #: other tasks' share of the DUT's and the generator's CPU during the
    #: (last) try, percent
    dut_other_pct: Optional[float] = None
    gen_other_pct: Optional[float] = None
    #: how much slower than its fastest in the run each CPU ran at the (last)
    #: try's ends, percent (None: older runs)
    dut_slowdown_pct: Optional[float] = None
    gen_slowdown_pct: Optional[float] = None
    #: the other tasks that could have run most on each CPU during the (last)
    #: try: [name, ms], largest first (None: older runs)
    dut_top: Optional[List[Tuple[str, float]]] = None
    gen_top: Optional[List[Tuple[str, float]]] = None
    #: frames in the DUT CPU's input queue as the window ended, and whether
    #: that many mean the DUT fell behind the offered rate (None: older runs)
    dut_queue_frames: Optional[int] = None
    fell_behind: Optional[bool] = None
    #: disturbed by host interference, but passed: a DUT given its whole CPU
    #: would have passed too, so the search kept its outcome (its ``invalid``
    #: still names the disturbance: no occupancy comes from it). None: not
    #: disturbed, or older runs (which left such a search out)
    stands: Optional[bool] = None


class Throughput(Strict):
    #: the mean of the searches left in (version 3; version 2 recorded their
    #: median, and reads as their mean)
    throughput_fps: float
    throughput_bps: float
    line_fps: float
    generator_ceiling_fps: float
    generator_limited: bool
    confirmed: bool
    probes: List[Probe]
    pct_of_line: float
    #: every search's result (version 2; version 1: the one result)
    searches_fps: List[float]
    #: the DUT's occupancy in each search's confirmation trial (version 2)
    occupancy_at_throughput_pct: List[float]
    #: per search: a probe of it stayed disturbed by host interference after
    #: its re-runs and failed (a disturbed pass stands), so its result is no
    #: measurement of the DUT (None: older runs)
    searches_disturbed: Optional[List[bool]] = None
    #: the lab's idle baseline was clean (False: no occupancy figure was kept)
    baseline_ok: Optional[bool] = None
    #: the searches' step, frames/s (None: runs before nslab kept it)
    step_fps: Optional[float] = None
    #: where every search first bracketed: the calibration's target at 64
    #: bytes (None: another frame size, no calibration, or runs before it;
    #: each later search bracketed the earlier ones' median)
    prior_fps: Optional[float] = None


class Trials(Strict):
    trials: List[Trial]


class Burst(Strict):
    frames_requested: int
    frames_sent: int
    frames_received: int
    lost: int
    gen_sent: int
    gen_errors: int
    gen_pps: float
    sink_socket_received: int
    gen_qdisc_drops: int
    dut_backlog_drops: Optional[int]
    dut_qdisc_drops: int


class Search(Strict):
    frames: int
    frames_on_wire: int
    whole_trial: bool
    probes: List[Burst]


class BackToBack(Strict):
    frames_mean: float
    frames_stdev: float
    frames_min: float
    frames_max: float
    longest_tried: int
    line_fps: float
    burst_ms_mean: float
    whole_trial: bool
    generator_ceiling_fps: float
    generator_limited: bool
    backlog_limit: Optional[int]
    searches: List[Search]


class MlrGoal(Strict):
    fps: float
    lower_bound: float
    upper_bound: float


class Mlr(Strict):
    """MLRsearch (version 2): NDR and PDR with their relevant bounds."""

    goals: Dict[str, MlrGoal]
    trials: int
    trial_seconds: float
    wall_s: float
    line_fps: float
    generator_ceiling_fps: float


class RfcRecord(Record[RfcPoint, Union[Throughput, Trials, BackToBack, Mlr]]):
    pass


def _v1_to_v2(rec: Dict[str, Any]) -> Dict[str, Any]:
    m = rec.get("measurements") or {}
    if "throughput_fps" in m:
        m.setdefault("searches_fps", [m["throughput_fps"]])
        m.setdefault("occupancy_at_throughput_pct", [])
    return rec


def _v2_to_v3(rec: Dict[str, Any]) -> Dict[str, Any]:
    m = dict(rec.get("measurements") or {})
    rec["measurements"] = m
    found = m.get("searches_fps")
    if "throughput_fps" in m and isinstance(found, list) and found \
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in found):
        flags = m.get("searches_disturbed")
        kept = point_searches(found, flags if isinstance(flags, list) else None)
        mean = sum(kept) / len(kept)
        was = m["throughput_fps"]
        if isinstance(was, (int, float)) and not isinstance(was, bool) and was:
            for k in ("throughput_bps", "pct_of_line"):  # both proportional to it
                if isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool):
                    m[k] = m[k] * mean / was
        ceiling = m.get("generator_ceiling_fps")
        if isinstance(ceiling, (int, float)) and not isinstance(ceiling, bool):
            m["generator_limited"] = mean >= 0.9 * ceiling  # as the search says it
        m["throughput_fps"] = mean
    return rec


SCHEMA = RecordSchema(RfcRecord, version=3, upgrades={1: _v1_to_v2, 2: _v2_to_v3})
