"""Experiments as data plus a runner (after flent).

An experiment declares its parameter grid as a list of points (dicts). The
:class:`Sweep` runs them, repeats shuffled, appends one record per point to
the :class:`~nslab.results.ResultStore` as soon as it is measured, skips points
already in the store (resume), and reports progress.
"""
from __future__ import annotations

import logging
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional

from .results import ResultStore, point_key

log = logging.getLogger(__name__)


def expand(grid: Dict[str, Iterable[Any]], repeat: int, shuffle_seed: Optional[int] = 0
           ) -> List[Dict[str, Any]]:
    """All combinations of ``grid`` for repeats 0..repeat-1; order shuffled within
    each repeat after the first (seeded, so a resumed sweep sees the same order)."""
    keys = list(grid)
    combos: List[Dict[str, Any]] = [{}]
    for k in keys:
        combos = [dict(c, **{k: v}) for c in combos for v in grid[k]]
    points = []
    rng = random.Random(shuffle_seed)
    for rep in range(repeat):
        batch = [dict(c, repeat=rep) for c in combos]
        if rep > 0 and shuffle_seed is not None:
            rng.shuffle(batch)
        points.extend(batch)
    return points


@dataclass
class Progress:
    """One line per point on stderr: ``[3/39] n=16 repeat=1 ... 941.2 Mbit/s (12 s left)``."""

    total: int
    done: int = 0
    started: float = 0.0
    enabled: bool = True

    def start(self) -> None:
        self.started = time.monotonic()

    def point(self, params: Dict[str, Any], summary: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        el = time.monotonic() - self.started
        left = el / self.done * (self.total - self.done)
        desc = " ".join(f"{k}={v}" for k, v in params.items())
        sys.stderr.write(f"[{self.done}/{self.total}] {desc}: {summary} (~{left:.0f} s left)\n")
        sys.stderr.flush()


def open_store(experiment: str, cfg: Any, results_root: str, run_id: str,
               resume: Optional[str] = None):
    """The run's :class:`ResultStore` and configuration: a new directory, or on
    resume the existing one with the configuration it was started with."""
    if not resume:
        return ResultStore(results_root, experiment, run_id), cfg
    from .errors import InputError
    store = ResultStore.open(resume)
    saved = store.provenance().get("config")
    if not saved:
        raise InputError(f"{resume}: no saved configuration to resume")
    fields = getattr(type(cfg), "__dataclass_fields__", {})
    return store, type(cfg)(**{k: (tuple(v) if isinstance(getattr(cfg, k, None), tuple) else v)
                               for k, v in saved.items() if k in fields})


class Sweep:
    """Run ``measure(point) -> (measurements, raw_paths, summary)`` over points."""

    def __init__(self, store: ResultStore, points: List[Dict[str, Any]],
                 measure: Callable[[Dict[str, Any]], Any], progress: bool = True) -> None:
        self.store = store
        self.points = points
        self.measure = measure
        self.progress = progress

    def todo(self) -> List[Dict[str, Any]]:
        done = self.store.done_keys()
        return [p for p in self.points if point_key(p) not in done]

    def run(self) -> int:
        """Measure every point not yet stored. Returns how many were measured."""
        todo = self.todo()
        skipped = len(self.points) - len(todo)
        if skipped:
            log.info("resuming: %d of %d points already measured", skipped, len(self.points))
        prog = Progress(len(todo), enabled=self.progress)
        prog.start()
        for point in todo:
            measurements, raw, summary = self.measure(point)
            self.store.append(point, measurements, raw=raw)
            prog.point(point, summary)
        return len(todo)
