"""Untrusted topology files against the real machine: refused before anything is
built, nothing created in the root namespace, no host sysctl changed."""
import os
import subprocess
import sys
import textwrap

import pytest

from nslab import Lab
from nslab.errors import InputError
from nslab.topologies import pair

pytestmark = pytest.mark.root
#: Refusals that depend on the running kernel run again in every stock-kernel
#: guest (marked kernel); the others are decided before any kernel (sysctls
#: off the allow-list of nslab.model.sysctls among them).
KERNEL_DEPENDENT: set = set()

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
#: Host-wide keys a hostile file tries to reach, read before and after.
WATCHED = ["kernel.domainname", "kernel.core_pattern", "net.core.rmem_max",
           "net.core.netdev_max_backlog", "vm.swappiness",
           "net.ipv6.neigh.default.gc_thresh3"]

FILES = {
    "inject.yaml": """
        nodes:
          h1:
            loopback: "10.9.9.9/32 dev lo\\nnetns add injected2"
          h2: {}
        links:
          - [h1, h2]
        """,
    "domainname.yaml": """
        nodes:
          h1:
            sysctls: {kernel.domainname: pwned}
          h2: {}
        links:
          - [h1, h2]
        """,
    "core_pattern.yaml": """
        nodes:
          h1: {sysctls: {kernel.core_pattern: "|/bin/touch /tmp/pwned"}}
          h2: {}
        links: [[h1, h2]]
        """,
    "rmem.yaml": """
        nodes:
          h1: {sysctls: {net.ipv4.tcp_congestion_control: reno}}
          h2:
            sysctls: {net.core.rmem_max: 4096}
        links: [[h1, h2]]
        """,
    "backlog.yaml": """
        nodes:
          h1: {}
          h2: {sysctls: {net.core.netdev_max_backlog: 10}}
        links: [[h1, h2]]
        """,
    # issue 51: writable in a fresh namespace, yet host-wide: a one-way static
    # key of the kernel's (after `modprobe nf_conntrack`), and a table shared
    # by every namespace
    "lwtunnel.yaml": """
        nodes:
          h1:
            sysctls: {net.netfilter.nf_hooks_lwtunnel: 1}
          h2: {}
        links: [[h1, h2]]
        """,
    "gc_thresh.yaml": """
        nodes:
          h1: {}
          h2: {sysctls: {net.ipv6.neigh.default.gc_thresh3: 16}}
        links: [[h1, h2]]
        """,
    "intf.yaml": """
        nodes: {h1: {}, h2: {}}
        links:
          - {a: h1, b: h2, params1: {intf: "e0\\nnetns add injected3"}}
        """,
}
EXPECT = {"inject.yaml": (3, "nodes.h1.loopback"),
          "domainname.yaml": (3, "nodes.h1.sysctls['kernel.domainname']"),
          "core_pattern.yaml": (2, "nodes.h1.sysctls['kernel.core_pattern']"),
          "rmem.yaml": (4, "nodes.h2.sysctls['net.core.rmem_max']"),
          "backlog.yaml": (3, "nodes.h2.sysctls['net.core.netdev_max_backlog']"),
          "intf.yaml": (3, "links.0.params1.intf"),
          "lwtunnel.yaml": (3, "nodes.h1.sysctls['net.netfilter.nf_hooks_lwtunnel']"),
          "gc_thresh.yaml": (3, "nodes.h2.sysctls['net.ipv6.neigh.default.gc_thresh3']")}


def host_state():
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    sysctls = subprocess.run(["sysctl", "-n", *WATCHED], capture_output=True, text=True).stdout
    return {"netns": sorted(l.split()[0] for l in ns.splitlines() if l.strip()),
            "links": sorted(l.split(":")[1].strip() for l in links.splitlines()),
            "sysctls": sysctls, "journals": sorted(os.listdir("/run/nslab"))
            if os.path.isdir("/run/nslab") else []}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.kernel)
                                  if n in KERNEL_DEPENDENT else n for n in sorted(FILES)])
def test_hostile_files_are_refused_before_anything_is_built(tmp_path, name):
    path = tmp_path / name
    path.write_text(textwrap.dedent(FILES[name]).lstrip("\n"))
    before = host_state()
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "topo", "up", str(path), "--for", "0"],
                         capture_output=True, text=True, timeout=120)
    after = host_state()
    line, field = EXPECT[name]
    assert res.returncode == 2, res
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"nslab: error: {path}:{line}: ") and field in err, err
    assert after == before
    assert not os.path.exists("/tmp/pwned")


@pytest.mark.kernel  # which keys a kernel namespaces
def test_a_node_cannot_set_a_host_wide_sysctl_at_run_time(make_lab):
    before = host_state()["sysctls"]
    lab = make_lab(pair())
    for key, value in (("kernel.domainname", "pwned"), ("net.core.rmem_max", "4096"),
                       ("net.core.netdev_max_backlog", "10")):
        with pytest.raises(InputError):
            lab["h1"].set_sysctls({key: value})
    lab["h1"].set_sysctls({"net.ipv4.tcp_congestion_control": "reno"})
    assert lab["h1"].read_sysctl("net.ipv4.tcp_congestion_control") == "reno"
    assert host_state()["sysctls"] == before


def test_refused_from_python_too():
    # a key off the allow-list is refused as the topology is made, before any
    # lab: nothing is built, and the kernel is not even asked
    from nslab.model.topo import Topology
    t = Topology()
    before = host_state()
    with pytest.raises(InputError, match="not on the allow-list of sysctls"):
        t.add_host("h1", sysctls={"net.core.rmem_max": 1})
    assert host_state() == before


@pytest.mark.kernel  # which congestion controls a kernel has built in
@pytest.mark.skipif(not os.path.exists("/proc/modules"),
                    reason="this kernel loads no module (no /proc/modules): the stock-kernel "
                           "guests run it")
def test_a_congestion_control_the_kernel_would_load_a_module_for_is_refused():
    from nslab.model.topo import Topology
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        loaded = f.read().split()
    name = next(n for n in ("lp", "veno", "yeah", "illinois", "westwood") if n not in loaded)
    t = Topology()
    t.add_host("h1", sysctls={"net.ipv4.tcp_congestion_control": name})
    t.add_host("h2")
    t.add_link("h1", "h2")
    with open("/proc/modules") as f:
        modules = f.read()
    with pytest.raises(InputError, match=f"{name} is not a congestion control this kernel has"):
        Lab(t).start()
    with open("/proc/modules") as f:  # no module loaded for it
        assert (f"tcp_{name} " in f.read()) == (f"tcp_{name} " in modules)
