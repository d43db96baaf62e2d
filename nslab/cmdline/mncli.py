"""The Mininet CLI on a running lab.

Mininet's own :class:`mininet.cli.CLI` drives our named namespaces: each node
gets a Mininet ``Host`` whose shell is started with ``ip netns exec <ns>`` (and
``NSLAB_RUN`` in its environment), and the lab's existing interfaces are
attached as Mininet ``Intf`` objects. So ``h1 ping h2``, ``pingall``,
``iperf h1 h2``, ``nodes``, ``net`` and ``py`` work as in ``mn``.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from ..errors import CapabilityError, InputError
from ..traffic.iperf import IperfReport, parse_text, run_client, start_server, wait_listening

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.lab import Lab


def run_cli(lab: "Lab", script: Any = None) -> None:
    """Run the Mininet CLI on ``lab`` until the user exits; stop its shells after."""
    keep = logging.getLoggerClass()  # mininet.log replaces it: nslab's loggers stay stdlib's
    try:
        from mininet.cli import CLI
        from mininet.link import Intf
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host
    except ImportError:
        raise CapabilityError("the Mininet CLI needs Mininet (apt install mininet)") from None
    finally:
        logging.setLoggerClass(keep)

    class NsHost(Host):
        """A Mininet host living in one of the lab's named namespaces."""

        def __init__(self, name: str, netns: str, **params: Any) -> None:
            self.nslab_netns = netns
            super().__init__(name, inNamespace=False, **params)

        def _popen(self, cmd: Sequence[str], **params: Any) -> Any:  # Mininet's hook
            env = dict(params.pop("env", None) or os.environ)
            env["NSLAB_RUN"] = lab.run_id
            return super()._popen(["ip", "netns", "exec", self.nslab_netns] + list(cmd),
                                  env=env, **params)

    class LabMininet(Mininet):
        """Mininet's network object over the lab. ``iperf`` is replaced: Mininet's
        kills every process named iperf on the machine, not only the lab's. As
        Mininet's, it gives the server's rate (what it received, from its own
        output) and the client's, each as iperf prints it."""

        def iperf(self, hosts: Optional[List[Any]] = None, l4Type: str = "TCP",  # noqa: N803
                  udpBw: str = "10M", fmt: Optional[str] = None,  # noqa: N803 - Mininet's names
                  seconds: float = 5, port: int = 5001) -> List[str]:
            from mininet.log import output

            hosts = hosts or [self.hosts[0], self.hosts[-1]]
            client, server = (lab[h.name] for h in hosts)
            server_ip = server.ip
            if server_ip is None:
                raise InputError(f"iperf: {server.name} has no IPv4 address to connect to")
            udp = l4Type == "UDP"
            output(f"*** Iperf: testing {l4Type} bandwidth between {client.name} and {server.name}\n")
            srv = start_server(server, udp=udp, port=port)
            try:
                wait_listening(server, port, udp=udp)
                rep = run_client(client, server_ip, time=seconds, udp=udp,
                                 rate=udpBw if udp else None, port=port)
            finally:
                srv.stop()  # it prints its last report on the way out
            said = srv.popen.stdout.read() if srv.popen.stdout is not None else ""
            result = iperf_results(said, rep)
            if udp:
                result.insert(0, udpBw)
            output(f"*** Results: {result}\n")
            return result

    setLogLevel("info")
    net = LabMininet(topo=None, build=False, controller=None)
    shells = []
    try:
        for node in lab:
            if node.netns is None:
                continue
            h = NsHost(node.name, node.netns)
            shells.append(h)
            for intf in node.intfs:
                i = Intf(intf, node=h)
                cidr = node.addrs.get(intf)
                if cidr:
                    i.ip, i.prefixLen = cidr.split("/")[0], int(cidr.split("/")[1])
            if node.kind == "switch":
                net.switches.append(h)
            else:
                net.hosts.append(h)
            net.nameToNode[node.name] = h
        CLI(net, script=script)
    finally:
        for h in shells:
            h.terminate()


def iperf_rate(bps: float) -> str:
    """A rate as iperf prints it (three figures, its adaptive unit): ``13.1
    Gbits/sec``, ``954 Mbits/sec``."""
    for unit, size in (("Gbits", 1e9), ("Mbits", 1e6), ("Kbits", 1e3)):
        if bps >= size:
            return f"{bps / size:.3g} {unit}/sec"
    return f"{bps:.3g} bits/sec"


def iperf_results(server_output: str, client: IperfReport) -> List[str]:
    """``[server's rate, client's rate]`` of one ``iperf`` of the CLI, as
    Mininet's ``Mininet.iperf`` gives them: what the server received, read
    from its own output (for UDP, the server report the client got when the
    server printed nothing), and what the client sent. iperf2's TCP client
    gets no server report: the client's figure taken for both printed one
    number twice (``13000.0 Mbits/sec`` for each end)."""
    server = parse_text(server_output)
    got: Optional[float] = None
    if server.sum is not None or server.streams:
        got = server.total_bps
    elif client.server_reports:
        got = client.server_reports[0].bps
    return [iperf_rate(got) if got is not None else "no server report",
            iperf_rate(client.total_bps)]

