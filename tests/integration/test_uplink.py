"""Physical-NIC uplinks, with a veth pair standing in for the NIC: its far end
sits in a namespace that plays the remote box."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from nslab import Lab
from nslab.model.topo import Topology
from nslab.errors import InputError
from nslab.topologies import single

from nslab.runtime.testing import needs, stock_kernel

pytestmark = pytest.mark.root
# The uplink tests marked guest run again on the stock kernel (OVS kernel
# datapath); the alias sweep across an uplink runs there in tests/vm with a
# real NIC driver instead of this veth stand-in.

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The stand-in NIC, its far end and the remote box's namespace, named after
#: this test process: a run killed in the middle leaves them behind (they are
#: the test's, untagged), and the next run removes them (:func:`_leftovers`)
#: rather than failing on a name that exists.
NIC, FAR, REMOTE = (f"nslt{os.getpid()}a", f"nslt{os.getpid()}b", f"nsltremote{os.getpid()}")
BRIDGE = f"nslt{os.getpid()}c"  # a Linux bridge the NIC is already in
_MINE = re.compile(r"nslt(?:remote)?(\d+)[abc]?")
#: The fixed names older versions of this module used (never a lab's).
_OLD = {"nsltnic0", "nsltnic1", "nsltremote", "nsltbr0"}


def sh(*argv, check=True):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def nic_state():
    link = json.loads(sh("ip", "-j", "addr", "show", "dev", NIC).stdout)[0]
    off = sh("ethtool", "-k", NIC).stdout
    return {"mtu": link["mtu"], "up": "UP" in link["flags"],
            "addrs": sorted(f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]
                            if a["family"] == "inet"),
            "routes": sh("ip", "route", "show", "dev", NIC).stdout,
            "tx": [l for l in off.splitlines() if l.startswith("tx-checksumming")],
            "master": os.path.exists(f"/sys/class/net/{NIC}/master"),
            "in_ovs": sh("ovs-vsctl", "port-to-br", NIC, check=False).returncode == 0}


def _leftovers():
    """Remove the stand-ins of test runs whose process is gone (killed before
    their teardown), this process's own (none is live at a set-up: a pid can
    be a dead run's again), and the older fixed names; another live test
    process's stay (two at once would still clash on the NIC's address and
    route: the tiers run this module one after the other)."""
    def gone(name):
        if name in _OLD:
            return True
        m = _MINE.fullmatch(name)
        return m is not None and (int(m.group(1)) == os.getpid()
                                  or not os.path.exists(f"/proc/{m.group(1)}"))
    for line in sh("ip", "netns", "list").stdout.splitlines():
        if line.split() and gone(line.split()[0]):
            sh("ip", "netns", "del", line.split()[0], check=False)
    for link in json.loads(sh("ip", "-j", "link", "show").stdout or "[]"):
        if gone(link["ifname"]):
            sh("ip", "link", "del", link["ifname"], check=False)


@pytest.fixture
def stand_in_nic():
    _leftovers()
    sh("ip", "netns", "add", REMOTE)
    sh("ip", "link", "add", "name", NIC, "type", "veth", "peer", "name", FAR, "netns", REMOTE)
    sh("ip", "addr", "add", "192.168.77.1/24", "dev", NIC)
    sh("ip", "link", "set", "dev", NIC, "mtu", "1400", "up")
    sh("ip", "route", "add", "198.51.100.0/24", "via", "192.168.77.254", "dev", NIC)
    sh("ip", "-n", REMOTE, "addr", "add", "192.168.1.1/16", "dev", FAR)
    sh("ip", "-n", REMOTE, "link", "set", "dev", FAR, "mtu", "1400", "up")
    sh("ip", "-n", REMOTE, "link", "set", "dev", "lo", "up")
    sh("ip", "netns", "exec", REMOTE, "ethtool", "-K", FAR, "tx", "off")
    before = nic_state()
    yield before
    sh("ip", "link", "del", NIC, check=False)
    sh("ip", "netns", "del", REMOTE, check=False)


def uplink_topology():
    t = Topology(name="uplink", switch_type="ovs")
    t.add_host("h1", ip="192.168.1.2/16")
    t.add_switch("s1", uplink=NIC)
    t.add_link("h1", "s1")
    return t.validate()


@pytest.mark.guest
@pytest.mark.versioned  # OVS, iperf, ethtool, iproute2 on the restored NIC
@needs("iperf", "ovs-vsctl")
def test_alias_study_across_the_uplink_and_exact_restore(stand_in_nic):
    before = stand_in_nic
    serve = subprocess.Popen(["ip", "netns", "exec", REMOTE, NSLAB, "alias", "serve", "--iface", FAR,
                              "--aliases", "4", "--addr-template", "192.168.2.%d", "--for", "600"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # the server stops at SIGINT below; --for only bounds it should the test die
        with Lab(uplink_topology()) as lab:
            assert lab.extension("ovs").uplinks[NIC]["addrs"] == ["192.168.77.1/24"]
            during = nic_state()
            assert during["in_ovs"] and during["addrs"] == []
            lab["h1"].run(["ip", "link", "set", "dev", "h1-eth0", "mtu", "1400"])
            deadline = time.time() + 20
            while "Started" not in (serve.stdout.readline() or "") and time.time() < deadline:
                pass
            res = lab["h1"].run([NSLAB, "alias", "client", "--addr-template", "192.168.2.%d",
                                 "--workers", "4", "--time", "2"], timeout=60)
            assert "clients reported: 4/4" in res.stdout, res.stdout + res.stderr
            kbps = float(res.stdout.split("reports: ")[1].split()[0])
            assert kbps > 50_000
            # A plain host-to-host iperf to the remote box's base address too.
            from nslab.traffic.iperf import run_client
            rep = run_client(lab["h1"], "192.168.2.1", time=1)
            assert rep.total_bps > 50e6
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.communicate()
    assert nic_state() == before


@pytest.mark.guest
@needs("ovs-vsctl")
def test_a_crashed_lab_with_an_uplink_is_restored_by_clean(stand_in_nic):
    before = stand_in_nic
    code = textwrap.dedent(f"""
        import time
        from nslab import Lab
        from nslab.topologies import single
        lab = Lab(single(k=1, switch="ovs", uplink={NIC!r}))
        lab.start()
        print(lab.run_id, flush=True)
        time.sleep(600)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    run_id = p.stdout.readline().strip()
    assert nic_state()["in_ovs"]
    p.kill()
    p.wait()
    res = sh(NSLAB, "clean", "--run", run_id)
    assert f"restore uplink {NIC}" in res.stdout
    assert nic_state() == before


@pytest.mark.guest
@pytest.mark.parametrize("iface, extra, message", [
    ("nsltnone", {}, "no interface 'nsltnone'"),
    ("lo", {}, "loopback"),
])
def test_bad_uplinks_are_refused_before_anything_changes(iface, extra, message):
    with pytest.raises(InputError, match=message):
        Lab(single(k=1, switch="ovs", uplink=iface, **extra)).start()


@pytest.mark.guest
def test_uplink_in_another_bridge_or_on_the_default_route_is_refused(stand_in_nic):
    before = stand_in_nic
    sh("ip", "link", "add", "name", BRIDGE, "type", "bridge")
    try:
        sh("ip", "link", "set", "dev", NIC, "master", BRIDGE)
        with pytest.raises(InputError, match=f"already in {BRIDGE}"):
            Lab(single(k=1, switch="ovs", uplink=NIC)).start()
    finally:
        sh("ip", "link", "del", BRIDGE)
    sh("ip", "link", "set", "dev", NIC, "up")
    routes = json.loads(sh("ip", "-j", "route", "show", "default").stdout)
    if routes:
        dev = routes[0]["dev"]
        res = sh(NSLAB, "topo", "up", "single", "--switch", "ovs", "--uplink", dev, "--for", "0",
                 check=False)
        assert res.returncode == 2 and "carries the default route" in res.stderr
        assert sh("ovs-vsctl", "port-to-br", dev, check=False).returncode != 0
    assert nic_state()["addrs"] == before["addrs"]


@pytest.mark.guest
def test_uplink_needs_an_ovs_switch():
    with pytest.raises(InputError, match="add --switch ovs"):
        single(k=1, switch="bridge", uplink="eth0")


@needs("iperf", "ovs-vsctl")
def test_run_alias_across_the_uplink_measures_at_the_sender(stand_in_nic, tmp_path):
    """`nslab run alias --uplink NIC`: the lab is the client box; the remote box
    serves the aliases; the receiver figure comes from bytes the far end acked."""
    before = stand_in_nic
    serve = subprocess.Popen(["ip", "netns", "exec", REMOTE, NSLAB, "alias", "serve", "--iface", FAR,
                              "--aliases", "4", "--for", "120"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while "Started" not in (serve.stdout.readline() or "") and time.time() < deadline:
            pass
        # An emulated CPU (the stock-kernel guest) needs a longer point for a
        # valid window: a sample takes about a second there.
        duration = "10" if stock_kernel() else "2"
        res = subprocess.run([NSLAB, "--results", str(tmp_path), "run", "alias", "--uplink", NIC,
                              "--aliases", "1,4", "--duration", duration, "--repeat", "1"],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=30)
    (run,) = (tmp_path / "alias").iterdir()
    recs = [json.loads(l) for l in open(run / "records.jsonl")]
    assert [r["params"]["n"] for r in recs] == [1, 4]
    for r in recs:
        m = r["measurements"]
        assert m["receiver_measured_at"].startswith("sender")
        assert not m["invalid"], m["invalid"]
        assert m["receiver_bps"] > 50e6 and m["sockets_at_window_start"] == r["params"]["n"]
    prov = json.load(open(run / "provenance.json"))
    uplink = prov["setups"]["client"]["uplink"]
    assert uplink["iface"] == NIC and "speed" in uplink["ethtool"]
    assert nic_state() == before


def test_run_alias_across_an_uplink_without_a_server_says_what_to_do(stand_in_nic, tmp_path):
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "run", "alias", "--uplink", NIC,
                          "--aliases", "1", "--duration", "2", "--repeat", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "nslab alias serve" in res.stderr
    assert nic_state() == stand_in_nic
