"""What each namespace configures in itself over rtnetlink (nslab.runtime.netlink) is
what the plan's ``ip`` lines say, read back with ``ip -j``; sysctls written
from a thread inside a namespace land there and not on the host; --no-ipv6."""
import json
import subprocess
import time

import pytest

from nslab import Lab
from nslab.model.topo import Topology

pytestmark = pytest.mark.root

HOST_KEYS = ["net.ipv4.tcp_congestion_control", "net.ipv4.ip_forward",
             "net.ipv6.conf.all.disable_ipv6", "net.ipv4.conf.default.rp_filter"]


def _host_sysctls():
    return subprocess.run(["sysctl", "-n", *HOST_KEYS], capture_output=True, text=True).stdout


def _j(node, *argv):
    return json.loads(node.run(["ip", "-j", *argv]).stdout or "[]")


@pytest.mark.versioned  # read back with iproute2's `ip -j`
def test_links_addresses_routes_bridge_and_sysctls_are_as_planned():
    t = Topology(name="nl", auto_ip=False)
    t.add_host("h1", loopback="10.255.0.1/32",
               routes=["10.9.0.0/16 via 10.0.0.2 metric 7 src 10.0.0.1", "default via 10.0.0.2",
                       "192.0.2.0/24 dev h1-eth0"],
               sysctls={"net.ipv4.tcp_congestion_control": "reno",
                        "net.ipv4.conf.default.rp_filter": "2",
                        "net.ipv6.conf.all.disable_ipv6": "1"})
    t.add_router("r1")
    t.add_switch("s1", stp=True)
    t.add_link("h1", "s1", {"ip": "10.0.0.1/24"}, None, mtu=1400)
    t.add_link("r1", "s1", {"ip": "10.0.0.2/24"}, None, mtu=1400)
    before = _host_sysctls()
    with Lab(t) as lab:
        h1, r1, s1 = lab["h1"], lab["r1"], lab["s1"]
        # sysctls: in the namespace, from a thread that entered it
        assert h1.read_sysctl("net.ipv4.tcp_congestion_control") == "reno"
        assert h1.read_sysctl("net.ipv4.conf.default.rp_filter") == "2"
        assert h1.read_sysctl("net.ipv6.conf.all.disable_ipv6") == "1"
        assert r1.read_sysctl("net.ipv4.ip_forward") == "1"
        assert _host_sysctls() == before
        # links up, MTU, addresses (lo's loopback among them)
        links = {l["ifname"]: l for l in _j(h1, "link", "show")}
        assert "UP" in links["h1-eth0"]["flags"] and links["h1-eth0"]["mtu"] == 1400
        assert "UP" in links["lo"]["flags"]
        addrs = {(a["ifname"], i["local"], i["prefixlen"]) for a in _j(h1, "addr", "show")
                 for i in a["addr_info"] if i["family"] == "inet"}
        assert {("lo", "10.255.0.1", 32), ("h1-eth0", "10.0.0.1", 24)} <= addrs
        # routes: gateway, metric, source, on-link scope, default
        routes = {r["dst"]: r for r in _j(h1, "route", "show")}
        assert routes["10.9.0.0/16"]["gateway"] == "10.0.0.2"
        assert routes["10.9.0.0/16"]["metric"] == 7 and routes["10.9.0.0/16"]["prefsrc"] == "10.0.0.1"
        assert routes["default"]["gateway"] == "10.0.0.2"
        assert routes["192.0.2.0/24"]["scope"] == "link" and routes["192.0.2.0/24"]["dev"] == "h1-eth0"
        assert routes["10.9.0.0/16"].get("protocol", "boot") == "boot"  # ip(8) omits its default
        # the bridge: STP with the planned forward delay, both ports enslaved and up
        br = _j(s1, "-d", "link", "show", "s1")[0]["linkinfo"]["info_data"]
        assert br["stp_state"] == 1 and br["forward_delay"] == 200
        ports = {p["ifname"] for p in _j(s1, "link", "show", "master", "s1")}
        assert ports == {"s1-eth1", "s1-eth2"}
        h1.run(["ping", "-c", "1", "-W", "5", "10.0.0.2"])
    assert _host_sysctls() == before


def test_no_ipv6_leaves_host_and_switch_links_without_ipv6(tmp_path):
    import os
    import sys
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    t = Topology(name="v4")
    t.add_host("h1")
    t.add_host("h2")
    t.add_switch("s1")
    t.add_link("h1", "s1")
    t.add_link("h2", "s1")
    with Lab(t.without_ipv6()) as lab:
        time.sleep(0.5)  # a link-local would be there by now (no DAD: tentative or not)
        for n in ("h1", "h2", "s1"):
            v6 = [(a["ifname"], i["local"]) for a in _j(lab[n], "addr", "show")
                  for i in a["addr_info"] if i["family"] == "inet6" and a["ifname"] != "lo"]
            assert v6 == [], (n, v6)
        # and nothing IPv6 went over the bridge: no DAD, MLD or router solicitation
        stats = {l["ifname"]: l for l in _j(lab["h1"], "-s", "link", "show")}
        assert stats["h1-eth0"]["stats64"]["tx"]["packets"] == 0
        lab["h1"].run(["ping", "-c", "1", "-W", "5", lab["h2"].ip])
    res = subprocess.run([nslab, "--results", str(tmp_path), "topo", "up", "single", "--k", "3",
                          "--no-ipv6", "--for", "0"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
