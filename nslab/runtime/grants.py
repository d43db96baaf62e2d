"""Changes to this machine's own network come from the command line, never from a file.

A topology (or a study, or a stored run) may ask for three things that reach
beyond the lab's own namespaces: a physical NIC as the uplink of an OVS
bridge (its IPv4 addresses are removed while the lab runs), ``force`` (skip
the checks that stop you cutting off the default route or your SSH session),
and an OpenFlow controller that is not on the loopback (it would see and
inject the lab's traffic). A file can come from anyone; the person at the
keyboard decides. So the topology may *ask*, and the lab applies what it
asks only when the command line names the same thing: ``--uplink eth1``,
``--allow-controller tcp:192.0.2.9:6653``, ``--force``.

A :class:`~nslab.runtime.lab.Lab` built from Python code with no ``host_grants``
trusts its topology (a Python program can do anything its user can); the
CLI always passes the grants it was given.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, FrozenSet, Iterable, List, Optional, Tuple

from ..errors import TopologyError

#: (location in the topology, what it asks for, the value) of each request
Request = Tuple[Tuple[Any, ...], str, Any]


@dataclass(frozen=True)
class HostGrants:
    """What the command line allows a topology to change on this machine.

    Attributes:
        uplinks: interface names that may be attached as uplinks.
        controllers: OpenFlow controller targets off the loopback that may be used.
        force: whether an uplink may carry the default route or the SSH session.
        uplink_flag: how the command at hand spells its uplink grant (for messages).
        controller_flag: likewise for controllers.
        force_flag: likewise for force.
    """

    uplinks: FrozenSet[str] = field(default_factory=frozenset)
    controllers: FrozenSet[str] = field(default_factory=frozenset)
    force: bool = False
    uplink_flag: str = "--uplink"
    controller_flag: str = "--allow-controller"
    force_flag: str = "--force"

    @classmethod
    def of(cls, uplinks: Iterable[Optional[str]] = (), controllers: Iterable[Optional[str]] = (),
           force: Any = False, **flags: str) -> "HostGrants":
        """Grants from command-line values (``None`` and empty values ignored)."""
        return cls(frozenset(u for u in uplinks if u), frozenset(c for c in controllers if c),
                   bool(force), **flags)


def loopback_controller(target: str) -> bool:
    """Whether an OpenFlow target (``tcp:127.0.0.1:6653``, ``ptcp:[::1]``) stays on the loopback."""
    _, _, rest = target.partition(":")
    host = rest[1:rest.index("]")] if rest.startswith("[") and "]" in rest else rest.split(":")[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def requests(topology: Any) -> List[Request]:
    """Every change to the host's network ``topology`` asks for."""
    out: List[Request] = []
    for name, node in topology.nodes.items():
        where = ("nodes", name)
        if getattr(node, "uplink", None):
            out.append((where + ("uplink",), "uplink", node.uplink))
        if getattr(node, "force", False):
            out.append((where + ("force",), "force", True))
        target = getattr(node, "controller", None)
        if target and not loopback_controller(target):
            out.append((where + ("controller",), "controller", target))
    return out


def check(topology: Any, grants: Optional[HostGrants]) -> None:
    """Refuse the first request of ``topology`` the command line did not grant.

    ``grants=None`` means the caller built the topology itself (Python code) and
    trusts it. Raises :class:`TopologyError` located in the topology's file.
    """
    if grants is None:
        return
    for loc, kind, value in requests(topology):
        if kind == "uplink" and value not in grants.uplinks:
            msg = (f"{'.'.join(map(str, loc))}: the topology asks to attach {value} (a NIC of "
                   f"this machine) as an uplink; a file alone cannot: give "
                   f"{grants.uplink_flag} {value} on the command line if you mean it")
        elif kind == "force" and not grants.force:
            msg = (f"{'.'.join(map(str, loc))}: the topology asks to skip the uplink safety "
                   f"checks (force); a file alone cannot: give {grants.force_flag} on the "
                   "command line if you mean it")
        elif kind == "controller" and value not in grants.controllers:
            msg = (f"{'.'.join(map(str, loc))}: the topology points an OVS bridge at "
                   f"{value}, a controller off this machine's loopback (it would see and "
                   f"inject the lab's traffic); a file alone cannot: give "
                   f"{grants.controller_flag} {value} on the command line if you mean it")
        else:
            continue
        exc = TopologyError(msg, loc)
        locate = getattr(topology, "locate", None)
        raise locate(exc) if locate else exc
