#!/usr/bin/env python3
"""Where `make test`'s time goes: each tier's wall time, its tests, and the
slowest tests overall, in one table printed at the end.

    scripts/tiers.py run NAME [--junit FILE] -- CMD [ARG...]
        run CMD, then record NAME's wall time, exit status and JUnit XML
    scripts/tiers.py summary
        the table: every tier recorded since `scripts/tiers.py reset`, its
        tests (passed, failed, skipped) and minutes; then the ten slowest tests
    scripts/tiers.py reset
        forget earlier records (`make test` starts with it)

Records are JSON files in ``$NSLAB_TIERS`` (default ``results/ci/tiers`` in
the checkout), one per tier, written when the tier ends (also when it fails).
``scripts/kernel-tier.py`` records its parts (each guest kernel, the two
boxes) with :func:`record`. A test's time is what its JUnit XML says
(set-up, call and teardown: a module's shared guest boot or lab is
counted in its first test).

:class:`CpuLog` (started by ``scripts/ci.py``) writes the machine's CPU
use every few seconds to ``cpu.tsv`` beside the records; the table then
says how busy the CPUs were during each part (parts overlap: it is the
whole machine's use, not the part's own), which shows where CPU time was
left idle.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def records_dir() -> str:
    return os.environ.get("NSLAB_TIERS") or os.path.join(ROOT, "results", "ci", "tiers")


def record(name: str, seconds: float, rc: int, junit: Optional[str] = None,
           started: Optional[float] = None) -> None:
    """Write tier ``name``'s record (overwrites an earlier one of that name)."""
    d = records_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name.replace("/", "_") + ".json")
    data = {"name": name, "seconds": round(seconds, 1), "rc": rc,
            "junit": os.path.abspath(junit) if junit else None,
            "started": started if started is not None else time.time() - seconds}
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def cpu_times() -> List[int]:
    """The machine's CPU time counters (jiffies), from /proc/stat's first line."""
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


class CpuLog(threading.Thread):
    """Every ``every`` seconds, one line in ``cpu.tsv``: the time, and the
    shares of the machine's CPU time spent busy and stolen (by the hypervisor)
    since the line before. It reads /proc/stat itself rather than through
    ``nslab.runtime.proc.read_steal_ns``: this script runs under the
    system's Python (the Makefile's ``$(PY)``), outside the venv that holds
    nslab's dependencies, and it needs the busy time from the same line."""

    def __init__(self, every: float = 5.0) -> None:
        super().__init__(name="cpu-log", daemon=True)
        self.every, self.done = every, threading.Event()
        self.path = os.path.join(records_dir(), "cpu.tsv")

    def run(self) -> None:
        os.makedirs(records_dir(), exist_ok=True)
        before = cpu_times()
        with open(self.path, "w") as f:
            f.write("time\tbusy\tsteal\n")
            while not self.done.wait(self.every):
                now = cpu_times()
                d = [b - a for a, b in zip(before, now)]
                total = sum(d[:8]) or 1  # user..steal (guest time is in user)
                idle = d[3] + d[4]  # idle, iowait
                f.write(f"{time.time():.1f}\t{(total - idle) / total:.3f}\t"
                        f"{(d[7] if len(d) > 7 else 0) / total:.3f}\n")
                f.flush()
                before = now

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=2 * self.every)


def cpu_use(start: float, end: float) -> Optional[Tuple[float, float]]:
    """Mean (busy, steal) shares of the machine's CPU time between ``start``
    and ``end`` (epoch seconds), from ``cpu.tsv``; None if it holds no line there."""
    path = os.path.join(records_dir(), "cpu.tsv")
    rows = []
    try:
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                t, busy, steal = (float(v) for v in line.split("\t"))
                if start < t <= end:
                    rows.append((busy, steal))
    except (OSError, ValueError):
        return None
    if not rows:
        return None
    return sum(r[0] for r in rows) / len(rows), sum(r[1] for r in rows) / len(rows)


def reset() -> None:
    """Forget every earlier record (a new run of the whole suite begins)."""
    d = records_dir()
    for n in os.listdir(d) if os.path.isdir(d) else []:
        if n.endswith(".json") or n == "cpu.tsv":
            os.unlink(os.path.join(d, n))


def load() -> List[Dict]:
    d = records_dir()
    out = []
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if n.endswith(".json"):
            try:
                with open(os.path.join(d, n)) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                continue
    return sorted(out, key=lambda r: r.get("started") or 0)


def _testcases(junit: Optional[str]) -> List[Tuple[ET.Element, str, str, float]]:
    """(element, test id, outcome, seconds) of each test case in a JUnit XML file."""
    if not junit or not os.path.exists(junit):
        return []
    try:
        root = ET.parse(junit).getroot()
    except ET.ParseError:
        return []
    out = []
    for case in root.iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/")
        test = f"{module}.py::{case.get('name')}" if module else str(case.get("name"))
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        out.append((case, test, {"failure": "failed"}.get(kind, kind),
                    float(case.get("time") or 0)))
    return out


def cases(junit: Optional[str]) -> List[Tuple[str, str, float]]:
    """(test id, outcome, seconds) of each test case in a JUnit XML file."""
    return [(test, kind, seconds) for _, test, kind, seconds in _testcases(junit)]


def reruns(junit: Optional[str]) -> List[Tuple[str, str, str]]:
    """(test id, outcome, what its runs' steal was) of each test in a JUnit
    XML file that ran again after failing on a disturbed bed: its ``steal``
    property (nslab.runtime.testing) names more than one run."""
    out = []
    for case, test, kind, _ in _testcases(junit):
        said = [p.get("value") or "" for p in case.iter("property") if p.get("name") == "steal"]
        if any("run again" in v for v in said):
            out.append((test, kind, "; ".join(said)))
    return out


def summary(slowest: int = 10) -> List[str]:
    recs = load()
    if not recs:
        return [f"no tier records in {records_dir()}"]
    lines = ["", "make test: where the time went", "",
             f"{'tier':<26} {'result':<9} {'passed':>7} {'failed':>7} {'skipped':>8} "
             f"{'minutes':>8} {'CPU busy':>9}"]
    every: List[Tuple[float, str, str]] = []
    total = 0.0
    for r in recs:
        cs = cases(r.get("junit"))
        n = {k: sum(1 for _, o, _ in cs if o == k) for k in ("passed", "failed", "error",
                                                             "skipped")}
        total += float(r["seconds"])
        res = "ok" if r.get("rc") == 0 else f"exit {r.get('rc')}"
        use = (cpu_use(float(r["started"]), float(r["started"]) + float(r["seconds"]))
               if r.get("started") else None)
        busy = f"{use[0]:>8.0%}" if use else ""
        lines.append(f"{r['name']:<26} {res:<9} {n['passed']:>7} {n['failed'] + n['error']:>7} "
                     f"{n['skipped']:>8} {float(r['seconds']) / 60:>8.1f} {busy:>9}")
        every += [(s, r["name"], t) for t, o, s in cs if o != "skipped"]
    # parts overlap (a background part, a tier and its own parts): the wall
    # time is from the first start to the last end, not their sum
    ends = [float(r["started"]) + float(r["seconds"]) for r in recs if r.get("started")]
    starts = [float(r["started"]) for r in recs if r.get("started")]
    wall = (max(ends) - min(starts)) if starts else total
    use = cpu_use(min(starts), max(ends)) if starts else None
    lines.append(f"{'wall, first start to end':<26} {'':<9} {'':>7} {'':>7} {'':>8} "
                 f"{wall / 60:>8.1f} {f'{use[0]:>8.0%}' if use else '':>9}")
    if use:
        lines.append(f"(CPU busy: the whole machine's use during each part, every CPU counted; "
                     f"the hypervisor stole {use[1]:.0%} over the run)")
    if every:
        lines += ["", f"the {min(slowest, len(every))} slowest tests (set-up and teardown "
                      "included; a module's shared lab or guest boot counts in its first test):"]
        for s, tier, t in sorted(every, reverse=True)[:slowest]:
            lines.append(f"  {s:7.1f} s  {tier:<18} {t}")
    again = [(r["name"], *x) for r in recs for x in reruns(r.get("junit"))]
    if again:
        lines += ["", "run again after failing while the hypervisor stole CPU time "
                      "(the last run decides):"]
        lines += [f"  {tier:<18} {t}: {kind}; {said}" for tier, t, kind, said in again]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run")
    run.add_argument("name")
    run.add_argument("--junit")
    run.add_argument("cmd", nargs="*", help="after --: the command")
    sub.add_parser("summary")
    sub.add_parser("reset")
    argv = sys.argv[1:]
    cmd_after = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cmd_after])
    if args.what == "run":
        args.cmd = argv[cmd_after + 1:]
    if args.what == "reset":
        reset()
        return 0
    if args.what == "summary":
        print("\n".join(summary()), flush=True)
        return 0
    cmd = args.cmd
    if not cmd:
        ap.error("run: no command")
    if args.junit and os.path.exists(args.junit):  # an earlier run's
        os.unlink(args.junit)
    t0, started = time.monotonic(), time.time()
    try:
        rc = subprocess.call(cmd)
    except KeyboardInterrupt:
        rc = 130
    record(args.name, time.monotonic() - t0, rc, args.junit, started)
    return rc


if __name__ == "__main__":
    sys.exit(main())
