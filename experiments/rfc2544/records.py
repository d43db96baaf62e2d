"""The RFC 2544 study's records, typed and versioned (version 1 is today's
format). A point's measurements depend on its test: a throughput search, a
list of trials (latency, loss), or back-to-back searches."""
from __future__ import annotations

from typing import List, Optional, Union

from typing_extensions import Literal

from nslab.records import Record, RecordSchema, Strict


class RfcPoint(Strict):
    dut: Literal["bridge", "router", "ovs"]
    frame: int
    test: Literal["throughput", "latency", "loss", "back-to-back"]
    repeat: int


class Latency(Strict):
    min: float
    avg: float
    max: float
    stdev: float


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


class Probe(Strict):
    target_fps: float
    offered_fps: float
    received_fps: float
    loss_pct: float
    dut_occupancy_pct: float


class Throughput(Strict):
    throughput_fps: float
    throughput_bps: float
    line_fps: float
    generator_ceiling_fps: float
    generator_limited: bool
    confirmed: bool
    probes: List[Probe]
    pct_of_line: float


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


class RfcRecord(Record[RfcPoint, Union[Throughput, Trials, BackToBack]]):
    pass


SCHEMA = RecordSchema(RfcRecord, version=1)
