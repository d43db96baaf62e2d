"""Helpers shared by the core CLI and the commands plugins add to it."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import warnings
from types import FrameType
from typing import Any, Iterator, List, NoReturn, Optional, TextIO, Type, Union

from ..errors import InputError
from ..model.limits import activate
from ..runtime.node import LabLike
from ..safeio import make_dirs, open_append, printable

RESULTS_ENV = "NSLAB_RESULTS"


def echo(message: Any = "", *, err: bool = False, nl: bool = True, lines: bool = False) -> None:
    """``click.echo`` of a message that holds something a file, a file name,
    another process or a library gave: its control characters are escaped
    (:func:`nslab.safeio.printable`), line breaks included unless ``lines``
    (a message nslab wrote on several lines itself), so a name cannot
    retitle the terminal, clear it, overwrite a line or add one. What nslab
    prints on the terminal goes through here (or through :func:`printable`
    into a rich table); data written to standard output for another program
    (an export, a capture) does not."""
    import click
    click.echo(printable(message, lines=lines), err=err, nl=nl)


class TerminalFormatter(logging.Formatter):
    """A log formatter whose text is :func:`nslab.safeio.printable`: a log
    message quotes names, files and other programs' output (a library's
    warning included), and the log file is read on a terminal too. With
    ``one_line`` (the terminal's handler), a message's own line breaks are
    escaped too, so it cannot forge a line; a traceback keeps its lines."""

    def __init__(self, fmt: str, one_line: bool = False) -> None:
        super().__init__(fmt)
        self.one_line = one_line

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        text = super().formatMessage(record)
        return printable(text) if self.one_line else text

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), lines=True)


def _show_warning(message: Union[Warning, str], category: Type[Warning], filename: str,
                  lineno: int, file: Optional[TextIO] = None, line: Optional[str] = None) -> None:
    """``warnings.showwarning`` with the text escaped (:func:`printable`): a
    library's warning quotes what it was given (matplotlib's "Glyph 27
    (\\x1b) missing from font" quotes a title's character)."""
    out = file if file is not None else sys.stderr
    try:  # the message on one line; the source line Python shows under it stays
        out.write(printable(warnings.formatwarning(printable(message), category, filename,
                                                   lineno, line), lines=True))
    except (OSError, ValueError):  # a closed or gone stderr, as the original ignores
        pass


@contextlib.contextmanager
def terminal_safety() -> Iterator[None]:
    """Within it, what reaches the terminal without passing through
    :func:`echo` is escaped too: Python warnings (:func:`_show_warning`) and
    log records no handler takes (``logging.lastResort``: a library's
    warning before :func:`setup_logging`). Both are put back on exit."""
    shown, last = warnings.showwarning, logging.lastResort
    resort = logging.StreamHandler(sys.stderr)
    resort.setLevel(logging.WARNING)
    resort.setFormatter(TerminalFormatter("%(message)s", one_line=True))
    warnings.showwarning = _show_warning
    logging.lastResort = resort
    try:
        yield
    finally:
        warnings.showwarning = shown
        logging.lastResort = last


class Ctx:
    """What the top-level ``nslab`` options give every command."""

    def __init__(self, results: str, verbose: int) -> None:
        self.results = results
        self.verbose = verbose


class RunLogHandler(logging.FileHandler):
    """A log file opened through :func:`nslab.safeio.open_append`: a link, or a
    file with another hard link, at its path is refused, never written through."""

    def _open(self) -> Any:
        return open_append(self.baseFilename, encoding=self.encoding or "utf-8")


def setup_logging(ctx: Any, run_id: str) -> str:
    """Log everything to ``<results>/logs/<run>.log``; INFO (or DEBUG with -v) to stderr."""
    ctx = ctx if ctx is not None else Ctx(os.environ.get(RESULTS_ENV, "results"), 0)
    log_dir = os.path.join(ctx.results, "logs")
    make_dirs(log_dir)
    path = os.path.join(log_dir, f"{run_id}.log")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    fh = RunLogHandler(path, encoding="utf-8")
    fh.setFormatter(TerminalFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(fh)
    sh = logging.StreamHandler(sys.stderr)
    sh.setLevel(logging.DEBUG if ctx.verbose > 1 else logging.INFO if ctx.verbose else logging.WARNING)
    sh.setFormatter(TerminalFormatter("nslab: %(message)s", one_line=True))
    root.addHandler(sh)
    return path


def _interrupt(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise KeyboardInterrupt


def install_signals() -> None:
    """SIGTERM and SIGHUP (terminal closed) end a command like Ctrl-C: through teardown.

    Ctrl-C (SIGINT) raises KeyboardInterrupt even when nslab was started with
    SIGINT ignored (as a shell's background job is): teardown must run
    whoever sends it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
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


LIMIT_HELP = ("Raise (or lower) a size ceiling, e.g. nodes=30000 or duration=36h; repeatable. "
              "KEY: nodes, links, namespaces, labs, points, trials, duration, capture and "
              "captures (bytes of one packet capture and of a run's, e.g. 4G). Defaults come "
              "from this machine's memory (nslab topo check FILE shows them); a file cannot "
              "raise them.")


def _apply_limits(ctx: Any, param: Any, value: Any) -> Any:
    activate(value or ())
    return value


def limit_param() -> Any:
    """The ``--limit KEY=N`` option (a :class:`click.Option`): applied as soon as
    it is parsed (:func:`nslab.model.limits.activate`), so the command sees it as the
    active limits without taking it as a parameter."""
    import click
    return click.Option(["--limit"], multiple=True, metavar="KEY=N", expose_value=False,
                        is_eager=True, callback=_apply_limits, help=LIMIT_HELP)


def limit_option(f: Any) -> Any:
    """Decorator: the ``--limit KEY=N`` option of :func:`limit_param` on a command."""
    import click
    return click.option("--limit", multiple=True, metavar="KEY=N", expose_value=False,
                        is_eager=True, callback=_apply_limits, help=LIMIT_HELP)(f)


def prescan_limits(args: List[str]) -> None:
    """Apply the ``--limit`` values found in ``args`` now: for a command that
    reads its file before its options are parsed (``nslab run FILE ...``)."""
    found = []
    for i, a in enumerate(args):
        if a == "--":
            break
        if a == "--limit" and i + 1 < len(args):
            found.append(args[i + 1])
        elif a.startswith("--limit="):
            found.append(a[len("--limit="):])
    activate(found)


def current_log() -> Optional[str]:
    """The run's log file: nslab's own, the newest (a host's handlers, such as
    pytest's, may log to a file too), else any log file."""
    handlers = logging.getLogger().handlers
    for h in reversed(handlers):
        if isinstance(h, RunLogHandler):
            return h.baseFilename
    for h in handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None


HOSTS_HELP = ("Build the lab across these hosts (ssh destinations; NAME=ADDRESS gives the "
              "address the others reach it at). See docs/multi-host.md.")


def hosts_options(f: Any) -> Any:
    """Decorator: ``--hosts``, ``--ssh-config``, ``--remote-nslab``: a lab across machines."""
    import click
    f = click.option("--remote-nslab", default=None, metavar="PATH",
                     help="The nslab command on the hosts (default: the same path as here).")(f)
    f = click.option("--ssh-config", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="An ssh -F file (default: your own SSH configuration).")(f)
    return click.option("--hosts", default=None, metavar="A,B[,C]", help=HOSTS_HELP)(f)


#: Rows of the lab table shown in full; a bigger lab shows its first and last few.
LAB_TABLE_ROWS = 40
#: Interfaces listed for one node (a switch of a thousand ports lists the first few).
LAB_TABLE_INTFS = 8


def print_lab(lab: LabLike, max_rows: int = LAB_TABLE_ROWS) -> None:
    """The lab's nodes, interfaces and how to enter them, as a table.

    A lab of more than ``max_rows`` nodes shows its first and last rows and a
    count of the rest (a thousand-row table takes longer to draw than the lab
    takes to build, and scrolls everything else away)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    # names come from a file: rich gets them as Text, never as markup
    # ("[link=...]" would make a terminal hyperlink) or emoji codes, and with
    # their control characters escaped (rich passes an escape sequence on)
    t = Table(title=Text(printable(f"lab {lab.run_id}: {lab.topology.name} "
                                   f"(built in {lab.build_seconds:.2f} s)")))
    for col in ("node", "kind", "interfaces", "enter with"):
        t.add_column(col)
    rows = lab.describe(max_intfs=LAB_TABLE_INTFS)
    if len(rows) > max_rows:
        head, tail = max_rows // 2, max_rows // 4
        hidden = len(rows) - head - tail
        rows = rows[:head] + [(f"... {hidden} more", "", "", "")] + rows[-tail:]
    for row in rows:
        t.add_row(*(Text(printable(cell)) for cell in row))
    Console().print(t)
