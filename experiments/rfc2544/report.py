"""RFC 2544 report from stored results: the paper's Table 3 format per DUT,
figures like the paper's 10/13 (latency vs frame size), 11/14 (throughput vs
frame size at low and high input rate), latency vs offered load (log axis),
and the claims."""
from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from nslab.store.reporting import Claim, StudyReport, load_run, render_study, study_report
from nslab.model.shaping import frame_rate, parse_rate

from .model import SLOWED, backlog_prediction, knee_index, paper_knee
from .records import SCHEMA, BackToBack, Mlr, RfcRecord, Throughput, Trial, Trials

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
DUT_ORDER = ["bridge", "router", "ovs"]


def by_test(recs: List[RfcRecord], test: str) -> List[RfcRecord]:
    return [r for r in recs if r.params.test == test]


def trials_of(r: RfcRecord) -> List[Trial]:
    """The trials of a latency or loss point (its measurements are :class:`Trials`)."""
    assert isinstance(r.measurements, Trials)
    return r.measurements.trials


def table3(recs: List[RfcRecord], dut: str, frame: int = 64) -> List[Dict[str, Any]]:
    """Rows (fps, input bps, latency us, throughput bps, CPU %) of the load sweep."""
    rows = []
    for r in by_test(recs, "loss"):
        if r.params.dut != dut or r.params.frame != frame:
            continue
        assert isinstance(r.measurements, Trials)
        for t in r.measurements.trials:
            rows.append({"fps": t.target_fps, "input_bps": t.offered_bps,
                         "latency_us": t.latency_us.avg, "throughput_bps": t.throughput_bps,
                         "cpu_pct": t.dut_occupancy_pct, "cpu_ok": t.baseline_ok is not False,
                         "loss_pct": t.loss_pct,
                         "backlog_drops": t.dut_backlog_drops,
                         "generator_limited": t.generator_limited,
                         "invalid": t.invalid or []})
    return sorted(rows, key=lambda x: x["fps"])


def sweep_knees(recs: List[RfcRecord], dut: str, frame: int = 64) -> List[Tuple[float, float]]:
    """Per load sweep (one record each, every repeat), where latency first
    exceeds 10x its low-load value: (that load in fps, the DUT CPU's
    occupancy there), from its valid trials; sweeps without a knee give none."""
    from .model import knee_index
    out = []
    for r in by_test(recs, "loss"):
        if r.params.dut != dut or r.params.frame != frame:
            continue
        assert isinstance(r.measurements, Trials)
        rows = sorted((t for t in r.measurements.trials if not t.invalid),
                      key=lambda t: t.target_fps)
        i = knee_index([t.latency_us.avg for t in rows])
        if i is not None and rows[i].baseline_ok is not False:
            out.append((rows[i].target_fps, rows[i].dut_occupancy_pct))
    return out


def back_to_back_rows(recs: List[RfcRecord]) -> List[Dict[str, Any]]:
    """One row per back-to-back point, with the burst its throughput and the
    DUT's input queue predict (None when there is no throughput point or the
    DUT kept up with line rate)."""
    tp = {(r.params.dut, r.params.frame): r.measurements for r in by_test(recs, "throughput")}
    rows = []
    for r in by_test(recs, "back-to-back"):
        m, key = r.measurements, (r.params.dut, r.params.frame)
        assert isinstance(m, BackToBack)
        predicted: Optional[float] = None
        t = tp.get(key)
        if isinstance(t, Throughput) and m.backlog_limit and t.throughput_fps < m.line_fps:
            predicted = backlog_prediction(m.backlog_limit, t.throughput_fps, m.line_fps)
        rows.append({"dut": key[0], "frame": key[1], "mean": m.frames_mean, "stdev": m.frames_stdev,
                     "min": m.frames_min, "max": m.frames_max, "searches": len(m.searches),
                     "ms": m.burst_ms_mean, "longest": m.longest_tried,
                     "whole_trial": m.whole_trial, "predicted": predicted})
    return sorted(rows, key=lambda x: (DUT_ORDER.index(x["dut"]), x["frame"]))


#: "About the same" throughput: two one-sided tests against this margin.
SAME_MARGIN = 0.05
#: The knee lands "at the paper's": within this of its load.
KNEE_MARGIN = 0.10
#: "About 5 us more": the router's extra latency at 1,000 fps within this band.
EXTRA_LATENCY_US = (0.0, 10.0)
#: The DUT CPU "saturated" at the throughput: occupancy at least this.
SATURATED_PCT = 80.0
#: Our occupancy curve "follows" Table 3: mean difference within +- this (points).
OCCUPANCY_BAND = 10.0
MORE = "undecided: run the default preset"


def searches(recs: List[RfcRecord]) -> Dict[str, Dict[int, List[float]]]:
    """Every throughput search's result, per DUT and frame size (all repeats),
    but those a probe still disturbed by other tasks after its re-runs may
    have steered (:func:`interfered` says why they are left out)."""
    out: Dict[str, Dict[int, List[float]]] = {}
    for r in by_test(recs, "throughput"):
        m = r.measurements
        assert isinstance(m, Throughput)
        flags = m.searches_disturbed or [False] * len(m.searches_fps)
        out.setdefault(r.params.dut, {}).setdefault(r.params.frame, []).extend(
            v for v, bad in zip(m.searches_fps, flags) if not bad)
    return out


def interfered(recs: List[RfcRecord]) -> Dict[Tuple[str, int], str]:
    """(DUT, frame) points with throughput searches left out for host
    interference: why, in one phrase (the worst share of a bed CPU that other
    tasks took in a probe that stayed disturbed, or the most a bed CPU ran
    slower than its fastest, when the host slowed it instead)."""
    left: Dict[Tuple[str, int], List[int]] = {}
    worst: Dict[Tuple[str, int], Tuple[float, str]] = {}
    slowest: Dict[Tuple[str, int], Tuple[float, str]] = {}
    for r in by_test(recs, "throughput"):
        m = r.measurements
        assert isinstance(m, Throughput)
        key = (r.params.dut, r.params.frame)
        flags = m.searches_disturbed or [False] * len(m.searches_fps)
        n = left.setdefault(key, [0, 0])
        n[0] += sum(flags)
        n[1] += len(flags)
        for p in m.probes:
            why = [str(w) for w in (p.invalid or []) if str(w).startswith("host interference")]
            if not why or p.stands:  # a disturbed pass stands: it left nothing out
                continue
            slowed = any(SLOWED in w for w in why)  # the host slowed a CPU; no task took it
            for pct, cpu in (((p.dut_slowdown_pct, "the DUT CPU"),
                              (p.gen_slowdown_pct, "the generator/sink CPU")) if slowed else
                             ((p.dut_other_pct, "the DUT CPU"),
                              (p.gen_other_pct, "the generator/sink CPU"))):
                into = slowest if slowed else worst
                if pct is not None and pct > into.get(key, (-1.0, ""))[0]:
                    into[key] = (pct, cpu)
    out = {}
    for k, n in left.items():
        if not n[0]:
            continue
        what = []
        if k in worst or k not in slowest:
            pct, cpu = worst.get(k, (0.0, "the DUT CPU"))
            what.append(f"{pct:.0f} % of {cpu}'s time went to other tasks")
        if k in slowest:
            what.append(f"{slowest[k][1]} ran up to {slowest[k][0]:.0f} % slower than its "
                        "fastest in this run (the host gave the guest less)")
        out[k] = (f"host interference: {'; '.join(what)} ({n[0]} of {n[1]} searches of the "
                  f"{k[0]} at {k[1]} B left out)")
    return out


def baseline_why(recs: List[RfcRecord], dut: str) -> Optional[str]:
    """Why some of the DUT's occupancy figures were left out: a lab whose idle
    baseline other tasks disturbed (``baseline_ok`` False on its trials or
    searches). None: every lab's baseline was clean, or the run predates it."""
    refused = total = 0
    for r in recs:
        if r.params.dut != dut:
            continue
        m = r.measurements
        flags = ([m.baseline_ok] if isinstance(m, Throughput) else
                 [t.baseline_ok for t in m.trials] if isinstance(m, Trials) else [])
        total += sum(f is not None for f in flags)
        refused += sum(f is False for f in flags)
    if not refused:
        return None
    return (f"host interference: other tasks disturbed the idle baseline of the {dut}'s CPU "
            f"({refused} of {total} measurements): no occupancy figure from them")


def generator_limited(recs: List[RfcRecord]) -> Dict[Tuple[str, int], float]:
    """(DUT, frame) points whose throughput the generator's ceiling set, not the
    DUT: the ceiling, in frames/s. No claim about the DUT stands on them."""
    out: Dict[Tuple[str, int], float] = {}
    for r in by_test(recs, "throughput"):
        assert isinstance(r.measurements, Throughput)
        if r.measurements.generator_limited:
            out[(r.params.dut, r.params.frame)] = r.measurements.generator_ceiling_fps
    return out


def limited_why(points: List[Tuple[str, int]], limited: Dict[Tuple[str, int], float]) -> str:
    """Why a claim on generator-limited points is undecided."""
    hit = [f"{d} at {f} B ({limited[(d, f)]:,.0f} fps)" for d, f in points if (d, f) in limited]
    return ("the generator's ceiling, not the DUT, set the throughput of " + ", ".join(hit)
            + ": the bed cannot load this DUT to saturation here (a faster send path, "
            "--generator xdp with --link-rate none, or more CPUs)")


def nominal_latencies(recs: List[RfcRecord]) -> Dict[str, Dict[int, List[float]]]:
    """Average latency of every trial at the nominal 1,000 fps, per DUT and size.

    Each trial's median (``latency_us.p50``) is recorded too, and varies far
    less from trial to trial than its mean, but judged per trial it made
    this claim agree in one run and disagree in two others (router minus
    bridge from -9.8 to +4.9 us): the trials of one lab build are not
    independent of each other, and builds differed by more than their trials
    did. Until the claim is judged per build, it stays on the means (mostly
    undecided, never contradicting itself)."""
    from .model import NOMINAL_FPS
    out: Dict[str, Dict[int, List[float]]] = {}
    for r in by_test(recs, "latency"):
        assert isinstance(r.measurements, Trials)
        for t in r.measurements.trials:
            if abs(t.target_fps - NOMINAL_FPS) < 1 and not t.invalid:
                out.setdefault(r.params.dut, {}).setdefault(r.params.frame, []).append(
                    t.latency_us.avg)
    return out


def nominal_why(recs: List[RfcRecord], dut: str, frame: Optional[int] = None) -> str:
    """Why no latency trial of ``dut`` at the nominal 1,000 fps (at ``frame``
    bytes, or at any size) is left: how many were left out, and the most
    frequent reason."""
    from .model import NOMINAL_FPS
    seen: Counter = Counter()
    total = 0
    for r in by_test(recs, "latency"):
        if r.params.dut != dut or frame not in (None, r.params.frame):
            continue
        assert isinstance(r.measurements, Trials)
        for t in r.measurements.trials:
            if abs(t.target_fps - NOMINAL_FPS) < 1:
                total += 1
                seen.update((t.invalid or [])[:1])
    if not seen:
        return f"no latency trial of the {dut} at {NOMINAL_FPS:,} fps"
    why, n = seen.most_common(1)[0]
    left = sum(seen.values())
    return (f"every latency trial of the {dut} at {NOMINAL_FPS:,} fps was left out "
            + (f"({left} of {total}: {why})" if n == left else
               f"({left} of {total}; {n} of them: {why})"))


def invalid_why(recs: List[RfcRecord], test: str, dut: str,
                frame: Optional[int] = None) -> Optional[str]:
    """Why every trial of ``test`` on ``dut`` (at ``frame`` bytes, or at any
    size) was left out (the most frequent reason, and how many), or None when
    some trial stands or there were none."""
    seen: Counter = Counter()
    total = 0
    for r in by_test(recs, test):
        if r.params.dut != dut or frame not in (None, r.params.frame):
            continue
        assert isinstance(r.measurements, Trials)
        for t in r.measurements.trials:
            total += 1
            if not t.invalid:
                return None
            seen[t.invalid[0]] += 1
    if not total:
        return None
    why, n = seen.most_common(1)[0]
    # n counts the most frequent reason only: "1 of 16" read as if 15 stood
    return (f"every {test} trial was left out ({total} of {total}: {why})" if n == total else
            f"every {test} trial was left out ({total} of {total}; {n} of them: {why})")


def intrinsic(recs: List[RfcRecord]) -> List[Dict[str, Any]]:
    """The intrinsic cost table: per DUT, frame size and load, ns per forwarded
    frame (mean and t interval over the trials), with no knob."""
    from nslab.store.stats import mean
    rows = []
    for r in by_test(recs, "cost"):
        assert isinstance(r.measurements, Trials)
        per_load: Dict[float, List[float]] = {}
        for t in r.measurements.trials:
            if t.us_per_packet and not t.invalid:
                per_load.setdefault(t.target_fps, []).append(t.us_per_packet * 1000)
        for fps, vals in sorted(per_load.items()):
            est = mean(vals)
            rows.append({"dut": r.params.dut, "frame": r.params.frame, "fps": fps, "est": est,
                         "text": est.fmt(1, 0, " ns")})
    return sorted(rows, key=lambda x: (x["frame"], x["fps"], DUT_ORDER.index(x["dut"])))


def bed_text(prov: Optional[Dict[str, Any]]) -> str:
    """The bed's own latency floor (no DUT), as the 1,000 fps trials ran (CPUs
    kept awake or idle), for the text beside a latency figure."""
    prov = prov or {}
    awake = (prov.get("config") or {}).get("keep_awake", False)
    vals = [v for st in (prov.get("setups") or {}).values()
            if not (st.get("bed_floor") or {}).get("reused")
            for v in ((st.get("bed_floor") or {}).get("awake_us" if awake else "idle_us") or [])]
    if not vals:
        return ""
    return (f"; the bed alone (generator -> sink, no DUT): {statistics.fmean(vals):.0f} us"
            f"{' with CPUs kept awake' if awake else ''}")


def published_figures(pub: Dict[str, Any]) -> Dict[str, str]:
    """The paper's figures the claims are judged against, in words, from the
    published data: ``knee`` (Table 3's), ``cpu`` (its last occupancy before
    the CPU was too busy to measure), ``occupancy`` (its curve's ends),
    ``latency_knee``, ``extra_latency`` (the router's), and per frame size
    ``same:<bytes>`` (bridge vs router throughput)."""
    from .model import knee_index, paper_knee
    out: Dict[str, str] = {}
    rows = sorted(pub["table3_bridge_overload_64B"]["rows"], key=lambda r: r[0])
    out["knee"] = f"{paper_knee(pub) / 1e3:.1f} kfps (Table 3)"
    cpu = [r for r in rows if r[4] is not None]
    if cpu:
        last = cpu[-1]
        out["cpu"] = (f"bridge {last[4]:g} % at {last[0]:,.0f} fps, then too busy to measure "
                      "(Table 3)")
        out["occupancy"] = (f"{cpu[0][4]:g} % at {cpu[0][0]:,.0f} fps to {last[4]:g} % at "
                            f"{last[0]:,.0f} fps (Table 3)")
    i = knee_index([float(r[2]) for r in rows])
    if i is not None:
        out["latency_knee"] = (f"bridge: {rows[i - 1][2]:,.0f} -> {rows[i][2]:,.0f} us between "
                               f"{rows[i - 1][0]:,.0f} and {rows[i][0]:,.0f} fps (Table 3)")
    for t in pub.get("text_points", []):
        if t.get("id") == "router_extra_latency":
            out["extra_latency"] = f"+{t['extra_latency_us']:g} us at any frame size"
        elif t.get("id") == "small_frames_overload":
            out[f"same:{t['frame']}"] = (f"under overload: bridge {t['bridge_bps'] / 1e6:g}, router "
                                         f"{t['router_bps'] / 1e6:g} Mbit/s")
        elif t.get("id") == "same_at_512":
            out["same_from"] = str(t["frame"])
    return out


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
    return [host_noted(x, recs) for x in made]


def _first_pct(reason: str) -> float:
    """The first "N %" of a reason (0 when it has none)."""
    m = re.search(r"(\d+(?:\.\d+)?) %", reason)
    return float(m.group(1)) if m else 0.0


def host_noted(claim: Claim, recs: List[RfcRecord]) -> Claim:
    """An undecided claim whose own reason does not name host interference,
    with how many of the trials it reads (:attr:`Claim.reads`) host
    interference left out, and the worst of it: the interval it gives may be
    wide, or missing, for that reason rather than the DUT's."""
    if claim.verdict != "undecided" or claim.why.startswith("host interference") \
            or not claim.reads:
        return claim
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
    worst = max(hit, key=_first_pct)
    worst = re.sub(r"^host interference: ", "", re.sub(r" \(\d+ tries\)$", "", worst))
    return dataclasses.replace(claim, why=f"{claim.why}; host interference left out {len(hit)} "
                               f"of {total} trials it reads (worst: {worst}){also}")


class _ClaimInputs:
    """What every claim of :func:`claims` reads: the records, the DUTs, the
    published data and provenance, the searches that stand, and the points
    the generator's ceiling or host interference took out."""

    src = "seed 004"

    def __init__(self, recs: List[RfcRecord], duts: List[str], pub: Dict[str, Any],
                 prov: Optional[Dict[str, Any]]) -> None:
        self.recs, self.duts, self.pub, self.prov = recs, duts, pub, prov
        self.paper_says = published_figures(pub)
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
                     f"bridge {statistics.median(b):,.0f}, router "
                     f"{statistics.median(rt):,.0f} fps (median of {len(b)}/{len(rt)} "
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
    lat = nominal_latencies(c.recs)
    ran = sorted({r.params.frame for r in by_test(c.recs, "latency")
                  if r.params.dut in ("bridge", "router")})
    for f in ran:
        title = f"A router adds about 5 us of latency over a bridge ({f} bytes)"
        pts = [("bridge", f), ("router", f)]
        # A DUT with no valid trial at the nominal rate at this size: the
        # claim stays, saying why (its trial at 90 % of line may have stood,
        # so "every trial was left out" is not always the reason).
        gone = [nominal_why(c.recs, d, f) for d in ("bridge", "router")
                if f not in lat.get(d, {})]
        if gone:
            out.append(Claim(title, "no valid latency trial", "undecided", "; ".join(gone),
                             c.src, c.paper_says.get("extra_latency", ""),
                             reads("latency", pts)))
            continue
        d = difference(lat["router"][f], lat["bridge"][f])
        chk = judge(d, EXTRA_LATENCY_US[0], EXTRA_LATENCY_US[1], "'about 5 us more', i.e.",
                    1, " us", 0, need=MORE)
        out.append(Claim(title, f"router minus bridge at 1,000 fps: "
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
            + (f"but a reading of it was left out ({bad[0]})" if bad else
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
        x, verdict="undecided", why=f"{why} (on its own, the interval {x.verdict}: {x.why})")
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
    knee = paper_knee(c.pub)
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
    paper = {float(r[0]): r for r in c.pub["table3_bridge_overload_64B"]["rows"]}
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
    """The bridge's occupancy at the paper's loads against Table 3 (paired t)."""
    from nslab.store.stats import judge, paired_difference, r_squared
    title = "bridge: occupancy vs load follows the paper's Table 3"
    pairs = [(x["cpu_pct"], paper[x["fps"]][4]) for x in rows
             if x["fps"] in paper and paper[x["fps"]][4] is not None and x["cpu_ok"]]
    if len(pairs) < 2:  # the claim stays, saying why it has too little to compare
        why = "; ".join(w for w in (few_loads_why(table3(c.recs, "bridge"), paper, len(pairs)),
                                    baseline_why(c.recs, "bridge")) if w)
        return [Claim(title, knee_text, "undecided", why, c.src,
                      c.paper_says.get("occupancy", ""), reads("loss", [("bridge", 64)]))]
    ours, theirs = [p[0] for p in pairs], [float(p[1]) for p in pairs]
    d = paired_difference(ours, theirs)
    r2 = r_squared(ours, theirs)
    chk = judge(d, -OCCUPANCY_BAND, OCCUPANCY_BAND, "a mean difference in", 1, " points", 0,
                need=MORE)
    return [Claim(title, f"{knee_text}; our CPU minus the paper's at {len(pairs)} of its "
                  f"rates: {d.fmt(1, 1, ' points', sign=True)}"
                  + (f", R^2 {r2:.2f}" if r2 is not None else ""),
                  chk.verdict, chk.why + " (paired t over the loads)", c.src,
                  c.paper_says.get("occupancy", ""), reads("loss", [("bridge", 64)]))]


def few_loads_why(every: List[Dict[str, Any]], paper: Dict[float, Any], pairs: int) -> str:
    """Why fewer than two of the sweep's loads (``every``: :func:`table3`'s rows,
    left out or not) can be set beside Table 3's occupancy: how many of the
    trials at the paper's loads were left out, and the most frequent reason;
    or that the sweep measured too few of them. Trials kept without an
    occupancy figure (a disturbed idle baseline) are :func:`baseline_why`'s to
    explain."""
    at = [x for x in every if x["fps"] in paper and paper[x["fps"]][4] is not None]
    text = (f"{pairs} of the paper's loads left to set beside Table 3 (a paired t "
            "needs 2)")
    if not at:
        return text + ": the sweep measured none of them"
    out = Counter(x["invalid"][0] for x in at if x["invalid"])
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


def write_report(run_dir: str) -> StudyReport:
    run = load_run(run_dir, SCHEMA, "rfc2544")
    recs, prov, cfg = run.records, run.prov, run.cfg
    pub = run.published
    duts = sorted({r.params.dut for r in recs}, key=DUT_ORDER.index)
    rate = cfg.get("link_rate", "100Mbit")
    line_bps = None if str(rate).lower() == "none" else parse_rate(rate)
    throughput = sorted(by_test(recs, "throughput"), key=lambda r: (r.params.dut, r.params.frame))
    latency = sorted(by_test(recs, "latency"), key=lambda r: (r.params.dut, r.params.frame))
    found = claims(recs, duts, pub, prov)
    from nslab.store.stats import level
    md, body = render_study(TEMPLATES, "report.md.j2", level=level(), topologies=run.topologies,
                            prov=prov,
                            cfg=cfg, duts=duts, setups=prov.get("setups") or {},
                            throughput=throughput, latency=latency,
                            table3={d: table3(recs, d) for d in duts}, b2b=back_to_back_rows(recs),
                            paper=pub["table3_bridge_overload_64B"], claims=found,
                            intrinsic=intrinsic(recs))
    return study_report(run_dir, md, "RFC 2544 study", found,
                        (lambda: plot(run_dir, recs, duts, pub, line_bps)) if recs else None, body)


def plot(run_dir: str, recs: List[RfcRecord], duts: List[str], pub: Dict[str, Any],
         line_bps: Optional[float]) -> Dict[str, str]:
    from nslab.store.plotting import pyplot
    plt = pyplot()

    from nslab.store.plotting import save_figure
    colors = {"bridge": "C0", "router": "C1", "ovs": "C2"}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    ax = axes[0][0]  # Fig 10/13
    for dut in duts:
        pts = sorted((r.params.frame, trials_of(r)[0].latency_us.avg)
                     for r in by_test(recs, "latency") if r.params.dut == dut)
        if pts:
            ax.plot(*zip(*pts), marker="o", color=colors[dut], label=f"{dut} (ours)")
    ax.axhline(25, color="grey", ls=":", label="paper: bridge ~25 us")
    ax.axhline(30, color="grey", ls="--", lw=0.8, label="paper: router ~+5 us")
    ax.set(title="Latency vs frame size at 1,000 fps (cf. Fig. 10, 13)", xlabel="frame size (bytes)",
           ylabel="latency (us)")
    ax.legend(fontsize=7)
    ax.grid(True)
    ax = axes[0][1]  # Fig 11/14
    for dut in duts:
        lo, hi = [], []
        for r in by_test(recs, "loss"):
            if r.params.dut != dut:
                continue
            trials = sorted(trials_of(r), key=lambda t: t.target_fps)
            near = min(trials, key=lambda t: abs(t.target_fps - 1000))
            lo.append((r.params.frame, near.throughput_bps / 1e6))
            hi.append((r.params.frame, trials[-1].throughput_bps / 1e6))
        if lo:
            ax.plot(*zip(*sorted(lo)), marker="s", ls="--", color=colors[dut], label=f"{dut}, low input rate")
            ax.plot(*zip(*sorted(hi)), marker="o", color=colors[dut], label=f"{dut}, highest input rate")
    ax.scatter([1500], [96], marker="*", s=120, color="grey", label="paper: bridge 96 Mbit/s at 1500 B")
    if line_bps:
        ax.axhline(line_bps / 1e6, color="k", lw=0.6, ls=":", label="link rate")
    ax.set(title="Throughput vs frame size (cf. Fig. 11, 14)", xlabel="frame size (bytes)",
           ylabel="throughput (Mbit/s of frames)")
    ax.legend(fontsize=7)
    ax.grid(True)
    ax = axes[1][0]  # latency vs load, log
    for dut in duts:
        rows = table3(recs, dut)
        bad = [x for x in rows if x["invalid"]]
        rows = [x for x in rows if not x["invalid"]]
        if rows:
            ax.plot([x["fps"] for x in rows], [max(x["latency_us"], 1) for x in rows], marker="o",
                    color=colors[dut], label=f"{dut} (ours)")
        if bad:
            ax.scatter([x["fps"] for x in bad], [max(x["latency_us"], 1) for x in bad], marker="x",
                       color="lightgrey", label=f"{dut}: excluded by the fidelity guard")
    t3 = pub["table3_bridge_overload_64B"]["rows"]
    ax.plot([r[0] for r in t3], [r[2] for r in t3], marker="s", ls=":", color="grey",
            label="paper: bridge (Table 3)")
    if line_bps:
        ax.axvline(frame_rate(line_bps, 64), color="k", lw=0.6, ls=":", label="64 B line rate")
    ax.set(xscale="log", yscale="log", title="Latency vs offered load, 64-byte frames",
           xlabel="offered frames/s", ylabel="latency (us)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.4)
    ax = axes[1][1]  # CPU occupancy vs load
    for dut in duts:
        rows = table3(recs, dut)
        bad = [x for x in rows if x["invalid"]]
        rows = [x for x in rows if not x["invalid"]]
        if rows:
            ax.plot([x["fps"] for x in rows], [x["cpu_pct"] for x in rows], marker="o",
                    color=colors[dut], label=f"{dut} (ours)")
        if bad:
            ax.scatter([x["fps"] for x in bad], [x["cpu_pct"] for x in bad], marker="x",
                       color="lightgrey", label=f"{dut}: excluded by the fidelity guard")
    ax.plot([r[0] for r in t3 if r[4] is not None], [r[4] for r in t3 if r[4] is not None],
            marker="s", ls=":", color="grey", label="paper: bridge CPU")
    ax.set(xscale="log", title="DUT CPU occupancy vs offered load, 64 bytes", xlabel="offered frames/s",
           ylabel="occupancy (%)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.4)
    return save_figure(fig, run_dir, "rfc2544", dpi=100)
