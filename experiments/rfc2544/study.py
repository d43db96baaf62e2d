"""Study 3: RFC 2544 throughput, latency and frame loss of a Linux bridge, a
Linux router (and OVS) as the device under test (seed 004).

One lab per DUT (generator -- DUT -- sink, links shaped with Ethernet framing
counted). On the real bed (``--bed real``) the whole run holds the machine's
CPU split (generator CPU0, DUT CPU1), so two RFC 2544 runs cannot disturb each
other; on the virtual bed (the presets' choice) the same study runs inside a
QEMU guest whose clock is its instruction count (:mod:`.virtual`). See
:mod:`nslab.experiments.rfc2544.runner` for how each trial is counted.
"""
from __future__ import annotations

import os
from typing import Any, Callable, ContextManager, Dict, Hashable, List, Optional

from nslab.errors import CapabilityError, InputError
from nslab.run.study import Study, StudyReport
from nslab.model.topo import Topology
from nslab.runtime.node import LabLike

from .config import Rfc2544Config
from .records import SCHEMA


class Rfc2544Study(Study[Rfc2544Config]):
    name = "rfc2544"
    title = "Study 3: RFC 2544, Linux bridge vs Linux router"
    order = 3
    source = "seed 004"
    Config = Rfc2544Config
    records = SCHEMA
    #: each trial is accounted and re-run on its own (runner.trial)
    reruns_points = False
    #: its bed's CPU split is set up under :meth:`session`'s lock, held only
    #: while a round runs: each round builds its labs again
    keeps_labs = False
    #: the real bed splits the CPUs itself and reads the DUT's CPU's idle
    #: time as its occupancy (its forwarding daemon, ovs-vswitchd, is not the
    #: run's own); the virtual bed's clock counts instructions
    cpu_first = False

    def check_hosts(self, cfg: Rfc2544Config) -> None:
        """RFC 2544 measures one DUT's CPU against a generator and a sink pinned to
        this machine's CPUs (and sets static ARP entries in its nodes): refused
        across hosts, before anything is built."""
        raise InputError("the rfc2544 study runs on one machine (it measures the DUT's CPU "
                         "beside a pinned generator and sink): run it without --hosts")

    def needs(self, cfg: Rfc2544Config) -> List[str]:
        from nslab.traffic.pktgen import pktgen_path

        from .bed import layout_here
        if cfg.bed == "virtual" and not layout_here().shared:
            if "ovs" in cfg.duts:
                raise InputError("the virtual bed measures the kernel's bridge and router; "
                                 "OVS runs on the real bed only (--bed real)")
            from .virtual import require
            require()  # QEMU and a stock kernel; the guest has the rest
            return []
        if layout_here().shared:
            # the virtual bed's guest boots a stock kernel that has every feature
            # the bed uses; probing each there costs a minute of emulated work,
            # and a missing one would stop the lab's build with its own error
            pktgen_path()
            return []
        if (os.cpu_count() or 1) < 2:
            raise CapabilityError("the RFC 2544 CPU model needs 2 CPUs (generator and DUT "
                                  "apart): run it on the virtual bed (--bed virtual)")
        pktgen_path()
        need = ["htb", "tbf"]
        if any(d != "ovs" for d in cfg.duts):
            need.append("rps")
            if cfg.dut_cost != 0:
                need.append("u32")
        return need

    def labs(self, cfg: Rfc2544Config) -> Dict[str, Topology]:
        from nslab.topologies.rfc2544 import dut_chain
        bps = cfg.line_bps()  # the virtual bed's links run at its scale of the paper's
        rate = "none" if bps is None else f"{bps:.0f}bit"
        return {d: dut_chain(d, link_rate=rate, framing=True) for d in cfg.duts}

    def elsewhere(self, cfg: Rfc2544Config) -> Optional[Callable[..., None]]:
        """The virtual bed runs the study in its guest (:func:`.virtual.run`);
        inside that guest, and on the real bed, it runs here."""
        from .bed import layout_here
        if cfg.bed != "virtual" or layout_here().shared:
            return None
        from .virtual import run
        return run

    def cost_kind(self, point: Dict[str, Any]) -> Hashable:
        """A throughput point (a search, minutes) is no latency or loss trial
        (seconds); a frame size takes its own time."""
        return (point.get("test"), point.get("frame"))

    def lab_key(self, cfg: Rfc2544Config, point: Dict[str, Any]) -> str:
        return point["dut"]

    def points(self, cfg: Rfc2544Config) -> List[Dict[str, Any]]:
        """Every test per DUT and frame size, ``repeat`` times; the loss test as
        ``loss_sweeps`` sweeps per repeat (repeat indices ``rep * loss_sweeps``
        and on, so each sweep is its own record and later rounds add after them)."""
        out = []
        for rep in range(cfg.repeat):
            for dut in cfg.duts:
                for size in cfg.frame_sizes:
                    for test in cfg.tests:
                        if (test == "cost" and cfg.cost_frames is not None
                                and size not in cfg.cost_frames):
                            continue
                        reps = ([rep * cfg.loss_sweeps + k for k in range(cfg.loss_sweeps)]
                                if test == "loss" else [rep])
                        out += [{"dut": dut, "frame": size, "test": test, "repeat": r}
                                for r in reps]
        return out

    def session(self, cfg: Rfc2544Config) -> ContextManager[Any]:
        from .bed import CpuSplitLock
        return CpuSplitLock()

    def runner(self, key: str, lab: LabLike, cfg: Rfc2544Config, store: Any):
        from nslab.runtime.lab import Lab
        from .runner import Rfc2544Runner
        if not isinstance(lab, Lab):  # what check_hosts says before anything is built
            raise InputError("the rfc2544 study runs on one machine (a Lab, not "
                             f"{type(lab).__name__}): run it without --hosts")
        return Rfc2544Runner(lab, cfg, key, store)

    def figures(self, run_dir: str) -> Dict[str, float]:
        """Each DUT's 64-byte throughput (the mean of its searches), its mean
        latency at the nominal rate, and its occupancy at each load of the
        sweep (the median over the sweeps)."""
        from .claims import bed_scale
        from .records import SCHEMA
        from .tables import nominal_latencies, searches, table3
        from nslab.store.results import ResultStore
        import statistics
        recs = SCHEMA.load(run_dir)
        scale = bed_scale(ResultStore.open(run_dir).provenance())
        out: Dict[str, float] = {}
        for dut, by_frame in searches(recs).items():
            for frame, found in by_frame.items():
                if found:
                    out[f"{dut} throughput {frame} B (fps)"] = statistics.fmean(found)
        for dut, by_frame in nominal_latencies(recs, scale).items():
            for frame, lat in by_frame.items():
                out[f"{dut} latency {frame} B at the nominal rate (us)"] = statistics.fmean(lat)
        for dut in sorted({r.params.dut for r in recs}):
            rows: Dict[float, List[float]] = {}
            for x in table3(recs, dut):
                if not x["invalid"] and x["cpu_ok"]:
                    rows.setdefault(x["fps"], []).append(x["cpu_pct"])
            for fps, occ in sorted(rows.items()):
                out[f"{dut} occupancy at {fps:,.0f} fps (%)"] = statistics.median(occ)
        return out

    def report(self, run_dir: str) -> StudyReport:
        from .report import write_report
        return write_report(run_dir)
