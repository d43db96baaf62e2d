"""A built node: run commands in its namespace, start tagged background processes;
and :class:`LabLike`, what every kind of running lab offers."""
from __future__ import annotations

import subprocess
from typing import (IO, TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Protocol,
                    Sequence, Tuple, Union, runtime_checkable)

from .caps import check_sysctls
from .proc import Process, Result, run
from ..errors import InputError
from ..model.fields import SysctlKey, SysctlValue
from ..model.topo import explain

if TYPE_CHECKING:  # pragma: no cover
    from ..model.topo import Topology


class LabNode:
    """A node of a running lab.

    Attributes:
        name: topology name (``h1``).
        kind: ``host``, ``router`` or ``switch``.
        netns: the named namespace (``<run>-h1``), or None for an OVS switch
            (which lives in the root namespace).
        intfs: interface names in the node, in order.
        addrs: ``{interface: cidr}``.
    """

    def __init__(self, lab: LabLike, name: str, kind: str, netns: Optional[str]) -> None:
        self.lab = lab
        self.name = name
        self.kind = kind
        self.netns = netns
        self.intfs: List[str] = []
        self.addrs: Dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<LabNode {self.name} ({self.kind}) netns={self.netns}>"

    @property
    def ip(self) -> Optional[str]:
        """The node's first IPv4 address (no prefix), like Mininet's ``Host.IP()``."""
        for cidr in self.addrs.values():
            return cidr.split("/")[0]
        return None

    def IP(self) -> Optional[str]:  # noqa: N802 - Mininet spelling
        return self.ip

    def require_ip(self) -> str:
        """:attr:`ip` of a node that traffic is sent to, which must have one;
        :class:`InputError` naming the node if the topology gave it no address."""
        ip = self.ip
        if ip is None:
            raise InputError(f"node {self.name} has no IPv4 address to send traffic to")
        return ip

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: Optional[float] = 60,
            input: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> Result:
        """Run ``argv`` in the node's namespace; raise :class:`CommandError` on failure."""
        return run(argv, netns=self.netns, run_id=self.lab.run_id, check=check, timeout=timeout,
                   input=input, env=env, where=self.name)

    def popen(self, argv: Sequence[str], *, stdout: Union[int, IO, None] = subprocess.PIPE,
              stderr: Union[int, IO, None] = subprocess.PIPE, env: Optional[Dict[str, str]] = None,
              name: str = "", stdin: Union[int, IO, None] = subprocess.DEVNULL) -> Process:
        """Start ``argv`` in the background; the lab stops it on teardown."""
        p = Process(argv, netns=self.netns, run_id=self.lab.run_id, stdout=stdout, stderr=stderr,
                    env=env, where=self.name, name=name, stdin=stdin)
        self.lab.processes.append(p)
        return p

    def set_sysctls(self, values: Mapping[str, Union[str, int]]) -> None:
        """Set sysctls in this node's namespace. Only keys the running kernel
        isolates per network namespace are accepted (as in a topology): a node
        never changes the host."""
        if not values:
            return
        from pydantic import TypeAdapter, ValidationError

        if self.netns is None:
            raise InputError(f"{self.name} lives in the root namespace: its sysctls are the "
                             "host's")
        try:
            checked = TypeAdapter(Dict[SysctlKey, SysctlValue]).validate_python(values)
        except ValidationError as exc:
            raise InputError(explain(exc, ("sysctls",), None, f"node {self.name}")) from None
        check_sysctls({self.name: checked})
        self.run(["sysctl", "-q", "-w"] + [f"{k}={v}" for k, v in checked.items()])

    def read_sysctl(self, key: str) -> str:
        return self.run(["sysctl", "-n", key]).stdout.strip()

    def interfaces_cell(self, max_intfs: Optional[int] = None) -> str:
        """``"eth0 10.0.0.1/8, eth1"``: interfaces with their addresses; with
        ``max_intfs``, that many and a count of the rest."""
        shown = self.intfs if max_intfs is None else self.intfs[:max_intfs]
        cell = ", ".join(f"{i} {self.addrs[i]}" if i in self.addrs else i for i in shown)
        if len(shown) < len(self.intfs):
            cell += f", ... {len(self.intfs) - len(shown)} more"
        return cell

    def enter_hint(self) -> str:
        """How a user enters this node from a shell."""
        if self.netns is None:
            return "(root namespace: OVS bridge)"
        return f"ip netns exec {self.netns} bash"


@runtime_checkable
class LabLike(Protocol):
    """A running lab, as studies, provenance and the command line use it:
    :class:`~nslab.runtime.lab.Lab` (every node on this machine) and
    :class:`~nslab.hosts.remote.MultiLab` (nodes on several hosts, commands
    through SSH) both offer it. A context manager: entering starts the lab,
    leaving tears it down.

    Attributes:
        topology: what the lab was built from.
        run_id: the id that tags every object and process of the lab.
        processes: background processes the lab stops at teardown
            (:meth:`LabNode.popen` appends to it).
        build_seconds: how long the last start took.
        remote: whether nodes may live on other hosts (commands go through SSH).
    """

    topology: Topology
    run_id: str
    processes: List[Process]
    build_seconds: float
    remote: bool

    @property
    def nodes(self) -> Mapping[str, LabNode]:
        """``{name: node}`` in the topology's order."""

    @property
    def datapath(self) -> Optional[str]:
        """The OVS datapath type of the lab's OVS bridges, if it has any."""

    @property
    def workdir(self) -> str:
        """A scratch directory owned by the run."""

    def __enter__(self) -> LabLike: ...

    def __exit__(self, *exc: Any) -> None: ...

    def __getitem__(self, name: str) -> LabNode:
        """The node ``name``; :class:`~nslab.errors.InputError` naming the
        lab's nodes if it has none of that name."""

    def __iter__(self) -> Iterator[LabNode]: ...

    def start(self) -> None:
        """Build the lab; on any failure, undo what was built."""

    def stop(self) -> List[str]:
        """Tear the lab down (best effort); the problems met."""

    def extension(self, name: str) -> Any:
        """What the lab offers of the extension ``name`` (``frr``, ``ovs``)."""

    def run_each(self, nodes: List[str], argv: List[str], where: str = "") -> List[Result]:
        """``argv`` in each of ``nodes``, several at once; results in their order."""

    def route_tables(self, nodes: List[str]) -> List[Dict[str, int]]:
        """Each node's IPv4 main table as ``{prefix: nexthops}``."""

    def describe(self, max_intfs: Optional[int] = None) -> List[Tuple[str, str, str, str]]:
        """Rows ``(node, kind, interfaces/addresses, how to enter)``."""
