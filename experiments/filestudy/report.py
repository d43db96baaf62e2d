"""The report of a study file, from stored files only: the points (mean and
95 % interval of every value per sweep combination), the claims with their
verdicts, the plots the file asks for, and what was done when."""
from __future__ import annotations

import os
import statistics
from typing import Any, Dict, List, Optional

from nslab.store import stats
from nslab.store.reporting import StudyReport, render_study, study_report

from . import analysis
from .captures import REPORT_ROWS, report_rows
from .model import PlotLinks, PlotTimeseries, PlotVs
from .records import SCHEMA
from .spec import Loaded, field_of, value_names

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def write_report(run_dir: str, loaded: Loaded) -> StudyReport:
    """``report.md``/``.html`` and ``plots.png`` of the run in ``run_dir``."""
    from nslab.store.results import ResultStore
    prov = ResultStore.open(run_dir).provenance()
    recs = SCHEMA.load(run_dir)
    spec = loaded.spec
    keys = _sweep_keys(recs)
    values = value_names(loaded)
    rows = analysis.group_table(recs, keys, values)
    cfg = prov.get("config", {})
    claims, not_made = [], []
    for c in spec.claims:
        why = not_planned(cfg if isinstance(cfg, dict) else {}, c)
        if why:
            not_made.append({"claim": c.claim, "why": why})
        else:
            claims.append(analysis.judge_claim(c, recs))
    from nslab.store.reporting import note_interference
    claims = note_interference(claims, recs)
    pictures = sorted(f for f in os.listdir(run_dir)
                      if f.startswith("topology-") and f.endswith(".svg"))
    events = _events(recs)
    md, body = render_study(TEMPLATES, "report.md.j2", spec=spec, prov=prov,
                            cfg=prov.get("config", {}), keys=keys, values=values, rows=rows,
                            claims=claims, not_made=not_made, level=stats.level(),
                            topologies=pictures, events=events, n=len(recs),
                            plots=bool(spec.plots and recs), captures=report_rows(recs),
                            captures_cut=REPORT_ROWS)
    plot = (lambda: draw_plots(run_dir, loaded, recs)) if spec.plots and recs else None
    return study_report(run_dir, md, spec.title, claims, plot, body)


def not_planned(cfg: Dict[str, Any], claim: Any) -> Optional[str]:
    """Why this run makes no verdict on ``claim``: its configuration's sweep
    (the preset it ran) has no point the claim's ``where`` (or its
    ``versus``) selects. None: the run planned such points."""
    wheres = [claim.where] + ([{**claim.where, **claim.versus.where}] if claim.versus else [])
    for where in wheres:
        for key, want in where.items():
            have = cfg.get(field_of(key))
            if isinstance(have, list) and want not in have:
                return f"this run's sweep has no {key}={want}"
    return None


def _sweep_keys(recs: List[Any]) -> List[str]:
    keys: List[str] = []
    for r in recs:
        for k in r.params:
            if k != "repeat" and k not in keys:
                keys.append(k)
    return keys


def _events(recs: List[Any]) -> List[Dict[str, Any]]:
    """Each event kind once: when it was asked for and how late it was done (median)."""
    seen: Dict[tuple, List[float]] = {}
    for r in recs:
        for e in r.measurements.events:
            seen.setdefault((e.do, e.target, e.at), []).append(e.done_at - e.at)
    return [{"do": do, "target": t, "at": at, "late_ms": statistics.median(l) * 1000,
             "n": len(l)} for (do, t, at), l in sorted(seen.items(), key=lambda kv: kv[0][2])]


def _label(params: Dict[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in params.items()) or "all"


def draw_plots(run_dir: str, loaded: Loaded, recs: List[Any]) -> Dict[str, str]:
    """Every plot of the file, one panel each, in ``plots.png``/``.svg``.
    Titles, labels and legends come from the file: matplotlib draws them as
    text, never as mathtext (``$\\foo$`` would be parsed, and fail)."""
    from nslab.store.plotting import pyplot
    plt = pyplot()  # Agg, matplotlib's own defaults, nothing read from the folder
    with plt.rc_context({"text.parse_math": False}):
        return _draw_plots(plt, run_dir, loaded, recs)


def _draw_plots(plt: Any, run_dir: str, loaded: Loaded, recs: List[Any]) -> Dict[str, str]:
    from nslab.store import stats
    from nslab.store.plotting import save_figure
    plots = loaded.spec.plots
    fig, axes = plt.subplots(len(plots), 1, figsize=(8, 3.4 * len(plots)), squeeze=False)
    for ax, p in zip(axes[:, 0], plots):
        chosen = [r for r in recs if analysis.matches(r.params, p.where)
                  and not r.measurements.invalid]
        if isinstance(p, PlotVs):
            series = _split(chosen, p.series)
            xs_all = sorted({r.params.get(p.x) if p.x != "repeat" else r.params.get("repeat")
                             for r in chosen}, key=str)
            for label, group in series.items():
                xs, ys, lo, hi = [], [], [], []
                for i, x in enumerate(xs_all):
                    vals = analysis.values_of(group, p.y, {p.x: x})
                    if not vals:
                        continue
                    est = stats.mean(vals)
                    xs.append(i)
                    ys.append(est.value)
                    lo.append(est.value - (est.ci.low if est.ci else est.value))
                    hi.append((est.ci.high if est.ci else est.value) - est.value)
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=label)
            ax.set_xticks(range(len(xs_all)))
            ax.set_xticklabels([str(x) for x in xs_all])
            ax.set_xlabel(p.x)
            ax.set_ylabel(p.y)
            if p.series:
                ax.legend(fontsize=8)
        elif isinstance(p, PlotTimeseries):
            for label, group in _split(chosen, p.series).items():
                rows = [r.measurements.series.get(p.metric, []) for r in group]
                rows = [r for r in rows if r]
                if not rows:
                    continue
                n = min(len(r) for r in rows)
                mean = [statistics.fmean(r[i] for r in rows) for i in range(n)]
                ax.plot([i + 0.5 for i in range(n)], mean, marker=".", label=label)
            marks: Dict[float, List[str]] = {}
            for e in _events(chosen):
                marks.setdefault(e["at"], [])
                if e["do"] not in marks[e["at"]]:
                    marks[e["at"]].append(e["do"])
            for at, names in marks.items():
                ax.axvline(at, color="grey", linestyle="--", linewidth=0.8)
                ax.annotate(" / ".join(names), (at, ax.get_ylim()[1]), fontsize=7,
                            va="top", ha="left", xytext=(3, -3), textcoords="offset points")
            ax.set_xlabel("s after the traffic started")
            ax.set_ylabel(f"{p.metric} (Mbit/s)")
            ax.legend(fontsize=8)
        elif isinstance(p, PlotLinks):
            groups = _split(chosen, p.x)
            bottoms = [0.0] * len(groups)
            intfs = sorted({i for r in chosen for i in r.measurements.links.get(p.metric, {})})
            for intf in intfs:
                heights = [statistics.fmean([r.measurements.links.get(p.metric, {}).get(intf, 0)
                                             for r in g]) / 1e6 for g in groups.values()]
                ax.bar(range(len(groups)), heights, bottom=bottoms, label=intf)
                bottoms = [b + h for b, h in zip(bottoms, heights)]
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels(list(groups))
            ax.set_xlabel(p.x)
            ax.set_ylabel(f"{p.metric}: MB sent (mean)")
            ax.legend(fontsize=8)
        ax.set_title(p.title or f"{p.kind}" + (f" ({_label(p.where)})" if p.where else ""),
                     fontsize=10)
        ax.grid(alpha=0.3)
    return save_figure(fig, run_dir, "plots")


def _split(recs: List[Any], key: Optional[str]) -> Dict[str, List[Any]]:
    if not key:
        return {"all": list(recs)}
    out: Dict[str, List[Any]] = {}
    for r in recs:
        out.setdefault(f"{key.split('.')[-1]}={r.params.get(key)}", []).append(r)
    return dict(sorted(out.items()))
