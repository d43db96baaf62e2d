"""``nslab grade FOLDER...``: a class's lab folders, stage by stage, into one
grade sheet (:mod:`nslab.run.grade`). See docs/check-a-lab.md."""
from __future__ import annotations

import os
import time
from typing import Optional, Sequence

import click
from pydantic import TypeAdapter, ValidationError

from ..errors import InputError
from ..model.checkfile import load as load_checks
from ..model.checks import FileName
from ..runtime.caps import require_root
from ..safeio import printable
from .cliutil import echo, limit_option


@click.command("grade")
@click.argument("folders", nargs=-1, required=True, metavar="FOLDER...")
@click.option("--checks", "checks_path", required=True, metavar="FILE",
              help="The teacher's checks file (stages of checks), naming the topology file "
                   "of each folder (topology: lab.yaml).")
@click.option("--topology", default=None, metavar="NAME",
              help="The topology file in each folder (default: the checks file's topology:, "
                   "else lab.yaml).")
@click.option("--out", default=None, metavar="DIR",
              help="Where the sheet goes (default: RESULTS/grades/<time>).")
@limit_option
@click.pass_context
def grade_cmd(ctx: click.Context, folders: Sequence[str], checks_path: str,
              topology: Optional[str], out: Optional[str]) -> None:
    """Grade a class: build each FOLDER's lab in turn, run every stage of
    the checks on it, tear it down; one sheet, student x stage x check
    (grades.csv, grades.html, grades.json).

    Each folder is untrusted: its topology file is read without following a
    link, as YAML (no code), and built with no grant to change this
    machine; a folder whose lab cannot be built gets an error per check.
    """
    from ..run.grade import grade
    suite = load_checks(checks_path)
    name = topology or suite.topology or "lab.yaml"
    try:
        TypeAdapter(FileName).validate_python(name)
    except ValidationError:
        raise InputError(f"--topology {printable(name)[:60]!r}: a YAML file name in each "
                         "folder (lab.yaml), no path") from None
    require_root("nslab grade")
    results = ctx.obj.results if ctx.obj is not None else "results"
    out = out or os.path.join(results, "grades", time.strftime("%Y%m%d-%H%M%S"))
    book = grade(list(folders), suite, name, out, say=lambda line: echo(line, err=True))
    for s in book.students:
        passed, total = s.score
        echo(f"{s.student}: {passed}/{total}" + (f" ({s.problem})" if s.problem else ""))
    echo(f"grade sheet: {os.path.join(out, 'grades.html')} (and grades.csv, grades.json)")
