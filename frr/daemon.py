"""FRR daemons as small classes (after IPMininet): name, start order, rendered
config, a dry-run check before anything starts, explicit paths for everything.

Each daemon of a node runs inside the node's namespace with its pid file,
zebra socket and vty socket in the node's own run directory
(``/run/nslab/<run>/frr/<node>/``, owned by ``frr``), its configuration in a
directory only root can write (``/run/nslab/<run>/frr-conf/<node>/``, see
:mod:`frr.rundir`), and no TCP vty port.

Every daemon runs in the private mount namespace ``ip netns exec`` gives each
process, set up by a short shell prologue before the daemon is exec'd (same
pid; the argv passes as positional parameters, never through the shell's
parser):

* ``/var/tmp`` is a private tmpfs. FRR keeps a per-process scratch directory,
  ``/var/tmp/frr/<daemon>.<pid>`` (its crash-log buffers), which it removes only
  on a clean exit: a daemon killed, or a ``-C`` dry run, would leave it behind.
* From FRR 10 (:attr:`frr.version.FrrVersion.mgmtd`), ``mgmtd`` must be one per
  node, and its sockets and config files sit at paths compiled into FRR. So
  FRR's run-state directory (``/run/frr``) is the node's run directory, FRR's
  config directory (``/etc/frr``) is the node's config directory (``mgmtd``
  reads ``mgmtd.conf`` there), and FRR's lib-state directory
  (``/var/lib/frr``, ``mgmtd``'s commit history) is a private tmpfs. The
  host's ``/etc/frr`` is never read and nothing reaches the host's
  ``/run/frr`` or ``/var/lib/frr``.

Nothing FRR writes outside the node's run directory reaches the host.
"""
from __future__ import annotations

import logging
import os
import re
import signal
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Type

import jinja2

from nslab.errors import LabError
from nslab.model.render import token
from nslab.runtime.proc import Process, process_start_time

from .rundir import NodeDir, frr_ids, owned_process
from .version import FRR_DIR, FrrVersion

if TYPE_CHECKING:  # pragma: no cover
    from nslab.runtime.node import LabNode

log = logging.getLogger(__name__)


def config_token(value: Any) -> str:
    """Every value written into an FRR configuration is one plain token: FRR
    splits a line on whitespace and reads ``!``/``#`` as comments, so a name,
    neighbour or prefix can never break out of its line (see :mod:`nslab.model.render`)."""
    return token(value)


#: FRR configurations are rendered from typed values only; ``finalize`` passes
#: every ``{{ ... }}`` through :func:`config_token` (autoescape for this format).
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__),
                                                                      "templates")),
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                          autoescape=False, finalize=config_token)

#: Where a dry run puts the files a daemon makes before it reads its config (FRR
#: 10's zebra binds its API socket first): the dry run's own private tmpfs.
_CHECK_DIR = "/var/tmp"


class DaemonCheckError(LabError):
    """A daemon's configuration failed FRR's dry-run check (``-C``)."""


def check_result(node: str, daemon: str, path: str, returncode: int, stdout: str,
                 stderr: str) -> None:
    """Judge a dry run's outcome; raise :class:`DaemonCheckError` naming the
    node, the daemon, the file and FRR's own message.

    A daemon's ``-C`` exits 0 even when lines fail (8.4 and 10.3 alike); it
    logs ``... No such command on config line N: ...``. ``vtysh --dryrun``
    exits non-zero and prints ``line N: % Unknown command[..]: ...``.
    """
    lines = (stderr + "\n" + stdout).splitlines()
    detail = None
    for ln in lines:
        if "on config line" in ln:
            detail = ln.split("] ", 1)[-1].strip()
            break
        m = re.match(r"^line (\d+): %\s*(.*)$", ln.strip())
        if m:
            what = " ".join(re.sub(r"\[\d+\]", "", m.group(2)).split())
            detail = f"{what} on config line {m.group(1)}"
            break
    if detail is None and returncode != 0:
        text = [ln.strip() for ln in lines if ln.strip()]
        detail = text[0] if text else f"exit {returncode}"
    if detail is not None:
        raise DaemonCheckError(f"{node}: {daemon} rejected {path}: {detail}")


class Daemon:
    """One FRR daemon of one node.

    Args:
        node: the lab node it runs in.
        run_dir: the node's run directory (``frr``'s).
        conf_dir: the node's configuration directory (root's).
        context: template values.
        version: the FRR it runs on.
    """

    NAME: ClassVar[str] = ""
    ORDER: ClassVar[int] = 0
    #: A socket in the run directory whose presence says the daemon serves.
    READY: ClassVar[Optional[str]] = None

    def __init__(self, node: "LabNode", run_dir: NodeDir, conf_dir: NodeDir,
                 context: Dict[str, Any], version: FrrVersion) -> None:
        self.node = node
        self.run_dir = run_dir
        self.conf_dir = conf_dir
        self.context = context
        self.version = version
        self.process: Optional[Process] = None
        self.started_at: Optional[float] = None

    @property
    def dir(self) -> str:
        """The node's run directory (sockets, pid files, logs)."""
        return self.run_dir.path

    @property
    def binary(self) -> str:
        return os.path.join(FRR_DIR, self.NAME)

    @property
    def config_name(self) -> str:
        return f"{self.NAME}.conf"

    @property
    def config_path(self) -> str:
        return os.path.join(self.conf_dir.path, self.config_name)

    @property
    def pid_path(self) -> str:
        """FRR's pid file: written by the daemon, never read by nslab."""
        return os.path.join(self.dir, f"{self.NAME}.pid")

    def render(self) -> str:
        return _ENV.get_template(f"{self.NAME}.conf.j2").render(
            mgmtd=self.version.mgmtd, frr_version=self.version.text, **self.context)

    # -- command lines ---------------------------------------------------------------
    def argv(self, dry_run: bool = False) -> List[str]:
        """The daemon's command line inside its mount prologue (see the module doc).

        A dry run (``-C``) keeps every file the daemon makes in its private tmpfs."""
        where = _CHECK_DIR if dry_run else self.dir
        argv = [self.binary, "-f", self.config_path, "-i", os.path.join(where, f"{self.NAME}.pid"),
                "-z", os.path.join(where, "zserv.api"), "--vty_socket", where, "-P", "0",
                "-u", "frr", "-g", "frr"]
        argv += self.extra_args(dry_run)
        if dry_run:
            argv.append("-C")
        return self.wrap(argv)

    def extra_args(self, dry_run: bool = False) -> List[str]:
        return [] if dry_run else ["--log", f"file:{self.dir}/{self.NAME}.log"]

    def wrap(self, argv: List[str]) -> List[str]:
        return frr_prologue(argv, self.version, self.dir, self.conf_dir.path)

    # -- dry run, start, signals -----------------------------------------------------
    def check(self) -> None:
        """Dry-run the config; raise naming node, daemon, file and FRR's message."""
        proc = self.node.popen(self.argv(dry_run=True), name=f"{self.NAME}-check")
        res = proc.wait(timeout=30)
        try:
            check_result(self.node.name, self.NAME, self.config_path, res.returncode,
                         res.stdout, res.stderr)
        except DaemonCheckError:
            log.error("%s: %s dry run (%s), exit %d:\n%s%s", self.node.name, self.NAME,
                      self.version.label, res.returncode, res.stderr, res.stdout)
            raise

    def start(self) -> None:
        """Start the daemon, its output appended to ``<daemon>.stdout`` in the
        run directory (opened without following a link), and record which
        process it is (pid and start time)."""
        with self.run_dir.open_output(f"{self.NAME}.stdout") as out:
            self.process = self.node.popen(self.argv(), stdout=out, stderr=out, name=self.NAME)
        self.started_at = process_start_time(self.process.pid)

    def pid(self) -> Optional[int]:
        """The pid of the daemon nslab started while it runs (None otherwise).

        It is nslab's own child, not yet reaped, so the pid cannot have passed
        to another process; the pid file is never read."""
        p = self.process
        if p is None or p.popen.poll() is not None:
            return None
        return p.pid

    def signal(self, sig: int) -> int:
        """Send ``sig`` to the daemon nslab started, after checking it is that
        process (start time and ``NSLAB_RUN`` tag); returns its pid.

        Raises:
            LabError: nslab did not start it, it has exited, or the pid is not
                the process nslab started.
        """
        target = f"{self.node.name}/{self.NAME}"
        pid = self.pid()
        if pid is None:
            raise LabError(f"{target} is not running (no process of nslab's; its pid file is "
                           f"not trusted)")
        why = owned_process(pid, self.started_at, self.node.lab.run_id)
        if why:
            raise LabError(f"{target}: not signalling: {why}")
        os.kill(pid, sig)
        return pid

    def reap(self, timeout: float = 10.0) -> None:
        """Wait for the daemon nslab started to exit (after a signal) and reap it."""
        if self.process is not None:
            self.process.popen.wait(timeout=timeout)

    def stop(self) -> None:
        """Stop the daemon nslab started (signal ladder on its own process group)."""
        if self.process is not None:
            if self.process.popen.poll() is None and self.pid() is not None:
                os.kill(self.process.pid, signal.SIGCONT)  # a stopped daemon cannot exit
            self.process.stop(grace=2.0)

    def exit_detail(self) -> str:
        """How the daemon ended, with the last lines of its output."""
        code = self.process.popen.returncode if self.process is not None else None
        tail = self.run_dir.tail(f"{self.NAME}.stdout")
        return f"exit {code}" + (f"; its output ends:\n{tail}" if tail else "")


class Mgmtd(Daemon):
    """FRR 10's management daemon: owns interface configuration. It takes no
    ``-f`` and no ``-C``: it reads ``mgmtd.conf`` from ``/etc/frr``, which is
    the node's config directory in its mount namespace; the dry run is
    ``vtysh --dryrun`` (vtysh parses every daemon's commands)."""

    NAME = "mgmtd"
    ORDER = -1
    READY = "mgmtd_be.sock"

    def argv(self, dry_run: bool = False) -> List[str]:
        if dry_run:
            return self.wrap(["vtysh", "--dryrun", "-f", self.config_path])
        return self.wrap([self.binary, "-i", self.pid_path, "--vty_socket", self.dir, "-P", "0",
                          "-u", "frr", "-g", "frr"] + self.extra_args())


class Zebra(Daemon):
    NAME = "zebra"
    ORDER = 0
    READY = "zserv.api"


class Bfdd(Daemon):
    """BFD; before FRR 10.2 its control socket lives in the node's directory
    like every other socket (10.2 removed the socket and ``--bfdctl``)."""

    NAME = "bfdd"
    ORDER = 1

    def extra_args(self, dry_run: bool = False) -> List[str]:
        where = _CHECK_DIR if dry_run else self.dir
        ctl = ["--bfdctl", f"{where}/bfdd.sock"] if self.version.bfdctl else []
        return super().extra_args(dry_run) + ctl


class Bgpd(Daemon):
    NAME = "bgpd"
    ORDER = 2


#: The mount prologue (see the module doc). Positional parameters: ``$1`` is
#: ``plain`` or ``mgmtd``; with ``mgmtd``, ``$2``..``$8`` are the node's run
#: directory, FRR's run-state directory, the node's config directory, FRR's
#: config directory, FRR's lib-state directory, frr's uid and gid; then the
#: daemon's argv, exec'd (same pid).
_PROLOGUE = (
    'fail() { echo "nslab: cannot $1 for $prog" >&2; exit 1; }; '
    'mode=$1; shift; '
    'if [ "$mode" = mgmtd ]; then rd=$1 rs=$2 cd=$3 sc=$4 ls=$5 uid=$6 gid=$7; shift 7; fi; '
    'prog=$1; '
    'mount -t tmpfs -o mode=1777,size=16m nslab-frr-tmp /var/tmp '
    '|| fail "mount a private /var/tmp"; '
    'if [ "$mode" = mgmtd ]; then '
    'mount --bind "$rd" "$rs" || fail "bind $rd on $rs"; '
    'mount --bind "$cd" "$sc" || fail "bind $cd on $sc"; '
    'mount -t tmpfs -o "mode=0750,size=16m,uid=$uid,gid=$gid" nslab-frr-lib "$ls" '
    '|| fail "mount a private $ls"; '
    'fi; '
    'exec "$@"')


def frr_prologue(argv: List[str], version: FrrVersion, run_dir: str, conf_dir: str) -> List[str]:
    """Wrap a daemon's argv in the mount prologue (run it in a namespace)."""
    if not version.mgmtd:
        return private_tmp(argv)
    uid, gid = frr_ids()
    return ["/bin/sh", "-c", _PROLOGUE, "nslab-frr", "mgmtd", run_dir, version.runstatedir, conf_dir, version.sysconfdir,
                   version.libstatedir, str(uid), str(gid)] + list(argv)


def private_tmp(argv: List[str]) -> List[str]:
    """Wrap ``argv`` so its ``/var/tmp`` is a private tmpfs (the prologue of FRR
    before 10, which mounts nothing else; run it in a namespace)."""
    return ["/bin/sh", "-c", _PROLOGUE, "nslab-frr", "plain"] + list(argv)


def daemon_kinds(bfd: bool, version: FrrVersion) -> List[Type[Daemon]]:
    """The daemon classes a node runs, in start order."""
    kinds: List[Type[Daemon]] = [Zebra, Bgpd] + ([Bfdd] if bfd else []) + ([Mgmtd] if version.mgmtd else [])
    return sorted(kinds, key=lambda c: c.ORDER)


def node_configs(context: Dict[str, Any], version: FrrVersion) -> Dict[str, str]:
    """Every configuration file of a node, ``{file name: text}``, in start order.

    Args:
        context: ``node``, ``run_id``, ``interfaces`` (the node's, in order)
            and ``bgp`` (its :class:`~nslab.frr.options.BgpOptions`).
        version: the FRR the node runs: from 10.0 the interface configuration
            moves from ``zebra.conf`` to ``mgmtd.conf``, and a ``vtysh.conf``
            stands in for the host's in the dry run of ``mgmtd.conf``.
    """
    values = dict(context, mgmtd=version.mgmtd, frr_version=version.text)
    out = {f"{k.NAME}.conf": _ENV.get_template(f"{k.NAME}.conf.j2").render(**values)
           for k in daemon_kinds(bool(context["bgp"].bfd), version)}
    if version.mgmtd:
        out["vtysh.conf"] = _ENV.get_template("vtysh.conf.j2").render(**values)
    return out


#: Lines that an FRR configuration file holds once, at its top, and that every
#: daemon's file of a node repeats (see the templates).
_ONCE = ("frr defaults ", "hostname ")


def integrated_config(context: Dict[str, Any], version: FrrVersion) -> str:
    """The node's configuration as one file (FRR's integrated ``frr.conf``,
    which ``vtysh -b`` hands to each daemon): every daemon's file as
    :func:`node_configs` renders it, in start order, with the lines a file
    holds once (``frr defaults``, ``hostname``) kept from the first only."""
    seen = set()
    out = [f"! FRR for {config_token(context['node'])}: every daemon's configuration, as "
           "nslab renders it for the lab"]
    for name, text in node_configs(context, version).items():
        if name == "vtysh.conf":  # the dry run's stand-in for the host's
            continue
        for ln in text.splitlines():
            if ln.startswith(_ONCE):
                if ln in seen:
                    continue
                seen.add(ln)
            out.append(ln)
    return "\n".join(out) + "\n"


def container_configs(context: Dict[str, Any], version: FrrVersion) -> Dict[str, str]:
    """The files that configure FRR's own container image the way the lab
    configures a node (``{file name in FRR's config directory: text}``): the
    integrated ``frr.conf``, a ``vtysh.conf`` that makes it the only file, and
    the ``daemons`` file naming the daemons the lab would start."""
    kinds = daemon_kinds(bool(context["bgp"].bfd), version)
    started = {k.NAME for k in kinds}
    daemons = [(k.NAME, True) for k in kinds if k is not Mgmtd]
    daemons += [(name, False) for name in ("bgpd", "bfdd") if name not in started]
    values = dict(context, mgmtd=version.mgmtd, frr_version=version.text, daemons=daemons)
    return {"frr.conf": integrated_config(context, version),
            "vtysh.conf": _ENV.get_template("vtysh-integrated.conf.j2").render(**values),
            "daemons": _ENV.get_template("daemons.j2").render(**values)}
