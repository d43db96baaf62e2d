"""Capturing a node on another host of a lab across machines.

``nslab capture TARGET`` run on the controller of a lab across machines
(``nslab topo up ... --hosts``), for a node on another host, runs ``nslab
capture TARGET RUN -w -`` on that host through the lab's SSH connection and
writes the pcapng it streams back into ``-w FILE`` (or stdout). The remote
``nslab capture`` is an ordinary one: it checks the target against its part
of the lab and runs dumpcap in the node's namespace, tagged with the run, so
that host's teardown and ``nslab clean`` stop it.

The controller's record (:func:`nslab.runtime.clean.controller_path`, written by
:class:`nslab.hosts.remote.MultiLab` while the lab is up) says which host has each
node, its SSH destination, the ``ssh -F`` file, the nslab command there and
the lab's ``ControlMaster`` directory; it is data, checked before use.

SSH joins the remote arguments into one shell command line, so every one is
checked against its pattern first (target, run id, printable filter with no
line break, numbers) and then quoted one by one (:meth:`nslab.hosts.ssh.Ssh.argv`).
The remote command runs under :data:`nslab.hosts.ssh.LIFELINE`: when this side
closes the session's stdin (Ctrl-C, the reader gone, the lab gone) or the
session dies, the remote ``nslab capture`` gets SIGINT (it stops dumpcap,
which finishes its stream), then SIGTERM and SIGKILL.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from typing import IO, Any, List, Mapping, Optional, Union

from .capture import HOP_ENV, Keep, Target, check_filter, parse_target
from .capturerun import CaptureProcess
from ..errors import InputError, LabError
from ..model.multihost import HOST_RE
from ..model.naming import check_run_id
from ..hosts.ssh import LIFELINE, RemoteProcess, Ssh

#: What the remote ``nslab capture`` prints once dumpcap captures.
READY = "capturing "
#: Seconds between the lifeline's SIGINT, SIGTERM and SIGKILL on the remote side
#: (the remote ``nslab capture`` gives its dumpcap 4 s to finish).
GRACE = 5.0
_ERROR = "nslab: error: "
_DONE_RE = re.compile(r"^([0-9]+) packets? captured on .*?(?: \(([^()]*)\))?$")
_MAX_PATH = 4096


@dataclass(frozen=True)
class RemoteHost:
    """Where a node of a lab across machines is, as its controller recorded it."""

    run: str
    node: str
    dest: str
    nslab: str
    ssh_config: Optional[str] = None
    control_dir: Optional[str] = None


def _path(value: Any, what: str, run: str) -> Optional[str]:
    if value is None:
        return None
    if (not isinstance(value, str) or not value or len(value) > _MAX_PATH
            or not value.isprintable() or value.startswith("-")):
        raise LabError(f"controller record of lab {run}: {what} is not a path")
    return value


def host_of(record: Mapping[str, Any], run: str, node: str) -> RemoteHost:
    """The host that has ``node`` in the controller's ``record`` of lab ``run``;
    one line if the record does not list the node or is not one nslab wrote."""
    check_run_id(run)
    if not isinstance(record, Mapping) or record.get("run") != run:
        raise LabError(f"controller record of lab {run}: not this lab's")
    placement, hosts = record.get("placement"), record.get("hosts")
    if not isinstance(placement, Mapping) or not isinstance(hosts, Mapping):
        raise LabError(f"controller record of lab {run}: no placement of its nodes")
    if node not in placement:
        names = sorted(str(n) for n in placement)
        shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
        raise InputError(f"capture target: no node {node!r} in lab {run} (nodes: {shown})")
    dest = placement[node]
    if not isinstance(dest, str) or not HOST_RE.fullmatch(dest) or dest not in hosts:
        raise LabError(f"controller record of lab {run}: {node}'s host is not one of the "
                       "lab's SSH destinations")
    nslab = _path(record.get("remote_nslab"), "remote_nslab", run)
    if nslab is None:
        raise LabError(f"controller record of lab {run}: no remote_nslab")
    config = _path(record.get("ssh_config"), "ssh_config", run)
    control = _path(record.get("control_dir"), "control_dir", run)
    for p, what in ((config, "ssh_config"), (control, "control_dir")):
        if p is not None and not os.path.isabs(p):
            raise LabError(f"controller record of lab {run}: {what} is not an absolute path")
    return RemoteHost(run, node, dest, nslab, config, control)


def remote_argv(host: RemoteHost, target: Target, *, count: Optional[int] = None,
                duration: Optional[float] = None, filt: Optional[str] = None,
                keep: Keep = Keep(), as_wire: bool = False, grace: float = GRACE) -> List[str]:
    """The command run on ``host`` (one argv element each, for
    :meth:`nslab.hosts.ssh.Ssh.argv` to quote): ``nslab capture TARGET RUN -w -
    [-c N] [--duration S] -s N|--full --max-size BYTES|none [--as-wire] [-f
    FILTER]`` under the lifeline (what ``keep`` keeps is said, never left to
    the other host's defaults). Every element is checked first: what the
    remote shell sees can only be these arguments."""
    text = str(target)
    if parse_target(text) != target or target.node != host.node:
        raise InputError(f"capture target {text!r}: not a target of node {host.node}")
    cmd = ["env", f"{HOP_ENV}=1", host.nslab, "capture", text, check_run_id(host.run), "-w", "-"]
    if count is not None:
        if isinstance(count, bool) or int(count) != count or not 1 <= count <= 10**12:
            raise InputError(f"-c {count}: a packet count from 1")
        cmd += ["-c", str(int(count))]
    if duration is not None:
        if not (math.isfinite(duration) and 0 < duration <= 86400 * 366):
            raise InputError(f"--duration {duration}: a number of seconds above 0")
        cmd += ["--duration", repr(float(duration))]
    snaplen, most = keep.snaplen, keep.max_bytes
    if snaplen is None:
        cmd += ["--full"]
    else:
        if isinstance(snaplen, bool) or int(snaplen) != snaplen or not 64 <= snaplen <= 262144:
            raise InputError(f"-s {snaplen}: 64 to 262144 bytes")
        cmd += ["-s", str(int(snaplen))]
    if most is not None and (isinstance(most, bool) or int(most) != most or most < 1):
        raise InputError(f"--max-size {most}: a number of bytes")
    cmd += ["--max-size", "none" if most is None else str(int(most))]
    if as_wire:
        cmd += ["--as-wire"]
    if filt is not None:
        cmd += ["-f", check_filter(filt)]  # printable: no line break reaches the shell
    return ["sh", "-c", LIFELINE, "nslab-capture", f"{grace:g}"] + cmd


def control_dir_ok(path: Optional[str]) -> bool:
    """May ``path`` hold the SSH master's socket for us: a real directory of
    this user's that nobody else can enter (as :class:`~nslab.hosts.remote.MultiLab`
    makes it)?"""
    if not path:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o077)


class RemoteCapture(CaptureProcess):
    """``nslab capture`` running on another host through SSH, its pcapng
    going to ``stdout`` (a file opened through :mod:`nslab.safeio`, or None:
    this process's stdout). Offers what :class:`nslab.traffic.capturerun.Capture`
    does (their :class:`~nslab.traffic.capturerun.CaptureProcess`); :meth:`stop`
    closes the lifeline: the remote capture gets SIGINT and finishes its
    stream, and the session is killed if it has not ended ``grace`` + 10 s later.

    Args:
        host: where the node is (:func:`host_of`).
        target: what to capture there.
        remote: the remote command (:func:`remote_argv`).
        stdout: where the stream goes.
    """

    STOP_GRACE = 2 * GRACE
    READY_LINE = READY

    def __init__(self, host: RemoteHost, target: Target, remote: List[str],
                 stdout: Union[IO, int, None] = None) -> None:
        self.host = host
        self.label = f"{target} on {host.dest}"
        self._tmp: Optional[str] = None
        control = host.control_dir
        if control is None or not control_dir_ok(control):  # the lab's master is gone: a connection of our own
            control = self._tmp = tempfile.mkdtemp(prefix=f"nslab-{host.run}-capture-")
        argv = Ssh(host.dest, control, host.ssh_config).argv(remote)
        try:
            self.proc = RemoteProcess(argv, where=self.label, name="nslab capture",
                                      stdout=stdout, stderr=subprocess.PIPE)
        except BaseException:
            self._cleanup()
            raise
        self._read_stderr("capture-ssh-stderr")

    def _kept(self, line: str) -> str:
        return "".join(c if c.isprintable() else "?" for c in line)

    def _cleanup(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the remote dumpcap captures; raise its one line if it
        ended first (a target that host does not have, a filter dumpcap
        refuses, no SSH connection)."""
        if not self._ready.wait(timeout):
            self.stop()
            raise LabError(f"capture of {self.label} did not start within {timeout:g} s")
        if any(l.startswith(READY) for l in self.lines):
            return
        self._ended(self.proc.popen.wait())
        raise self.failure()

    def message(self) -> str:
        """The remote ``nslab capture``'s error line, else (no SSH session) ssh's own."""
        said = [l[len(_ERROR):].strip() for l in self.lines if l.startswith(_ERROR)]
        if not said and self.proc.popen.returncode not in (None, 0):
            said = [l.strip() for l in self.lines if l.strip()][-1:]
        return " ".join(said)[:400]

    def failure(self) -> LabError:
        """The error the remote side reported (its input errors stay input errors)."""
        rc = self.proc.popen.returncode
        msg = self.message() or f"exit {rc}"
        if rc == 2:
            return InputError(f"capture on {self.host.dest}: {msg}")
        if rc == 255 and not any(l.startswith(_ERROR) for l in self.lines):
            return LabError(f"capture of {self.label}: no SSH session: {msg}")
        return LabError(f"capture on {self.host.dest}: {msg}")

    def _done(self) -> Optional[re.Match]:
        for line in reversed(self.lines):
            m = _DONE_RE.match(line)
            if m:
                return m
        return None

    @property
    def packets(self) -> Optional[int]:
        """How many packets the remote dumpcap wrote (once it has ended), if it said."""
        m = self._done()
        return int(m.group(1)) if m else None

    @property
    def ended(self) -> Optional[str]:
        """Why the remote capture ended, as it said (``ended``, ``stopped: ...``)."""
        m = self._done()
        return m.group(2) if m else None
