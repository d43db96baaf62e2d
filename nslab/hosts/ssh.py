"""Reaching the other hosts of a lab across machines: one multiplexed OpenSSH
connection per host (``ControlMaster``), a remote command quoted one argument
at a time (the remote shell sees exactly the arguments given), and
background processes under a small shell lifeline that stops them when this
side closes their stdin or the session dies. Also ``nslab clean --hosts``:
``nslab clean`` on every host.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import IO, Dict, List, Mapping, Optional, Sequence, Union

from ..errors import CommandError, LabError
from ..model.multihost import parse_hosts
from ..runtime.proc import Process, Result, stop_all

#: How long an idle SSH master connection outlives its last use (a crashed
#: controller's connections go away on their own).
CONTROL_PERSIST_S = 300
#: How a background process runs on its host (``sh -c LIFELINE name GRACE CMD...``):
#: in a session of its own, its group signalled SIGINT, SIGTERM, then SIGKILL
#: (GRACE seconds apart) once this shell's stdin reaches its end, which is
#: when the controller closes it or its SSH session ends; the shell exits
#: with the command's status.
LIFELINE = """g=$1; shift
exec 3<&0
setsid "$@" </dev/null &
c=$!
{ cat <&3 >/dev/null 2>&1
  for s in INT TERM; do kill -s $s -- -$c 2>/dev/null || exit 0; sleep $g; done
  kill -s KILL -- -$c 2>/dev/null; } >/dev/null 2>&1 &
w=$!
exec 3<&-
wait $c; rc=$?
kill $w 2>/dev/null
exit $rc"""

def default_remote_nslab() -> str:
    """The ``nslab`` command to run on the other hosts: the one next to this
    Python (the same checkout or venv path on every host), else ``nslab``."""
    cand = os.path.join(os.path.dirname(sys.executable), "nslab")
    return cand if os.path.exists(cand) else "nslab"


class Ssh:
    """One host reached with OpenSSH through a multiplexed master connection.

    Args:
        dest: the SSH destination (``[user@]host``; the user's SSH
            configuration applies).
        control_dir: where the master's socket lives.
        config: an ``ssh -F`` file, else the user's own configuration.
    """

    def __init__(self, dest: str, control_dir: str, config: Optional[str] = None) -> None:
        if not shutil.which("ssh"):
            raise LabError("a lab across hosts needs OpenSSH's client (apt install openssh-client)")
        self.dest = dest
        self.config = config
        self.control = os.path.join(control_dir, "%C")

    def _opts(self) -> List[str]:
        opts = ["-F", self.config] if self.config else []
        return opts + ["-o", "BatchMode=yes", "-o", f"ControlPath={self.control}",
                       "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=6"]

    def connect(self, timeout: float = 60.0) -> None:
        """Open the master connection (in the background, its output to /dev/null:
        a master that kept the caller's pipes would hold every later call open)."""
        argv = ["ssh", *self._opts(), "-o", "ControlMaster=yes",
                "-o", f"ControlPersist={CONTROL_PERSIST_S}", "-f", "-N", self.dest]
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, timeout=timeout,
                                 start_new_session=True)
        except subprocess.TimeoutExpired:
            raise LabError(f"ssh {self.dest}: no connection after {timeout:.0f} s") from None
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise LabError(f"ssh {self.dest}: {last}")

    def close(self) -> None:
        subprocess.run(["ssh", *self._opts(), "-O", "exit", self.dest], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30, check=False)

    def argv(self, remote: Sequence[str]) -> List[str]:
        """``ssh ... DEST -- 'quoted remote argv'`` (the remote shell sees each
        argument exactly as given)."""
        return ["ssh", *self._opts(), "-o", "ControlMaster=no", "-T", self.dest, "--",
                " ".join(shlex.quote(str(a)) for a in remote)]


class RemoteProcess(Process):
    """A background process in a node on another host, under :data:`LIFELINE`:
    its stdin is the lifeline, so closing it (or this side's SSH dying) stops
    the process there."""

    def __init__(self, argv: Sequence[str], *, where: str = "", name: str = "",
                 stdout: Union[int, IO, None] = subprocess.PIPE,
                 stderr: Union[int, IO, None] = subprocess.PIPE) -> None:
        self.argv = list(argv)
        self.where = where
        self.name = name or "remote"
        self.popen = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=stdout,
                                      stderr=stderr, text=True, start_new_session=True)

    def wait(self, timeout: Optional[float] = None) -> Result:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            out, err = self.popen.communicate()
            raise CommandError(self.argv, None, out or "", f"timed out after {timeout} s",
                               self.where) from None
        out, err = self.popen.communicate()
        return Result(self.argv, self.popen.returncode, out or "", err or "")

    def close_lifeline(self) -> None:
        """Close stdin (``communicate`` must not touch it afterwards)."""
        stdin, self.popen.stdin = self.popen.stdin, None
        if stdin is not None:
            try:
                stdin.close()
            except OSError:
                pass

    def stop(self, grace: float = 2.0) -> Optional[int]:
        """Close the lifeline: the process gets SIGINT, SIGTERM, then SIGKILL
        (``grace`` / 2 apart) and the session ends with its exit status."""
        if self.popen.poll() is not None:
            return self.popen.returncode
        self.close_lifeline()
        try:
            return self.popen.wait(timeout=grace + 10)
        except subprocess.TimeoutExpired:
            return super().stop(grace)


def stop_all_remote(procs: Sequence[Process]) -> None:
    """Close every remote process's lifeline at once, then wait (one grace for all)."""
    remote = [p for p in procs if isinstance(p, RemoteProcess)]
    for p in remote:
        p.close_lifeline()
    deadline = time.monotonic() + 15
    for p in remote:
        try:
            p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    stop_all(list(procs))


def clean_hosts(hosts: Union[str, Mapping[str, str]], args: Sequence[str] = (),
                ssh_config: Optional[str] = None,
                remote_nslab: Optional[str] = None) -> Dict[str, Result]:
    """``nslab clean ARGS`` on every host at once, through SSH; ``{host: result}``
    in the hosts' order. One host that cannot be reached, or whose clean fails
    or hangs (300 s), does not stop the others."""
    from concurrent.futures import ThreadPoolExecutor
    parsed = parse_hosts(hosts) if isinstance(hosts, str) else dict(hosts)
    nslab = remote_nslab or default_remote_nslab()
    with tempfile.TemporaryDirectory(prefix="nslab-clean-") as d:
        def one(host: str) -> Result:
            ssh = Ssh(host, d, ssh_config)
            argv = ssh.argv([nslab, "clean", *args])
            try:
                ssh.connect()
            except LabError as exc:
                return Result(argv, 255, "", str(exc))
            try:
                res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                     text=True, timeout=300)
                return Result(argv, res.returncode, res.stdout, res.stderr)
            except subprocess.TimeoutExpired:
                return Result(argv, 124, "", "nslab clean timed out after 300 s")
            finally:
                ssh.close()
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(parsed))),
                                thread_name_prefix="nslab-clean") as pool:
            results = list(pool.map(one, parsed))
    return dict(zip(parsed, results))
