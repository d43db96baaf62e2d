"""The paper's claims about RFC 2544 (seed 004), each judged from the stored
records with an interval: bridge and router alike, the router's extra
latency, the knee, the CPU as the limit, the occupancy curve against Table
3, MLRsearch against the binary search, and back-to-back bursts."""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from nslab.store.glance import reason_parts
from nslab.store.reporting import Claim

from .model import knee_index, nominal_fps, paper_knee
from .records import Mlr, RfcRecord, Throughput, Trials
from .tables import (back_to_back_rows, baseline_why, bed_text, by_test, generator_limited,
                     host_note, interfered, invalid_why, limited_why, nominal_latencies,
                     nominal_why, published_figures, searches, short_reason, sweep_knees, table3)

#: "About the same" throughput: two one-sided tests against this margin.
SAME_MARGIN = 0.05
#: The knee lands "at the paper's": within this of its load.
KNEE_MARGIN = 0.10
#: "About 5 us more": the router's extra latency at 1,000 fps within this band.
EXTRA_LATENCY_US = (0.0, 10.0)
#: The DUT CPU "saturated" at the throughput: occupancy at least this.
SATURATED_PCT = 80.0
#: Our occupancy curve "follows" Table 3: within +- this (points) at every load.
OCCUPANCY_BAND = 10.0
MORE = "undecided: run the default preset"
#: What would decide a claim (:attr:`Claim.decide`), by what left it undecided.
DECIDE_QUIET = "a quiet host, or --bed virtual"
DECIDE_CALIBRATION = "a calibration that holds: a quiet host, or --bed virtual"
DECIDE_GENERATOR = "a faster send path (--generator xdp --link-rate none) or more CPUs"
DECIDE_KNEE = "--loss-sweeps 2"
DECIDE_B2B = "more back-to-back searches (--b2b-repeat 3)"


def reads(test: str, points: List[Tuple[str, int]]) -> List[Dict[str, Any]]:
    """What a claim is judged on (:attr:`Claim.reads`): ``test``'s records of
    each (DUT, frame size) of ``points``. A later round measures only the
    points of undecided claims: the intrinsic-cost test feeds none."""
    return [{"test": test, "dut": d, "frame": f} for d, f in points]


def claims(recs: List[RfcRecord], duts: List[str], pub: Dict[str, Any],
           prov: Optional[Dict[str, Any]] = None) -> List[Claim]:
    """The paper's claims, each with an interval and a verdict."""
    c = _ClaimInputs(recs, duts, pub, prov)
    made = (same_forwarding_claims(c) + router_latency_claims(c)
            + on_the_calibration(knee_claims(c) + cpu_limit_claims(c) + load_curve_claims(c),
                                 prov)
            + mlrsearch_claims(c) + back_to_back_claims(c))
    note = host_note(recs, (prov or {}).get("config"))
    return [to_decide(host_noted(x, recs, note), prov) for x in made]


def to_decide(claim: Claim, prov: Optional[Dict[str, Any]] = None) -> Claim:
    """An undecided claim with the one thing that would decide it
    (:attr:`Claim.decide`), read from what left it undecided: the host (on
    the real bed: the virtual bed, where no host can disturb an answer, or a
    quiet host), an unconfirmed calibration, the generator's ceiling, a
    single load sweep, a single back-to-back search, or too few samples."""
    if claim.verdict != "undecided" or claim.decide:
        return claim
    why = claim.why
    first = reason_parts(why)[0] if why else ""
    real = ((prov or {}).get("config") or {}).get("bed", "real") != "virtual"
    if why.startswith("the calibration was not confirmed"):
        decide = DECIDE_CALIBRATION if real else "a calibration that holds (run again)"
    elif "host interference" in first:
        decide = DECIDE_QUIET if real else "a quiet host"
    elif "the generator's ceiling" in first:
        decide = DECIDE_GENERATOR
    elif "sweep(s) with a knee" in first:
        decide = DECIDE_KNEE
    elif "--b2b-repeat" in why:
        decide = DECIDE_B2B
    elif MORE in why:
        decide = MORE[len("undecided: "):]
    else:
        return claim
    return dataclasses.replace(claim, decide=decide)


def host_noted(claim: Claim, recs: List[RfcRecord], note: Optional[str] = None) -> Claim:
    """An undecided claim, with how many of the trials it reads
    (:attr:`Claim.reads`) host interference left out when its own reason
    does not say (the interval it gives may be wide, or missing, for that
    reason rather than the DUT's), and, when host interference is in its
    reason, ``note``: what the host did in the run and the rule
    (:func:`~.tables.host_note`), the same words in every row it touches, so
    that a report states them once."""
    if claim.verdict != "undecided":
        return claim
    said = "host interference" in claim.why
    claim = claim if said or not claim.reads else _left_out_noted(claim, recs)
    if note and "host interference" in claim.why:
        return dataclasses.replace(claim, why=f"{claim.why}; {note}")
    return claim


def _left_out_noted(claim: Claim, recs: List[RfcRecord]) -> Claim:
    """``claim`` with how many of the trials it reads host interference left
    out (and how many disturbed passes it kept), if any."""
    assert claim.reads is not None
    total, hit, kept = 0, [], 0
    for r in recs:
        if not any(all(getattr(r.params, k) == v for k, v in want.items())
                   for want in claim.reads):
            continue
        m = r.measurements
        tries = (m.trials if isinstance(m, Trials) else m.probes if isinstance(m, Throughput)
                 else [])
        for t in tries:
            total += 1
            if getattr(t, "stands", None):  # a disturbed pass the search kept
                kept += 1
                continue
            hit += [str(w) for w in (t.invalid or []) if str(w).startswith("host interference")]
    also = (f"; {kept} more disturbed, kept as passes (their outcome, not their CPU "
            "figures)" if kept else "")
    if not hit:
        return dataclasses.replace(claim, why=claim.why + also) if kept else claim
    return dataclasses.replace(claim, why=f"{claim.why}; host interference left out {len(hit)} "
                               f"of {total} trials it reads{also}")


def bed_scale(prov: Optional[Dict[str, Any]]) -> float:
    """The bed's rates against the paper's, from a run's configuration: the
    virtual bed's ``virtual_scale``; 1 on the real bed (and for runs stored
    before there was a virtual bed)."""
    cfg = (prov or {}).get("config") or {}
    if cfg.get("bed") != "virtual":
        return 1.0
    try:
        scale = float(cfg.get("virtual_scale", 1.0))
    except (TypeError, ValueError):
        return 1.0
    return scale if 0 < scale <= 1 else 1.0


def paper_rows(pub: Dict[str, Any], scale: float = 1.0) -> Dict[float, Any]:
    """Table 3's rows by the load the bed offered for each (the paper's rate
    times ``scale``, as :func:`~.model.loads` rounds it)."""
    return {round(float(r[0]) * scale, 1): r for r in pub["table3_bridge_overload_64B"]["rows"]}


class _ClaimInputs:
    """What every claim of :func:`claims` reads: the records, the DUTs, the
    published data and provenance, the searches that stand, and the points
    the generator's ceiling or host interference took out."""

    src = "seed 004"

    def __init__(self, recs: List[RfcRecord], duts: List[str], pub: Dict[str, Any],
                 prov: Optional[Dict[str, Any]]) -> None:
        self.recs, self.duts, self.pub, self.prov = recs, duts, pub, prov
        #: the bed's rates against the paper's (the virtual bed's scale, else 1):
        #: the paper's rates are set beside ours times this, its latencies over it
        self.scale = bed_scale(prov)
        self.paper_says = published_figures(pub, self.scale)
        self.tp = searches(recs)
        self.limited = generator_limited(recs)
        self.noisy = interfered(recs)

    def same_published(self, frame: int) -> str:
        """The paper's words on bridge vs router at ``frame`` bytes."""
        if f"same:{frame}" in self.paper_says:
            return self.paper_says[f"same:{frame}"]
        start = self.paper_says.get("same_from")
        return f"no difference from {start} B on" if start and frame >= int(start) else ""

    def too_few(self, points: List[Tuple[str, int]]) -> Optional[str]:
        """Why a claim on these points has too few searches left after host
        interference (None: enough, or none were left out)."""
        hit = [self.noisy[p] for p in points
               if p in self.noisy and len(self.tp.get(p[0], {}).get(p[1], [])) < 2]
        return "; ".join(hit) or None


def same_forwarding_claims(c: _ClaimInputs) -> List[Claim]:
    """1. Bridge and router forward about the same, per frame size (TOST)."""
    from nslab.store.stats import equivalence
    out: List[Claim] = []
    if "bridge" not in c.tp or "router" not in c.tp:
        return out
    for f in sorted(set(c.tp["bridge"]) & set(c.tp["router"])):
        b, rt = c.tp["bridge"][f], c.tp["router"][f]
        pts = [("bridge", f), ("router", f)]
        if not b or not rt:
            out.append(Claim(f"Bridge and router forward about the same at {f} bytes",
                             f"no throughput search left at {f} bytes", "undecided",
                             c.too_few(pts) or "no search", c.src, c.same_published(f),
                             reads("throughput", pts)))
            continue
        verdict, est = equivalence(rt, b, SAME_MARGIN)
        if ("bridge", f) in c.limited or ("router", f) in c.limited:
            verdict, why = "undecided", limited_why(pts, c.limited)
        elif c.too_few(pts):
            verdict, why = "undecided", str(c.too_few(pts))
        elif est.ci is None:
            why = f"{min(len(b), len(rt))} search(es) per DUT: no interval; {MORE}"
        else:
            lvl = f"{est.ci.level * 100:.0f} %"
            why = {"agrees": f"the {lvl} interval lies inside", "disagrees":
                   f"the {lvl} interval lies outside", "undecided": f"the {lvl} interval "
                   "straddles"}[verdict] + (f" +-{SAME_MARGIN * 100:.0f} % (two one-sided "
                                            f"tests at {(1 - est.ci.level) / 2 * 100:.2g} %)")
        made = Claim(f"Bridge and router forward about the same at {f} bytes",
                     f"throughput, router vs bridge: {est.fmt(100, 1, ' %', sign=True)}; "
                     f"bridge {statistics.fmean(b):,.0f}, router "
                     f"{statistics.fmean(rt):,.0f} fps (mean of {len(b)}/{len(rt)} "
                     "searches)", verdict, why, c.src, c.same_published(f),
                     reads("throughput", pts))
        # at 64 bytes the calibrated cost, not the link, is what limits both
        out += on_the_calibration([made], c.prov) if f == 64 else [made]
    return out


def router_latency_claims(c: _ClaimInputs) -> List[Claim]:
    """2. The router adds about 5 us of latency at 1,000 fps, at any size: one
    claim per frame size either DUT's latency test ran at, when both DUTs are
    in the run."""
    from nslab.store.stats import difference, judge
    out: List[Claim] = []
    if "bridge" not in c.duts or "router" not in c.duts:
        return out
    lat = nominal_latencies(c.recs, c.scale)
    ran = sorted({r.params.frame for r in by_test(c.recs, "latency")
                  if r.params.dut in ("bridge", "router")})
    for f in ran:
        title = f"A router adds about 5 us of latency over a bridge ({f} bytes)"
        pts = [("bridge", f), ("router", f)]
        # A DUT with no valid trial at the nominal rate at this size: the
        # claim stays, saying why (its trial at 90 % of line may have stood,
        # so "every trial was left out" is not always the reason).
        gone = [nominal_why(c.recs, d, f, c.scale) for d in ("bridge", "router")
                if f not in lat.get(d, {})]
        if gone:
            out.append(Claim(title, "no valid latency trial", "undecided", "; ".join(gone),
                             c.src, c.paper_says.get("extra_latency", ""),
                             reads("latency", pts)))
            continue
        d = difference(lat["router"][f], lat["bridge"][f])
        lo, hi = (x / c.scale for x in EXTRA_LATENCY_US)
        chk = judge(d, lo, hi, "'about 5 us more'" + (
            f" (at the bed's scale {c.scale:g}: {5 / c.scale:g} us)" if c.scale != 1 else "")
            + ", i.e.",
                    1, " us", 0, need=MORE)
        out.append(Claim(title, f"router minus bridge at {nominal_fps(c.scale):,g} fps: "
                         f"{d.fmt(1, 1, ' us', sign=True)}" + bed_text(c.prov),
                         chk.verdict, chk.why, c.src, c.paper_says.get("extra_latency", ""),
                         reads("latency", pts)))
    return out


def calibration_why(prov: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why the DUT's calibrated cost cannot be relied on: the calibration's
    last check was not confirmed (None: it was, the knob was given, or the
    run predates checks)."""
    setups: Dict[str, Dict[str, Any]] = (prov or {}).get("setups") or {}
    cal = next((s.get("calibration") for s in setups.values() if s.get("calibration")), None)
    if not cal or cal.get("checked") is not False:
        return None
    last = (cal.get("checks") or [{}])[-1]
    bad = [str(w) for x in last.get("readings") or [] for w in x.get("invalid") or []]
    return (f"the calibration was not confirmed: its check forwarded "
            f"{float(last.get('capacity_fps', 0)):,.0f} fps with {cal['filters']} filters, "
            + (f"but a reading of it was left out ({short_reason(bad[0])})" if bad else
               f"not within 5 % of {float(cal.get('target_fps', 0)):,.0f}"))


def on_the_calibration(made: List[Claim], prov: Optional[Dict[str, Any]]) -> List[Claim]:
    """Claims that rest on the DUT's calibrated cost (the bridge's knee, the
    CPU saturating below line rate, the occupancy curve against Table 3, the
    CPU at the latency knee, bridge and router alike at 64 bytes), undecided
    when the calibration was not confirmed (:func:`calibration_why`): a DUT
    far off the paper's cost would decide them for the bed's sake (too few
    filters, and both DUTs forward at line rate). What the interval said is
    kept in the reason."""
    why = calibration_why(prov)
    if not why:
        return made
    return [x if x.verdict == "undecided" else dataclasses.replace(
        x, verdict="undecided", why=f"{why}; on its own, the interval {x.verdict}: {x.why}")
        for x in made]


def knee_claims(c: _ClaimInputs) -> List[Claim]:
    """3. The bridge's knee where the paper's is (the calibration)."""
    from nslab.store.stats import judge, mean
    if "bridge" not in c.tp or 64 not in c.tp["bridge"]:
        return []
    title = "The bridge saturates at ~66 kfps of 64-byte frames (Table 3)"
    if not c.tp["bridge"][64]:
        return [Claim(title, "no throughput search left at 64 B", "undecided",
                      c.too_few([("bridge", 64)]) or "no search", c.src, c.paper_says["knee"],
                      reads("throughput", [("bridge", 64)]))]
    knee = paper_knee(c.pub) * c.scale
    est = mean(c.tp["bridge"][64])
    chk = judge(est, knee * (1 - KNEE_MARGIN), knee * (1 + KNEE_MARGIN),
                f"the paper's knee +-{KNEE_MARGIN * 100:.0f} %,", 1e-3, " kfps", 1, need=MORE)
    setups: Dict[str, Dict[str, Any]] = (c.prov or {}).get("setups") or {}
    cal = next((s.get("calibration") for s in setups.values() if s.get("calibration")), None)
    given = next(iter(setups.values()), {}).get("dut_cost_filters", "?")
    how = (f"knob calibrated to {cal['target']}: {cal['filters']} filters"
           if cal else f"knob given: {given} filters")
    verdict, why = chk.verdict, chk.why
    if ("bridge", 64) in c.limited:
        verdict, why = "undecided", limited_why([("bridge", 64)], c.limited)
    elif c.too_few([("bridge", 64)]):
        verdict, why = "undecided", str(c.too_few([("bridge", 64)]))
    return [Claim(title, f"bridge throughput at 64 B: {est.fmt(1e-3, 1, ' kfps')} ({how})",
                  verdict, why, c.src, c.paper_says["knee"], reads("throughput", [("bridge", 64)]))]


def cpu_limit_claims(c: _ClaimInputs) -> List[Claim]:
    """3. Each DUT's CPU saturated at its 64-byte throughput."""
    from nslab.store.stats import judge, mean
    out: List[Claim] = []
    for dut in c.duts:
        title = f"{dut}: the CPU is the limit (it saturates at the throughput)"
        published = c.paper_says.get("cpu", "") if dut == "bridge" else ""
        occ = [o for r in by_test(c.recs, "throughput")
               if r.params.dut == dut and r.params.frame == 64
               for o in r.measurements.occupancy_at_throughput_pct]  # type: ignore[union-attr]
        # searches of a run that records why a figure is missing (older ones
        # recorded no occupancy at all: no claim from them, as before)
        searched = any(r.params.dut == dut and r.params.frame == 64
                       and getattr(r.measurements, "searches_disturbed", None) is not None
                       for r in by_test(c.recs, "throughput"))
        why = baseline_why(c.recs, dut) or c.noisy.get((dut, 64)) or (
            "no confirmation trial at the throughput gave an occupancy figure (each was "
            "disturbed by the host or flagged by the fidelity guard; a disturbed pass "
            "confirms the rate, not the CPU)" if searched else None)
        if not occ and why:  # the claim stays, saying why it has no figure
            out.append(Claim(title, "no occupancy figure left", "undecided", str(why), c.src,
                             published, reads("throughput", [(dut, 64)])))
        elif occ:
            est = mean(occ)
            chk = judge(est, SATURATED_PCT, math.inf, "a saturated CPU, i.e.", 1, " %", 0,
                        need=MORE)
            verdict, why = chk.verdict, chk.why
            if (dut, 64) in c.limited:
                verdict, why = "undecided", limited_why([(dut, 64)], c.limited)
            out.append(Claim(title, "DUT CPU in the confirmation trials at the 64-byte "
                             f"throughput: {est.fmt(1, 0, ' %')}", verdict, why, c.src,
                             published, reads("throughput", [(dut, 64)])))
    return out


def load_curve_claims(c: _ClaimInputs) -> List[Claim]:
    """4. Latency vs load: the knee, and the occupancy curve beside Table 3."""
    paper = paper_rows(c.pub, c.scale)
    out: List[Claim] = []
    for dut in c.duts:
        every = table3(c.recs, dut)
        rows = [x for x in every if not x["invalid"]]
        if not rows:
            if every:  # the sweep ran and every load was left out: the claim stays
                bridge = dut == "bridge"
                out.append(Claim(
                    "bridge: occupancy vs load follows the paper's Table 3" if bridge else
                    f"{dut}: latency stays low until the DUT CPU saturates, then jumps",
                    "no valid load of the sweep", "undecided",
                    str(invalid_why(c.recs, "loss", dut, 64)), c.src,
                    c.paper_says.get("occupancy" if bridge else "latency_knee", ""),
                    reads("loss", [(dut, 64)])))
            continue
        knee_text = _knee_text(rows, len(every) - len(rows))
        if dut == "bridge":
            out += _occupancy_claims(c, rows, paper, knee_text)
        else:
            out.append(_latency_knee_claim(c, dut, knee_text))
    return out


def _per_load(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per offered load: the median latency and DUT CPU over the
    sweeps that measured it (rows sorted by load)."""
    out: Dict[float, List[Dict[str, Any]]] = {}
    for x in rows:
        out.setdefault(x["fps"], []).append(x)
    return [{"fps": f, "latency_us": statistics.median(x["latency_us"] for x in xs),
             "cpu_pct": statistics.median(x["cpu_pct"] for x in xs), "sweeps": len(xs)}
            for f, xs in sorted(out.items())]


def _knee_text(rows: List[Dict[str, Any]], excluded: int) -> str:
    """Where latency first jumped over the valid loads, in words (per load,
    the median over the sweeps that measured it)."""
    rows = _per_load(rows)
    i = knee_index([x["latency_us"] for x in rows])
    if i is None:
        knee_text = f"no knee up to {rows[-1]['fps']:,.0f} fps"
    else:
        many = " (medians over the sweeps)" if max(x["sweeps"] for x in rows) > 1 else ""
        knee_text = (f"latency{many} first >10x its low-load value between "
                     f"{rows[i - 1]['fps']:,.0f}"
                     f" and {rows[i]['fps']:,.0f} fps ({rows[i - 1]['latency_us']:,.0f} -> "
                     f"{rows[i]['latency_us']:,.0f} us, DUT CPU {rows[i - 1]['cpu_pct']:.0f}"
                     f" -> {rows[i]['cpu_pct']:.0f} %)")
    if excluded:
        knee_text += (f" ({excluded} load(s) excluded by the fidelity guard or for host "
                      "interference)")
    return knee_text


def _occupancy_claims(c: _ClaimInputs, rows: List[Dict[str, Any]], paper: Dict[float, Any],
                      knee_text: str) -> List[Claim]:
    """The bridge's occupancy at each of the paper's loads against Table 3.

    Judged load by load (:func:`~nslab.store.stats.pointwise`): the loads are
    the paper's, fixed, not a sample of loads, so a difference between the
    two curves' shapes is not noise to average over; the curve follows Table
    3 where every load's interval lies inside the band, and parts from it
    where one load's lies outside."""
    from nslab.store.stats import (ALPHA, level as stats_level, pointwise, r_squared,
                                   within_everywhere)
    title = "bridge: occupancy vs load follows the paper's Table 3"
    by_load: Dict[float, List[float]] = {}
    for x in rows:
        if x["fps"] in paper and paper[x["fps"]][4] is not None and x["cpu_ok"]:
            by_load.setdefault(x["fps"], []).append(x["cpu_pct"])
    if len(by_load) < 2:  # the claim stays, saying why it has too little to compare
        why = "; ".join(w for w in (few_loads_why(table3(c.recs, "bridge"), paper, len(by_load)),
                                    baseline_why(c.recs, "bridge")) if w)
        return [Claim(title, knee_text, "undecided", why, c.src,
                      c.paper_says.get("occupancy", ""), reads("loss", [("bridge", 64)]))]
    loads = sorted(by_load)
    theirs = [float(paper[f][4]) for f in loads]
    ests = pointwise([by_load[f] for f in loads], theirs)
    r2 = r_squared([statistics.fmean(by_load[f]) for f in loads], theirs)
    name = {f: f"{float(paper[f][0]):,.0f}" for f in loads}
    at = [f"{name[f]} fps: {e.fmt(1, 1, sign=True)}" for f, e in zip(loads, ests)]
    looks = round(ALPHA / (1 - stats_level()))
    how = (f" (each load's t interval at {round((1 - (1 - stats_level()) / len(loads)) * 100, 2):g}"
           f" %: Bonferroni over {len(loads)} loads"
           + (f" and {looks} looks" if looks > 1 else "") + ")")
    measured = (f"{knee_text}; our CPU minus the paper's, in points, at each of its rates "
                f"(Table 3's loads" + (f" x {c.scale:g}" if c.scale != 1 else "") + "): "
                + "; ".join(at) + (f"; R^2 {r2:.2f}" if r2 is not None else ""))
    verdict = within_everywhere(ests, -OCCUPANCY_BAND, OCCUPANCY_BAND)
    band = f"[{-OCCUPANCY_BAND:.0f}, {OCCUPANCY_BAND:.0f}] points"
    decide = ""
    if verdict == "disagrees":
        apart = [name[f] for f, e in zip(loads, ests)
                 if e.ci is not None and e.ci.outside(-OCCUPANCY_BAND, OCCUPANCY_BAND)]
        why = f"{_at_loads(apart, 'lies', 'lie')} outside {band}: the curves part there{how}"
    elif verdict == "agrees":
        why = f"every load's interval lies inside {band}{how}"
    else:
        once = [f for f, e in zip(loads, ests) if e.ci is None]
        edge = [name[f] for f, e in zip(loads, ests)
                if e.ci is not None and not e.ci.inside(-OCCUPANCY_BAND, OCCUPANCY_BAND)]
        parts = ([f"no load's interval lies outside {band}"] if len(once) < len(loads) else
                 ["no load has an interval"])
        if edge:
            parts.append(f"{_at_loads(edge, 'straddles', 'straddle')} the band's edge{how}")
        if once:
            parts.append(f"at {_names(name[f] for f in once)} fps one valid trial was kept, "
                         "which gives no interval")
        sweeps = sum(1 for r in by_test(c.recs, "loss")  # one record per sweep
                     if r.params.dut == "bridge" and r.params.frame == 64)
        if edge or sweeps > 1:
            why = "; ".join(parts) + f"; {MORE}"
        else:
            why = "; ".join(parts) + f"; undecided: {DECIDE_KNEE} measures each load twice"
            decide = DECIDE_KNEE
    return [Claim(title, measured, verdict, why, c.src, c.paper_says.get("occupancy", ""),
                  reads("loss", [("bridge", 64)]), decide)]


def _names(items: Any) -> str:
    """``a``, ``a and b``, ``a; b and c``: loads written with thousands
    separators, so never joined by commas."""
    got = list(items)
    return got[0] if len(got) == 1 else "; ".join(got[:-1]) + " and " + got[-1]


def _at_loads(loads: List[str], one: str, many: str) -> str:
    """"the interval at X fps lies" / "the intervals at X and Y fps lie"."""
    return (f"the interval at {loads[0]} fps {one}" if len(loads) == 1 else
            f"the intervals at {_names(loads)} fps {many}")


def few_loads_why(every: List[Dict[str, Any]], paper: Dict[float, Any], pairs: int) -> str:
    """Why fewer than two of the sweep's loads (``every``: :func:`table3`'s rows,
    left out or not) can be set beside Table 3's occupancy: how many of the
    trials at the paper's loads were left out, and the most frequent reason;
    or that the sweep measured too few of them. Trials kept without an
    occupancy figure (a disturbed idle baseline) are :func:`baseline_why`'s to
    explain."""
    at = [x for x in every if x["fps"] in paper and paper[x["fps"]][4] is not None]
    text = f"{pairs} of the paper's loads left to set beside Table 3 (a curve needs 2)"
    if not at:
        return text + ": the sweep measured none of them"
    out = Counter(short_reason(x["invalid"][0]) for x in at if x["invalid"])
    if out:
        why, n = out.most_common(1)[0]
        text += (f": {sum(out.values())} of the {len(at)} trials at them left out ({n} of "
                 f"them: {why})")
    elif all(x["cpu_ok"] for x in at):
        text += f": the sweep measured only {len(at)} trial(s) at them"
    return text


def _latency_knee_claim(c: _ClaimInputs, dut: str, knee_text: str) -> Claim:
    """Judged per sweep: the DUT CPU's occupancy at the load where latency
    jumped, over every sweep that has a knee."""
    from nslab.store.stats import judge, mean
    ks = sweep_knees(c.recs, dut)
    if len(ks) >= 2:
        est = mean([cpu for _, cpu in ks])
        chk = judge(est, SATURATED_PCT, math.inf, "a saturated CPU at the knee, i.e.", 1,
                    " %", 0, need=MORE)
        verdict, why = chk.verdict, chk.why
        measured = (f"{knee_text}; DUT CPU where latency jumped, over {len(ks)} sweeps: "
                    f"{est.fmt(1, 0, ' %')}")
    else:
        verdict, measured = "undecided", knee_text
        why = baseline_why(c.recs, dut) or (
            f"{len(ks)} sweep(s) with a knee: the CPU at the knee needs two "
            "(--loss-sweeps 2, --repeat 2, or --rounds 2)")
    return Claim(f"{dut}: latency stays low until the DUT CPU saturates, then jumps",
                 measured, verdict, why, c.src, c.paper_says.get("latency_knee", ""),
                 reads("loss", [(dut, 64)]))


def mlrsearch_claims(c: _ClaimInputs) -> List[Claim]:
    """MLRsearch's NDR against the RFC 2544 binary search at the same size."""
    from nslab.store.stats import judge, mean
    out: List[Claim] = []
    for r in by_test(c.recs, "mlrsearch"):
        m = r.measurements
        assert isinstance(m, Mlr)
        ndr = m.goals["NDR"]
        rfc = c.tp.get(r.params.dut, {}).get(r.params.frame)
        measured = (f"{r.params.dut} at {r.params.frame} B: NDR {ndr.fps:,.0f} fps "
                    f"[{ndr.lower_bound:,.0f}, {ndr.upper_bound:,.0f}], PDR "
                    f"{m.goals['PDR'].fps:,.0f} fps; {m.trials} trials, {m.wall_s:.0f} s")
        if rfc:
            est = mean(rfc)
            chk = judge(est, 0.95 * ndr.lower_bound, 1.05 * ndr.upper_bound,
                        "MLRsearch's NDR bounds +-5 %,", 1e-3, " kfps", 1, need=MORE)
            measured += f"; RFC 2544 searches {est.fmt(1e-3, 1, ' kfps')}"
            verdict, why = chk.verdict, chk.why
        else:
            verdict, why = "undecided", "no RFC 2544 search at this size to compare"
        out.append(Claim("MLRsearch's NDR agrees with the RFC 2544 binary search", measured,
                         verdict, why, "IETF BMWG MLRsearch draft; RFC 2544 section 26.1",
                         reads=[{"test": "mlrsearch"}, {"test": "throughput"}]))
    return out


def back_to_back_claims(c: _ClaimInputs) -> List[Claim]:
    """RFC 2544 26.4: the longest burst forwarded without loss against the
    input queue's prediction."""
    out: List[Claim] = []
    for x in back_to_back_rows(c.recs):
        if x["whole_trial"]:
            measured = (f"every burst up to one trial ({x['longest']:,} frames) forwarded "
                        "without loss")
            verdict, why = "undecided", "no prediction to compare: the DUT kept up with line rate"
        else:
            measured, verdict, why = _back_to_back_verdict(x)
        out.append(Claim(f"back-to-back, {x['dut']} at {x['frame']} bytes (RFC 2544 26.4)",
                         measured, verdict, why, "RFC 2544 section 26.4",
                         reads=(reads("back-to-back", [(x["dut"], x["frame"])])
                                + reads("throughput", [(x["dut"], x["frame"])]))))
    return out


def _back_to_back_verdict(x: Dict[str, Any]) -> Tuple[str, str, str]:
    """``(measured, verdict, why)`` of a back-to-back row whose bursts lost
    frames: the mean burst (t interval) within half to twice the prediction."""
    from nslab.store.stats import judge
    measured = (f"{x['mean']:,.0f} frames ({x['ms']:.1f} ms at line rate, {x['searches']} "
                f"searches, {x['min']:,.0f}-{x['max']:,.0f})")
    if not (x["predicted"] and x["searches"] >= 2):
        return measured, "undecided", "one search or no prediction: --b2b-repeat 3"
    from scipy import stats as st

    from nslab.store.stats import Estimate, Interval, level
    lvl = level()
    half = float(st.t.ppf(0.5 + lvl / 2, x["searches"] - 1)) * x["stdev"] / math.sqrt(
        x["searches"])
    est = Estimate(x["mean"], Interval(x["mean"] - half, x["mean"] + half, lvl, "t"),
                   x["searches"])
    chk = judge(est, 0.5 * x["predicted"], 2 * x["predicted"],
                "half to twice the input queue's prediction", 1, " frames", 0,
                need="more searches (--b2b-repeat)")
    measured += f"; the input queue predicts {x['predicted']:,.0f}"
    return measured, chk.verdict, chk.why
