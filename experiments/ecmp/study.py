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

from typing import Any, Dict, List

from nslab.run.study import Study, StudyReport
from nslab.model.topo import Topology
from nslab.runtime.node import LabLike

from .config import EcmpConfig
from .records import SCHEMA


class EcmpStudy(Study[EcmpConfig]):
    name = "ecmp"
    title = "Study 2: ECMP hashing, fib_multipath_hash_policy L3 vs L4"
    order = 2
    source = "seed 002"
    Config = EcmpConfig
    records = SCHEMA
    sysctls = ("net.ipv4.fib_multipath_hash_policy", "net.ipv4.tcp_congestion_control")

    def needs(self, cfg: EcmpConfig) -> List[str]:
        return ["ecmp", "frr", "tool:tcpdump", "tool:iperf"]

    def note(self, cfg: EcmpConfig) -> str:
        return ("the hash policy is set in server2's namespace: the sender is the only node that "
                "chooses between equal-cost paths here")

    def labs(self, cfg: EcmpConfig) -> Dict[str, Topology]:
        from nslab.topologies.clos import clos
        return {"clos": clos(spines=cfg.spines, servers=2, link_rate=cfg.link_rate,
                             framing=cfg.framing)}

    def points(self, cfg: EcmpConfig) -> List[Dict[str, Any]]:
        """Trials interleaved across policies (policy 0, 1, 0, 1, ...) so drift hits both."""
        return [{"policy": p, "trial": t} for t in range(cfg.trials) for p in cfg.policies]

    def runner(self, key: str, lab: LabLike, cfg: EcmpConfig, store: Any):
        from .runner import EcmpRunner
        return EcmpRunner(lab, cfg, store)

    def report(self, run_dir: str) -> StudyReport:
        from .report import write_report
        return write_report(run_dir)
