"""Real namespaces, veths, Linux bridges, OVS and iperf2."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from nslab import Lab
from nslab.runtime.clean import discover
from nslab.errors import CapabilityError, CommandError
from nslab.run.bench import quiesce
from nslab.traffic import interference
from nslab.traffic.iperf import run_client, start_server, wait_listening
from nslab.model.topo import Topology
from nslab.topologies import pair, single

from nslab.runtime.testing import needs

pytestmark = pytest.mark.root

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def netns_list():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def iperf_mbps(lab, a="h1", b="h2", seconds=3):
    start_server(lab[b])
    wait_listening(lab[b])
    return run_client(lab[a], lab[b].ip, time=seconds).total_bps / 1e6


def _steal_jiffies():
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals[:8]), vals[7] if len(vals) > 7 else 0  # guest time is in user already


class _Bed:
    """What else the machine did during one run, to name in a failure: other
    tasks' share of the CPUs (scheduler accounting), steal time, and the
    longest stall of a 10 ms ticker (a paused VM or process stalls it)."""

    def __init__(self, waited: float = 0.0):
        self.waited = waited

    def __enter__(self):
        self.watch = interference.Watch(range(os.cpu_count() or 1))
        self.a, self.jiffies = self.watch.snapshot(), _steal_jiffies()
        self.stall_ms, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()
        return self

    def _tick(self):
        last = time.monotonic()
        while not self._stop.wait(0.01):
            now = time.monotonic()
            self.stall_ms = max(self.stall_ms, (now - last - 0.01) * 1000)
            last = now

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        b, (total, steal) = self.watch.snapshot(), _steal_jiffies()
        dt = total - self.jiffies[0]
        top = ", ".join(f"{name} {ms:.0f} ms" for name, ms in interference.top_others(self.a, b))
        self.text = (f"waited {self.waited:.1f} s for a quiet machine (at most 5), "
                     f"others {interference.others_share(self.a, b, os.cpu_count() or 1):.0f} % "
                     f"of the CPUs ({top or 'none'}), "
                     f"steal {100 * (steal - self.jiffies[1]) / max(dt, 1):.0f} %, "
                     f"longest stall {self.stall_ms:.0f} ms")


def best_of(lab, seconds, floor, tries=3):
    """iperf runs h1 -> h2 until one reaches ``floor`` Mbit/s or ``tries``
    ran, each after waiting (at most 5 s) for the machine to be quiet
    (:func:`quiesce`): the rates, and for each how long it waited and what
    else the machine did meanwhile."""
    start_server(lab["h2"])
    wait_listening(lab["h2"])
    runs = []
    while len(runs) < tries and (not runs or max(r for r, _ in runs) < floor):
        with _Bed(quiesce(timeout=5)) as bed:
            mbps = run_client(lab["h1"], lab["h2"].ip, time=seconds).total_bps / 1e6
        runs.append((mbps, bed.text))
    return runs


@needs("iperf", "ping")
def test_bridge_switch_ping_and_tcp(make_lab):
    lab = make_lab(single(k=3, switch="bridge"))
    assert {n.netns for n in lab if n.netns} <= netns_list()
    assert lab["h3"].ip == "10.0.0.3"
    lab["h1"].run(["ping", "-c", "1", "-W", "2", lab["h3"].ip])
    assert iperf_mbps(lab, "h1", "h3", 2) > 100


@pytest.mark.guest
@pytest.mark.versioned  # OVS, ethtool, iperf
@needs("iperf", "ping", "ovs-vsctl")
def test_ovs_switch_passes_tcp_on_this_datapath(make_lab):
    lab = make_lab(single(k=2, switch="ovs"))
    assert lab.datapath in ("system", "netdev")
    br = lab["s1"].intfs[0]
    out = subprocess.run(["ovs-vsctl", "get", "Bridge", br, "datapath_type", "external_ids"],
                         capture_output=True, text=True, check=True).stdout
    assert lab.datapath in out and lab.run_id in out
    if lab.datapath == "netdev":
        off = lab["h1"].run(["ethtool", "-k", "h1-eth0"]).stdout
        assert "tx-checksumming: off" in off
    lab["h1"].run(["ping", "-c", "1", "-W", "2", lab["h2"].ip])
    # TCP must flow, not stall (checksum offload would stall it on the userspace datapath).
    assert iperf_mbps(lab, seconds=2) > 100


@pytest.mark.versioned  # iperf and tc (iproute2)
@needs("iperf")
def test_1gbit_shaped_link_gives_line_rate_tcp(make_lab):
    lab = make_lab(pair(bw="1Gbit"))
    runs = best_of(lab, seconds=4, floor=870)
    # htb counts IP bytes: TCP carries at most 1448/1500 of 1 Gbit/s = 965 Mbit/s.
    # The cap is the property and holds for every run; the floor, 90 % of it,
    # only says the shaper does not cripple the link (measured 949-956 here),
    # so it asks it of the best of up to 3 runs: one Debian 13 CI run got 756
    # on another machine, which 2-CPU hogs at real-time priority here (50 %
    # duty, both CPUs) did not reproduce (948-956), so each run says what else
    # the machine did meanwhile.
    assert all(r <= 965 for r, _ in runs) and max(r for r, _ in runs) >= 870, runs


@pytest.mark.quiet  # a framed link's rate moves with what else runs, even at idle priority
@needs("iperf")
def test_framing_overhead_lowers_tcp_to_what_real_gbe_carries(make_lab):
    lab = make_lab(pair(bw="1Gbit", framing=True))
    runs = best_of(lab, seconds=3, floor=847)
    # 1448/1538 of 1 Gbit/s = 941 Mbit/s is the most TCP carries on real GbE:
    # the cap is the property and holds for every run (unframed, TCP gets
    # 949-956 here); the floor, 90 % of it, only says the shaper does not
    # cripple the link, so it asks it of the best run. `quiet`: framing turns
    # GSO off, so tbf meters ~81,000 frames/s with a 0.5 ms burst, and two
    # virtual-bed guests at SCHED_IDLE beside it (CI's background) cut it to
    # 693-911 Mbit/s (25 runs here; 937-941 alone), while the same machine
    # still carried 3.7-4.5 Gbit/s framed at 10 Gbit/s and the unframed
    # 1 Gbit/s link above 945-954: the shaper's timing, not the CPU's capacity.
    # Two CI runs beside those guests got 749 and 694. One alone got 757-771
    # while the hypervisor stole 27 % of the CPUs: the quiet tier runs a test
    # that fails so again (nslab.runtime.testing.pytest_runtest_protocol).
    assert all(r <= 945 for r, _ in runs) and max(r for r, _ in runs) >= 847, runs


@needs("ovs-vsctl", "iperf")
def test_ovs_daemons_the_lab_started_outlive_a_users_bridge_then_stop():
    from nslab.ovs import probes as ovs_probes
    from nslab.ovs.daemon import USER, owner, started_by_nslab
    from .conftest import Bystanders
    if ovs_probes.ovs_running() and not started_by_nslab():
        pytest.skip("OVS was already running here, not started by nslab: not ours to stop")
    if ovs_probes.ovs_running() and owner() == USER:
        pytest.skip("OVS is held by `nslab ovs start`: it stays up until `nslab ovs stop`")
    users = Bystanders(port=5996)  # starts the daemons if needed, then adds the user's bridge
    try:
        with Lab(single(k=2, switch="ovs")):
            pass
        assert ovs_probes.ovs_running(), "stopped OVS under a bridge nslab did not create"
        assert started_by_nslab()
    finally:
        users.remove()  # bridge gone, no run left: the daemons go too
    assert not ovs_probes.ovs_running()


def test_netem_is_refused_clearly_when_the_kernel_lacks_it():
    from nslab.runtime import caps
    if caps.probe()["netem"].ok:
        pytest.skip("this kernel has netem")
    before = netns_list()
    with pytest.raises(CapabilityError, match="netem"):
        Lab(pair(delay="5ms")).start()
    assert netns_list() == before


def test_two_labs_at_once_do_not_collide(make_lab):
    a = make_lab(single(k=2))
    b = make_lab(single(k=2))
    assert a.run_id != b.run_id
    a["h1"].run(["ping", "-c", "1", "-W", "2", "10.0.0.2"])
    b["h1"].run(["ping", "-c", "1", "-W", "2", "10.0.0.2"])
    # Same addresses, separate namespaces: a's h1 cannot see b's MAC.
    mac_b = b["h2"].run(["cat", "/sys/class/net/h2-eth0/address"]).stdout.strip()
    neigh_a = a["h1"].run(["ip", "neigh"]).stdout
    assert mac_b not in neigh_a


def test_failed_build_leaves_nothing_behind():
    t = Topology(name="broken")
    t.add_host("h1", routes=["192.0.2.0/24 via 172.31.255.1"])  # unreachable gateway: ip fails
    t.add_host("h2")
    t.add_link("h1", "h2")
    lab = Lab(t)
    with pytest.raises(CommandError, match="configuring h1"):
        lab.start()
    assert not any(n.startswith(lab.run_id) for n in netns_list())
    assert lab.run_id not in discover()


def test_processes_carry_the_run_tag(make_lab):
    lab = make_lab(pair())
    p = lab["h1"].popen(["sleep", "30"])
    time.sleep(0.2)
    env = open(f"/proc/{p.pid}/environ", "rb").read().split(b"\0")
    assert f"NSLAB_RUN={lab.run_id}".encode() in env


CRASHER = textwrap.dedent("""
    import sys, time
    from nslab import Lab
    from nslab.topologies import single
    from nslab.traffic.iperf import start_server
    lab = Lab(single(k=2, switch=sys.argv[1]))
    lab.start()
    start_server(lab["h2"])
    print(lab.run_id, flush=True)
    time.sleep(600)
""")


@pytest.mark.guest
@needs("iperf", "ovs-vsctl")
@pytest.mark.parametrize("switch", ["bridge",
                                    pytest.param("ovs", marks=pytest.mark.versioned)])  # OVS
def test_sigkill_then_clean_removes_only_tagged_objects(tmp_path, switch, bystanders):
    # bystanders: objects the lab did not create, with names close to the lab's.
    crasher = subprocess.Popen([sys.executable, "-c", CRASHER, switch], stdout=subprocess.PIPE,
                               text=True, cwd=ROOT)
    try:
        run_id = crasher.stdout.readline().strip()
        assert run_id.startswith("nl")
        found = discover(run_id)[run_id]
        assert found.namespaces and found.pids
        if switch == "ovs":
            assert found.extra.get("ovs") and found.interfaces
    finally:
        crasher.send_signal(signal.SIGKILL)
        crasher.wait()
    # Everything is still there after the crash...
    assert not discover(run_id)[run_id].empty
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nslab"), "clean"],
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert run_id in res.stdout
    # ...and nothing tagged is left after clean.
    left = discover(run_id)
    assert run_id not in left or left[run_id].empty
    # What the test made itself survives.
    bystanders.assert_intact()


def test_clean_skips_a_live_run(make_lab, tmp_path):
    lab = make_lab(pair())
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nslab"), "clean",
                          "--run", lab.run_id], capture_output=True, text=True)
    assert res.returncode == 0 and "skipped: run is live" in res.stdout
    lab["h1"].run(["ping", "-c", "1", "-W", "2", lab["h2"].ip])


@needs("unshare")
def test_clean_spares_a_tagged_process_of_another_pid_namespace():
    """A tagged process in another PID namespace was started by the nslab of
    another system on this kernel (a container, a test's pseudo-host with its
    own /run, whose journals this clean cannot read): `nslab clean` neither
    lists nor kills it, and still kills a process of the same run here. (A CI
    run was lost to this: the virtual bed's clean ended a pseudo-host's capture.)"""
    import secrets
    rid = next(r for r in (f"nl{secrets.token_hex(2)}" for _ in range(100)) if r not in discover())
    env = dict(os.environ, NSLAB_RUN=rid)
    here = subprocess.Popen(["sleep", "120"], env=env)
    inner_env = {k: v for k, v in os.environ.items() if k != "NSLAB_RUN"}
    there = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "env",
                              f"NSLAB_RUN={rid}", "sleep", "120"], env=inner_env)
    try:
        deadline = time.monotonic() + 10
        while True:  # the sleep inside: unshare's grandchild, in the new namespace
            kids = [p for p in psutil.Process(there.pid).children(recursive=True)
                    if p.name() == "sleep"]
            if kids and (kids[0].environ() or {}).get("NSLAB_RUN") == rid:
                break
            assert time.monotonic() < deadline, "the sleep in a new PID namespace did not start"
            time.sleep(0.05)
        inner = kids[0].pid
        assert os.readlink(f"/proc/{inner}/ns/pid") != os.readlink("/proc/self/ns/pid")
        assert discover(rid)[rid].pids == [here.pid]
        res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nslab"), "clean",
                              "--run", rid], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert f"process {here.pid} (sleep)" in res.stdout, res.stdout
        assert str(inner) not in res.stdout, res.stdout
        assert here.wait(timeout=10) < 0  # killed by a signal
        assert psutil.pid_exists(inner) and psutil.Process(inner).status() != psutil.STATUS_ZOMBIE
        assert there.poll() is None
    finally:
        for p in (here, there):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_sigint_tears_down(tmp_path):
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    p = subprocess.Popen([nslab, "--results", str(tmp_path), "topo", "up", "single", "--k", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    run_id = None
    while time.time() < deadline and run_id is None:
        line = p.stdout.readline()
        if "lab nl" in line:
            run_id = line.split("lab ", 1)[1].split(":")[0].strip()
    assert run_id
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert not any(n.startswith(run_id) for n in netns_list())


MN_LOAD = textwrap.dedent("""
    import sys
    # What `mn --custom FILE --topo nslab_single,3` does: exec the file, look up `topos`.
    customs = {}
    exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), customs, customs)
    topo = customs["topos"]["nslab_single"](3)
    print(sorted(topo.hosts()), sorted(topo.switches()), len(topo.links()))
""")


@pytest.mark.versioned  # Debian's Python and mininet
@needs("mn")
def test_topology_files_load_in_plain_mininet_without_nslab():
    """The system Python (Mininet's, without nslab) loads topologies/basic.py as `mn --custom`.

    Running `mn` itself is avoided on purpose: on any error Mininet runs its
    global cleanup, which deletes every OVS bridge on the machine.
    """
    res = subprocess.run(["/usr/bin/python3", "-c", MN_LOAD,
                          os.path.join(ROOT, "topologies", "basic.py")],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "['h1', 'h2', 'h3'] ['s1'] 3"


@pytest.mark.versioned  # Debian's mininet, iperf and ping output
@needs("iperf", "ping")
def test_mininet_cli_runs_on_lab_namespaces_without_broad_kills(tmp_path):
    """Mininet's own CLI drives the lab; its iperf uses our tagged runner
    (Mininet's kills every process named iperf), so an unrelated iperf survives."""
    bystander = subprocess.Popen(["iperf", "-s", "-p", "5998"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    script = tmp_path / "cli.txt"
    script.write_text("h1 ping -c1 h2\npingall\niperf h1 h2\n")
    code = textwrap.dedent(f"""
        from nslab import Lab
        from nslab.topologies import single
        from nslab.cmdline.mncli import run_cli
        with Lab(single(k=2)) as lab:
            run_cli(lab, script={str(script)!r})
    """)
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-2000:]
        assert "1 received" in out and "0% dropped (2/2 received)" in out
        # the server's own rate (read from its output) and the client's, as iperf prints them
        assert re.search(r"\*\*\* Results: \['[\d.]+ [GMK]?bits/sec', '[\d.]+ [GMK]?bits/sec'\]",
                         out), out[-2000:]
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_closing_the_terminal_tears_the_lab_down(tmp_path):
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    p = subprocess.Popen([nslab, "--results", str(tmp_path), "topo", "up", "pair"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = None
    deadline = time.time() + 20
    while time.time() < deadline and run_id is None:
        line = p.stdout.readline()
        if "lab nl" in line:
            run_id = line.split("lab ", 1)[1].split(":")[0].strip()
    assert run_id
    p.send_signal(signal.SIGHUP)
    p.communicate(timeout=30)
    assert not any(n.startswith(run_id) for n in netns_list())


@pytest.mark.parametrize("args", [
    ["alias_pair"], ["rfc2544", "--dut", "router"], ["rfc2544", "--dut", "bridge"],
    ["clos", "--spines", "2", "--servers", "2"], ["single", "--k", "3", "--switch", "ovs"],
    [os.path.join(ROOT, "examples", "two-hosts.yaml")],
    ["--custom", os.path.join(ROOT, "topologies", "basic.py"), "nslab_pair"],
])
def test_every_topology_the_docs_use_builds_from_the_cli(tmp_path, args):
    if args[0] == "clos" and not os.path.exists("/usr/lib/frr/bgpd"):
        pytest.skip("needs frr")
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    res = subprocess.run([nslab, "--results", str(tmp_path), "topo", "up", *args, "--for", "0"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "torn down" in res.stdout and "ip netns exec" in res.stdout


def test_every_link_end_is_up_when_the_lab_says_up(make_lab):
    from nslab.runtime.proc import links_not_flowing
    lab = make_lab(single(k=40))
    assert links_not_flowing(lab.inventory.namespaces) == []
    lab["h1"].run(["ping", "-c", "1", "-W", "2", "10.0.0.40"])


@pytest.mark.versioned  # iproute2's `ip -j route`
def test_route_tables_read_by_netlink_match_ip_json_in_each_namespace(make_lab):
    """Lab.route_tables (one thread, a netlink dump per namespace: what ECMP
    readiness polls) gives what `ip -j route show` gives in each node."""
    from nslab.runtime.proc import ip_json_routes
    lab = make_lab(single(k=3))
    h1 = lab["h1"]
    h1.run(["ip", "route", "add", "10.9.0.0/24", "nexthop", "via", "10.0.0.2",
            "nexthop", "via", "10.0.0.3"])
    h1.run(["ip", "route", "add", "10.8.0.7", "via", "inet6", "fe80::1", "dev", "h1-eth0"])
    tables = lab.route_tables(["h1", "h2", "h3"])
    for node, table in zip(["h1", "h2", "h3"], tables):
        assert table == ip_json_routes(lab[node].run(["ip", "-j", "route", "show"]).stdout)
    assert tables[0]["10.9.0.0/24"] == 2 and tables[0]["10.8.0.7/32"] == 1
    assert "10.9.0.0/24" not in tables[1]


def test_commands_run_inside_each_namespace_and_the_caller_stays_home(make_lab):
    from nslab.errors import CommandError
    from nslab.runtime.proc import NetnsJob, run_in_namespaces
    lab = make_lab(single(k=3))
    home = os.stat("/proc/thread-self/ns/net").st_ino
    res = run_in_namespaces([NetnsJob(lab[h].netns, ["ip", "-o", "link", "show"]) for h in
                             ("h1", "h2", "h3")] + [NetnsJob(None, ["ip", "-o", "link", "show"])])
    for h, r in zip(("h1", "h2", "h3"), res):
        assert f"{h}-eth0" in r.stdout and "h2-eth0" not in r.stdout.replace(f"{h}-eth0", "")
    assert "h1-eth0" not in res[3].stdout  # None: the root namespace
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    # a failing job is raised naming it; one that cannot enter its namespace too
    with pytest.raises(CommandError, match="bad job"):
        run_in_namespaces([NetnsJob(lab["h1"].netns, ["ip", "link", "show", "nosuch0"], where="bad job"),
                           NetnsJob(lab["h2"].netns, ["true"])])
    with pytest.raises(FileNotFoundError):
        run_in_namespaces([NetnsJob(f"{lab.run_id}-nosuch", ["true"])])
    assert os.stat("/proc/thread-self/ns/net").st_ino == home


def test_ovs_switches_linked_to_each_other_leave_no_interface(make_lab):
    from nslab.runtime import caps
    if not caps.probe()["ovs"].ok:
        pytest.skip("no Open vSwitch here")
    from nslab.topologies.mininet import linear
    lab = make_lab(linear(k=3, n=1, switch="ovs"))
    lab["h1"].run(["ping", "-c", "1", "-W", "5", lab["h3"].ip])
    rid = lab.run_id
    lab.stop()
    # root-namespace ports whose peers were in namespaces went with the
    # namespaces; the switch-to-switch links were deleted by name
    left = [d for d in os.listdir("/sys/class/net") if d.startswith(f"{rid}-")]
    assert left == []
