"""``nslab check [LAB]``: a running lab's checks, as a table (or JSON,
JUnit, CSV), exit 0 when all hold, 1 when one failed, 2 when one could not
run. See docs/check-a-lab.md."""
from __future__ import annotations

import os
import sys
import time
from typing import List, Optional, Sequence

import click

from ..errors import InputError, LabError
from ..model.checkfile import load as load_checks
from ..model.checks import StagePlan, Suite
from ..model.naming import check_run_id
from ..runtime.caps import require_root
from ..runtime.clean import live_journals, read_journal, run_is_live
from ..safeio import printable, write_atomic
from ..store import checkreport as report
from ..store.checkreport import FORMATS, CheckResult
from .cliutil import echo

#: The checks file ``nslab check`` reads when none is named (as netlab reads topology.yml).
DEFAULT_CHECKS = "checks.yaml"

EXAMPLES = """\b
  nslab check                                   checks.yaml here (else the checks of the
                                                topology file the lab was built from)
  nslab check --checks examples/clos-lab/checks.yaml --stage 1
  nslab check nl3f2a --checks lab.yaml --format junit -o checks.xml
  nslab check --checks checks.yaml --stage 2 --watch
  nslab check --checks checks.yaml --list       the stages and checks; no lab, no root"""


def find_lab(run: Optional[str]) -> str:
    """``run`` if it is a lab running on this host, else the only one."""
    if run:
        check_run_id(run)
        if run_is_live(read_journal(run)):
            return run
        raise InputError(f"no lab {run!r} is running on this host (`nslab clean --dry-run` "
                         "lists what is left of others)")
    live = sorted(str(j.get("run")) for j in live_journals())
    if len(live) == 1:
        return live[0]
    if not live:
        raise InputError("no lab is running on this host: start one (nslab topo up FILE), then "
                         "check it")
    raise InputError(f"{len(live)} labs are running ({', '.join(live)}): name the one to check "
                     "(nslab check LAB)")


#: In a lab's work directory: the topology file it was built from, when that
#: file has checks (``nslab topo up FILE``), and a digest of its text.
CHECKS_SOURCE = "checks-source.json"


def _digest(text: str) -> str:
    """What :data:`CHECKS_SOURCE` keeps of a topology file's text."""
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()


def remember_checks(run_id: str, topology: str) -> Optional[str]:
    """Note in lab ``run_id``'s work directory that it was built from the
    topology file ``topology``, if that file has ``checks:`` or ``stages:``,
    so that ``nslab check`` with no checks named finds them. Returns the
    file's path (None: not a file with checks)."""
    from ..model.checkfile import CHECK_KEYS
    from ..model.topo_yaml import parse_yaml, read_text
    from ..runtime import clean, statefile
    if not topology.endswith((".yaml", ".yml")) or not os.path.isfile(topology):
        return None
    text = read_text(topology)
    doc = parse_yaml(text, topology)
    if not isinstance(doc, dict) or not any(k in doc for k in CHECK_KEYS):
        return None
    path = os.path.abspath(topology)
    statefile.write(os.path.join(clean.workdir(run_id), CHECKS_SOURCE),
                    {"path": path, "sha256": _digest(text)})
    return path


def remembered_checks(run_id: str) -> str:
    """The topology file lab ``run_id`` was built from, whose checks ``nslab
    check`` runs when none are named; one line saying what to do otherwise
    (none remembered, or the file changed since the lab was built)."""
    from ..model import bounded
    from ..model.topo_yaml import read_text
    from ..runtime import clean
    try:
        data = bounded.load(os.path.join(clean.workdir(run_id), CHECKS_SOURCE), 64 * 1024)
    except (OSError, ValueError):
        data = None
    path = data.get("path") if isinstance(data, dict) else None
    if not isinstance(path, str) or not os.path.isabs(path):
        raise InputError(f"no {DEFAULT_CHECKS} in this folder, and lab {run_id} was not built "
                         "from a topology file with checks: name the checks with --checks FILE")
    try:
        now = _digest(read_text(path))
    except (OSError, InputError):
        now = ""
    if now != data.get("sha256"):
        raise InputError(f"{printable(path)}: changed (or gone) since lab {run_id} was built from "
                         f"it: name the checks with --checks FILE")
    return path


def pick_stages(suite: Suite, stage: Optional[str]) -> List[StagePlan]:
    """The stages ``--stage`` names: a number, ``all`` (in order), or none
    (the only one: a file of ``checks:`` or of one stage)."""
    if stage is None:
        if len(suite.stages) == 1:
            return [suite.stages[0]]
        listed = "; ".join(f"{p.number}: {p.title}" for p in suite.stages)
        raise InputError(f"{suite.path} has {len(suite.stages)} stages ({listed}): pick one with "
                         "--stage N, or --stage all")
    if stage == "all":
        return list(suite.stages)
    if not stage.isdigit() or not 1 <= int(stage) <= len(suite.stages):
        raise InputError(f"--stage {printable(stage)[:20]}: a stage of {suite.path} is 1 to "
                         f"{len(suite.stages)} (or all)")
    return [suite.stage(int(stage))]


def outline_lines(suite: Suite, stages: Sequence[StagePlan]) -> List[str]:
    """What ``--list`` prints: each stage, its link changes and its checks."""
    out = [f"{suite.path}: {suite.title}" if suite.title else suite.path]
    for p in stages:
        out.append(f"stage {p.number}: {p.title}" if suite.staged else "checks:")
        out += [f"  link {c.describe()}" for c in p.links]
        for n, (origin, c) in enumerate(p.checks, 1):
            within = f", within {c.within:g} s" if c.within else ""
            mine = f" (stage {origin})" if origin != p.number else ""
            out.append(f"  {n}. {c.label()} on {c.node}{within}{mine}")
    return out


def print_table(results: Sequence[CheckResult], title: str) -> None:
    """The results as a table (every cell escaped), then what went wrong."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    table = Table(title=Text(printable(title)))
    staged = len({r.stage for r in results}) > 1
    for col in (["stage"] if staged else []) + ["check", "node", "expected", "seen", "result",
                                                "time"]:
        table.add_column(col)
    style = {report.PASS: "green", report.FAIL: "bold red", report.ERROR: "yellow"}
    for r, row in zip(results, report.table_rows(results)):
        cells = [Text(printable(c)) for c in (row if staged else row[1:])]
        cells[-2].stylize(style[r.status])
        table.add_row(*cells)
    console = Console()
    console.print(table)
    for line in report.failures(results):
        console.print(Text(printable(line)))
    c = report.counts(results)
    console.print(Text(f"{c['pass']} passed, {c['fail']} failed, {c['error']} could not run"))


def write_output(text: str, output: Optional[str]) -> None:
    """``text`` to ``output`` (never through a link) or to stdout."""
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_atomic(output, text)
    except OSError as exc:
        raise InputError(f"-o {output}: {exc.strerror or exc}") from None
    echo(f"results written to {output}", err=True)


def run_once(run_id: str, suite: Suite, stages: Sequence[StagePlan], change_links: bool,
             say_links: bool = True) -> List[CheckResult]:
    """Each stage's link changes (when ``change_links``), then its checks."""
    from ..traffic.checkrun import LabView, run_stage
    from ..traffic.linkset import LiveLab, apply_changes
    view = LabView.of(run_id)
    results: List[CheckResult] = []
    for plan in stages:
        if change_links and plan.links:
            for line in apply_changes(LiveLab.of(run_id), plan.links):
                if say_links:
                    echo(f"stage {plan.number}: link {line}", err=True)
        results += run_stage(view, plan)
    return results


@click.command("check", epilog=EXAMPLES)
@click.argument("lab", required=False, metavar="[LAB]")
@click.option("--checks", "checks_path", default=None, metavar="FILE",
              help="A checks file, or a topology or study file with checks: or stages: "
                   f"(default: {DEFAULT_CHECKS} in this folder, else the checks of the "
                   "topology file the lab was built from).")
@click.option("--stage", default=None, metavar="N|all",
              help="The stage to run (its link changes, then its checks); all: every stage "
                   "in order. Needed when the file has several.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="table for people; json, junit (CI) or csv (graders) for programs.")
@click.option("-o", "--output", default=None, metavar="FILE",
              help="Write json, junit or csv there (never through a link) instead of stdout.")
@click.option("--watch", is_flag=True,
              help="Run the checks again every --interval seconds until Ctrl-C (a table; "
                   "link changes are made once).")
@click.option("--interval", type=click.FloatRange(0.5, 3600), default=2.0, show_default=True,
              help="Seconds between rounds of --watch.")
@click.option("--list", "list_only", is_flag=True,
              help="Print the stages and checks and run nothing (no lab, no root).")
@click.pass_context
def check_cmd(ctx: click.Context, lab: Optional[str], checks_path: Optional[str],
              stage: Optional[str], fmt: str, output: Optional[str], watch: bool,
              interval: float, list_only: bool) -> None:
    """Check a running lab: reachability, routes, interfaces, BGP and BFD
    sessions, throughput, each polled until it holds or its `within`
    deadline passes.

    \b
    LAB is a lab's run id (with none and one lab up, that one). Exit 0:
    every check held; 1: a check failed; 2: a check could not run (or the
    lab or the file could not be used).
    """
    try:
        code = _check(lab, checks_path, stage, fmt, output, watch, interval, list_only)
    except InputError:
        raise
    except LabError as exc:  # exit 2, as InputError: nothing was judged
        raise InputError(str(exc)) from exc
    ctx.exit(code)


def _check(lab: Optional[str], checks_path: Optional[str], stage: Optional[str], fmt: str,
           output: Optional[str], watch: bool, interval: float, list_only: bool) -> int:
    path = checks_path or DEFAULT_CHECKS
    if checks_path is None and not os.path.lexists(path):
        # the checks of the topology file the lab was built from (nslab topo up FILE)
        path = remembered_checks(find_lab(lab))
        echo(f"checks: {printable(path)} (the lab's topology file)", err=True)
    suite = load_checks(path)
    stages = pick_stages(suite, stage)
    if list_only:
        for line in outline_lines(suite, stages):
            echo(line)
        return 0
    if watch and (fmt != "table" or output):
        raise InputError("--watch shows a table: leave out --format and -o")
    if fmt == "table" and output:
        raise InputError("-o writes json, junit or csv: give --format too")
    require_root("nslab check")
    run_id = find_lab(lab)
    title = f"lab {run_id}: {suite.title or suite.path}" + (
        f", stage {stages[0].number}: {stages[0].title}" if len(stages) == 1 and suite.staged
        else "")
    if not watch:
        results = run_once(run_id, suite, stages, change_links=True)
        if fmt == "table":
            print_table(results, title)
        else:
            meta = {"lab": run_id, "checks": suite.path, "title": suite.title,
                    "stages": [p.number for p in stages]}
            text = {"json": lambda: report.to_json(results, meta),
                    "junit": lambda: report.to_junit(results, f"nslab check {suite.path}"),
                    "csv": lambda: report.to_csv(results)}[fmt]()
            write_output(text, output)
        return report.exit_code(results)
    return _watch(run_id, suite, stages, title, interval)


def _watch(run_id: str, suite: Suite, stages: Sequence[StagePlan], title: str,
           interval: float) -> int:
    """Rounds until Ctrl-C or the lab goes; the last round's exit code."""
    from rich.console import Console
    console = Console()
    code, first = 2, True
    try:
        while True:
            results = run_once(run_id, suite, stages, change_links=first, say_links=first)
            first = False
            console.clear()
            print_table(results, f"{title} ({time.strftime('%H:%M:%S')}; Ctrl-C to stop)")
            code = report.exit_code(results)
            time.sleep(interval)
            if not run_is_live(read_journal(run_id)):
                echo(f"lab {run_id} is gone", err=True)
                return 2
    except KeyboardInterrupt:
        return code
