"""Study 2: ECMP hashing, ``fib_multipath_hash_policy`` L3 vs L4 (seed 002).

Two servers on a BGP-unnumbered clos; server2 runs ``iperf -c 10.0.200.1 -P3``
under each policy. The policy is set in the sender's namespace, the only one
that chooses between equal-cost nexthops here (spines have one path to
server1). For every trial the link of each stream is read from a short capture
on each of the sender's uplinks (source port -> interface); interface byte
counters are recorded as a cross-check. Per-stream rates come from iperf2's
own per-stream reports, as in the post.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from nslab.errors import CommandError, InputError, LabError

log = logging.getLogger(__name__)

SERVER = "server1"
SENDER = "server2"
TARGET = "10.0.200.1"
PORT = 5001
POLICY_SYSCTL = "net.ipv4.fib_multipath_hash_policy"


@dataclass
class EcmpConfig:
    """Every option of ``nslab run ecmp``."""

    policies: List[int] = field(default_factory=lambda: [0, 1])
    trials: int = 10
    streams: int = 3
    duration: float = 10.0
    spines: int = 2
    link_rate: str = "1Gbit"
    framing: bool = False

    def validate(self) -> "EcmpConfig":
        from nslab.shaping import parse_rate
        if not self.policies:
            raise InputError("--policy: empty list")
        if len(set(self.policies)) != len(self.policies):
            raise InputError("--policy: a policy is listed twice")
        for p in self.policies:
            if not 0 <= p <= 3:
                raise InputError(f"--policy {p}: Linux knows 0 (L3), 1 (L4), 2 (L3 inner), 3 (custom)")
        if self.trials < 1:
            raise InputError(f"--trials must be >= 1, got {self.trials}")
        if not 1 <= self.streams <= 64:
            raise InputError(f"--streams {self.streams} is out of range 1..64")
        if self.duration < 2:
            raise InputError(f"--duration {self.duration:g} s is too short (at least 2 s)")
        if not 1 <= self.spines <= 16:
            raise InputError(f"--spines {self.spines} is out of range 1..16")
        if str(self.link_rate).lower() != "none":
            parse_rate(self.link_rate)
        return self


def split_label(counts: List[int]) -> str:
    """``[1, 2]`` -> ``"2+1"``; ``[3, 0]`` -> ``"3+0"``: streams per link, largest first."""
    return "+".join(str(c) for c in sorted(counts, reverse=True))


def chance(streams: int, links: int) -> Dict[str, float]:
    """Probability of each split if every stream picks a link uniformly at random.

    3 streams on 2 links: ``{"3+0": 0.25, "2+1": 0.75}``.
    """
    total = links ** streams
    if total > 2_000_000:
        raise InputError(f"{streams} streams on {links} links: too many cases to enumerate")
    dist: Counter = Counter()
    for assign in itertools.product(range(links), repeat=streams):
        dist[split_label([assign.count(l) for l in range(links)])] += 1
    return {k: v / total for k, v in sorted(dist.items(), key=lambda kv: -kv[1])}


_TCPDUMP_RE = re.compile(r"IP (?P<src>[\d.]+)\.(?P<sport>\d+) > (?P<dst>[\d.]+)\.(?P<dport>\d+):")


def parse_tcpdump_ports(text: str, dport: int = PORT) -> Counter:
    """Packets per source port in ``tcpdump -nn -q`` output, for packets to ``dport``."""
    c: Counter = Counter()
    for m in _TCPDUMP_RE.finditer(text):
        if int(m.group("dport")) == dport:
            c[int(m.group("sport"))] += 1
    return c


def assign_links(captures: Dict[str, Counter]) -> Dict[int, str]:
    """Each source port goes to the interface where most of its packets were seen."""
    ports = set().union(*[set(c) for c in captures.values()]) if captures else set()
    return {p: max(captures, key=lambda i: captures[i].get(p, 0)) for p in ports}


class EcmpRunner:
    """The clos lab, the server, and one measurement per (policy, trial)."""

    def __init__(self, lab, cfg: EcmpConfig, store) -> None:
        self.lab = lab
        self.cfg = cfg
        self.store = store
        self.sender = lab[SENDER]
        self.uplinks = [f"{SENDER}-eth{s}" for s in range(cfg.spines)]
        self.convergence_s: Optional[float] = None

    def setup(self) -> None:
        from nslab.frr import wait_for_ecmp
        from nslab.iperf import start_server, wait_listening
        from nslab.topologies.clos import expected_routes
        self.convergence_s = wait_for_ecmp(self.lab, expected_routes(self.lab.topology), timeout=60)
        log.info("ECMP routes on both servers %.2f s after FRR start", self.convergence_s)
        for p in self.cfg.policies:  # refuse a policy the kernel rejects before measuring anything
            self.set_policy(p)
        start_server(self.lab[SERVER], enhanced=False)
        wait_listening(self.lab[SERVER])

    def set_policy(self, policy: int) -> None:
        try:
            self.sender.set_sysctls({POLICY_SYSCTL: policy})
        except CommandError as exc:
            raise InputError(f"the kernel rejects {POLICY_SYSCTL}={policy}: "
                             f"{(exc.stderr or '').strip().splitlines()[-1:] or ''}") from None
        got = self.sender.read_sysctl(POLICY_SYSCTL)
        if got != str(policy):
            raise InputError(f"the kernel did not keep {POLICY_SYSCTL}={policy} (reads {got})")

    def _tx_bytes(self) -> Dict[str, int]:
        out = {}
        for intf in self.uplinks:
            out[intf] = int(self.sender.run(["cat", f"/sys/class/net/{intf}/statistics/tx_bytes"])
                            .stdout.strip())
        return out

    def measure(self, point: Dict[str, Any]):
        from nslab.iperf import client_argv, parse
        policy, trial = int(point["policy"]), int(point["trial"])
        self.set_policy(policy)
        before = self._tx_bytes()
        t0 = time.time()
        client = self.sender.popen(client_argv(TARGET, time=self.cfg.duration,
                                               parallel=self.cfg.streams), name="iperf-client")
        time.sleep(min(1.5, self.cfg.duration / 3))
        caps = {intf: self.sender.popen(["tcpdump", "-i", intf, "-nn", "-q", "-l", "-s", "96",
                                         "-c", "3000", "tcp", "dst", "port", str(PORT)],
                                        name=f"tcpdump-{intf}") for intf in self.uplinks}
        time.sleep(0.6)
        captures: Dict[str, Counter] = {}
        raw_caps = []
        for intf, proc in caps.items():
            proc.stop(grace=1.0)
            out, _ = proc.popen.communicate()
            captures[intf] = parse_tcpdump_ports(out or "")
            raw_caps.append(f"### capture on {intf}\n{out or ''}")
        res = client.wait(timeout=self.cfg.duration + 60)
        after = self._tx_bytes()
        elapsed = time.time() - t0
        raw = self.store.raw_path(f"p{policy}-t{trial}-iperf.txt")
        with open(raw, "w") as f:
            f.write(res.stdout + ("\n# stderr\n" + res.stderr if res.stderr else ""))
        raw_cap = self.store.raw_path(f"p{policy}-t{trial}-captures.txt")
        with open(raw_cap, "w") as f:
            f.write("\n".join(raw_caps))
        rep = parse(res.stdout)
        if not rep.streams:
            raise LabError(f"iperf client reported no streams (policy {policy}, trial {trial}); "
                           f"see {raw}")
        link_of = assign_links(captures)
        streams = []
        for s in rep.streams:
            streams.append({"id": s.id, "local_port": s.local_port, "bps": s.bps,
                            "link": link_of.get(s.local_port)})
        per_link = [sum(1 for s in streams if s["link"] == intf) for intf in self.uplinks]
        unknown = sum(1 for s in streams if s["link"] is None)
        m = {"streams": streams, "sum_bps": rep.total_bps,
             "sum_reported_by_iperf": rep.sum.bps if rep.sum else None,
             "split": split_label(per_link) if not unknown else None,
             "streams_per_link": dict(zip(self.uplinks, per_link)),
             "unassigned_streams": unknown,
             "link_bytes": {i: after[i] - before[i] for i in self.uplinks},
             "link_mbps_avg": {i: (after[i] - before[i]) * 8 / elapsed / 1e6 for i in self.uplinks},
             "policy_set_in": SENDER}
        rates = ", ".join(f"{s['bps'] / 1e6:.0f}@{(s['link'] or '?').split('-')[-1]}" for s in streams)
        return m, [raw, raw_cap], f"{rates}; SUM {rep.total_bps / 1e6:.0f} Mbit/s; split {m['split']}"


def keep_frr_logs(lab, store) -> None:
    """Copy every node's FRR logs and configs into the run directory before teardown."""
    import glob
    import shutil
    for path in glob.glob(os.path.join(lab.workdir, "frr", "*", "*")):
        if path.endswith((".log", ".conf", ".stdout")):
            node = os.path.basename(os.path.dirname(path))
            dest = os.path.join(store.raw_dir, "frr", node)
            os.makedirs(dest, exist_ok=True)
            shutil.copy(path, dest)


def points(cfg: EcmpConfig) -> List[Dict[str, Any]]:
    """Trials interleaved across policies (policy 0, 1, 0, 1, ...) so drift hits both."""
    return [{"policy": p, "trial": t} for t in range(cfg.trials) for p in cfg.policies]


def run(cfg: EcmpConfig, results_root: str = "results", run_id: Optional[str] = None,
        resume: Optional[str] = None, progress: bool = True) -> str:
    """Build the clos, run the trials (or resume), write the report. Returns the run dir."""
    import dataclasses

    from nslab import caps
    from nslab.experiment import Sweep, open_store
    from nslab.lab import Lab
    from nslab.naming import new_run_id
    from nslab.results import collect_provenance
    from nslab.topologies.clos import clos

    from .ecmp_report import write_report
    run_id = run_id or new_run_id()
    store, cfg = open_store("ecmp", cfg, results_root, run_id, resume)
    cfg.validate()
    caps.require(["ecmp", "frr", "tool:tcpdump"], "the ECMP study")
    topo = clos(spines=cfg.spines, servers=2, link_rate=cfg.link_rate, framing=cfg.framing)
    with Lab(topo, run_id=run_id) as lab:
        runner = EcmpRunner(lab, cfg, store)
        runner.setup()
        store.write_provenance(collect_provenance(
            lab, sysctls=[POLICY_SYSCTL, "net.ipv4.tcp_congestion_control"],
            extra={"config": dataclasses.asdict(cfg), "convergence_s": runner.convergence_s,
                   "policy_set_in": SENDER,
                   "routes": {n: lab[n].run(["ip", "route"]).stdout for n in (SENDER, SERVER)}}))
        try:
            Sweep(store, points(cfg), runner.measure, progress=progress).run()
        finally:
            keep_frr_logs(lab, store)
    write_report(store.path)
    return store.path
