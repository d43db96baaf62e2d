"""One exception hierarchy for the lab. The CLI catches :class:`LabError` once."""
from __future__ import annotations

from typing import Optional, Sequence


class LabError(Exception):
    """Base class of every error the lab raises on purpose."""


class InputError(LabError):
    """Bad user input: a topology, an option, a file."""


class TopologyError(InputError):
    """A topology that cannot be built as described.

    ``loc`` is where in the topology the problem is (``("nodes", "h1", "routes", 0)``),
    so that a file loader can name the line.
    """

    def __init__(self, message: str, loc: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.loc = tuple(loc)


class CapabilityError(LabError):
    """The machine lacks a kernel feature or a tool the request needs."""


class NotRootError(CapabilityError):
    """The operation needs root."""


class CommandError(LabError):
    """A command failed. Carries the command, its exit code, stdout and stderr."""

    def __init__(self, argv: Sequence[str], returncode: Optional[int], stdout: str = "",
                 stderr: str = "", where: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.where = where
        detail = (stderr or stdout).strip().splitlines()
        last = detail[-1] if detail else "no output"
        if len(detail) >= 2 and last.startswith("Command failed"):
            # ip/tc -batch: the kernel's answer, then which line it was about
            last = f"{detail[-2]} ({last})"
        loc = f" in {where}" if where else ""
        super().__init__(
            f"command failed{loc} (exit {returncode}): {' '.join(self.argv)}: {last}")


class ReadinessError(LabError):
    """Something did not become ready in time (routes, daemons, servers)."""
