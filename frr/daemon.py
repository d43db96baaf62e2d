"""FRR daemons as small classes (after IPMininet): name, start order, rendered
config, a dry-run check before anything starts, explicit paths for everything.

Each daemon of a node runs inside the node's namespace with its config, pid
file, zebra socket and vty socket in the node's own directory
(``/run/nslab/<run>/frr/<node>/``, owned by ``frr``), and no TCP vty port.

FRR also keeps a per-process scratch directory, ``/var/tmp/frr/<daemon>.<pid>``
(its crash-log buffers), which it removes only on a clean exit: a daemon
killed, or a ``-C`` dry run, leaves it behind, and a lab killed between
starting a daemon and journalling its pid could not know which one was its
own. So every daemon gets a private, empty ``/var/tmp``: a tmpfs mounted in the
mount namespace ``ip netns exec`` already gives each process, gone with the
process. Nothing FRR writes outside the node's directory reaches the host.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional

import jinja2

from nslab.errors import LabError
from nslab.proc import Process

if TYPE_CHECKING:  # pragma: no cover
    from nslab.node import LabNode

log = logging.getLogger(__name__)

FRR_DIR = "/usr/lib/frr"
def config_token(value: Any) -> str:
    """Every value written into an FRR configuration is one plain token: FRR
    splits a line on whitespace and reads ``!``/``#`` as comments, so a name,
    neighbour or prefix can never break out of its line (see :mod:`nslab.render`)."""
    from nslab.render import token
    return token(value)


#: FRR configurations are rendered from typed values only; ``finalize`` passes
#: every ``{{ ... }}`` through :func:`config_token` (autoescape for this format).
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__),
                                                                      "templates")),
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                          autoescape=False, finalize=config_token)


class DaemonCheckError(LabError):
    """A daemon's configuration failed FRR's dry-run check (``-C``)."""


class Daemon:
    """One FRR daemon of one node."""

    NAME: ClassVar[str] = ""
    ORDER: ClassVar[int] = 0

    def __init__(self, node: "LabNode", directory: str, context: Dict[str, Any]) -> None:
        self.node = node
        self.dir = directory
        self.context = context
        self.process: Optional[Process] = None

    @property
    def binary(self) -> str:
        return os.path.join(FRR_DIR, self.NAME)

    @property
    def config_path(self) -> str:
        return os.path.join(self.dir, f"{self.NAME}.conf")

    @property
    def pid_path(self) -> str:
        return os.path.join(self.dir, f"{self.NAME}.pid")

    @property
    def zserv_path(self) -> str:
        return os.path.join(self.dir, "zserv.api")

    def render(self) -> str:
        return _ENV.get_template(f"{self.NAME}.conf.j2").render(dir=self.dir, **self.context)

    def write_config(self) -> None:
        with open(self.config_path, "w") as f:
            f.write(self.render())
        os.chmod(self.config_path, 0o640)
        _chown_frr(self.config_path)

    def argv(self, dry_run: bool = False) -> List[str]:
        """The daemon's command line, run with a private ``/var/tmp`` (see the module doc)."""
        argv = [self.binary, "-f", self.config_path, "-i", self.pid_path, "-z", self.zserv_path,
                "--vty_socket", self.dir, "-P", "0", "-u", "frr", "-g", "frr"]
        argv += self.extra_args()
        if dry_run:
            argv.append("-C")
        return private_tmp(argv)

    def extra_args(self) -> List[str]:
        return []

    def pid(self) -> Optional[int]:
        """The running daemon's pid, from its pid file (None if there is none)."""
        return _read_pid(self.pid_path)

    def check(self) -> None:
        """Dry-run the config (``-C``); raise naming node, daemon, file and FRR's message."""
        proc = self.node.popen(self.argv(dry_run=True), name=f"{self.NAME}-check")
        res = proc.wait(timeout=30)
        # FRR 8.4's -C exits 0 even when lines fail; it logs "... on config line N: ...".
        bad = [l for l in (res.stderr + res.stdout).splitlines() if "on config line" in l]
        if res.returncode != 0 or bad:
            msg = bad or (res.stderr or res.stdout).strip().splitlines()
            detail = msg[0].split("] ", 1)[-1] if msg else f"exit {res.returncode}"
            raise DaemonCheckError(f"{self.node.name}: {self.NAME} rejected {self.config_path}: "
                                   f"{detail}")

    def start(self) -> None:
        log_path = os.path.join(self.dir, f"{self.NAME}.stdout")
        with open(log_path, "w") as out:  # the daemon keeps its own copy of the descriptor
            self.process = self.node.popen(self.argv(), stdout=out, stderr=out, name=self.NAME)

    def stop(self) -> None:
        """Stop by pid file (falls back to our child process), before the namespace goes."""
        from nslab.proc import kill_pids
        pid = _read_pid(self.pid_path)
        if pid:
            kill_pids([pid], grace=2.0)
        if self.process is not None:
            self.process.stop(grace=2.0)


class Zebra(Daemon):
    NAME = "zebra"
    ORDER = 0

    def extra_args(self) -> List[str]:
        return ["--log", f"file:{self.dir}/zebra.log"]


class Bfdd(Daemon):
    """BFD; its control socket lives in the node's directory like every other socket."""

    NAME = "bfdd"
    ORDER = 1

    def extra_args(self) -> List[str]:
        return ["--log", f"file:{self.dir}/bfdd.log", "--bfdctl", f"{self.dir}/bfdd.sock"]


class Bgpd(Daemon):
    NAME = "bgpd"
    ORDER = 2

    def extra_args(self) -> List[str]:
        return ["--log", f"file:{self.dir}/bgpd.log"]


#: Mounts a tmpfs over ``/var/tmp`` in the process's own mount namespace (made by
#: ``ip netns exec``, private to it), then execs the daemon: same pid, argv
#: passed as positional parameters, never interpolated by the shell.
_PRIVATE_TMP_SCRIPT = ('mount -t tmpfs -o mode=1777,size=16m nslab-frr-tmp /var/tmp '
                       '|| { echo "nslab: cannot mount a private /var/tmp for $0" >&2; exit 1; }; '
                       'exec "$0" "$@"')


def private_tmp(argv: List[str]) -> List[str]:
    """Wrap a daemon's argv so its ``/var/tmp`` is a private tmpfs (run it in a namespace)."""
    return ["/bin/sh", "-c", _PRIVATE_TMP_SCRIPT] + list(argv)


def _read_pid(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _chown_frr(path: str) -> None:
    import grp
    import pwd
    try:
        os.chown(path, pwd.getpwnam("frr").pw_uid, grp.getgrnam("frr").gr_gid)
    except KeyError:  # pragma: no cover - frr user missing: the daemons will say so
        pass
