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
#: Refusals that depend on the running kernel (which keys it namespaces) run
#: again in every stock-kernel guest (marked kernel); the others are decided
#: before any kernel.
KERNEL_DEPENDENT = {"rmem.yaml", "backlog.yaml"}

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
#: Host-wide keys a hostile file tries to reach, read before and after.
WATCHED = ["kernel.domainname", "kernel.core_pattern", "net.core.rmem_max",
           "net.core.netdev_max_backlog", "vm.swappiness"]

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
          "intf.yaml": (3, "links.0.params1.intf")}


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


@pytest.mark.kernel  # which keys a kernel namespaces
def test_refused_from_python_too():
    from nslab.model.topo import Topology
    t = Topology()
    t.add_host("h1", sysctls={"net.core.rmem_max": 1})
    t.add_host("h2")
    t.add_link("h1", "h2")
    before = host_state()
    with pytest.raises(InputError, match="on this kernel"):
        Lab(t).start()
    assert host_state() == before
