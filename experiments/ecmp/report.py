"""ECMP study report from stored files only: the post's table format, the
distribution of splits per policy next to chance, the claims, and two plots."""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import statistics
import subprocess
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from nslab.errors import LabError
from nslab.model.topo import Topology
from nslab.store.records import disturbed
from nslab.store.reporting import (Claim, StudyReport, load_run, note_interference, render_study,
                                   study_report, writing)
from nslab.model.shaping import goodput_ceiling, parse_rate

from .model import chance, trial_invalid
from .records import SCHEMA, EcmpRecord

log = logging.getLogger(__name__)

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def post_format(rec: EcmpRecord) -> str:
    """One trial like the post: per-stream lines and the SUM, each with its link."""
    m = rec.measurements
    lines = [f"policy {rec.params.policy}, trial {rec.params.trial + 1} (split {m.split})"]
    for s in m.streams:
        lines.append(f"[{int(s.id):3d}] local port {s.local_port}  "
                     f"{s.bps / 1e6:6.0f} Mbits/sec  via {s.link or '?'}")
    lines.append(f"[SUM] {m.sum_bps / 1e6:6.0f} Mbits/sec")
    return "\n".join(lines)


def split_known(records: List[EcmpRecord], streams: int) -> List[EcmpRecord]:
    """The trials whose split is known (the fidelity guard: every stream seen
    and placed on a link by the captures), disturbed or not. Which link a
    stream takes is the kernel's hash of its header fields, chosen when its
    first packet is routed: other tasks taking CPU time can slow a stream,
    never move it to another link (a capture that lost packets leaves its
    stream unplaced, and the trial out, instead). So a split measured while
    the host was busy stands."""
    return [r for r in records if not trial_invalid(len(r.measurements.streams),
                                                    r.measurements.unassigned_streams, streams)]


def valid(records: List[EcmpRecord], streams: int) -> List[EcmpRecord]:
    """The trials whose split is known (:func:`split_known`) and that other
    tasks on the host did not disturb (:func:`nslab.store.records.disturbed`):
    the ones whose rates count."""
    return [r for r in split_known(records, streams) if not disturbed(r)]


#: A disturbed trial's SUM can only be lower than the bed's: the links'
#: shapers cap it, and CPU time taken from the senders or the forwarding
#: only takes from it. So a claim that the SUM is *above* a figure, decided
#: "agrees" with disturbed trials in, holds for the undisturbed bed too.
SUM_CLAIM = "L4 hashing spreads the streams over both links"
SUM_ONE_SIDED = ("a disturbed trial can only read lower (the shapers cap the SUM, and CPU "
                 "taken from the bed only takes from it), so 'above' stands")


def distribution(records: List[EcmpRecord]) -> Dict[int, Counter]:
    out: Dict[int, Counter] = {}
    for r in records:
        out.setdefault(r.params.policy, Counter())[r.measurements.split or "?"] += 1
    return out


#: "Keeps the streams on one link" means: in more than this share of trials.
MOSTLY = 0.5
MORE = "undecided: run the default preset (10 trials per policy)"


def published_trial(pub: Optional[Dict[str, Any]], policy: int) -> str:
    """The post's trial under ``policy`` (``"SUM 991 Mbit/s, streams 329 + 330
    + 329, links 3+0"``); empty without published data."""
    for t in (pub or {}).get("trials", []):
        if t.get("policy") == policy:
            return (f"SUM {t['sum']} Mbit/s, streams "
                    f"{' + '.join(str(x) for x in t['streams'])}, links {t['links_inferred']}")
    return ""


def claims(records: List[EcmpRecord], cfg: Dict[str, Any],
           iperf: str = "of unknown version",
           pub: Optional[Dict[str, Any]] = None) -> List[Claim]:
    """The post's claims as proportions of trials (Wilson intervals) and a mean
    SUM (t interval), each with a verdict; ``pub``, the published data, gives
    the post's own trials."""
    from nslab.store.stats import judge, mean, proportion
    streams, spines = int(cfg.get("streams", 3)), int(cfg.get("spines", 2))
    every = records
    known = split_known(records, streams)
    excluded = len(records) - len(known)

    def kept_disturbed(policy: int) -> str:
        return _kept_note(sum(1 for r in known if disturbed(r) and r.params.policy == policy))
    clean = valid(records, streams)
    # the splits: every trial whose split is known (a hash decides it)
    records = known
    dist = distribution(records)
    one = f"{streams}+" + "+".join(["0"] * (spines - 1))
    exp = chance(streams, spines)
    p_one = exp.get(one, 0.0)
    out: List[Claim] = []

    def prop(k: int, n: int):
        return proportion(k, n) if n >= 2 else None

    # a policy's claims stay when host interference left none of its trials:
    # undecided, saying so
    policies = {r.params.policy for r in every}
    if 0 in policies:
        d0 = dist.get(0, Counter())
        n0 = sum(d0.values())
        k0 = d0.get(one, 0)
        est = prop(k0, n0)
        chk = (judge(est, MOSTLY, 1.0, "'most trials', a share in", 100, " %", 0, need=MORE)
               if est else None)
        out.append(Claim("L3 hashing keeps -P3 on one link (991 Mbit/s)",
                         f"policy 0: {k0}/{n0} trials all on one link, "
                         + (est.ci.fmt(100, 0, " %") if est and est.ci else f"{n0} trial(s)"),
                         chk.verdict if chk else "undecided",
                         (chk.why if chk else f"{n0} trial(s): {MORE}")
                         + (f"; {excluded} trial(s) excluded (split unknown)" if excluded else "")
                         + kept_disturbed(0),
                         "seed 002", published_trial(pub, 0)))
    if 1 in policies:
        d1 = dist.get(1, Counter())
        n1 = sum(d1.values())
        k1 = n1 - d1.get(one, 0)
        def spread_sums(recs: List[EcmpRecord]) -> List[float]:
            return [r.measurements.sum_bps for r in recs
                    if r.params.policy == 1 and r.measurements.split not in (None, one)]
        sums = spread_sums(clean)
        every_sum = spread_sums(records)
        rate = str(cfg.get("link_rate", "1Gbit"))
        if rate.lower() != "none" and (sums or every_sum):
            ceiling = goodput_ceiling(parse_rate(rate), framing=bool(cfg.get("framing")))

            def judged(values: List[float]) -> Tuple[Any, Any]:
                est = mean(values)
                return est, judge(est, ceiling, math.inf,
                                  "more than one link can carry, i.e. above", 1e-6, " Mbit/s",
                                  0, need=MORE)
            est, chk = judged(sums) if sums else (None, None)
            which = "undisturbed"
            # only an undecided SUM: undisturbed trials that decided it are not overruled
            if (chk is None or chk.verdict == "undecided") and len(every_sum) > len(sums):
                est_all, chk_all = judged(every_sum)
                if chk_all.verdict == "agrees":
                    est, which = est_all, "all"
                    chk = dataclasses.replace(chk_all, why=(
                        f"{chk_all.why}; with the {len(every_sum) - len(sums)} disturbed "
                        f"trial(s) in: {SUM_ONE_SIDED}"))
            if chk is None:
                est, chk = judged(every_sum)
                chk = dataclasses.replace(chk, verdict="undecided", why=(
                    f"every such trial was disturbed by other tasks on the host, and with them "
                    f"the interval {chk.verdict} ({chk.why}): only 'agrees' would stand"))
            measured = (f"policy 1: {k1}/{n1} trials used more than one link; the SUM of "
                        f"{'those' if which == 'all' else 'the undisturbed ones'} "
                        f"{est.fmt(1e-6, 0, ' Mbit/s')} (iperf {iperf}'s -P SUM line)")
        else:
            chk = None
            measured = f"policy 1: {k1}/{n1} trials used more than one link"
        out.append(Claim(SUM_CLAIM + " (1.97 Gbit/s)", measured,
                         chk.verdict if chk else "undecided",
                         (chk.why if chk else ("no trial used more than one link; " + MORE
                                               if not every_sum else
                                               "unshaped links: no ceiling"))
                         + kept_disturbed(1),
                         "seed 002", published_trial(pub, 1)))
        k = d1.get(one, 0)
        est = prop(k, n1)
        if est is None or est.ci is None:
            verdict, why = "undecided", f"{n1} trial(s): {MORE}"
        elif k > 0:
            verdict, why = "agrees", (f"seen in {k} of {n1} trials (chance per trial with "
                                      f"random hashing: {p_one * 100:.0f} %)")
        elif est.ci.high < p_one:
            verdict, why = "disagrees", (f"never in {n1} trials: the interval lies below the "
                                         f"{p_one * 100:.0f} % random hashing gives")
        else:
            verdict, why = "undecided", (f"not seen in {n1} trials, but random hashing misses it "
                                         f"that often with probability {(1 - p_one) ** n1 * 100:.0f}"
                                         f" %; {MORE}")
        out.append(Claim("With L4, some attempts still hash all streams onto one link",
                         f"{k}/{n1} trials all on one link, "
                         + (est.ci.fmt(100, 0, " %") if est and est.ci else f"{n1} trial(s)")
                         + f"; random hashing: {p_one * 100:.0f} %",
                         verdict, why + kept_disturbed(1), "seed 002"))
    # only the SUM leaves disturbed trials out: the note on them is its alone
    return [note_interference([c], every)[0] if c.claim.startswith(SUM_CLAIM) else c
            for c in out]


def _kept_note(n: int) -> str:
    """What a claim on the splits says of the disturbed trials it kept."""
    return (f"; {n} trial(s) the host disturbed kept for their split (a hash of the header "
            "fields picks the link, not the CPU)" if n else "")


#: Edge colours by the number of streams a link carried in a trial.
STREAM_COLOURS = {1: "#2e7d32", 2: "#f9a825"}
CROWDED = "#c62828"


def trial_views(run_dir: str, recs: List[EcmpRecord],
                cfg: Dict[str, Any]) -> List[Tuple[int, Dict[int, Tuple[str, str]]]]:
    """One picture per trial: the clos with each of the sender's uplinks
    coloured and labelled by the streams it carried. Rows
    ``(trial, {policy: (split, file)})``; empty where Graphviz is missing."""
    from nslab.store.draw import available, draw, links
    if not available() or not recs or not writing():  # claims only: no picture
        return []
    stored = os.path.join(run_dir, "topology-clos.json")
    if os.path.exists(stored):
        from nslab.model import bounded
        try:  # a stored file: bounded size and depth
            data = bounded.load(stored)
        except ValueError as exc:
            from nslab.errors import InputError
            raise InputError(f"{stored}: not a topology: {exc}") from None
        topo = Topology.from_dict(data)
    else:  # runs from before the topology was stored: the same shape from the config
        from nslab.topologies.clos import clos
        topo = clos(spines=int(cfg.get("spines", 2)), servers=2)
    ends = {}
    for l in links(topo):
        ends[(l["a"], l["ia"])] = ends[(l["b"], l["ib"])] = l["id"]
    views: Dict[int, Dict[int, Tuple[str, str]]] = {}
    for r in sorted(recs, key=lambda r: (r.params.policy, r.params.trial)):
        m = r.measurements
        colors, labels = {}, {}
        for intf, n in m.streams_per_link.items():
            node = intf.rsplit("-", 1)[0]
            lid = ends.get((node, intf))
            if lid is None:
                continue
            mbps = sum(s.bps for s in m.streams if s.link == intf) / 1e6
            labels[(node, intf)] = f"{n} stream{'s' if n != 1 else ''}, {mbps:.0f} Mbit/s"
            if n:
                colors[lid] = STREAM_COLOURS.get(n, CROWDED)
        name = f"ecmp-trial-p{r.params.policy}-t{r.params.trial}.svg"
        try:
            draw(topo, os.path.join(run_dir, name), rates=labels, colors=colors)
        except (LabError, OSError, subprocess.SubprocessError) as exc:
            # a picture must not cost the report: the trial is shown without one
            log.warning("ecmp report: no picture of trial %s, policy %s: %s",
                        r.params.trial, r.params.policy, exc)
            continue
        views.setdefault(r.params.trial, {})[r.params.policy] = (m.split or "?", name)
    return sorted(views.items())


def write_report(run_dir: str) -> StudyReport:
    run = load_run(run_dir, SCHEMA, "ecmp")
    recs, prov, cfg = run.records, run.prov, run.cfg
    # runs before the Study API kept these at the top of the provenance
    setup = {**{k: prov[k] for k in ("convergence_s", "policy_set_in") if k in prov},
             **next(iter((prov.get("setups") or {}).values()), {})}
    pub = run.published
    streams, spines = int(cfg.get("streams", 3)), int(cfg.get("spines", 2))
    expect = chance(streams, spines)
    dist = distribution(recs)
    splits = []
    for policy, c in sorted(dist.items()):
        n = sum(c.values())
        for split in sorted(set(c) | set(expect), key=lambda s: -expect.get(s, 0)):
            splits.append((policy, split, c.get(split, 0), 100 * c.get(split, 0) / n,
                           100 * expect.get(split, 0)))
    pub_by_policy = {t["policy"]: t for t in pub["trials"]}
    sums = []
    for policy in sorted(dist):
        vals = [r.measurements.sum_bps / 1e6 for r in recs if r.params.policy == policy]
        p = pub_by_policy.get(policy)
        sums.append((policy, statistics.median(vals), min(vals), max(vals), p["sum"] if p else ""))
    found = claims(recs, cfg, str((prov.get("versions") or {}).get("iperf2")
                                  or "of unknown version"), pub)
    ordered = sorted(recs, key=lambda r: (r.params.policy, r.params.trial))
    md, body = render_study(TEMPLATES, "report.md.j2", topologies=run.topologies, prov=prov,
                            cfg=cfg, setup=setup, streams=streams, spines=spines, splits=splits,
                            sums=sums, pub=pub, trials=[post_format(r) for r in ordered],
                            claims=found, views=trial_views(run_dir, recs, cfg),
                            policies=sorted(dist))
    return study_report(run_dir, md, "ECMP study", found,
                        (lambda: plot(run_dir, recs, cfg, pub)) if recs else None, body)


def plot(run_dir: str, recs: List[EcmpRecord], cfg: Dict[str, Any], pub: Dict[str, Any]) -> Dict[str, str]:
    from nslab.store.plotting import pyplot
    plt = pyplot()

    from nslab.store.plotting import save_figure
    policies = sorted({r.params.policy for r in recs})
    spines = int(cfg.get("spines", 2))
    links = [f"server2-eth{s}" for s in range(spines)]
    fig, axes = plt.subplots(1, len(policies) + 1, figsize=(4.2 * (len(policies) + 1), 4.5),
                             gridspec_kw={"width_ratios": [3] * len(policies) + [2]})
    colors = {l: f"C{i}" for i, l in enumerate(links)}
    for ax, policy in zip(axes, policies):
        rs = sorted([r for r in recs if r.params.policy == policy], key=lambda r: r.params.trial)
        for i, r in enumerate(rs):
            bottom = 0.0
            for s in sorted(r.measurements.streams, key=lambda s: s.link or ""):
                h = s.bps / 1e6
                ax.bar(i + 1, h, bottom=bottom, color=colors.get(s.link or "", "grey"),
                       edgecolor="white")
                bottom += h
            ax.text(i + 1, bottom + 15, r.measurements.split or "?", ha="center", fontsize=7)
        ax.set_xticks(range(1, len(rs) + 1))
        ax.set_title(f"policy {policy}: per-stream Mbit/s by link")
        ax.set_xlabel("trial")
        ax.set_ylabel("Mbit/s")
        ax.grid(True, axis="y")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[l]) for l in links]
    axes[0].legend(handles, [f"{l} (spine{i + 1})" for i, l in enumerate(links)], fontsize=7)
    ax = axes[-1]
    for j, policy in enumerate(policies):
        sums = [r.measurements.sum_bps / 1e6 for r in recs if r.params.policy == policy]
        ax.scatter([j] * len(sums), sums, color="C0", alpha=0.7, label="ours" if j == 0 else None)
        for t in pub["trials"]:
            if t["policy"] == policy:
                ax.scatter([j + 0.15], [t["sum"]], marker="s", color="grey",
                           label="published" if j == 0 else None)
    rate = str(cfg.get("link_rate", "1Gbit"))
    if rate.lower() != "none":
        one = goodput_ceiling(parse_rate(rate), framing=bool(cfg.get("framing"))) / 1e6
        ax.axhline(one, ls="--", color="k", lw=0.8, label=f"one link ({one:.0f})")
        ax.axhline(2 * one, ls="-.", color="k", lw=0.8, label=f"two links ({2 * one:.0f})")
    ax.set_xticks(range(len(policies)), [f"policy {p}" for p in policies])
    ax.set_ylabel("SUM Mbit/s")
    ax.set_title("SUM per trial")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y")
    return save_figure(fig, run_dir, "ecmp")
