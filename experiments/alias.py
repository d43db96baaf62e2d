"""Study 1: throughput vs number of IP aliases (seeds 000, 001, 003).

Setup as in the posts: the server's ``eth1`` carries N aliases
(``192.168.2.N label eth1:N``, added in one ``ip -batch``), one iperf2 server is
bound to each alias, and N iperf2 clients run at once, client i to alias i.

Measured right: the clients start together (a shared whole-second
``--txstart-time``), and the primary figure is the payload the server's sockets
received over a fixed window inside the run (``ss`` ``bytes_received``),
cross-checked with the interface's rx byte counter. The posts' own figure, the
sum of the clients' reported rates, is recorded beside it. A control variant
(``parallel``) opens N connections to a single address (``iperf -P N``) to test
the posts' explanation: more connections, not more aliases.
"""
from __future__ import annotations

import ipaddress
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from nslab.errors import InputError, LabError
from nslab.iperf import client_argv, parse, server_argv
from nslab.node import LabNode
from nslab.render import text

log = logging.getLogger(__name__)

#: The posts' alias counts.
POST_ALIASES = [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 254]
QUICK_ALIASES = [1, 16, 254]
SERVER_IFACE = "eth1"
ADDR_TEMPLATE = "192.168.2.%d"
PORT = 5001
MODES = ("alias", "parallel")


@dataclass
class AliasConfig:
    """The declared experiment: every option of ``nslab run alias``."""

    aliases: List[int] = field(default_factory=lambda: list(POST_ALIASES))
    duration: float = 10.0
    repeat: int = 3
    rate: str = "1Gbit"
    framing: bool = False
    switch: str = "none"
    mss: Optional[int] = None
    nodelay: bool = False
    cc: Optional[str] = None
    modes: Tuple[str, ...] = ("alias", "parallel")
    addr_template: str = ADDR_TEMPLATE
    prefix: int = 16
    uplink: Optional[str] = None
    force: bool = False

    def validate(self) -> "AliasConfig":
        if not self.aliases:
            raise InputError("--aliases: empty list")
        dup = sorted({n for n in self.aliases if self.aliases.count(n) > 1})
        if dup:
            raise InputError(f"--aliases: duplicate N {', '.join(map(str, dup))}")
        if self.duration <= 0:
            raise InputError(f"--duration must be positive, got {self.duration:g}")
        if self.duration < 2:
            raise InputError(f"--duration {self.duration:g} s is too short to measure a window "
                             "(at least 2 s)")
        if self.repeat < 1:
            raise InputError(f"--repeat must be >= 1, got {self.repeat}")
        for m in self.modes:
            if m not in MODES:
                raise InputError(f"unknown variant {m!r} (use {', '.join(MODES)})")
        if self.uplink and self.switch not in ("none", "ovs"):
            raise InputError("--uplink puts the client behind OVS: drop --switch or use ovs")
        if self.switch not in ("none", "bridge", "ovs"):
            raise InputError(f"unknown --switch {self.switch!r} (use none, bridge or ovs)")
        if self.cc is not None and not re.fullmatch(r"[a-z0-9_]{1,16}", self.cc):
            raise InputError(f"--cc {self.cc!r} is not a congestion control name (e.g. cubic, bbr)")
        if self.mss is not None and not 88 <= self.mss <= 9000:
            raise InputError(f"--mss {self.mss} is out of range 88..9000")
        alias_addresses(self.addr_template, max(self.aliases), self.prefix)
        if min(self.aliases) < 1:
            raise InputError(f"--aliases: N must be >= 1, got {min(self.aliases)}")
        return self


def alias_addresses(template: str, n: int, prefix: int = 16) -> List[str]:
    """The addresses of aliases 1..n from a ``%d`` template; raise if any is invalid."""
    if not 1 <= prefix <= 32:
        raise InputError(f"prefix length {prefix} is out of range 1..32")
    if template.count("%d") != 1 or template.replace("%d", "").count("%"):
        raise InputError(f"address template {template!r} must contain exactly one %d "
                         "(e.g. 192.168.2.%d)")
    out = []
    for i in range(1, n + 1):
        text = template.replace("%d", str(i))
        try:
            ip = ipaddress.IPv4Address(text)
        except ValueError:
            raise InputError(f"alias {i}: {text!r} from template {template!r} is not an IPv4 "
                             f"address (N={n} is more than the template allows)") from None
        if ip.is_multicast or ip.is_loopback or str(ip).endswith(".255") or str(ip).endswith(".0"):
            raise InputError(f"alias {i}: {ip} is not a usable host address "
                             f"(N={n} is more than the subnet allows)")
        out.append(str(ip))
    return out


def alias_batch(iface: str, addresses: Sequence[str], prefix: int = 16) -> List[str]:
    """``ip -batch`` lines adding labelled aliases ``iface:N`` (N from 1)."""
    from nslab.render import line
    return [line("addr", "add", ipaddress.ip_interface(f"{a}/{prefix}"), "dev", iface,
                 "label", f"{iface}:{i}") for i, a in enumerate(addresses, 1)]


def add_aliases(node: LabNode, iface: str, addresses: Sequence[str], prefix: int = 16) -> float:
    """Add all aliases in one ``ip -batch``; return the seconds it took."""
    t0 = time.monotonic()
    node.run(["ip", "-batch", "-"], input=text(alias_batch(iface, addresses, prefix)))
    return time.monotonic() - t0


_BYTES_RX_RE = re.compile(r"bytes_received:(\d+)")
_BYTES_ACKED_RE = re.compile(r"bytes_acked:(\d+)")


def parse_ss_bytes_received(text: str) -> Tuple[int, int]:
    """Sum ``bytes_received`` over the sockets in ``ss -tin`` output; also count them."""
    vals = [int(x) for x in _BYTES_RX_RE.findall(text)]
    return sum(vals), len(vals)


def parse_ss_bytes_acked(text: str) -> Tuple[int, int]:
    """Sum ``bytes_acked`` (payload the far end acknowledged, i.e. received) over
    the sender's sockets in ``ss -tin`` output; also count them."""
    vals = [int(x) for x in _BYTES_ACKED_RE.findall(text)]
    return sum(vals), len(vals)


def parse_proc_stat(text: str) -> Tuple[int, int]:
    """(busy, total) jiffies from the aggregate ``cpu`` line of /proc/stat."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]]
            idle = f[3] + (f[4] if len(f) > 4 else 0)
            return sum(f) - idle, sum(f)
    raise ValueError("no cpu line in /proc/stat")


@dataclass
class Sample:
    t: float
    payload: int
    sockets: int
    rx_bytes: int
    cpu_busy: int
    cpu_total: int


def sample(node: LabNode, iface: str, port: int = PORT, sender: bool = False) -> Sample:
    """Counters at one instant: payload received by the server's sockets (or, at
    the sender, payload the far end acknowledged), interface bytes, CPU."""
    t0 = time.time()
    filt = f"( dport = :{port} )" if sender else f"( sport = :{port} )"
    ss = node.run(["ss", "-tinH", "state", "established", filt]).stdout
    counter = "tx_bytes" if sender else "rx_bytes"
    link = node.run(["cat", f"/sys/class/net/{iface}/statistics/{counter}"]).stdout
    t1 = time.time()
    with open("/proc/stat") as f:
        busy, total = parse_proc_stat(f.read())
    payload, socks = (parse_ss_bytes_acked if sender else parse_ss_bytes_received)(ss)
    return Sample((t0 + t1) / 2, payload, socks, int(link.strip()), busy, total)


def goodput_ceiling(rate_bps: float, mss: int = 1448, framing: bool = False) -> float:
    """Most TCP payload a link of ``rate_bps`` carries in full-size segments.

    Per segment: TCP header with timestamps (32) + IP (20) + Ethernet (14), plus
    24 bytes of preamble, gap and FCS when framing is modelled.
    """
    wire = mss + 32 + 20 + 14 + (24 if framing else 0)
    return rate_bps * mss / wire


class AliasRunner:
    """Measures one point of the sweep on a running lab."""

    def __init__(self, lab, cfg: AliasConfig, store) -> None:
        self.lab = lab
        self.cfg = cfg
        self.store = store
        self.client: LabNode = lab["cl"]
        # Two-box mode: the server is the other machine; measure at the sender.
        self.remote = bool(cfg.uplink)
        self.server: Optional[LabNode] = None if self.remote else lab["srv"]
        self.addresses = alias_addresses(cfg.addr_template, max(cfg.aliases), cfg.prefix)
        self.servers_started = False
        self.alias_setup_s = 0.0

    def setup(self) -> None:
        """Aliases in one batch, one iperf2 server bound to each, started once per run.
        In two-box mode, check that the other box serves the first and last alias."""
        if self.remote:
            for addr in (self.addresses[0], self.addresses[-1]):
                res = self.client.run(["ping", "-c", "1", "-W", "2", addr], check=False)
                if not res.ok:
                    raise InputError(
                        f"no alias server answers at {addr} through {self.cfg.uplink}: run "
                        f"`nslab alias serve --iface IFACE --aliases {len(self.addresses)} "
                        f"--addr-template {self.cfg.addr_template}` on the other box")
            return
        self.alias_setup_s = add_aliases(self.server, SERVER_IFACE, self.addresses, self.cfg.prefix)
        log.info("%d aliases on %s:%s in %.3f s", len(self.addresses), self.server.name,
                 SERVER_IFACE, self.alias_setup_s)
        for addr in self.addresses:
            self.server.popen(server_argv(bind=addr, port=PORT, enhanced=False, fmt="k"),
                              stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"),
                              name=f"iperf-s-{addr}")
        self._wait_servers(len(self.addresses))
        self.servers_started = True

    def _wait_servers(self, count: int, timeout: float = 60) -> None:
        from nslab.iperf import wait_listening
        wait_listening(self.server, PORT, timeout=timeout, count=count)

    def measure(self, point: Dict[str, Any]):
        n, mode = int(point["n"]), point["mode"]
        dur = self.cfg.duration
        lead = 1.0 + 0.004 * n  # spawning 254 clients took 0.53 s here; margin recorded
        start = math.ceil(time.time() + lead)
        common = dict(time=dur, txstart=float(start), fmt="k", mss=self.cfg.mss,
                      nodelay=self.cfg.nodelay, cc=self.cfg.cc, port=PORT)
        procs = []
        spawned = []
        if mode == "alias":
            for i in range(n):
                procs.append(self.client.popen(client_argv(self.addresses[i], **common),
                                               name=f"iperf-c{i + 1}"))
                spawned.append(time.time())
        else:
            procs.append(self.client.popen(client_argv(self.addresses[0], parallel=n, **common),
                                           name="iperf-cP"))
            spawned.append(time.time())
        warm, cool = min(1.0, 0.1 * dur), min(0.5, 0.05 * dur)
        at = (self.client, "eth1", True) if self.remote else (self.server, SERVER_IFACE, False)
        _sleep_until(start + warm)
        s0 = sample(at[0], at[1], sender=at[2])
        _sleep_until(start + dur - cool)
        s1 = sample(at[0], at[1], sender=at[2])
        outputs, finished = [], 0
        for p in procs:
            try:
                res = p.wait(timeout=dur + 60)
                outputs.append(res.stdout)
                finished += 1 if res.returncode == 0 else 0
            except LabError as exc:
                outputs.append(f"# failed: {exc}")
        raw = self.store.raw_path(f"{mode}-n{n}-r{point['repeat']}.txt")
        with open(raw, "w") as f:
            for i, out in enumerate(outputs, 1):
                f.write(f"### client {i}\n{out}\n")
        reports = [parse(o) for o in outputs if not o.startswith("# failed")]
        if mode == "alias":
            clients_sum = sum(r.streams[0].bps for r in reports if r.streams)
            reported = sum(1 for r in reports if r.streams)
        else:
            clients_sum = reports[0].total_bps if reports else 0.0
            reported = len(reports[0].streams) if reports else 0
        window = s1.t - s0.t
        m = {
            "receiver_bps": (s1.payload - s0.payload) * 8 / window,
            "receiver_l2_bps": (s1.rx_bytes - s0.rx_bytes) * 8 / window,
            "clients_sum_bps": clients_sum,
            "window_s": window,
            "sockets_at_window_start": s0.sockets,
            "sockets_at_window_end": s1.sockets,
            "clients_reported": reported,
            "clients_finished": finished,
            "streams": n,
            "spawn_spread_s": spawned[-1] - spawned[0],
            "start_margin_s": start - spawned[-1],
            "late_start": spawned[-1] > start,
            "cpu_busy_pct": 100.0 * (s1.cpu_busy - s0.cpu_busy) / max(1, s1.cpu_total - s0.cpu_total),
            "receiver_measured_at": "sender, bytes acked by the far end" if self.remote
                                    else "receiver sockets, bytes received",
            "start_time": start,
        }
        summary = (f"receiver {m['receiver_bps'] / 1e6:.1f} Mbit/s, clients' sum "
                   f"{clients_sum / 1e6:.1f}, {s0.sockets}/{n} sockets, cpu {m['cpu_busy_pct']:.0f}%")
        return m, [raw], summary


def _sleep_until(t: float) -> None:
    while True:
        d = t - time.time()
        if d <= 0:
            return
        time.sleep(min(d, 0.5))


def points(cfg: AliasConfig, seed: int = 0) -> List[Dict[str, Any]]:
    from nslab.experiment import expand
    return expand({"mode": list(cfg.modes), "n": list(cfg.aliases)}, cfg.repeat, shuffle_seed=seed)


def run(cfg: AliasConfig, results_root: str = "results", run_id: Optional[str] = None,
        resume: Optional[str] = None, progress: bool = True) -> str:
    """Build the lab, run the sweep (or resume one), write the report. Returns the run dir."""
    import dataclasses

    from nslab.experiment import Sweep, open_store
    from nslab.lab import Lab
    from nslab.naming import new_run_id
    from nslab.results import collect_provenance
    from nslab.topologies.alias import alias_client_uplink, alias_pair

    from .alias_report import write_report
    run_id = run_id or new_run_id()
    store, cfg = open_store("alias", cfg, results_root, run_id, resume)
    cfg.validate()
    if cfg.uplink:
        topo = alias_client_uplink(cfg.uplink, force=cfg.force, bw=cfg.rate, framing=cfg.framing)
    else:
        topo = alias_pair(switch=cfg.switch, bw=cfg.rate, framing=cfg.framing)
    with Lab(topo, run_id=run_id) as lab:
        runner = AliasRunner(lab, cfg, store)
        runner.setup()
        extra = {"config": dataclasses.asdict(cfg), "alias_setup_s": runner.alias_setup_s,
                 "n_aliases": len(runner.addresses)}
        if cfg.uplink:
            extra["uplink"] = lab.extension("ovs").uplinks.get(cfg.uplink)  # its negotiated speed/duplex too
        store.write_provenance(collect_provenance(
            lab, sysctls=["net.ipv4.tcp_congestion_control", "net.core.rmem_max",
                          "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"], extra=extra))
        Sweep(store, points(cfg), runner.measure, progress=progress).run()
    write_report(store.path)
    return store.path
