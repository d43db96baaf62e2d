"""Labs that span machines: the controller and the agent (issue 17).

The controller (``nslab topo up ... --hosts a,b``, ``nslab run STUDY --hosts
a,b``) places the topology's nodes on the hosts (:func:`nslab.model.multihost.place`),
opens one multiplexed OpenSSH connection per host (``ControlMaster``), and
starts ``nslab agent up`` on each through it, with the lab as JSON on stdin.
Each agent builds its part with an ordinary :class:`~nslab.runtime.lab.Lab` (links
with an end on another host become VXLAN devices, see :mod:`nslab.runtime.plan`),
answers one line, and keeps the part up while its stdin is open: when the
controller says ``down``, exits, or dies (SSH closes the session), the agent
tears its part down. ``nslab clean --hosts a,b`` runs ``nslab clean`` on each
host through the same kind of connection.

Commands in a node run on its host in the node's namespace, tagged with the
run (``env NSLAB_RUN=... ip netns exec ...``); background processes run under
a small shell lifeline that stops them when the controller's side of the
session closes. Nothing here invents
a protocol: SSH carries the commands, the kernel's VXLAN carries the links.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ..runtime import grants
from ..runtime.clean import remove_controller, write_controller
from ..runtime.sshcontrol import make_control_dir
from ..errors import CommandError, InputError, LabError
from ..runtime.grants import HostGrants
from ..model.multihost import Part, parse_hosts, place, tunnels
from ..runtime.node import LabNode
from ..runtime.proc import TAG_ENV, Process, Result, process_start_time, stop_all
from ..model.topo import Topology
from ..runtime.lab import TORN_DOWN, Lab
from ..model.multihost import HOST_RE
from ..model.naming import check_run_id
from ..model.naming import new_run_id
from ..runtime.proc import ip_json_routes

log = logging.getLogger(__name__)

#: How long an idle SSH master connection outlives its last use (a crashed
#: controller's connections go away on their own).
CONTROL_PERSIST_S = 300
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
#: Seconds an agent has to build its part and to tear it down.
AGENT_UP_TIMEOUT = 600.0
AGENT_DOWN_TIMEOUT = 180.0


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


class RemoteNode(LabNode):
    """A node built by the agent on another host; commands go through SSH."""

    def __init__(self, lab: "MultiLab", name: str, kind: str, netns: Optional[str],
                 host: str) -> None:
        super().__init__(lab, name, kind, netns)
        self.host = host

    def _exec(self, argv: Sequence[str], env: Optional[Dict[str, str]], watch: bool,
              grace: float = 2.0) -> List[str]:
        """The ssh command line that runs ``argv`` in this node on its host:
        ``env NSLAB_RUN=<run> ip netns exec NS ARGV`` there (no Python starts: under
        TCG, starting one took seconds). A background process runs under
        :data:`LIFELINE`, which stops it when this side closes its stdin or the
        session ends."""
        lab: MultiLab = self.lab  # type: ignore[assignment]
        extra = sorted((env or {}).items())
        for k, _ in extra:
            if not ENV_RE.fullmatch(k):
                raise InputError(f"{self.name}: environment variable {k!r}: not a name")
        # SIGINT back to its default: a background job of a shell starts with it ignored
        cmd = ["env", "--default-signal=INT", f"{TAG_ENV}={lab.run_id}"]
        cmd += [f"{k}={v}" for k, v in extra]
        if self.netns:
            cmd += ["ip", "netns", "exec", self.netns]
        cmd += [str(a) for a in argv]
        if watch:
            cmd = ["sh", "-c", LIFELINE, "nslab-lifeline", str(grace / 2)] + cmd
        return lab.ssh[self.host].argv(cmd)

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: Optional[float] = 60,
            input: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> Result:
        full = self._exec(argv, env, watch=False)
        try:
            res = subprocess.run(full, input=input or "", capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(list(argv), None, str(exc.stdout or ""),
                               f"timed out after {timeout} s", f"{self.name} on {self.host}") from None
        out = Result(list(argv), res.returncode, res.stdout, res.stderr)
        if check and not out.ok:
            raise CommandError(list(argv), res.returncode, res.stdout, res.stderr,
                               f"{self.name} on {self.host}")
        return out

    def popen(self, argv: Sequence[str], *, stdout: Union[int, IO, None] = subprocess.PIPE,
              stderr: Union[int, IO, None] = subprocess.PIPE, env: Optional[Dict[str, str]] = None,
              name: str = "", stdin: Union[int, IO, None] = subprocess.DEVNULL) -> Process:
        if stdin not in (None, subprocess.DEVNULL):
            raise LabError(f"{self.name}: a background process on another host reads no stdin")
        p = RemoteProcess(self._exec(argv, env, watch=True), where=f"{self.name} on {self.host}",
                          name=name or os.path.basename(str(argv[0])), stdout=stdout,
                          stderr=stderr)
        self.lab.processes.append(p)
        return p

    def enter_hint(self) -> str:
        ssh = self.lab.ssh[self.host]  # type: ignore[attr-defined]
        where = f"ip netns exec {self.netns} bash" if self.netns else "(root namespace)"
        return f"ssh {ssh.dest} {where}"


class _RemoteRouter:
    """Enough of an FRR router to ask it questions (``vtysh``) on its host."""

    def __init__(self, node: RemoteNode, vty_dir: str) -> None:
        self.node = node
        self.dir = vty_dir

    def vtysh(self, command: str) -> str:
        return self.node.run(["vtysh", "--vty_socket", self.dir, "-c", command], check=False,
                             timeout=20).stdout


class _RemoteFrr:
    """What studies read of the FRR extension: when the daemons started (on this
    controller's clock) and each router."""

    def __init__(self, started_at: Optional[float], routers: Dict[str, _RemoteRouter]) -> None:
        self.started_at = started_at
        self.routers = routers


class Agent:
    """One host's ``nslab agent up`` session. Its log lines (stderr) go to this
    process's log, prefixed with the host; the last ones explain a failure."""

    def __init__(self, host: str, popen: subprocess.Popen) -> None:
        self.host = host
        self.popen = popen
        self.ready: Dict[str, Any] = {}
        self.tail: List[str] = []
        self._logger = threading.Thread(target=self._forward, daemon=True)
        self._logger.start()

    def _forward(self) -> None:
        for line in self.popen.stderr:  # type: ignore[union-attr]
            line = line.rstrip()
            if line:
                log.info("[%s] %s", self.host, line)
                self.tail = (self.tail + [line])[-20:]

    def read_event(self, timeout: float) -> Dict[str, Any]:
        """The agent's next line (JSON), or an error naming the host and the
        last line of its log."""
        box: List[str] = []
        t = threading.Thread(target=lambda: box.append(self.popen.stdout.readline()),  # type: ignore[union-attr]
                             daemon=True)
        t.start()
        t.join(timeout)
        line = box[0] if box else None
        if not line:
            why = f"no answer after {timeout:.0f} s" if line is None else "the session ended"
            self._logger.join(2)
            raise LabError(f"agent on {self.host}: {why}{self._last_log()}")
        try:
            ev = json.loads(line)
        except ValueError:
            raise LabError(f"agent on {self.host}: unexpected output {line.strip()[:200]!r}") from None
        if ev.get("event") == "error":
            raise LabError(f"agent on {self.host}: {ev.get('message')}")
        return ev

    def _last_log(self) -> str:
        return f" ({self.tail[-1]})" if self.tail else ""

    def send(self, text: str) -> None:
        try:
            self.popen.stdin.write(text)  # type: ignore[union-attr]
            self.popen.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            pass


class MultiLab:
    """A lab built across several hosts. Used like :class:`~nslab.runtime.lab.Lab`:
    both are a :class:`~nslab.runtime.node.LabLike`.

    Args:
        topology: the whole lab.
        hosts: ``{ssh destination: underlay IPv4 address}`` (see
            :func:`nslab.model.multihost.parse_hosts`) or the ``--hosts`` text.
        placement: nodes pinned to a host; the others are placed automatically.
        run_id: the run id every host uses.
        ssh_config: an ``ssh -F`` file.
        remote_nslab: the ``nslab`` command on the other hosts.
        underlay_mtu: the hosts' network MTU (tunnelled links get 50 bytes less).
        host_grants: as :class:`~nslab.runtime.lab.Lab`'s (checked here, before any host is
            reached; the agents then trust the part they are sent).
    """

    #: nodes live on other hosts (see :class:`~nslab.runtime.node.LabLike`)
    remote = True

    def __init__(self, topology: Topology, hosts: Union[str, Mapping[str, str]],
                 placement: Optional[Mapping[str, str]] = None, run_id: Optional[str] = None,
                 ssh_config: Optional[str] = None, remote_nslab: Optional[str] = None,
                 underlay_mtu: int = 1500, host_grants: Optional[HostGrants] = None) -> None:
        self.topology = topology.validate()
        grants.check(self.topology, host_grants)
        self.hosts = parse_hosts(hosts) if isinstance(hosts, str) else dict(hosts)
        if len(self.hosts) < 1:
            raise InputError("--hosts: no host given")
        self.run_id = check_run_id(run_id) if run_id else new_run_id()
        self.placement = place(self.topology, list(self.hosts), placement)
        self.underlay_mtu = underlay_mtu
        self.tunnels = tunnels(self.topology, self.placement, underlay_mtu)
        self.ssh_config = ssh_config
        self.remote_nslab = remote_nslab or default_remote_nslab()
        self.nodes: Dict[str, RemoteNode] = {}
        self.processes: List[Process] = []
        self.agents: Dict[str, Agent] = {}
        self.ssh: Dict[str, Ssh] = {}
        self.build_seconds = 0.0
        self.datapath: Optional[str] = None
        self._frr: Optional[_RemoteFrr] = None
        self._dir: Optional[str] = None
        self._started = False
        self._recorded = False

    # -- like Lab -----------------------------------------------------------------
    def __enter__(self) -> "MultiLab":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __getitem__(self, name: str) -> RemoteNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise InputError(f"no node {name!r} in this lab (nodes: {', '.join(self.nodes)})") from None

    def __iter__(self) -> Iterator[RemoteNode]:
        return iter(self.nodes.values())

    @property
    def workdir(self) -> str:
        """This controller's scratch directory (the hosts keep their own)."""
        assert self._dir is not None, "lab not started"
        return self._dir

    def extension(self, name: str) -> Any:
        if name == "frr" and self._frr is not None:
            return self._frr
        raise LabError(f"a lab across hosts offers no {name} extension here")

    def run_each(self, nodes: List[str], argv: List[str], where: str = "") -> List[Result]:
        """``argv`` in each node, all hosts at once."""
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(nodes)))) as pool:
            return list(pool.map(lambda n: self[n].run(argv, check=True), nodes))

    def route_tables(self, nodes: List[str]) -> List[Dict[str, int]]:
        """Each node's IPv4 main table as ``{prefix: nexthops}`` (``ip -j route``
        over SSH); in the order of ``nodes``."""
        return [ip_json_routes(r.stdout) for r in self.run_each(nodes, ["ip", "-j", "route", "show"])]

    def describe(self, max_intfs: Optional[int] = None) -> List[Tuple[str, str, str, str]]:
        """As :meth:`nslab.runtime.lab.Lab.describe`, with each node's host."""
        return [(node.name, f"{node.kind} @ {node.host}", node.interfaces_cell(max_intfs),
                 node.enter_hint()) for node in self.nodes.values()]

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        """Connect to every host, start every agent, wait until every part is up.
        On any failure, every part built is torn down."""
        if self._started:
            raise LabError("lab already started")
        self._dir = make_control_dir(self.run_id)
        self._started = True
        t0 = time.monotonic()
        try:
            self.ssh = {h: Ssh(h, self._dir, self.ssh_config) for h in self.hosts}
            with ThreadPoolExecutor(max_workers=len(self.ssh)) as pool:
                list(pool.map(lambda s: s.connect(), self.ssh.values()))
            log.info("connected to %s", ", ".join(self.hosts))
            topo = self.topology.to_dict()
            for host in self.hosts:
                msg = {"run_id": self.run_id, "host": host, "topology": topo,
                       "placement": self.placement, "underlay": self.hosts,
                       "underlay_mtu": self.underlay_mtu}
                popen = subprocess.Popen(
                    self.ssh[host].argv([self.remote_nslab, "agent", "up"]),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, start_new_session=True)
                agent = Agent(host, popen)
                self.agents[host] = agent
                agent.send(json.dumps(msg) + "\n")
            frr_ages = []
            for host, agent in self.agents.items():
                ev = agent.read_event(AGENT_UP_TIMEOUT)
                got = time.monotonic()
                agent.ready = ev
                for name, info in ev["nodes"].items():
                    node = RemoteNode(self, name, info["kind"], info["netns"], host)
                    node.intfs, node.addrs = list(info["intfs"]), dict(info["addrs"])
                    self.nodes[name] = node
                if ev.get("frr_started_ago") is not None:
                    frr_ages.append(got - float(ev["frr_started_ago"]))
                if ev.get("datapath"):
                    self.datapath = ev["datapath"]
            self.nodes = {n: self.nodes[n] for n in self.topology.nodes if n in self.nodes}
            if frr_ages:
                self._frr = _RemoteFrr(min(frr_ages), {
                    n: _RemoteRouter(self.nodes[n], ev_dir)
                    for host, agent in self.agents.items()
                    for n, ev_dir in agent.ready.get("frr_dirs", {}).items()})
            self._record()
        except BaseException:
            log.info("lab %s across %s failed to come up; tearing down", self.run_id,
                     ", ".join(self.hosts))
            self.stop()
            raise
        self.build_seconds = time.monotonic() - t0
        log.info("lab %s up across %s in %.2f s: %d tunnels", self.run_id, ", ".join(self.hosts),
                 self.build_seconds, len(self.tunnels))

    def controller_record(self) -> Dict[str, Any]:
        """What this controller keeps about the lab on its machine (see
        :meth:`_record`): its process, each node's host, how hosts are reached."""
        return {"run": self.run_id, "pid": os.getpid(),
                "pid_start": process_start_time(os.getpid()), "created": time.time(),
                "topology": self.topology.name, "hosts": dict(self.hosts),
                "placement": dict(self.placement),
                "ssh_config": os.path.abspath(self.ssh_config) if self.ssh_config else None,
                "remote_nslab": self.remote_nslab, "control_dir": self._dir}

    def _record(self) -> None:
        """Keep, in this machine's state directory while the lab is up, which host
        has each node and how it is reached (:func:`nslab.runtime.clean.controller_path`):
        ``nslab capture`` run here captures a node on another host through it.
        Only root keeps it (the state directory is root's); without it the lab
        works, and captures are taken on the node's host."""
        if os.geteuid() != 0:
            log.info("lab %s: not root, so no controller record: nslab capture here will not "
                     "find its nodes on other hosts", self.run_id)
            return
        try:
            write_controller(self.run_id, self.controller_record())
        except (OSError, LabError) as exc:
            log.warning("lab %s: no controller record (%s): nslab capture here will not find "
                        "its nodes on other hosts", self.run_id, exc)
            return
        self._recorded = True

    def stop(self) -> List[str]:
        """Stop the lab's processes, tell every agent to tear down and wait for
        it, close the connections. Returns the problems met."""
        if not self._started:
            return []
        problems: List[str] = []
        if self._recorded:
            try:
                remove_controller(self.run_id)
            except (OSError, LabError) as exc:
                problems.append(f"controller record: {exc}")
            self._recorded = False
        try:
            stop_all_remote(self.processes)
        except Exception as exc:  # noqa: BLE001 - teardown goes on
            problems.append(f"processes: {exc}")
        for agent in self.agents.values():
            agent.send("down\n")
            try:
                agent.popen.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
        for host, agent in self.agents.items():
            # an agent still building answers `ready` (or an error) first: it
            # reads `down` only once its part is up, then tears it down
            try:
                while True:
                    ev = agent.read_event(AGENT_DOWN_TIMEOUT if agent.ready else AGENT_UP_TIMEOUT)
                    if ev.get("event") == "ready":
                        agent.ready = ev
                        continue
                    problems += [f"{host}: {p}" for p in ev.get("problems", [])]
                    break
            except LabError as exc:
                if agent.ready:
                    problems.append(str(exc))
            try:
                agent.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.popen.kill()
                problems.append(f"{host}: the agent's session did not end")
        for s in self.ssh.values():
            try:
                s.close()
            except Exception as exc:  # noqa: BLE001 - teardown goes on
                problems.append(f"{s.dest}: {exc}")
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._started = False
        for prob in problems:
            log.warning("teardown of %s: %s", self.run_id, prob)
        TORN_DOWN.append(self.run_id)
        return problems


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
    """``nslab clean ARGS`` on every host, through SSH; ``{host: result}``."""
    parsed = parse_hosts(hosts) if isinstance(hosts, str) else dict(hosts)
    nslab = remote_nslab or default_remote_nslab()
    out: Dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="nslab-clean-") as d:
        for host in parsed:  # one host that cannot be reached does not stop the others
            ssh = Ssh(host, d, ssh_config)
            argv = ssh.argv([nslab, "clean", *args])
            try:
                ssh.connect()
            except LabError as exc:
                out[host] = Result(argv, 255, "", str(exc))
                continue
            try:
                res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                     text=True, timeout=300)
                out[host] = Result(argv, res.returncode, res.stdout, res.stderr)
            except subprocess.TimeoutExpired:
                out[host] = Result(argv, 124, "", "nslab clean timed out after 300 s")
            finally:
                ssh.close()
    return out


# -- the agent (runs on each host) ------------------------------------------------------
def agent_up(stdin: IO[str], stdout: IO[str]) -> int:
    """``nslab agent up``: build this host's part of a lab read from ``stdin``
    (one JSON line), answer one line, keep it up until ``down`` or end of input,
    tear it down, answer one line."""
    from pydantic import BaseModel, ConfigDict, ValidationError


    class Request(BaseModel):
        model_config = ConfigDict(extra="forbid")
        run_id: str
        host: str
        topology: Dict[str, Any]
        placement: Dict[str, str]
        underlay: Dict[str, str]
        underlay_mtu: int = 1500

    def say(ev: Dict[str, Any]) -> None:
        stdout.write(json.dumps(ev) + "\n")
        stdout.flush()

    try:
        raw = stdin.readline()
        req = Request.model_validate_json(raw)
        check_run_id(req.run_id)
        if not HOST_RE.fullmatch(req.host) or req.host not in req.underlay:
            raise InputError(f"host {req.host!r} is not one of the lab's hosts")
        topo = Topology.from_dict(req.topology)
        underlay = parse_hosts(",".join(f"{h}={a}" for h, a in req.underlay.items()))
        placement = place(topo, list(underlay), req.placement)
        part = Part(req.host, placement, underlay,
                    tuple(tunnels(topo, placement, req.underlay_mtu)))
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in e.get("loc", ()))
        say({"event": "error", "message": f"bad request: {where}: {e.get('msg')}"})
        return 2
    except (ValueError, LabError) as exc:
        say({"event": "error", "message": f"bad request: {str(exc).splitlines()[0]}"})
        return 2
    log.info("agent %s: building %d of %d nodes, %d tunnels", req.host,
             sum(1 for n in topo.nodes if part.is_local(n)), len(topo.nodes),
             sum(1 for t in part.tunnels if req.host in (t.host_a, t.host_b)))
    lab = Lab(topo, run_id=req.run_id, part=part)
    try:
        lab.start()
    except BaseException as exc:  # noqa: BLE001 - reported in one line
        say({"event": "error", "message": f"{type(exc).__name__}: {exc}".splitlines()[0]})
        return 1
    try:
        nodes = {n.name: {"kind": n.kind, "netns": n.netns, "intfs": n.intfs, "addrs": n.addrs}
                 for n in lab}
        ev: Dict[str, Any] = {"event": "ready", "host": req.host, "pid": os.getpid(),
                              "nodes": nodes, "build_s": lab.build_seconds,
                              "datapath": lab.datapath}
        frr = lab.extensions.get("frr")
        if frr is not None and getattr(frr, "started_at", None) is not None:
            ev["frr_started_ago"] = time.monotonic() - frr.started_at  # type: ignore[attr-defined]
            ev["frr_dirs"] = {n: r.dir for n, r in frr.routers.items()}  # type: ignore[attr-defined]
        say(ev)
        try:
            for line in stdin:
                if line.strip() == "down":
                    break
        except KeyboardInterrupt:
            pass
    finally:
        problems = lab.stop()
    say({"event": "down", "problems": problems})
    return 0
