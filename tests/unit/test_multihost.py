"""Labs across machines, the pure part: placement, VNIs and MTU arithmetic."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nslab.errors import InputError
from nslab.model.multihost import (VNI_BASE, cut_size, place, tunnel_mtu, tunnels, vxlan_overhead)
from nslab.topologies.clos import clos
from nslab.topologies.mininet import linear, torus


def test_vxlan_overhead_and_the_mtu_left_inside():
    assert vxlan_overhead("ipv4") == 50 and vxlan_overhead("ipv6") == 70
    assert tunnel_mtu(1500) == 1450 and tunnel_mtu(1500, "ipv6") == 1430
    assert tunnel_mtu(9000) == 8950
    with pytest.raises(InputError, match="below IPv4's minimum"):
        tunnel_mtu(100)


def test_a_clos_over_two_hosts_is_balanced_and_cut_into_vxlan_links():
    t = clos(spines=2, servers=2)
    p = place(t, ["a", "b"])
    assert sorted(p.values()) == ["a", "a", "b", "b"]
    tun = tunnels(t, p)
    assert len(tun) == cut_size(t, p) >= 1
    assert [x.vni for x in tun] == list(range(VNI_BASE, VNI_BASE + len(tun)))
    assert all(x.host_a != x.host_b and x.mtu == 1450 for x in tun)
    assert tunnels(t, p) == tun  # the same on every host


def test_explicit_placement_wins_and_is_checked():
    t = clos(spines=2, servers=2)
    p = place(t, ["a", "b"], explicit={"spine1": "b", "spine2": "b"})
    assert p["spine1"] == p["spine2"] == "b"
    with pytest.raises(InputError, match="unknown node 'spine9'"):
        place(t, ["a", "b"], explicit={"spine9": "a"})
    with pytest.raises(InputError, match="not one of a, b"):
        place(t, ["a", "b"], explicit={"spine1": "c"})
    with pytest.raises(InputError, match="named twice"):
        place(t, ["a", "a"])


def test_one_host_cuts_nothing():
    t = torus(x=3, y=3)
    p = place(t, ["only"])
    assert set(p.values()) == {"only"} and tunnels(t, p) == []


def test_a_link_mtu_that_does_not_fit_the_tunnel_is_refused():
    t = linear(k=2)
    t.links[0] = t.links[0].model_copy(update={"mtu": 1500})
    first = t.links[0]
    p = {n: "a" for n in t.nodes}
    p[first.b] = "b"  # the first link crosses hosts
    with pytest.raises(InputError, match="MTU 1500 does not fit a VXLAN tunnel"):
        tunnels(t, p)
    assert tunnels(t, p, underlay_mtu=9000)[0].mtu == 1500


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 24), hosts=st.integers(1, 4))
def test_every_node_is_placed_once_and_the_parts_differ_by_at_most_one(k, hosts):
    t = linear(k=k)
    names = [f"m{i}" for i in range(hosts)]
    p = place(t, names)
    assert set(p) == set(t.nodes)
    sizes = [list(p.values()).count(h) for h in names]
    assert max(sizes) - min(sizes) <= 1
    # a path cut into runs: never worse than cutting every link
    assert cut_size(t, p) <= len(t.links)


# -- one host's part: the build plan ------------------------------------------------
def _part(host="a"):
    from nslab.model.multihost import Part
    t = clos(spines=2, servers=2)
    p = place(t, ["a", "b"], {"spine1": "a", "server1": "a", "spine2": "b", "server2": "b"})
    return t, Part(host, p, {"a": "192.0.2.1", "b": "192.0.2.2"}, tuple(tunnels(t, p)))


def test_a_host_builds_only_its_nodes_and_one_vxlan_end_per_crossing_link():
    from nslab.runtime.plan import plan
    t, part = _part("a")
    bp = plan(t, "nl0a0a", (), part)
    assert set(bp.nodes) == {"spine1", "server1"}
    assert sorted(bp.namespaces) == ["nl0a0a-server1", "nl0a0a-spine1"]
    vx = [l for l in bp.link_lines if "vxlan" in l]
    veth = [l for l in bp.link_lines if "veth" in l]
    assert len(veth) == 1 and "spine1" in veth[0] and "server1" in veth[0]
    assert len(vx) == len(part.tunnels) == 2
    for tun, ln in zip(part.tunnels, vx):
        node, intf = (tun.a, tun.intf_a) if tun.host_a == "a" else (tun.b, tun.intf_b)
        assert ln == (f"link add name {intf} mtu 1450 netns nl0a0a-{node} type vxlan id {tun.vni} "
                      "local 192.0.2.1 remote 192.0.2.2 dstport 4789")
    # the other host builds the other ends of the same tunnels, mirrored
    bp_b = plan(t, "nl0a0a", (), _part("b")[1])
    vx_b = [l for l in bp_b.link_lines if "vxlan" in l]
    assert [l.split(" id ")[1].split()[0] for l in vx_b] == [str(x.vni) for x in part.tunnels]
    assert all("local 192.0.2.2 remote 192.0.2.1" in l for l in vx_b)
    # every interface of a local node is still configured (up; no address: unnumbered)
    assert "link set dev spine1-eth1 up" in bp.ns_lines["nl0a0a-spine1"]


def test_a_tunnel_end_is_found_only_on_its_own_host():
    t, part = _part("a")
    tun = part.tunnels[0]
    local = (tun.a, tun.intf_a) if tun.host_a == "a" else (tun.b, tun.intf_b)
    remote = (tun.b, tun.intf_b) if tun.host_a == "a" else (tun.a, tun.intf_a)
    assert part.tunnel_end(*local) == (tun, "192.0.2.1", "192.0.2.2")
    assert part.tunnel_end(*remote) is None


@pytest.mark.parametrize("spec,want", [
    ("a=10.0.0.1,b=10.0.0.2", {"a": "10.0.0.1", "b": "10.0.0.2"}),
    ("10.0.0.1,root@10.0.0.2", {"10.0.0.1": "10.0.0.1", "root@10.0.0.2": "10.0.0.2"}),
])
def test_hosts_are_ssh_destinations_with_their_underlay_address(spec, want):
    from nslab.model.multihost import parse_hosts
    assert parse_hosts(spec) == want


@pytest.mark.parametrize("spec,msg", [
    ("-oProxyCommand=touch /tmp/x", "not an SSH destination"),  # an ssh option, not a host
    ("a;reboot=10.0.0.1", "not an SSH destination"),
    ("a b", "not an SSH destination"),
    ("a=10.0.0.1,a=10.0.0.2", "named twice"),
    ("a=10.0.0.1,b=10.0.0.1", "same address"),
    ("a=10.0.0.300", "not an IPv4 address"),
    ("a,,b", "empty host"),
    ("no-such-host.invalid", "cannot resolve"),
])
def test_bad_hosts_are_refused_in_one_line(spec, msg):
    from nslab.model.multihost import parse_hosts
    with pytest.raises(InputError, match=msg):
        parse_hosts(spec)


def test_the_remote_command_reaches_the_far_shell_argument_by_argument():
    import shlex
    from nslab.hosts.ssh import Ssh
    argv = ["nslab", "agent", "exec", "--", "sh", "-c", "echo a; echo $HOME 'b' \"c\""]
    ssh = Ssh("h1", "/tmp", config="/tmp/cfg").argv(argv)
    i = ssh.index("--")
    assert ssh[i - 1] == "h1" and ssh[:3] == ["ssh", "-F", "/tmp/cfg"]
    assert "ControlMaster=no" in ssh and "BatchMode=yes" in ssh
    assert shlex.split(ssh[i + 1]) == argv  # one string, split by the remote shell


def test_a_yaml_hosts_section_pins_nodes_and_is_checked(tmp_path):
    import textwrap

    from nslab.model.topo import Topology
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent("""
        nodes: {h1: {}, h2: {}, s1: {kind: switch}}
        links: [[h1, s1], [h2, s1]]
        hosts: {h1: box1, h2: root@box2}
        """))
    t = Topology.from_yaml(str(path))
    assert t.placement == {"h1": "box1", "h2": "root@box2"}
    p = place(t, ["box1", "root@box2"], t.placement)
    assert p["h1"] == "box1" and p["h2"] == "root@box2" and p["s1"] in ("box1", "root@box2")
    path.write_text("nodes: {h1: {}}\nhosts: {h9: box1}\n")
    with pytest.raises(InputError, match=r"t\.yaml:2: hosts\.h9: hosts: unknown node 'h9'"):
        Topology.from_yaml(str(path))
    path.write_text("nodes: {h1: {}}\nhosts: {h1: '-oProxyCommand=x'}\n")
    with pytest.raises(InputError, match=r"t\.yaml:2: hosts\.h1"):
        Topology.from_yaml(str(path))


def test_an_agent_refuses_a_bad_request_in_one_line_before_building_anything():
    import io
    import json

    from nslab.hosts.agent import agent_up
    t = clos(spines=2, servers=2)
    good = {"run_id": "nl0a0a", "host": "a", "topology": t.to_dict(),
            "placement": {n: "a" for n in t.nodes}, "underlay": {"a": "192.0.2.1"}}
    for bad, msg in [({"run_id": "x;rm"}, "bad run id"),
                     ({"host": "z"}, "not one of the lab's hosts"),
                     ({"placement": {"spine1": "q"}}, "not one of"),
                     ({"underlay": {"a": "not-an-ip"}}, "not an IPv4 address"),
                     ({"extra": 1}, "extra"),
                     ({"topology": {"nodes": {"h 1": {}}}}, "not a valid node name")]:
        out = io.StringIO()
        rc = agent_up(io.StringIO(json.dumps({**good, **bad}) + "\n"), out)
        ev = json.loads(out.getvalue().strip().splitlines()[-1])
        assert rc == 2 and ev["event"] == "error" and msg in ev["message"], (bad, ev)
        assert len(out.getvalue().strip().splitlines()) == 1


@pytest.mark.timed
def test_a_remote_background_process_is_stopped_when_its_lifeline_closes(tmp_path):
    """The shell a background process runs under on its host: the command's own
    exit status when it ends by itself; SIGINT (at its default again, though a
    shell's background job starts with it ignored) when stdin closes; SIGKILL
    for one that ignores SIGINT and SIGTERM. No process is left."""
    import subprocess
    import time

    from nslab.hosts.ssh import LIFELINE

    def start(grace, *cmd):
        return subprocess.Popen(["sh", "-c", LIFELINE, "t", str(grace), "env",
                                 "--default-signal=INT", "NSLAB_TEST=1", *cmd],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p = start(1, "sh", "-c", "echo done; exit 3")
    assert p.wait(timeout=10) == 3 and p.stdout.read().strip() == "done"
    p.stdin.close()
    marker = tmp_path / "alive"
    p = start(1, "sh", "-c", f"trap 'echo int; exit 7' INT; touch {marker}; "
                             "while :; do sleep 0.05; done")
    while not marker.exists():
        time.sleep(0.02)
    t0 = time.monotonic()
    p.stdin.close()
    assert p.wait(timeout=10) == 7 and p.stdout.read().strip() == "int"
    assert time.monotonic() - t0 < 1.0  # SIGINT was enough: no grace period spent
    p = start(0.2, "sh", "-c", f"trap '' INT TERM; rm -f {marker}; while :; do sleep 0.05; done")
    deadline = time.monotonic() + 10
    while marker.exists() and time.monotonic() < deadline:  # its traps are set
        time.sleep(0.02)
    p.stdin.close()
    assert p.wait(timeout=10) == 137  # SIGKILL after INT and TERM were ignored
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"rm -f {marker}" not in out


def test_clean_hosts_cleans_every_host_at_once_and_one_unreachable_stops_none(monkeypatch):
    """`nslab clean --hosts`: each host's clean runs beside the others' (a barrier
    that only both reaching it together can pass), the results come in the
    hosts' order, and a host whose master connection fails is reported, not
    waited for."""
    import subprocess
    import threading

    from nslab.errors import LabError
    from nslab.hosts import ssh as ssh_mod

    together = threading.Barrier(2, timeout=10)
    closed = []

    class FakeSsh:
        def __init__(self, dest, control_dir, config=None):
            self.dest = dest

        def argv(self, cmd):
            return ["ssh", self.dest, "--", *cmd]

        def connect(self):
            if self.dest == "down":
                raise LabError("down: ssh: connect to host down port 22: No route to host")

        def close(self):
            closed.append(self.dest)

    def fake_run(argv, **kw):
        together.wait()  # raises BrokenBarrierError unless both cleans run at once
        return subprocess.CompletedProcess(argv, 0, f"cleaned {argv[1]}\n", "")

    monkeypatch.setattr(ssh_mod, "Ssh", FakeSsh)
    monkeypatch.setattr(ssh_mod.subprocess, "run", fake_run)
    got = ssh_mod.clean_hosts({"b": "10.0.0.2", "down": "10.0.0.9", "a": "10.0.0.1"},
                              ["--dry-run"], remote_nslab="nslab")
    assert list(got) == ["b", "down", "a"]
    assert got["a"].returncode == 0 and got["a"].stdout == "cleaned a\n"
    assert got["a"].argv == ["ssh", "a", "--", "nslab", "clean", "--dry-run"]
    assert got["down"].returncode == 255 and "No route to host" in got["down"].stderr
    assert sorted(closed) == ["a", "b"]
