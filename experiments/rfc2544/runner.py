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

import contextlib
import json
import logging
import random
import statistics
import subprocess
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from nslab.traffic.counters import (backlog_limit, busy_pct_from_idle, idle_seconds, node_link_stats,
                            process_cpu_seconds, qdisc_drops, softnet_drops,
                            softnet_queues)
from nslab.errors import CapabilityError, LabError
from nslab.traffic.interference import Watch, account
from nslab.traffic.pktgen import pktgen_path
from nslab.traffic.speed import SpeedWatch
from nslab.runtime.proc import pin_threads, restore_threads
from nslab.model.shaping import frame_rate

from .bed import DUT_CPU, GEN_CPU, napi_on
from .config import Rfc2544Config
from .model import (NOMINAL_FPS, baseline_of, calibration_next, calibration_saturated,
                    calibration_step, calibration_still_says_more, cost_unmeasured, disturbed,
                    fell_behind, loads, pass_stands, rate_search, search_disturbed,
                    trial_invalid)

if TYPE_CHECKING:  # pragma: no cover
    from nslab.runtime.lab import Lab

log = logging.getLogger(__name__)

PORT = 9
#: u32 classifier instances one ingress qdisc can hold (cls_u32 hands out 11-bit ids).
U32_PRIOS = 2047

#: Calibration: the first filter count tried, how close the capacity must come
#: to the target, and the most steps.
CAL_FILTERS = 500
CAL_TOLERANCE = 0.04
CAL_STEPS = 5
#: Offered load of a calibration step, times the target: enough to saturate the
#: DUT, not so much that overload itself costs it (at line rate a bridge
#: forwarded 4 % less than its zero-loss throughput).
CAL_OVERLOAD = 1.25
MAX_FILTERS = 5000
#: A calibration is checked by CAL_CHECK_READINGS more capacity readings with
#: the filters in place: their mean within this fraction of the target, or
#: calibrated again (at most CAL_CHECKS times).
CAL_CHECK_TOLERANCE = 0.05
CAL_CHECKS = 2
CAL_CHECK_READINGS = 2
#: Seconds of one calibration reading (see :meth:`Rfc2544Runner.calibrate`).
CAL_SECONDS = 3.0
#: The idle baseline: this many short windows with nothing offered; the low
#: quantile of their busy shares is the baseline (a burst of other work in one
#: window does not become every trial's zero).
BASELINE_WINDOWS = 6
BASELINE_WINDOW_S = 0.2
BASELINE_ROUNDS = 3
#: Trials excluded for host interference in a row after which no trial is
#: re-run until one comes out clean.
PERSISTENT = 3


class Rfc2544Runner:
    """One DUT's test bed and its trials."""

    def __init__(self, lab: Lab, cfg: Rfc2544Config, dut: str, store: Any) -> None:
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
        self.filters = 0
        self._pool: Any = None
        self._bed_path = False
        self._bed_mac = ""
        self._nh_mac: Optional[str] = None
        self._awake = False
        self._ovs_affinity: Dict[int, Any] = {}
        #: the scheduler's counters on both of the bed's CPUs (host interference)
        self.watch = Watch([GEN_CPU, DUT_CPU])
        #: how fast both CPUs run (what the host gives this guest)
        self.speed = SpeedWatch([GEN_CPU, DUT_CPU])
        self._excluded_streak = 0
        self.baseline_ok = True
        #: the throughput searches' dither (:func:`~.model.rate_search`)
        self._rng = random.Random()

    # -- the generator's send path ------------------------------------------------
    def gen_args(self, iface: str = "gen-eth0", dst_mac: Optional[str] = None) -> List[str]:
        """nslab-pktgen's send-path options: the configured ``--mode``; on a
        shaped link the qdisc is kept (AF_XDP and PACKET_QDISC_BYPASS would
        put frames past the link's shaper), and the raw paths get the
        interface and the next hop's MAC."""
        mode = self.cfg.generator
        args = ["--mode", mode]
        if mode == "udp":
            return args
        if self.cfg.line_bps() is not None:
            args += ["--qdisc", "keep"]
        if dst_mac is None:
            dst_mac = self._next_hop_mac()
        return args + ["--iface", iface, "--dst-mac", dst_mac]

    def _live_possible(self) -> bool:
        """May this bed's generator send XDP live frames (unshaped links, and
        the live path asked for or auto)?"""
        return self.cfg.line_bps() is None and self.cfg.generator in ("live", "auto")

    def _next_hop_mac(self) -> str:
        """The MAC the generator's frames go to: the router's ingress, or the sink
        behind a bridge (the DUTs learn or forward it)."""
        if self._nh_mac:
            return self._nh_mac
        from nslab.model.fields import MAC_RE
        node, intf = (self.dutn, self.dut_in) if self.dut == "router" else (self.sink, "sink-eth0")
        mac = node.run(["cat", f"/sys/class/net/{intf}/address"]).stdout.strip()
        if not MAC_RE.fullmatch(mac):
            raise LabError(f"{node.name}: {intf} reports MAC {mac!r}")
        self._nh_mac = mac
        return mac

    # -- setup ----------------------------------------------------------------
    def setup(self) -> Dict[str, Any]:
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
            self._ovs_affinity = pin_threads(self.ovs_pid, {DUT_CPU})
            self.watch.bed_pids.add(self.ovs_pid)
            info["cpu_model"] = ("DUT CPU busy time: ovs-vswitchd (userspace datapath, its "
                                 f"{len(self._ovs_affinity)} threads pinned to CPU{DUT_CPU}) and "
                                 "the receive work RPS steers there; no cost knob")
        self._rps(self.dutn, self.dut_in, 1 << DUT_CPU)
        self._rps(self.sink, "sink-eth0", 1 << GEN_CPU)
        info["rps"] = {f"dut:{self.dut_in}": DUT_CPU, "sink:sink-eth0": GEN_CPU}
        if self._live_possible():
            # XDP live frames reach only an interface that runs NAPI: the DUT's
            # ingress receives in a NAPI thread on the DUT's CPU.
            info["dut_ingress_napi_cpu"] = DUT_CPU if napi_on(self.dutn, self.dut_in, DUT_CPU) else None
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
        info["cpu_accounting"] = "busy = elapsed - idle (idle is exact on a tickless kernel)"
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
        # the bed floor and the calibration are measured once per run: a later
        # round's estimate leaves them out (nslab.run.study.round_cost)
        info["once_s"] = round(once, 1)
        return info

    def baseline(self) -> Dict[str, Any]:
        """The DUT CPU's busy share with nothing offered, from
        :data:`BASELINE_WINDOWS` short windows (:func:`~.model.baseline_of`:
        windows other tasks disturbed are left out, then the low quantile),
        measured again (up to :data:`BASELINE_ROUNDS` rounds) while it is not
        ``ok``. Still not ok, the run goes on with what was found and says so:
        the report takes no occupancy from it."""
        rounds: List[Dict[str, Any]] = []
        for _ in range(BASELINE_ROUNDS):
            windows = []
            for _ in range(BASELINE_WINDOWS):
                t0, a, sa = time.monotonic(), idle_seconds(), self.watch.snapshot()
                time.sleep(BASELINE_WINDOW_S)
                sb, b = self.watch.snapshot(), idle_seconds()
                busy = busy_pct_from_idle(a, b, time.monotonic() - t0, DUT_CPU)
                other = account(sa, sb, [DUT_CPU])[DUT_CPU]
                windows.append({"busy_pct": round(busy, 2), "other_pct": round(other.other_pct, 2)})
            found = baseline_of(windows, self.cfg.interference_pct)
            rounds.append(found)
            if found["ok"]:
                break
            log.warning("idle baseline of the DUT's CPU: %s; measuring it again", found["why"])
        out = dict(rounds[-1], rounds=len(rounds))
        if not out["ok"]:
            log.warning("idle baseline of the DUT's CPU not clean after %d rounds: %s; "
                        "occupancy figures of this lab are not judged", len(rounds), out["why"])
        return out

    # -- the latency floor of the test bed ----------------------------------------
    @contextlib.contextmanager
    def keep_awake(self, awake: bool = True) -> Iterator[None]:
        """Keep both CPUs out of their idle state (``awake``; else do nothing):
        one lowest-priority (SCHED_IDLE) spinner per CPU, which any real work
        preempts at once. On a VM an idle vCPU takes tens of microseconds to
        wake for a frame (the host noise probe sees the same lateness), which
        at 1,000 fps is the whole latency floor; it is the bed's, not the DUT's."""
        if not awake:
            yield
            return
        procs = [self.gen.popen(["taskset", "-c", str(cpu), "chrt", "-i", "0", "sh", "-c",
                                 "while :; do :; done"], name=f"keep-awake-cpu{cpu}",
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for cpu in (GEN_CPU, DUT_CPU)]
        self._awake = True
        try:
            time.sleep(0.1)
            yield
        finally:
            self._awake = False
            for p in procs:
                p.stop()

    def earlier_setup(self, key: str) -> Optional[Dict[str, Any]]:
        """``key`` of an earlier lab's setup in this run (e.g. its calibration)."""
        if self.store is None:
            return None
        for setup in (self.store.provenance().get("setups") or {}).values():
            if setup.get(key):
                return setup[key]
        return None

    def bed_floor(self, trials: int = 3) -> Dict[str, Any]:
        """One-way latency of the bed alone, generator -> sink with no DUT between
        them (a private veth pair, the sink's receive steered as on its link),
        at 1,000 fps of 64 bytes: with idle CPUs and with both kept awake."""
        if not self._bed_path:
            from nslab.model.render import line, text
            self.gen.run(["ip", "-batch", "-"], input=text([
                line("link", "add", "name", "bed0", "type", "veth", "peer", "name", "bed1",
                     "netns", self.sink.netns),
                line("link", "set", "dev", "bed0", "up"),
                line("addr", "add", "10.254.0.1/30", "dev", "bed0")]))
            self.sink.run(["ip", "-batch", "-"], input=text([
                line("link", "set", "dev", "bed1", "up"),
                line("addr", "add", "10.254.0.2/30", "dev", "bed1")]))
            self._rps(self.sink, "bed1", 1 << GEN_CPU)
            if self._live_possible():  # live frames need NAPI at the far end
                napi_on(self.sink, "bed1", GEN_CPU)
            mac = json.loads(self.sink.run(["ip", "-j", "link", "show", "dev", "bed1"]).stdout)[0]
            self.gen.run(["ip", "neigh", "replace", "10.254.0.2", "lladdr", mac["address"],
                          "dev", "bed0", "nud", "permanent"])
            self.gen.run(["ethtool", "-K", "bed0", "tso", "off", "gso", "off"], check=False)
            self._bed_mac = mac["address"]
            self._bed_path = True
        out: Dict[str, Any] = {"fps": NOMINAL_FPS, "frame": 64}
        for mode in ("idle", "awake"):
            with self.keep_awake(mode == "awake"):
                out[f"{mode}_us"] = [self._bed_trial() for _ in range(trials)]
        return out

    def _bed_trial(self) -> float:
        seconds = max(0.5, self.cfg.trial)
        sink = self._start_sink(seconds + 5, 0.1)
        self.gen.run(["taskset", "-c", str(GEN_CPU), self.pg, "send", "--dst", "10.254.0.2",
                      "--port", str(PORT), "--size", "64", "--rate", str(NOMINAL_FPS),
                      "--duration", f"{seconds + 0.1:.3f}", *self.gen_args("bed0", self._bed_mac)],
                     timeout=seconds + 30)
        time.sleep(0.2)
        sink.stop()
        sj = json.loads(sink.wait(timeout=30).stdout.strip().splitlines()[-1])
        return float(sj["latency_us"]["avg"])

    # -- the DUT's cost knob ------------------------------------------------------
    def knob(self) -> Tuple[int, Optional[Dict[str, Any]]]:
        """The number of u32 filters to install, and the calibration behind it.

        Given (``--dut-cost``): as given. Otherwise one calibration per run, made
        on the first DUT lab and reused by the others (the same "hardware" for
        every DUT, as in the paper): the intrinsic cost per frame with no
        filter, then with :data:`CAL_FILTERS`, gives the cost of one filter on
        this machine; the count makes a frame cost the target.
        """
        cfg = self.cfg
        if cfg.dut_cost is not None:
            return cfg.dut_cost, None
        cal = self.earlier_setup("calibration")
        if cal:
            return int(cal["filters"]), dict(cal, reused=True)
        return self.calibrate()

    def target_ns(self) -> Tuple[float, str]:
        """The per-frame cost the knob aims at, and where the target comes from."""
        cfg = self.cfg
        if cfg.dut_us_per_frame is not None:
            return cfg.dut_us_per_frame * 1000.0, f"--dut-us-per-frame {cfg.dut_us_per_frame:g}"
        if cfg.dut_fps_64 is not None:
            return 1e9 / cfg.dut_fps_64, f"--dut-fps-64 {cfg.dut_fps_64:g}"
        from nslab.store.published import load_published

        from .model import paper_knee
        fps = paper_knee(load_published("rfc2544"))
        return 1e9 / fps, f"the paper's knee, {fps:,.0f} fps of 64-byte frames (Table 3)"

    def calibrate(self) -> Tuple[int, Dict[str, Any]]:
        """Find the filter count whose 64-byte capacity (the rate the DUT forwards
        when offered :data:`CAL_OVERLOAD` times the target) is the target, by
        measuring it: the cost of a frame is nearly proportional to the
        filters, so each saturated reading scales the count by capacity /
        target, until within :data:`CAL_TOLERANCE` (a few steps); an
        unsaturated one grows it (:func:`~.model.calibration_step`); a reading
        the host disturbed is taken again at the same count, unless it still
        says "more filters" (:func:`~.model.calibration_still_says_more`). Then a
        check of :data:`CAL_CHECK_READINGS` more readings at the count found:
        their mean within :data:`CAL_CHECK_TOLERANCE` of the target, every one
        saturated and undisturbed, or the search goes on from the check's
        figure (at most :data:`CAL_CHECKS` checks).

        Each reading lasts :data:`CAL_SECONDS`: one capacity reading of 1 s
        varied by 7.3 % (CV, 8 readings, bridge, 850 filters), more than the
        check's tolerance; of 3 s, by 3.4 %.

        Measured at saturation on purpose: at low load a frame costs about
        twice as much CPU (an RPS wake-up per frame, no batching), so a
        calibration there puts the knee far too high."""
        target_ns, source = self.target_ns()
        target = 1e9 / target_ns
        line = self.line_fps(64)
        if target > 0.9 * line:
            raise CapabilityError(
                f"calibration: a DUT target of {target:,.0f} fps is over 90 % of the line rate "
                f"({line:,.0f} fps of 64 bytes): the DUT would never be the bottleneck; lower "
                "--dut-fps-64 or raise --link-rate")
        offered = min(line, CAL_OVERLOAD * target)
        n, steps, checks, since = CAL_FILTERS, [], [], 0
        try:
            while True:
                while True:
                    m = self._reading(n, offered)
                    steps.append(_cal_entry(n, m))
                    if len(steps) - since >= CAL_STEPS:
                        break  # the check says whether it got there
                    if self._disturbed(m) and not calibration_still_says_more(
                            m, target, CAL_TOLERANCE):
                        continue  # the same count again
                    nxt = calibration_step(n, m, target, CAL_TOLERANCE)
                    if nxt is None:
                        break
                    n = nxt
                    self._check_filters(n, target)
                # The check: more readings at the count found. A step measured
                # while the host was busy elsewhere, or one reading's own
                # scatter, puts the count off; the check catches it and the
                # search goes on from the check's figure.
                ms = [self._reading(n, offered) for _ in range(CAL_CHECK_READINGS)]
                check = statistics.fmean(float(x["received_fps"]) for x in ms)
                saturated = all(calibration_saturated(x) for x in ms)
                clean = not any(self._disturbed(x) for x in ms)
                ok = saturated and clean and abs(check / target - 1) <= CAL_CHECK_TOLERANCE
                checks.append({"filters": n, "capacity_fps": check, "ok": ok,
                               "readings": [_cal_entry(n, x) for x in ms]})
                if ok or len(checks) >= CAL_CHECKS:
                    cap = check
                    break
                log.warning("calibration check: %d filters forwarded %.0f fps (target %.0f): "
                            "%s: calibrating again", n, check, target,
                            "not saturated" if not saturated else
                            "a reading disturbed by the host" if not clean else
                            f"not within {CAL_CHECK_TOLERANCE * 100:.0f} %")
                if clean or any(calibration_still_says_more(x, target, CAL_TOLERANCE)
                                for x in ms):  # else the same count again
                    n = calibration_next(n, check, saturated, target, 0.0) or n
                self._check_filters(n, target)
                since = len(steps)
        finally:
            self._uncost()
        cal = {"target_ns_per_frame": target_ns, "target": source, "target_fps": target,
               "filters": n, "capacity_fps": cap, "ns_per_filter": 1e9 / cap / n,
               "reading_s": CAL_SECONDS, "steps": steps, "checks": checks,
               "checked": checks[-1]["ok"], "calibrated_on": self.dut}
        log.info("calibration on the %s: %d filters -> %.0f fps at overload (target %.0f)",
                 self.dut, n, cap, target)
        return n, cal

    def _disturbed(self, m: Dict[str, Any]) -> Optional[str]:
        """Why other tasks disturbed a trial after its re-runs (None: they did not)."""
        return disturbed(m.get("interference"), self.cfg.interference_pct, self.cfg.slowdown_pct)

    def _reading(self, n: int, offered: float) -> Dict[str, Any]:
        """One calibration reading: a trial of :data:`CAL_SECONDS` at ``offered``
        with ``n`` filters in place (the DUT forwarding nothing is an error)."""
        self._cost(n)
        try:
            m = self.trial(64, offered, seconds=CAL_SECONDS)
        finally:
            self._uncost()
        if m["received_fps"] <= 0:
            raise LabError(f"calibration: the {self.dut} forwarded nothing with {n} filters "
                           "in place")
        return m

    @staticmethod
    def _check_filters(n: int, target: float) -> None:
        if n > MAX_FILTERS or n < 1:
            raise CapabilityError(
                f"calibration: {n} filters needed for {target:,.0f} fps, outside 1.."
                f"{MAX_FILTERS}; set a reachable target with --dut-fps-64/"
                "--dut-us-per-frame, or --dut-cost")

    def _uncost(self) -> None:
        self.dutn.run(["tc", "qdisc", "del", "dev", self.dut_in, "ingress"], check=False)

    def _rps(self, node, intf: str, mask: int) -> None:
        node.run(["tee", f"/sys/class/net/{intf}/queues/rx-0/rps_cpus"], input=f"{mask:x}\n")

    def _cost(self, n: int) -> None:
        self.dutn.run(["tc", "qdisc", "add", "dev", self.dut_in, "handle", "ffff:", "ingress"])
        from nslab.model.render import line, text
        # One u32 instance per priority, at most U32_PRIOS of them (the kernel
        # numbers them in 11 bits: a CI run's 2048th filter was refused); beyond
        # that, further filters join the existing priorities' lists, which every
        # frame walks just the same.
        lines = [line("filter", "add", "dev", self.dut_in, "parent", "ffff:", "protocol", "ip",
                      "prio", (i - 1) % U32_PRIOS + 1, "u32", "match", "u32", "0xdeadbeef",
                      "0xffffffff", "at", 0, "flowid", "1:1") for i in range(1, n + 1)]
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
            self.gen.run(["ethtool", "-K", "gceil0", "tso", "off", "gso", "off"], check=False)
            self._rps(self.gen, "gceil1", 1 << DUT_CPU)
            if self._live_possible():
                napi_on(self.gen, "gceil1", DUT_CPU)
            self._ceiling_path = True
        res = self.gen.run(["taskset", "-c", str(GEN_CPU), self.pg, "send", "--dst", "10.255.0.2",
                            "--port", str(PORT), "--size", str(size), "--rate", "0",
                            "--duration", "1",
                            *self.gen_args("gceil0", "02:00:00:00:00:99")], timeout=30)
        pps = json.loads(res.stdout)["pps"]
        self.ceiling_pps[size] = pps
        return pps

    # -- one trial ------------------------------------------------------------
    def _start_sink(self, duration: float, warmup: float = 0.0):
        """The sink on the generator's CPU, listening before this returns."""
        sink = self.sink.popen(["taskset", "-c", str(GEN_CPU), self.pg, "recv", "--port", str(PORT),
                                "--duration", f"{duration:.3f}", "--warmup", f"{warmup:.3f}"],
                               name="pktgen-recv")
        if "ready" not in sink.readline():
            raise LabError(f"the sink did not start: {sink.wait(timeout=5).stderr.strip()}")
        return sink

    def trial(self, size: int, fps: float, seconds: Optional[float] = None,
              tag: str = "", stands: Optional[Callable[[Dict[str, Any]], bool]] = None
              ) -> Dict[str, Any]:
        """Offer ``fps`` frames/s of ``size`` bytes for warm-up + trial; count
        everything. A trial during which other tasks took more than
        ``interference_pct`` of the DUT's or the generator's CPU (or the host
        slowed one) is measured again (up to ``interference_reruns`` times);
        still disturbed, it is kept with that reason among its ``invalid``
        ones, so no figure comes from it. ``stands``: an outcome that holds
        however the host disturbed the trial (a search's pass): such a trial
        is not measured again, and is marked ``stands``."""
        reruns = 0
        # After PERSISTENT excluded trials in a row the host is busy for good:
        # no more re-runs (each would triple a trial's time for nothing) until
        # a trial comes out clean again.
        allowed = 0 if self._excluded_streak >= PERSISTENT else self.cfg.interference_reruns
        while True:
            m = self._trial_once(size, fps, seconds)
            why = self._disturbed(m)
            held = why is not None and stands is not None and stands(m)
            if why is None or held or reruns >= allowed:
                break
            reruns += 1
            log.info("trial at %.0f fps: %s; measuring it again (%d of %d)", fps, why, reruns,
                     allowed)
        m["interference_reruns"] = reruns
        if why is None:
            self._excluded_streak = 0
        else:
            if held:
                m["stands"] = True
            else:
                self._excluded_streak += 1
            m["invalid"] = list(m["invalid"]) + [f"{why} ({reruns + 1} tries)"]
        return m

    def _trial_once(self, size: int, fps: float, seconds: Optional[float] = None) -> Dict[str, Any]:
        cfg = self.cfg
        seconds = seconds or cfg.trial
        total = cfg.warmup + seconds
        sink = self._start_sink(total + 1.5, cfg.warmup)
        speed0 = self.speed.read()
        cpre = self._counters()
        gen = self.gen.popen(["taskset", "-c", str(GEN_CPU), self.pg, "send", "--dst", self.sink_ip,
                              "--port", str(PORT), "--size", str(size), "--rate", f"{fps:.3f}",
                              "--duration", f"{total:.3f}", *self.gen_args()], name="pktgen-send")
        t_start = time.monotonic()
        time.sleep(cfg.warmup)
        c0 = self._counters()
        time.sleep(max(0.0, seconds - (time.monotonic() - t_start - cfg.warmup)))
        c1 = self._counters()
        g = gen.wait(timeout=total + 30)
        time.sleep(0.5)  # RFC 2544 waits for frames in flight before the final count
        c2 = self._counters()
        speed1 = self.speed.read()
        sink.stop()  # it prints its counts on the way out; no need to wait out its duration
        s = sink.wait(timeout=30)
        gj = json.loads(g.stdout.strip().splitlines()[-1])
        sj = json.loads(s.stdout.strip().splitlines()[-1])
        window = c1["t"] - c0["t"]
        # The counters' own windows, from when each read came back; the CPU
        # figures use ``window`` (read at once, in this process).
        wins = {k: c1["t_read"][k] - c0["t_read"][k] for k in ("gen", "sink")}
        wins["dut"] = c1["t_read"].get("dut", c1["t"]) - c0["t_read"].get("dut", c0["t"])
        # Loss as RFC 2544 counts it: every frame put on the wire during the whole
        # trial against every frame the sink's interface received, after a drain.
        sent_all = c2["gen_tx"] - cpre["gen_tx"]
        recv_all = c2["sink_rx"] - cpre["sink_rx"]
        lost = max(0, sent_all - recv_all)
        offered = c1["gen_tx"] - c0["gen_tx"]
        received = c1["sink_rx"] - c0["sink_rx"]
        dut_busy = busy_pct_from_idle(c0["idle"], c1["idle"], window, DUT_CPU)
        occ = max(0.0, dut_busy - self.baseline_busy)
        fwd_pps = (c1["dut_tx"] - c0["dut_tx"]) / wins["dut"]
        inter = account(c0["sched"], c1["sched"], [GEN_CPU, DUT_CPU])
        m = {
            "frame": size, "target_fps": fps, "window_s": window,
            "counter_windows_s": {k: round(v, 4) for k, v in wins.items()},
            "offered_fps": offered / wins["gen"],
            "offered_bps": offered / wins["gen"] * size * 8,
            "received_fps": max(0, received) / wins["sink"],
            "throughput_bps": max(0, received) / wins["sink"] * size * 8,
            "frames_sent": sent_all, "frames_received": recv_all,
            "lost": lost, "loss_pct": 100.0 * lost / sent_all if sent_all else 0.0,
            "dut_forwarded_fps": fwd_pps,
            "dut_backlog_drops": c1["softnet"][DUT_CPU] - c0["softnet"][DUT_CPU],
            "dut_queue_frames": (c1["queue"][DUT_CPU] if len(c1["queue"]) > DUT_CPU
                                 else None),
            "ovs_vswitchd_busy_pct": (100.0 * (c1["ovs_cpu"] - c0["ovs_cpu"]) / window
                                      if self.ovs_pid else None),
            "dut_qdisc_drops": c1["dut_qdrops"] - c0["dut_qdrops"],
            "gen_qdisc_drops": c1["gen_qdrops"] - c0["gen_qdrops"],
            "gen_sent": gj["sent"], "gen_errors": gj["errors"], "gen_pps": gj["pps"],
            "gen_path": gj.get("path"),
            "latency_us": sj["latency_us"], "latency_samples": sj["in_window"],
            "dut_busy_pct": dut_busy, "dut_occupancy_pct": occ,
            "baseline_ok": self.baseline_ok,
            "us_per_packet": ((occ / 100.0) * 1e6 / fwd_pps if fwd_pps > 0 and not self._awake
                              else None),
            "cpus_kept_awake": self._awake,
            "gen_cpu_busy_pct": busy_pct_from_idle(c0["idle"], c1["idle"], window, GEN_CPU),
            "sink_backlog_drops": c1["softnet"][GEN_CPU] - c0["softnet"][GEN_CPU],
            "interference": {
                role: dict(inter[cpu].as_dict(),
                           slowdown_pct=round(self.speed.slowdown(cpu, speed0, speed1), 1))
                for role, cpu in (("dut", DUT_CPU), ("gen", GEN_CPU))},
        }
        ceiling = self.ceiling_pps.get(size)
        m["generator_limited"] = bool(ceiling and fps > 0.9 * ceiling)
        m["invalid"] = trial_invalid(m, self.line_fps(size))
        return m

    def _counters(self) -> Dict[str, Any]:
        """One snapshot of every counter a trial needs. The namespaces' counters
        are read concurrently (one tool call each), so a snapshot takes as long
        as its slowest read, not their sum."""
        from concurrent.futures import ThreadPoolExecutor
        c: Dict[str, Any] = {"t": time.monotonic(), "idle": idle_seconds(),
                             "sched": self.watch.snapshot(), "softnet": softnet_drops(),
                             "queue": softnet_queues()}
        jobs = {"gen": lambda: node_link_stats(self.gen, "gen-eth0"),
                "sink": lambda: node_link_stats(self.sink, "sink-eth0"),
                "gen_q": lambda: qdisc_drops(self.gen, "gen-eth0")}
        if self.dut != "ovs":
            jobs["dut"] = lambda: node_link_stats(self.dutn, self.dut_out)
            jobs["dut_q"] = lambda: qdisc_drops(self.dutn, self.dut_out)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=5, thread_name_prefix="counters")
        def timed(f: Any) -> Tuple[Any, float]:
            got = f()
            return got, time.monotonic()
        futures = {k: self._pool.submit(timed, f) for k, f in jobs.items()}
        done = {k: f.result(timeout=30) for k, f in futures.items()}
        got = {k: v for k, (v, _) in done.items()}
        # when each read came back: a read takes tens of ms (a process in the
        # node's namespace), so a window of counters runs from read to read
        c["t_read"] = {k: t for k, (_, t) in done.items()}
        # veth counts a frame the next hop's backlog refused as the sender's
        # tx_dropped, not tx_packets: offered = both.
        c["gen_tx"] = got["gen"]["tx_packets"] + got["gen"]["tx_dropped"]
        c["sink_rx"] = got["sink"]["rx_packets"]
        c["gen_qdrops"] = got["gen_q"]
        if self.dut == "ovs":
            from nslab.runtime.proc import run
            c["dut_tx"] = int(run(["cat", f"/sys/class/net/{self.dut_out}/statistics/tx_packets"]).stdout)
            c["dut_qdrops"] = 0
            c["ovs_cpu"] = process_cpu_seconds(self.ovs_pid) if self.ovs_pid else 0.0
        else:
            c["dut_tx"] = got["dut"]["tx_packets"]
            c["dut_qdrops"] = got["dut_q"]
        return c

    # -- RFC 2544 tests ---------------------------------------------------------
    def search(self, size: int, probes: List[Dict[str, Any]],
               hint: Optional[float] = None) -> Tuple[float, bool, Optional[float]]:
        """One RFC 2544 binary search for the highest rate with loss <= tolerance,
        then a confirmation trial twice as long. With ``hint`` (an earlier
        search's result) the first two probes bracket it at +-20 %; the bracket
        and the splits are dithered (:func:`~.model.rate_search`), so the
        searches of a point are independent samples. Returns (fps, confirmed, the DUT
        occupancy of the confirmation trial)."""
        cfg = self.cfg
        line = self.line_fps(size)
        top = min(line, self.measure_ceiling(size))
        step = cfg.resolution * line
        occ: List[Optional[float]] = []

        def behind(m: Dict[str, Any], seconds: Optional[float]) -> bool:
            return fell_behind(m.get("dut_queue_frames"), step, cfg.warmup + (seconds or cfg.trial))

        def passed(m: Dict[str, Any], seconds: Optional[float]) -> bool:
            return m["loss_pct"] <= cfg.loss_tolerance and not behind(m, seconds)

        def ok(fps: float, seconds: Optional[float] = None) -> bool:
            # A pass stands however the host disturbed it (search_disturbed),
            # if nothing else is wrong with it and the generator sent the rate.
            m = self.trial(size, fps, seconds,
                           stands=lambda x: pass_stands(x, passed(x, seconds), step))
            probes.append({k: m[k] for k in ("target_fps", "offered_fps", "received_fps",
                                             "loss_pct", "dut_occupancy_pct", "invalid",
                                             "gen_path", "interference_reruns")})
            if m.get("stands"):
                probes[-1]["stands"] = True
            probes[-1]["dut_other_pct"] = m["interference"]["dut"]["other_pct"]
            probes[-1]["gen_other_pct"] = m["interference"]["gen"]["other_pct"]
            probes[-1]["dut_slowdown_pct"] = m["interference"]["dut"]["slowdown_pct"]
            probes[-1]["gen_slowdown_pct"] = m["interference"]["gen"]["slowdown_pct"]
            probes[-1]["dut_top"] = m["interference"]["dut"]["top"]
            probes[-1]["gen_top"] = m["interference"]["gen"]["top"]
            fell = behind(m, seconds)
            probes[-1]["dut_queue_frames"] = m.get("dut_queue_frames")
            probes[-1]["fell_behind"] = fell
            # an invalid trial's occupancy (a disturbed host, a saturated
            # generator) is not the DUT's: none from it
            occ.append(None if m["invalid"] or not self.baseline_ok else m["dut_occupancy_pct"])
            return m["loss_pct"] <= cfg.loss_tolerance and not fell  # passed(m, seconds)

        lo = rate_search(ok, top, step, hint, self._rng)
        confirmed = lo > 0 and ok(lo, cfg.trial * 2)
        if lo > 0 and not confirmed:
            lo = max(0.0, lo - step)
            confirmed = lo > 0 and ok(lo, cfg.trial * 2)
        return lo, confirmed, (occ[-1] if lo > 0 else None)

    def throughput(self, size: int) -> Dict[str, Any]:
        """``searches`` independent RFC 2544 searches; the point's throughput is
        their median, their spread is what the report's interval comes from."""
        line = self.line_fps(size)
        ceiling = self.measure_ceiling(size)
        probes: List[Dict[str, Any]] = []
        found: List[float] = []
        occ: List[Optional[float]] = []
        confirmed = True
        disturbed_searches: List[bool] = []
        for i in range(self.cfg.searches):
            first = len(probes)
            fps, conf, o = self.search(size, probes, statistics.median(found) if found else None)
            found.append(fps)
            occ.append(o)
            confirmed = confirmed and conf
            # A probe still disturbed after its re-runs that failed may have
            # steered the search (a loss that was the neighbour's): no figure
            # from it. A disturbed pass stands (search_disturbed).
            disturbed_searches.append(search_disturbed(probes[first:]))
        kept = [f for f, bad in zip(found, disturbed_searches) if not bad] or found
        lo = statistics.median(kept)
        return {"throughput_fps": lo, "throughput_bps": lo * size * 8, "line_fps": line,
                "generator_ceiling_fps": ceiling, "generator_limited": lo >= 0.9 * ceiling,
                "confirmed": confirmed, "probes": probes, "pct_of_line": 100 * lo / line,
                "searches_fps": found, "searches_disturbed": disturbed_searches,
                "baseline_ok": self.baseline_ok,
                "occupancy_at_throughput_pct": [x for x in occ if x is not None]}

    def mlr(self, size: int) -> Dict[str, Any]:
        """NDR and PDR by MLRsearch: trials from a quarter of ``trial`` up to
        ``trial`` long, a duration sum of two trials, goal width ``resolution``."""
        from .mlr import mlr_search
        cfg = self.cfg
        line = self.line_fps(size)
        ceiling = self.measure_ceiling(size)

        def trial(fps: float, seconds: float) -> Tuple[int, int]:
            m = self.trial(size, fps, seconds)
            return m["frames_sent"], m["lost"]

        res = mlr_search(trial, min_load=max(100.0, 0.005 * line), max_load=min(line, ceiling),
                         initial_trial_s=max(0.5, cfg.trial / 4), final_trial_s=cfg.trial,
                         duration_sum_s=2 * cfg.trial, relative_width=cfg.resolution)
        return {"goals": res.goals, "trials": len(res.trials), "trial_seconds": res.duration_s,
                "wall_s": res.wall_s, "line_fps": line, "generator_ceiling_fps": ceiling}

    def cost(self, size: int) -> Dict[str, Any]:
        """The DUT's intrinsic cost: its CPU time per forwarded frame at fixed
        loads below saturation, with the knob's filters taken off for the
        duration (and put back after)."""
        line = self.line_fps(size)
        loads = [f for f in self.cfg.cost_fps if f <= 0.8 * line] or [0.4 * line, 0.8 * line]
        if self.filters:
            self._uncost()
        try:
            trials = []
            for fps in loads:
                for _ in range(self.cfg.cost_trials):
                    m = self.trial(size, fps, seconds=max(1.0, self.cfg.trial))
                    if not m["us_per_packet"] and not m["invalid"]:
                        # The cost test must forward and show the DUT's work
                        # above its idle baseline: once more, else say why.
                        log.info("cost trial at %.0f fps: %s; measuring it again", fps,
                                 cost_unmeasured(m))
                        m = self.trial(size, fps, seconds=max(1.0, self.cfg.trial))
                        if not m["us_per_packet"]:
                            m["invalid"] = list(m["invalid"]) + [cost_unmeasured(m)]
                    trials.append(m)
        finally:
            if self.filters:
                self._cost(self.filters)
        return {"trials": trials}

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
                              "--count", str(frames), "--duration", f"{seconds + 10:.3f}",
                              *self.gen_args()], timeout=seconds + 40)
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
                trials = [self.trial(size, NOMINAL_FPS) for _ in range(self.cfg.latency_trials)]
            trials.append(self.trial(size, 0.9 * self.line_fps(size)))
            m = {"trials": trials}
            return m, [], (f"latency avg {trials[0]['latency_us']['avg']:.0f} us at {NOMINAL_FPS} "
                           f"fps, {trials[-1]['latency_us']['avg']:.0f} us at 90 % of line")
        trials = [self.trial(size, fps) for fps in self.loads(size)]
        worst = max(trials, key=lambda t: t["loss_pct"])
        return {"trials": trials}, [], (f"{len(trials)} loads; worst loss {worst['loss_pct']:.1f} % "
                                        f"at {worst['target_fps']:.0f} fps")

    def finish(self) -> None:
        """Nothing to keep: every count is in the record. ovs-vswitchd's threads
        get their CPUs back."""
        restore_threads(self._ovs_affinity)
        self._ovs_affinity = {}
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _cal_entry(n: int, m: Dict[str, Any]) -> Dict[str, Any]:
    """A calibration reading as the run's provenance keeps it."""
    return {"filters": n, "capacity_fps": m["received_fps"],
            "offered_fps": m.get("offered_fps"), "loss_pct": m.get("loss_pct"),
            "dut_busy_pct": m.get("dut_busy_pct"), "saturated": calibration_saturated(m),
            "invalid": list(m.get("invalid") or [])}
