"""Real FRR daemons in lab namespaces."""
import os
import subprocess
import sys

import pytest

from nslab.runtime.testing import needs

from nslab import Lab
from nslab.frr import DaemonCheckError, wait_for_ecmp
from nslab.topologies.clos import clos, expected_routes


NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
# versioned: every test drives FRR (8.4 on Debian 12, 10.3 on Debian 13)
pytestmark = [pytest.mark.root, pytest.mark.versioned, needs("frr")]


def frr_tmp():
    try:
        return set(os.listdir("/var/tmp/frr"))
    except OSError:
        return set()


@pytest.mark.guest
def test_clos_converges_with_ecmp_and_vtysh_reaches_a_node(make_lab):
    before = frr_tmp()
    t = clos(spines=2, servers=2)
    lab = make_lab(t)
    seconds = wait_for_ecmp(lab, expected_routes(t), timeout=30)
    assert seconds < 30
    route = lab["server2"].run(["ip", "route", "show", "10.0.200.1"]).stdout
    # RFC 5549 as plain multipath routes: an IPv4 route via each spine's link (169.254.0.1 onlink)
    assert route.count("nexthop via") == 2 and "proto bgp" in route
    assert "server2-eth0" in route and "server2-eth1" in route
    lab["server2"].run(["ping", "-c", "1", "-W", "2", "-I", "10.0.200.2", "10.0.200.1"])
    # each session's peer has a permanent neighbour entry (outside the kernel's
    # shared cap), with the link-local address and MAC the peer really has
    import json
    for node, intf, peer, peer_intf in [("server2", "server2-eth1", "spine2", "spine2-eth1"),
                                        ("spine1", "spine1-eth0", "server1", "server1-eth0")]:
        neigh = json.loads(lab[node].run(["ip", "-j", "-6", "neigh", "show", "dev", intf,
                                          "nud", "permanent"]).stdout)
        link = json.loads(lab[peer].run(["ip", "-j", "addr", "show", "dev", peer_intf]).stdout)[0]
        ll = [a["local"] for a in link["addr_info"] if a["local"].startswith("fe80:")]
        assert [(n["dst"], n["lladdr"]) for n in neigh] == [(ll[0], link["address"])]
    res = subprocess.run([NSLAB, "vtysh", "server1", "--run", lab.run_id, "-c", "show bgp summary"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "spine1(server1-eth0)" in res.stdout
    workdir = lab.workdir
    lab.stop()
    assert not os.path.exists(workdir)
    assert frr_tmp() <= before  # no crash-log dirs of ours left behind
    assert not os.listdir("/run/frr") if os.path.isdir("/run/frr") else True


def test_daemons_killed_mid_run_or_dry_runs_leave_nothing_in_var_tmp(make_lab):
    # FRR removes /var/tmp/frr/<daemon>.<pid> only on a clean exit; ours get a
    # private /var/tmp, so a SIGKILLed daemon (a crash) leaves nothing on the host.
    before = frr_tmp()
    t = clos(spines=1, servers=2)
    lab = make_lab(t)
    wait_for_ecmp(lab, expected_routes(t), timeout=30)  # daemons up, pid files written
    daemon = lab.extension("frr").routers["server1"].daemon("bgpd")
    pid = daemon.pid()  # the process nslab started (FRR's pid file is never read)
    scratch = os.listdir(f"/proc/{pid}/root/var/tmp/frr")
    assert scratch == [f"bgpd.{pid}"]  # FRR made its dir, in the private tmpfs
    os.kill(pid, 9)
    lab.stop()
    assert frr_tmp() <= before


def test_a_bad_bgp_config_is_refused_naming_node_daemon_and_file():
    # Typing refuses such a prefix; FRR's own dry run is the second line of
    # defence, so bypass the first (model_copy does not validate) to test it.
    t = clos(spines=1, servers=1)
    node = t.nodes["server1"]
    t.nodes["server1"] = node.model_copy(update={"bgp": node.bgp.model_copy(
        update={"networks": ["not-a-prefix"]})})
    lab = Lab(t)
    before = frr_tmp()
    with pytest.raises(DaemonCheckError, match=r"server1: bgpd rejected .*/frr-conf/server1/bgpd.conf: "
                       r"No such command on config line \d+:\s+network not-a-prefix"):
        lab.start()
    assert frr_tmp() <= before  # the dry runs (-C) left no scratch dirs
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.run_id not in out


def test_interface_config_reaches_zebra_on_this_frr_and_comes_back_after_zebra_restarts(make_lab):
    """FRR 8.4 reads it from zebra.conf; FRR 10 from mgmtd, which hands it to
    zebra when zebra connects, again after a restart. "every 3 seconds" is
    zebra's own state (bgpd alone would ask for 10)."""
    import signal
    import time

    from nslab.runtime import caps
    from nslab.frr.router import wait_ready
    libstate = set(os.listdir("/var/lib/frr")) if os.path.isdir("/var/lib/frr") else set()
    t = clos(spines=1, servers=2, bfd=True)
    lab = make_lab(t)
    wait_for_ecmp(lab, expected_routes(t), timeout=30)
    frr = lab.extension("frr")
    assert caps.versions()["frr"] and frr.version.text.startswith(caps.versions()["frr"])
    r = frr.routers["spine1"]
    assert [d.NAME for d in r.daemons] == (["mgmtd"] if frr.version.mgmtd else []) + [
        "zebra", "bfdd", "bgpd"]

    def ra_every_3_s():
        return "ND router advertisements are sent every 3 seconds" in r.vtysh(
            "show interface spine1-eth0")
    assert ra_every_3_s()
    z = r.daemon("zebra")
    old = z.signal(signal.SIGKILL)
    z.reap()
    z.start()
    wait_ready([z], 30)
    assert z.pid() not in (None, old)
    deadline = time.monotonic() + 15
    while not ra_every_3_s():
        assert time.monotonic() < deadline, r.vtysh("show interface spine1-eth0")
        time.sleep(0.2)
    wait_for_ecmp(lab, expected_routes(t), timeout=60)
    lab.stop()
    assert (set(os.listdir("/var/lib/frr")) if os.path.isdir("/var/lib/frr") else set()) == libstate
    assert not os.listdir("/run/frr") if os.path.isdir("/run/frr") else True


def test_leaves_with_hosts_route_between_racks(make_lab):
    t = clos(spines=2, leaves=2, hosts_per_leaf=2)
    lab = make_lab(t)
    wait_for_ecmp(lab, expected_routes(t), timeout=30)
    lab["h1x1"].run(["ping", "-c", "1", "-W", "2", "10.1.2.2"])


@pytest.mark.guest
def test_the_fabric_heals_after_a_link_flap(make_lab):
    """FRR 8.4 with kernel nexthop groups left server2's group one member short
    after its link to spine1 went down and up (zebra never refilled it): the
    lab installs plain multipath routes instead."""
    t = clos(spines=2, servers=2, link_rate="none")
    lab = make_lab(t)
    wait_for_ecmp(lab, expected_routes(t), timeout=30)
    s2 = lab["server2"]
    s2.run(["ip", "link", "set", "dev", "server2-eth0", "down"])
    wait_until_nexthops(s2, 1)
    s2.run(["ip", "link", "set", "dev", "server2-eth0", "up"])
    seconds = wait_for_ecmp(lab, expected_routes(t), timeout=30)
    assert seconds < 60
    route = s2.run(["ip", "route", "show", "10.0.200.1"]).stdout
    assert "server2-eth0" in route and "server2-eth1" in route


def wait_until_nexthops(node, n, timeout=10.0):
    import time
    deadline = time.monotonic() + timeout
    while node.run(["ip", "route", "show", "10.0.200.1"]).stdout.count("dev server2-") != n:
        assert time.monotonic() < deadline, "the route never lost its nexthop"
        time.sleep(0.05)
