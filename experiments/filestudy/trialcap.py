"""Running a study file's ``captures:`` around a trial (see :mod:`.captures`)."""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Optional, Tuple

from nslab.traffic.capture import bound_bytes, dumpcap_argv, parse_target, resolve
from nslab.traffic.capturerun import Capture, lab_map, wait_started
from nslab.errors import LabError
from nslab.model.limits import active
from nslab.runtime.node import LabLike
from nslab.safeio import check_path, open_new

from .analysis import matches

log = logging.getLogger(__name__)


class TrialCaptures:
    """The captures of one lab of a study file (``start(point, tag)`` per trial)."""

    def __init__(self, lab: LabLike, spec: Any, store: Any) -> None:
        self.lab, self.specs, self.store = lab, list(spec.captures), store
        if self.specs and getattr(lab, "remote", False):
            # refused before anything is built (FileStudy.check_hosts); kept for other callers
            raise LabError("captures: this study runs across hosts, and a study's captures "
                           "on other hosts are not built yet (run it on one host, or without "
                           "captures:)")
        self.limit = active().captures
        self.used = 0
        if self.specs and os.path.isdir(store.raw_dir):
            # a resumed run's captures count too, a crashed trial's unfinished
            # one (.part) among them until its trial is measured again
            self.used = sum(os.lstat(os.path.join(store.raw_dir, f)).st_size
                            for f in os.listdir(store.raw_dir) if "-capture-" in f
                            and f.endswith((".pcapng", ".pcapng.part")))

    def start(self, point: Dict[str, Any], tag: str) -> "Running":
        """Start the captures this trial asks for and wait until they capture."""
        chosen = [c for c in self.specs if matches(point, c.where)
                  and (c.trials == "all" or point.get("repeat", 0) == 0)]
        running = Running(self)
        if not chosen:
            return running
        from nslab.traffic.capture import require_tool
        require_tool()
        targets = [parse_target(c.link) for c in chosen]
        m = lab_map(self.lab.run_id, sorted({t.node for t in targets}))
        try:
            for c, t in zip(chosen, targets):
                running.add(c, resolve(t, m), tag)
            wait_started(running.captures())
        except BaseException:
            running.stop()
            raise
        return running


class Running:
    """The captures of one trial: ``stop()`` ends them and keeps their files."""

    def __init__(self, owner: TrialCaptures) -> None:
        self.owner = owner
        #: (spec, capture or None if skipped, temporary file, final file, why skipped)
        self.items: List[Tuple[Any, Optional[Capture], str, str, str]] = []
        self.done: Optional[Tuple[List[str], Dict[str, Dict[str, Any]]]] = None

    def captures(self) -> List[Capture]:
        return [cap for _, cap, _, _, _ in self.items if cap is not None]

    def add(self, c: Any, where: Any, tag: str) -> None:
        final = self.owner.store.raw_path(f"{tag}-capture-{c.file_name}.pcapng")
        tmp = final + ".part"
        size = bound_bytes(c.snaplen, c.max_packets)
        if self.owner.used + size > self.owner.limit:
            from nslab.model.limits import fmt
            why = (f"skipped: the run's captures would pass {fmt('captures', self.owner.limit)} "
                   "(--limit captures=N)")
            log.warning("capture %s of %s: %s", c.file_name, tag, why)
            self.items.append((c, None, tmp, final, why))
            return
        self.owner.used += size  # reserved; the file's real size replaces it at the end
        check_path(tmp, leaf=False)
        if os.path.lexists(tmp):  # a crashed trial's unfinished file, counted at the start
            self.owner.used -= os.lstat(tmp).st_size
        argv = dumpcap_argv(where.devs, "-", count=c.max_packets, snaplen=c.snaplen,
                            filt=c.filter, max_bytes=size)
        with open_new(tmp, "wb", replace=True) as fh:
            cap = Capture(where, argv, self.owner.lab.run_id, stdout=fh)
        self.items.append((c, cap, tmp, final, ""))

    def stop(self) -> Tuple[List[str], Dict[str, Dict[str, Any]]]:
        """Stop every capture (dumpcap finishes its file), rename the files
        into place; ``(raw paths, {name: what the record keeps})``. Once."""
        if self.done is not None:
            return self.done
        store = self.owner.store
        raw: List[str] = []
        out: Dict[str, Dict[str, Any]] = {}
        for c, cap, tmp, final, why in self.items:
            if cap is None:
                out[c.file_name] = {"link": c.link, "file": None, "packets": None, "bytes": 0,
                                    "error": why}
                continue
            cap.stop()
            self.owner.used -= bound_bytes(c.snaplen, c.max_packets)
            check_path(final, leaf=False)
            if os.path.lexists(final):  # a trial measured again: its earlier capture goes
                self.owner.used -= os.lstat(final).st_size
            os.replace(tmp, final)
            size = os.path.getsize(final)
            self.owner.used += size
            raw.append(final)
            rc = cap.proc.popen.returncode
            error = cap.message() if rc not in (0, -2) else ""
            out[c.file_name] = {"link": c.link, "file": store.rel(final), "packets": cap.packets,
                                "bytes": size, "error": error or None}
        self.done = (raw, out)
        return self.done
