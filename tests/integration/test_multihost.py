"""A lab across two hosts, for real: OpenSSH (one multiplexed connection per
host), `nslab agent` on each, VXLAN for the links between them, FRR on both.

The two hosts are pseudo-hosts (see pseudohosts.py): their own network, mounts
and PIDs, an sshd each, one veth between them as the underlay. The controller
runs inside the first, as a user on one machine of a pair would.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from nslab.runtime.testing import needs

from .pseudohosts import PseudoHosts, available

pytestmark = [pytest.mark.root, needs("frr")]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
PY = sys.executable
HOSTS = "10.99.0.1,10.99.0.2"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    why = available()
    if why:
        pytest.skip(f"no pseudo-hosts here: {why}")
    ph = PseudoHosts(str(tmp_path_factory.mktemp("hosts")))
    try:
        ph.start()
        yield ph
    finally:
        ph.stop()


def _nslab(ph, *args, timeout=300, results=None):
    argv = [NSLAB, "--results", results or os.path.join(ph.dir, "results"), *args]
    return ph.run(0, argv, timeout=timeout)


def _converge_script(ph) -> str:
    """Build the clos across both hosts, wait for ECMP, print what was seen."""
    path = os.path.join(ph.dir, "converge.py")
    with open(path, "w") as f:
        f.write(f"""
import json, sys, time
from nslab.hosts.remote import MultiLab
from nslab.frr import wait_for_ecmp
from nslab.topologies.clos import clos, expected_routes
t = clos(spines=2, servers=2)
out = {{}}
with MultiLab(t, {{h: h for h in {HOSTS!r}.split(",")}},
              ssh_config={ph.ssh_config!r}) as lab:
    out["placement"] = lab.placement
    out["tunnels"] = [[tu.a, tu.intf_a, tu.b, tu.intf_b, tu.vni, tu.mtu] for tu in lab.tunnels]
    out["converged_s"] = wait_for_ecmp(lab, expected_routes(lab.topology), timeout=90)
    out["routes"] = {{n: lab[n].run(["ip", "-j", "route", "show", "10.0.200.1"]).stdout
                     for n in ("server1", "server2")}}
    out["vxlan"] = {{n: lab[n].run(["ip", "-d", "-j", "link", "show", "type", "vxlan"]).stdout
                    for n in lab.nodes}}
    out["ping"] = lab["server2"].run(["ping", "-c", "3", "-i", "0.2", "10.0.200.1"],
                                     check=False).returncode
    out["hosts"] = {{n: node.host for n, node in lab.nodes.items()}}
    out["bgp"] = lab.extension("frr").routers["server1"].vtysh("show bgp summary json")
print(json.dumps(out))
""")
    return path


@pytest.mark.versioned  # OpenSSH, VXLAN by iproute2, FRR
def test_a_clos_split_over_two_hosts_converges_over_vxlan(hosts):
    ph = hosts
    res = ph.run(0, [PY, _converge_script(ph)], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # both hosts hold nodes, and every link between them is one VXLAN tunnel
    assert set(out["placement"].values()) == {"10.99.0.1", "10.99.0.2"}
    crossing = [(a, b) for a, _, b, _, _, _ in out["tunnels"]
                if out["placement"][a] != out["placement"][b]]
    assert len(crossing) == len(out["tunnels"]) >= 1
    assert len({t[4] for t in out["tunnels"]}) == len(out["tunnels"])  # one VNI each
    for a, ia, b, ib, vni, mtu in out["tunnels"]:
        assert mtu == 1450  # a 1500-byte underlay less VXLAN's 50
        for node, intf in ((a, ia), (b, ib)):
            links = {l["ifname"]: l for l in json.loads(out["vxlan"][node])}
            info = links[intf]["linkinfo"]["info_data"]
            assert info["id"] == vni and links[intf]["mtu"] == 1450, links[intf]
            assert info["local"] == out["placement"][node]  # the underlay's own address
    # every server reaches the other's network over both spines
    assert out["converged_s"] < 90
    for node in ("server2",):
        route = json.loads(out["routes"][node])[0]
        assert len(route["nexthops"]) == 2, route
    assert out["ping"] == 0
    peers = json.loads(out["bgp"])["ipv4Unicast"]["peers"]
    assert len(peers) == 2 and all(p["state"] == "Established" for p in peers.values()), peers
    assert ph.leftovers(0) == [] and ph.leftovers(1) == []


# Runs once, in the host tier (not versioned): nslab's placement and ECMP study; SSH, VXLAN and FRR run in the other tests
def test_the_ecmp_study_runs_unchanged_across_the_hosts(hosts):
    ph = hosts
    results = os.path.join(ph.dir, "ecmp-results")
    # two trials per policy, not the quick preset's four: what is tested is each
    # trial's parts across the hosts, not the claim, and a trial there costs
    # ~12 s of captures and iperf set-up (131 s with four in a CI run here, 80 s
    # with two)
    res = _nslab(ph, "run", "ecmp", "--quick", "--rounds", "1", "--duration", "2",
                 "--trials", "2", "--hosts", HOSTS,
                 "--ssh-config", ph.ssh_config, results=results, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = os.path.join(results, "ecmp", os.listdir(os.path.join(results, "ecmp"))[0])
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "records.jsonl")) if l.strip()]
    assert sorted((r["params"]["policy"], r["params"]["trial"]) for r in recs) == [
        (0, 0), (0, 1), (1, 0), (1, 1)]
    for r in recs:
        m = r["measurements"]
        # every stream's link was found from the captures, on either host's side
        assert m["unassigned_streams"] == 0, m
        assert sum(m["streams_per_link"].values()) == 3
    prov = json.load(open(os.path.join(run_dir, "provenance.json")))
    assert {n["host"] for n in prov["lab"]["nodes"].values()} == set(HOSTS.split(","))
    assert "[agrees]" in res.stdout or "[undecided]" in res.stdout or "[disagrees]" in res.stdout
    assert ph.leftovers(0) == [] and ph.leftovers(1) == []


def _pids(ph, i, pattern):
    """PIDs on pseudo-host ``i`` (its own PID namespace: nothing outside it is
    seen) whose command line matches ``pattern`` (grep -E)."""
    out = ph.run(i, ["sh", "-c", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline "
                                 f"2>/dev/null | grep -Eq '{pattern}' && echo ${{p#/proc/}}; "
                                 "done; true"]).stdout
    return [int(p) for p in out.split()]


def _agents(ph, i):
    return _pids(ph, i, "^[^ ]*python[^ ]* [^ ]*nslab agent up")


def _kill_controller(ph, proc):
    """SIGKILL the controller (`nslab ... topo up`) itself, inside pseudo-host 0."""
    pids = _pids(ph, 0, "^[^ ]*python[^ ]* [^ ]*nslab --results [^ ]* topo up")
    assert len(pids) == 1, pids
    ph.run(0, ["kill", "-9", str(pids[0])])
    proc.wait(timeout=30)


def _start_lab(ph):
    proc = ph.popen(0, [NSLAB, "--results", os.path.join(ph.dir, "results"), "topo", "up",
                        "clos", "--spines", "2", "--servers", "2", "--hosts", HOSTS,
                        "--ssh-config", ph.ssh_config, "--for", "600"],
                    stdout=open(os.path.join(ph.dir, "crash.out"), "w"),
                    stderr=open(os.path.join(ph.dir, "crash.err"), "w"))
    deadline = time.monotonic() + 120
    while "nl" not in "".join(ph.leftovers(1)) or not _agents(ph, 1):
        assert proc.poll() is None, open(os.path.join(ph.dir, "crash.err")).read()[-2000:]
        assert time.monotonic() < deadline, "the lab did not come up"
        time.sleep(0.5)
    while "lab " not in open(os.path.join(ph.dir, "crash.out")).read():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    return proc


def _gone(ph, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ph.leftovers(0) and not ph.leftovers(1):
            return True
        time.sleep(0.5)
    return False


def _control_dirs(run):
    """The SSH control directories of lab ``run`` in the temporary directory
    (the pseudo-hosts share this machine's)."""
    top = tempfile.gettempdir()
    return [e for e in os.listdir(top) if re.fullmatch(rf"nslab-{run}-[a-z0-9_]{{8}}", e)]


def _run_of(ph):
    return next(x.split()[1].split("-")[0] for x in ph.leftovers(0) if x.startswith("netns "))


@pytest.mark.versioned  # OpenSSH: its sessions end with the controller
def test_a_killed_controller_leaves_nothing_on_either_host(hosts):
    """SIGKILL of the controller closes its SSH sessions; each agent sees the end
    of its input and tears its part down. What the controller kept on its own
    machine, the SSH control directory, goes with `nslab clean` there."""
    ph = hosts
    proc = _start_lab(ph)
    assert ph.leftovers(0) and ph.leftovers(1)
    run = _run_of(ph)
    [control] = _control_dirs(run)
    _kill_controller(ph, proc)
    assert _gone(ph, 60), (ph.leftovers(0), ph.leftovers(1))
    res = _nslab(ph, "clean")
    assert res.returncode == 0 and "ssh control dir" in res.stdout, res.stdout + res.stderr
    assert _control_dirs(run) == []
    assert _pids(ph, 0, f"ControlPath=[^ ]*/{control}/") == []  # its persisting masters too


def test_crashed_agents_are_cleaned_with_clean_hosts(hosts):
    """Agents killed on both hosts (a host-side crash) leave their parts; `nslab
    clean --hosts` removes them on every host, by tag, and nothing else."""
    ph = hosts
    proc = _start_lab(ph)
    run = _run_of(ph)
    for i in (0, 1):
        for pid in _agents(ph, i):
            ph.run(i, ["kill", "-9", str(pid)])
    _kill_controller(ph, proc)
    time.sleep(1)
    left = (ph.leftovers(0), ph.leftovers(1))
    assert any("netns" in x for x in left[0]) and any("netns" in x for x in left[1]), left
    res = _nslab(ph, "clean", "--hosts", HOSTS, "--ssh-config", ph.ssh_config)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "10.99.0.1:" in res.stdout and "10.99.0.2:" in res.stdout and "removed run" in res.stdout
    assert ph.leftovers(0) == [] and ph.leftovers(1) == [], (ph.leftovers(0), ph.leftovers(1))
    assert _control_dirs(run) == []  # the controller's host is one of them


def test_an_unreachable_host_fails_in_one_line_and_builds_nothing(hosts):
    ph = hosts
    res = _nslab(ph, "topo", "up", "clos", "--spines", "2", "--servers", "2", "--hosts",
                 "10.99.0.1,10.99.0.9", "--ssh-config", ph.ssh_config, "--for", "1", timeout=120)
    assert res.returncode != 0
    err = [l for l in res.stderr.splitlines() if l.startswith("nslab:")]
    assert len(err) == 1 and "10.99.0.9" in err[0], res.stderr
    assert ph.leftovers(0) == [] and ph.leftovers(1) == []


@needs("dumpcap", "tcpdump", "ping")
def test_a_node_on_the_other_host_is_captured_from_the_controller(hosts):
    """`nslab capture` on the controller (pseudo-host 0) of a node on the other
    host runs the capture there over the lab's SSH connection and writes the
    stream into -w FILE; Ctrl-C leaves no dumpcap on either host."""
    ph = hosts
    topo = os.path.join(ph.dir, "pair2.yaml")
    with open(topo, "w") as f:
        f.write("name: pair2\nnodes:\n  h1: {ip: 10.0.0.1/24}\n  h2: {ip: 10.0.0.2/24}\n"
                "links:\n  - [h1, h2]\nhosts: {h1: 10.99.0.1, h2: 10.99.0.2}\n")
    err = os.path.join(ph.dir, "pair2.err")
    proc = ph.popen(0, [NSLAB, "--results", os.path.join(ph.dir, "results"), "topo", "up", topo,
                        "--hosts", HOSTS, "--ssh-config", ph.ssh_config, "--for", "600"],
                    stdout=open(os.devnull, "w"), stderr=open(err, "w"))
    try:
        deadline = time.monotonic() + 120
        while not [f for f in ph.run(0, ["ls", "/run/nslab"]).stdout.split()
                   if f.endswith(".controller.json")]:  # the controller's record: lab up
            assert proc.poll() is None, open(err).read()[-2000:]
            assert time.monotonic() < deadline, "the lab did not come up"
            time.sleep(0.5)
        run = [f for f in ph.run(0, ["ls", "/run/nslab"]).stdout.split()
               if f.endswith(".controller.json")][0].split(".")[0]
        pcap = os.path.join(ph.dir, "h2.pcapng")
        cap_err = os.path.join(ph.dir, "capture.err")
        cap = ph.popen(0, [NSLAB, "capture", "h2:h2-eth0", run, "-w", pcap, "icmp"],
                       stdin=open(os.devnull), stdout=open(os.devnull, "w"),
                       stderr=open(cap_err, "w"))
        while "capturing h2:h2-eth0 on 10.99.0.2" not in open(cap_err).read():
            assert cap.poll() is None, open(cap_err).read()
            assert time.monotonic() < deadline + 60, open(cap_err).read()
            time.sleep(0.2)
        assert _pids(ph, 1, "^[^ ]*dumpcap ") and not _pids(ph, 0, "^[^ ]*dumpcap ")
        res = ph.run(0, ["ip", "netns", "exec", f"{run}-h1", "ping", "-c", "5", "-i", "0.2",
                         "-W", "2", "10.0.0.2"])
        assert res.returncode == 0, res.stdout + res.stderr
        time.sleep(0.3)
        mine = _pids(ph, 0, "^[^ ]*python[^ ]* [^ ]*nslab capture ")
        assert len(mine) == 1, mine
        ph.run(0, ["kill", "-INT", str(mine[0])])  # Ctrl-C
        assert cap.wait(timeout=60) == 0, open(cap_err).read()
        said = open(cap_err).read()
        assert "10 packets captured on h2:h2-eth0 on 10.99.0.2 (stopped)" in said, said
        read = subprocess.run(["tcpdump", "-n", "-r", pcap, "icmp"], capture_output=True,
                              text=True, timeout=30)
        lines = [l for l in read.stdout.splitlines() if l.strip()]
        assert read.returncode == 0 and len(lines) == 10, read.stdout + read.stderr
        assert sum("echo request" in l for l in lines) == 5
        assert sum("echo reply" in l for l in lines) == 5
        # stopped: no dumpcap (nor remote nslab capture) of the run on either host
        assert not _pids(ph, 0, "^[^ ]*dumpcap ") and not _pids(ph, 1, "^[^ ]*dumpcap ")
        assert not _pids(ph, 1, "^[^ ]*python[^ ]* [^ ]*nslab capture ")
    finally:
        ctl = _pids(ph, 0, "^[^ ]*python[^ ]* [^ ]*nslab --results [^ ]* topo up")
        for pid in ctl:
            ph.run(0, ["kill", "-INT", str(pid)])
        proc.wait(timeout=120)
    assert _gone(ph, 60), (ph.leftovers(0), ph.leftovers(1))
