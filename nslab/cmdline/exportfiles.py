"""Writing exported tables (:mod:`nslab.cmdline.exporttables`): CSV (a cell
a spreadsheet would run as a formula neutralised), JSON, Parquet; every path
checked and written through :mod:`nslab.safeio` (no link anywhere in it, the
file itself included), every table encoded before any file is written."""
from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Dict, List, Tuple

from ..errors import InputError, LabError
from ..safeio import check_path, make_dirs, write_atomic
from .exporttables import Table

FORMATS = ("csv", "json", "parquet")
#: A cell of a CSV file that begins with one of these is read as a formula by
#: spreadsheets (OWASP "CSV injection"): a text cell that does gets a leading '.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

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
