"""``nslab reproduce``: the three studies in one run directory, then one report
(Markdown and HTML, same content) that puts our tables beside the published
ones and states, per claim of the seeds, what we found and how sure we are.

Reports read result files only: ``nslab report DIR`` redraws them without root.
"""
from __future__ import annotations

import html
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import click

from .errors import InputError
from .published import load_published
from .results import ResultStore

log = logging.getLogger(__name__)

STUDIES = ("alias", "ecmp", "rfc2544")
Block = Tuple[str, Any]


# -- configurations --------------------------------------------------------------------
def configs(mode: str) -> Dict[str, Any]:
    from nslab.experiments.alias import QUICK_ALIASES, AliasConfig
    from nslab.experiments.ecmp import EcmpConfig
    from nslab.experiments.rfc2544 import ALL_TESTS, Rfc2544Config
    if mode == "quick":
        return {
            "alias": AliasConfig(aliases=list(QUICK_ALIASES), duration=3, repeat=1),
            "ecmp": EcmpConfig(trials=3, duration=3),
            "rfc2544": Rfc2544Config(frame_sizes=[64, 1518], trial=0.5, warmup=0.2,
                                     resolution=0.05, quick_loads=True),
        }
    if mode == "full":
        # The seeds' own parameters where feasible: every alias count with 3 repeats
        # (10 s each instead of the posts' 60 s), 10 ECMP trials of 10 s as the post,
        # every RFC 2544 frame size with the paper's Table 3 rates, and the
        # back-to-back test (3 searches per size; the RFC's 50 would take hours).
        return {"alias": AliasConfig(), "ecmp": EcmpConfig(),
                "rfc2544": Rfc2544Config(tests=list(ALL_TESTS))}
    raise InputError(f"unknown mode {mode!r}")


def _existing(root: str, study: str) -> Optional[str]:
    d = os.path.join(root, study)
    if not os.path.isdir(d):
        return None
    runs = sorted(os.path.join(d, x) for x in os.listdir(d)
                  if os.path.isfile(os.path.join(d, x, "provenance.json")))
    return runs[-1] if runs else None


def reproduce(mode: str, results: str, resume: Optional[str] = None,
              studies: Tuple[str, ...] = STUDIES, echo: Callable[[str], None] = print) -> str:
    """Run the studies (skipping points already measured on resume) and write the report."""
    from nslab.experiments import alias, ecmp, rfc2544
    from nslab.naming import new_run_id
    runners = {"alias": alias.run, "ecmp": ecmp.run, "rfc2544": rfc2544.run}
    root = resume or os.path.join(results, "reproduce", time.strftime("%Y%m%d-%H%M%S"))
    if resume and not os.path.isdir(resume):
        raise InputError(f"{resume}: no such reproduction directory")
    os.makedirs(root, exist_ok=True)
    cfgs = configs(mode)
    with open(os.path.join(root, "mode"), "w") as f:
        f.write(mode + "\n")
    for i, study in enumerate(studies, 1):
        prev = _existing(root, study)
        echo(f"== [{i}/{len(studies)}] {study}" + (f" (resuming {prev})" if prev else ""))
        t0 = time.monotonic()
        runners[study](cfgs[study], root, run_id=new_run_id(), resume=prev)
        echo(f"== {study} done in {time.monotonic() - t0:.0f} s")
    paths = write_report(root)
    return paths["html"]


# -- claims ----------------------------------------------------------------------------
def alias_findings(run_dir: str) -> List[Block]:
    from nslab.experiments.alias_report import rise, summarize
    recs = ResultStore.open(run_dir).records("point")
    s = summarize(recs)
    reps = max((r["params"]["repeat"] for r in recs), default=0) + 1
    rec = s.get(("alias", "receiver_bps"), {})
    cs = s.get(("alias", "clients_sum_bps"), {})
    par = s.get(("parallel", "receiver_bps"), {})
    out: List[Block] = []
    if not rec:
        return [("p", "No alias data.")]
    ns = sorted(rec)
    spread = max((v["max"] - v["min"]) / v["median"] for v in rec.values())
    r_rec = rise({n: v["median"] for n, v in rec.items()})
    r_cs = rise({n: v["median"] for n, v in cs.items()}) if cs else None
    flat = r_rec is not None and abs(r_rec) <= max(0.02, spread)
    conf = (f"{reps} repeats per N, largest spread between repeats {spread * 100:.1f} %" if reps > 1
            else "1 repeat per N: no spread measured; run --full for 3 repeats")
    rows = []
    rows.append(("Linux IP aliasing adds no measurable overhead",
                 f"receiver throughput from N={ns[0]} to N={ns[-1]}: {r_rec * 100:+.1f} %" if r_rec is not None else "one N only",
                 "agrees" if flat or (r_rec is not None and r_rec > 0) else "disagrees", conf))
    rows.append(("Throughput rises with the number of aliases (posts: +7.6 %, +7.8 %)",
                 (f"at the receiver {r_rec * 100:+.1f} %; in the clients' summed reports "
                  f"{r_cs * 100:+.1f} %") if r_rec is not None and r_cs is not None else "n/a",
                 "not at the receiver: the rise appears only in the summed client reports"
                 if flat and r_cs is not None and r_cs > max(0.02, spread) else
                 ("reproduced" if r_rec and r_rec > max(0.02, spread) else "not reproduced"), conf))
    if par:
        n = max(set(par) & set(rec)) if set(par) & set(rec) else None
        if n:
            diff = (par[n]["median"] - rec[n]["median"]) / rec[n]["median"]
            pcs = s.get(("parallel", "clients_sum_bps"), {}).get(n)
            rows.append(("The rise comes from more TCP connections, not from the aliases",
                         f"N={n}: {n} connections to one address ({par[n]['median'] / 1e6:.0f} Mbit/s) vs "
                         f"one per alias ({rec[n]['median'] / 1e6:.0f}): {diff * 100:+.1f} %"
                         + (f"; iperf's own SUM for -P {n}: {pcs['median'] / 1e6:.0f} Mbit/s" if pcs else ""),
                         "aliases and connections behave alike; the link was full either way, so the extra "
                         "'throughput' is a reporting artefact, not more parallel windows", conf))
    out.append(("table", (["claim (seeds 000, 001)", "what we measured", "verdict", "how sure"], rows)))
    return out


def ecmp_findings(run_dir: str) -> List[Block]:
    from nslab.experiments.ecmp import chance
    from nslab.experiments.ecmp_report import distribution
    store = ResultStore.open(run_dir)
    recs = store.records("point")
    cfg = store.provenance().get("config", {})
    dist = distribution(recs)
    streams, spines = int(cfg.get("streams", 3)), int(cfg.get("spines", 2))
    one = f"{streams}+" + "+".join(["0"] * (spines - 1))
    exp = chance(streams, spines)
    rows = []
    if 0 in dist:
        n0 = sum(dist[0].values())
        rows.append(("L3 hashing keeps -P3 on one link (991 Mbit/s)",
                     f"policy 0: {dist[0].get(one, 0)}/{n0} trials all on one link",
                     "reproduced" if dist[0].get(one, 0) == n0 else "not reproduced",
                     f"{n0} trials; deterministic for one address pair"))
    if 1 in dist:
        n1 = sum(dist[1].values())
        spread_n = n1 - dist[1].get(one, 0)
        sums = [r["measurements"]["sum_bps"] / 1e6 for r in recs if r["params"]["policy"] == 1]
        rows.append(("L4 hashing spreads the streams over both links (1.97 Gbit/s)",
                     f"policy 1: {spread_n}/{n1} trials used both links; best SUM {max(sums):.0f} Mbit/s",
                     "reproduced" if spread_n > 0 else "not seen in these trials",
                     f"{n1} trials"))
        rows.append(("With L4, some attempts still hash all streams onto one link",
                     f"{dist[1].get(one, 0)}/{n1} trials all on one link; chance {exp.get(one, 0) * 100:.0f} %",
                     "reproduced" if dist[1].get(one, 0) > 0 else
                     f"not seen (chance of none in {n1} trials: {(1 - exp.get(one, 0)) ** n1 * 100:.0f} %)",
                     f"{n1} trials: a binomial count, wide interval at small n"))
    return [("table", (["claim (seed 002)", "what we measured", "verdict", "how sure"], rows))]


def rfc2544_findings(run_dir: str) -> List[Block]:
    from nslab.experiments.rfc2544_report import claims
    store = ResultStore.open(run_dir)
    recs = store.records("point")
    duts = sorted({r["params"]["dut"] for r in recs})
    return [("list", [c.lstrip("- ") for c in claims(recs, duts, load_published("rfc2544"))])]


# -- report ----------------------------------------------------------------------------
def write_report(root: str) -> Dict[str, str]:
    """Redraw every study's report and write report.md + report.html in ``root``."""
    from nslab.experiments.cli import _report_writers
    writers = _report_writers()
    blocks: List[Block] = [("h1", "nslab: reproduction of three Linux networking studies")]
    mode = open(os.path.join(root, "mode")).read().strip() if os.path.exists(os.path.join(root, "mode")) else "?"
    blocks.append(("p", f"Mode: {mode}. Every figure below was measured in this run; published "
                        "numbers come from results/published (the seeds)."))
    sections = {
        "alias": ("Study 1: IP aliases, throughput vs number of aliases (seeds 000, 001, 003)",
                  alias_findings, "table.md", "comparison.md", "alias.png"),
        "ecmp": ("Study 2: ECMP hashing, fib_multipath_hash_policy L3 vs L4 (seed 002)",
                 ecmp_findings, None, "report.md", "ecmp.png"),
        "rfc2544": ("Study 3: RFC 2544, Linux bridge vs Linux router (seed 004)",
                    rfc2544_findings, None, "report.md", "rfc2544.png"),
    }
    for study, (title, findings, table, text, png) in sections.items():
        run_dir = _existing(root, study)
        blocks.append(("h2", title))
        if not run_dir:
            blocks.append(("p", "Not run."))
            continue
        writers[study](run_dir)
        prov = ResultStore.open(run_dir).provenance()
        blocks.append(("p", f"Run directory: {os.path.relpath(run_dir, root)}; measured on "
                            f"{prov.get('host')} (kernel {prov.get('kernel')}, {prov.get('cpus')} CPUs, "
                            f"{prov.get('cpu_model')}), nslab {prov.get('git_commit') or 'unversioned'}."))
        blocks.append(("h3", "Claims"))
        blocks += findings(run_dir)
        blocks.append(("img", os.path.relpath(os.path.join(run_dir, png), root)))
        if table:
            blocks.append(("md", open(os.path.join(run_dir, table)).read()))
        blocks.append(("md", open(os.path.join(run_dir, text)).read()))
    md, htm = render_md(blocks), render_html(blocks)
    paths = {"md": os.path.join(root, "report.md"), "html": os.path.join(root, "report.html")}
    with open(paths["md"], "w") as f:
        f.write(md)
    with open(paths["html"], "w") as f:
        f.write(htm)
    return paths


def render_md(blocks: List[Block]) -> str:
    out = []
    for kind, val in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + val)
        elif kind == "p":
            out.append(val)
        elif kind == "list":
            out.append("\n".join(f"- {x}" for x in val))
        elif kind == "table":
            head, rows = val
            out.append("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" +
                       "\n".join("| " + " | ".join(str(c) for c in r) + " |" for r in rows))
        elif kind == "img":
            out.append(f"![{os.path.basename(val)}]({val})")
        elif kind == "md":
            out.append(_demote(val))
    return "\n\n".join(out) + "\n"


def _demote(md: str) -> str:
    """Nest a study's own report under our headings (# -> ####)."""
    return "\n".join(("###" + l) if l.startswith("#") else l for l in md.splitlines())


def render_html(blocks: List[Block]) -> str:
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>nslab reproduction</title>",
           "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
           "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
           "font-size:90%}img{max-width:100%}pre{background:#f6f6f6;padding:8px;overflow:auto}</style>"
           "</head><body>"]
    for kind, val in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{e(val)}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{e(val)}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in val) + "</ul>")
        elif kind == "table":
            head, rows = val
            out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>" +
                       "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>"
                               for r in rows) + "</table>")
        elif kind == "img":
            out.append(f"<img src='{e(val)}' alt='{e(os.path.basename(val))}'>")
        elif kind == "md":
            out.append(_md_to_html(val))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _md_to_html(md: str) -> str:
    """The small Markdown subset our study reports use: headings, tables, lists, code, text."""
    e = html.escape
    out, table, code = [], [], False
    for line in md.splitlines() + [""]:
        if line.startswith("```"):
            out.append("</pre>" if code else "<pre>")
            code = not code
            continue
        if code:
            out.append(e(line))
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                table.append(cells)
            continue
        if table:
            out.append("<table>" + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>"
                                           for r in table) + "</table>")
            table = []
        if line.startswith("#"):
            level = min(6, len(line) - len(line.lstrip("#")) + 3)
            out.append(f"<h{level}>{e(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<li>{e(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{e(line)}</p>")
    return "\n".join(out)


# -- CLI -------------------------------------------------------------------------------
@click.command("reproduce")
@click.option("--quick", "mode", flag_value="quick", default=True, help="A few minutes (default).")
@click.option("--full", "mode", flag_value="full", help="The seeds' own parameters where feasible (~40 min on 2 CPUs).")
@click.option("--only", default=",".join(STUDIES), show_default=True, help="Studies to run.")
@click.option("--resume", default=None, help="Continue an interrupted reproduction directory.")
@click.pass_context
def reproduce_cmd(ctx: click.Context, mode: str, only: str, resume: Optional[str]) -> None:
    """Reproduce the three studies and write one report (HTML + Markdown)."""

    from .cli import install_signals, setup_logging
    studies = tuple(s.strip() for s in only.split(",") if s.strip())
    for s in studies:
        if s not in STUDIES:
            raise InputError(f"unknown study {s!r} (use {', '.join(STUDIES)})")
    if resume and os.path.exists(os.path.join(resume, "mode")):
        mode = open(os.path.join(resume, "mode")).read().strip()
    setup_logging(ctx.obj, f"reproduce-{time.strftime('%Y%m%d-%H%M%S')}")
    install_signals()
    try:
        path = reproduce(mode, ctx.obj.results, resume=resume, studies=studies,
                         echo=lambda m: click.echo(m, err=True))
    except KeyboardInterrupt:
        if resume or os.path.isdir(os.path.join(ctx.obj.results, "reproduce")):
            click.echo("nslab: interrupted; measured points are kept; continue with "
                       "`nslab reproduce --resume <dir>` (the newest results/reproduce/*)", err=True)
        raise
    click.echo(f"report: {path}")
    click.echo(f"        {path[:-5]}.md")


def register(cli: click.Group) -> None:
    cli.add_command(reproduce_cmd)
