"""``nslab bench verdicts``: how decisive and how stable the quick reproduction is.

Runs ``nslab reproduce`` N times (optionally beside a noisy neighbour,
:mod:`nslab.traffic.noisegen`) and prints one table, claims by runs: each run's
verdict per claim, the share of claims decided (agrees or disagrees), the
claims that flip (agree in one run, disagree in another), the trials re-run
or excluded for host interference, and the time per run. Every reproduction
directory is kept under ``<results>/bench/verdicts-<time>/``, so any run's
report can be read afterwards.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import click

from ..errors import CapabilityError, InputError
from .reproduce import ordered_studies
from ..run.study import report_of, results_dir_of
from .reproduce import interference_of_records
from ..run.bench import save
from ..traffic.noisegen import Noise, profile
from ..safeio import make_fresh_dir

log = logging.getLogger(__name__)

#: One letter per verdict in the table.
MARK = {"agrees": "A", "disagrees": "D", "undecided": "u", None: "-"}


@dataclass
class RunResult:
    """One reproduction: its directory, wall time, verdict per claim, and the
    host-interference counts its records carry."""

    root: str
    seconds: float
    verdicts: Dict[Tuple[str, str], str] = field(default_factory=dict)
    reruns: int = 0
    excluded: int = 0
    failed: Optional[str] = None
    #: (study, figure) -> value: each study's headline figures (Study.figures)
    figures: Dict[Tuple[str, str], float] = field(default_factory=dict)

    @property
    def decided(self) -> int:
        return sum(v in ("agrees", "disagrees") for v in self.verdicts.values())

    @property
    def share(self) -> float:
        return self.decided / len(self.verdicts) if self.verdicts else 0.0


def claims_of(root: str) -> Dict[Tuple[str, str], str]:
    """(study, claim) -> verdict for every study of a reproduction directory
    (each study's report is drawn from its stored records)."""
    out: Dict[Tuple[str, str], str] = {}
    for name, cls in ordered_studies().items():
        run_dir = results_dir_of(root, name)
        if not run_dir:
            continue
        for c in report_of(cls(), run_dir).claims:
            out[(name, c.claim)] = c.verdict
    return out


def figures_of(root: str) -> Dict[Tuple[str, str], float]:
    """(study, figure) -> value for every study of a reproduction directory."""
    out: Dict[Tuple[str, str], float] = {}
    for name, cls in ordered_studies().items():
        run_dir = results_dir_of(root, name)
        if run_dir:
            out.update({(name, k): v for k, v in cls().figures(run_dir).items()})
    return out


def spread(runs: Sequence[RunResult]) -> List[Tuple[str, str, float, float, float]]:
    """Per figure every run has: (study, figure, min, max, their spread in
    percent of the mean)."""
    ok = [r for r in runs if not r.failed]
    keys = set.intersection(*(set(r.figures) for r in ok)) if ok else set()
    out = []
    for k in sorted(keys):
        vals = [r.figures[k] for r in ok]
        mean = sum(vals) / len(vals)
        pct = 100.0 * (max(vals) - min(vals)) / abs(mean) if mean else 0.0
        out.append((k[0], k[1], min(vals), max(vals), pct))
    return out


def interference_counts(root: str) -> Tuple[int, int]:
    """(trials or points re-run, excluded) for host interference over every
    study of a reproduction directory
    (:func:`nslab.cmdline.reproduce.interference_of_records`)."""
    reruns = excluded = 0
    for name in ordered_studies():
        run_dir = results_dir_of(root, name)
        found = interference_of_records(run_dir) if run_dir else None
        if found is not None:
            reruns += found.reruns
            excluded += found.excluded
    return reruns, excluded


def flips(runs: Sequence[RunResult]) -> List[Tuple[str, str]]:
    """Claims that agree in one run and disagree in another."""
    keys = {k for r in runs for k in r.verdicts}
    return sorted(k for k in keys
                  if {"agrees", "disagrees"} <= {r.verdicts.get(k) for r in runs})


def table(runs: Sequence[RunResult], noise: str) -> str:
    """The claims x runs table, then one line per run and the flips."""
    keys = sorted({k for r in runs for k in r.verdicts})
    width = max([len(f"{s}: {c}") for s, c in keys] + [20])
    width = min(width, 90)
    head = f"{'claim':<{width}}  " + " ".join(f"r{i + 1:<2}" for i in range(len(runs)))
    lines = [f"noise: {noise}; A agrees, D disagrees, u undecided, - not made", head,
             "-" * len(head)]
    flipped = set(flips(runs))
    for k in keys:
        label = f"{k[0]}: {k[1]}"
        if len(label) > width:
            label = label[:width - 1] + "~"
        marks = " ".join(f"{MARK.get(r.verdicts.get(k)):<3}" for r in runs)
        lines.append(f"{label:<{width}}  {marks}" + ("  FLIPS" if k in flipped else ""))
    lines.append("")
    for i, r in enumerate(runs, 1):
        if r.failed:
            lines.append(f"run {i}: failed after {r.seconds:.0f} s: {r.failed}")
            continue
        lines.append(f"run {i}: {r.decided} of {len(r.verdicts)} decided ({100 * r.share:.0f} %), "
                     f"{r.seconds / 60:.1f} min; host interference: {r.reruns} trials re-run, "
                     f"{r.excluded} excluded; {r.root}")
    ok = [r for r in runs if not r.failed]
    moved = spread(runs)
    if moved and len(ok) > 1:
        lines += ["", "figures across runs (min, max, spread in % of their mean):"]
        lines += [f"  {s}: {f}: {lo:,.2f} .. {hi:,.2f}  ({pct:.2f} %)"
                  for s, f, lo, hi, pct in moved]
    if ok:
        lines.append(f"decided: {min(r.share for r in ok) * 100:.0f}-"
                     f"{max(r.share for r in ok) * 100:.0f} % of claims per run; "
                     f"flips: {len(flipped)}" + (f" ({'; '.join(f'{s}: {c}' for s, c in sorted(flipped))})"
                                                  if flipped else ""))
    return "\n".join(lines)


def nslab_path() -> str:
    """The ``nslab`` console script next to this Python."""
    cand = os.path.join(os.path.dirname(sys.executable), "nslab")
    if not os.path.exists(cand):
        raise CapabilityError(f"{cand}: no nslab console script next to this Python")
    return cand


def run_once(results: str, mode: str, only: Optional[str]) -> RunResult:
    """One ``nslab reproduce`` into ``results`` (its progress shows on this
    terminal); its directory and verdicts. On Ctrl-C the reproduction, which
    got the signal too, is waited for while it tears its lab down."""
    argv = [nslab_path(), "--results", results, "reproduce", f"--{mode}"]
    if only:
        argv += ["--only", only]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
        raise
    dt = time.monotonic() - t0
    base = os.path.join(results, "reproduce")
    roots = sorted(os.path.join(base, d) for d in os.listdir(base)) if os.path.isdir(base) else []
    if rc != 0 or not roots:
        return RunResult(roots[-1] if roots else results, dt,
                         failed=f"nslab reproduce exited with {rc} (its log is under {results})")
    root = roots[-1]
    res = RunResult(root, dt, claims_of(root), figures=figures_of(root))
    res.reruns, res.excluded = interference_counts(root)
    return res


@click.command("verdicts")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(1, 50),
              help="Reproductions to run.")
@click.option("--noise", default="idle", show_default=True,
              help="Noisy neighbour while they run: idle, dut-bursts, both-bursts, roaming, busy, "
              "pieces-1ms, pieces-40ms, tools (two sha256sum and an xz: programs we did not "
              "write; nslab.traffic.noisegen).")
@click.option("--mode", default="quick", show_default=True,
              type=click.Choice(["quick", "default", "full"]), help="The reproduction's preset.")
@click.option("--only", default=None, help="Studies to run, comma-separated (default: all).")
@click.option("--seed", default=1, show_default=True, type=int, help="The noise's random seed.")
@click.pass_context
def verdicts_cmd(ctx: click.Context, runs: int, noise: str, mode: str, only: Optional[str],
                 seed: int) -> None:
    """The quick reproduction N times: verdict per claim and run, share decided, flips."""
    try:
        hogs = profile(noise)
    except ValueError as exc:
        raise InputError(f"--noise: {exc}") from None
    out_dir = os.path.join(ctx.obj.results, "bench", f"verdicts-{time.strftime('%Y%m%d-%H%M%S')}")
    make_fresh_dir(out_dir)
    results: List[RunResult] = []
    for i in range(runs):
        click.echo(f"== run {i + 1}/{runs} (noise: {noise})", err=True)
        with Noise(hogs, seed=seed + i):
            r = run_once(os.path.join(out_dir, f"run{i + 1}"), mode, only)
        results.append(r)
        click.echo(f"   {r.decided} of {len(r.verdicts)} decided in {r.seconds:.0f} s"
                   + (f"; failed: {r.failed}" if r.failed else ""), err=True)
    text = table(results, noise)
    click.echo(text)
    path = save(ctx.obj.results, "verdicts", {
        "noise": noise, "mode": mode, "only": only, "seed": seed,
        "runs": [{"root": r.root, "seconds": r.seconds, "decided": r.decided,
                  "claims": len(r.verdicts), "reruns": r.reruns, "excluded": r.excluded,
                  "failed": r.failed,
                  "verdicts": [[s, c, v] for (s, c), v in sorted(r.verdicts.items())]}
                 for r in results],
        "flips": [[s, c] for s, c in flips(results)],
        "figures": [[s, f, lo, hi, pct] for s, f, lo, hi, pct in spread(results)]})
    click.echo(f"saved: {path}", err=True)
