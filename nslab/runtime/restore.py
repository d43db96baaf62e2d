"""The restore commands of a run's journal, checked word by word before
``nslab clean`` runs any of them.

A journal records how to undo what a run changed outside its own objects (an
uplink NIC put back, the aliases ``nslab alias serve`` added removed, the
offloads ``nslab capture --as-wire`` turned off turned back on). It is data:
``nslab clean`` runs a command only if it is one of the forms nslab writes
(:func:`restore_problem`), and nothing of an item one of whose commands is
not.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Callable, List, Optional

from ..model.fields import IFNAME_RE
from ..model.naming import NS_RE
from .proc import run


def run_restore(item: dict, run_id: str) -> None:
    """Undo a recorded change: its commands, each checked first
    (:func:`restore_problem`); one that is not of a form nslab journals stops
    the whole item before any of it runs."""
    argvs = item.get("argv", [])
    if not isinstance(argvs, list):
        raise RuntimeError("refused: 'argv' is not a list of commands")
    ifaces = set()
    for argv in argvs:
        why = restore_problem(argv, run_id)
        if why:
            raise RuntimeError(f"refused: not a restore command nslab writes ({why}); "
                               "nothing of this item was run")
        ifaces.add(restore_iface(argv))
    if len(ifaces) > 1:
        raise RuntimeError(f"refused: one item restores one interface, not "
                           f"{', '.join(sorted(ifaces))}")
    for argv in argvs:
        run(argv, check=False)


def printable_text(value: object, most: int = 120) -> str:
    """A journal's text as one printable line (no terminal control characters)."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text[:most] + ("..." if len(text) > most else "")


def restore_iface(argv: List[str]) -> str:
    """The interface a checked restore command acts on (``NS/IFACE`` for
    one in a namespace of the run)."""
    if argv[:3] == ["ip", "netns", "exec"]:
        return f"{argv[3]}/{restore_iface(argv[4:])}"
    if argv[0] == "ovs-vsctl":
        return argv[5]
    if argv[0] == "ethtool":
        return argv[2]
    return argv[argv.index("dev") + 1]


#: The features a journalled ``ethtool -K`` may set.
ETHTOOL_FEATURES = ("tx", "gso", "tso", "gro")


def _ethtool_ok(a: List[str]) -> bool:
    """``ethtool -K IFACE F on|off [F on|off ...]``, each F one of
    :data:`ETHTOOL_FEATURES` at most once."""
    if a[:2] != ["ethtool", "-K"] or len(a) < 5 or len(a) % 2 == 0 \
            or not IFNAME_RE.fullmatch(a[2]):
        return False
    names, states = a[3::2], a[4::2]
    return (all(f in ETHTOOL_FEATURES for f in names) and len(set(names)) == len(names)
            and all(v in ("on", "off") for v in states))


def restore_problem(argv: object, run_id: str) -> Optional[str]:
    """Why ``argv`` is not one of the restore commands nslab journals (an
    uplink NIC put back: :func:`nslab.ovs.uplink.restore_argv`; the aliases
    ``nslab alias serve`` added, removed), or None.

    A journal is data: ``nslab clean`` runs no command from it that is not,
    token by token, one of::

        ovs-vsctl --timeout=10 --if-exists del-port <run>-bN IFACE
        ip link set dev IFACE mtu N | up | down
        ip addr replace IPV4/PREFIX dev IFACE
        ip addr del IPV4/PREFIX dev IFACE     (aliases of `nslab alias serve`)
        ip route replace DST [via ADDR] dev IFACE [metric N]
        ethtool -K IFACE tx|gso|tso|gro on|off [tx|gso|tso|gro on|off ...]
        ip netns exec <run>-NODE ethtool -K IFACE ...   (an interface of a node:
                                                     nslab capture --as-wire)
    """

    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "not a list of words"
    if argv[:3] == ["ip", "netns", "exec"] and len(argv) > 4:
        m = NS_RE.fullmatch(argv[3])
        if m is None or m.group(1) != run_id:
            return f"{printable_text(argv[3], 40)}: not a namespace of run {run_id}"
        if not _ethtool_ok(argv[4:]):
            return " ".join(printable_text(a, 40) for a in argv[:10])
        return None

    def iface(x: str) -> bool:
        return bool(IFNAME_RE.fullmatch(x))

    def number(x: str, lo: int, hi: int) -> bool:
        return x.isdigit() and lo <= int(x) <= hi

    def parses(kind: Callable[[str], object], x: str) -> bool:
        try:
            kind(x)
        except ValueError:
            return False
        return x == x.strip() and x != ""

    shown = " ".join(printable_text(a, 40) for a in argv[:8])
    a = argv
    if a[:4] == ["ovs-vsctl", "--timeout=10", "--if-exists", "del-port"] and len(a) == 6:
        if re.fullmatch(rf"{re.escape(run_id)}-b[0-9]{{1,6}}", a[4]) and iface(a[5]):
            return None
        return f"{shown}: not a bridge of run {run_id} and an interface"
    if a[:4] == ["ip", "link", "set", "dev"] and len(a) >= 6 and iface(a[4]):
        if a[5:] in (["up"], ["down"]) or (len(a) == 7 and a[5] == "mtu"
                                           and number(a[6], 68, 65535)):
            return None
    if a[:3] in (["ip", "addr", "replace"], ["ip", "addr", "del"]) and len(a) == 6 \
            and a[4] == "dev" and iface(a[5]):
        if "/" in a[3] and parses(ipaddress.IPv4Interface, a[3]):
            return None
    if a[:3] == ["ip", "route", "replace"] and len(a) >= 6:
        dst, rest = a[3], a[4:]
        ok = dst == "default" or parses(lambda x: ipaddress.ip_network(x, strict=False), dst)
        if rest[:1] == ["via"] and len(rest) >= 2 and parses(ipaddress.ip_address, rest[1]):
            rest = rest[2:]
        if ok and rest[:1] == ["dev"] and len(rest) >= 2 and iface(rest[1]):
            rest = rest[2:]
            if rest == [] or (len(rest) == 2 and rest[0] == "metric"
                              and number(rest[1], 0, 2**32 - 1)):
                return None
    if _ethtool_ok(a):
        return None
    return shown
