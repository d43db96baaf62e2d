"""Helpers shared by the core CLI and the commands plugins add to it."""
from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any, List, Optional

from .errors import InputError

RESULTS_ENV = "NSLAB_RESULTS"


class Ctx:
    """What the top-level ``nslab`` options give every command."""

    def __init__(self, results: str, verbose: int) -> None:
        self.results = results
        self.verbose = verbose
        self.log_path: Optional[str] = None


def setup_logging(ctx: Any, run_id: str) -> str:
    """Log everything to ``<results>/logs/<run>.log``; INFO (or DEBUG with -v) to stderr."""
    ctx = ctx if ctx is not None else Ctx(os.environ.get(RESULTS_ENV, "results"), 0)
    log_dir = os.path.join(ctx.results, "logs")
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, f"{run_id}.log")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    fh = logging.FileHandler(path)
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(fh)
    sh = logging.StreamHandler(sys.stderr)
    sh.setLevel(logging.DEBUG if ctx.verbose > 1 else logging.INFO if ctx.verbose else logging.WARNING)
    sh.setFormatter(logging.Formatter("nslab: %(message)s"))
    root.addHandler(sh)
    ctx.log_path = path
    return path


def _interrupt(signum, frame):  # noqa: ANN001
    raise KeyboardInterrupt


def install_signals() -> None:
    """SIGTERM and SIGHUP (terminal closed) end a command like Ctrl-C: through teardown."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def int_list(text: str, what: str) -> List[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``, or one line naming the option."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise InputError(f"{what}: empty list")
    return vals


def current_log() -> Optional[str]:
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None


#: Rows of the lab table shown in full; a bigger lab shows its first and last few.
LAB_TABLE_ROWS = 40
#: Interfaces listed for one node (a switch of a thousand ports lists the first few).
LAB_TABLE_INTFS = 8


def print_lab(lab: Any, max_rows: int = LAB_TABLE_ROWS) -> None:
    """The lab's nodes, interfaces and how to enter them, as a table.

    A lab of more than ``max_rows`` nodes shows its first and last rows and a
    count of the rest (a thousand-row table takes longer to draw than the lab
    takes to build, and scrolls everything else away)."""
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"lab {lab.run_id}: {lab.topology.name} (built in {lab.build_seconds:.2f} s)")
    for col in ("node", "kind", "interfaces", "enter with"):
        t.add_column(col)
    rows = lab.describe(max_intfs=LAB_TABLE_INTFS)
    if len(rows) > max_rows:
        head, tail = max_rows // 2, max_rows // 4
        hidden = len(rows) - head - tail
        rows = rows[:head] + [(f"... {hidden} more", "", "", "")] + rows[-tail:]
    for row in rows:
        t.add_row(*row)
    Console().print(t)
