"""``Lab``: build a :class:`~nslab.topo.Topology` in named namespaces, own every
object it creates, and tear it down in stages on exit, error or Ctrl-C.

Example::

    from nslab import Lab
    from nslab.topologies import single
    with Lab(single(k=2)) as lab:
        print(lab["h1"].run(["ping", "-c1", lab["h2"].ip]).stdout)
"""
from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from . import caps
from .clean import Inventory, block_sigint, process_start_time, remove, workdir, write_journal
from .errors import InputError, LabError
from .naming import ALIAS_PREFIX, check_run_id, new_run_id, ns_name, ovs_bridge, root_intf
from .node import LabNode
from .proc import Process, run, stop_all
from .topo import Topology

log = logging.getLogger(__name__)


class Lab:
    """A running topology. Use as a context manager.

    Args:
        topology: what to build (validated first, before anything is created).
        run_id: reuse a pre-allocated id (``nl`` + 4 hex), else a fresh one.
        switch_type: override the topology's default switch type.
    """

    def __init__(self, topology: Topology, run_id: Optional[str] = None,
                 switch_type: Optional[str] = None) -> None:
        if switch_type:
            topology.switch_type = switch_type
        self.topology = topology
        self.run_id = check_run_id(run_id) if run_id else new_run_id()
        self.nodes: Dict[str, LabNode] = {}
        self.processes: List[Process] = []
        self.hooks: List[Callable[[], None]] = []
        self.inventory = Inventory(self.run_id)
        self.datapath: Optional[str] = None
        self.journal: dict = {}
        self.build_seconds = 0.0
        self.uplinks: Dict[str, dict] = {}
        self._started = False

    # -- context manager ----------------------------------------------------------
    def __enter__(self) -> "Lab":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __getitem__(self, name: str) -> LabNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise InputError(f"no node {name!r} in this lab (nodes: {', '.join(self.nodes)})") from None

    def __iter__(self) -> Iterator[LabNode]:
        return iter(self.nodes.values())

    @property
    def workdir(self) -> str:
        """A scratch directory owned by this run, removed on teardown."""
        return workdir(self.run_id)

    def on_teardown(self, fn: Callable[[], None]) -> None:
        """Register ``fn`` to run first at teardown (last registered runs first)."""
        self.hooks.append(fn)

    def record_restore(self, what: str, argv_list: List[List[str]]) -> None:
        """Journal commands that undo a change outside the lab's own objects, so
        that teardown and ``nslab clean`` after a crash restore it."""
        self.journal.setdefault("restore", []).append({"what": what, "argv": argv_list})
        write_journal(self.run_id, self.journal)

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        """Validate, check capabilities, then build. On any failure, undo what was built."""
        if self._started:
            raise LabError("lab already started")
        topo = self.topology.validate()
        caps.require_root("building a lab")
        caps.require(topo.needs(), f"topology {topo.name!r}")
        uses_ovs = any(topo.switch_type_of(s) == "ovs" for s in topo.switches())
        uplinks = {s: topo.nodes[s].params["uplink"] for s in topo.switches()
                   if topo.nodes[s].params.get("uplink")}
        if uplinks:
            from .ovs.uplink import check_uplink
            for sw, iface in uplinks.items():
                if topo.switch_type_of(sw) != "ovs":
                    raise InputError(f"switch {sw}: uplinks attach to OVS bridges (use --switch ovs)")
                check_uplink(iface, force=bool(topo.nodes[sw].params.get("force")))
        self.journal = {"run": self.run_id, "pid": os.getpid(),
                        "pid_start": process_start_time(os.getpid()),
                        "created": time.time(), "topology": topo.name, "uses_ovs": uses_ovs,
                        "restore": []}
        write_journal(self.run_id, self.journal)
        os.makedirs(self.workdir, exist_ok=True)
        self._started = True
        self._install_signal_handlers()
        t0 = time.monotonic()
        try:
            self._build(topo, uses_ovs)
        except BaseException:
            log.info("build of %s failed; tearing down what was built", self.run_id)
            self.stop()
            raise
        self.build_seconds = time.monotonic() - t0
        log.info("lab %s up in %.2f s: %d nodes, %d links", self.run_id, self.build_seconds,
                 len(topo.nodes), len(topo.links))

    def stop(self) -> List[str]:
        """Tear down in stages (hooks, processes, OVS, interfaces, namespaces, files).

        Best effort: every stage runs even if an earlier one failed. Returns the
        problems met.
        """
        if not self._started:
            return []
        with block_sigint():
            problems = []
            for hook in reversed(self.hooks):  # e.g. FRR daemons, by pid file, first
                try:
                    hook()
                except Exception as exc:  # noqa: BLE001 - teardown goes on
                    problems.append(f"hook: {exc}")
            try:
                stop_all(self.processes)
            except Exception as exc:  # noqa: BLE001 - teardown goes on
                problems.append(f"processes: {exc}")
            self.inventory.journal = self.journal
            problems += remove(self.inventory)
            self._started = False
        self._restore_signal_handlers()
        for prob in problems:
            log.warning("teardown of %s: %s", self.run_id, prob)
        log.info("lab %s torn down", self.run_id)
        return problems

    def _attach_uplink(self, sw: str, br: str, iface: str) -> None:
        """Journal how to restore the NIC, then attach it (see nslab.ovs.uplink)."""
        from .ovs.uplink import attach, restore_argv, snapshot
        snap = snapshot(iface)
        self.record_restore(f"uplink {iface} (from {br})", restore_argv(snap, br))
        self.uplinks[iface] = snap
        attach(iface, br, self.datapath or "netdev")
        self.nodes[sw].intfs.append(iface)

    def _install_signal_handlers(self) -> None:
        """SIGTERM and SIGHUP (a closed terminal) tear the lab down like Ctrl-C:
        they raise KeyboardInterrupt in the main thread, so ``with Lab(...)`` exits
        through teardown. Handlers someone else installed are left alone."""
        import signal
        import threading
        self._old_handlers = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)

    def _restore_signal_handlers(self) -> None:
        import signal
        for sig, old in getattr(self, "_old_handlers", {}).items():
            signal.signal(sig, old)
        self._old_handlers = {}

    # -- build --------------------------------------------------------------------
    def _build(self, topo: Topology, uses_ovs: bool) -> None:
        rid = self.run_id
        ovs_switches = {s for s in topo.switches() if topo.switch_type_of(s) == "ovs"}
        # 1. Namespaces: every node except OVS switches.
        for name, node in topo.nodes.items():
            netns = None if name in ovs_switches else ns_name(rid, name)
            self.nodes[name] = LabNode(self, name, node.kind, netns)
        ns_list = [n.netns for n in self.nodes.values() if n.netns]
        self.inventory.namespaces = list(ns_list)
        _ip_batch([f"netns add {ns}" for ns in ns_list], where="creating namespaces")
        for name, lnode in self.nodes.items():
            node = topo.nodes[name]
            sysctls = dict(node.params.get("sysctls", {}) or {})
            if node.kind == "router":
                sysctls.setdefault("net.ipv4.ip_forward", 1)
                sysctls.setdefault("net.ipv6.conf.all.forwarding", 1)
            if sysctls and lnode.netns:
                lnode.set_sysctls(sysctls)

        # 2. Links: veth pairs created directly in their namespaces.
        creates: List[str] = []
        root_lines: List[str] = []
        ns_lines: Dict[Optional[str], List[str]] = defaultdict(list)
        tc_lines: Dict[Optional[str], List[str]] = defaultdict(list)
        ovs_ports: Dict[str, List[str]] = defaultdict(list)
        offload_off: List[Tuple[Optional[str], str]] = []
        per_frame: List[Tuple[Optional[str], str]] = []
        addrs = topo.addresses()
        bridge_ports: Dict[str, List[str]] = defaultdict(list)
        counter = 0
        for link, na, ia, nb, ib in topo.interfaces():
            ends = []
            for node, intf in ((na, ia), (nb, ib)):
                lnode = self.nodes[node]
                if lnode.netns is None:  # OVS switch port in the root namespace
                    counter += 1
                    dev = root_intf(rid, counter)
                    ovs_ports[node].append(dev)
                    self.inventory.interfaces.append(dev)
                    root_lines.append(f"link set dev {dev} alias {ALIAS_PREFIX}{rid}:{node}:{intf}")
                    root_lines.append(f"link set dev {dev} up")
                    ends.append((None, dev, node, intf))
                else:
                    ends.append((lnode.netns, intf, node, intf))
                lnode.intfs.append(ends[-1][1])
            (nsa, deva, _, _), (nsb, devb, _, _) = ends
            loc_a = f" netns {nsa}" if nsa else ""
            loc_b = f" netns {nsb}" if nsb else ""
            creates.append(f"link add name {deva}{loc_a} type veth peer name {devb}{loc_b}")
            for (ns, dev, node, intf), shaping in ((ends[0], link.shaping),
                                                   (ends[1], link.shaping2 or link.shaping)):
                if ns is not None:
                    ns_lines[ns].append(f"link set dev {dev} up")
                    if topo.nodes[node].is_switch:
                        bridge_ports[node].append(dev)
                if (node, intf) in addrs:
                    ns_lines[ns].append(f"addr add {addrs[(node, intf)]} dev {dev}")
                    self.nodes[node].addrs[dev] = addrs[(node, intf)]
                if shaping is not None:
                    tc_lines[ns].extend(shaping.tc_batch(dev))
                    if shaping.overhead:
                        # A size table adds the overhead once per skb: with GSO a
                        # 64 KB super-packet would count it once for ~45 frames.
                        per_frame.append((ns, dev))
            if (na in ovs_switches) or (nb in ovs_switches):
                offload_off.extend((ns, dev) for ns, dev, _, _ in ends)
        _ip_batch(creates + root_lines, where="creating links")

        # 3. Inside each namespace: lo up, Linux bridges, addresses, routes.
        for name, lnode in self.nodes.items():
            if lnode.netns is None:
                continue
            node = topo.nodes[name]
            lines = ["link set dev lo up"]
            if node.params.get("loopback"):
                lines.append(f"addr add {node.params['loopback']} dev lo")
                lnode.addrs["lo"] = node.params["loopback"]
            if node.is_switch:
                stp = " stp_state 1" if node.params.get("stp") else ""
                lines.append(f"link add name {name} type bridge{stp}")
                lines += [f"link set dev {p} master {name}" for p in bridge_ports[name]]
                lines.append(f"link set dev {name} up")
            lines += ns_lines.get(lnode.netns, [])
            for route in node.params.get("routes", []) or []:
                lines.append("route add " + _route_line(route, name))
            _ip_batch(lines, netns=lnode.netns, where=f"configuring {name}")

        # 4. Shaping.
        for ns, dev in per_frame:
            _ethtool(ns, dev, ["tso", "off", "gso", "off"])
        for ns, lines in tc_lines.items():
            if lines:
                argv = ["tc"] + (["-n", ns] if ns else []) + ["-batch", "-"]
                run(argv, input="\n".join(lines) + "\n", where=f"shaping in {ns or 'root'}")

        # 5. OVS bridges.
        if uses_ovs:
            from .ovs import add_bridge, datapath_type, ensure_running
            ensure_running()
            self.datapath = datapath_type()
            for i, sw in enumerate(sorted(ovs_switches), 1):
                br = ovs_bridge(rid, i)
                params = topo.nodes[sw].params
                self.inventory.bridges.append(br)
                self.nodes[sw].intfs.insert(0, br)
                add_bridge(br, rid, sw, ovs_ports[sw], self.datapath, stp=bool(params.get("stp")),
                           dpid=int(params["dpid"]) if params.get("dpid") is not None else None,
                           controller=params.get("controller"))
                self.nodes[sw].bridge = br  # type: ignore[attr-defined]
                if params.get("uplink"):
                    self._attach_uplink(sw, br, params["uplink"])
            if self.datapath == "netdev":
                # The userspace datapath does not complete partial checksums: TCP
                # stalls unless the veths attached to it compute them in software.
                for ns, dev in offload_off:
                    _ethtool(ns, dev, ["tx", "off"])

        # 6. Routing daemons, where the topology asks for them.
        if any(n.params.get("bgp") for n in topo.nodes.values()):
            from .frr import start_frr
            start_frr(self)

    # -- helpers -----------------------------------------------------------------
    def static_arp(self) -> int:
        """Permanent neighbour entries between every pair of addresses that share a
        subnet (Mininet's ``autoStaticArp``): no ARP at the start of a trial.
        Returns the number of entries added."""
        import ipaddress
        ends = []  # (node, intf, interface address, mac)
        for node in self.nodes.values():
            for intf, cidr in node.addrs.items():
                if intf == "lo" or node.netns is None:
                    continue
                mac = node.run(["cat", f"/sys/class/net/{intf}/address"]).stdout.strip()
                ends.append((node, intf, ipaddress.ip_interface(cidr), mac))
        added = 0
        for node, intf, iface, _ in ends:
            lines = [f"neigh replace {peer.ip} lladdr {mac} dev {intf} nud permanent"
                     for other, _, peer, mac in ends
                     if other is not node and peer.ip in iface.network]
            if lines:
                _ip_batch(lines, netns=node.netns, where=f"static ARP on {node.name}")
                added += len(lines)
        return added

    def describe(self) -> List[Tuple[str, str, str, str]]:
        """Rows ``(node, kind, interfaces/addresses, how to enter)``."""
        rows = []
        for node in self.nodes.values():
            kind = node.kind
            if kind == "switch":
                kind += f" (ovs, {self.datapath})" if node.netns is None else " (bridge)"
            addrs = ", ".join(f"{i} {node.addrs[i]}" if i in node.addrs else i for i in node.intfs)
            rows.append((node.name, kind, addrs, node.enter_hint()))
        return rows


def _raise_interrupt(signum, frame):  # noqa: ANN001
    raise KeyboardInterrupt(f"signal {signum}")


def _route_line(route, node: str) -> str:
    """A route given as ``"10.0.1.0/24 via 10.0.0.254"`` or a dict."""
    if isinstance(route, dict):
        parts = [str(route.get("dst", "default"))]
        for key in ("via", "dev", "src", "metric"):
            if route.get(key) is not None:
                parts += [key, str(route[key])]
        text = " ".join(parts)
    else:
        text = str(route)
    if any(ch in text for ch in ";\n\r&|`$"):
        raise InputError(f"node {node}: bad route {text!r}")
    return text


def _ethtool(netns: Optional[str], dev: str, features: List[str]) -> None:
    """``ethtool -K dev ...`` in a namespace (nsenter: no /sys remount needed)."""
    argv = ["ethtool", "-K", dev] + features
    if netns:
        argv = ["nsenter", f"--net=/run/netns/{netns}"] + argv
    run(argv, where=f"ethtool -K {dev} {' '.join(features)}")


def _ip_batch(lines: List[str], netns: Optional[str] = None, where: str = "") -> None:
    if not lines:
        return
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    run(argv, input="\n".join(lines) + "\n", where=where)
