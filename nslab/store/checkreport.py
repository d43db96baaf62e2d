"""The results of ``nslab check``: one typed record per check, the exit code
they give, and the forms they are written in (a table's rows, JSON, JUnit
XML for CI, CSV for graders). Pure: built from results, stored or fresh.

Exit codes, as netlab's ``validate``: 0 every check held, 1 a check failed,
2 a check could not run (an error wins over a failure: the answer is not
known).
"""
from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Annotated, Literal

__all__ = ["CheckResult", "PASS", "FAIL", "ERROR", "exit_code", "counts", "table_rows",
           "to_json", "to_junit", "to_csv", "csv_cell", "FORMATS"]

PASS, FAIL, ERROR = "pass", "fail", "error"
FORMATS = ("table", "json", "junit", "csv")
#: Text a result keeps of what it expected, saw, or of one difference.
MAX_TEXT = 2000
#: Differences a result keeps.
MAX_DIFF = 50
#: A cell of a CSV file that begins with one of these is read as a formula by
#: spreadsheets (OWASP "CSV injection"): text that does gets a leading '
#: (as ``nslab export`` writes its cells).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: Characters XML 1.0 cannot hold at all (not even escaped).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

Text = Annotated[str, Field(max_length=MAX_TEXT)]


class CheckResult(BaseModel):
    """How one check went.

    Attributes:
        stage: the stage it ran in (1 for a file without stages).
        stage_title: that stage's title.
        number: its place in the stage's checks (1-based).
        origin: the stage that wrote it (an earlier one when included).
        label: what the table calls it (``ping server1 -> server2``).
        kind: ``ping``, ``route``, ...
        node: the node it ran on.
        expected: what it expected, in a few words.
        seen: what it saw last.
        status: ``pass``, ``fail`` or ``error`` (could not run).
        seconds: from the first try until it held or gave up.
        tries: how many times it looked.
        diff: the last differences, one per line.
    """

    model_config = ConfigDict(extra="forbid")

    stage: Annotated[int, Field(ge=1, le=1000)] = 1
    stage_title: Text = ""
    number: Annotated[int, Field(ge=1, le=100_000)] = 1
    origin: Annotated[int, Field(ge=1, le=1000)] = 1
    label: Text
    kind: Annotated[str, Field(max_length=32)]
    node: Annotated[str, Field(max_length=64)] = ""
    expected: Text = ""
    seen: Text = ""
    status: Literal["pass", "fail", "error"]
    seconds: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    tries: Annotated[int, Field(ge=0, le=10**7)] = 0
    diff: Annotated[List[Text], Field(max_length=MAX_DIFF)] = Field(default_factory=list)

    @classmethod
    def made(cls, **values: Any) -> "CheckResult":
        """A result whose texts are cut to the bounds (texts from a lab may be long)."""
        for key in ("stage_title", "label", "expected", "seen"):
            if isinstance(values.get(key), str):
                values[key] = cut(values[key])
        if "diff" in values:
            values["diff"] = [cut(str(d)) for d in list(values["diff"])[:MAX_DIFF]]
        return cls(**values)


def cut(text: str, most: int = MAX_TEXT) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def counts(results: Iterable[CheckResult]) -> Dict[str, int]:
    """``{pass: N, fail: N, error: N}``."""
    out = {PASS: 0, FAIL: 0, ERROR: 0}
    for r in results:
        out[r.status] += 1
    return out


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 every check held, 1 one failed, 2 one could not run."""
    c = counts(results)
    return 2 if c[ERROR] else 1 if c[FAIL] else 0


def seconds_text(s: float) -> str:
    return f"{s:.1f} s" if s < 100 else f"{s:.0f} s"


def table_rows(results: Sequence[CheckResult]) -> List[Tuple[str, ...]]:
    """``(stage, check, node, expected, seen, result, time)`` per result; the
    stage column is empty when every result is of one stage."""
    staged = len({r.stage for r in results}) > 1
    return [(str(r.stage) if staged else "", r.label, r.node, r.expected, r.seen, r.status,
             seconds_text(r.seconds)) for r in results]


def failures(results: Sequence[CheckResult]) -> List[str]:
    """What went wrong, for the lines under a table: ``label (node): difference``."""
    out = []
    for r in results:
        if r.status == PASS:
            continue
        where = f"{r.label} ({r.node})" if r.node else r.label
        lines = r.diff or [r.seen]
        out += [f"{where}: {d}" for d in lines]
    return out


def to_json(results: Sequence[CheckResult], meta: Optional[Dict[str, Any]] = None) -> str:
    """The results and their summary as one JSON document."""
    doc = dict(meta or {})
    doc["summary"] = counts(results)
    doc["exit"] = exit_code(results)
    doc["results"] = [r.model_dump() for r in results]
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def xml_text(text: str) -> str:
    """``text`` as XML 1.0 can hold it: characters it cannot are written as
    their escapes (``\\x1b``)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def to_junit(results: Sequence[CheckResult], name: str = "nslab check") -> str:
    """JUnit XML (the form CI systems read): a test suite per stage, a test
    case per check; a failure or an error with the differences."""
    top = ET.Element("testsuites", name=xml_text(name))
    stages: Dict[int, List[CheckResult]] = {}
    for r in results:
        stages.setdefault(r.stage, []).append(r)
    for stage, rs in stages.items():
        c = counts(rs)
        suite = ET.SubElement(top, "testsuite", name=xml_text(f"stage {stage}: {rs[0].stage_title}"),
                              tests=str(len(rs)), failures=str(c[FAIL]), errors=str(c[ERROR]),
                              time=f"{sum(r.seconds for r in rs):.3f}")
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=f"stage{stage}",
                                 name=xml_text(f"{r.number}. {r.label}" + (f" ({r.node})"
                                                                           if r.node else "")),
                                 time=f"{r.seconds:.3f}")
            if r.status != PASS:
                tag = "failure" if r.status == FAIL else "error"
                first = r.diff[0] if r.diff else r.seen
                el = ET.SubElement(case, tag, message=xml_text(first), type=r.kind)
                el.text = xml_text("\n".join([f"expected: {r.expected}", f"seen: {r.seen}"]
                                             + r.diff))
    c = counts(results)
    top.set("tests", str(len(results)))
    top.set("failures", str(c[FAIL]))
    top.set("errors", str(c[ERROR]))
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(top, encoding="unicode") \
        + "\n"


def csv_cell(v: Any) -> Any:
    """A value as a CSV cell: text a spreadsheet would read as a formula
    (:data:`FORMULA_START`) behind a ``'``."""
    if isinstance(v, str) and v.startswith(FORMULA_START):
        return "'" + v
    return v


CSV_COLUMNS = ("stage", "stage_title", "number", "check", "kind", "node", "expected", "seen",
               "status", "seconds", "tries", "diff")


def csv_row(r: CheckResult) -> List[Any]:
    return [r.stage, r.stage_title, r.number, r.label, r.kind, r.node, r.expected, r.seen,
            r.status, round(r.seconds, 3), r.tries, " | ".join(r.diff)]


def to_csv(results: Sequence[CheckResult]) -> str:
    """One row per check (:data:`CSV_COLUMNS`)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for r in results:
        w.writerow([csv_cell(v) for v in csv_row(r)])
    return buf.getvalue()
