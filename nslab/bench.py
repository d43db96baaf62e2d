"""What every benchmark shares: timing a command, saving the result as JSON.

The benchmarks themselves live with what they measure (``nslab.bench`` entry
points: topologies, studies) and print ratios measured side by side in one run.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Dict, List, Optional

from .errors import CapabilityError


def time_command(argv: List[str], cwd: Optional[str] = None) -> float:
    """Seconds a command takes to run to completion (raise if it fails)."""
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd)
    dt = time.monotonic() - t0
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["?"]
        raise CapabilityError(f"benchmark command failed: {' '.join(argv)}: {tail[0]}")
    return dt


def save(results_root: str, name: str, out: Dict[str, object]) -> str:
    """Write a benchmark's result to ``<results>/bench/<name>-<time>.json``."""
    path = os.path.join(results_root, "bench", f"{name}-{int(time.time())}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    out.setdefault("machine", {"cpus": os.cpu_count(), "kernel": os.uname().release})
    out.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return path
