"""``nslab reproduce``: every registered study in one directory, then one report
(Markdown and HTML, same content) that puts our tables beside the published
ones and states, per claim of the sources, what we found and how sure we are.

Reports read result files only: ``nslab report DIR`` redraws them without root.
"""
from __future__ import annotations

import logging
import math
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import click
from pydantic import BaseModel, ConfigDict, Field

from .cliutil import echo, limit_option
from ..errors import InputError, LabError
from ..store.reporting import MarkdownText
from ..store.results import RECORDS, ResultStore, iter_records
from ..safeio import make_fresh_dir, read_bytes, tree_is_safe, write_atomic
from ..run.study import PRESETS, report_of, results_dir_of, run_study
from ..run.registry import studies
from ..runtime.proc import unidle_tree
from ..model.topo import explain
from ..store import glance, reporting
from . import cliutil

log = logging.getLogger(__name__)
TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")


def ordered_studies() -> Dict[str, Any]:
    """Registered studies in their reading order."""
    found = studies()
    return dict(sorted(found.items(), key=lambda kv: (getattr(kv[1], "order", 100), kv[0])))


def reproduce(mode: str, results: str, resume: Optional[str] = None,
              studies: Optional[Sequence[str]] = None,
              echo: Callable[[str], None] = print) -> str:
    """Run the studies at preset ``mode`` (skipping points already measured on
    resume) and write the report. Returns the HTML report's path.

    A new reproduction directory is made fresh (exclusive ``mkdir``); one to
    resume must be nslab's own (:func:`~nslab.safeio.tree_is_safe`)."""
    registered = ordered_studies()
    names = list(studies) if studies else list(registered)
    for s in names:
        if s not in registered:
            raise InputError(f"unknown study {s!r} (registered: {', '.join(registered)})")
    if resume:
        check_resumable(resume)
    root = resume or _fresh_root(results)
    write_atomic(os.path.join(root, "mode"), mode + "\n")
    away = []  # studies run elsewhere, beside the others: (name, process, start)
    try:
        for i, (name, study, prev, cfg, elsewhere) in enumerate(
                run_order(registered, names, mode, root), 1):
            if elsewhere:
                echo(f"== [{i}/{len(names)}] {name}" + (f" (resuming {prev})" if prev else "")
                     + ": in its own guest, beside the other studies (its clock counts "
                       "instructions: what they run cannot move its answers; it runs at the "
                       "idle policy while they run, though their threads wait a little "
                       "longer to wake beside it: docs/rfc2544.md)")
                away.append((name, _beside(name, mode, root, prev), time.monotonic()))
                continue
            echo(f"== [{i}/{len(names)}] {name}" + (f" (resuming {prev})" if prev else ""))
            t0 = time.monotonic()
            run_study(study, cfg, root, resume=prev, quiet=_pauser(away))
            echo(f"== {name} done in {time.monotonic() - t0:.0f} s")
        for name, proc, t0 in away:
            if proc.poll() is None:
                # nothing left for it to give way to: at the idle policy a
                # busy neighbour would leave it next to no CPU time at all
                moved = unidle_tree(proc.pid)
                echo(f"== waiting for {name} (in its guest" +
                     (", now at the normal policy: the other studies are done)" if moved
                      else ")"))
            if proc.wait() != 0:
                raise LabError(f"the {name} study ended with exit {proc.returncode} (its "
                               "error is above; `nslab reproduce --resume` measures only what "
                               "is missing)")
            echo(f"== {name} done in {time.monotonic() - t0:.0f} s")
    finally:
        for _, proc, _ in away:  # interrupted: each stops its own guest
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return write_report(root)["html"]


def run_order(registered: Dict[str, Any], names: Sequence[str], mode: str, root: str
              ) -> List[Tuple[str, Any, Optional[str], Any, bool]]:
    """The studies as they run: ``(name, study, earlier run dir, config,
    runs elsewhere)``. Those whose figures depend on the host's CPU speed
    (``Study.alone``) first, then the studies in a guest of their own (they
    start, and run beside), then the rest, each group in reading order: the
    guest's minutes overlap the most host studies that may share the host
    with it."""
    plan = []
    for name in names:
        study = registered[name]()
        prev = results_dir_of(root, name)
        cfg = None if prev else study.Config.preset(mode)
        plan.append((name, study, prev, cfg, runs_elsewhere(study, cfg, prev)))

    def group(p: Tuple[str, Any, Optional[str], Any, bool]) -> int:
        return 1 if p[4] else 0 if getattr(p[1], "alone", False) else 2
    return sorted(plan, key=group)  # stable: reading order within a group


def runs_elsewhere(study: Any, cfg: Any, prev: Optional[str]) -> bool:
    """Whether ``study`` runs in a guest of its own at this preset (the RFC
    2544 virtual bed), so that it may run beside the others."""
    if cfg is None and prev:
        saved = ResultStore.open(prev).provenance().get("config")
        if not saved:
            return False
        cfg = study.Config.saved(saved)
    return cfg is not None and study.elsewhere(cfg) is not None


def _pauser(away: List[Tuple[str, "subprocess.Popen[bytes]", float]]
            ) -> Optional[Callable[[], Any]]:
    """What pauses the guests running beside (their QEMU: their clocks count
    instructions, so a pause moves none of their answers) while a study that
    watches its timers measures a point on a host that has disturbed one of
    its points (:func:`~nslab.run.study.run_study`'s ``quiet``): beside the
    RFC 2544 guest at the idle policy, the failover study's timers were late
    by 55-636 ms beside a busy neighbour, 6-14 ms before the guest started
    (2026-12-02); None with no guest beside."""
    if not away:
        return None
    import contextlib

    from ..runtime.proc import paused_tree

    @contextlib.contextmanager
    def pause() -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for _, proc, _ in away:
                if proc.poll() is None:
                    stack.enter_context(paused_tree(proc.pid, prefix="qemu"))
            yield
    return pause


def _beside(name: str, mode: str, root: str, prev: Optional[str]) -> "subprocess.Popen[bytes]":
    """``nslab run NAME`` into this reproduction, in the background; its
    progress lines share this terminal. Its own process: Ctrl-C reaches it
    too, and it stops its guest. It runs at the ``SCHED_IDLE`` policy
    (:func:`_beside_child`), as its guest's QEMU does, until the studies on
    the host are done: :func:`reproduce` then moves it and all it started to
    the normal policy (:func:`~nslab.runtime.proc.unidle_tree`)."""
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    argv = [nslab, "--results", root, "run", name]
    argv += ["--resume", prev] if prev else ["--preset", mode]
    parent = os.getpid()
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: _beside_child(parent))


def _beside_child(parent: Optional[int] = None) -> None:
    """In the child, before it runs:

    - SIGINT when this process dies, however it dies (SIGKILL, SIGTERM), so
      that the child stops its guest and keeps what it measured rather than
      running on alone (prctl PR_SET_PDEATHSIG);
    - the ``SCHED_IDLE`` policy, which all it starts inherits: its answers
      come from a clock that counts instructions, so it may take only the
      CPU time the studies measured here leave, and their interference
      accounting counts none of its threads (no SCHED_IDLE thread is counted:
      :mod:`nslab.traffic.interference`). It is not free: while its QEMU
      runs, a thread of theirs that wakes waits longer for a CPU (this
      kernel preempts no kernel section: docs/rfc2544.md)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGINT), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was asked for: no orphan
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        pass  # refused (a seccomp filter): it runs at the normal policy, as QEMU did


def check_resumable(resume: str) -> None:
    """Refuse, in one line, a directory to resume that nslab cannot prove is
    its own (:func:`~nslab.safeio.tree_is_safe`): checked before any file in
    it is read, its ``mode`` included."""
    if not os.path.isdir(resume):
        raise InputError(f"{resume}: no such reproduction directory")
    why = tree_is_safe(resume)
    if why is not None:
        raise InputError(f"--resume {resume}: not a reproduction directory of nslab's own "
                         f"({why}); start a new one instead")


def _fresh_root(results: str, tries: int = 16) -> str:
    """A new ``<results>/reproduce/<time>`` directory, made fresh (a suffix is
    added when that name exists: never an earlier reproduction's)."""
    stem = os.path.join(results, "reproduce", time.strftime("%Y%m%d-%H%M%S"))
    for i in range(tries):
        path = stem if i == 0 else f"{stem}-{secrets.token_hex(2)}"
        try:
            make_fresh_dir(path)
        except FileExistsError:
            continue
        return path
    raise InputError(f"{stem}: exists already, and {tries - 1} other names too")


def _demote(md: str, base: str) -> str:
    """Nest a study's own report under our headings (# -> ####), without its
    title (the study's heading above it says it), and point its images at its
    run directory."""
    lines = md.lstrip("\n").splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    md = "\n".join(("###" + line) if line.startswith("#") else line for line in lines).lstrip("\n")
    base = urllib.parse.quote(base)  # a folder's name is not Markdown
    return MarkdownText(re.sub(r"!\[([^\]]*)\]\(([^)/]+)\)",
                               lambda m: f"![{m.group(1)}]({base}/{m.group(2)})", md))


#: The most of a ``mode`` file read (it holds a preset's name).
MODE_BYTES = 64


def _saved_mode(root: str) -> Optional[str]:
    """The preset a reproduction directory was started with (its ``mode``
    file: a regular file of at most :data:`MODE_BYTES`, else one line)."""
    try:
        return read_bytes(os.path.join(root, "mode"), MODE_BYTES).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None


class _HostNoise(BaseModel):
    """The host noise figure a study's provenance holds (:mod:`nslab.traffic.noise`)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    p50_us: float = Field(ge=0)
    p99_us: float = Field(ge=0)


class _Interference(BaseModel):
    """A run's summary of trials disturbed by other tasks on the bed's CPUs
    (:mod:`nslab.traffic.interference`): re-run, excluded, the worst share seen."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    reruns: int = Field(0, ge=0)
    excluded: int = Field(0, ge=0)
    #: disturbed, but kept: a throughput search's pass stands however the host
    #: disturbed it (:func:`nslab.experiments.rfc2544.model.search_disturbed`)
    kept: int = Field(0, ge=0)
    worst_other_pct: Optional[float] = Field(None, ge=0)
    #: the most a bed CPU ran slower than its fastest in the run (RFC 2544's
    #: trials, :mod:`nslab.traffic.speed`); None: not measured
    worst_slowdown_pct: Optional[float] = Field(None, ge=0)


def _checked(model: Any, value: Any, where: str) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise InputError(f"{where}: {explain(exc)}") from None


def host_noise(prov: Dict[str, Any], where: str) -> Optional[_HostNoise]:
    """The host noise figure measured at the run's start, if its provenance
    has one (``where`` names the file in an error)."""
    found = prov.get("host_noise")
    return None if found is None else _checked(_HostNoise, found, f"{where}: host_noise")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _dicts(obj: Any, depth: int = 0) -> Iterator[Dict[str, Any]]:
    """Every dict inside a stored record (its trials, probes...)."""
    if depth > 32:
        return
    if isinstance(obj, dict):
        yield obj
        obj = list(obj.values())
    if isinstance(obj, list):
        for x in obj:
            yield from _dicts(x, depth + 1)


def interference_of_records(run_dir: str) -> Optional[_Interference]:
    """Trials or points re-run or excluded for host interference, from the
    run's records: a trial's ``interference_reruns``, an ``invalid`` reason
    that starts "host interference" (excluded; kept when the trial
    ``stands``), the worst other tasks' share and
    slowdown of a bed CPU (RFC 2544 trials' ``interference.*.other_pct`` and
    ``.slowdown_pct``, their probes' ``dut_``/``gen_other_pct`` and
    ``_slowdown_pct``); a record's ``host`` (every study's points: ``reruns``,
    ``disturbed``, ``worst_pct``). None when nothing was accounted (the run
    predates it)."""
    accounted, reruns, excluded, kept, worst, slowest = False, 0, 0, 0, None, None

    def seen(pct: Any) -> None:
        nonlocal worst
        if _number(pct):
            worst = pct if worst is None else max(worst, pct)

    def slowed(pct: Any) -> None:
        nonlocal slowest
        if _number(pct) and pct >= 0:
            slowest = pct if slowest is None else max(slowest, pct)
    for rec in iter_records(os.path.join(ResultStore.open(run_dir).path, RECORDS)):
        host = rec.get("host")
        if isinstance(host, dict):
            accounted = True
            if _number(host.get("reruns")):
                reruns += int(host["reruns"])
            excluded += host.get("disturbed") is True
            seen(host.get("worst_pct"))
        for d in _dicts(rec.get("measurements")):
            if d.get("interference_reruns") is not None or d.get("interference") is not None:
                accounted = True
            if _number(d.get("interference_reruns")):
                reruns += int(d["interference_reruns"])
            invalid = d.get("invalid")
            if isinstance(invalid, list) and any(str(w).startswith("host interference")
                                                 for w in invalid):
                if d.get("stands") is True:
                    kept += 1
                else:
                    excluded += 1
            cpus = d.get("interference")
            for cpu in (cpus.values() if isinstance(cpus, dict) else ()):
                seen(cpu.get("other_pct") if isinstance(cpu, dict) else None)
                slowed(cpu.get("slowdown_pct") if isinstance(cpu, dict) else None)
            # a throughput search's probe keeps them flat
            for role in ("dut", "gen"):
                seen(d.get(f"{role}_other_pct"))
                slowed(d.get(f"{role}_slowdown_pct"))
    if not accounted:
        return None
    return _Interference(reruns=reruns, excluded=excluded, kept=kept, worst_other_pct=worst,
                         worst_slowdown_pct=slowest)


def first_screen(sections: List[Dict[str, Any]]) -> List[str]:
    """Give each study section (``name``, ``title``, ``claims``) what the
    reproduction's first screen shows of it: its ``short`` name, its
    ``line`` (:func:`nslab.store.glance.study_line`) and its ``rows`` of the
    one table of every claim; returns that table's notes (the reasons several
    rows share, stated once above it)."""
    for s in sections:
        s["short"] = glance.short_title(s["title"], s["name"])
        s["line"] = glance.study_line(s["claims"])
    claims = [c for s in sections for c in s["claims"]]
    table = glance.claims_table(claims, [s["name"] for s in sections for _ in s["claims"]])
    rows = iter(table.rows)  # in the order of the claims, section by section
    for s in sections:
        s["rows"] = [next(rows) for _ in s["claims"]]
    return table.notes


def write_report(root: str) -> Dict[str, str]:
    """Redraw every study's report and write report.md + report.html in ``root``:
    first each study in one line (how many of its claims were decided, which
    agree or disagree, what would decide each undecided one:
    :func:`nslab.store.glance.study_line`), how the run went, and one table
    of every claim of every study (the reasons several rows share stated once,
    above it), then each study's own report (its figures and tables; its
    claims are in the first table)."""
    from ..store.stats import VERDICTS
    mode = _saved_mode(root) or "?"
    sections: List[Dict[str, Any]] = []
    for name, cls in ordered_studies().items():
        run_dir = results_dir_of(root, name)
        section: Dict[str, Any] = {"name": name, "title": cls.title, "source": cls.source,
                                   "run_dir": None, "claims": []}
        if run_dir:
            rep = report_of(cls(), run_dir)
            rel = os.path.relpath(run_dir, root)
            prov = ResultStore.open(run_dir).provenance()
            where = os.path.join(run_dir, "provenance.json")
            section.update(run_dir=rel, prov=prov, claims=rep.claims,
                           figures=[os.path.relpath(f, root) for f in rep.figures],
                           body=_demote(rep.markdown, rel), noise=host_noise(prov, where),
                           interference=interference_of_records(run_dir))
        sections.append(section)
    claims = [c for s in sections for c in s["claims"]]
    notes = first_screen(sections)
    counts = {v: sum(1 for c in claims if c.verdict == v) for v in VERDICTS}
    md = reporting.render(TEMPLATES, "reproduce.md.j2", mode=mode, sections=sections, counts=counts,
                total=len(claims), decided=counts["agrees"] + counts["disagrees"],
                provs=[s["prov"] for s in sections if s["run_dir"]], notes=notes)
    return reporting.write_markdown_and_html(root, "report", md, "nslab reproduction")


@click.command("reproduce")
@click.option("--quick", "mode", flag_value="quick", default=True, help="A few minutes (default).")
@click.option("--default", "mode", flag_value="default", help="Each study's default preset.")
@click.option("--full", "mode", flag_value="full",
              help="The sources' own parameters where feasible (~40 min on 2 CPUs).")
@click.option("--only", default=None, help="Studies to run, comma-separated (default: all registered).")
@click.option("--resume", default=None, help="Continue an interrupted reproduction directory.")
@limit_option
@click.pass_context
def reproduce_cmd(ctx: click.Context, mode: str, only: Optional[str], resume: Optional[str]) -> None:
    """Reproduce every registered study and write one report (HTML + Markdown)."""
    studies = [s.strip() for s in only.split(",") if s.strip()] if only else None
    if resume:
        check_resumable(resume)  # before its mode is read
        mode = _saved_mode(resume) or mode
    if mode not in PRESETS:
        raise InputError(f"unknown mode {mode!r}")
    cliutil.setup_logging(ctx.obj, f"reproduce-{time.strftime('%Y%m%d-%H%M%S')}")
    cliutil.install_signals()
    try:
        path = reproduce(mode, ctx.obj.results, resume=resume, studies=studies,
                         echo=lambda m: echo(m, err=True))
    except KeyboardInterrupt:
        if resume or os.path.isdir(os.path.join(ctx.obj.results, "reproduce")):
            echo("nslab: interrupted; measured points are kept; continue with "
                 "`nslab reproduce --resume <dir>` (the newest results/reproduce/*)", err=True)
        raise
    path = os.path.abspath(path)
    echo(f"report: {path}")
    echo(f"        {path[:-5]}.md")
    echo(f"        file://{urllib.parse.quote(path)}")
