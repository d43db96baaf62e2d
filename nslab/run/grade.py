"""``nslab grade FOLDER...``: a class's lab folders checked stage by stage
against one checks file, into one grade sheet.

For each student folder in turn: its topology file (the checks file's
``topology:``, e.g. ``lab.yaml``) is read as every file from a folder is (no
link followed, no FIFO or device opened, bounded: :mod:`nslab.safeio`), as
YAML only (a folder runs no code), then built as a lab with no grant to
change this machine (no uplink, ``force`` or controller off the loopback:
:mod:`nslab.runtime.grants`), under the sysctl allow-list and the size
limits; every stage of the teacher's checks file runs on it in order (its
link changes, then its checks), and the lab is torn down, however that
ends. A ``checks:`` section in the student's own file is not used: the
teacher's checks grade. A folder whose lab cannot be built gets an error
for every check, naming why, and the next folder is graded.

The results are stored (``grades.json``), then the sheet is drawn from the
stored file (:mod:`nslab.store.gradesheet`).
"""
from __future__ import annotations

import logging
import os
import stat
import time
from typing import Callable, List, Optional

from ..errors import LabError
from ..model.checkfile import topology_file
from ..model.checks import StagePlan, Suite
from ..runtime.grants import HostGrants
from ..runtime.lab import Lab
from ..safeio import make_dirs, printable, write_atomic
from ..store import gradesheet
from ..store.checkreport import ERROR, CheckResult
from ..store.gradesheet import GradeBook, StageOutline, StudentGrade
from ..traffic.checkrun import LabView, run_stage
from ..traffic.linkset import LiveLab, apply_changes

log = logging.getLogger(__name__)

#: The longest student name shown (a folder's name, escaped).
MAX_NAME = 64


def student_name(folder: str) -> str:
    """A folder's name as the sheet shows it: its control characters
    escaped (:func:`nslab.safeio.printable`), at most :data:`MAX_NAME` characters."""
    name = printable(os.path.basename(os.path.normpath(folder)) or folder)
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 3] + "..."


def folder_problem(folder: str) -> Optional[str]:
    """Why ``folder`` is not a folder nslab grades (a link, not a directory), or None."""
    try:
        st = os.lstat(folder)
    except OSError as exc:
        return f"{exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link, not a folder (nslab follows no link of a folder)"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    return None


def errors_for(suite: Suite, why: str) -> List[CheckResult]:
    """An error for every check of every stage, saying ``why``."""
    out = []
    for plan in suite.stages:
        out += _stage_errors(plan, why)
    return out


def _stage_errors(plan: StagePlan, why: str) -> List[CheckResult]:
    return [CheckResult.made(stage=plan.number, stage_title=plan.title, number=n, origin=origin,
                             label=c.label(), kind=c.check, node=c.node, status=ERROR,
                             seen=f"could not run: {why}")
            for n, (origin, c) in enumerate(plan.checks, 1)]


def grade_folder(folder: str, suite: Suite, topology: str,
                 say: Callable[[str], None] = lambda _: None) -> StudentGrade:
    """Build ``folder``'s lab from its file ``topology``, run every stage of
    ``suite`` on it, tear it down; how each check went."""
    student = student_name(folder)
    why = folder_problem(folder)
    if why is not None:
        return StudentGrade(student=student, folder=printable(folder)[:4096], problem=why,
                            results=errors_for(suite, why))
    path = os.path.join(folder, topology)
    try:
        topo = topology_file(path)
    except LabError as exc:
        why = printable(str(exc))[:3000]
        return StudentGrade(student=student, folder=printable(folder)[:4096], problem=why,
                            results=errors_for(suite, why))
    results: List[CheckResult] = []
    problem: Optional[str] = None
    done = 0
    try:
        with Lab(topo, host_grants=HostGrants.of()) as lab:
            view, live = LabView.of(lab.run_id), LiveLab.of(lab.run_id)
            for plan in suite.stages:
                for line in apply_changes(live, plan.links):
                    say(f"  stage {plan.number}: link {line}")
                results += run_stage(view, plan)
                done += 1
    except LabError as exc:
        problem = printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:3000]
        log.info("grading %s: %s", folder, problem, exc_info=True)
        for plan in suite.stages[done:]:
            results += _stage_errors(plan, problem)
    return StudentGrade(student=student, folder=printable(folder)[:4096], problem=problem,
                        results=results)


def outline(suite: Suite) -> List[StageOutline]:
    return [StageOutline(number=p.number, title=p.title, checks=[c.label() for _, c in p.checks])
            for p in suite.stages]


def grade(folders: List[str], suite: Suite, topology: str, out: str,
          say: Callable[[str], None] = lambda _: None) -> GradeBook:
    """Grade every folder (one lab at a time), store the grade book in
    ``out`` and draw the sheet from it (``grades.json``, ``grades.csv``,
    ``grades.html``)."""
    book = GradeBook(title=suite.title, checks=printable(suite.path)[:4096], made=time.time(),
                     stages=outline(suite))
    make_dirs(out)
    for i, folder in enumerate(folders, 1):
        say(f"grading {student_name(folder)} ({i}/{len(folders)})")
        g = grade_folder(folder, suite, topology, say)
        book.students.append(g)
        passed, total = g.score
        say(f"  {passed}/{total} checks passed" + (f"; {g.problem}" if g.problem else ""))
        write_atomic(os.path.join(out, "grades.json"), gradesheet.dumps(book))  # kept as it goes
    stored = gradesheet.load(os.path.join(out, "grades.json"))
    write_atomic(os.path.join(out, "grades.csv"), gradesheet.to_csv(stored))
    write_atomic(os.path.join(out, "grades.html"), gradesheet.to_html(stored))
    return stored
