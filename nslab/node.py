"""A built node: run commands in its namespace, start tagged background processes."""
from __future__ import annotations

import subprocess
from typing import IO, TYPE_CHECKING, Dict, List, Optional, Sequence, Union

from .proc import Process, Result, run

if TYPE_CHECKING:  # pragma: no cover
    from .lab import Lab


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

    def __init__(self, lab: "Lab", name: str, kind: str, netns: Optional[str]) -> None:
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

    def set_sysctls(self, values: Dict[str, Union[str, int]]) -> None:
        """Set sysctls in this node's namespace. Only keys the running kernel
        isolates per network namespace are accepted (as in a topology): a node
        never changes the host."""
        if not values:
            return
        from pydantic import TypeAdapter, ValidationError

        from .errors import InputError
        from .fields import SysctlKey, SysctlValue
        from .topo import explain
        if self.netns is None:
            raise InputError(f"{self.name} lives in the root namespace: its sysctls are the "
                             "host's")
        try:
            checked = TypeAdapter(Dict[SysctlKey, SysctlValue]).validate_python(values)
        except ValidationError as exc:
            raise InputError(explain(exc, ("sysctls",), None, f"node {self.name}")) from None
        from .lab import check_sysctls
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
