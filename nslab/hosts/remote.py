"""Labs that span machines: the controller, and its view of each host's agent (issue 17).

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
session closes. Nothing here invents a protocol: SSH carries the commands
(:mod:`nslab.hosts.ssh`), the kernel's VXLAN carries the links. What each
host runs is :mod:`nslab.hosts.agent`.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ..errors import CommandError, InputError, LabError
from ..model.multihost import parse_hosts, place, tunnels
from ..model.naming import check_run_id, new_run_id
from ..model.topo import Topology
from ..runtime import grants
from ..runtime.extension import registered as registered_extensions
from ..runtime.clean import remove_controller, write_controller
from ..runtime.grants import HostGrants
from ..runtime.lab import TORN_DOWN
from ..runtime.node import LabNode
from ..runtime.proc import TAG_ENV, Process, Result, ip_json_routes, process_start_time
from ..runtime.sshcontrol import make_control_dir
from .ssh import LIFELINE, RemoteProcess, Ssh, default_remote_nslab, stop_all_remote

log = logging.getLogger(__name__)

ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Seconds an agent has to build its part and to tear it down.
AGENT_UP_TIMEOUT = 600.0
AGENT_DOWN_TIMEOUT = 180.0


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
        :data:`~nslab.hosts.ssh.LIFELINE`, which stops it when this side closes
        its stdin or the session ends."""
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
        #: stand-ins of the extensions the hosts built (``lab.extension(name)``)
        self._stand_ins: Dict[str, Any] = {}
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
        if name in self._stand_ins:
            return self._stand_ins[name]
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
            facts: Dict[str, List[Tuple[Dict[str, Any], float]]] = {}
            for host, agent in self.agents.items():
                ev = agent.read_event(AGENT_UP_TIMEOUT)
                got = time.monotonic()
                agent.ready = ev
                for name, info in ev["nodes"].items():
                    node = RemoteNode(self, name, info["kind"], info["netns"], host)
                    node.intfs, node.addrs = list(info["intfs"]), dict(info["addrs"])
                    self.nodes[name] = node
                for ext_name, told in (ev.get("extensions") or {}).items():
                    facts.setdefault(ext_name, []).append((told, got))
                if ev.get("datapath"):
                    self.datapath = ev["datapath"]
            self.nodes = {n: self.nodes[n] for n in self.topology.nodes if n in self.nodes}
            exts = registered_extensions()
            for ext_name, told in facts.items():
                if ext_name in exts:
                    stand_in = exts[ext_name].remote(self, told)
                    if stand_in is not None:
                        self._stand_ins[ext_name] = stand_in
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


