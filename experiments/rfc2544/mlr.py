"""Throughput by the IETF BMWG's Multiple Loss Ratio Search (MLRsearch, as
used by FD.io CSIT), through the ``MLRsearch`` library: several target loss
ratios at once (0 % = NDR, 0.5 % = PDR), short trials that grow, an exceed
ratio and a goal width. The measurer is any ``trial(fps, seconds) -> (frames
offered, frames lost)``, so the same search runs on the lab's DUT and, in the
unit tests, on a simulated DUT with a known loss curve.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

#: (name, loss ratio) of the goals searched together.
GOALS: Tuple[Tuple[str, float], ...] = (("NDR", 0.0), ("PDR", 0.005))
Trial = Callable[[float, float], Tuple[int, int]]


@dataclass
class MlrResult:
    """Per goal: the conditional throughput and its relevant bounds (fps);
    the trials made and their total duration."""

    goals: Dict[str, Dict[str, float]]
    trials: List[Dict[str, float]] = field(default_factory=list)
    duration_s: float = 0.0
    wall_s: float = 0.0


def mlr_search(trial: Trial, min_load: float, max_load: float,
               initial_trial_s: float = 0.5, final_trial_s: float = 2.0,
               duration_sum_s: float = 4.0, relative_width: float = 0.02,
               exceed_ratio: float = 0.5, timeout_s: float = 600.0) -> MlrResult:
    """Search NDR and PDR between ``min_load`` and ``max_load`` (fps)."""
    from MLRsearch import AbstractMeasurer, Config, MeasurementResult, MultipleLossRatioSearch
    from MLRsearch import SearchGoal

    made: List[Dict[str, float]] = []

    class Measurer(AbstractMeasurer):
        def measure(self, intended_duration: float, intended_load: float) -> MeasurementResult:
            offered, lost = trial(float(intended_load), float(intended_duration))
            made.append({"fps": float(intended_load), "seconds": float(intended_duration),
                         "offered": offered, "lost": lost})
            return MeasurementResult(intended_duration=intended_duration,
                                     intended_load=intended_load, offered_count=offered,
                                     loss_count=lost)

    goals = [SearchGoal(loss_ratio=ratio, exceed_ratio=exceed_ratio,
                        relative_width=relative_width, initial_trial_duration=initial_trial_s,
                        final_trial_duration=final_trial_s, duration_sum=duration_sum_s,
                        preceding_targets=2, expansion_coefficient=2, fail_fast=False)
             for _, ratio in GOALS]
    config = Config()
    config.goals = goals
    config.min_load = min_load
    config.max_load = max_load
    config.search_duration_max = timeout_s
    config.warmup_duration = 0.0
    t0 = time.monotonic()
    found = MultipleLossRatioSearch(config=config).search(measurer=Measurer(),
                                                          debug=lambda _msg: None)
    out: Dict[str, Dict[str, float]] = {}
    for (name, _), goal in zip(GOALS, goals):
        res = found[goal]
        lo, hi = res.relevant_lower_bound, res.relevant_upper_bound
        ct = res.conditional_throughput
        out[name] = {"fps": float(ct) if ct is not None else 0.0,
                     "lower_bound": float(lo) if lo is not None else 0.0,
                     "upper_bound": float(hi) if hi is not None else float(max_load)}
    return MlrResult(out, made, sum(t["seconds"] for t in made), time.monotonic() - t0)
