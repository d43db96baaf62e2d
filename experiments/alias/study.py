"""Study 1: throughput vs number of IP aliases (seeds 000, 001, 003).

Setup as in the posts: the server's ``eth1`` carries N aliases
(``192.168.2.N label eth1:N``, added in one ``ip -batch``), one iperf2 server is
bound to each alias, and N iperf2 clients run at once, client i to alias i.

Measured right: the clients start together (a shared ``--txstart-time``, to
the millisecond), and the primary figure is the payload the server's sockets
received over a fixed window inside the run (per socket, from one netlink dump
taken in the node by a sampler that runs all along), cross-checked with the interface's rx byte counter. The
posts' own figure, the sum of the clients' reported rates, is recorded beside
it. A control variant (``parallel``) opens N connections to a single address
(``iperf -P N``) to test the posts' explanation: more connections, not more
aliases. Across two boxes (``uplink``), the same figure is measured at the
sender: payload the far end acknowledged.
"""
from __future__ import annotations

from typing import Any, Dict, List

from nslab.run.study import Study, StudyReport
from nslab.model.topo import Topology
from nslab.runtime.node import LabLike

from .config import AliasConfig
from .records import SCHEMA


class AliasStudy(Study[AliasConfig]):
    name = "alias"
    title = "Study 1: IP aliases, throughput vs number of aliases"
    order = 1
    # TCP through a shaper, its senders' CPU time close to the limit
    alone = True
    source = "seeds 000, 001, 003"
    Config = AliasConfig
    records = SCHEMA
    sysctls = ("net.ipv4.tcp_congestion_control", "net.core.rmem_max", "net.ipv4.tcp_rmem",
               "net.ipv4.tcp_wmem")

    def needs(self, cfg: AliasConfig) -> List[str]:
        return ["tool:iperf"]

    def check_hosts(self, cfg: AliasConfig) -> None:
        """The study's counter samplers take each point's instants on their
        stdin, which a process on another host does not get (it failed at the
        first point, after the build): refused across hosts, before anything
        is built. Two boxes with a NIC between them: ``--uplink``."""
        from nslab.errors import InputError
        raise InputError("the alias study runs on one machine (its counter samplers are told "
                         "each point's instants on their stdin, which a process on another "
                         "host does not read): run it without --hosts, or across two boxes "
                         "with --uplink")

    def labs(self, cfg: AliasConfig) -> Dict[str, Topology]:
        from nslab.topologies.alias import alias_client_uplink, alias_pair
        if cfg.uplink:
            return {"client": alias_client_uplink(cfg.uplink, force=cfg.force, bw=cfg.rate,
                                                  framing=cfg.framing)}
        return {"pair": alias_pair(switch=cfg.switch, bw=cfg.rate, framing=cfg.framing)}

    def points(self, cfg: AliasConfig) -> List[Dict[str, Any]]:
        """Every (mode, N) per repeat; repeats after the first in a shuffled
        order (seeded, so a resumed run sees the same order). ``-P 1`` is the
        same test as one alias: the parallel control skips N=1 when the alias
        sweep measures it."""
        from nslab.run.study import expand
        pts = expand({"mode": list(cfg.modes), "n": list(cfg.aliases)}, cfg.repeat, shuffle_seed=0)
        if "alias" in cfg.modes:
            pts = [p for p in pts if not (p["mode"] == "parallel" and p["n"] == 1)]
        return pts

    def runner(self, key: str, lab: LabLike, cfg: AliasConfig, store: Any):
        from .runner import AliasRunner
        return AliasRunner(lab, cfg, store)

    def report(self, run_dir: str) -> StudyReport:
        from .report import write_report
        return write_report(run_dir)
