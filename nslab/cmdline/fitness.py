"""``nslab doctor``'s word on RFC 2544, by the rules the study itself uses.

The study runs on a virtual bed by default (a QEMU guest whose clock counts
instructions: no host can disturb an answer), and on this machine's CPUs
with ``--bed real``. For each bed, one line:

* the virtual bed: fit when the study's own check of what it needs passes
  (its ``needs``: QEMU and an unpacked stock kernel);
* the real bed: fit when the study's needs pass (two CPUs, the packet
  generator, and, probed as root, the kernel's qdiscs) and this host's CPUs
  hold steady: a few seconds of the speed probe every RFC 2544 trial takes
  (:mod:`nslab.traffic.speed`), judged by the study's own ``slowdown_pct``
  and ``interference_reruns``. A host whose CPUs run slow most of the time
  leaves nearly every trial out, and the study then decides nothing there.

The study is found through the registry (never imported), and its
configuration gives the thresholds, so the doctor and the study cannot drift
apart.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from ..errors import LabError
from ..traffic.speed import Steadiness, steadiness

#: The most of the trials the speed probe says the real bed's rule would
#: leave out, for the host to be fit: beyond it, most claims go undecided.
LEFT_OUT_OK = 0.10
#: Seconds of speed probes on the real bed's CPUs.
PROBE_S = 3.0
#: The real bed's CPUs: the generator and sink on the first, the DUT on the
#: second (the study's ``bed.REAL`` layout).
REAL_CPUS = (0, 1)


@dataclass
class Fitness:
    """One line of ``nslab doctor``: is this machine fit for ``what``, and why."""

    what: str
    ok: bool
    why: str


def rfc2544(found: Optional[Dict[str, Any]] = None, study: Any = None,
            probe: Callable[..., Steadiness] = steadiness,
            seconds: float = PROBE_S) -> List[Fitness]:
    """The RFC 2544 study's fitness on each bed, the default one first.
    ``found``: the capabilities ``caps.probe()`` found (as root); ``study``:
    its class (default: the registered ``rfc2544``; none registered, no
    line); ``probe``: the speed probe (:func:`~nslab.traffic.speed.steadiness`)."""
    if study is None:
        from ..run.registry import studies
        study = studies().get("rfc2544")
        if study is None:
            return []
    default = study.Config.preset("default")
    out = []
    for bed in sorted(("virtual", "real"), key=lambda b: b != default.bed):
        cfg = study.Config.preset("default", bed=bed)
        label = (f"rfc2544 on the {bed} bed"
                 + (" (its default)" if bed == default.bed else f" (--bed {bed})"))
        try:
            need = study().needs(cfg)
        except LabError as exc:
            out.append(Fitness(label, False, str(exc)))
            continue
        if bed == "virtual":
            out.append(Fitness(label, True, _virtual_here()))
            continue
        missing = [k for k in need if found and k in found and not found[k].ok]
        if missing:
            out.append(Fitness(label, False, f"the kernel lacks {', '.join(missing)} (above)"))
            continue
        out.append(_steady(label, cfg, probe, seconds))
    return out


def _virtual_here() -> str:
    """What the virtual bed will boot, in words."""
    from ..hosts import vm
    try:
        release = vm.kernel_release(vm.find_kernel())
    except LabError:  # needs() passed: found a moment ago
        release = "?"
    return (f"QEMU and the stock kernel {release} are here; the guest's clock counts "
            "instructions, so this host's load cannot move an answer")


def _steady(label: str, cfg: Any, probe: Callable[..., Steadiness], seconds: float) -> Fitness:
    """The real bed's CPUs, probed for ``seconds`` and judged by the study's rule."""
    mine = os.sched_getaffinity(0)
    cpus = [c for c in REAL_CPUS if c in mine]
    if len(cpus) < len(REAL_CPUS):
        return Fitness(label, False, f"CPUs {', '.join(map(str, REAL_CPUS))} are not all "
                       "this process's to use")
    got = probe(cpus, seconds=seconds, threshold_pct=cfg.slowdown_pct)
    left = got.left_out(cfg.interference_reruns)
    ok = left <= LEFT_OUT_OK
    why = (f"in {got.seconds:g} s of speed probes, CPUs {' and '.join(map(str, got.cpus))} ran "
           f"over {cfg.slowdown_pct:g} % slower than their fastest in {got.slow} of "
           f"{got.rounds} readings (at worst {got.worst_pct:.0f} %): by the study's rule "
           f"(--slowdown-pct {cfg.slowdown_pct:g}, re-run {cfg.interference_reruns} times) "
           f"at least {100 * left:.0f} % of trials would be left out"
           + ("" if ok else "; use the virtual bed, or a quieter host"))
    return Fitness(label, ok, why)
