"""A file cannot flip a host kernel switch (issue 51): a node may set only the
sysctls of an allow-list (nslab.model.sysctls), each known to be per network
namespace and undone with it; every other key is refused in one line naming
the file, the line and the field, by `nslab topo check` and `nslab study
check`, without root and before anything is built. (That each allowed key is
indeed per namespace is checked on every supported kernel by
tests/integration/test_sysctl_allowlist.py, marked kernel.)"""
import inspect
import textwrap

import pytest
from pydantic import TypeAdapter

from nslab.cmdline.cli import main
from nslab.model import sysctls
from nslab.model.fields import SYSCTL_KEY_RE, SysctlValue

#: Writable in a fresh namespace, yet host-wide: a one-way static key (after
#: `modprobe nf_conntrack`), the neighbour tables' limits, and keys a fresh
#: namespace has read-only or not at all.
REFUSED = ["net.netfilter.nf_hooks_lwtunnel", "net.ipv6.neigh.default.gc_thresh3",
           "net.ipv4.neigh.default.gc_thresh1", "net.core.rmem_max",
           "net.core.netdev_max_backlog", "net.ipv4.tcp_mem", "net.netfilter.nf_conntrack_max",
           "net.ipv4.conf.all.nosuchkey", "net.ipv4.route.max_size"]


def topology(key, value=1):
    return textwrap.dedent(f"""\
        nodes:
          h1:
            sysctls: {{{key}: {value}}}
          h2: {{}}
        links: [[h1, h2]]
        """)


def one_line_error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("key", REFUSED)
def test_topo_check_refuses_a_key_off_the_allow_list_in_one_line(tmp_path, capsys, key):
    path = tmp_path / "lab.yaml"
    path.write_text(topology(key))
    err = one_line_error(capsys, ["--results", str(tmp_path), "topo", "check", str(path)])
    assert err.startswith(f"nslab: error: {path}:3: nodes.h1.sysctls['{key}']: "), err
    assert "not on the allow-list" in err


def test_topo_up_refuses_it_before_asking_for_root(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # refused before any root check
    path = tmp_path / "lab.yaml"
    path.write_text(topology("net.netfilter.nf_hooks_lwtunnel"))
    err = one_line_error(capsys, ["--results", str(tmp_path), "topo", "up", str(path)])
    assert f"{path}:3: nodes.h1.sysctls['net.netfilter.nf_hooks_lwtunnel']" in err


STUDY = """\
name: lwt
title: a study file that asks for a host-wide switch
topology:
  inline:
    nodes: {h1: {ip: 10.9.0.1/24}, h2: {ip: 10.9.0.2/24}}
    links: [[h1, h2]]
duration: 1
traffic:
  - {id: probe, kind: probe, src: h1, dst: h2, rate: 100}
metrics:
  - {metric: outage, flow: probe}
"""


@pytest.mark.parametrize("where, extra, line, field", [
    ("inline", None, 5, "topology.inline.nodes.h1.sysctls['net.netfilter.nf_hooks_lwtunnel']"),
    ("sweep", "sweep:\n  sysctl.h1.net.netfilter.nf_hooks_lwtunnel: [0, 1]\n", 13,
     "sweep['sysctl.h1.net.netfilter.nf_hooks_lwtunnel']"),
    ("event", "events:\n  - {at: 0.5, do: sysctl, node: h1, set: "
              "{net.netfilter.nf_hooks_lwtunnel: 1}}\n", 13, "events.0.set"),
])
def test_study_check_refuses_it_wherever_the_file_puts_it(tmp_path, capsys, where, extra,
                                                          line, field):
    text = STUDY
    if where == "inline":
        text = text.replace("nodes: {h1: {ip: 10.9.0.1/24}",
                            "nodes: {h1: {ip: 10.9.0.1/24, sysctls: "
                            "{net.netfilter.nf_hooks_lwtunnel: 1}}")
    else:
        text += extra
    path = tmp_path / "study.yaml"
    path.write_text(text)
    err = one_line_error(capsys, ["--results", str(tmp_path), "study", "check", str(path)])
    assert f"{path}:{line}: {field}" in err, err
    assert "nf_hooks_lwtunnel" in err and "allow-list" in err


@pytest.mark.parametrize("key", ["net.ipv4.ip_forward", "net.ipv4.conf.eth0.rp_filter",
                                 "net.ipv4.conf.all.rp_filter", "net.ipv6.conf.default.accept_dad",
                                 "net.ipv4.fib_multipath_hash_policy", "net.ipv4.tcp_rmem"])
def test_allowed_keys_pass_without_root(tmp_path, capsys, key):
    path = tmp_path / "lab.yaml"
    path.write_text(topology(key))
    assert main(["--results", str(tmp_path), "topo", "check", str(path)]) == 0, \
        capsys.readouterr().err


def test_every_listed_key_and_test_value_is_a_valid_sysctl():
    listed = sysctls.listed()
    assert len(listed) > 50
    for key, (a, b) in listed.items():
        assert SYSCTL_KEY_RE.fullmatch(key) and sysctls.allowed(key), key
        assert a != b, key
        for v in (a, b):
            TypeAdapter(SysctlValue).validate_python(v)


def test_the_sysctls_of_every_ready_topology_are_allowed():
    # nslab's own topologies set forwarding, accept_dad, disable_ipv6...: built
    # with their defaults, each passes the same validation as a file
    from nslab.run.registry import topologies
    for name, fn in topologies().items():
        params = inspect.signature(fn).parameters
        t = fn(**({"servers": 2} if "servers" in params else {}))
        for node, values in t.sysctls().items():
            for key in values:
                assert sysctls.allowed(key), (name, node, key)
    from nslab.experiments.ecmp.runner import POLICY_SYSCTL
    assert sysctls.allowed(POLICY_SYSCTL)
