"""The alias study's report, from stored files only (no root): the posts' table
format, a written comparison, the claims, and the plot (PNG + SVG)."""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
from typing import Any, Dict, List, Optional, Tuple

from nslab.store.reporting import Claim, StudyReport, load_run, render_study, study_report
from nslab.model.shaping import goodput_ceiling

from .model import LINK_BOUND, SNDBUF_STALL_PCT, rise
from .records import SCHEMA, AliasRecord, valid

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
METHODS = [
    ("receiver_bps", "receiver window (primary)"),
    ("clients_sum_bps", "sum of clients' reports (posts' method)"),
]
Summary = Dict[Tuple[str, str], Dict[int, Dict[str, float]]]


def summarize(records: List[AliasRecord]) -> Summary:
    """``{(mode, metric): {n: {median, min, max, count}}}`` over the valid points."""
    groups: Dict[Tuple[str, str, int], List[float]] = {}
    for r in records:
        if not valid(r):
            continue  # the fidelity check failed: not a measurement of what it claims
        m = r.measurements
        for metric in [k for k, _ in METHODS] + ["cpu_busy_pct", "start_margin_s"]:
            groups.setdefault((r.params.mode, metric, r.params.n), []).append(float(getattr(m, metric)))
    out: Summary = {}
    for (mode, metric, n), vals in sorted(groups.items()):
        out.setdefault((mode, metric), {})[n] = {
            "median": statistics.median(vals), "min": min(vals), "max": max(vals), "count": len(vals)}
    return out


def table(summary: Summary, pub: Dict[str, Any]) -> Tuple[List[int], List[Tuple[str, Dict[int, float]]]]:
    """The posts' table: columns N, rows Kbits/sec (published series, then ours)."""
    rows: List[Tuple[str, Dict[int, float]]] = []
    for s in pub["series"]:
        rows.append((f"published: {s['label']}", {int(k): v for k, v in s["points"].items()}))
    for mode in ("alias", "parallel"):
        for metric, label in METHODS:
            if (mode, metric) in summary:
                rows.append((f"{mode}: {label}",
                             {n: v["median"] / 1e3 for n, v in summary[(mode, metric)].items()}))
    ns = sorted({n for _, vals in rows for n in vals})
    return ns, rows


def method_lines(summary: Summary) -> List[str]:
    out = []
    for mode in ("alias", "parallel"):
        for metric, label in METHODS:
            data = summary.get((mode, metric))
            if not data:
                continue
            med = {n: v["median"] for n, v in data.items()}
            r = rise(med)
            spread = max([(v["max"] - v["min"]) / v["median"] for v in data.values()
                          if v["median"]] or [0.0])
            verdict = ("no N above 16 measured" if r is None else
                       f"{r * 100:+.1f} % from N<=16 to N={max(med)}: " +
                       ("rises" if r > max(0.02, spread) else "flat within the spread"))
            out.append(f"{mode}, {label}: {verdict} (largest spread between repeats "
                       f"{spread * 100:.1f} %).")
    return out


#: "No measurable overhead": throughput at the largest N is at most this much
#: below the small-N plateau. "Rises": a rise of at least this much (the posts
#: saw +7.6 % and +7.8 %). "Alike": -P N and N aliases within this of each other.
OVERHEAD_MARGIN = 0.02
RISE_MARGIN = 0.02
ALIKE_MARGIN = 0.02
SMALL_N = 16
MORE = "undecided: run the default preset (3 repeats of every N)"


def samples(records: List[AliasRecord], mode: str, metric: str) -> Dict[int, List[float]]:
    """Per N, the values of ``metric`` over the valid repeats of ``mode``."""
    out: Dict[int, List[float]] = {}
    for r in records:
        if r.params.mode == mode and valid(r):
            out.setdefault(r.params.n, []).append(float(getattr(r.measurements, metric)))
    return out


def small_and_large(per_n: Dict[int, List[float]]) -> Optional[Tuple[List[float], List[float], int]]:
    """The small-N plateau (every repeat of every N <= 16, pooled) and the
    largest N's repeats; None when there is no N above 16 or none at or below."""
    ns = sorted(per_n)
    small = [v for n in ns if n <= SMALL_N for v in per_n[n]]
    if not small or not ns or ns[-1] <= SMALL_N:
        return None
    return small, per_n[ns[-1]], ns[-1]


#: How iperf's own -P SUM reads on a 1 Gbit/s link at -P 254, by version: it
#: depends on the version (measured, DESIGN.md), the receiver's figure does not.
SUM_BY_VERSION = "iperf 2.1.8's SUM reads 1,178-1,208 Mbit/s there, 2.2.1's 989-998"


def iperf_version(prov: Dict[str, Any]) -> str:
    """The iperf that produced a run's figures, as its provenance recorded it."""
    return str((prov.get("versions") or {}).get("iperf2") or "of unknown version")


def published_rise(pub: Optional[Dict[str, Any]]) -> str:
    """The posts' own rise from the small-N plateau to their largest N, per
    published series (``"from N<=16 to N=254: post1 +8.9 %, ..."``); empty
    without published data."""
    parts, tops = [], set()
    for s in (pub or {}).get("series", []):
        points = {int(k): v for k, v in s["points"].items()}
        r = rise(points)
        if r is not None:
            parts.append(f"{s['id']} {r * 100:+.1f} %")
            tops.add(max(points))
    if not parts:
        return ""
    top = f"N={tops.pop()}" if len(tops) == 1 else "their largest N"
    return f"from N<={SMALL_N} to {top}: " + ", ".join(parts)


def ends_points(records: List[AliasRecord], top: int) -> List[Dict[str, Any]]:
    """The alias points a claim between the small-N plateau and ``top`` is
    judged on: N <= SMALL_N, and ``top`` with any larger N measured (which
    gave that claim no value: no valid repeat, or no receiver figure). A later
    sampling round measures only these again, not the N in between."""
    return [{"mode": "alias", "n": n} for n in sorted(
        set(range(1, SMALL_N + 1))
        | {r.params.n for r in records if r.params.mode == "alias" and r.params.n >= top})]


OVERHEAD = "Linux IP aliasing adds no measurable overhead"
RISES = "Throughput rises with the number of aliases (posts: +7.6 %, +7.8 %)"
SUMMED = "The posts' rise comes from how iperf's reports were summed"
CONTROL = "The rise comes from more TCP connections, not from the aliases"


def claims(records: List[AliasRecord], summary: Summary,
           iperf: str = "of unknown version",
           pub: Optional[Dict[str, Any]] = None) -> List[Claim]:
    """The posts' claims, each with an interval and a verdict (Welch t over the
    repeats; equivalence by two one-sided tests). ``iperf`` is the version
    that produced the clients' reports (the rows that read them name it);
    ``pub``, the published data, gives the posts' own figures. A claim on
    the receiver's figure that the undisturbed points leave undecided is
    judged again with the disturbed ones in, between their two bounds
    (:func:`bracketed`)."""
    posts = published_rise(pub)
    rec = samples(records, "alias", "receiver_bps")
    par = samples(records, "parallel", "receiver_bps")
    measured_n = {r.params.n for r in records if r.params.mode in ("alias", "parallel")}
    found = receiver_claims(records, rec, par, measured_n, iperf, posts)
    found = bracketed(records, found, measured_n, iperf, posts)
    out = [found[OVERHEAD], found[RISES]]
    # The posts' own method: the clients' summed reports over the receiver's figure.
    excess: Dict[int, List[float]] = {}
    for r in records:
        if r.params.mode == "alias" and valid(r) and r.measurements.receiver_bps:
            excess.setdefault(r.params.n, []).append(
                r.measurements.clients_sum_bps / r.measurements.receiver_bps - 1)
    eg = small_and_large(excess)
    if eg is not None:
        from nslab.store.stats import difference, judge
        d = difference(eg[1], eg[0])
        chk = judge(d, 0.0, math.inf, "an excess that grows with N, i.e. above", 100, " points",
                    need=MORE)
        # its own top: the largest N with a receiver figure to divide by
        own = ends_points(records, eg[2])
        out.append(Claim(SUMMED,
                         f"clients' sum over the receiver's figure, N={eg[2]} minus "
                         f"N<={SMALL_N}: {d.fmt(100, 2, ' points', sign=True)} (clients' "
                         f"reports from iperf {iperf})", chk.verdict, chk.why,
                         "seeds 000, 001 (the posts' method)", reads=own))
    elif any(r.params.mode == "alias" for r in records):
        # measured, but nothing to compare at one end: the claim stays, undecided
        groups = small_and_large(rec)
        out.append(Claim(SUMMED, "nothing to compare", "undecided",
                         NO_ENDS if groups is None else
                         f"no receiver figure to divide by at N<={SMALL_N} or at the largest N",
                         "seeds 000, 001 (the posts' method)",
                         reads=None if groups is None else ends_points(records, groups[2])))
    if CONTROL in found:
        out.append(found[CONTROL])
    from nslab.store.reporting import note_interference
    return note_interference(out, records)


NO_ENDS = f"no valid point at N<={SMALL_N} or at the largest N"


def receiver_claims(records: List[AliasRecord], rec: Dict[int, List[float]],
                    par: Dict[int, List[float]], measured_n: Any, iperf: str,
                    posts: str, sides: Optional[Dict[str, float]] = None) -> Dict[str, Claim]:
    """The claims on the receiver's figure, by name: no overhead and the rise
    (N <= 16 against the largest N of ``rec``, the aliases' figures per N),
    and the control (``par``, -P N's, against ``rec`` at the largest N both
    have; left out when the control was not run). ``sides``, if given,
    receives the control's estimate (-P N's over the aliases', less one)."""
    from nslab.store.stats import equivalence, judge, relative_difference
    src = "seeds 000, 001"
    out: Dict[str, Claim] = {}
    groups = small_and_large(rec)
    if groups is None:
        # No valid point at one end of the range: the claims stay, undecided
        # (every point serves them again).
        out[OVERHEAD] = Claim(OVERHEAD, "nothing to compare", "undecided", NO_ENDS, src, posts)
        out[RISES] = Claim(RISES, "nothing to compare", "undecided", NO_ENDS, src, posts)
    else:
        small, large, top = groups
        ends = ends_points(records, top)
        base = f"N<={SMALL_N} ({len(small)} values) vs N={top} ({len(large)})"
        rise = relative_difference(large, small)
        chk = judge(rise, -OVERHEAD_MARGIN, math.inf, "a loss of at most", 100, " %", need=MORE)
        out[OVERHEAD] = Claim(OVERHEAD,
                              f"receiver throughput {base}: {rise.fmt(100, 1, ' %', sign=True)}",
                              chk.verdict, chk.why, src, posts, ends)
        chk = judge(rise, RISE_MARGIN, math.inf, "a rise of at least", 100, " %", need=MORE)
        out[RISES] = Claim(RISES, f"at the receiver, {base}: {rise.fmt(100, 1, ' %', sign=True)}",
                           chk.verdict, chk.why, src, posts, ends)
    common = sorted(set(par) & set(rec))
    if not common and any(r.params.mode == "parallel" for r in records):
        # the control ran, but no N has valid points in both modes: the claim
        # stays, undecided, and reads the top of the range again
        top_n = max(measured_n)
        out[CONTROL] = Claim(CONTROL, f"no N with valid points of both modes (largest: {top_n})",
                             "undecided", "every point of one mode at every N was left out",
                             "seed 001 (J. J. Ciarlante's explanation)",
                             reads=[{"mode": m, "n": top_n} for m in ("parallel", "alias")])
    if common:
        n = common[-1]
        verdict, est = equivalence(par[n], rec[n], ALIKE_MARGIN)
        if sides is not None:
            sides[CONTROL] = est.value
        if est.ci is not None:
            why = _alike_why(verdict, f"the {est.ci.level * 100:.0f} % interval", est.ci.level)
        else:
            why = f"n={est.n}: no interval from one sample; {MORE}"
        pcs = samples(records, "parallel", "clients_sum_bps").get(n)
        out[CONTROL] = Claim(
            CONTROL, f"N={n}: -P {n} to one address vs one connection per alias, at the "
            f"receiver: {est.fmt(100, 1, ' %', sign=True)}" +
            (f"; iperf {iperf}'s own SUM for -P {n}: "
             f"{statistics.median(pcs) / 1e6:.0f} Mbit/s (median; this reading "
             f"depends on iperf's version: {SUM_BY_VERSION})" if pcs else ""),
            verdict, why, "seed 001 (J. J. Ciarlante's explanation)",
            # N and any larger N none of whose points was valid
            reads=[{"mode": m, "n": k} for k in sorted(measured_n) if k >= n
                   for m in ("parallel", "alias")])
    return out


def disturbed_bounds(records: List[AliasRecord], n: int
                     ) -> List[Tuple[str, Tuple[float, float]]]:
    """The mode and receiver figure of each point at ``n`` that the host
    disturbed (and no fidelity check failed), in the order measured, the
    figure as two bounds on what it would
    have read undisturbed. Below: the lowest rate its bytes allow over its
    window, each end of which the sampler may have read up to one sample's
    time late (``sample_s``) -- a busy host only takes CPU from the lab, so
    it can only have lowered a rate the shaped link sets. Above: the link's
    goodput ceiling, read as late (no undisturbed reading passes it by more),
    or the run's highest undisturbed reading, or what it read, whichever is
    highest. Points without a ceiling (older runs) give none."""
    from nslab.store.records import disturbed
    top = max([r.measurements.receiver_bps for r in records if valid(r)] or [0.0])
    out: List[Tuple[str, Tuple[float, float]]] = []
    for r in sorted(records, key=lambda r: r.time):
        m = r.measurements
        if (r.params.mode in ("alias", "parallel") and r.params.n == n and disturbed(r)
                and not m.invalid
                and m.link_ceiling_bps and m.window_s and m.sample_s is not None
                and m.window_s > m.sample_s):
            v, w, late = float(m.receiver_bps), float(m.window_s), float(m.sample_s)
            out.append((r.params.mode, (v * w / (w + late), max(
                v * w / (w - late), float(m.link_ceiling_bps) * w / (w - late), top))))
    return out


def bracketed(records: List[AliasRecord], found: Dict[str, Claim], measured_n: Any,
              iperf: str, posts: str) -> Dict[str, Claim]:
    """``found`` with each claim on the receiver's figure that the undisturbed
    points leave undecided judged again with every disturbed point at the
    largest N in, each anywhere between its two bounds
    (:func:`disturbed_bounds`). Judged so, the groups are compared by the
    Hodges-Lehmann shift and the Mann-Whitney test's interval
    (:func:`nslab.store.stats.relative_shift`), not by Welch's t: each end of
    that interval is one of the pairwise ratios in order, so it moves the same
    way as every value of one group and the other way from every value of
    the other. Over every choice of values inside the bounds the interval
    then reaches no lower than with the compared group at its lower bounds
    (the reference at its upper) and no higher than the other way round; the
    claim is judged on that whole span, and takes a verdict only where the
    span gives one (a t interval's spread grows where some points sit at one
    bound and others at the other, and its extremes lie at no corner one
    can name: with a dozen points, 4,096 choices judged still left a claim
    undecided between two ends that agreed)."""
    if not measured_n or all(c.verdict != "undecided" for c in found.values()):
        return found
    top_n = max(measured_n)
    pts = disturbed_bounds(records, top_n)
    if not pts:
        return found
    rec = samples(records, "alias", "receiver_bps")
    par = samples(records, "parallel", "receiver_bps")

    def at(end: int) -> Dict[str, Dict[int, List[float]]]:
        got = {"alias": {n: list(v) for n, v in rec.items()},
               "parallel": {n: list(v) for n, v in par.items()}}
        for mode, bounds in pts:
            got[mode].setdefault(top_n, []).append(bounds[end])
        return got
    low, high = at(0), at(1)
    took = {m: sum(1 for mode, _ in pts if mode == m) for m in ("alias", "parallel")}
    out = dict(found)
    for name, claim in found.items():
        if claim.verdict != "undecided":
            continue
        if name in (OVERHEAD, RISES):
            judged = _bracket_ends(low["alias"], high["alias"], took["alias"], top_n, name)
        else:
            judged = _bracket_control(low, high, took, top_n)
        if judged is None:
            continue
        measured, verdict, why = judged
        what = (f"with the {len(pts)} point(s) at N={top_n} the host disturbed, each "
                "anywhere between the lowest rate its bytes allow (a busy host only lowers "
                "a rate the shaped link sets) and the link's ceiling")
        if verdict == "undecided":
            out[name] = dataclasses.replace(claim, measured=measured,
                                            why=f"{claim.why}; {what}: {why}")
        else:
            out[name] = dataclasses.replace(claim, measured=measured, verdict=verdict,
                                            why=f"{why}, {what}")
    return out


def _span(lo: Any, hi: Any) -> Optional[Any]:
    """The interval from ``lo``'s low end to ``hi``'s high end (Estimates),
    None where either has none."""
    from nslab.store.stats import Interval
    if lo.ci is None or hi.ci is None:
        return None
    return Interval(lo.ci.low, hi.ci.high, lo.ci.level, lo.ci.method)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _alike_why(verdict: str, interval: str, level: float, ends: str = "") -> str:
    """Why the control took ``verdict``: where ``interval`` (at ``level``,
    two one-sided tests) lies against +-ALIKE_MARGIN; ``ends``, its ends in
    words, is said where it straddles."""
    where = {"agrees": " lies inside", "disagrees": " lies outside",
             "undecided": f", {ends}, straddles" if ends else " straddles"}[verdict]
    return (f"{interval}{where} +-{ALIKE_MARGIN * 100:.0f} % (two one-sided tests at "
            f"{(1 - level) / 2 * 100:.2g} %)")


def _bracket_ends(low: Dict[int, List[float]], high: Dict[int, List[float]], took: int,
                  top_n: int, name: str) -> Optional[Tuple[str, str, str]]:
    """No overhead or the rise, judged with the aliases' disturbed points at
    ``top_n`` at their lower bounds (``low``) and at their upper (``high``):
    the measured text, the verdict and the reason; None without both ends."""
    from nslab.store.stats import Estimate, judge, relative_shift
    lo_g, hi_g = small_and_large(low), small_and_large(high)
    if lo_g is None or hi_g is None or lo_g[2] != top_n or not took:
        return None
    if min(lo_g[0] + lo_g[1]) <= 0:
        return None  # a figure of nothing has no ratio to compare
    small = lo_g[0]
    lo, hi = relative_shift(lo_g[1], small), relative_shift(hi_g[1], small)
    span = _span(lo, hi)
    if span is None:
        return None
    margin, what = ((-OVERHEAD_MARGIN, "a loss of at most") if name == OVERHEAD else
                    (RISE_MARGIN, "a rise of at least"))
    chk = judge(Estimate(lo.value, span, lo.n), margin, math.inf, what, 100, " %", need=MORE)
    measured = (f"at the receiver, N<={SMALL_N} ({len(small)} values) vs N={top_n} "
                f"({len(lo_g[1]) - took} undisturbed, {took} disturbed): shift "
                f"{_pct(lo.value)} with the disturbed points at their lower bounds, "
                f"{_pct(hi.value)} at their upper; over both {span.fmt(100, 1, ' %')}")
    if chk.verdict == "undecided":
        return measured, "undecided", (
            f"the rank interval over their bounds, {span.ends(100, 1, ' %')}, straddles "
            f"{_pct(margin)}")
    return measured, chk.verdict, chk.why.replace("the interval", "the rank interval over "
                                                  "their bounds", 1)


def _bracket_control(low: Dict[str, Dict[int, List[float]]],
                     high: Dict[str, Dict[int, List[float]]], took: Dict[str, int],
                     top_n: int) -> Optional[Tuple[str, str, str]]:
    """The control (-P N against N aliases at ``top_n``, alike within +-2 %),
    judged by two one-sided tests on the rank interval: -P N's at their
    lower bounds against the aliases' at their upper for its low end, the
    other way round for its high end."""
    from nslab.store.stats import Estimate, level, relative_shift, within
    if not (low["parallel"].get(top_n) and low["alias"].get(top_n)) or not sum(took.values()):
        return None
    if min(low["parallel"][top_n] + low["alias"][top_n]) <= 0:
        return None  # a figure of nothing has no ratio to compare
    tost = 1 - 2 * (1 - level())
    lo = relative_shift(low["parallel"][top_n], high["alias"][top_n], tost)
    hi = relative_shift(high["parallel"][top_n], low["alias"][top_n], tost)
    span = _span(lo, hi)
    if span is None:
        return None
    verdict = within(Estimate(lo.value, span, lo.n), -ALIKE_MARGIN, ALIKE_MARGIN)
    counts = ", ".join(f"{len(low[m][top_n]) - took[m]} undisturbed and {took[m]} disturbed "
                       f"of {'-P N' if m == 'parallel' else 'the aliases'}"
                       for m in ("parallel", "alias"))
    measured = (f"N={top_n}: -P {top_n} to one address vs one connection per alias, at the "
                f"receiver ({counts}): shift from {_pct(lo.value)} to {_pct(hi.value)} "
                f"between the bounds; over both {span.fmt(100, 1, ' %')}")
    return measured, verdict, _alike_why(verdict, "the rank interval over their bounds",
                                         span.level, span.ends(100, 1, " %"))


def sender_limits(records: List[Any]) -> Optional[Dict[str, Any]]:
    """Median and range of how the senders were limited, for the report (None
    for runs stored before it was measured)."""
    ms = [r.measurements for r in records if r.measurements.sndbuf_limited_pct is not None]
    if not ms:
        return None

    def spread(xs: List[float]) -> str:
        return f"{statistics.median(xs):.0f} % ({min(xs):.0f}-{max(xs):.0f} %)"

    ceil = next((m.link_ceiling_bps for m in ms if m.link_ceiling_bps), None)
    return {"n": len(ms), "sndbuf": spread([m.sndbuf_limited_pct for m in ms]),
            "rwnd": spread([m.rwnd_limited_pct or 0.0 for m in ms]),
            "ceiling": f"{ceil / 1e6:.0f}" if ceil else None,
            "stall": f"{SNDBUF_STALL_PCT:.0f}", "bound": f"{100 * LINK_BOUND:.0f}"}


def write_report(run_dir: str) -> StudyReport:
    """Write ``report.md``/``report.html`` and ``alias.png``/``.svg`` into ``run_dir``."""
    run = load_run(run_dir, SCHEMA, "alias")
    records, prov, cfg = run.records, run.prov, run.cfg
    pub = run.published
    summary = summarize(records)
    ns, rows = table(summary, pub)
    excluded = [r for r in records if r.measurements.invalid]
    unchecked = sum(1 for r in records if r.measurements.invalid is None)
    p2 = {int(k): v / 1e3 for k, v in pub["series"][1]["points"].items()}
    found = claims(records, summary, iperf_version(prov), pub)
    limits = sender_limits(records)
    restarted = [r for r in records if r.measurements.servers_restarted]
    md, body = render_study(TEMPLATES, "report.md.j2", topologies=run.topologies, prov=prov, cfg=cfg, pub=pub, ns=ns, rows=rows,
                published_rises=[(s["label"], rise({int(k): v for k, v in s["points"].items()}))
                                 for s in pub["series"]],
                methods=method_lines(summary), excluded=excluded, unchecked=unchecked,
                rec=summary.get(("alias", "receiver_bps"), {}),
                cs=summary.get(("alias", "clients_sum_bps"), {}), post2=p2, claims=found,
                limits=limits, restarted=restarted)
    return study_report(run_dir, md, "Alias study", found,
                        (lambda: plot(run_dir, summary, pub, cfg)) if records else None, body)


def plot(run_dir: str, summary: Summary, pub: Dict[str, Any], cfg: Dict[str, Any]) -> Dict[str, str]:
    """The figure (:func:`figure`) as ``alias.png`` and ``alias.svg`` in ``run_dir``."""
    from nslab.store.plotting import save_figure
    return save_figure(figure(summary, pub, cfg), run_dir, "alias")


def figure(summary: Summary, pub: Dict[str, Any], cfg: Dict[str, Any]) -> Any:
    """Mbit/s vs # of aliases (points and a smooth line), published series, the
    TCP goodput ceiling; below it, the CPU and the clients' start margin, each
    in a panel of its own (on twin axes, each scaled to its own range, their
    first and last points met wherever the data fell). The legend stands
    beside the panels, never over a point (post 1's series lies far below
    the others, where an inside legend fell on it); the parallel mode's marks
    are hollow, so the alias mode's show through where the two agree."""
    from nslab.store.plotting import pyplot
    plt = pyplot()
    import numpy as np

    from nslab.model.shaping import parse_rate
    fig, (ax, ax2, ax3) = plt.subplots(3, 1, figsize=(10.5, 8.5), sharex=True,
                                       gridspec_kw={"height_ratios": [3, 1.1, 1.1]})
    for s, marker in zip(pub["series"], ("s", "^", "v")):
        xs = sorted(int(k) for k in s["points"])
        ax.plot(xs, [s["points"][str(x)] / 1e3 for x in xs], marker=marker, ls=":", color="grey",
                alpha=0.8, label=f"published: {s['label']}")
    styles = {("alias", "receiver_bps"): ("C0", "o", "-"),
              ("alias", "clients_sum_bps"): ("C1", "o", "--"),
              ("parallel", "receiver_bps"): ("C2", "D", "-"),
              ("parallel", "clients_sum_bps"): ("C3", "D", "--")}
    for (mode, metric), (color, marker, ls) in styles.items():
        data = summary.get((mode, metric))
        if not data:
            continue
        xs = sorted(data)
        med = np.array([data[x]["median"] for x in xs]) / 1e6
        lo = med - np.array([data[x]["min"] for x in xs]) / 1e6
        hi = np.array([data[x]["max"] for x in xs]) / 1e6 - med
        hollow = {"mfc": "white", "ms": 8, "zorder": 3} if mode == "parallel" else {"zorder": 4}
        ax.errorbar(xs, med, yerr=[lo, hi], fmt=marker, color=color, capsize=3,
                    label=f"ours, {mode}: {dict(METHODS)[metric]}", **hollow)
        if len(xs) >= 3:
            fine = np.linspace(min(xs), max(xs), 200)
            ax.plot(fine, np.interp(fine, xs, med), ls=ls, color=color, alpha=0.6)
    rate = str(cfg.get("rate", "1Gbit"))
    if rate.lower() != "none":
        ceil = goodput_ceiling(parse_rate(rate), cfg.get("mss") or 1448, bool(cfg.get("framing"))) / 1e6
        ax.axhline(ceil, color="k", lw=0.8, ls="-.", label=f"TCP goodput ceiling ({ceil:.0f} Mbit/s)")
    ax.set_ylabel("Mbits/sec")
    ax.set_title("Throughput vs number of IP aliases")
    ax.grid(True)
    import textwrap
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(x, 38, subsequent_indent="  ") for x in labels], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for mode, color, marker in (("alias", "C0", "o"), ("parallel", "C2", "D")):
        cpu = summary.get((mode, "cpu_busy_pct"))
        if cpu:
            xs = sorted(cpu)
            ax2.plot(xs, [cpu[x]["median"] for x in xs], marker=marker, color=color,
                     label=f"CPU busy % ({mode})")
    ax2.set_ylabel("CPU busy %")
    ax2.grid(True)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    marg: Optional[Dict[int, Dict[str, float]]] = summary.get(("alias", "start_margin_s"))
    if marg:
        xs = sorted(marg)
        ax3.plot(xs, [marg[x]["min"] for x in xs], marker="x", color="C1", ls="--",
                 label="start margin, s (min;\n< 0: a client started late)")
        ax3.axhline(0, color="k", lw=0.6)
        ax3.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax3.set_ylabel("start margin (s)")
    ax3.set_xlabel("# of aliases")
    ax3.grid(True)
    return fig
