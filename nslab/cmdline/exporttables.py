"""A stored run as tables: what ``nslab export`` writes (see ``docs/export.md``).

* ``points``: one row per measured point (record), flattened: the run's
  provenance (``run_id``, ``study``, ``kernel``, ``version.<tool>``...), the
  record's envelope (``schema_version``, ``time_unix_s``), ``params.<key>``,
  ``measurements.<key>[.<key>...]`` and the host interference measured over
  the point (``host.worst_pct``, ``host.other_pct.<cpu>``...). Records are
  read through the study's typed, versioned model (:mod:`nslab.store.records`):
  upgraded from older schema versions, and a bad line is refused in one line
  naming the file and line, as for a report.
* one table per list of records a point's measurements hold (RFC 2544's
  ``trials`` and ``probes``, ECMP's ``streams``, a file study's ``events``):
  one row per item, with its point's ``run_id``, ``study``, ``point_no`` and
  ``params.*``, so that RFC 2544's loss test is the paper's Table 3, a row
  per offered load, not a JSON cell.
* ``claims``: one row per claim of the study's report, as
  :func:`nslab.run.study.report_of` computes it for ``nslab report`` (nothing is
  recomputed here): verdict, reason, the measured text, and the interval that
  text shows, split into columns.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InputError
from ..model.topo import explain
from ..run.study import report_of
from ..store.results import PROVENANCE, RECORDS, ResultStore

#: The tables every run has.
TABLES = ("points", "claims")

#: Units named by the last ``_word`` of a field name (``receiver_bps``,
#: ``gap_ms``); a trailing statistic (``link_mbps_avg``, ``burst_ms_mean``) is
#: looked through. Nothing else is guessed: a name without one has no unit.
UNITS = {"bps": "bit/s", "mbps": "Mbit/s", "fps": "frames/s", "pps": "packets/s",
         "pct": "%", "s": "s", "seconds": "s", "ms": "ms", "us": "us", "bytes": "bytes"}
STATISTICS = ("avg", "mean", "median", "min", "max", "stdev")
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


#: A list of records in a record's measurements that becomes a table of its
#: own is named by its key, which names a file too: a word, not one of
#: :data:`TABLES`.
TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def list_tables(dumps: Sequence[Dict[str, Any]]) -> List[str]:
    """The keys of ``measurements`` that hold a list of records (mappings)
    in some record, and nothing but such lists (or nothing) in every record:
    RFC 2544's ``trials`` and ``probes``, ECMP's ``streams``, a file study's
    ``events``. Each becomes a table of its own, one row per item."""
    ok: Dict[str, bool] = {}
    seen: Set[str] = set()
    for d in dumps:
        for key, value in (d.get("measurements") or {}).items():
            if isinstance(value, list) and all(isinstance(x, dict) for x in value):
                ok.setdefault(key, True)
                if value:
                    seen.add(key)
            elif value is not None:
                ok[key] = False
    return [k for k, good in ok.items()
            if good and k in seen and TABLE_NAME_RE.fullmatch(k) and k not in TABLES]


def singular(name: str) -> str:
    """``trials`` -> ``trial``, ``searches`` -> ``search``: the name of one item."""
    if name.endswith(("ches", "shes", "sses", "xes")):
        return name[:-2]
    return name[:-1] if name.endswith("s") and len(name) > 1 else name


def check_cells(table: str, rows: int, columns: int, where: str) -> None:
    """Refuse a table past :data:`MAX_CELLS` (every row gets every column)."""
    if rows * columns > MAX_CELLS:
        raise InputError(f"{where}: the {table} table would pass {MAX_CELLS:,} cells "
                         f"({rows:,} rows x {columns:,} columns so far): the records' keys "
                         "differ too much to be one table")


def record_tables(cls: Any, run_dir: str, facts: RunFacts) -> Dict[str, Table]:
    """Every record of ``run_dir`` (read through ``cls.records``): the
    ``points`` table, one row each (``point_no`` counts them), and a table
    per list of records its measurements hold (:func:`list_tables`), one row
    per item, with the point's ``run_id``, ``study``, ``point_no``, ``kind``
    and ``params.*`` (``trials``: RFC 2544's trials, one per offered load)."""
    dumps = [rec.model_dump(mode="json") for rec in cls.records.load(run_dir)]
    lists = list_tables(dumps)
    columns: Dict[str, None] = {"run_id": None, "study": None, "point_no": None}
    columns.update(dict.fromkeys(facts.columns()))
    columns.update(dict.fromkeys(("schema_version", "kind", "time_unix_s")))
    item_cols: Dict[str, Dict[str, None]] = {}
    item_rows: Dict[str, List[Dict[str, Any]]] = {name: [] for name in lists}
    rows = []
    for i, d in enumerate(dumps, 1):
        where = f"{os.path.join(run_dir, RECORDS)}: record {i}"
        row: Dict[str, Any] = {"run_id": d["run_id"], "study": d["experiment"], "point_no": i,
                               **facts.columns(), "schema_version": d["schema_version"],
                               "kind": d["kind"], "time_unix_s": d["time"]}
        head: Dict[str, Any] = {"run_id": d["run_id"], "study": d["experiment"], "point_no": i,
                                "kind": d["kind"]}
        _flatten("params", d["params"], head, where)
        row.update({k: v for k, v in head.items() if k.startswith("params.")})
        measured = dict(d["measurements"])
        for name in lists:
            no = f"{singular(name)}_no"
            cols = item_cols.setdefault(name, dict.fromkeys(list(head) + [no]))
            for j, item in enumerate(measured.pop(name, None) or [], 1):
                out = {**head, no: j}
                for key, value in item.items():
                    _flatten(key, value, out, f"{where}: {name}.{j}")
                cols.update(dict.fromkeys(out))
                item_rows[name].append(out)
            check_cells(name, len(item_rows[name]), len(cols), where)
        _flatten("measurements", measured, row, where)
        if d.get("host") is not None:
            _flatten("host", d["host"], row, where)
        columns.update(dict.fromkeys(row))
        check_cells("points", i, len(columns) + 1, where)  # + raw
        row["raw"] = d.get("raw", [])
        rows.append(row)
    names = list(columns) + ["raw"]
    out = {"points": Table("points", names, [{c: r.get(c) for c in names} for r in rows])}
    for name in lists:
        order = list(item_cols.get(name, {}))
        out[name] = Table(name, order, [{c: r.get(c) for c in order} for r in item_rows[name]])
    return out


def points_table(cls: Any, run_dir: str, facts: RunFacts) -> Table:
    """The ``points`` table of :func:`record_tables`."""
    return record_tables(cls, run_dir, facts)["points"]


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
