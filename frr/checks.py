"""``nslab check``'s ``bgp`` and ``bfd`` checks, judged from FRR's own JSON.

The core runs checks (:mod:`nslab.traffic.checkrun`) and never imports FRR; it
hands a check of these kinds to the FRR extension
(:meth:`FrrExtension.judge <nslab.frr.router.FrrExtension.judge>`), which
runs one ``vtysh -c 'show ... json'`` in the node's namespace, against the
node's own daemons (their sockets in the run's work directory, as ``nslab
vtysh`` reaches them), and matches its JSON here. The command is one of a
fixed set (:data:`nslab.frr.checkspec.BGP_SHOW`, ``BFD_SHOW``), checked again
here; its output is bounded JSON.

Peers are keyed as FRR keys them: an unnumbered session by its interface
(``spine1-eth0``), another by its address.
"""
from __future__ import annotations

import ipaddress
import os
import stat
from typing import Any, Dict, List, Optional

from nslab.model import bounded
from nslab.model.checks import CannotRun, Outcome

from .checkspec import BFD_SHOW, BGP_SHOW, Bfd, Bgp
from nslab.model.subset import differences

#: The commands a check may run (nothing else reaches vtysh from a check).
ALLOWED = frozenset(BGP_SHOW.values()) | frozenset(BFD_SHOW.values())
#: The most output read of one show (a full table of a big fabric is a few MiB).
MAX_OUTPUT = 16 * 1024 * 1024
#: Seconds one vtysh may take.
TIMEOUT = 20.0


def vty_dir(workdir: str, node: str) -> str:
    """Where the node's daemons keep their sockets (``frr.router.node_dir``)."""
    return os.path.join(workdir, "frr", node)


def show_json(node: Any, command: str, timeout: float = TIMEOUT) -> Any:
    """The JSON ``command`` prints on ``node`` (a
    :class:`~nslab.runtime.extension.CheckNode`); :class:`CannotRun` when the
    node runs no FRR, vtysh fails or prints no JSON."""
    if command not in ALLOWED:
        raise CannotRun(f"{command!r} is not a show command a check may run")
    vty = vty_dir(node.workdir, node.name)
    try:
        st = os.lstat(vty)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise CannotRun(f"{node.name} runs no FRR daemons (no bgp: in its topology)")
    res = node.run(["vtysh", "--vty_socket", vty, "-c", command], timeout)
    out = res.stdout or ""
    if len(out) > MAX_OUTPUT:
        raise CannotRun(f"vtysh -c '{command}' on {node.name}: more than "
                        f"{MAX_OUTPUT >> 20} MiB of output")
    text = out.strip()
    if not text.startswith(("{", "[")):
        said = (text or (res.stderr or "").strip() or f"exit {res.returncode}").splitlines()[0]
        raise CannotRun(f"vtysh -c '{command}' on {node.name}: {said[:200]}")
    try:
        return bounded.loads(text)
    except ValueError as exc:
        raise CannotRun(f"vtysh -c '{command}' on {node.name}: not JSON ({exc})") from None


# -- bgp --------------------------------------------------------------------------------
def summary_peers(data: Any) -> Dict[str, Dict[str, Any]]:
    """Every peer of ``show bgp summary json``, over its address families
    (``ipv4Unicast``, ``ipv6Unicast``...): the first family's record of each."""
    out: Dict[str, Dict[str, Any]] = {}
    if not isinstance(data, dict):
        return out
    for family in data.values():
        peers = family.get("peers") if isinstance(family, dict) else None
        if isinstance(peers, dict):
            for name, info in peers.items():
                if isinstance(info, dict):
                    out.setdefault(_key(str(name)), info)
    return out


def _key(peer: str) -> str:
    """A peer's name, an address in its canonical form."""
    try:
        return str(ipaddress.ip_address(peer))
    except ValueError:
        return peer


def judge_bgp(check: Bgp, data: Any) -> Outcome:
    """Each peer ``established`` (state ``Established``) or ``down``
    (another state, or no such peer); ``expect`` a subset of ``data``."""
    want = [f"{p} {s}" for p, s in check.peers.items()]
    if check.expect is not None:
        want.append(f"{check.show} as expected")
    peers = summary_peers(data) if check.peers else {}
    seen, diff = [], []
    for peer, state in check.peers.items():
        info = peers.get(_key(peer))
        now = str(info.get("state")) if info and info.get("state") is not None else None
        seen.append(f"{peer} {now or 'not configured'}")
        if state == "established" and now != "Established":
            diff.append(f"peers.{peer}.state: expected Established, saw "
                        f"{now or 'no such peer'}")
        elif state == "down" and now == "Established":
            diff.append(f"peers.{peer}.state: expected down (not Established), saw Established")
    if check.expect is not None:
        found = [str(d) for d in differences(check.expect, data)]
        diff += found
        seen.append(f"{check.show}: {'as expected' if not found else 'differs'}")
    return Outcome(not diff, ", ".join(want), ", ".join(seen), diff)


# -- bfd --------------------------------------------------------------------------------
def bfd_peers(data: Any) -> Dict[str, Dict[str, Any]]:
    """The sessions of ``show bfd peers json`` by interface and by peer address."""
    out: Dict[str, Dict[str, Any]] = {}
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        for key in ("interface", "peer"):
            if isinstance(item.get(key), str):
                out.setdefault(_key(item[key]), item)
    return out


def judge_bfd(check: Bfd, data: Any) -> Outcome:
    """Each peer ``up`` (status ``up``) or ``down`` (another status, or no
    session); ``expect`` a subset of ``data``."""
    want = [f"{p} {s}" for p, s in check.peers.items()]
    if check.expect is not None:
        want.append(f"{check.show} as expected")
    sessions = bfd_peers(data) if check.peers else {}
    seen: List[str] = []
    diff: List[str] = []
    for peer, status in check.peers.items():
        info: Optional[Dict[str, Any]] = sessions.get(_key(peer))
        now = str(info.get("status")) if info and info.get("status") is not None else None
        seen.append(f"{peer} {now or 'no session'}")
        if status == "up" and now != "up":
            diff.append(f"peers.{peer}.status: expected up, saw {now or 'no session'}")
        elif status == "down" and now == "up":
            diff.append(f"peers.{peer}.status: expected down, saw up")
    if check.expect is not None:
        found = [str(d) for d in differences(check.expect, data)]
        diff += found
        seen.append(f"{check.show}: {'as expected' if not found else 'differs'}")
    return Outcome(not diff, ", ".join(want), ", ".join(seen), diff)


def judge(node: Any, check: Any) -> Outcome:
    """One try of a ``bgp`` or ``bfd`` check on ``node``."""
    if isinstance(check, Bgp):
        return judge_bgp(check, show_json(node, check.command))
    if isinstance(check, Bfd):
        return judge_bfd(check, show_json(node, check.command))
    raise CannotRun(f"FRR judges bgp and bfd checks, not {getattr(check, 'check', check)!r}")
