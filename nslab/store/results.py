"""Results: ``results/<experiment>/<run-id>/`` with JSON Lines records.

Each record carries ``schema_version``, the point's parameters, its
measurements, paths of raw outputs (relative to the run directory) and a
reference to the run's provenance (``provenance.json``: kernel, tool versions,
sysctls, offloads, qdisc stats, git commit, timestamps). Records are appended
and flushed one by one, so a sweep that stops keeps what it measured, and a
resumed sweep skips points already present.

nslab runs as root in folders that may come from anyone, so every file here
is written through :mod:`nslab.safeio`: a new run directory is made with an
exclusive ``mkdir`` under an id no other run directory has
(:meth:`ResultStore.create`), records are appended to a regular file of the
run's own, the provenance is replaced by rename.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ..model import bounded
from ..errors import InputError
from ..model.naming import new_run_id
from ..safeio import copy_tree, make_dirs, make_fresh_dir, open_append, write_atomic
from .records import json_lines

SCHEMA_VERSION = 1
RECORDS = "records.jsonl"
PROVENANCE = "provenance.json"
#: run ids tried for a new run directory before giving up (each is free of
#: namespaces and journals; a folder would have to hold most of the 65,536
#: ``results/<study>/nlXXXX`` names for a few tries to fail)
RUN_ID_TRIES = 64
#: the most a report copies out of a run directory that is not nslab's own
REPORT_COPY_LIMIT = 1 << 30


def point_key(params: Dict[str, Any]) -> str:
    """A stable key for a parameter point (used to skip points on resume)."""
    return json.dumps(params, sort_keys=True, default=str)


class ResultStore:
    """One experiment run's directory.

    Args:
        root: the results root (``results``).
        experiment: experiment name (``alias``, ``ecmp``, ``rfc2544``, ``demo``).
        run_id: the lab run id; reused on resume.
        path: an existing run directory (overrides root/experiment/run_id):
            nothing is created in it until something is written.

    Without ``path``, ``<root>/<experiment>/<run_id>`` is created here with an
    exclusive ``mkdir`` (:func:`~nslab.safeio.make_fresh_dir`): an existing
    directory or link of that name raises :class:`FileExistsError`, so a
    new run never writes into an older one (:meth:`create` picks a free id).
    """

    def __init__(self, root: str = "results", experiment: str = "demo", run_id: str = "",
                 path: Optional[str] = None) -> None:
        self.path = path or os.path.join(root, experiment, run_id)
        self.experiment = experiment
        self.run_id = run_id
        #: the schema version new records are written with (the study's)
        self.schema_version = SCHEMA_VERSION
        if path is None:
            make_fresh_dir(self.path)
            os.mkdir(self.raw_dir, 0o755)  # a real directory inside the fresh one

    @classmethod
    def create(cls, root: str, experiment: str, run_id: Optional[str] = None,
               tries: int = RUN_ID_TRIES) -> "ResultStore":
        """A new run directory ``<root>/<experiment>/<id>``, made fresh.

        Without ``run_id``, ids come from :func:`~nslab.model.naming.new_run_id`
        (free of namespaces and journals on this machine); one whose run
        directory exists already (an earlier run, or a name a folder placed
        there) is skipped, and the next is tried, ``tries`` times in all.
        A given ``run_id`` whose directory exists is an error: only
        ``--resume DIR`` adds to an existing run.

        The id keeps the lab's format, ``nl`` + 4 hex digits: it also names
        the run's interfaces (``<run>-p<N>``, at most 15 characters), and
        freshness comes from the exclusive ``mkdir``, not from the size of
        the id space.
        """
        where = os.path.join(root, experiment)
        for _ in range(1 if run_id else tries):
            rid = run_id or new_run_id()
            try:
                return cls(root, experiment, rid)
            except FileExistsError:
                if run_id:
                    raise InputError(f"{os.path.join(where, rid)} exists already: a new run never "
                                     "writes into an earlier one (continue it with --resume)"
                                     ) from None
        raise InputError(f"{where}: no free run id after {tries} tries (each run directory "
                         f"nlXXXX was taken); move earlier runs away")

    @classmethod
    def open(cls, path: str) -> "ResultStore":
        """Open an existing run directory (for resume or reports)."""
        if not os.path.isfile(os.path.join(path, RECORDS)) and \
                not os.path.isfile(os.path.join(path, PROVENANCE)):
            raise InputError(f"{path}: not a results directory (no {RECORDS})")
        prov: Any = {}
        try:  # a folder's file: bounded size and depth, a mapping or nothing
            prov = bounded.load(os.path.join(path, PROVENANCE))
        except (OSError, ValueError):
            pass
        prov = prov if isinstance(prov, dict) else {}
        return cls(path=path, experiment=prov.get("experiment", ""), run_id=prov.get("run_id", ""))

    @property
    def raw_dir(self) -> str:
        return os.path.join(self.path, "raw")

    def raw_path(self, name: str) -> str:
        """Absolute path for a raw output file; record it relative with :meth:`rel`.

        The raw directory exists (a real one: a link is refused); write the file
        through :mod:`nslab.safeio` (``write_atomic``, or ``open_new`` for a
        process's output)."""
        make_dirs(self.raw_dir)
        return os.path.join(self.raw_dir, name)

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.path)

    def write_provenance(self, prov: Dict[str, Any]) -> None:
        """Write ``provenance.json``; a resumed run keeps the start times of its
        earlier sessions in ``sessions``."""
        prov = dict(prov, schema_version=self.schema_version, experiment=self.experiment,
                    run_id=self.run_id)
        old = self.provenance()
        sessions = list(old.get("sessions", []))
        if old.get("started") and old.get("started") != prov.get("started") \
                and old.get("started") not in sessions:
            sessions.append(old["started"])
        if sessions:
            prov["sessions"] = sessions
        write_atomic(os.path.join(self.path, PROVENANCE),
                     json.dumps(prov, indent=1, sort_keys=True, default=str))

    def provenance(self) -> Dict[str, Any]:
        try:
            prov = bounded.load(os.path.join(self.path, PROVENANCE))
        except (OSError, ValueError):
            return {}
        return prov if isinstance(prov, dict) else {}

    def append(self, params: Dict[str, Any], measurements: Dict[str, Any],
               raw: Iterable[str] = (), kind: str = "point", **extra: Any) -> Dict[str, Any]:
        """Append one record and flush it to disk."""
        rec = {"schema_version": self.schema_version, "experiment": self.experiment,
               "run_id": self.run_id, "kind": kind, "time": time.time(),
               "params": params, "measurements": measurements,
               "raw": [self.rel(p) if os.path.isabs(p) else p for p in raw]}
        rec.update(extra)
        with open_append(os.path.join(self.path, RECORDS)) as f:
            f.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return rec

    def records(self, kind: Optional[str] = None) -> List[Dict[str, Any]]:
        return list(iter_records(os.path.join(self.path, RECORDS), kind))

    def done_keys(self, kind: str = "point") -> set:
        return {point_key(r["params"]) for r in iter_records(os.path.join(self.path, RECORDS), kind)
                if isinstance(r.get("params"), dict)}


def is_capture(rel: str) -> bool:
    """Is ``rel`` (relative to a run directory) a study file's packet capture,
    ``raw/<trial>-capture-<name>.pcapng`` (or one being written)? Nothing
    exported or reported reads one, and a run's captures may take up to
    ``--limit captures`` (2 GiB by default), more than a copy may."""
    head, name = os.path.split(rel)
    return head == "raw" and "-capture-" in name and name.endswith((".pcapng", ".pcapng.part"))


def copy_to_report_dir(src: str, results_root: str, tries: int = RUN_ID_TRIES,
                       leave: Optional[Callable[[str], bool]] = None) -> Tuple[str, List[str]]:
    """Copy the stored run ``src`` into a new directory
    ``<results_root>/reports/<name>-<id>/`` (made fresh) for a report to be
    written there instead of into ``src``: for a directory nslab cannot prove
    is its own (:func:`~nslab.safeio.tree_is_safe`). Only regular files and
    directories are copied (links and the like are left out, never read);
    returns the new directory and what was left out. A file for whose path
    relative to ``src`` ``leave`` is true is not copied (nor listed).

    The copy, not an output directory beside the input, keeps every study's
    ``report(run_dir)`` as it is: the report reads and writes one directory,
    and that directory holds the files the report links to (pictures, plots).
    """
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(os.path.abspath(src)))[:64].lstrip(".")
    where = os.path.join(results_root, "reports")
    for _ in range(tries):
        dst = os.path.join(where, f"{name or 'run'}-{secrets.token_hex(3)}")
        try:
            make_fresh_dir(dst)
        except FileExistsError:
            continue
        return dst, copy_tree(src, dst, limit=REPORT_COPY_LIMIT, leave=leave)
    raise InputError(f"{where}: no free directory name after {tries} tries")


def iter_records(path: str, kind: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """Read records one at a time (:func:`nslab.store.records.json_lines`:
    bounded, nothing but a regular file opened); a line that is not a JSON
    object (a torn last line: a crash mid-write) is skipped, not fatal."""
    for _, rec, _ in json_lines(path):
        if not isinstance(rec, dict):
            continue
        if kind is None or rec.get("kind") == kind:
            yield rec
