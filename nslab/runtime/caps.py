"""What this machine offers, probed at run time in a throwaway namespace.

Each probe tries the real thing (create a veth, add a netem qdisc...) inside a
namespace the probe creates and removes, so the answer is the kernel's, not a
guess from module lists. ``nslab doctor`` prints the table.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional

from ..errors import CapabilityError, NotRootError, TopologyError
from .proc import scaled
from ..model.fields import sysctl_template
from ..model.kinds import broken as broken_kinds, registered as registered_kinds
from ..model.kinds import tools as kind_tools
from ..model.naming import new_run_id
from ..model.topo import field_path

log = logging.getLogger(__name__)


@dataclass
class Capability:
    """One capability: whether it is present, what the lab does about it."""

    name: str
    ok: bool
    detail: str = ""
    required: bool = False
    fix: str = ""


#: Debian package that provides each tool.
PACKAGES = {
    "ip": "iproute2", "tc": "iproute2", "iperf": "iperf", "ethtool": "ethtool",
    "tcpdump": "tcpdump", "gcc": "gcc", "mn": "mininet", "dumpcap": "wireshark-common",
}


def is_root() -> bool:
    return os.geteuid() == 0


def require_root(what: str = "this") -> None:
    """Raise :class:`NotRootError` unless running as root."""
    if not is_root():
        raise NotRootError(f"{what} needs root (network namespaces): run it with sudo")


#: How long one probe may take. A probe that loads a kernel module (``tc ...
#: netem``, ``ip link add ... type vrf``, ``modprobe openvswitch``) may take
#: seconds in a guest under TCG on a busy machine, and one that times out counts
#: as missing, which the stock-kernel tier fails: so the bound is generous
#: (it was 5 s), and a timeout is logged.
PROBE_TIMEOUT = 30.0


def _q(argv: List[str], timeout: float = PROBE_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=scaled(timeout))
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))
    except subprocess.TimeoutExpired as exc:
        log.warning("probe %s: no answer in %g s; counted as missing", " ".join(argv), timeout)
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


def tool_version(argv: List[str], pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> Optional[str]:
    """First version-looking string a tool prints, or None if it is missing."""
    if not shutil.which(argv[0]) and not os.path.exists(argv[0]):
        return None
    cp = _q(argv)
    m = re.search(pattern, (cp.stdout or "") + (cp.stderr or ""))
    return m.group(1) if m else None


#: The tools' versions, asked once per process (:func:`versions`), or as the
#: host found them (:func:`use_versions`).
_TOOL_VERSIONS: Dict[str, Optional[str]] = {}


def versions() -> Dict[str, Optional[str]]:
    """Versions of the tools the lab drives (None = missing): the core's and
    the registered kinds' (:class:`nslab.model.kinds.Tool`), and the running
    kernel's. The tools are asked once per process (a run records its
    provenance once per lab; under TCG, ``mn --version`` alone took seconds)."""
    if not _TOOL_VERSIONS:
        found = {
            "mininet": tool_version(["mn", "--version"]),
            "iperf2": tool_version(["iperf", "-v"]),
            "iproute2": tool_version(["ip", "-V"], r"(\d{6}|\d+\.\d+\.\d+)"),
            "ethtool": tool_version(["ethtool", "--version"]),
        }
        for tool in kind_tools():
            found[tool.name] = tool_version(list(tool.version))
        _TOOL_VERSIONS.update(found)
    return {"kernel": os.uname().release, **_TOOL_VERSIONS}


def use_versions(found: Dict[str, Optional[str]]) -> None:
    """Take the tools' versions as ``found`` elsewhere, without asking them: a
    guest that runs its host's programs (virtme-ng shares the host's root,
    read-only) records what the host asked them, not what it would ask slowly
    through 9p. The kernel's is still the running one's."""
    _TOOL_VERSIONS.clear()
    _TOOL_VERSIONS.update({k: v for k, v in found.items() if k != "kernel"})


def run_probe(argv: List[str], timeout: float = PROBE_TIMEOUT) -> subprocess.CompletedProcess:
    """Run a probe's command: its output captured, a missing program or a
    timeout (logged) an exit status of 127, never an exception."""
    return _q(argv, timeout)


#: The kernel's capabilities :func:`_kernel_probes` tries.
KERNEL_CAPS = ("netns", "veth", "bridge", "htb", "tbf", "netem", "u32", "ecmp", "macvlan",
               "vlan", "vrf", "bond", "dummy", "rps")


def _kernel_probes(names: Optional[Iterable[str]] = None) -> Dict[str, Capability]:
    """Try each kernel feature inside a throwaway namespace: those of ``names``
    (and the namespace and veth pair the others are tried on), or all."""
    only = None if names is None else set(names)

    def want(name: str) -> bool:
        return only is None or name in only

    caps: Dict[str, Capability] = {}
    ns = f"{new_run_id()}-probe"
    if _q(["ip", "netns", "add", ns]).returncode != 0:
        caps["netns"] = Capability("netns", False, "ip netns add failed", True, "a kernel with netns")
        return caps
    caps["netns"] = Capability("netns", True, "named namespaces", True)
    try:
        def t(argv: List[str]) -> bool:
            return _q(argv).returncode == 0

        ipn = ["ip", "-n", ns]
        tcn = ["tc", "-n", ns]
        veth = t(ipn + ["link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        caps["veth"] = Capability("veth", veth, "veth pairs", True, "a kernel with veth")
        if veth:
            t(ipn + ["link", "set", "p0", "up"])
            t(ipn + ["link", "set", "p1", "up"])
        if want("bridge"):
            caps["bridge"] = Capability(
                "bridge", t(ipn + ["link", "add", "br0", "type", "bridge"]),
                "Linux bridge", False, "CONFIG_BRIDGE")
        if want("htb"):
            caps["htb"] = Capability(
                "htb", veth and t(tcn + ["qdisc", "add", "dev", "p0", "root", "handle", "1:", "htb"]),
                "rate shaping (htb)", False, "sch_htb")
        if want("tbf"):
            caps["tbf"] = Capability(
                "tbf", veth and t(tcn + ["qdisc", "replace", "dev", "p0", "root", "tbf", "rate",
                                         "1mbit", "burst", "32k", "latency", "50ms"]),
                "rate shaping (tbf)", False, "sch_tbf")
        if want("netem"):
            netem = veth and t(tcn + ["qdisc", "replace", "dev", "p1", "root", "netem", "delay",
                                      "1ms"])
            caps["netem"] = Capability(
                "netem", netem, "delay/loss/jitter" if netem else
                "missing: link delay, jitter and loss are unavailable", False,
                "a kernel with sch_netem")
        if want("u32"):
            caps["u32"] = Capability(
                "u32", veth and t(tcn + ["qdisc", "add", "dev", "p1", "handle", "ffff:", "ingress"])
                and t(tcn + ["filter", "add", "dev", "p1", "parent", "ffff:", "protocol", "ip",
                             "prio", "1", "u32", "match", "u32", "0xdeadbeef",
                             "0xffffffff", "at", "0", "flowid", "1:1"]),
                "ingress u32 filters (RFC 2544 DUT cost knob)", False, "cls_u32")
        if want("ecmp"):
            ecmp = veth and t(ipn + ["addr", "add", "10.9.0.1/24", "dev", "p0"]) and \
                t(ipn + ["addr", "add", "10.9.1.1/24", "dev", "p1"]) and \
                t(ipn + ["route", "add", "192.0.2.0/24", "nexthop", "via", "10.9.0.2", "dev", "p0",
                         "nexthop", "via", "10.9.1.2", "dev", "p1"])
            pol = _q(["ip", "netns", "exec", ns, "sysctl", "-n",
                      "net.ipv4.fib_multipath_hash_policy"])
            caps["ecmp"] = Capability("ecmp", bool(ecmp) and pol.returncode == 0,
                                      "multipath routes, fib_multipath_hash_policy", False,
                                      "CONFIG_IP_ROUTE_MULTIPATH")
        for kind, args, what in (
                ("macvlan", ["link", "add", "mv0", "link", "p0", "type", "macvlan"], "macvlan"),
                ("vlan", ["link", "add", "link", "p0", "name", "p0.10", "type", "vlan", "id", "10"], "802.1Q VLANs"),
                ("vrf", ["link", "add", "vrf0", "type", "vrf", "table", "10"], "VRF"),
                ("bond", ["link", "add", "bond0", "type", "bond"], "bonding"),
                ("dummy", ["link", "add", "d0", "type", "dummy"], "dummy interfaces")):
            if not want(kind):
                continue
            ok = veth and t(ipn + args)
            caps[kind] = Capability(kind, ok, what if ok else f"missing: {what}", False, "")
        if want("rps"):
            rps = veth and _q(["ip", "netns", "exec", ns, "cat",
                               "/sys/class/net/p0/queues/rx-0/rps_cpus"]).returncode == 0
            caps["rps"] = Capability("rps", rps and (os.cpu_count() or 1) >= 2,
                                     f"receive packet steering, {os.cpu_count()} CPUs", False,
                                     "CONFIG_RPS and 2+ CPUs")
    finally:
        _q(["ip", "netns", "del", ns])
    return caps


@functools.lru_cache(maxsize=1)
def netns_sysctls() -> Dict[str, str]:
    """The sysctls a fresh network namespace has on this kernel: ``{key: "rw"|"ro"}``.

    The kernel's own answer to "is this key per namespace?": keys it does not
    namespace are absent from a new namespace's ``/proc/sys/net`` (e.g.
    ``net.core.netdev_max_backlog``, ``net.ipv4.tcp_mem``) or read-only there
    (e.g. ``net.core.rmem_max``). Probed in a throwaway namespace; needs root.
    """
    require_root("checking sysctls against the kernel")
    ns = f"{new_run_id()}-probe"
    if _q(["ip", "netns", "add", ns]).returncode != 0:
        raise CapabilityError("cannot create a network namespace to check sysctls")
    try:
        res = _q(["ip", "netns", "exec", ns, "find", "/proc/sys/net", "-type", "f",
                  "-printf", "%m %p\n"], timeout=30)
    finally:
        _q(["ip", "netns", "del", ns])
    out: Dict[str, str] = {}
    for line in res.stdout.splitlines():
        mode, _, path = line.partition(" ")
        if not path.startswith("/proc/sys/net/"):
            continue
        key = path[len("/proc/sys/"):].replace("/", ".")
        out[key] = "rw" if int(mode, 8) & 0o222 else "ro"
    if not out:
        raise CapabilityError("could not list /proc/sys/net in a network namespace: "
                              f"{res.stderr.strip()[:200]}")
    return out


def _programs() -> Dict[str, Capability]:
    """Root, and the programs on ``PATH``: the core's and the kinds' (no probe runs)."""
    caps: Dict[str, Capability] = {}
    root = is_root()
    caps["root"] = Capability("root", root, "running as root" if root else "not root", True,
                              "run as root (sudo)")
    for tool in ("ip", "tc", "iperf", "ethtool", "tcpdump", "dumpcap", "gcc", "mn"):
        found = shutil.which(tool)
        caps[f"tool:{tool}"] = Capability(f"tool:{tool}", bool(found), found or "missing",
                                          tool in ("ip", "tc"), f"apt install {PACKAGES[tool]}")
    caps.update(_kind_tools())
    return caps


@functools.lru_cache(maxsize=1)
def probe() -> Dict[str, Capability]:
    """Probe everything once per process. Kernel probes need root."""
    caps = _programs()
    if caps["root"].ok and shutil.which("ip"):
        caps.update(_kernel_probes())
    caps.update(kind_capabilities(caps))
    return caps


#: What :func:`probe_for` found so far in this process (a lab's needs, not everything).
_SOME: Dict[str, Capability] = {}


def probe_for(names: Iterable[str]) -> Dict[str, Capability]:
    """The capabilities ``names`` asks about, probing no more than they need:
    the programs always, the kernel's features named (:data:`KERNEL_CAPS`),
    and everything (:func:`probe`) only for a name neither covers (a kind's
    own). Measured in the virtual RFC 2544 bed's guest (Debian's 6.1 under
    TCG), every kernel probe took 7.5 s and the kinds' 0.9 s; a lab of a
    bridge or a router needs four of the fourteen kernel features."""
    if probe.cache_info().currsize:
        return probe()
    if not _SOME:
        _SOME.update(_programs())
    wanted = set(names)
    kernel = sorted(n for n in wanted if n in KERNEL_CAPS and n not in _SOME)
    if kernel and _SOME["root"].ok and shutil.which("ip"):
        _SOME.update(_kernel_probes(kernel))
    if any(n not in _SOME and n not in KERNEL_CAPS for n in wanted):
        return probe()
    return _SOME


def kind_capabilities(found: Dict[str, Capability]) -> Dict[str, Capability]:
    """What the registered kinds' own probes (:attr:`nslab.model.kinds.Kind.probes`)
    find, given the capabilities found before them (each kind sees the
    earlier kinds' too)."""
    out: Dict[str, Capability] = {
        f"kind:{name}": Capability(f"kind:{name}", False, why, True,
                                   "fix or uninstall the package that registers it")
        for name, why in broken_kinds().items()}
    for kind in registered_kinds().values():
        if kind.probes:
            try:
                out.update(_kind_probes(kind.name, kind.probes)({**found, **out}))
            except CapabilityError as exc:
                out[f"kind:{kind.name}"] = Capability(f"kind:{kind.name}", False, str(exc),
                                                      True, "fix or uninstall its package")
    return out


def _kind_probes(kind: str, where: str) -> Callable[[Dict[str, Capability]], Dict[str, Capability]]:
    """A kind's probe function, named ``module:function`` by the kind."""
    import importlib
    module, _, name = where.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise CapabilityError(f"kind {kind}: its probes {where} failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc


def _found(program: str) -> Optional[str]:
    """Where ``program`` is: an absolute path that exists, or found on ``PATH``."""
    if os.path.isabs(program):
        return program if os.path.exists(program) else None
    return shutil.which(program)


def _kind_tools() -> Dict[str, Capability]:
    """The registered kinds' tools: ``tool:<program>`` for each program on
    ``PATH``, and ``<tool>`` when all its programs are there."""
    caps: Dict[str, Capability] = {}
    for tool in kind_tools():
        found = {p: _found(p) for p in tool.programs}
        for p, where in found.items():
            if not os.path.isabs(p):
                caps[f"tool:{p}"] = Capability(f"tool:{p}", bool(where), where or "missing",
                                               False, f"apt install {tool.package}")
        if not tool.capability:
            continue
        missing = [os.path.basename(p) for p, where in found.items() if not where]
        paths = sorted({os.path.dirname(w) for w in found.values() if w})
        caps[tool.name] = Capability(tool.name, not missing,
                                     f"missing: {'/'.join(missing)}" if missing
                                     else ", ".join(paths), False, f"apt install {tool.package}")
    return caps


def require(names: List[str], what: str = "this topology") -> Dict[str, Capability]:
    """Raise :class:`CapabilityError` naming the first missing capability of
    ``names`` (probing only what they need: :func:`probe_for`)."""
    caps = probe_for(names)
    for n in names:
        c = caps.get(n)
        if c is None:
            continue
        if not c.ok:
            fix = f" ({c.fix})" if c.fix else ""
            raise CapabilityError(f"{what} needs {n}, which this machine lacks{fix}")
    return caps

#: The congestion controls the kernel has registered (built in or loaded).
AVAILABLE_CC = "/proc/sys/net/ipv4/tcp_available_congestion_control"
#: Those a namespace other than the initial one may choose.
ALLOWED_CC = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def check_sysctls(by_node: Dict[str, Dict[str, str]]) -> None:
    """Refuse, before anything is built, a sysctl the running kernel does not
    isolate per network namespace (absent or read-only in a fresh one): set in
    a node, it would change the host. A file's keys are on an allow-list
    already (:mod:`nslab.model.sysctls`); this is the running kernel's word on
    them. A congestion control the kernel has not loaded is refused too:
    setting it would make the kernel load a module, a change to the host that
    outlives the lab. ``by_node``: ``{node: {key: value}}``."""
    wanted = {(name, k) for name, values in by_node.items() for k in values}
    if not wanted:
        return
    for name, values in sorted(by_node.items()):
        cc = values.get("net.ipv4.tcp_congestion_control")
        if cc is not None:
            with open(AVAILABLE_CC) as f:
                loaded = f.read().split()
            loc = ("nodes", name, "sysctls", "net.ipv4.tcp_congestion_control")
            if str(cc) not in loaded:
                raise TopologyError(f"{field_path(loc)}: {cc} is not a congestion control this "
                                    f"kernel has loaded ({', '.join(loaded)}); nslab loads no "
                                    f"kernel module for a file (modprobe tcp_{cc} first)", loc)
            with open(ALLOWED_CC) as f:
                allowed = f.read().split()
            if str(cc) not in allowed:
                # outside the initial namespace the kernel takes only these (EPERM)
                raise TopologyError(f"{field_path(loc)}: {cc} is not among the congestion "
                                    f"controls this kernel lets a namespace use "
                                    f"({', '.join(allowed)}: "
                                    "net.ipv4.tcp_allowed_congestion_control)", loc)
    known = netns_sysctls()
    for name, key in sorted(wanted):
        mode = known.get(sysctl_template(key))
        loc = ("nodes", name, "sysctls", key)
        if mode is None:
            raise TopologyError(f"{field_path(loc)}: a network namespace has no sysctl {key} on "
                                "this kernel", loc)
        if mode == "ro":
            raise TopologyError(f"{field_path(loc)}: {key} is host-wide on this kernel (read-only "
                                "inside a network namespace): setting it in a node would change "
                                "the host", loc)
