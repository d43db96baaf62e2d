"""``nslab export RUN``: a run's records and claims as tables other tools read
(CSV, JSON, Parquet). No root needed; the run directory is only read.

Two tables (see ``docs/export.md``):

* ``points``: one row per measured point (record), flattened: the run's
  provenance (``run_id``, ``study``, ``kernel``, ``version.<tool>``...), the
  record's envelope (``schema_version``, ``time_unix_s``), ``params.<key>``,
  ``measurements.<key>[.<key>...]`` and the host interference measured over
  the point (``host.worst_pct``, ``host.other_pct.<cpu>``...). Records are
  read through the study's typed, versioned model (:mod:`nslab.store.records`):
  upgraded from older schema versions, and a bad line is refused in one line
  naming the file and line, as for a report.
* ``claims``: one row per claim of the study's report, as
  :func:`nslab.run.study.report_of` computes it for ``nslab report`` (nothing is
  recomputed here): verdict, reason, the measured text, and the interval that
  text shows, split into columns.

The run directory may come from anyone: it is copied first, without
following any link (:func:`nslab.safeio.copy_tree`), into a private
temporary directory, and everything (records, the report that gives the
claims) is read and drawn there; nothing is written into the run directory.
Output files are written through :mod:`nslab.safeio` (no link anywhere in
the output path, the file itself included).
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import click
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InputError, LabError
from ..model.naming import RUN_RE
from ..store.results import PROVENANCE, RECORDS, REPORT_COPY_LIMIT, ResultStore, is_capture
from .runcli import study_of_run
from ..safeio import check_path, copy_tree, make_dirs, make_fresh_dir, write_atomic
from ..run.study import report_of
from ..model.topo import explain
from .cliutil import RESULTS_ENV, echo

log = logging.getLogger(__name__)

FORMATS = ("csv", "json", "parquet")
TABLES = ("points", "claims")
#: the files a run is read from: none may be a link or other than a regular file
KEY_FILES = (RECORDS, PROVENANCE, "study.yaml")

#: Units named by the last ``_word`` of a field name (``receiver_bps``,
#: ``gap_ms``); a trailing statistic (``link_mbps_avg``, ``burst_ms_mean``) is
#: looked through. Nothing else is guessed: a name without one has no unit.
UNITS = {"bps": "bit/s", "mbps": "Mbit/s", "fps": "frames/s", "pps": "packets/s",
         "pct": "%", "s": "s", "seconds": "s", "ms": "ms", "us": "us", "bytes": "bytes"}
STATISTICS = ("avg", "mean", "median", "min", "max", "stdev")
#: A cell of a CSV file that begins with one of these is read as a formula by
#: spreadsheets (OWASP "CSV injection"): a text cell that does gets a leading '.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

#: The most cells (rows x columns) a table may have. Every row has every
#: column, so records whose keys all differ make a table quadratic in its file
#: (400 records of 50 keys each, 750 kB, gave 20,000 columns and 8 million
#: cells, 240 MB): counted as the records are read, before any row is filled.
#: A run of nslab's has the same keys in every record: 10 million cells is
#: 50,000 trials of 200 columns.
MAX_CELLS = 10_000_000
#: Provenance mappings exported one column each (``versions``, ``host_noise``):
#: a run's provenance has about ten of each.
MAX_PROVENANCE_KEYS = 256

#: An interval as a report prints it (:meth:`nslab.store.stats.Interval.fmt`):
#: ``[low, high]<unit> (<level> % <method>)``.
_NUM = r"-?(?:\d+(?:\.\d+)?|inf|nan)"
INTERVAL_RE = re.compile(rf"\[(?P<low>{_NUM}), (?P<high>{_NUM})\](?P<unit>[^\[\]()]*?) "
                         r"\((?P<level>\d+(?:\.\d+)?) % (?P<method>[^()]*)\)")


@dataclass
class Table:
    """One exported table: its name, its columns in order, its rows (a value
    per column; None where a row has none; lists as lists)."""

    name: str
    columns: List[str]
    rows: List[Dict[str, Any]] = field(default_factory=list)

    def units(self) -> Dict[str, str]:
        """The unit of each column whose name gives one (:func:`unit_of`)."""
        found = {c: unit_of(c) for c in self.columns}
        return {c: u for c, u in found.items() if u}


def unit_of(column: str) -> Optional[str]:
    """The unit a column's name gives, or None. The name's parts (split at
    ``.``) are read from the last up: ``measurements.link_bytes.server2-eth0``
    is in bytes (a key under ``link_bytes``), ``host.other_pct.3`` in %."""
    for part in reversed(column.split(".")):
        words = part.split("_")
        while len(words) > 1 and words[-1] in STATISTICS:
            words.pop()
        if len(words) > 1 and words[-1] in UNITS:
            return UNITS[words[-1]]
        if len(words) == 1 and words[0] in ("pps", "fps", "bps"):  # a value named just so
            return UNITS[words[0]]
    return None


# -- reading a run ---------------------------------------------------------------------
def find_run(run: str, results_root: str) -> str:
    """The run directory ``run`` names: a path, or a run id (``nl3f2a``) found
    as ``<results_root>/<study>/<id>``."""
    if os.path.lexists(run):
        if os.path.islink(run.rstrip("/") or "/"):
            raise InputError(f"{run}: a symbolic link; give the run directory itself")
        if not os.path.isdir(run):
            raise InputError(f"{run}: not a run directory")
        if os.path.exists(os.path.join(run, "mode")):
            raise InputError(f"{run}: a reproduction of several studies; export one study's "
                             f"run, e.g. {os.path.join(run, '<study>', '<run-id>')}")
        return run
    if not RUN_RE.fullmatch(run):
        raise InputError(f"{run}: no such run directory (give a run directory or a run id "
                         "such as nl3f2a)")
    found: List[str] = []
    try:
        studies = sorted(os.listdir(results_root))
    except OSError:
        studies = []
    for study in studies:
        path = os.path.join(results_root, study, run)
        if os.path.isdir(path) and not os.path.islink(path) and \
                not os.path.islink(os.path.join(results_root, study)):
            found.append(path)
    if not found:
        raise InputError(f"{run}: no run directory {os.path.join(results_root, '*', run)} "
                         "(give the run directory's path, or --results)")
    if len(found) > 1:
        raise InputError(f"{run}: several runs have this id ({', '.join(found)}); "
                         "give the directory")
    return found[0]


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


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")
    rounds: Optional[int] = None
    rounds_run: Optional[int] = None


class RunFacts(BaseModel):
    """The provenance fields a table carries in every row (``provenance.json``
    is untrusted: each field is typed; others are not exported)."""

    model_config = ConfigDict(extra="ignore")
    run_id: Optional[str] = None
    kernel: Optional[str] = None
    machine: Optional[str] = None
    virtualization: Optional[str] = None
    cpus: Optional[int] = None
    cpu_model: Optional[str] = None
    host: Optional[str] = None
    python: Optional[str] = None
    git_commit: Optional[str] = None
    started: Optional[str] = None
    versions: Dict[str, Optional[str]] = Field(default_factory=dict,
                                               max_length=MAX_PROVENANCE_KEYS)
    #: how late a 1 ms sleep woke when the run started (:func:`nslab.traffic.noise.idle_jitter`)
    host_noise: Dict[str, Optional[float]] = Field(default_factory=dict,
                                                   max_length=MAX_PROVENANCE_KEYS)
    sampling: Optional[_Sampling] = None

    def columns(self) -> Dict[str, Any]:
        """``kernel``, ``version.<tool>``, ``host_noise.<figure>``..., in order."""
        out: Dict[str, Any] = {
            "kernel": self.kernel, "machine": self.machine, "virtualization": self.virtualization,
            "cpus": self.cpus, "cpu_model": self.cpu_model, "host_name": self.host,
            "python": self.python, "git_commit": self.git_commit, "started": self.started,
            "sampling.rounds": self.sampling.rounds if self.sampling else None,
            "sampling.rounds_run": self.sampling.rounds_run if self.sampling else None}
        out.update({f"version.{k}": v for k, v in sorted(self.versions.items())})
        out.update({f"host_noise.{k}": v for k, v in sorted(self.host_noise.items())})
        return out


def run_facts(run_dir: str) -> RunFacts:
    """The typed provenance of ``run_dir``; a field of the wrong type is one line."""
    prov = ResultStore.open(run_dir).provenance()
    try:
        return RunFacts.model_validate(prov)
    except ValidationError as exc:
        raise InputError(f"{os.path.join(run_dir, PROVENANCE)}: {explain(exc)}") from None


def _flatten(prefix: str, value: Any, out: Dict[str, Any], where: str) -> None:
    """Nested mappings become ``prefix.key...`` columns; lists stay one value."""
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out, where)
        return
    if prefix in out:
        raise InputError(f"{where}: two values for the column {prefix[:120]!r}")
    out[prefix] = value


def points_table(cls: Any, run_dir: str, facts: RunFacts) -> Table:
    """Every record of ``run_dir`` (read through ``cls.records``), one row each."""
    records = cls.records.load(run_dir)
    columns: Dict[str, None] = {"run_id": None, "study": None}
    columns.update(dict.fromkeys(facts.columns()))
    columns.update(dict.fromkeys(("schema_version", "kind", "time_unix_s")))
    rows = []
    for i, rec in enumerate(records, 1):
        d = rec.model_dump(mode="json")
        where = f"{os.path.join(run_dir, RECORDS)}: record {i}"
        row: Dict[str, Any] = {"run_id": d["run_id"], "study": d["experiment"], **facts.columns(),
                               "schema_version": d["schema_version"], "kind": d["kind"],
                               "time_unix_s": d["time"]}
        _flatten("params", d["params"], row, where)
        _flatten("measurements", d["measurements"], row, where)
        if d.get("host") is not None:
            _flatten("host", d["host"], row, where)
        columns.update(dict.fromkeys(row))
        if i * (len(columns) + 1) > MAX_CELLS:  # every row gets every column (+ raw)
            raise InputError(f"{where}: the points table would pass {MAX_CELLS:,} cells "
                             f"({i:,} rows x {len(columns) + 1:,} columns so far): the "
                             "records' keys differ too much to be one table")
        row["raw"] = d.get("raw", [])
        rows.append(row)
    names = list(columns) + ["raw"]
    return Table("points", names, [{c: r.get(c) for c in names} for r in rows])


def parse_interval(measured: str) -> Optional[Dict[str, Any]]:
    """The interval a claim's measured text shows (as
    :meth:`~nslab.store.stats.Interval.fmt` prints it): low, high, unit, level (%)
    and method; None when it shows none, or more than one."""
    found = INTERVAL_RE.findall(measured)
    if len(found) != 1:
        return None
    low, high, unit, level, method = found[0]
    return {"interval_low": float(low), "interval_high": float(high),
            "interval_unit": unit.strip() or None, "interval_level_pct": float(level),
            "interval_method": method.strip()}


CLAIM_COLUMNS = ("claim_no", "claim", "verdict", "interval_low", "interval_high",
                 "interval_unit", "interval_level_pct", "interval_method", "measured", "why",
                 "source", "published")


def claims_table(cls: Any, run_dir: str, facts: RunFacts) -> Table:
    """The claims of the study's report on ``run_dir`` (a scratch copy: the
    report writes its files there), one row each."""
    rep = report_of(cls(), run_dir)
    empty = dict.fromkeys(("interval_low", "interval_high", "interval_unit",
                           "interval_level_pct", "interval_method"))
    head = {"run_id": facts.run_id, "study": cls.name, **facts.columns()}
    rows = []
    for i, c in enumerate(rep.claims, 1):
        rows.append({**head, "claim_no": i, "claim": c.claim, "verdict": c.verdict,
                     **(parse_interval(c.measured) or empty), "measured": c.measured,
                     "why": c.why, "source": c.source or None, "published": c.published or None})
    return Table("claims", list(head) + list(CLAIM_COLUMNS), rows)


def export_run(run_dir: str, tables: Sequence[str] = TABLES) -> Dict[str, Table]:
    """The tables of ``run_dir`` (a run directory, as :func:`find_run` gives),
    read from a private copy of it."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(run_dir)))
    with snapshot(run_dir) as copy:
        cls = study_of_run(copy, parent)
        facts = run_facts(copy)
        out: Dict[str, Table] = {}
        if "points" in tables:
            out["points"] = points_table(cls, copy, facts)
        if "claims" in tables:
            out["claims"] = claims_table(cls, copy, facts)
        return out


# -- writing ---------------------------------------------------------------------------
def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN or infinity
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    return v


def _text(v: Any) -> str:
    return json.dumps(_json_value(v), sort_keys=True, ensure_ascii=False)


def csv_cell(v: Any) -> Any:
    """A value as a CSV cell: blank for None, ``true``/``false``, a list as
    its JSON text, a number as it is; text that a spreadsheet would read as a
    formula (:data:`FORMULA_START`) behind a ``'``."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        v = _text(v)
    if isinstance(v, str):
        return "'" + v if v.startswith(FORMULA_START) else v
    return v


def to_csv(table: Table) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([csv_cell(c) for c in table.columns])
    for row in table.rows:
        w.writerow([csv_cell(row[c]) for c in table.columns])
    return buf.getvalue().encode("utf-8")


def to_json(table: Table, run: str) -> bytes:
    doc = {"table": table.name, "run": run, "columns": table.columns, "units": table.units(),
           "rows": [{c: _json_value(r[c]) for c in table.columns} for r in table.rows]}
    return (json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def pyarrow_modules() -> Tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, or one line naming the extra."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise LabError("--format parquet needs pyarrow: pip install 'nslab[parquet]'") from None
    return pyarrow, pyarrow.parquet


def to_parquet(table: Table, run: str) -> bytes:
    """Columns typed by pyarrow; a list, or a column of mixed types, as JSON
    text; each column's unit (if its name gives one) in its field metadata."""
    pa, pq = pyarrow_modules()
    units = table.units()
    arrays, fields = [], []
    for c in table.columns:
        values = [r[c] for r in table.rows]
        if any(isinstance(v, (list, dict)) for v in values):
            values = [None if v is None else _text(v) for v in values]
        try:
            arr = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = pa.array([v if v is None or isinstance(v, str) else _text(v) for v in values],
                           type=pa.string())
        if pa.types.is_null(arr.type):
            arr = arr.cast(pa.string())  # a column blank in every row
        arrays.append(arr)
        fields.append(pa.field(c, arr.type, metadata={"unit": units[c]} if c in units else None))
    t = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata={"nslab.table": table.name,
                                                                         "nslab.run": run}))
    sink = io.BytesIO()
    pq.write_table(t, sink)
    return sink.getvalue()


def encode(table: Table, fmt: str, run: str) -> bytes:
    """``table`` in ``fmt`` (csv, json, parquet)."""
    if fmt == "csv":
        return to_csv(table)
    if fmt == "json":
        return to_json(table, run)
    if fmt == "parquet":
        return to_parquet(table, run)
    raise InputError(f"--format {fmt}: not one of {', '.join(FORMATS)}")


def write_tables(tables: Dict[str, Table], fmt: str, out: str, run: str) -> List[str]:
    """Write each table to ``out/<table>.<fmt>``, replacing an earlier export;
    every table is encoded and every path checked (no link anywhere in it,
    the file included) before anything is written. Returns the paths."""
    blobs = {name: encode(t, fmt, run) for name, t in tables.items()}
    try:
        check_path(out)
        if os.path.lexists(out) and not os.path.isdir(out):
            raise InputError(f"{out}: exists and is not a directory (-o takes a directory, or -)")
        paths = {name: os.path.join(out, f"{name}.{fmt}") for name in blobs}
        for path in paths.values():
            check_path(path)
            if os.path.isdir(path):
                raise InputError(f"{path}: a directory is in the way")
        make_dirs(out)
        return [write_atomic(paths[name], blob) for name, blob in blobs.items()]
    except OSError as exc:  # a file where a directory should be, a full disk...
        raise LabError(f"{exc.filename or out}: cannot write the export: {exc.strerror}") from None


# -- the command -----------------------------------------------------------------------
@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", default="csv", show_default=True, metavar="csv|json|parquet",
              help="csv (one file per table), json (an object per table: columns, units, rows), "
                   "parquet (needs the nslab[parquet] extra).")
@click.option("-o", "--output", required=True, metavar="DIR|-",
              help="A directory for points.<format> and claims.<format> (made if missing; "
                   "earlier files of those names are replaced), or - for one table on stdout.")
@click.option("--table", default="both", show_default=True, metavar="points|claims|both",
              help="Which tables: the measured points, the report's claims, or both.")
@click.pass_context
def export_cmd(ctx: click.Context, run: str, fmt: str, output: str, table: str) -> None:
    """Export RUN's points and claims as tables (no root needed).

    RUN is a run directory or a run id (found as <results>/<study>/<id>).

    \b
    points: one row per measured point: run_id, study, the provenance
      (kernel, version.<tool>, host_noise.*...), params.*, measurements.*
      (nested keys joined with '.'), host.* (interference over the point), raw.
      Units are in the names (_bps bit/s, _fps frames/s, _pct %, _s, _ms, _us);
      a name without one has none. Lists are JSON text (arrays in JSON).
    claims: one row per claim of the report (as `nslab report` computes it):
      verdict, interval_low/high/unit/level_pct/method (the interval the
      measured text shows, as the report rounds it), measured, why, source.

    \b
    In CSV, a text cell beginning with = + - @ gets a leading ' so that a
    spreadsheet does not run it as a formula. See docs/export.md.

    \b
      nslab export results/alias/nl3f2a -o out/
      nslab export nl3f2a --format parquet -o out/
      nslab export nl3f2a --table claims -o - | column -s, -t
    """
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not one of {', '.join(FORMATS)}")
    if table not in TABLES + ("both",):
        raise InputError(f"--table {table}: not one of points, claims, both")
    if fmt == "parquet":
        pyarrow_modules()  # before any work
    wanted = TABLES if table == "both" else (table,)
    if output == "-" and len(wanted) != 1:
        raise InputError("-o - writes one table: add --table points or --table claims")
    if output == "-" and fmt == "parquet" and sys.stdout.isatty():
        raise InputError("--format parquet -o -: binary output; redirect it to a file or a pipe")
    results = ctx.obj.results if ctx.obj is not None else os.environ.get(RESULTS_ENV, "results")
    run_dir = find_run(run, results)
    tables = export_run(run_dir, wanted)
    if output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(encode(tables[wanted[0]], fmt, run_dir))
        sys.stdout.buffer.flush()
        return
    for path in write_tables(tables, fmt, output, run_dir):
        n = len(tables[os.path.basename(path).split(".")[0]].rows)
        echo(f"{path}: {n} rows")


__all__ = ["FORMATS", "TABLES", "Table", "claims_table", "encode", "export_cmd", "export_run",
           "find_run", "parse_interval", "points_table", "unit_of", "write_tables"]
