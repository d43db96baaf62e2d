"""RFC 2544 on one DUT's test bed: set it up (CPUs, the idle baseline, the bed's
latency floor, the DUT's cost knob), then measure each point (a test at one
frame size). The parts, each in its own module:

* :mod:`.bed`: the CPU split (generator CPU0, DUT CPU1) and NAPI threads;
* :mod:`.trials`: one trial, counted with kernel counters, measured again
  when the host disturbed it;
* :mod:`.calibration`: the idle baseline, the bed floor, the cost knob;
* :mod:`.search`: throughput searches, MLRsearch, the intrinsic cost,
  back-to-back.
"""
from __future__ import annotations

import logging
import statistics
import time
from typing import Any, Dict, List, Tuple

from nslab.runtime.proc import pin_threads, restore_threads

from .bed import napi_on
from .calibration import Calibration
from .model import nominal_fps
from .search import Tests
from nslab.run.study import Measured

log = logging.getLogger(__name__)


class Rfc2544Runner(Tests, Calibration):
    """One DUT's test bed and its trials."""

    # -- setup ----------------------------------------------------------------
    def setup(self) -> Dict[str, Any]:
        log.info("the %s lab is up: setting up its bed (%s)", self.dut,
                 "one vCPU" if self.layout.shared else "CPU0 and CPU1")
        info: Dict[str, Any] = {"dut": self.dut, "static_arp": self.lab.static_arp(),
                                "generator": self.cfg.generator}
        once = 0.0  # seconds of set-up measured once per run, reused by later labs
        # The raw send paths hand a veth frames one by one: without TSO/GSO on
        # the sending end, the receiving veth takes them through NAPI.
        self.gen.run(["ethtool", "-K", "gen-eth0", "tso", "off", "gso", "off"], check=False)
        if self.dut == "ovs":
            with open("/var/run/openvswitch/ovs-vswitchd.pid") as f:
                self.ovs_pid = int(f.read().strip())
            self.dut_in = self.lab["dut"].intfs[1]
            self.dut_out = self.lab["dut"].intfs[2]
            # ovs-vswitchd forwards here (userspace datapath): it runs on the
            # DUT's CPU like the kernel's forwarding does, or it would share
            # the generator's (a daemon the lab starts inherits the harness's
            # CPU0) and every trial would read as a saturated generator.
            self._ovs_affinity = pin_threads(self.ovs_pid, {self.dut_cpu})
            self.watch.bed_pids.add(self.ovs_pid)
            info["cpu_model"] = ("DUT CPU busy time: ovs-vswitchd (userspace datapath, its "
                                 f"{len(self._ovs_affinity)} threads pinned to "
                                 f"CPU{self.dut_cpu}) and the receive work RPS steers there; no "
                                 "cost knob")
        if self.layout.shared:
            info.update(self._shared_cpu())
        else:
            self._rps(self.dutn, self.dut_in, 1 << self.dut_cpu)
            self._rps(self.sink, "sink-eth0", 1 << self.gen_cpu)
            info["rps"] = {f"dut:{self.dut_in}": self.dut_cpu, "sink:sink-eth0": self.gen_cpu}
        if self._live_possible() and not self.layout.shared:
            # XDP live frames reach only an interface that runs NAPI: the DUT's
            # ingress receives in a NAPI thread on the DUT's CPU.
            info["dut_ingress_napi_cpu"] = (self.dut_cpu if napi_on(self.dutn, self.dut_in,
                                                                    self.dut_cpu) else None)
        time.sleep(0.3)
        # Each CPU's fastest loop time, this lab's readings and the run's earlier
        # labs': the reference a trial's slowdown is judged against.
        self.speed.prime()
        for cpu, ms in (self.earlier_setup("cpu_fastest_ms") or {}).items():
            if int(cpu) in self.speed.fastest:
                self.speed.fastest[int(cpu)] = min(self.speed.fastest[int(cpu)], float(ms))
        info["cpu_fastest_ms"] = {str(c): round(ms, 4) for c, ms in self.speed.fastest.items()}
        base = self.baseline()
        self.baseline_busy = base["busy_pct"]
        self.baseline_ok = bool(base["ok"])
        info["baseline_busy_pct"] = self.baseline_busy
        info["baseline"] = base
        info["cpu_accounting"] = (
            "the DUT's CPU is what the tester leaves of the one vCPU: its NAPI thread's run "
            "time plus the idle time; busy = that thread's share of it" if self.layout.shared
            else "busy = elapsed - idle (idle is exact on a tickless kernel)")
        if self.cfg.bed_floor:
            # The bed is the same for every DUT of a run: measured once.
            earlier = self.earlier_setup("bed_floor")
            t0 = time.monotonic()
            info["bed_floor"] = dict(earlier, reused=True) if earlier else self.bed_floor()
            once += time.monotonic() - t0
        if self.dut != "ovs":
            t0 = time.monotonic()
            n, cal = self.knob()
            once += time.monotonic() - t0
            if n:
                self._cost(n)
            self.filters = n
            info["dut_cost_filters"] = n
            if cal:
                info["calibration"] = cal
                self.cal_target_fps = float(cal["target_fps"]) if cal.get("target_fps") else None
        # the bed floor and the calibration are measured once per run: a later
        # round's estimate leaves them out (nslab.run.study.round_cost)
        info["once_s"] = round(once, 1)
        return info

    def measure(self, p: Dict[str, Any]) -> Measured:
        return Measured(*self._measure_point(p))

    def _measure_point(self, p: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], str]:
        """One point: a test at one frame size."""
        size, test = p["frame"], p["test"]
        if test == "back-to-back":
            m = self.back_to_back(size)
            if m["whole_trial"]:
                return m, [], (f"back-to-back: every burst up to {m['longest_tried']} frames "
                               "(one trial) clean")
            return m, [], (f"back-to-back {m['frames_mean']:.0f} frames (min {m['frames_min']:.0f}, "
                           f"max {m['frames_max']:.0f}) = {m['burst_ms_mean']:.1f} ms at line rate")
        if test == "throughput":
            m = self.throughput(size, int(p.get("repeat", 0)))
            return m, [], (f"throughput {m['throughput_fps']:.0f} fps ({m['pct_of_line']:.0f} % "
                           "of line)" + (" [generator-limited]" if m["generator_limited"] else ""))
        if test == "mlrsearch":
            m = self.mlr(size)
            g = m["goals"]
            return m, [], (f"MLRsearch NDR {g['NDR']['fps']:,.0f} fps, PDR {g['PDR']['fps']:,.0f} "
                           f"fps ({m['trials']} trials, {m['wall_s']:.0f} s)")
        if test == "cost":
            m = self.cost(size)
            vals = [t["us_per_packet"] * 1000 for t in m["trials"] if t["us_per_packet"]]
            bad = sorted({w for t in m["trials"] for w in (t["invalid"] or [])})
            return m, [], (f"intrinsic cost {statistics.median(vals):.0f} ns/frame (median of "
                           f"{len(vals)} trials, no knob)" if vals else
                           "no intrinsic cost measured: " + ("; ".join(bad) or "?"))
        if test == "latency":
            with self.keep_awake(self.cfg.keep_awake):
                trials = [self.trial(size, nominal_fps(self.scale), drift=True)
                          for _ in range(self.cfg.latency_trials)]
            trials.append(self.trial(size, 0.9 * self.line_fps(size), drift=True))
            m = {"trials": trials}
            return m, [], (f"latency avg {trials[0]['latency_us']['avg']:.0f} us at "
                           f"{nominal_fps(self.scale):g} fps, "
                           f"{trials[-1]['latency_us']['avg']:.0f} us at 90 % of line")
        trials = [self.trial(size, fps, drift=True) for fps in self.loads(size)]
        worst = max(trials, key=lambda t: t["loss_pct"])
        return {"trials": trials}, [], (f"{len(trials)} loads; worst loss {worst['loss_pct']:.1f} % "
                                        f"at {worst['target_fps']:.0f} fps")

    def _shared_cpu(self) -> Dict[str, Any]:
        """The virtual bed's one CPU (:data:`~.bed.SHARED`): the DUT's ingress
        receives in a NAPI thread of its own at the normal priority (its run
        time is the DUT's CPU time); the sink's interface in one at the
        tester's real-time priority, like the generator and the sink's
        process. Segmentation offloads off on the DUT's egress, so that its
        frames reach the sink's NAPI thread rather than the input queue of
        whichever task sent them."""
        self.dutn.run(["ethtool", "-K", self.dut_out, "tso", "off", "gso", "off"], check=False)
        dut = napi_on(self.dutn, self.dut_in, self.dut_cpu)
        sink = napi_on(self.sink, "sink-eth0", self.gen_cpu, fifo=self.layout.tester_fifo)
        if dut is None or sink is None:
            from nslab.errors import LabError
            raise LabError(f"virtual bed: no NAPI thread of its own for "
                           f"{'the DUT' if dut is None else 'the sink'}: the DUT's CPU time "
                           "could not be told apart from the tester's")
        self.dut_threads = [dut]
        return {"cpu_model": (
            f"one vCPU (the virtual bed): the tester (generator, sink, and the sink's NAPI "
            f"thread) at SCHED_FIFO {self.layout.tester_fifo}; the DUT's receive work in its "
            f"NAPI thread napi/{self.dut_in} at the normal priority"),
            "dut_napi_thread": dut, "sink_napi_thread": sink}

    def finish(self) -> None:
        """Nothing to keep: every count is in the record. ovs-vswitchd's threads
        get their CPUs back."""
        restore_threads(self._ovs_affinity)
        self._ovs_affinity = {}
        if self._nl is not None:
            self._nl.close()
            self._nl = None
