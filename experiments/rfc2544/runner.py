"""RFC 2544 trials on a running test bed: generator -- DUT -- sink.

CPU model: the generator and the sink run on CPU0; Receive Packet Steering
sends the DUT's receive processing (forwarding, its egress shaper) to CPU1,
and the sink's back to CPU0, so CPU1's busy time is the DUT's occupancy. A
DUT "cost" knob, a chain of N never-matching u32 filters on the DUT's ingress,
adds per-packet work to emulate a slower machine (the paper's 1.3 GHz Duron):
without it a veth DUT costs under 1 us per packet here and a single-core
generator cannot overload it below line rate.

Loss is counted with kernel counters (frames the generator put on the wire,
frames the DUT sent, frames the sink's interface received, backlog drops on
the DUT's CPU), latency from timestamps in every frame (one clock for all
namespaces), both over the trial after a warm-up.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import statistics
import time
from typing import Any, Dict, List, Optional, Tuple

from nslab.counters import (backlog_limit, busy_pct, cpu_times, node_link_stats,
                            process_cpu_seconds, qdisc_drops, softnet_drops)
from nslab.errors import CapabilityError, LabError
from nslab.pktgen import pktgen_path
from nslab.shaping import frame_rate

from .config import Rfc2544Config
from .model import NOMINAL_FPS, loads

log = logging.getLogger(__name__)

GEN_CPU, DUT_CPU = 0, 1
PORT = 9


class CpuSplitLock:
    """One RFC 2544 run at a time owns the CPU split (generator CPU0, DUT CPU1)."""

    PATH = "/run/nslab/cpu-split.lock"

    def __enter__(self) -> "CpuSplitLock":
        os.makedirs(os.path.dirname(self.PATH), exist_ok=True)
        self.f = open(self.PATH, "a+")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            owner = self.f.read().strip() or "?"
            self.f.close()
            raise CapabilityError(f"another RFC 2544 run ({owner}) holds the CPU split "
                                  "(generator on CPU0, DUT on CPU1): run one at a time") from None
        self.f.seek(0)
        self.f.truncate()
        self.f.write(f"pid {os.getpid()}")
        self.f.flush()
        return self

    def __exit__(self, *exc) -> None:
        # Remove the file while still holding the lock: a run that opened it
        # before finds it locked and refuses; one that comes later makes a new one.
        try:
            os.unlink(self.PATH)
        except FileNotFoundError:
            pass
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


class Rfc2544Runner:
    """One DUT's test bed and its trials."""

    def __init__(self, lab, cfg: Rfc2544Config, dut: str, store) -> None:
        from nslab.topologies.rfc2544 import roles
        self.lab, self.cfg, self.dut, self.store = lab, cfg, dut, store
        self.gen, self.sink, self.dutn = lab["gen"], lab["sink"], lab["dut"]
        self.sink_ip, self.dut_in = roles(dut)
        self.dut_out = "dut-eth1" if dut == "router" else "dut-eth2"
        self.pg = pktgen_path()
        self.baseline_busy = 0.0
        self.ceiling_pps: Dict[int, float] = {}
        self.ovs_pid: Optional[int] = None
        self._ceiling_path = False

    # -- setup ----------------------------------------------------------------
    def setup(self) -> Dict[str, Any]:
        info: Dict[str, Any] = {"dut": self.dut, "static_arp": self.lab.static_arp()}
        if self.dut == "ovs":
            info["cpu_model"] = "ovs-vswitchd CPU time (userspace datapath); RPS and cost knob n/a"
            with open("/var/run/openvswitch/ovs-vswitchd.pid") as f:
                self.ovs_pid = int(f.read().strip())
            self.dut_in = self.lab["dut"].intfs[1]
            self.dut_out = self.lab["dut"].intfs[2]
        else:
            self._rps(self.dutn, self.dut_in, 1 << DUT_CPU)
            self._rps(self.sink, "sink-eth0", 1 << GEN_CPU)
            info["rps"] = {f"dut:{self.dut_in}": DUT_CPU, "sink:sink-eth0": GEN_CPU}
            if self.cfg.dut_cost:
                self._cost(self.cfg.dut_cost)
            info["dut_cost_filters"] = self.cfg.dut_cost
        time.sleep(0.3)
        a = cpu_times()
        time.sleep(1.0)
        self.baseline_busy = busy_pct(a, cpu_times(), DUT_CPU)
        info["baseline_busy_pct"] = self.baseline_busy
        return info

    def _rps(self, node, intf: str, mask: int) -> None:
        node.run(["tee", f"/sys/class/net/{intf}/queues/rx-0/rps_cpus"], input=f"{mask:x}\n")

    def _cost(self, n: int) -> None:
        self.dutn.run(["tc", "qdisc", "add", "dev", self.dut_in, "handle", "ffff:", "ingress"])
        from nslab.render import line, text
        lines = [line("filter", "add", "dev", self.dut_in, "parent", "ffff:", "protocol", "ip",
                      "prio", i, "u32", "match", "u32", "0xdeadbeef", "0xffffffff", "at", 0,
                      "flowid", "1:1") for i in range(1, n + 1)]
        self.dutn.run(["tc", "-batch", "-"], input=text(lines), timeout=300)

    def measure_ceiling(self, size: int) -> float:
        """The generator's own ceiling on its CPU: as fast as it can, over a private
        unshaped veth in the generator's namespace whose receive side is steered to
        the other CPU (the frames are dropped there: nothing owns their address)."""
        if size in self.ceiling_pps:
            return self.ceiling_pps[size]
        if not self._ceiling_path:
            self.gen.run(["ip", "-batch", "-"], input="\n".join([  # constants only
                "link add name gceil0 type veth peer name gceil1",
                "link set dev gceil0 up", "link set dev gceil1 up",
                "addr add 10.255.0.1/30 dev gceil0",
                "neigh replace 10.255.0.2 lladdr 02:00:00:00:00:99 dev gceil0 nud permanent"]) + "\n")
            self._rps(self.gen, "gceil1", 1 << DUT_CPU)
            self._ceiling_path = True
        res = self.gen.run(["taskset", "-c", str(GEN_CPU), self.pg, "send", "--dst", "10.255.0.2",
                            "--port", str(PORT), "--size", str(size), "--rate", "0",
                            "--duration", "1"], timeout=30)
        pps = json.loads(res.stdout)["pps"]
        self.ceiling_pps[size] = pps
        return pps

    # -- one trial ------------------------------------------------------------
    def _start_sink(self, duration: float, warmup: float = 0.0):
        """The sink on the generator's CPU, listening before this returns."""
        sink = self.sink.popen(["taskset", "-c", str(GEN_CPU), self.pg, "recv", "--port", str(PORT),
                                "--duration", f"{duration:.3f}", "--warmup", f"{warmup:.3f}"],
                               name="pktgen-recv")
        if "ready" not in (sink.popen.stdout.readline() or ""):
            raise LabError(f"the sink did not start: {sink.wait(timeout=5).stderr.strip()}")
        return sink

    def trial(self, size: int, fps: float, seconds: Optional[float] = None,
              tag: str = "") -> Dict[str, Any]:
        """Offer ``fps`` frames/s of ``size`` bytes for warm-up + trial; count everything."""
        cfg = self.cfg
        seconds = seconds or cfg.trial
        total = cfg.warmup + seconds
        sink = self._start_sink(total + 1.5, cfg.warmup)
        cpre = self._counters()
        gen = self.gen.popen(["taskset", "-c", str(GEN_CPU), self.pg, "send", "--dst", self.sink_ip,
                              "--port", str(PORT), "--size", str(size), "--rate", f"{fps:.3f}",
                              "--duration", f"{total:.3f}"], name="pktgen-send")
        t_start = time.monotonic()
        time.sleep(cfg.warmup)
        c0 = self._counters()
        time.sleep(max(0.0, seconds - (time.monotonic() - t_start - cfg.warmup)))
        c1 = self._counters()
        g = gen.wait(timeout=total + 30)
        time.sleep(0.5)  # RFC 2544 waits for frames in flight before the final count
        c2 = self._counters()
        s = sink.wait(timeout=total + 30)
        gj = json.loads(g.stdout.strip().splitlines()[-1])
        sj = json.loads(s.stdout.strip().splitlines()[-1])
        window = c1["t"] - c0["t"]
        # Loss as RFC 2544 counts it: every frame put on the wire during the whole
        # trial against every frame the sink's interface received, after a drain.
        sent_all = c2["gen_tx"] - cpre["gen_tx"]
        recv_all = c2["sink_rx"] - cpre["sink_rx"]
        lost = max(0, sent_all - recv_all)
        offered = c1["gen_tx"] - c0["gen_tx"]
        received = c1["sink_rx"] - c0["sink_rx"]
        dut_busy = busy_pct(c0["cpu"], c1["cpu"], DUT_CPU)
        if self.ovs_pid:
            dut_busy = 100.0 * (c1["ovs_cpu"] - c0["ovs_cpu"]) / window
        occ = max(0.0, dut_busy - self.baseline_busy)
        fwd_pps = (c1["dut_tx"] - c0["dut_tx"]) / window
        m = {
            "frame": size, "target_fps": fps, "window_s": window,
            "offered_fps": offered / window, "offered_bps": offered / window * size * 8,
            "received_fps": max(0, received) / window,
            "throughput_bps": max(0, received) / window * size * 8,
            "frames_sent": sent_all, "frames_received": recv_all,
            "lost": lost, "loss_pct": 100.0 * lost / sent_all if sent_all else 0.0,
            "dut_forwarded_fps": fwd_pps,
            "dut_backlog_drops": c1["softnet"][DUT_CPU] - c0["softnet"][DUT_CPU] if not self.ovs_pid else None,
            "dut_qdisc_drops": c1["dut_qdrops"] - c0["dut_qdrops"],
            "gen_qdisc_drops": c1["gen_qdrops"] - c0["gen_qdrops"],
            "gen_sent": gj["sent"], "gen_errors": gj["errors"], "gen_pps": gj["pps"],
            "latency_us": sj["latency_us"], "latency_samples": sj["in_window"],
            "dut_busy_pct": dut_busy, "dut_occupancy_pct": occ,
            "us_per_packet": (occ / 100.0) * 1e6 / fwd_pps if fwd_pps > 0 else None,
        }
        ceiling = self.ceiling_pps.get(size)
        m["generator_limited"] = bool(ceiling and fps > 0.9 * ceiling)
        return m

    def _counters(self) -> Dict[str, Any]:
        c = {"t": time.monotonic(), "cpu": cpu_times(), "softnet": softnet_drops()}
        gs = node_link_stats(self.gen, "gen-eth0")
        # veth counts a frame the next hop's backlog refused as the sender's
        # tx_dropped, not tx_packets: offered = both.
        c["gen_tx"] = gs["tx_packets"] + gs["tx_dropped"]
        c["sink_rx"] = node_link_stats(self.sink, "sink-eth0")["rx_packets"]
        c["gen_qdrops"] = qdisc_drops(self.gen, "gen-eth0")
        if self.dut == "ovs":
            from nslab.proc import run
            c["dut_tx"] = int(run(["cat", f"/sys/class/net/{self.dut_out}/statistics/tx_packets"]).stdout)
            c["dut_qdrops"] = 0
            c["ovs_cpu"] = process_cpu_seconds(self.ovs_pid) if self.ovs_pid else 0.0
        else:
            c["dut_tx"] = node_link_stats(self.dutn, self.dut_out)["tx_packets"]
            c["dut_qdrops"] = qdisc_drops(self.dutn, self.dut_out)
        return c

    # -- RFC 2544 tests ---------------------------------------------------------
    def throughput(self, size: int) -> Dict[str, Any]:
        """Binary search for the highest rate with loss <= tolerance, then confirm."""
        cfg = self.cfg
        line = self.line_fps(size)
        ceiling = self.measure_ceiling(size)
        hi = min(line, ceiling)
        lo = 0.0
        probes = []

        def ok(fps: float, seconds: Optional[float] = None) -> bool:
            m = self.trial(size, fps, seconds)
            probes.append({k: m[k] for k in ("target_fps", "offered_fps", "received_fps",
                                             "loss_pct", "dut_occupancy_pct")})
            return m["loss_pct"] <= cfg.loss_tolerance

        if ok(hi):
            lo = hi
        else:
            step = cfg.resolution * line
            while hi - lo > step:
                mid = (lo + hi) / 2
                if ok(mid):
                    lo = mid
                else:
                    hi = mid
        confirmed = lo > 0 and ok(lo, cfg.trial * 2)
        if lo > 0 and not confirmed:
            lo = max(0.0, lo - cfg.resolution * line)
            confirmed = lo > 0 and ok(lo, cfg.trial * 2)
        return {"throughput_fps": lo, "throughput_bps": lo * size * 8, "line_fps": line,
                "generator_ceiling_fps": ceiling, "generator_limited": lo >= 0.9 * ceiling,
                "confirmed": confirmed, "probes": probes, "pct_of_line": 100 * lo / line}

    def burst(self, size: int, frames: int) -> Dict[str, Any]:
        """One back-to-back trial: a burst of ``frames`` frames at line rate (the
        generator paces at line rate into its shaped link, whose shaper puts
        them on the wire with minimum gaps), then, after a drain, how many
        the sink's interface received."""
        line = self.line_fps(size)
        seconds = frames / line
        sink = self._start_sink(seconds + 60)
        try:
            c0 = self._counters()
            g = self.gen.run(["taskset", "-c", str(GEN_CPU), self.pg, "send", "--dst", self.sink_ip,
                              "--port", str(PORT), "--size", str(size), "--rate", f"{line:.3f}",
                              "--count", str(frames), "--duration", f"{seconds + 10:.3f}"],
                             timeout=seconds + 40)
            time.sleep(0.5)  # frames in flight and in the DUT's queues
            c1 = self._counters()
        finally:
            sink.stop()
        s = sink.wait(timeout=10)
        gj = json.loads(g.stdout.strip().splitlines()[-1])
        sj = json.loads(s.stdout.strip().splitlines()[-1])
        sent = c1["gen_tx"] - c0["gen_tx"]
        recv = c1["sink_rx"] - c0["sink_rx"]
        return {
            "frames_requested": frames, "frames_sent": sent, "frames_received": recv,
            "lost": max(0, sent - recv), "gen_sent": gj["sent"], "gen_errors": gj["errors"],
            "gen_pps": gj["pps"], "sink_socket_received": sj["received"],
            "gen_qdisc_drops": c1["gen_qdrops"] - c0["gen_qdrops"],
            "dut_backlog_drops": (c1["softnet"][DUT_CPU] - c0["softnet"][DUT_CPU]
                                  if not self.ovs_pid else None),
            "dut_qdisc_drops": c1["dut_qdrops"] - c0["dut_qdrops"],
        }

    def back_to_back(self, size: int) -> Dict[str, Any]:
        """RFC 2544 section 26.4: the longest burst at line rate the DUT forwards
        without losing a frame. The longest burst tried is one trial long (the
        RFC asks for at least 2 s); the search stops when the bracket is within
        ``resolution`` of it. Repeated ``b2b_repeat`` times."""
        cfg = self.cfg
        line = self.line_fps(size)
        ceiling = self.measure_ceiling(size)
        longest = max(1, int(round(line * cfg.trial)))
        searches: List[Dict[str, Any]] = []
        for _ in range(cfg.b2b_repeat):
            probes: List[Dict[str, Any]] = []

            def clean(n: int) -> bool:
                m = self.burst(size, n)
                probes.append(m)
                return m["lost"] == 0 and m["frames_sent"] > 0

            lo, hi, best_sent = 0, longest, 0
            if clean(hi):
                lo, best_sent = hi, probes[-1]["frames_sent"]
            else:
                while hi - lo > max(1, int(cfg.resolution * hi)):
                    mid = (lo + hi) // 2
                    if clean(mid):
                        lo, best_sent = mid, probes[-1]["frames_sent"]
                    else:
                        hi = mid
            searches.append({"frames": lo, "frames_on_wire": best_sent, "whole_trial": lo == longest,
                             "probes": probes})
        values = [float(x["frames"]) for x in searches]
        mean = statistics.mean(values)
        return {"frames_mean": mean,
                "frames_stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
                "frames_min": min(values),
                "frames_max": max(values), "longest_tried": longest, "line_fps": line,
                "burst_ms_mean": 1000.0 * mean / line,
                "whole_trial": all(x["whole_trial"] for x in searches),
                "generator_ceiling_fps": ceiling, "generator_limited": line >= 0.9 * ceiling,
                # The kernel's input queue bounds a burst for bridge and router, not
                # for OVS's userspace datapath (its own queues): no prediction there.
                "backlog_limit": None if self.ovs_pid else backlog_limit(),
                "searches": searches}

    def line_fps(self, size: int) -> float:
        """Frames/s the link allows; unshaped links: the generator's ceiling."""
        bps = self.cfg.line_bps()
        return frame_rate(bps, size) if bps else self.measure_ceiling(size)

    def loads(self, size: int) -> List[float]:
        return loads(size, self.line_fps(size), self.cfg.paper_rates, self.cfg.quick_loads,
                     self.cfg.loads_pct)

    def measure(self, p: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], str]:
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
            m = self.throughput(size)
            return m, [], (f"throughput {m['throughput_fps']:.0f} fps ({m['pct_of_line']:.0f} % "
                           "of line)" + (" [generator-limited]" if m["generator_limited"] else ""))
        if test == "latency":
            trials = [self.trial(size, NOMINAL_FPS)]
            trials.append(self.trial(size, 0.9 * self.line_fps(size)))
            m = {"trials": trials}
            return m, [], (f"latency avg {trials[0]['latency_us']['avg']:.0f} us at {NOMINAL_FPS} "
                           f"fps, {trials[1]['latency_us']['avg']:.0f} us at 90 % of line")
        trials = [self.trial(size, fps) for fps in self.loads(size)]
        worst = max(trials, key=lambda t: t["loss_pct"])
        return {"trials": trials}, [], (f"{len(trials)} loads; worst loss {worst['loss_pct']:.1f} % "
                                        f"at {worst['target_fps']:.0f} fps")

    def finish(self) -> None:
        """Nothing to keep: every count is in the record."""
