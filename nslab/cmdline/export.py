"""``nslab export RUN``: a run's records and claims as tables other tools read
(CSV, JSON, Parquet). No root needed; the run directory is only read.

RUN is a run directory, a run id (found under ``results/<study>/`` and in
every reproduction, ``results/reproduce/<time>/<study>/``), or a
reproduction (its directory, or its ``<time>``): then each table holds every
study's rows, each naming its study. What the tables hold:
:mod:`nslab.cmdline.exporttables`; how they are written:
:mod:`nslab.cmdline.exportfiles`.

The run directory may come from anyone: it is copied first, without
following any link (:func:`nslab.safeio.copy_tree`), into a private
temporary directory, and everything (records, the report that gives the
claims) is read and drawn there; nothing is written into the run directory.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence

import click

from ..errors import InputError
from ..model.naming import RUN_RE
from ..run.study import results_dir_of
from ..safeio import copy_tree, make_fresh_dir
from ..store.results import PROVENANCE, RECORDS, REPORT_COPY_LIMIT, is_capture
from .cliutil import RESULTS_ENV, echo
from .exportfiles import FORMATS, encode, pyarrow_modules, write_tables
from .exporttables import (TABLE_NAME_RE, TABLES, Table, check_cells, claims_table,
                           parse_interval, points_table, record_tables, run_facts, unit_of)
from .runcli import study_of_run

log = logging.getLogger(__name__)

#: the files a run is read from: none may be a link or other than a regular file
KEY_FILES = (RECORDS, PROVENANCE, "study.yaml")


# -- reading a run ---------------------------------------------------------------------
#: A reproduction directory's name (``nslab reproduce``'s ``results/reproduce/<time>``).
STAMP_RE = re.compile(r"^[0-9]{8}-[0-9]{6}(?:-[0-9a-f]{4})?$")


@dataclass
class Found:
    """What RUN names: one run directory, or a reproduction's (``root``, with
    ``runs`` the run directory of each study in it, in the report's order)."""

    runs: List[str]
    root: Optional[str] = None

    @property
    def what(self) -> str:
        return f"reproduction {self.root}" if self.root else f"run {self.runs[0]}"


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def reproduction_runs(root: str) -> List[str]:
    """The run directory of each study in reproduction ``root``: the one its
    report reads (the newest with a provenance, :func:`~nslab.run.study.results_dir_of`),
    registered studies in the report's order first, then any other folder;
    no link followed."""
    from .reproduce import ordered_studies
    try:
        folders = sorted(f for f in os.listdir(root) if _real_dir(os.path.join(root, f)))
    except OSError:
        folders = []
    order = [s for s in ordered_studies() if s in folders]
    runs = []
    for study in order + [f for f in folders if f not in order]:
        run_dir = results_dir_of(root, study)
        if run_dir is not None and not os.path.islink(run_dir):
            runs.append(run_dir)
    return runs


def _reproduction(root: str) -> Found:
    runs = reproduction_runs(root)
    if not runs:
        raise InputError(f"{root}: a reproduction with no study's run in it yet")
    return Found(runs, root)


def find_runs(run: str, results_root: str) -> Found:
    """What RUN names: a run directory, a reproduction directory (``nslab
    reproduce``'s, with a ``mode`` file), a run id (``nl3f2a``) found as
    ``<results_root>/<study>/<id>`` or, in a reproduction, as
    ``<results_root>/reproduce/<time>/<study>/<id>``, or a reproduction's
    name (``20261128-094324``) found as ``<results_root>/reproduce/<name>``.
    No link is followed; one line when it names nothing, or several runs."""
    if os.path.lexists(run):
        if os.path.islink(run.rstrip("/") or "/"):
            raise InputError(f"{run}: a symbolic link; give the run directory itself")
        if not os.path.isdir(run):
            raise InputError(f"{run}: not a run directory")
        if os.path.exists(os.path.join(run, "mode")):
            return _reproduction(run)
        return Found([run])
    if STAMP_RE.fullmatch(run):
        root = os.path.join(results_root, "reproduce", run)
        if _real_dir(root) and _real_dir(os.path.dirname(root)):
            return _reproduction(root)
        raise InputError(f"{run}: no reproduction directory {root} (give its path, or "
                         "--results)")
    if not RUN_RE.fullmatch(run):
        raise InputError(f"{run}: no such run directory (give a run directory, a run id "
                         "such as nl3f2a, or a reproduction)")
    found = [p for p in _candidates(results_root, run) if _real_dir(p)]
    if not found:
        raise InputError(f"{run}: no run directory {os.path.join(results_root, '*', run)} or "
                         f"{os.path.join(results_root, 'reproduce', '*', '*', run)} (give the "
                         "run directory's path, or --results)")
    if len(found) > 1:
        raise InputError(f"{run}: several runs have this id ({', '.join(found)}); "
                         "give the directory")
    return Found(found)


def _candidates(results_root: str, run: str) -> Iterator[str]:
    """Where run ``run`` may be: ``<study>/<id>`` and, in every reproduction,
    ``reproduce/<time>/<study>/<id>``, through real directories only."""
    def folders(path: str) -> List[str]:
        try:
            return [os.path.join(path, f) for f in sorted(os.listdir(path))
                    if _real_dir(os.path.join(path, f))]
        except OSError:
            return []
    for study in folders(results_root):
        yield os.path.join(study, run)
        if os.path.basename(study) == "reproduce":
            for stamp in folders(study):
                for inner in folders(stamp):
                    yield os.path.join(inner, run)


@contextlib.contextmanager
def snapshot(run_dir: str) -> Iterator[str]:
    """A private copy of ``run_dir`` (regular files and directories only, no
    link followed, no packet capture: :func:`is_capture`) that is removed
    afterwards; an error about the copy names ``run_dir`` instead."""
    with tempfile.TemporaryDirectory(prefix="nslab-export-") as tmp:
        copy = make_fresh_dir(os.path.join(tmp, "run"), 0o700)
        skipped = copy_tree(run_dir, copy, limit=REPORT_COPY_LIMIT, leave=is_capture)
        bad = [f for f in skipped if f in KEY_FILES]
        if bad:
            raise InputError(f"{os.path.join(run_dir, bad[0])}: a link or not a regular file; "
                             "nslab reads a run's own files only")
        if skipped:
            log.info("%s: left out of the export's copy: %s", run_dir, ", ".join(skipped[:20]))
        try:
            yield copy
        except InputError as exc:
            raise InputError(str(exc).replace(copy, run_dir.rstrip("/") or "/")) from None


def export_run(run_dir: str, claims: bool = True) -> Dict[str, Table]:
    """The tables of ``run_dir`` (a run directory), read from a private copy
    of it: ``points``, ``claims`` (unless not ``claims``: the report is the
    slow part) and the tables of its records' lists (:func:`record_tables`)."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(run_dir)))
    with snapshot(run_dir) as copy:
        cls = study_of_run(copy, parent)
        facts = run_facts(copy)
        found = record_tables(cls, copy, facts)
        out = {"points": found.pop("points")}
        if claims:
            out["claims"] = claims_table(cls, copy, facts)
        out.update(found)
        return out


def merged(name: str, parts: Sequence[Table]) -> Table:
    """One table of the rows of ``parts`` (several studies' tables of one
    name): every column of each, in the order first seen; a row has None
    where its study has no such column."""
    columns: Dict[str, None] = {}
    for t in parts:
        columns.update(dict.fromkeys(t.columns))
    rows = [r for t in parts for r in t.rows]
    check_cells(name, len(rows), len(columns), f"the {name} tables")
    cols = list(columns)
    return Table(name, cols, [{c: r.get(c) for c in cols} for r in rows])


def export_runs(found: Found, tables: Optional[Sequence[str]] = None) -> Dict[str, Table]:
    """The tables of every run ``found`` names (``tables``, default all): a
    reproduction's studies' tables of one name are one table (their rows
    say their ``study``). A table asked for by name that none has is one
    line naming those there are."""
    parts: Dict[str, List[Table]] = {}
    for run_dir in found.runs:
        for name, table in export_run(run_dir, tables is None or "claims" in tables).items():
            parts.setdefault(name, []).append(table)
    missing = [t for t in (tables or ()) if t not in parts]
    if missing:
        have = list(parts) if "claims" in parts else ["points", "claims"] + list(parts)[1:]
        raise InputError(f"--table {missing[0]}: {found.what} has no such table (it has: "
                         f"{', '.join(have)})")
    return {name: ts[0] if len(ts) == 1 else merged(name, ts) for name, ts in parts.items()
            if tables is None or name in tables}


# -- the command -----------------------------------------------------------------------
def wanted_tables(text: str) -> Optional[List[str]]:
    """``--table``'s value: None for ``all``; ``both`` is points and claims;
    else names, comma-separated (one line for one that cannot be a table's)."""
    if text == "all":
        return None
    if text == "both":
        return list(TABLES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names or [text]:
        if not TABLE_NAME_RE.fullmatch(n):
            raise InputError(f"--table {text[:60]!r}: all, both, or table names (points, "
                             "claims, trials...), comma-separated")
    return list(dict.fromkeys(names))


@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", default="csv", show_default=True, metavar="csv|json|parquet",
              help="csv (one file per table), json (an object per table: columns, units, rows), "
                   "parquet (needs the nslab[parquet] extra).")
@click.option("-o", "--output", required=True, metavar="DIR|-",
              help="A directory for one file per table, <table>.<format> (made if missing; "
                   "earlier files of those names are replaced), or - for one table on stdout.")
@click.option("--table", default="all", show_default=True, metavar="all|both|NAME,...",
              help="Which tables: all (points, claims, and one per list of records the points "
                   "hold: trials, probes, streams...), both (points and claims), or names.")
@click.pass_context
def export_cmd(ctx: click.Context, run: str, fmt: str, output: str, table: str) -> None:
    """Export RUN's points, claims and per-item rows as tables (no root needed).

    \b
    RUN is a run directory, a run id (found as <results>/<study>/<id>, or in
    a reproduction as <results>/reproduce/<time>/<study>/<id>), or a
    reproduction (its directory, or its <time>): then each table holds every
    study's rows, each naming its study.

    \b
    points: one row per measured point: run_id, study, point_no, the
      provenance (kernel, version.<tool>, host_noise.*...), params.*,
      measurements.* (nested keys joined with '.'), host.* (interference
      over the point), raw.
    claims: one row per claim of the report (as `nslab report` computes it):
      verdict, interval_low/high/unit/level_pct/method (the interval the
      measured text shows, as the report rounds it), measured, why, source.
    trials, probes, streams, events...: a point's list of records, one row
      per item, with its point's run_id, study, point_no and params.*: RFC
      2544's trials (the loss test's: one row per offered load, the paper's
      Table 3), its throughput searches' probes, ECMP's streams.
    Units are in the names (_bps bit/s, _fps frames/s, _pct %, _s, _ms, _us);
    a name without one has none.

    \b
    In CSV, a text cell beginning with = + - @ gets a leading ' so that a
    spreadsheet does not run it as a formula. See docs/export.md.

    \b
      nslab export results/alias/nl3f2a -o out/
      nslab export nl3f2a --format parquet -o out/
      nslab export results/reproduce/20261128-094324 -o out/
      nslab export nl3f2a --table trials -o - | column -s, -t
    """
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not one of {', '.join(FORMATS)}")
    wanted = wanted_tables(table)
    if fmt == "parquet":
        pyarrow_modules()  # before any work
    if output == "-" and (wanted is None or len(wanted) != 1):
        raise InputError("-o - writes one table: add --table points, --table claims or "
                         "another table's name")
    if output == "-" and fmt == "parquet" and sys.stdout.isatty():
        raise InputError("--format parquet -o -: binary output; redirect it to a file or a pipe")
    results = ctx.obj.results if ctx.obj is not None else os.environ.get(RESULTS_ENV, "results")
    found = find_runs(run, results)
    tables = export_runs(found, wanted)
    source = found.root or found.runs[0]
    if output == "-":
        assert wanted is not None
        sys.stdout.flush()
        sys.stdout.buffer.write(encode(tables[wanted[0]], fmt, source))
        sys.stdout.buffer.flush()
        return
    for name, path in zip(tables, write_tables(tables, fmt, output, source)):
        echo(f"{path}: {len(tables[name].rows)} rows")


__all__ = ["FORMATS", "TABLES", "Found", "Table", "claims_table", "encode", "export_cmd",
           "export_run", "export_runs", "find_runs", "parse_interval", "points_table",
           "record_tables", "unit_of", "write_tables"]
