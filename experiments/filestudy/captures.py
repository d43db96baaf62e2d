"""A study file's ``captures:``: checked with the file (here, without a lab:
reports read this module too), run around each chosen trial
(:mod:`.trialcap`), kept beside the trial's raw output.

Each capture is dumpcap (:mod:`nslab.traffic.capturerun`) on the running lab, tagged with
the lab's run (the lab's teardown and ``nslab clean`` stop one left running).
Its file, ``raw/<trial>-capture-<name>.pcapng``, is written to a new file
and renamed into place (a trial measured again replaces it). Sizes are
bounded twice: before anything is built, every capture's ``max_packets`` x
(``snaplen`` + pcapng's bytes per packet) is checked against ``--limit
capture`` and their sum over the trials they capture against ``--limit
captures``; while the run goes, dumpcap stops each file at its packet count
and at that size, and a capture that would take the run's captures past
their limit is skipped (said in the record and the log).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from nslab.traffic.capture import LabMap, bound_bytes, parse_target, resolve
from nslab.errors import InputError
from nslab.model.limits import active, product

#: Rows of the report's table of captures (a long sweep lists the first ones).
REPORT_ROWS = 200


# -- checked with the file ----------------------------------------------------------------
def trials_of(spec: Any, c: Any, rounds: int = 1) -> int:
    """How many trials capture ``c`` runs in (from the sweep's axes, never
    expanded; ``exclude`` is not subtracted) over ``rounds`` sampling rounds
    (each adds ``repeat`` trials to every point: :func:`nslab.run.study.config_of_round`)."""
    lengths = []
    for key, values in spec.sweep.items():
        if key in c.where:
            lengths.append(1 if c.where[key] in values else 0)
        else:
            lengths.append(len(values))
    return product(lengths + [spec.repeat * rounds if c.trials == "all" else 1])


def planned(spec: Any, rounds: int = 1) -> Tuple[int, int]:
    """``(trials captured, bytes at most)`` of all the file's captures over
    ``rounds`` sampling rounds."""
    trials = sum(trials_of(spec, c, rounds) for c in spec.captures)
    return trials, sum(bound_bytes(c.snaplen, c.max_packets) * trials_of(spec, c, rounds)
                       for c in spec.captures)


def check(loaded: Any, rounds: int = 1) -> None:
    """Every capture's link against each lab's topology, its ``where`` against
    the sweep, its name, and the sizes against the active limits (one line
    naming the file, the line and the field), counted over ``rounds``
    sampling rounds."""
    from nslab.model.topo import field_path
    from nslab.model.topo_yaml import line_of
    spec = loaded.spec
    names: Dict[str, int] = {}
    total, counted = 0, []
    for i, c in enumerate(spec.captures):
        for k, v in c.where.items():
            if k not in loaded.when_values:
                swept = ", ".join(spec.sweep) or "none"
                raise loaded.fail(("captures", i, "where", k),
                                  f"{k} is not a sweep key (sweep: {swept})")
            if v not in loaded.when_values[k]:
                raise loaded.fail(("captures", i, "where", k),
                                  f"{v!r} is not among the swept values {loaded.when_values[k]}")
        if c.file_name in names:
            raise loaded.fail(("captures", i, "name" if c.name else "link"),
                              f"two captures are called {c.file_name!r}: give name:")
        names[c.file_name] = i
        target = parse_target(c.link)
        for topo in loaded.topologies.values():
            try:
                resolve(target, LabMap.of_topology(topo))
            except InputError as exc:
                raise loaded.fail(("captures", i, "link"), str(exc)) from None
        loc = ("captures", i)
        where = f"{loaded.path}:{line_of(loaded.doc, loc)}: {field_path(loc)}"
        size = bound_bytes(c.snaplen, c.max_packets)
        active().check("capture", size, where, f"{c.max_packets:,} packets of up to "
                                               f"{c.snaplen} bytes")
        n = trials_of(spec, c, rounds)
        total += size * n
        counted.append(f"{c.file_name} {n:,} trials" + (f" in {rounds} rounds" if rounds > 1
                                                         and c.trials == "all" else ""))
    if spec.captures:
        where = f"{loaded.path}:{line_of(loaded.doc, ('captures',))}: captures"
        active().check("captures", total, where, ", ".join(counted))


def report_rows(recs: List[Any]) -> List[Dict[str, Any]]:
    """The captures of stored records, for the report (point, trial, link,
    file, packets); at most :data:`REPORT_ROWS`."""
    rows = []
    for r in recs:
        for name, c in sorted(r.measurements.captures.items()):
            params = {k: v for k, v in r.params.items() if k != "repeat"}
            rows.append({"point": ", ".join(f"{k.split('.')[-1]}={v}" for k, v in params.items())
                         or "all", "trial": r.params.get("repeat", 0), "link": c.link,
                         "file": c.file or "-", "packets": "-" if c.packets is None else c.packets,
                         "note": c.error or ""})
    return rows[:REPORT_ROWS]
