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


def window_payload(before: Dict[Tuple[str, str], int],
                   after: Dict[Tuple[str, str], int]) -> Tuple[int, int]:
    """Payload moved between two samples, socket by socket: a socket opened in
    between counts from zero; one closed in between is missing from ``after``
    (its last bytes cannot be counted: returned as the second value, so the
    point can be judged). Never negative, unlike a difference of sums."""
    moved = sum(v - before.get(k, 0) for k, v in after.items())
    closed = sum(1 for k in before if k not in after)
    return moved, closed


@dataclass
class Sample:
    t: float
    per_socket: Dict[Tuple[str, str], int]
    sockets: int
    rx_bytes: int
    cpu_busy: int
    cpu_total: int
    #: how long taking the sample took (its own uncertainty on ``t``)
    duration: float = 0.0


def invalid_reasons(m: Dict[str, Any], n: int, window: float) -> List[str]:
    """Why a point's receiver figure does not measure what it claims (empty: valid).

    The window must lie inside the traffic: every connection open at both ends
    of it, none closed in between, every client started on time, and each
    sample short against the window (on a slow or emulated CPU a 3 s point can
    fail all of these; a longer --duration fixes it).
    """
    out = []
    if m["late_start"]:
        out.append(f"a client started {-m['start_margin_s']:.2f} s late")
    for when in ("start", "end"):
        if m[f"sockets_at_window_{when}"] < n:
            out.append(f"{m[f'sockets_at_window_{when}']}/{n} connections open at the window's {when}")
    if m["sockets_closed_in_window"]:
        out.append(f"{m['sockets_closed_in_window']} connections closed inside the window")
    if window <= 0 or m["sample_s"] > 0.1 * window:
        out.append(f"a sample took {m['sample_s']:.2f} s of a {window:.2f} s window")
    return out


def from_sampler(raw: Dict[str, Any], sender: bool = False) -> Sample:
    """A :class:`Sample` from one sample of :mod:`nslab.experiments.sampler`."""
    per = {tuple(k.split("|", 1)): int(v) for k, v in raw["sockets"].items()}
    busy, total = raw["cpu"]
    return Sample(float(raw["t"]), per, len(per), int(raw["counter"]), int(busy), int(total),
                  float(raw.get("t_end", raw["t"])) - float(raw.get("t_start", raw["t"])))


def start_sampler(node: LabNode, iface: str, port: int = PORT, sender: bool = False):
    """Start the in-node sampler; return its process once it is ready to be
    given the instants (:func:`sample_at`)."""
    import subprocess
    import sys
    argv = [sys.executable, "-m", "nslab.experiments.sampler", "--port", str(port),
            "--iface", iface, "--counter", "tx_bytes" if sender else "rx_bytes"]
    proc = node.popen(argv + (["--sender"] if sender else []), name="sampler",
                      stdin=subprocess.PIPE)
    line = proc.popen.stdout.readline() if proc.popen.stdout else ""
    if "ready" not in line:
        raise LabError(f"the counter sampler in {node.name} did not start: "
                       f"{proc.wait(timeout=10).stderr.strip()[-300:]}")
    return proc


def sample_at(proc, instants: Sequence[float]) -> None:
    """Tell a ready sampler when to sample (epoch seconds)."""
    proc.popen.stdin.write(" ".join(f"{t:.6f}" for t in instants) + "\n")
    proc.popen.stdin.flush()


def read_samples(proc, sender: bool, timeout: float) -> List[Sample]:
    import json
    res = proc.wait(timeout=timeout)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    return [from_sampler(x, sender) for x in data["samples"]]


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
        self.spawn_s = 0.0

    def setup(self) -> None:
        """Aliases in one batch, one iperf2 server bound to each, started once per run.
        In two-box mode, check that the other box serves the first and last alias."""
        self.spawn_s = self._spawn_cost()
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

    def _spawn_cost(self) -> float:
        """Seconds to start one process in the client's namespace (the slowest of
        three): the clients' common start is set far enough ahead for all of them."""
        costs = []
        for _ in range(5):
            t0 = time.monotonic()
            self.client.run(["true"])
            costs.append(time.monotonic() - t0)
        return max(costs)

    def lead(self, n: int) -> float:
        """Seconds from now to the clients' common start: 1 s plus three times the
        time spawning them takes on this machine (254 clients: ~0.5 s natively,
        minutes in an emulated guest)."""
        return max(1.0 + 0.004 * n, 1.0 + 3 * self.spawn_s * (n + 1))

    def _wait_servers(self, count: int, timeout: float = 60) -> None:
        from nslab.iperf import wait_listening
        wait_listening(self.server, PORT, timeout=timeout, count=count)

    def measure(self, point: Dict[str, Any]):
        n, mode = int(point["n"]), point["mode"]
        dur = self.cfg.duration
        warm, cool = min(1.0, 0.1 * dur), min(0.5, 0.05 * dur)
        at = (self.client, "eth1", True) if self.remote else (self.server, SERVER_IFACE, False)
        sampler = start_sampler(at[0], at[1], sender=at[2])
        start = math.ceil(time.time() + self.lead(n))
        sample_at(sampler, [start + warm, start + dur - cool])
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
        s0, s1 = read_samples(sampler, at[2], timeout=start + dur - time.time() + 60)
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
        moved, closed = window_payload(s0.per_socket, s1.per_socket)
        m = {
            "receiver_bps": moved * 8 / window,
            "sockets_closed_in_window": closed,
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
            "sample_s": max(s0.duration, s1.duration),
        }
        m["invalid"] = invalid_reasons(m, n, window)
        summary = (f"receiver {m['receiver_bps'] / 1e6:.1f} Mbit/s, clients' sum "
                   f"{clients_sum / 1e6:.1f}, {s0.sockets}/{n} sockets, cpu {m['cpu_busy_pct']:.0f}%")
        if m["invalid"]:
            summary += f" [INVALID: {'; '.join(m['invalid'])}]"
        return m, [raw], summary


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
                 "spawn_s": runner.spawn_s,
                 "n_aliases": len(runner.addresses)}
        if cfg.uplink:
            extra["uplink"] = lab.extension("ovs").uplinks.get(cfg.uplink)  # its negotiated speed/duplex too
        store.write_provenance(collect_provenance(
            lab, sysctls=["net.ipv4.tcp_congestion_control", "net.core.rmem_max",
                          "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"], extra=extra))
        Sweep(store, points(cfg), runner.measure, progress=progress).run()
    write_report(store.path)
    return store.path
