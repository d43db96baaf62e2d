"""The RFC 2544 report's tables, read from stored records: the paper's Table 3
format per DUT, the throughput searches that stand, back-to-back rows, the
intrinsic cost, what was left out and why, and the paper's figures in words."""
from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from .model import SLOWED, backlog_prediction, undisturbed
from .records import BackToBack, RfcRecord, Throughput, Trial, Trials

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


def searches(recs: List[RfcRecord]) -> Dict[str, Dict[int, List[float]]]:
    """Every throughput search's result, per DUT and frame size (all repeats),
    but those a probe still disturbed by other tasks after its re-runs may
    have steered (:func:`interfered` says why they are left out)."""
    out: Dict[str, Dict[int, List[float]]] = {}
    for r in by_test(recs, "throughput"):
        m = r.measurements
        assert isinstance(m, Throughput)
        out.setdefault(r.params.dut, {}).setdefault(r.params.frame, []).extend(
            undisturbed(m.searches_fps, m.searches_disturbed))
    return out


def interfered(recs: List[RfcRecord]) -> Dict[Tuple[str, int], str]:
    """(DUT, frame) points with throughput searches left out for host
    interference: how many, in one phrase ("host interference left out 1 of
    2 searches of the bridge at 64 B"). How much the host took or slowed is
    the run's, said once for every claim it touched (:func:`host_note`)."""
    left: Dict[Tuple[str, int], List[int]] = {}
    for r in by_test(recs, "throughput"):
        m = r.measurements
        assert isinstance(m, Throughput)
        flags = m.searches_disturbed or [False] * len(m.searches_fps)
        n = left.setdefault((r.params.dut, r.params.frame), [0, 0])
        n[0] += sum(flags)
        n[1] += len(flags)
    return {k: f"host interference left out {n[0]} of {n[1]} searches of the {k[0]} at {k[1]} B"
            for k, n in left.items() if n[0]}


def short_reason(why: str) -> str:
    """A trial's reason as a claim's row repeats it: host interference by name
    only (its figures are the run's note, :func:`host_note`), any other as it is."""
    return "host interference" if why.startswith("host interference") else why


def _worse(seen: Optional[Tuple[float, str]], pct: Optional[float], cpu: str
           ) -> Optional[Tuple[float, str]]:
    return (pct, cpu) if pct is not None and (seen is None or pct > seen[0]) else seen


def host_note(recs: List[RfcRecord], cfg: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """What host interference did in this run, in one phrase that every claim
    it touched shares (a report states it once, above its table): the most
    other tasks took of a bed CPU, and the most the host slowed one, over the
    trials and search probes it left out (a disturbed pass that stands is not
    left out), and the rule (the run's ``interference_pct``, ``slowdown_pct``
    and ``interference_reruns``). None: it left nothing out."""
    other: Optional[Tuple[float, str]] = None
    slow: Optional[Tuple[float, str]] = None
    hit = 0
    for r in recs:
        m = r.measurements
        if isinstance(m, Throughput):
            tries: List[Any] = list(m.probes)
        elif isinstance(m, Trials):
            tries = list(m.trials)
        else:
            continue
        for t in tries:
            why = [str(w) for w in (t.invalid or []) if str(w).startswith("host interference")]
            if not why or getattr(t, "stands", None):
                continue
            hit += 1
            slowed = any(SLOWED in w for w in why)
            for role, cpu in (("dut", "the DUT CPU"), ("gen", "the generator/sink CPU")):
                if isinstance(t, Trial):
                    got = (t.interference or {}).get(role)
                    pct_other = got.other_pct if got else None
                    pct_slow = got.slowdown_pct if got else None
                else:
                    pct_other = getattr(t, f"{role}_other_pct")
                    pct_slow = getattr(t, f"{role}_slowdown_pct")
                if slowed:
                    slow = _worse(slow, pct_slow, cpu)
                else:
                    other = _worse(other, pct_other, cpu)
    if not hit:
        return None
    cfg = cfg or {}
    what = []
    if other:
        what.append(f"other tasks took {other[0]:.0f} % of {other[1]}'s time")
    if slow:
        what.append(f"the host ran {slow[1]} {slow[0]:.0f} % {SLOWED}")
    return (f"host interference left out {hit} trial{'s' if hit > 1 else ''} of this run"
            + (f" (at worst {' and '.join(what)})" if what else "")
            + f": a trial during which other tasks took over {cfg.get('interference_pct', 10):g} "
            f"% of a bed CPU, or whose CPU ran over {cfg.get('slowdown_pct', 10):g} % slower "
            f"than its fastest in the run, is measured again (up to "
            f"{cfg.get('interference_reruns', 2)} times), then left out: no figure comes from it")


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


def nominal_latencies(recs: List[RfcRecord], scale: float = 1.0
                      ) -> Dict[str, Dict[int, List[float]]]:
    """Average latency of every trial at the nominal 1,000 fps, per DUT and size.

    Each trial's median (``latency_us.p50``) is recorded too, and varies far
    less from trial to trial than its mean, but judged per trial it made
    this claim agree in one run and disagree in two others (router minus
    bridge from -9.8 to +4.9 us): the trials of one lab build are not
    independent of each other, and builds differed by more than their trials
    did. Until the claim is judged per build, it stays on the means (mostly
    undecided, never contradicting itself)."""
    from .model import nominal_fps
    out: Dict[str, Dict[int, List[float]]] = {}
    for r in by_test(recs, "latency"):
        assert isinstance(r.measurements, Trials)
        for t in r.measurements.trials:
            if abs(t.target_fps - nominal_fps(scale)) < 1 and not t.invalid:
                out.setdefault(r.params.dut, {}).setdefault(r.params.frame, []).append(
                    t.latency_us.avg)
    return out


def _left_out(recs: List[RfcRecord], test: str, dut: str, frame: Optional[int],
              keep: Callable[[Trial], bool] = lambda t: True) -> Tuple[int, Counter]:
    """How many trials of ``test`` on ``dut`` (at ``frame`` bytes, or any size)
    ``keep`` selects, and of those left out, the first reason of each (host
    interference by name only: :func:`short_reason`)."""
    seen: Counter = Counter()
    total = 0
    for r in by_test(recs, test):
        if r.params.dut != dut or frame not in (None, r.params.frame):
            continue
        for t in trials_of(r):
            if keep(t):
                total += 1
                seen.update(short_reason(str(w)) for w in (t.invalid or [])[:1])
    return total, seen


def _left_text(what: str, total: int, seen: Counter) -> str:
    """"every <what> was left out (L of T: why)", or "(L of T; n of them: why)"
    when the most frequent reason is not every one's."""
    why, n = seen.most_common(1)[0]
    left = sum(seen.values())
    # n counts the most frequent reason only: "1 of 16" read as if 15 stood
    return (f"every {what} was left out " + (f"({left} of {total}: {why})" if n == left else
                                              f"({left} of {total}; {n} of them: {why})"))


def nominal_why(recs: List[RfcRecord], dut: str, frame: Optional[int] = None,
                scale: float = 1.0) -> str:
    """Why no latency trial of ``dut`` at the nominal 1,000 fps (at ``frame``
    bytes, or at any size) is left: how many were left out, and the most
    frequent reason."""
    from .model import nominal_fps
    fps = nominal_fps(scale)
    total, seen = _left_out(recs, "latency", dut, frame, lambda t: abs(t.target_fps - fps) < 1)
    if not seen:
        return f"no latency trial of the {dut} at {fps:,g} fps"
    return _left_text(f"latency trial of the {dut} at {fps:,g} fps", total, seen)


def invalid_why(recs: List[RfcRecord], test: str, dut: str,
                frame: Optional[int] = None) -> Optional[str]:
    """Why every trial of ``test`` on ``dut`` (at ``frame`` bytes, or at any
    size) was left out (the most frequent reason, and how many), or None when
    some trial stands or there were none."""
    total, seen = _left_out(recs, test, dut, frame)
    if not total or sum(seen.values()) < total:
        return None
    return _left_text(f"{test} trial", total, seen)


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
    cfg = prov.get("config") or {}
    # the virtual bed keeps no CPU awake (its clock counts instructions)
    awake = bool(cfg.get("keep_awake", False)) and cfg.get("bed") != "virtual"
    vals = [v for st in (prov.get("setups") or {}).values()
            if not (st.get("bed_floor") or {}).get("reused")
            for v in ((st.get("bed_floor") or {}).get("awake_us" if awake else "idle_us") or [])]
    if not vals:
        return ""
    return (f"; the bed alone (generator -> sink, no DUT): {statistics.fmean(vals):.0f} us"
            f"{' with CPUs kept awake' if awake else ''}")


def published_figures(pub: Dict[str, Any], scale: float = 1.0) -> Dict[str, str]:
    """The paper's figures the claims are judged against, in words, from the
    published data: ``knee`` (Table 3's), ``cpu`` (its last occupancy before
    the CPU was too busy to measure), ``occupancy`` (its curve's ends),
    ``latency_knee``, ``extra_latency`` (the router's), and per frame size
    ``same:<bytes>`` (bridge vs router throughput)."""
    from .model import knee_index, paper_knee
    out: Dict[str, str] = {}
    rows = sorted(pub["table3_bridge_overload_64B"]["rows"], key=lambda r: r[0])
    out["knee"] = f"{paper_knee(pub) / 1e3:.1f} kfps (Table 3)" + (
        f"; {paper_knee(pub) * scale / 1e3:.2f} kfps at the bed's scale {scale:g}"
        if scale != 1 else "")
    cpu = [r for r in rows if r[4] is not None]
    if cpu:
        last = cpu[-1]
        out["cpu"] = (f"bridge {last[4]:g} % at {last[0]:,.0f} fps, then too busy to measure "
                      "(Table 3)")
        out["occupancy"] = (f"{cpu[0][4]:g} % at {cpu[0][0]:,.0f} fps to {last[4]:g} % at "
                            f"{last[0]:,.0f} fps (Table 3)" + (
                                f"; set beside ours at {scale:g} of each load"
                                if scale != 1 else ""))
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
