"""Pure logic of file studies: metric values from raw tool output, and claims
judged on stored records with the statistics every study uses
(:mod:`nslab.store.stats`). No root, no lab: tested on captured output."""
from __future__ import annotations

import math
import re
import statistics
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from nslab.store import stats
from nslab.store.glance import QUIET_HOST
from nslab.store.reporting import Claim

from .model import METRIC_VALUES, ClaimSpec

_PING_RE = re.compile(r"icmp_seq=(\d+) .*time=([\d.]+) ms")
_PING_SUM_RE = re.compile(r"(\d+) packets transmitted, (\d+) received")


def late_events(done: Sequence[Dict[str, Any]], end: float) -> List[str]:
    """Why a trial is invalid because an event came too late: done (``done_at``,
    s from the trial's start) once the traffic had ended (``end``: its senders
    started plus their duration), so it never acted during the trial. A slow
    host can make it so: each event's commands start processes in namespaces,
    which took ~1 s each in a guest under TCG. An event done late but in time
    is kept with both times."""
    return [f"event {d['do']} on {d['target']} meant at {d['at']:g} s was done at "
            f"{d['done_at']:.1f} s, after the traffic had ended ({end:.1f} s): the host was "
            "too slow to apply it in time"
            for d in done if d["done_at"] >= end]


def late_probe(flow: str, began_at: Optional[float], first_event: Optional[float],
               rate: float) -> List[str]:
    """Why a trial is invalid because probe ``flow`` began too late: its
    stream began (``began_at``, s from the trial's start) less than one
    probe interval before its first event was begun, so the probes before
    the failure are missing and the outage, read from the stream's sequence
    numbers, would count from the stream's start. Beside two busy loops
    (2026-12-02) a sender's start took 1.6-1.8 s twice and the outage after a
    silent failure read 1,635 and 1,795 ms, below what BGP's hold time
    allows. Nothing to say without events or a start time (older records)."""
    if began_at is None or first_event is None or began_at < first_event - 1.0 / rate:
        return []
    return [f"probe {flow} began {began_at:.2f} s into the trial, after its first event was "
            f"begun ({first_event:.2f} s): the host was too slow to start it in time, so its "
            "outage would count from its start"]


def ping_latency(text: str) -> Dict[str, Optional[float]]:
    """``ping -D`` output: round-trip percentiles (ms) and loss (%)."""
    import numpy as np
    rtts = [float(m.group(2)) for m in _PING_RE.finditer(text)]
    s = _PING_SUM_RE.search(text)
    sent, got = (int(s.group(1)), int(s.group(2))) if s else (len(rtts), len(rtts))
    out: Dict[str, Optional[float]] = {"loss_pct": 100.0 * (sent - got) / sent if sent else None}
    for name, q in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99)):
        out[name] = float(np.percentile(rtts, q)) if rtts else None
    out["max_ms"] = max(rtts) if rtts else None
    return out


def _last_json(text: str) -> Dict[str, Any]:
    from nslab.model import bounded
    for line in reversed(text.strip().splitlines()):
        try:
            out = bounded.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return {}


def pktgen_delivery(send_out: str, sink_out: str, duration: float) -> Dict[str, Optional[float]]:
    """nslab-pktgen's sender and sink reports (a JSON line each): frames sent,
    received, the loss and the received rate."""
    sent = _last_json(send_out).get("sent")
    sink = _last_json(sink_out)
    got = sink.get("received") if sink.get("mode") == "recv" else None
    lat = (sink.get("latency_us") or {}).get("avg") if got else None
    return {"sent": None if sent is None else float(sent),
            "received": None if got is None else float(got),
            "loss_pct": (100.0 * (sent - got) / sent) if sent and got is not None else None,
            "pps": None if got is None else got / duration,
            "latency_avg_us": lat}


def iperf_series(rep: Any) -> List[float]:
    """Bit/s per 1-s interval of an :class:`nslab.traffic.iperf.IperfReport`, in time order: the SUM line's when iperf printed
    one per interval (several streams), else the streams' rates added."""
    by_time: Dict[Tuple[float, float], Dict[str, float]] = {}
    for s in rep.intervals:
        if s.end - s.start > 1.5:  # a final report, not an interval
            continue
        by_time.setdefault((s.start, s.end), {})[s.id] = s.bps
    out = []
    for key in sorted(by_time):
        ids = by_time[key]
        out.append(ids["SUM"] if "SUM" in ids else sum(ids.values()))
    return out


def window_mean(series: Sequence[float], window: Optional[Tuple[float, float]]) -> Optional[float]:
    """The mean of the 1-s values whose interval lies inside ``window`` (s)."""
    if not series:
        return None
    if window is None:
        return sum(series) / len(series)
    lo, hi = window
    inside = [v for i, v in enumerate(series) if i >= lo and i + 1 <= hi]
    return sum(inside) / len(inside) if inside else None


def convergence(samples: Sequence[Tuple[float, int]], expected: int,
                event_at: Optional[float]) -> Dict[str, Optional[float]]:
    """From ``(seconds after start, nexthops)`` samples: how long after the
    first event the route lost a nexthop, and how long until it had
    ``expected`` again (None: it did not happen within the trial)."""
    out: Dict[str, Optional[float]] = {"withdrawn_ms": None, "restored_ms": None}
    if event_at is None:
        return out
    lost_at = None
    for t, n in samples:
        if t < event_at:
            continue
        if lost_at is None and n < expected:
            lost_at = t
            out["withdrawn_ms"] = (t - event_at) * 1000.0
        elif lost_at is not None and n >= expected:
            out["restored_ms"] = (t - event_at) * 1000.0
            break
    return out


def short_before(samples: Sequence[Tuple[float, int]], expected: int,
                 event_at: Optional[float]) -> Optional[int]:
    """The nexthops the route had at its last sample before the first event,
    if fewer than ``expected`` (None: it was whole, or nothing to say). A
    route short before the event lost its nexthop to something else (a
    session the host's load let time out): its ``withdrawn_ms`` would count
    from the event a change that came before it."""
    if event_at is None:
        return None
    before = [n for t, n in samples if t < event_at]
    return before[-1] if before and before[-1] < expected else None


# -- selecting and judging ------------------------------------------------------------------
def matches(params: Dict[str, Any], where: Dict[str, Any]) -> bool:
    return all(params.get(k) == v for k, v in where.items())


def kept_out(record: Any, value: str) -> bool:
    """Does ``record`` stay out of a claim on ``value``: the host disturbed
    it, and ``value`` is not a time that timers decide (an outage, a route's
    convergence: :data:`RAISED_BY_A_BUSY_HOST`) measured while the lab's
    timers were on time on every CPU (:func:`nslab.store.records.on_time`:
    what the host took, it took in pieces too short to move them)?"""
    from nslab.store.records import disturbed, on_time
    return disturbed(record) and not (one_sided(value) and on_time(record))


def on_time_kept(records: Iterable[Any], value: str, wheres: Sequence[Dict[str, Any]]) -> int:
    """How many valid records matching any of ``wheres`` with a finite
    ``value`` the host disturbed, kept because their timers were on time
    (:func:`kept_out`), each once."""
    from nslab.store.records import disturbed
    return sum(1 for r in records if not r.measurements.invalid and disturbed(r)
               and not kept_out(r, value) and any(matches(r.params, w) for w in wheres)
               and _value(r, value) is not None)


def values_of(records: Iterable[Any], value: str, where: Dict[str, Any],
              disturbed_too: bool = False) -> List[float]:
    """The finite values of ``value`` in the valid records matching ``where``
    (neither invalid nor kept out as disturbed by other tasks on the host:
    :func:`kept_out`; with ``disturbed_too``, the disturbed ones that a busy
    host can only have made longer join them: :func:`untimed`)."""
    out = []
    for r in records:
        m = r.measurements
        if m.invalid or (kept_out(r, value) and not (disturbed_too and untimed(r, value))) \
                or not matches(r.params, where):
            continue
        x = _value(r, value)
        if x is not None:
            out.append(x)
    return out


def _where_text(where: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in where.items()) or "all points"


#: Units by a value's suffix, for the expectation a report prints.
_UNITS = {"_ms": " ms", "_us": " us", "_pct": " %"}


def expected(spec: ClaimSpec) -> str:
    """The figure a claim of a study file is judged against, as the file gives
    it (``"expected under 300 ms"``); empty for a comparison of two groups."""
    if spec.versus is not None:
        return ""
    unit = next((u for suffix, u in _UNITS.items() if spec.value.endswith(suffix)), "")
    if spec.below is not None:
        return f"expected under {spec.below:g}{unit}"
    if spec.above is not None:
        return f"expected over {spec.above:g}{unit}"
    low, high = spec.within  # type: ignore[misc]
    return f"expected {low:g} to {high:g}{unit}"


#: What decides a claim of a study file left undecided (:attr:`Claim.decide`):
#: more trials where it reads, or a sweep that measures there at all.
DECIDE_MORE = "more trials per point (--repeat 5, or more --rounds)"
DECIDE_UNMEASURED = "a sweep that measures the points it names"


def judge_claim(spec: ClaimSpec, records: Sequence[Any]) -> Claim:
    """A claim of a study file, checked on the stored records."""
    claim = _judge(spec, records)
    claim.published = expected(spec)
    if claim.verdict == "undecided" and claim.why.startswith((NO_UNDISTURBED,
                                                              TOO_FEW_UNDISTURBED)):
        # the host disturbed too many of its trials (note_interference says how)
        claim.decide = QUIET_HOST
    elif claim.verdict == "undecided" and not claim.why.startswith("a relative margin"):
        claim.decide = (DECIDE_UNMEASURED if claim.why == "nothing measured there"
                        else DECIDE_MORE)
    # the points it reads: its where, and its where with its versus
    claim.reads = [dict(spec.where)] + ([{**spec.where, **spec.versus.where}]
                                        if spec.versus is not None else [])
    kept = on_time_kept(records, spec.value, claim.reads)
    if kept:
        from nslab.store.records import ON_TIME_MS
        claim.why += (f"; {kept} trial(s) the host disturbed kept: the lab's timers were "
                      f"late by at most {ON_TIME_MS:g} ms on every CPU through them")
    return claim


#: Values a busy host can move one way only, by the value's name (each is
#: recorded by one metric kind: :data:`.model.METRIC_VALUES`). CPU time that
#: other tasks take from the bed makes a sender, a daemon or a sampler late,
#: never early: an outage's longest gap (the receiver keeps the kernel's
#: receive times, :func:`nslab.traffic.probe.arrival_time`) and the time a
#: route took to lose or regain a nexthop (counted from just before the
#: event was applied to just after the routing table was read) can only
#: read longer, after the events no protocol timer waits on (:data:`UNTIMED`).
#: No event admits ``restored_ms``: a route comes back on BGP's timers
#: (a session's retries, its open and keepalive), so its disturbed trials
#: never join a claim.
RAISED_BY_A_BUSY_HOST = ("gap_ms", "withdrawn_ms", "restored_ms")


#: The metric kinds that record such times (a study with one watches its
#: timers: :attr:`nslab.run.study.Study.watches_timers`).
TIMED_METRICS = tuple(k for k, names in METRIC_VALUES.items()
                      if set(names) & set(RAISED_BY_A_BUSY_HOST))


def one_sided(value: str) -> bool:
    """Whether a busy host can only raise ``value`` (:data:`RAISED_BY_A_BUSY_HOST`)."""
    return value.rsplit(".", 1)[-1] in RAISED_BY_A_BUSY_HOST


#: After which events a busy host can only lengthen which values, by the
#: value's name: a link taken down between two routers or hosts (its ends
#: lose their carrier; the kernel, zebra and bgpd act on the interface
#: going down, not on a timer, and BGP's updates carry no advertisement
#: interval here) and a killed bgpd (the kernel closes its sessions, so its
#: peers withdraw at once). Not the outage after a killed bgpd: its own
#: node's zebra takes away the routes it installed, and a zebra the host made
#: late starts the outage later, which shortens it. After any other event
#: the outcome waits on a timer that started at the last packet a peer sent
#: (BFD's detection time, BGP's hold time after a silent failure or a hung or
#: killed daemon that sends nothing, BGP's retries after a link comes back,
#: the carrier a switch keeps up): a peer the host made late sends that
#: packet earlier relative to the event, or loses it across the event, and
#: the timer fires *sooner*. Their disturbed trials never join
#: (:data:`WHY_SHORTER` says why, event by event).
UNTIMED = {"link-down": ("gap_ms", "withdrawn_ms"), "daemon-kill/bgpd": ("withdrawn_ms",)}

#: A trial without events (:func:`_timed`): what it measured has some other cause.
NO_EVENT = "no event"
#: The usual reason (:data:`WHY_SHORTER`'s default).
TIMER_SOONER = "a peer the host made late fires a protocol timer sooner"
#: The reason for ``restored_ms``, whatever the event (:data:`RAISED_BY_A_BUSY_HOST`).
BACK_ON_TIMERS = ("a route comes back on BGP's timers (a session's retries, its open and "
                  "keepalive), which a late peer fires sooner")
#: Why a busy host may have shortened a value after an event, by
#: :func:`_event_key` (the claim's row names each); any other event:
#: :data:`TIMER_SOONER`; ``restored_ms``: :data:`BACK_ON_TIMERS`.
WHY_SHORTER = {
    "daemon-kill/bgpd": "its node's zebra, made late, starts the outage later",
    "link-down (to a switch)": "the switch keeps the carrier up, so a protocol timer ends it, "
                               "which a late peer fires sooner",
    "link-down (ends unknown)": "its record is older than the events' switch field, so nslab "
                                "cannot tell whether a switch kept the carrier up",
    "link-rate": "nslab cannot tell which way a busy host moves what a rate change does",
    "link-netem": "nslab cannot tell which way a busy host moves what netem does",
    "sysctl": "nslab cannot tell which way a busy host moves what a sysctl does",
    NO_EVENT: "what it measured has some other cause, perhaps a timer's",
}


def _event_key(e: Any) -> str:
    """``e.do``; a daemon kill with its daemon (``daemon-kill/bgpd``), a link
    taken down to a switch (or not known not to be) with that said."""
    if e.do == "daemon-kill":
        return f"daemon-kill/{str(e.target).rsplit('/', 1)[-1]}"
    if e.do == "link-down" and getattr(e, "switch", None) is not False:
        return "link-down (to a switch)" if getattr(e, "switch", None) else "link-down (ends unknown)"
    return str(e.do)


def _timed(record: Any, value: str) -> List[str]:
    """The events of ``record``'s trial after which a busy host could have
    made ``value`` read shorter (:data:`UNTIMED`); :data:`NO_EVENT` for a
    trial without events."""
    name = value.rsplit(".", 1)[-1]
    events = getattr(record.measurements, "events", None) or []
    if not events:
        return [NO_EVENT]
    return [k for k in map(_event_key, events) if name not in UNTIMED.get(k, ())]


def untimed(record: Any, value: str) -> bool:
    """Whether a busy host can only have lengthened ``value`` in ``record``'s
    trial: it had events, and after each of them only lengthening is
    possible (:data:`UNTIMED`). A trial without events: its outage has some
    other cause, which may be a timer's."""
    return not _timed(record, value)


def _value(record: Any, value: str) -> Optional[float]:
    """``record``'s finite ``value``, or None."""
    x = record.measurements.values.get(value)
    return float(x) if x is not None and math.isfinite(x) else None


def _disturbed(records: Iterable[Any], value: str, where: Dict[str, Any],
               with_value: bool = True) -> List[Any]:
    """The valid records matching ``where`` that the host disturbed, kept out
    of claims on ``value`` (:func:`kept_out`), and (with ``with_value``) that
    hold a finite ``value``."""
    return [r for r in records if not r.measurements.invalid and kept_out(r, value)
            and matches(r.params, where) and (not with_value or _value(r, value) is not None)]


def timed_events(records: Iterable[Any], value: str, where: Dict[str, Any]) -> List[str]:
    """The events after which a busy host could have shortened ``value``, in
    the disturbed records of :func:`_disturbed`, sorted (:data:`NO_EVENT` for
    trials without any)."""
    return sorted({k for r in _disturbed(records, value, where) for k in _timed(r, value)})


def why_shorter(keys: Sequence[str], value: str) -> str:
    """The row's words on the disturbed trials left out after ``keys``
    (:func:`timed_events`): the events, those of one reason together, each
    group with its reason (:data:`WHY_SHORTER`, :data:`BACK_ON_TIMERS`)."""
    by: Dict[str, List[str]] = {}
    restored = value.rsplit(".", 1)[-1] == "restored_ms"
    for k in keys:
        why = BACK_ON_TIMERS if restored and k != NO_EVENT else WHY_SHORTER.get(k, TIMER_SOONER)
        by.setdefault(why, []).append(k)
    groups = [f"{'with' if ks == [NO_EVENT] else 'after'} {', '.join(ks)} ({why})"
              for why, ks in by.items()]
    return f"the disturbed trials {' and those '.join(groups)} stay out"


#: Why a claim is undecided whose trials the host disturbed, too many to
#: leave enough (:func:`nslab.store.reporting.note_interference` says how).
NO_UNDISTURBED = "no undisturbed trial"
TOO_FEW_UNDISTURBED = "too few undisturbed trials"


def _none_undisturbed(spec: ClaimSpec, where: str) -> Claim:
    return Claim(spec.claim, f"no undisturbed values of {spec.value} at {where}", "undecided",
                 NO_UNDISTURBED, spec.source or "")


def _judge(spec: ClaimSpec, records: Sequence[Any]) -> Claim:
    a = values_of(records, spec.value, spec.where)
    where = _where_text(spec.where)
    if spec.versus is None:
        if spec.below is not None:
            low, high, what = -math.inf, spec.below, "the range"
        elif spec.above is not None:
            low, high, what = spec.above, math.inf, "the range"
        else:
            low, high = spec.within  # type: ignore[misc]
            what = "the band"

        def judged(xs: List[float]) -> Claim:
            est = stats.mean(xs)
            chk = stats.judge(est, low, high, what, digits=_digits(xs),
                              need=f"undecided: {DECIDE_MORE}")
            return Claim(spec.claim, f"{spec.value} at {where}: mean {est.fmt(digits=_digits(xs))}",
                         chk.verdict, chk.why, spec.source or "")
        out = judged(a) if a else None
        if (out is None or out.verdict == "undecided") and spec.below is not None \
                and one_sided(spec.value):
            # a value a busy host can only raise, under a bound: the disturbed
            # trials whose events no timer waits on may join an undecided claim,
            # and an "agrees" with them holds for a quiet host (the undisturbed
            # trials' own verdict stands)
            every = values_of(records, spec.value, spec.where, disturbed_too=True)
            if len(every) > len(a):
                with_them = judged(every)
                if with_them.verdict == "agrees":
                    with_them.measured += f" (with {len(every) - len(a)} disturbed trial(s))"
                    with_them.why += (f"; with the {len(every) - len(a)} trial(s) the host "
                                      "disturbed in: a busy host only makes this longer, so "
                                      "'under' stands")
                    return with_them
            timed = timed_events(records, spec.value, spec.where)
            if timed:
                out = out or _none_undisturbed(spec, where)
                out.why += (f"; a busy host may have made it read shorter: "
                            f"{why_shorter(timed, spec.value)}")
        if out is None:
            # disturbed trials with no value of a value a busy host can only
            # raise: it may have pushed it past the trial's end
            if _disturbed(records, spec.value, spec.where,
                          with_value=not one_sided(spec.value)):
                return _none_undisturbed(spec, where)
            return Claim(spec.claim, f"no values of {spec.value} at {where}", "undecided",
                         "nothing measured there", spec.source or "")
        return out
    b_where = {**spec.where, **spec.versus.where}
    b = values_of(records, spec.value, b_where)
    label = f"{spec.value}: {where} vs {_where_text(b_where)}"
    if len(a) < 2 or len(b) < 2:
        short = [w for w, xs in ((spec.where, a), (b_where, b)) if len(xs) < 2]
        busy = all(len(values_of(records, spec.value, w)) + len(_disturbed(records, spec.value, w)) >= 2
                   for w in short)
        return Claim(spec.claim, f"{label}: n={len(a)} and n={len(b)}", "undecided",
                     f"{TOO_FEW_UNDISTURBED}: fewer than two on a side" if busy
                     else "fewer than two values on a side: no interval", spec.source or "")
    if spec.same_within is not None:
        if statistics.fmean(b) == 0:
            return Claim(spec.claim, f"{label}: the reference mean is 0", "undecided",
                         "a relative margin of a zero mean is undefined", spec.source or "")
        verdict, est = stats.equivalence(a, b, spec.same_within)
        return Claim(spec.claim, f"{label}: {est.fmt(100, 1, ' %', sign=True)}", verdict,
                     f"two one-sided tests against +-{spec.same_within * 100:g} %",
                     spec.source or "")
    d = stats.difference(a, b)
    want_higher = bool(spec.higher)
    if d.ci is None:
        verdict, why = "undecided", "no interval"
    elif (d.ci.low > 0) == want_higher and (d.ci.low > 0 or d.ci.high < 0):
        verdict, why = "agrees", f"the difference's interval lies {'above' if want_higher else 'below'} 0"
    elif d.ci.low > 0 or d.ci.high < 0:
        verdict, why = "disagrees", f"the difference's interval lies {'below' if want_higher else 'above'} 0"
    else:
        verdict, why = "undecided", "the difference's interval contains 0"
    return Claim(spec.claim, f"{label}: difference {d.fmt(digits=_digits(a + b), sign=True)}",
                 verdict, why, spec.source or "")


def _digits(values: Sequence[float]) -> int:
    """Digits that show values of this size sensibly."""
    m = max((abs(v) for v in values), default=0)
    return 0 if m >= 100 else 1 if m >= 10 else 2 if m >= 1 else 3


def group_table(records: Sequence[Any], keys: Sequence[str], values: Sequence[str]
                ) -> List[Dict[str, Any]]:
    """One row per combination of ``keys`` seen: each value's mean, interval and n."""
    groups: Dict[Tuple[Any, ...], List[Any]] = {}
    for r in records:
        groups.setdefault(tuple(r.params.get(k) for k in keys), []).append(r)
    rows = []
    for combo, recs in groups.items():
        valid = [r for r in recs if not r.measurements.invalid]
        row: Dict[str, Any] = {"params": dict(zip(keys, combo)), "n": len(valid),
                               "invalid": len(recs) - len(valid), "cells": {}}
        for v in values:
            xs = values_of(valid, v, {})
            row["cells"][v] = stats.mean(xs).fmt(digits=_digits(xs)) if xs else ""
        rows.append(row)
    return rows
