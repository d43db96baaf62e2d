"""The ECMP study on a running clos: converge, set the hash policy in the
sender's namespace, run ``iperf -P3`` and find each stream's link from short
captures on the sender's uplinks (interface counters as a cross-check)."""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from nslab.errors import CommandError, InputError, LabError
from nslab.runtime.node import LabLike
from nslab.safeio import write_atomic

from .config import EcmpConfig
from .model import PORT, assign_links, parse_tcpdump_ports, split_label
from nslab.run.study import Measured

log = logging.getLogger(__name__)

SERVER = "server1"
SENDER = "server2"
TARGET = "10.0.200.1"
POLICY_SYSCTL = "net.ipv4.fib_multipath_hash_policy"


class EcmpRunner:
    """The clos lab, the server, and one measurement per (policy, trial)."""

    def __init__(self, lab: LabLike, cfg: EcmpConfig, store: Any) -> None:
        self.lab = lab
        self.cfg = cfg
        self.store = store
        self.sender = lab[SENDER]
        self.uplinks = [f"{SENDER}-eth{s}" for s in range(cfg.spines)]
        self.convergence_s: Optional[float] = None

    def setup(self) -> Dict[str, Any]:
        from nslab.frr import wait_for_ecmp
        from nslab.traffic.iperf import start_server, wait_listening
        from nslab.topologies.clos import expected_routes
        self.convergence_s = wait_for_ecmp(self.lab, expected_routes(self.lab.topology), timeout=60)
        log.info("ECMP routes on both servers %.2f s after FRR start", self.convergence_s)
        for p in self.cfg.policies:  # refuse a policy the kernel rejects before measuring anything
            self.set_policy(p)
        start_server(self.lab[SERVER], enhanced=False)
        wait_listening(self.lab[SERVER])
        return {"convergence_s": self.convergence_s, "policy_set_in": SENDER,
                "routes": {n: self.lab[n].run(["ip", "route"]).stdout for n in (SENDER, SERVER)}}

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
        return {intf: int(self.sender.run(["cat", f"/sys/class/net/{intf}/statistics/tx_bytes"])
                          .stdout.strip()) for intf in self.uplinks}

    def measure(self, point: Dict[str, Any]) -> Measured:
        return Measured(*self._measure_point(point))

    def _measure_point(self, point: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], str]:
        from nslab.traffic.iperf import client_argv, parse
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
        # the window opens when every capture listens (a node on another host
        # takes a few hundred ms more to start one), not at a fixed time
        late = [intf for intf, proc in caps.items() if not _listening(proc, timeout=30)]
        if late:
            log.warning("capture on %s did not report listening", ", ".join(late))
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
        write_atomic(raw, res.stdout + ("\n# stderr\n" + res.stderr if res.stderr else ""))
        raw_cap = self.store.raw_path(f"p{policy}-t{trial}-captures.txt")
        write_atomic(raw_cap, "\n".join(raw_caps))
        rep = parse(res.stdout)
        if not rep.streams:
            raise LabError(f"iperf client reported no streams (policy {policy}, trial {trial}); "
                           f"see {raw}")
        link_of = assign_links(captures)
        # each stream's link (None: its source port was not seen, or not reported)
        links = [link_of.get(s.local_port) if s.local_port is not None else None
                 for s in rep.streams]
        streams = [{"id": s.id, "local_port": s.local_port, "bps": s.bps, "link": link}
                   for s, link in zip(rep.streams, links)]
        per_link = [links.count(intf) for intf in self.uplinks]
        unknown = links.count(None)
        m = {"streams": streams, "sum_bps": rep.total_bps,
             "sum_reported_by_iperf": rep.sum.bps if rep.sum else None,
             "split": split_label(per_link) if not unknown else None,
             "streams_per_link": dict(zip(self.uplinks, per_link)),
             "unassigned_streams": unknown,
             "link_bytes": {i: after[i] - before[i] for i in self.uplinks},
             "link_mbps_avg": {i: (after[i] - before[i]) * 8 / elapsed / 1e6 for i in self.uplinks},
             "policy_set_in": SENDER}
        rates = ", ".join(f"{s.bps / 1e6:.0f}@{(link or '?').split('-')[-1]}"
                          for s, link in zip(rep.streams, links))
        return m, [raw, raw_cap], f"{rates}; SUM {rep.total_bps / 1e6:.0f} Mbit/s; split {m['split']}"

    def finish(self) -> None:
        """Copy every node's FRR logs and configs into the run directory (FRR
        can write its directory: a link, FIFO or hard link there is refused,
        not followed; see nslab.frr.rundir)."""
        from nslab.frr.rundir import copy_frr_files
        copy_frr_files(self.lab.workdir, os.path.join(self.store.raw_dir, "frr"),
                       (".log", ".conf", ".stdout"))


def _listening(proc, timeout: float) -> bool:  # proc: a lab Process
    """Read tcpdump's stderr until it says it listens (``listening on ...``)."""
    seen = threading.Event()

    def read() -> None:
        for line in proc.popen.stderr:
            if line.startswith("listening on"):
                seen.set()
                return
    threading.Thread(target=read, daemon=True).start()
    return seen.wait(timeout)
