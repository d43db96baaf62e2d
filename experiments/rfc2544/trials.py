"""One RFC 2544 trial on a running test bed: generator -- DUT -- sink.

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
namespaces), both over the trial after a warm-up. A trial the host disturbed
(other tasks on a bed CPU, or the host slowing one) is measured again.
"""
from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from nslab.errors import LabError
from nslab.model.shaping import frame_rate
from nslab.traffic.counters import (busy_pct_from_idle, idle_seconds, idle_seconds_ns,
                                    process_cpu_seconds, softnet_drops, softnet_queues)
from nslab.traffic.nlstats import NetnsCounters
from nslab.traffic.interference import Snapshot, Task, Watch, account, parse_task_schedstat
from nslab.traffic.pktgen import pktgen_path
from nslab.traffic.speed import SpeedWatch

from .bed import layout_here, napi_on
from .config import Rfc2544Config
from .model import (GUEST_TICK_S, disturbed, drain_done, loads, tester_clock_offset,
                    trial_invalid)

if TYPE_CHECKING:  # pragma: no cover
    from nslab.runtime.lab import Lab

log = logging.getLogger(__name__)

PORT = 9
#: u32 classifier instances one ingress qdisc can hold (cls_u32 hands out 11-bit ids).
U32_PRIOS = 2047
#: Trials excluded for host interference in a row after which no trial is
#: re-run until one comes out clean.
PERSISTENT = 3


class _DutThreads:
    """The virtual bed's stand-in for :class:`~nslab.traffic.interference.Watch`:
    a snapshot of the DUT's own threads only (all the bed's), which is what
    :meth:`TrialBed.cpu_shares` reads."""

    def __init__(self, bed: "TrialBed") -> None:
        self.bed = bed
        self.bed_pids: set = set()

    def snapshot(self) -> Snapshot:
        snap = Snapshot(time.monotonic())
        for tid in self.bed.dut_threads:
            try:
                with open(f"/proc/{tid}/schedstat") as f:
                    times = parse_task_schedstat(f.read())
            except (OSError, ValueError):
                continue
            snap.tasks[tid] = Task(times, frozenset(self.bed.layout.cpus), True, "")
        return snap


class _SteadyClock:
    """The virtual bed's stand-in for :class:`~nslab.traffic.speed.SpeedWatch`:
    a clock that counts instructions runs at one speed."""

    fastest: Dict[int, float] = {}

    def read(self) -> Dict[int, float]:
        return {}

    def prime(self, readings: int = 5) -> None:
        pass

    def slowdown(self, cpu: int, *readings: Dict[int, float]) -> float:
        return 0.0


class TrialBed:
    """One DUT's test bed, and a trial on it (the study's tests, the
    calibration and the runner build on this: :mod:`.runner`)."""

    #: the knee the calibration aimed the DUT at, 64-byte frames/s (None: no
    #: calibration in this run; :meth:`.search.Tests.prior_fps`)
    cal_target_fps: Optional[float] = None
    #: the seed of the throughput searches' dithers (None: random;
    #: :meth:`.search.Tests.search_rng`)
    rng_seed: Optional[str] = None

    def __init__(self, lab: Lab, cfg: Rfc2544Config, dut: str, store: Any) -> None:
        from nslab.topologies.rfc2544 import roles
        self.lab, self.cfg, self.dut, self.store = lab, cfg, dut, store
        self.gen, self.sink, self.dutn = lab["gen"], lab["sink"], lab["dut"]
        self.sink_ip, self.dut_in = roles(dut)
        self.dut_out = "dut-eth1" if dut == "router" else "dut-eth2"
        self.pg = pktgen_path()
        #: where the bed's parts run (:mod:`.bed`): the real bed's two CPUs, or the
        #: virtual bed's one
        self.layout = layout_here()
        self.gen_cpu, self.dut_cpu = self.layout.gen_cpu, self.layout.dut_cpu
        #: the bed's rates against the paper's (:meth:`~.config.Rfc2544Config.scale`)
        self.scale = cfg.scale()
        #: on a shared CPU: the DUT's NAPI threads, whose run time is its CPU time
        self.dut_threads: List[int] = []
        self.baseline_busy = 0.0
        self.ceiling_pps: Dict[int, float] = {}
        self.ovs_pid: Optional[int] = None
        self._ceiling_path = False
        self.filters = 0
        #: the bed's interface counters, read over netlink (made at the first read)
        self._nl: Optional[NetnsCounters] = None
        self._bed_path = False
        self._bed_mac = ""
        self._nh_mac: Optional[str] = None
        self._awake = False
        self._ovs_affinity: Dict[int, Any] = {}
        #: the scheduler's counters on both of the bed's CPUs (host interference)
        #: how fast both CPUs run (what the host gives this guest). On the virtual
        #: bed neither is needed, and each read costs the one vCPU inside a trial:
        #: its clock counts instructions (no host slows it), and its only tasks are
        #: the bed's; there only the DUT's threads are read (:class:`_DutThreads`).
        self.watch: Any = _DutThreads(self) if self.layout.shared else Watch(self.layout.cpus)
        self.speed: Any = _SteadyClock() if self.layout.shared else SpeedWatch(self.layout.cpus)
        self._excluded_streak = 0
        #: trials so far at each fixed load, (frame, fps): the sign of the next
        #: one's tester clock offset
        self._at_load: Dict[Tuple[int, float], int] = {}
        #: the guest kernel's tick on the virtual bed (its CONFIG_HZ, as the host
        #: read it into the run's provenance)
        hz = ((store.provenance().get("virtual_bed") or {}).get("kernel_hz")
              if self.layout.shared and store is not None else None)
        self.tick_s = 1.0 / float(hz) if hz else GUEST_TICK_S
        self.baseline_ok = True
        #: the throughput searches' dithers (:func:`~.model.rate_search`): seeded
        #: on the virtual bed, whose trials repeat themselves, so that a run
        #: repeats itself too (each search has a stream of its own)
        self.rng_seed = f"{cfg.vcpu_shift}/{dut}" if self.layout.shared else None

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

    # -- the latency floor of the test bed ----------------------------------------
    @contextlib.contextmanager
    def keep_awake(self, awake: bool = True) -> Iterator[None]:
        """Keep both CPUs out of their idle state (``awake``; else do nothing):
        one lowest-priority (SCHED_IDLE) spinner per CPU, which any real work
        preempts at once. On a VM an idle vCPU takes tens of microseconds to
        wake for a frame (the host noise probe sees the same lateness), which
        at 1,000 fps is the whole latency floor; it is the bed's, not the DUT's.
        Never on a shared CPU (the virtual bed): its vCPU wakes in no time of
        its own clock, and a spinner would take the DUT's CPU."""
        if not awake or self.layout.shared:
            yield
            return
        procs = [self.gen.popen(["taskset", "-c", str(cpu), "chrt", "-i", "0", "sh", "-c",
                                 "while :; do :; done"], name=f"keep-awake-cpu{cpu}",
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for cpu in self.layout.cpus]
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

    def _disturbed(self, m: Dict[str, Any]) -> Optional[str]:
        """Why other tasks disturbed a trial after its re-runs (None: they did not)."""
        return disturbed(m.get("interference"), self.cfg.interference_pct, self.cfg.slowdown_pct)

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
            self._rps(self.gen, "gceil1", 1 << self.dut_cpu)
            if self._live_possible():
                napi_on(self.gen, "gceil1", self.dut_cpu)
            self._ceiling_path = True
        res = self.gen.run([
            self.pg, "send", "--dst", "10.255.0.2", "--port", str(PORT), "--size", str(size),
            "--rate", "0", "--duration", "1", *self.gen_args("gceil0", "02:00:00:00:00:99"),
            *self.layout.tester_args("send")],
            timeout=30)
        pps = json.loads(res.stdout)["pps"]
        self.ceiling_pps[size] = pps
        return pps

    # -- one trial ------------------------------------------------------------
    def _start_sink(self, duration: float, warmup: float = 0.0, iface: str = "sink-eth0"):
        """The sink on the generator's CPU, listening before this returns. On
        the virtual bed it counts and times frames in an XDP program on
        ``iface`` (in the sink's NAPI thread): the tester's cost per frame
        there is the DUT's CPU lost, so the cheapest sink is the faithful one."""
        xdp = ["--mode", "xdp", "--iface", iface] if self.layout.shared and iface else []
        sink = self.spawn(self.sink, [
            self.pg, "recv", "--port", str(PORT), "--duration", f"{duration:.3f}",
            "--warmup", f"{warmup:.3f}", *xdp, *self.layout.tester_args("recv")],
            name="pktgen-recv")
        if "ready" not in sink.readline():
            raise LabError(f"the sink did not start: {sink.wait(timeout=5).stderr.strip()}")
        return sink

    def spawn(self, node: Any, argv: List[str], name: str) -> Any:
        """``argv`` started in ``node``'s namespace (the lab stops it on
        teardown). On the virtual bed it is forked inside the namespace, with
        no ``ip netns exec`` to start first (in the guest every program
        started is read from the host's files, and that read moves the
        guest's clock)."""
        if not self.layout.shared:
            return node.popen(argv, name=name)
        from nslab.runtime.proc import Process
        p = Process(argv, netns=node.netns, run_id=self.lab.run_id, where=node.name, name=name,
                    direct=True)
        self.lab.processes.append(p)
        return p

    def trial(self, size: int, fps: float, seconds: Optional[float] = None,
              tag: str = "", stands: Optional[Callable[[Dict[str, Any]], bool]] = None,
              drift: bool = False) -> Dict[str, Any]:
        """Offer ``fps`` frames/s of ``size`` bytes for warm-up + trial; count
        everything. A trial during which other tasks took more than
        ``interference_pct`` of the DUT's or the generator's CPU (or the host
        slowed one) is measured again (up to ``interference_reruns`` times);
        still disturbed, it is kept with that reason among its ``invalid``
        ones, so no figure comes from it. ``stands``: an outcome that holds
        however the host disturbed the trial (a search's pass): such a trial
        is not measured again, and is marked ``stands``. ``drift`` (a trial
        at a fixed load): on the virtual bed the tester's clock runs apart from
        the DUT's (:func:`~.model.tester_clock_offset`), as two boxes' do;
        the record keeps the load asked as ``target_fps``, the rate the
        generator was given as ``asked_fps``."""
        offset = 0.0
        if drift and self.layout.shared:
            key = (size, round(fps, 3))
            nth = self._at_load[key] = self._at_load.get(key, -1) + 1
            offset = tester_clock_offset(fps, seconds or self.cfg.trial, nth, self.tick_s)
        asked = fps * (1 + offset)
        reruns = 0
        # After PERSISTENT excluded trials in a row the host is busy for good:
        # no more re-runs (each would triple a trial's time for nothing) until
        # a trial comes out clean again.
        allowed = 0 if self._excluded_streak >= PERSISTENT else self.cfg.interference_reruns
        while True:
            m = self._trial_once(size, asked, seconds)
            why = self._disturbed(m)
            held = why is not None and stands is not None and stands(m)
            if why is None or held or reruns >= allowed:
                break
            reruns += 1
            log.info("trial at %.0f fps: %s; measuring it again (%d of %d)", fps, why, reruns,
                     allowed)
        m["interference_reruns"] = reruns
        if offset:
            m.update(target_fps=fps, asked_fps=round(asked, 3),
                     tester_clock_offset_pct=round(100 * offset, 4))
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
        gen = self.spawn(self.gen, [
            self.pg, "send", "--dst", self.sink_ip, "--port", str(PORT), "--size", str(size),
            "--rate", f"{fps:.3f}", "--duration", f"{total:.3f}", "--ready", "1",
            *self.gen_args(), *self.layout.tester_args("send")], name="pktgen-send")
        # the warm-up runs from when the generator runs (starting it may take a
        # while: in a guest its binary is read from the host)
        if "ready" not in gen.readline():
            raise LabError(f"the generator did not start: {gen.wait(timeout=5).stderr.strip()}")
        t_start = time.monotonic()
        time.sleep(cfg.warmup)
        c0 = self._counters()
        time.sleep(max(0.0, seconds - (time.monotonic() - t_start - cfg.warmup)))
        c1 = self._counters()
        g = gen.wait(timeout=total + 30)
        c2 = self._drain(cpre)  # RFC 2544 waits for frames in flight before the final count
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
        dut_busy, gen_busy, dut_s = self.cpu_shares(c0, c1, window)
        occ = max(0.0, dut_busy - self.baseline_busy)
        fwd_pps = (c1["dut_tx"] - c0["dut_tx"]) / wins["dut"]
        inter = account(c0["sched"], c1["sched"], self.layout.cpus)
        dut_cpu, gen_cpu = self.dut_cpu, self.gen_cpu
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
            "dut_backlog_drops": c1["softnet"][dut_cpu] - c0["softnet"][dut_cpu],
            "dut_queue_frames": self.behind_frames(cpre, c1),
            "ovs_vswitchd_busy_pct": (100.0 * (c1["ovs_cpu"] - c0["ovs_cpu"]) / window
                                      if self.ovs_pid else None),
            "dut_qdisc_drops": c1["dut_qdrops"] - c0["dut_qdrops"],
            "gen_qdisc_drops": c1["gen_qdrops"] - c0["gen_qdrops"],
            "gen_sent": gj["sent"], "gen_errors": gj["errors"], "gen_pps": gj["pps"],
            "gen_path": gj.get("path"),
            "latency_us": sj["latency_us"], "latency_samples": sj["in_window"],
            "dut_busy_pct": dut_busy, "dut_occupancy_pct": occ,
            "baseline_ok": self.baseline_ok,
            "us_per_packet": self.us_per_frame(occ, dut_s, fwd_pps, window),
            "cpus_kept_awake": self._awake,
            "gen_cpu_busy_pct": gen_busy,
            "sink_backlog_drops": c1["softnet"][gen_cpu] - c0["softnet"][gen_cpu],
            "interference": {
                role: dict(inter[cpu].as_dict(),
                           slowdown_pct=round(self.speed.slowdown(cpu, speed0, speed1), 1))
                for role, cpu in (("dut", dut_cpu), ("gen", gen_cpu))},
        }
        ceiling = self.ceiling_pps.get(size)
        m["generator_limited"] = bool(ceiling and fps > 0.9 * ceiling)
        m["invalid"] = trial_invalid(m, self.line_fps(size))
        return m

    def idle(self) -> List[float]:
        """Per CPU, seconds idle since boot: to the nanosecond on the virtual
        bed (``/proc/timer_list``: its DUT's CPU time is its thread's run time
        plus this, over windows of half a second), else from ``/proc/stat``."""
        return (idle_seconds_ns() or idle_seconds()) if self.layout.shared else idle_seconds()

    def cpu_shares(self, c0: Dict[str, Any], c1: Dict[str, Any], window: float
                   ) -> Tuple[float, float, Optional[float]]:
        """(the DUT CPU's busy share, the generator CPU's, the DUT's CPU seconds)
        over ``window`` between two snapshots of :meth:`_counters`.

        The real bed: each CPU's busy share is 100 - its idle share (the DUT's
        CPU seconds are not told apart there: None). On a shared CPU (the
        virtual bed): the DUT's CPU is the time the tester left it, its own
        NAPI threads' run time plus the idle time, and its busy share is its
        threads' part of that; the generator's is the rest of the CPU's busy
        time (tester, harness, kernel), as a share of the window."""
        if not self.layout.shared:
            return (busy_pct_from_idle(c0["idle"], c1["idle"], window, self.dut_cpu),
                    busy_pct_from_idle(c0["idle"], c1["idle"], window, self.gen_cpu), None)
        cpu = self.dut_cpu
        idle = max(0.0, c1["idle"][cpu] - c0["idle"][cpu])
        dut = 0.0
        for tid in self.dut_threads:
            a, b = c0["sched"].tasks.get(tid), c1["sched"].tasks.get(tid)
            if a is not None and b is not None:
                dut += (b.times.run_ns - a.times.run_ns) / 1e9
        left = dut + idle
        dut_busy = min(100.0, 100.0 * dut / left) if left > 0 else 100.0
        gen_busy = min(100.0, max(0.0, 100.0 * (window - idle - dut) / window)) \
            if window > 0 else 0.0
        return dut_busy, gen_busy, dut

    def behind_frames(self, cpre: Dict[str, Any], c1: Dict[str, Any]) -> Optional[int]:
        """Frames the DUT had not dealt with as the window ended: on the real bed
        its CPU's input queue (``softnet_stat``, Linux 5.10+; None before); on
        the virtual bed, whose DUT receives into its ingress interface's ring
        (256 frames, not the input queue), the frames offered since before
        the generator started (``cpre``: the ring was empty) less those the
        DUT forwarded (left in its ring, or lost). Counted over the window
        alone, the ring's fill at the window's start (0 to a poll's budget)
        was taken away as noise, and a short trial's ring hid an excess of
        ring / trial: 365 fps over 0.7 s, a tenth of the virtual bed's knee."""
        if self.layout.shared:
            return max(0, (c1["gen_tx"] - cpre["gen_tx"]) - (c1["dut_tx"] - cpre["dut_tx"]))
        q = c1["queue"]
        return q[self.dut_cpu] if len(q) > self.dut_cpu else None

    def us_per_frame(self, occ: float, dut_s: Optional[float], fwd_pps: float,
                     window: float) -> Optional[float]:
        """The DUT's CPU time per forwarded frame, microseconds (None when it
        forwarded nothing, or the CPUs were kept awake)."""
        if fwd_pps <= 0 or self._awake:
            return None
        if dut_s is not None:  # the DUT's own threads, measured
            return 1e6 * dut_s / (fwd_pps * window) if window > 0 else None
        return (occ / 100.0) * 1e6 / fwd_pps

    def _counters(self) -> Dict[str, Any]:
        """One snapshot of every counter a trial needs: the CPUs' idle time and
        the scheduler's counters (/proc), the input queues, and each bed
        interface's packet and root-qdisc drop counters, read over netlink
        sockets kept open in each node's namespace (:class:`NetnsCounters`: no
        process per read, so nothing the harness does in a trial's window
        costs a fork, or a read of a tool from a guest's shared root)."""
        c: Dict[str, Any] = {"t": time.monotonic(), "idle": self.idle(),
                             "sched": self.watch.snapshot(), "softnet": softnet_drops(),
                             "queue": softnet_queues()}
        if self._nl is None:
            ifs = {"gen": (self.gen.netns, "gen-eth0"), "sink": (self.sink.netns, "sink-eth0")}
            if self.dut != "ovs":
                ifs["dut"] = (self.dutn.netns, self.dut_out)
            self._nl = NetnsCounters(ifs)
        got = self._nl.links()
        gen_q = self._nl.qdisc_drops("gen")
        dut_q = self._nl.qdisc_drops("dut") if self.dut != "ovs" else 0
        t = time.monotonic()
        # every namespace is read at once, within a fraction of a millisecond
        c["t_read"] = {k: t for k in got}
        # veth counts a frame the next hop's backlog refused as the sender's
        # tx_dropped, not tx_packets: offered = both.
        c["gen_tx"] = got["gen"]["tx_packets"] + got["gen"]["tx_dropped"]
        c["sink_rx"] = got["sink"]["rx_packets"]
        c["gen_qdrops"] = gen_q
        if self.dut == "ovs":
            with open(f"/sys/class/net/{self.dut_out}/statistics/tx_packets") as f:
                c["dut_tx"] = int(f.read())
            c["dut_qdrops"] = 0
            c["ovs_cpu"] = process_cpu_seconds(self.ovs_pid) if self.ovs_pid else 0.0
        else:
            c["dut_tx"] = got["dut"]["tx_packets"]
            c["dut_qdrops"] = dut_q
        return c

    def _drain(self, c_start: Dict[str, Any]) -> Dict[str, Any]:
        """The counters once the frames put on the wire since ``c_start`` (read
        before the generator started) have arrived, or are lost
        (:func:`.model.drain_done`). Between full reads it polls only the
        generator's and the sink's packet counters over the open netlink
        sockets, and the DUT's input queue (on the virtual bed, whose DUT
        receives into a ring no counter shows, the count standing still
        alone decides), every 50 ms."""
        assert self._nl is not None  # c_start opened it
        t0 = time.monotonic()
        last, moved = -1, t0
        while True:
            got = self._nl.links()
            now = time.monotonic()
            sent = got["gen"]["tx_packets"] + got["gen"]["tx_dropped"] - c_start["gen_tx"]
            recv = got["sink"]["rx_packets"] - c_start["sink_rx"]
            if recv != last:
                last, moved = recv, now
            holds: Optional[int] = None
            if not self.layout.shared:
                q = softnet_queues()
                holds = q[self.dut_cpu] if len(q) > self.dut_cpu else None
            if drain_done(sent, recv, now - moved, holds, now - t0):
                log.debug("drained in %.2f s: %d of %d frames arrived", now - t0, recv, sent)
                return self._counters()
            time.sleep(0.05)

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
            g = self.gen.run([
                self.pg, "send", "--dst", self.sink_ip, "--port", str(PORT), "--size", str(size),
                "--rate", f"{line:.3f}", "--count", str(frames),
                "--duration", f"{seconds + 10:.3f}", *self.gen_args(),
                *self.layout.tester_args("send")], timeout=seconds + 40)
            c1 = self._drain(c0)  # frames in flight and in the DUT's queues
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
            "dut_backlog_drops": (c1["softnet"][self.dut_cpu] - c0["softnet"][self.dut_cpu]
                                  if not self.ovs_pid else None),
            "dut_qdisc_drops": c1["dut_qdrops"] - c0["dut_qdrops"],
        }

    def line_fps(self, size: int) -> float:
        """Frames/s the link allows; unshaped links: the generator's ceiling."""
        bps = self.cfg.line_bps()
        return frame_rate(bps, size) if bps else self.measure_ceiling(size)

    def loads(self, size: int) -> List[float]:
        return loads(size, self.line_fps(size), self.cfg.paper_rates, self.cfg.quick_loads,
                     self.cfg.loads_pct, self.scale)
