"""The alias study on a running lab: aliases and servers once, then one point at
a time (clients started together, payload counted over a fixed window by an
in-node sampler, the clients' own reports kept beside it)."""
from __future__ import annotations

import functools
import json
import logging
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple

from nslab.runtime import cpufirst
from nslab.traffic.counters import limited_share
from nslab.errors import InputError, LabError
from nslab.traffic.iperf import client_argv, parse, server_argv, wait_listening
from nslab.runtime.node import LabLike, LabNode
from nslab.runtime.proc import Process
from nslab.model.render import text
from nslab.safeio import open_append, write_atomic
from nslab.model.shaping import goodput_ceiling, parse_rate

from .config import AliasConfig
from .model import alias_addresses, alias_batch, invalid_reasons, window_payload
from nslab.run.study import Measured

log = logging.getLogger(__name__)

SERVER_IFACE = "eth1"
PORT = 5001
#: the iperf servers' output, appended, in the run's raw/
SERVER_LOG = "servers.txt"


def pct(share: Optional[float]) -> Optional[float]:
    return None if share is None else 100.0 * share


def add_aliases(node: LabNode, iface: str, addresses: Sequence[str], prefix: int = 16) -> float:
    """Add all aliases in one ``ip -batch``; return the seconds it took."""
    t0 = time.monotonic()
    node.run(["ip", "-batch", "-"], input=text(alias_batch(iface, addresses, prefix)))
    return time.monotonic() - t0


@dataclass
class Sample:
    """Counters at one instant, from the in-node sampler: the sockets' bytes
    at ``t``, the link's counter at ``t_counter``, each the middle of its own
    read."""

    t: float
    per_socket: Dict[Tuple[str, str], int]
    sockets: int
    rx_bytes: int
    cpu_busy: int
    cpu_total: int
    #: the longer of its two reads (the uncertainty on ``t`` and ``t_counter``)
    duration: float = 0.0
    #: the senders' (busy, rwnd-limited, sndbuf-limited) microseconds, per socket
    limits: Dict[Tuple[str, str], Tuple[int, int, int]] = field(default_factory=dict)
    #: when the link's counter was read (samplers before 0.3.5: ``t``)
    t_counter: Optional[float] = None


def _socket(key: str) -> Tuple[str, str]:
    """A socket's two ends from the sampler's ``"local|remote"``."""
    local, _, remote = key.partition("|")
    return local, remote


def _limits(value: Sequence[Any]) -> Tuple[int, int, int]:
    """A sender's (busy, rwnd-limited, sndbuf-limited) microseconds."""
    busy, rwnd, sndbuf = value
    return int(busy), int(rwnd), int(sndbuf)


def from_sampler(raw: Dict[str, Any]) -> Sample:
    """A :class:`Sample` from one sample of :mod:`nslab.traffic.sampler`."""
    per = {_socket(k): int(v) for k, v in raw["sockets"].items()}
    busy, total = raw["cpu"]
    limits = {_socket(k): _limits(v) for k, v in raw.get("limits", {}).items()}
    took = max(float(raw["t_end"]) - float(raw["t_start"]), float(raw.get("counter_s", 0.0)))
    return Sample(float(raw["t"]), per, len(per), int(raw["counter"]), int(busy), int(total),
                  took, limits, float(raw["t_counter"]) if "t_counter" in raw else None)


#: How long a counter sampler may take to say it is ready (a Python process in
#: the node: 0.43-0.54 s here, idle; a busy host's is slower, not wrong).
READY_S = 60.0


class Sampler:
    """The in-node counter sampler (:mod:`nslab.traffic.sampler`), started
    once and asked for each point's samples in turn."""

    def __init__(self, node: LabNode, iface: str, port: int = PORT, sender: bool = False) -> None:
        argv = [sys.executable, "-I", "-m", "nslab.traffic.sampler", "--port", str(port),
                "--iface", iface, "--counter", "tx_bytes" if sender else "rx_bytes"]
        self.node = node
        self.proc = node.popen(argv + (["--sender"] if sender else []), name="sampler",
                               stdin=subprocess.PIPE)
        # real-time, it needs no weight: out of the CPU first's group, if any
        # (whose small real-time budget, once spent, stops it until the second ends)
        cpufirst.outside(self.proc.popen.pid)
        #: asked for samples it has not given yet
        self.pending = False

    def ready(self, timeout: float = READY_S) -> "Sampler":
        """Wait up to ``timeout`` s for its first line, which says it is ready
        to be asked; a sampler that ends or stays silent is stopped and named."""
        out = self.proc.popen.stdout
        assert out is not None  # its output is piped
        if not select.select([out], [], [], timeout)[0]:
            self.proc.stop()
            raise LabError(f"the counter sampler in {self.node.name} did not say it was ready "
                           f"within {timeout:.0f} s")
        line = out.readline()
        if "ready" not in line:
            raise LabError(f"the counter sampler in {self.node.name} did not start: "
                           f"{self._last_words()}")
        return self

    def ask(self, instants: Sequence[float]) -> None:
        """Tell it when to sample (epoch seconds)."""
        stdin = self.proc.popen.stdin
        assert stdin is not None  # started with stdin=PIPE
        try:
            stdin.write(" ".join(f"{t:.6f}" for t in instants) + "\n")
            stdin.flush()
        except OSError:  # it is gone (its end of the pipe closed)
            raise LabError(f"the counter sampler in {self.node.name} ended: "
                           f"{self._last_words()}") from None
        self.pending = True

    def read(self, timeout: float) -> List[Sample]:
        """The samples it took at the instants last asked for."""
        out = self.proc.popen.stdout
        assert out is not None  # its output is piped
        ready, _, _ = select.select([out], [], [], max(0.0, timeout))
        if not ready:
            raise LabError(f"the counter sampler in {self.node.name} gave no samples "
                           f"within {timeout:.0f} s")
        line = out.readline()
        if not line:  # the end of its output
            raise LabError(f"the counter sampler in {self.node.name} ended: "
                           f"{self._last_words()}")
        self.pending = False
        return [from_sampler(x) for x in json.loads(line)["samples"]]

    def _last_words(self) -> str:
        """Its exit status and the end of its stderr (it is stopped first)."""
        self.proc.stop()
        err = self.proc.popen.stderr
        try:
            tail = err.read()[-300:].strip() if err is not None else ""
        except (OSError, ValueError):
            tail = ""
        return f"exit {self.proc.popen.returncode}" + (f": {tail}" if tail else "")

    def end_input(self) -> None:
        """Close its stdin, which ends it once it has answered what it was
        asked; one asked and not read yet is stopped at once instead (it
        would wait for its last instant)."""
        if self.pending:
            self.proc.stop()
            return
        try:
            stdin = self.proc.popen.stdin
            if stdin is not None:
                stdin.close()
        except OSError:
            self.proc.stop()

    def close(self, wait: float = 5.0) -> None:
        """End it (:meth:`end_input`), waiting up to ``wait`` s, then stop it."""
        self.end_input()
        try:
            self.proc.popen.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.stop()


def start_samplers(*where: Tuple[LabNode, str, bool], timeout: float = READY_S) -> List[Sampler]:
    """Samplers on ``(node, interface, sender)``, started together and each
    ready to be asked (each given up to ``timeout`` s to say so)."""
    started = [Sampler(node, iface, sender=sender) for node, iface, sender in where]
    try:
        return [s.ready(timeout) for s in started]
    except BaseException:
        for s in started:
            s.proc.stop()
        raise


class AliasRunner:
    """Measures one point of the sweep on a running lab."""

    def __init__(self, lab: LabLike, cfg: AliasConfig, store: Any) -> None:
        self.lab = lab
        self.cfg = cfg
        self.store = store
        self.client: LabNode = lab["cl"]
        # Two-box mode: the server is the other machine; measure at the sender.
        self.remote = bool(cfg.uplink)
        self.server: Optional[LabNode] = None if self.remote else lab["srv"]
        self.addresses = alias_addresses(cfg.addr_template, max(cfg.aliases), cfg.prefix)
        self.alias_setup_s = 0.0
        self.spawn_s = 0.0
        self.samplers: Optional[Tuple[Sampler, Optional[Sampler]]] = None
        #: the iperf server of each alias (on one machine), and where they write
        self.servers: Dict[str, Process] = {}
        self.server_log: Optional[IO[str]] = None
        self.link_ceiling_bps: Optional[float] = None
        if str(cfg.rate).lower() != "none" and not self.remote:
            self.link_ceiling_bps = goodput_ceiling(parse_rate(cfg.rate), cfg.mss or 1448,
                                                    bool(cfg.framing))

    def setup(self) -> Dict[str, Any]:
        """Aliases in one batch, one iperf2 server bound to each, started once per run.
        In two-box mode, check that the other box serves the first and last alias."""
        self.spawn_s = self._spawn_cost()
        info: Dict[str, Any] = {"spawn_s": self.spawn_s, "n_aliases": len(self.addresses)}
        if self.remote:
            for addr in (self.addresses[0], self.addresses[-1]):
                res = self.client.run(["ping", "-c", "1", "-W", "2", addr], check=False)
                if not res.ok:
                    raise InputError(
                        f"no alias server answers at {addr} through {self.cfg.uplink}: run "
                        f"`nslab alias serve --iface IFACE --aliases {len(self.addresses)} "
                        f"--addr-template {self.cfg.addr_template}` on the other box")
            ovs = self.lab.extension("ovs")
            info["uplink"] = ovs.uplinks.get(self.cfg.uplink)  # its negotiated speed/duplex too
            return info
        assert self.server is not None
        self.alias_setup_s = add_aliases(self.server, SERVER_IFACE, self.addresses, self.cfg.prefix)
        log.info("%d aliases on %s:%s in %.3f s", len(self.addresses), self.server.name,
                 SERVER_IFACE, self.alias_setup_s)
        self.server_log = open_append(self.store.raw_path(SERVER_LOG))
        try:
            for addr in self.addresses:
                self._start_server(addr)
            wait_listening(self.server, PORT, timeout=60, count=len(self.addresses))
        except BaseException:
            # the run registers finish() only once set-up is done (the lab
            # stops the servers)
            self.server_log.close()
            self.server_log = None
            raise
        info["alias_setup_s"] = self.alias_setup_s
        return info

    def _start_server(self, addr: str) -> None:
        """The iperf2 server bound to ``addr``, its output appended to the run's
        ``raw/servers.txt`` after a line naming it (iperf 2.1.8 writes each
        report out at once: a server killed outright keeps its lines)."""
        assert self.server is not None and self.server_log is not None
        argv = server_argv(bind=addr, port=PORT, enhanced=False, fmt="k")
        self.server_log.write(f"# {time.strftime('%H:%M:%S')} {' '.join(argv)}\n")
        self.server_log.flush()
        self.servers[addr] = self.server.popen(
            argv, stdout=self.server_log, stderr=subprocess.STDOUT, name=f"iperf-s-{addr}")

    def mend_servers(self) -> List[str]:
        """Start again every alias's server that has ended (each said in one
        warning), and wait until all listen; returns their addresses. Only a
        server that has ended is seen: one alive that no longer accepts
        connections is not. On 2026-12-02, beside the roaming neighbour with
        the hypervisor taking a median of 16 % of this VM's CPUs over the
        run's points, no client reached the server on 192.168.2.1 after an
        N=254 point it served: every later point to it read nothing (its
        clients exiting at once, without a report), 7 of the run's 27. Its
        output was not kept then, so why is not known; it is now
        (``raw/servers.txt``, and each client's standard error beside its
        report)."""
        if self.server is None:
            return []
        ended = [a for a, proc in self.servers.items() if not proc.alive()]
        if not ended:
            return []
        where = self.store.rel(self.store.raw_path(SERVER_LOG))
        for addr in ended:
            log.warning("alias study: the iperf server on %s ended (exit status %s); starting "
                        "it again (its output: %s)", addr, self.servers[addr].popen.returncode,
                        where)
            self._start_server(addr)
        wait_listening(self.server, PORT, timeout=60, count=len(self.addresses))
        return ended

    def _spawn_cost(self) -> float:
        """Seconds to start one process in the client's namespace (the slowest of
        five): the clients' common start is set far enough ahead for all of them."""
        costs = []
        for _ in range(5):
            t0 = time.monotonic()
            self.client.run(["true"])
            costs.append(time.monotonic() - t0)
        return max(costs)

    def lead(self, procs: int) -> float:
        """Seconds from now to the clients' common start, for ``procs`` client
        processes: 0.5 s plus twice the time spawning them takes on this machine by
        the slowest of five probes (254 clients: ~1 s natively, minutes in an
        emulated guest). Three times left 4-6 s idle before every N=254 point
        here, with the clients spawned in under 1 s; the samplers, which once
        started with each point inside the first second, now run all along
        (:class:`Sampler`)."""
        return max(0.5 + 0.004 * procs, 0.5 + 2 * self.spawn_s * (procs + 1))

    def measure(self, point: Dict[str, Any]) -> Measured:
        return Measured(*self._measure_point(point))

    def _measure_point(self, point: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], str]:
        n, mode = int(point["n"]), point["mode"]
        dur = self.cfg.duration
        again = self.mend_servers()
        warm, cool = min(1.0, 0.1 * dur), min(0.5, 0.05 * dur)
        sampler, senders = self._samplers()
        # to the millisecond (iperf takes a fractional --txstart-time): a whole
        # second's rounding left each point up to 1 s idle, 0.5 s on average
        start = round(time.time() + self.lead(n if mode == "alias" else 1), 3)
        for each in (sampler, senders):
            if each is not None:
                each.ask([start + warm, start + dur - cool])
        common = functools.partial(client_argv, time=dur, txstart=float(start), fmt="k",
                                   mss=self.cfg.mss, nodelay=self.cfg.nodelay, cc=self.cfg.cc,
                                   port=PORT)
        procs = []
        spawned = []
        if mode == "alias":
            for i in range(n):
                procs.append(self.client.popen(common(self.addresses[i]),
                                               name=f"iperf-c{i + 1}"))
                spawned.append(time.time())
        else:
            procs.append(self.client.popen(common(self.addresses[0], parallel=n),
                                           name="iperf-cP"))
            spawned.append(time.time())
        try:
            s0, s1 = sampler.read(timeout=start + dur - time.time() + 60)
            c0, c1 = ((s0, s1) if senders is None else
                      senders.read(timeout=start + dur - time.time() + 60))
        except LabError:
            self._close_samplers()  # the run ends: its lab goes with it
            raise
        limited = limited_share(c0.limits, c1.limits)
        outputs, errors, finished = [], [], 0
        for p in procs:
            try:
                res = p.wait(timeout=dur + 60)
                outputs.append(res.stdout)
                errors.append(res.stderr)
                finished += 1 if res.returncode == 0 else 0
            except LabError as exc:
                outputs.append(f"# failed: {exc}")
                errors.append("")
        raw = self.store.raw_path(f"{mode}-n{n}-r{point['repeat']}.txt")
        write_atomic(raw, "".join(
            f"### client {i}\n{out}\n" + (f"### client {i}, standard error\n{err}\n"
                                           if err.strip() else "")
            for i, (out, err) in enumerate(zip(outputs, errors), 1)))
        reports = [parse(o) for o in outputs if not o.startswith("# failed")]
        if mode == "alias":
            clients_sum = sum(r.streams[0].bps for r in reports if r.streams)
            reported = sum(1 for r in reports if r.streams)
        else:
            clients_sum = reports[0].total_bps if reports else 0.0
            reported = len(reports[0].streams) if reports else 0
        window = s1.t - s0.t
        link_window = (s1.t_counter - s0.t_counter
                       if s0.t_counter is not None and s1.t_counter is not None else window)
        moved, closed = window_payload(s0.per_socket, s1.per_socket)
        m: Dict[str, Any] = {
            "receiver_bps": moved * 8 / window,
            "sockets_closed_in_window": closed,
            "receiver_l2_bps": (s1.rx_bytes - s0.rx_bytes) * 8 / max(link_window, 1e-9),
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
            "sndbuf_limited_pct": pct(limited["sndbuf_limited"]),
            "rwnd_limited_pct": pct(limited["rwnd_limited"]),
            "link_ceiling_bps": self.link_ceiling_bps,
            "servers_restarted": again,
        }
        m["invalid"] = invalid_reasons(m, n, window)
        summary = (f"receiver {m['receiver_bps'] / 1e6:.1f} Mbit/s, clients' sum "
                   f"{clients_sum / 1e6:.1f}, {s0.sockets}/{n} sockets, cpu {m['cpu_busy_pct']:.0f}%")
        if m["invalid"]:
            summary += f" [INVALID: {'; '.join(m['invalid'])}]"
        if again:
            summary += f" [iperf server(s) started again before it: {', '.join(again)}]"
        return m, [raw], summary

    def _samplers(self) -> Tuple[Sampler, Optional[Sampler]]:
        """The run's samplers, started with its first point: at the receiver
        (two-box mode: at the sender, the one box here) and, on one machine,
        at the senders too (how they were limited)."""
        if self.samplers is None:
            if self.remote:
                where = [(self.client, "eth1", True)]
            else:
                assert self.server is not None  # a lab on one machine has one (see __init__)
                where = [(self.server, SERVER_IFACE, False), (self.client, SERVER_IFACE, True)]
            found = start_samplers(*where)
            self.samplers = (found[0], found[1] if len(found) > 1 else None)
        return self.samplers

    def _close_samplers(self) -> None:
        """End every sampler at once, then wait for them together."""
        running = [each for each in self.samplers or () if each is not None]
        self.samplers = None
        for each in running:
            each.end_input()
        deadline = time.monotonic() + 5.0
        for each in running:
            each.close(wait=max(0.0, deadline - time.monotonic()))

    def finish(self) -> None:
        """Ends the samplers; every output is already in the run directory (the
        servers' log is closed here; the lab stops the servers)."""
        self._close_samplers()
        if self.server_log is not None:
            self.server_log.close()
            self.server_log = None
