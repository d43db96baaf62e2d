"""The grade sheet of ``nslab grade``: student x stage x check, stored as
JSON (``grades.json``) and drawn from it as CSV (one row per student, stage
and check) and as an HTML report card (a row per student, a column per
check, grouped by stage; what each failed check saw below).

Everything a student's lab said (names, values, differences) is text:
escaped in HTML (jinja2's autoescape, a page that runs no script), kept from
reading as a formula in a spreadsheet (:func:`~nslab.store.checkreport.csv_cell`).
The sheet is drawn from the stored file only, so it can be drawn again
without root or a lab; a stored file is read with bounds and typed.
"""
from __future__ import annotations

import csv
import io
import os
from typing import Any, Dict, List, Optional, Tuple

import jinja2
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import Annotated

from ..errors import InputError
from ..model import bounded
from .checkreport import ERROR, FAIL, PASS, CheckResult, counts, csv_cell, cut

__all__ = ["StudentGrade", "GradeBook", "StageOutline", "to_csv", "to_html", "load", "dumps",
           "CSV_COLUMNS"]

#: The largest stored grade book read (a class of 200, 10 stages of 50 checks: ~40 MiB).
MAX_BYTES = 64 * 1024 * 1024
_TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "templates")

Name = Annotated[str, Field(max_length=200)]


class StageOutline(BaseModel):
    """A stage as the sheet's columns show it: its number, title and checks."""

    model_config = ConfigDict(extra="forbid")

    number: Annotated[int, Field(ge=1, le=1000)]
    title: Annotated[str, Field(max_length=2000)]
    checks: Annotated[List[Annotated[str, Field(max_length=2000)]], Field(max_length=100_000)]


class StudentGrade(BaseModel):
    """One student's folder: how each check of each stage went, or the
    ``problem`` that kept its lab from being built (then every check is an
    error)."""

    model_config = ConfigDict(extra="forbid")

    student: Name
    folder: Annotated[str, Field(max_length=4096)] = ""
    problem: Optional[Annotated[str, Field(max_length=4000)]] = None
    results: Annotated[List[CheckResult], Field(max_length=1_000_000)] = Field(
        default_factory=list)

    def result(self, stage: int, number: int) -> Optional[CheckResult]:
        for r in self.results:
            if r.stage == stage and r.number == number:
                return r
        return None

    @property
    def score(self) -> Tuple[int, int]:
        """(checks passed, checks)."""
        c = counts(self.results)
        return c[PASS], len(self.results)


class GradeBook(BaseModel):
    """Every student graded against one checks file."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, Field(max_length=2000)] = ""
    checks: Annotated[str, Field(max_length=4096)] = ""
    made: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    stages: Annotated[List[StageOutline], Field(max_length=1000)] = Field(default_factory=list)
    students: Annotated[List[StudentGrade], Field(max_length=10_000)] = Field(
        default_factory=list)


def dumps(book: GradeBook) -> str:
    return book.model_dump_json(indent=1) + "\n"


def load(path: str) -> GradeBook:
    """A stored grade book (bounded, typed); one line naming the file if it is not one."""
    try:
        data = bounded.load(path, MAX_BYTES)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a grade book: {exc}") from None
    try:
        return GradeBook.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        raise InputError(f"{path}: not a grade book: {where}: {err.get('msg')}") from None


CSV_COLUMNS = ("student", "stage", "stage_title", "number", "check", "node", "status",
               "expected", "seen", "diff", "seconds")


def to_csv(book: GradeBook) -> str:
    """One row per student, stage and check (:data:`CSV_COLUMNS`); a student
    whose lab was not built has a row per check, each an error naming why."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for s in book.students:
        for r in s.results:
            w.writerow([csv_cell(v) for v in (
                s.student, r.stage, r.stage_title, r.number, r.label, r.node, r.status,
                r.expected, r.seen, " | ".join(r.diff), round(r.seconds, 3))])
    return buf.getvalue()


#: How a cell shows a status (a mark, and the class that colours it).
MARKS = {PASS: ("pass", "ok"), FAIL: ("FAIL", "bad"), ERROR: ("error", "err")}


def _cells(book: GradeBook, s: StudentGrade) -> List[Dict[str, Any]]:
    out = []
    for st in book.stages:
        for n, label in enumerate(st.checks, 1):
            r = s.result(st.number, n)
            if r is None:
                out.append({"mark": "-", "cls": "none", "title": "not run"})
                continue
            mark, cls = MARKS[r.status]
            tip = r.seen if r.status == PASS else "; ".join(r.diff[:3]) or r.seen
            out.append({"mark": mark, "cls": cls, "title": cut(f"{label}: {tip}", 400)})
    return out


def to_html(book: GradeBook) -> str:
    """The report card: a page that runs no script; every text escaped."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True)
    rows = []
    for s in book.students:
        passed, total = s.score
        c = counts(s.results)
        problems = [(f"{r.stage}.{r.number} {r.label}" + (f" ({r.node})" if r.node else ""),
                     r.status, r.diff or [r.seen])
                    for r in s.results if r.status != PASS]
        rows.append({"student": s.student, "cells": _cells(book, s), "passed": passed,
                     "total": total, "fail": c[FAIL], "error": c[ERROR], "problem": s.problem,
                     "problems": problems})
    return env.get_template("gradesheet.html.j2").render(book=book, rows=rows)
