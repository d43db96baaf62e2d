"""Running checks against a running lab: ``nslab check``, and each stage of
``nslab grade``.

A check runs in its node's namespace, from this process (any process as
root, not only the lab's own: the lab is found by its journal and the
topology it left beside it), each command an argv list tagged with the lab's
run (its teardown and ``nslab clean`` stop what a check left running). Each
try is judged by :mod:`nslab.traffic.checkeval` (ping, route, interface,
throughput) or by the lab extension that answers for the check's kind
(FRR's ``bgp`` and ``bfd``: :meth:`Extension.judge
<nslab.runtime.extension.Extension.judge>`), found through the registry,
never imported. A check with ``within: T`` is tried every ``every`` seconds
until it holds or ``T`` seconds have passed, then fails with its last
difference (FRR topotests' ``run_and_expect``).

The checks of a stage run at once (a few threads: they wait on their
tools), except throughput checks, which run one at a time after the others:
each would take the others' bandwidth.
"""
from __future__ import annotations

import ipaddress
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import LabError
from ..model.checks import CannotRun, Outcome, StagePlan
from ..model.topo import Topology
from ..runtime import clean, extension
from ..runtime.proc import Process, Result, in_each_namespace, run
from ..store.checkreport import ERROR, FAIL, PASS, CheckResult
from . import checkeval
from .capturerun import lab_map
from .iperf import client_argv, parse

log = logging.getLogger(__name__)

#: Threads that run a stage's checks at once.
WORKERS = 8
#: The port of a throughput check's iperf server.
IPERF_PORT = 5801


class NoSuchNode(CannotRun):
    """A check names a node the lab does not have here: trying again will not help."""


@dataclass
class NodeRef:
    """A node of a running lab (a :class:`~nslab.runtime.extension.CheckNode`)."""

    run_id: str
    name: str
    netns: Optional[str]
    workdir: str

    def run(self, argv: List[str], timeout: float) -> Result:
        """``argv`` in the node's namespace, forked from a thread inside it,
        tagged with the run; never raises on a non-zero exit."""
        return in_each_namespace([self.netns], lambda _: run(
            argv, run_id=self.run_id, check=False, timeout=timeout, where=self.name),
            f"check-{self.name}")[0]


@dataclass
class LabView:
    """A running lab as checks see it: its topology, where each of its nodes
    is on this host (a namespace, or None: the root one) and the devices of
    the nodes in the root namespace (OVS switches' ports)."""

    run_id: str
    topology: Optional[Topology]
    netns: Dict[str, Optional[str]]
    ports: Dict[str, Dict[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, run_id: str) -> "LabView":
        m = lab_map(run_id, [])
        return cls(run_id, clean.read_topology(run_id), dict(m.netns),
                   {n: dict(p) for n, p in m.ports.items()})

    def node(self, name: str) -> NodeRef:
        if name not in self.netns:
            have = ", ".join(list(self.netns)[:12]) or "none"
            raise NoSuchNode(f"no node {name!r} in lab {self.run_id} on this host (nodes: "
                             f"{have})")
        return NodeRef(self.run_id, name, self.netns[name], clean.workdir(self.run_id))

    def address(self, target: str) -> str:
        """A check's ``to``: an address as it is, a node its loopback, else
        its first address (as a study file's flows)."""
        try:
            return str(ipaddress.ip_address(target))
        except ValueError:
            pass
        topo = self.topology
        if topo is None or target not in topo.nodes:
            raise NoSuchNode(f"no node {target!r} in lab {self.run_id}")
        node = topo.nodes[target]
        if node.loopback is not None:
            return str(node.loopback.ip)
        for (name, _), addr in topo.addresses().items():
            if name == target:
                return str(addr.ip)
        raise NoSuchNode(f"{target} has no address in the topology: give one (to: ADDRESS)")

    def device(self, node: str, intf: str) -> str:
        """The device of ``node``'s interface ``intf`` (a root-namespace port's own name)."""
        if self.netns.get(node) is None and intf in self.ports.get(node, {}):
            return self.ports[node][intf]
        return intf


# -- one try ----------------------------------------------------------------------------
def try_once(view: LabView, check: Any) -> Outcome:
    """Run ``check`` once and judge it; :class:`CannotRun` if it cannot be run."""
    kind = check.check
    if kind == "ping":
        node = view.node(check.src)
        address = view.address(check.to)
        res = node.run(checkeval.ping_argv(check, address),
                       timeout=check.count * (check.interval + check.wait) + 10)
        return checkeval.judge_ping(check, address, res.stdout, res.stderr)
    if kind == "route":
        res = view.node(check.node).run(checkeval.route_argv(check), timeout=20)
        if not res.ok:
            raise CannotRun(f"ip route on {check.node}: {_said(res)}")
        return checkeval.judge_route(check, checkeval.parse_json(res.stdout, "ip -j route"))
    if kind == "interface":
        node = view.node(check.node)
        res = node.run(checkeval.interface_argv(view.device(check.node, check.interface)),
                       timeout=20)
        if not res.ok:
            if "does not exist" in res.stderr:
                return checkeval.judge_interface(check, None, res.stderr)
            raise CannotRun(f"ip link on {check.node}: {_said(res)}")
        return checkeval.judge_interface(check, checkeval.parse_json(res.stdout, "ip -j link"))
    if kind == "throughput":
        return _throughput(view, check)
    return _judge_elsewhere(view, check)


def _judge_elsewhere(view: LabView, check: Any) -> Outcome:
    """A kind the core does not judge, by the extension that does."""
    for ext in extension.registered().values():
        if check.check in ext.check_kinds:
            out = ext.judge(view.node(check.node), check)
            if not isinstance(out, Outcome):
                raise CannotRun(f"extension {ext.name} judged {check.check} with "
                                f"{type(out).__name__}, not an outcome")
            return out
    raise NoSuchNode(f"no installed nslab extension judges {check.check} checks (FRR's does: "
                     "is nslab's frr add-on installed?)")


def _throughput(view: LabView, check: Any) -> Outcome:
    """iperf2: a server in ``to`` (on :data:`IPERF_PORT`), the client in ``from``."""
    src, dst = view.node(check.src), view.node(check.to)
    if dst.netns is None:
        raise NoSuchNode(f"{check.to} is a switch in the root namespace: no iperf server there")
    address = str(check.address) if check.address is not None else view.address(check.to)
    server = Process(["iperf", "-s", "-p", str(IPERF_PORT)], netns=dst.netns, run_id=view.run_id,
                     where=check.to, name="iperf-check", direct=True)
    try:
        _wait_listening(dst, IPERF_PORT)
        res = src.run(client_argv(address, time=check.time, parallel=check.streams,
                                  port=IPERF_PORT), timeout=check.time + 30)
        report = parse(res.stdout)
        if res.ok and (report.streams or report.sum):
            return checkeval.judge_throughput(check, report.total_bps)
        return checkeval.judge_throughput(check, None, _said(res))
    finally:
        server.stop(grace=1.0)


def _wait_listening(node: NodeRef, port: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        out = node.run(["ss", "-H", "-tln", f"sport = :{port}"], timeout=10).stdout
        if out.strip():
            return
        if time.monotonic() > deadline:
            raise CannotRun(f"{node.name}: the iperf server did not listen on port {port} "
                            f"within {timeout:g} s")
        time.sleep(0.05)


def _said(res: Result) -> str:
    lines = (res.stderr or res.stdout or "").strip().splitlines()
    return lines[0][:200] if lines else f"exit {res.returncode}"


# -- polling ----------------------------------------------------------------------------
@dataclass
class Polled:
    """How the tries of one check ended: the last outcome (None: the last
    try could not run, ``error`` says why), how many tries, how long."""

    outcome: Optional[Outcome]
    error: Optional[str]
    tries: int
    seconds: float


def poll(attempt: Callable[[], Outcome], within: float, every: float,
         clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> Polled:
    """Call ``attempt`` until it holds or ``within`` seconds have passed (at
    least once), ``every`` seconds apart. A try that cannot run is tried
    again (a daemon still starting), unless it never will (:class:`NoSuchNode`)."""
    t0 = clock()
    deadline = t0 + within
    tries = 0
    while True:
        tries += 1
        outcome: Optional[Outcome] = None
        error: Optional[str] = None
        try:
            outcome = attempt()
        except NoSuchNode as exc:
            return Polled(None, str(exc), tries, clock() - t0)
        except LabError as exc:
            error = str(exc)
        now = clock()
        if (outcome is not None and outcome.ok) or now >= deadline:
            return Polled(outcome, error, tries, now - t0)
        sleep(min(every, max(0.0, deadline - now)))


def result_of(check: Any, polled: Polled, stage: StagePlan, number: int,
              origin: int) -> CheckResult:
    """The record of a polled check."""
    out = polled.outcome
    if out is None:
        status, expected, seen, diff = ERROR, "", f"could not run: {polled.error}", []
    else:
        status = PASS if out.ok else FAIL
        expected, seen, diff = out.expected, out.seen, list(out.diff)
        if not out.ok and check.within:
            diff.append(f"still so after {polled.tries} tries in {polled.seconds:.1f} s "
                        f"(within: {check.within:g})")
    return CheckResult.made(stage=stage.number, stage_title=stage.title, number=number,
                            origin=origin, label=check.label(), kind=check.check,
                            node=check.node, expected=expected, seen=seen, status=status,
                            seconds=polled.seconds, tries=polled.tries, diff=diff)


def run_check(view: LabView, check: Any, stage: StagePlan, number: int, origin: int
              ) -> CheckResult:
    """Poll one check (``within``, ``every``) and record how it went."""
    polled = poll(lambda: try_once(view, check), check.within, check.every)
    return result_of(check, polled, stage, number, origin)


def run_stage(view: LabView, stage: StagePlan, workers: int = WORKERS,
              done: Optional[Callable[[CheckResult], None]] = None) -> List[CheckResult]:
    """Every check of ``stage``, in its order: the others at once, then the
    throughput checks one at a time. ``done`` is told of each as it ends."""
    items: List[Tuple[int, int, Any]] = [(n, origin, c)
                                         for n, (origin, c) in enumerate(stage.checks, 1)]
    results: Dict[int, CheckResult] = {}

    def one(item: Tuple[int, int, Any]) -> None:
        n, origin, c = item
        results[n] = run_check(view, c, stage, n, origin)
        if done is not None:
            done(results[n])
    together = [i for i in items if i[2].check != "throughput"]
    if together:
        with ThreadPoolExecutor(max(1, min(workers, len(together))),
                                thread_name_prefix="check") as pool:
            for f in [pool.submit(one, i) for i in together]:
                f.result()
    for item in items:
        if item[2].check == "throughput":
            one(item)
    return [results[n] for n in sorted(results)]

