"""``nslab topo export --format containerlab``: the file passes checks written
from containerlab's documented topology format (top-level keys, node kinds,
``node:interface`` endpoints, binds of files that exist, FRR's startup
configuration), carries the lab's own addresses, routes and FRR
configuration, and reads back into the same graph. No root, no containerlab."""
import os
import re
import shlex

import pytest
import yaml

from nslab.frr.kind import FRR_IMAGE
from nslab.runtime.clab import (HOST_IMAGE, KIND_LABEL, export_containerlab, from_containerlab,
                        image_release, write_export)
from nslab.cmdline.cli import main
from nslab.errors import InputError
from nslab.frr.daemon import node_configs
from nslab.frr.version import parse_version
from nslab.run.topoload import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "two-hosts.yaml")

#: A YAML topology with what a ready one lacks: a router with routes and a
#: loopback, an interface named eth0 (containerlab's management interface),
#: MACs, an MTU, a route by device.
ROUTED = """\
name: routed
nodes:
  h1: {ip: 10.1.0.1/24, routes: ["default via 10.1.0.254"]}
  h2: {ip: 10.2.0.1/24, mac: "02:00:00:00:00:02", routes: ["10.1.0.0/24 via 10.2.0.254 dev h2-eth0"]}
  r1: {kind: router, loopback: 10.9.9.9/32}
  s1: {kind: switch}
links:
  - {a: h1, b: s1}
  - {a: s1, b: r1, params2: {intf: eth0, ip: 10.1.0.254/24}}
  - {a: r1, b: h2, mtu: 9000, params1: {ip: 10.2.0.254/24}}
"""

#: Top-level keys and kinds as containerlab's topology definition documents them.
TOP_KEYS = {"name", "prefix", "mgmt", "topology"}
TOPOLOGY_KEYS = {"nodes", "links", "kinds", "defaults", "groups"}
#: A Linux interface name (at most 15 characters, no '/', no space) after "node:".
ENDPOINT_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):([A-Za-z0-9_.-]{1,15})$")


def _yaml_topology(tmp_path, text=ROUTED, name="routed.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


CASES = {
    "pair": ("pair", {"delay": "5ms"}),
    "clos": ("clos", {"spines": "2", "servers": "3", "bfd": "true"}),
    "clos-leaves": ("clos", {"spines": "2", "leaves": "2", "hosts_per_leaf": "2"}),
    "example-yaml": (EXAMPLE, {}),
    "routed-yaml": (None, {}),
}
#: Interfaces renamed beside containerlab's management network (its eth0).
RENAMED = {"routed-yaml": {("r1", "eth0"): "eth1"}}


def _load(case, tmp_path):
    spec, opts = CASES[case]
    return load_topology(spec or _yaml_topology(tmp_path), dict(opts))


def _export(topo, tmp_path, **kw):
    exp = export_containerlab(topo, files_dir="lab", **kw)
    out = tmp_path / "lab.clab.yml"
    write_export(exp, str(out))
    return exp, out


def check_format(path, mgmt=True):
    """The checks, from containerlab's documentation; returns the parsed document."""
    text = open(path).read()
    doc = yaml.safe_load(text)
    assert set(doc) <= TOP_KEYS and {"name", "topology"} <= set(doc)
    assert isinstance(doc["name"], str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", doc["name"])
    topo = doc["topology"]
    assert set(topo) <= TOPOLOGY_KEYS and set(topo) >= {"nodes", "links"}
    nodes = topo["nodes"]
    base = os.path.dirname(path)
    for name, node in nodes.items():
        assert node["kind"] == "linux"
        assert isinstance(node["image"], str) and not re.search(r"\s", node["image"])
        assert node["labels"][KIND_LABEL] in ("host", "router", "switch")
        assert all(k.startswith("net.") and isinstance(v, str)
                   for k, v in node.get("sysctls", {}).items())
        if not mgmt:
            assert node["network-mode"] == "none"
        for bind in node.get("binds", []):
            host, container = bind.split(":")[:2]
            assert not os.path.isabs(host) and container.startswith("/")
            assert os.path.isfile(os.path.join(base, host)), bind  # relative to the file
        for cmd in node.get("exec", []):
            assert shlex.split(cmd)[0] in ("ip", "tc", "ethtool"), cmd
    used = set()
    for link in topo["links"]:
        assert set(link) == {"endpoints"} and len(link["endpoints"]) == 2
        ends = [ENDPOINT_RE.fullmatch(e) for e in link["endpoints"]]
        assert all(ends), link
        assert ends[0].group(1) != ends[1].group(1)
        for m in ends:
            assert m.group(1) in nodes
            if mgmt:
                assert m.group(2) != "eth0"
            assert (m.group(1), m.group(2)) not in used, f"{m.group(0)} used twice"
            used.add((m.group(1), m.group(2)))
    return doc, used


def exec_words(node):
    return [shlex.split(c) for c in node.get("exec", [])]


@pytest.mark.parametrize("case", list(CASES))
def test_export_passes_the_format_checks_and_carries_the_lab(case, tmp_path):
    topo = _load(case, tmp_path)
    exp, out = _export(topo, tmp_path)
    doc, used = check_format(str(out))
    renames = RENAMED.get(case, {})
    new = {(n, i): renames.get((n, i), i) for n, names in topo.node_interfaces().items()
           for i in names}
    assert doc == exp.document
    assert set(doc["topology"]["nodes"]) == set(topo.nodes)
    assert len(doc["topology"]["links"]) == len(topo.links)
    # every interface of the topology is one end of one link
    assert used == {(n, i) for (n, _), i in new.items()}
    # every address is set on its node and interface
    for (node, intf), addr in topo.addresses().items():
        assert ["ip", "addr", "add", str(addr), "dev", new[(node, intf)]] in \
            exec_words(doc["topology"]["nodes"][node])
    for name, node in topo.nodes.items():
        words = exec_words(doc["topology"]["nodes"][name])
        if node.loopback:
            assert ["ip", "addr", "add", str(node.loopback), "dev", "lo"] in words
        for r in node.routes:
            assert ["ip", "route", "replace", *r.tokens()] in words
        if node.is_switch:  # a Linux bridge of the switch's name, with every port
            assert ["ip", "link", "add", "name", name, "type", "bridge"] in words
            for intf in topo.node_interfaces()[name]:
                assert ["ip", "link", "set", "dev", new[(name, intf)], "master", name] in words
    shaped = [link for link in topo.links if link.shaping]
    if shaped:
        assert any(w[0] == "tc" for n in doc["topology"]["nodes"].values() for w in exec_words(n))


@pytest.mark.parametrize("case", ["clos", "clos-leaves"])
def test_frr_routers_get_the_configuration_the_lab_renders(case, tmp_path):
    topo = _load(case, tmp_path)
    exp, out = _export(topo, tmp_path)
    doc, used = check_format(str(out))
    routers = [n for n, node in topo.nodes.items() if node.bgp]
    assert routers
    version = parse_version(f"version {image_release(FRR_IMAGE)}")
    for name in routers:
        node = doc["topology"]["nodes"][name]
        assert node["image"] == FRR_IMAGE
        binds = dict(reversed(b.split(":")) for b in node["binds"])
        assert set(binds) == {"/etc/frr/frr.conf", "/etc/frr/daemons", "/etc/frr/vtysh.conf"}
        conf = (tmp_path / binds["/etc/frr/frr.conf"]).read_text()
        bgp = topo.nodes[name].bgp
        assert f"router bgp {bgp.asn}" in conf.splitlines()
        for intf in bgp.unnumbered:
            assert (name, intf) in used
            assert f" neighbor {intf} interface peer-group fabric" in conf.splitlines()
        # the lab's own files, merged: every line of each is in frr.conf
        ctx = {"node": name, "run_id": "export", "interfaces": topo.node_interfaces()[name],
               "bgp": bgp}
        for fname, text in node_configs(ctx, version).items():
            if fname != "vtysh.conf":
                assert set(text.splitlines()) <= set(conf.splitlines()), fname
        assert conf.count("frr defaults datacenter") == 1
        daemons = (tmp_path / binds["/etc/frr/daemons"]).read_text().splitlines()
        assert "bgpd=yes" in daemons
        assert ("bfdd=yes" in daemons) == bool(bgp.bfd)
        assert "service integrated-vtysh-config" in \
            (tmp_path / binds["/etc/frr/vtysh.conf"]).read_text().splitlines()
        sysctls = node["sysctls"]
        assert sysctls["net.ipv4.ip_forward"] == "1"
    for name, node in topo.nodes.items():
        if not node.bgp:
            assert doc["topology"]["nodes"][name]["image"] == HOST_IMAGE
            assert "binds" not in doc["topology"]["nodes"][name]


def graph(t):
    return {frozenset([(a, ia), (b, ib)]) for _, a, ia, b, ib in t.interfaces()}


def same_lab(t, r, renames=None):
    renames = renames or {}
    assert {n: x.kind for n, x in r.nodes.items()} == {n: x.kind for n, x in t.nodes.items()}
    assert graph(r) == {frozenset((a, renames.get((a, i), i)) for a, i in e) for e in graph(t)}
    assert r.addresses() == {(n, renames.get((n, i), i)): a for (n, i), a in t.addresses().items()}
    for n, node in t.nodes.items():
        assert r.nodes[n].loopback == node.loopback
        assert [x.tokens() for x in r.nodes[n].routes] == \
            [x.model_copy(update={"dev": renames.get((n, x.dev), x.dev)}).tokens()
             for x in node.routes]


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_gives_back_the_graph_addresses_and_routes(case, tmp_path):
    topo = _load(case, tmp_path)
    _, out = _export(topo, tmp_path, mgmt=False)
    same_lab(topo, from_containerlab(str(out)))


def test_eth_names_rename_every_interface_and_what_refers_to_it(tmp_path):
    topo = _load("clos-leaves", tmp_path)
    exp, out = _export(topo, tmp_path, interface_names="eth")
    doc, used = check_format(str(out))
    for node, intf in used:
        assert re.fullmatch(r"eth[1-9][0-9]*", intf)
    renames = {}
    for n, names in topo.node_interfaces().items():
        renames.update({(n, old): f"eth{i}" for i, old in enumerate(names, 1)})
    same_lab(topo, from_containerlab(str(out)), renames)
    conf = (tmp_path / "lab" / "spine1" / "frr.conf").read_text().splitlines()
    assert " neighbor eth1 interface peer-group fabric" in conf
    assert not any("spine1-eth" in ln for ln in conf if not ln.startswith("!"))


def test_an_interface_named_eth0_is_renamed_only_beside_a_management_network(tmp_path):
    topo = _load("routed-yaml", tmp_path)
    exp = export_containerlab(topo)
    ends = [e for link in exp.document["topology"]["links"] for e in link["endpoints"]]
    assert "r1:eth1" in ends and "r1:eth0" not in ends
    assert any("r1: interface eth0 is eth1" in n for n in exp.notes)
    r1 = exp.document["topology"]["nodes"]["r1"]
    assert "ip addr add 10.1.0.254/24 dev eth1" in r1["exec"]
    exp = export_containerlab(topo, mgmt=False)
    ends = [e for link in exp.document["topology"]["links"] for e in link["endpoints"]]
    assert "r1:eth0" in ends
    assert all(n["network-mode"] == "none" for n in exp.document["topology"]["nodes"].values())


def test_macs_mtus_and_the_default_veth_mtu_are_set(tmp_path):
    exp = export_containerlab(_load("routed-yaml", tmp_path), mgmt=False)
    nodes = exp.document["topology"]["nodes"]
    assert "ip link set dev h2-eth0 address 02:00:00:00:00:02" in nodes["h2"]["exec"]
    assert "ip link set dev h2-eth0 mtu 9000" in nodes["h2"]["exec"]
    assert "ip link set dev r1-eth1 mtu 9000" in nodes["r1"]["exec"]
    # containerlab's veths default to 9500; nslab's are the kernel's 1500
    assert "ip link set dev h1-eth0 mtu 1500" in nodes["h1"]["exec"]


def test_names_from_a_topology_cannot_change_the_yaml(tmp_path):
    evil = 'x: [y]\n# "z" & *a !!python/object'
    text = ROUTED.replace("name: routed", "name: " + yaml.safe_dump(evil.replace("\n", " ")).split("\n")[0])
    topo = load_topology(_yaml_topology(tmp_path, text), {})
    exp = export_containerlab(topo)
    head = [ln for ln in exp.text().splitlines() if ln.startswith("#")]
    doc = yaml.safe_load(exp.text())
    assert doc == exp.document and set(doc) == {"name", "topology"}
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", doc["name"])
    assert evil.replace("\n", " ") in head[0]  # the header names it, as a comment
    assert len(exp.text().splitlines()) == len(head) + len(yaml.safe_dump(
        exp.document, sort_keys=False, default_flow_style=False, width=4096).splitlines())


def test_an_openflow_controller_is_refused_with_its_line(tmp_path, capsys):
    p = _yaml_topology(tmp_path, "switch: ovs\nnodes:\n  h1: {}\n  s1:\n    kind: switch\n"
                                 "    controller: tcp:127.0.0.1:6653\nlinks:\n  - [h1, s1]\n",
                       "ctl.yaml")
    with pytest.raises(InputError, match=rf"{re.escape(p)}:6: nodes.s1.controller: an OpenFlow"):
        export_containerlab(load_topology(p, {}))
    rc = main(["topo", "export", p, "-o", str(tmp_path / "x.clab.yml")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "controller" in err
    assert not (tmp_path / "x.clab.yml").exists()


def test_an_ovs_switch_is_noted_as_a_linux_bridge(tmp_path):
    exp = export_containerlab(load_topology(EXAMPLE, {}))
    assert any(n.startswith("s1: an OVS switch in nslab, a Linux bridge here") for n in exp.notes)
    assert "# note: s1: an OVS switch" in exp.text()


@pytest.mark.parametrize("image, release", [
    ("quay.io/frrouting/frr:10.3.1", "10.3.1"), ("frrouting/frr:v8.4.1", "8.4.1"),
    ("quay.io/frrouting/frr:containerlab-10.7.1", "10.7.1"), ("frrouting/frr:latest", None),
    ("frrouting/frr", None), ("localhost:5000/frr", None),
    ("frrouting/frr@sha256:" + "0" * 64, None)])
def test_the_frr_release_comes_from_the_image_tag(image, release):
    assert image_release(image) == release


def test_an_frr_8_image_gets_interfaces_in_zebra_s_part(tmp_path):
    topo = _load("clos", tmp_path)
    exp = export_containerlab(topo, images={"frr": "frrouting/frr:v8.4.1"})
    conf = exp.files["files/spine1/frr.conf"]
    assert "! mgmtd for" not in conf and "interface spine1-eth0" in conf.splitlines()
    assert "mgmtd" not in exp.files["files/spine1/daemons"]


# -- the command line -------------------------------------------------------------------
def test_cli_writes_stdout_for_a_lab_without_frr(tmp_path, capsys):
    rc = main(["--results", str(tmp_path), "topo", "export", "pair", "--delay", "5ms"])
    cap = capsys.readouterr()
    assert rc == 0
    doc = yaml.safe_load(cap.out)
    assert set(doc["topology"]["nodes"]) == {"h1", "h2"}
    assert "links are shaped with tc" in cap.err


def test_cli_writes_the_file_and_the_frr_files_beside_it(tmp_path, capsys):
    out = tmp_path / "fabric.clab.yml"
    rc = main(["--results", str(tmp_path), "topo", "export", "clos", "--spines", "2",
               "--servers", "2", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    check_format(str(out))
    assert sorted(os.listdir(tmp_path / "fabric")) == ["server1", "server2", "spine1", "spine2"]
    # written again over the first (a re-export), same content
    first = out.read_text()
    assert main(["--results", str(tmp_path), "topo", "export", "clos", "--spines", "2",
                 "--servers", "2", "-o", str(out)]) == 0
    assert out.read_text() == first


@pytest.mark.parametrize("args, message", [
    (["pair", "--format", "gns3"], "unknown export format"),
    (["clos"], "give -o FILE.clab.yml"),
    (["nosuch"], "unknown topology 'nosuch'"),
    (["pair", "--image", "bad image"], "not a container image reference"),
    (["pair", "--interface-names", "ifindex"], "use keep or eth"),
    (["pair", "--name", "-x"], "--name '-x'"),
    (["single", "--k", "three"], "expected an integer"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, args, message):
    rc = main(["--results", str(tmp_path), "topo", "export", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_nothing_is_written_through_a_link(tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "fabric")
    rc = main(["--results", str(tmp_path), "topo", "export", "clos", "--spines", "1",
               "--servers", "1", "-o", str(tmp_path / "fabric.clab.yml")])
    assert rc == 2 and "symbolic link" in capsys.readouterr().err
    assert not os.listdir(tmp_path / "elsewhere") and not (tmp_path / "fabric.clab.yml").exists()


@pytest.mark.parametrize("where", ["adir", "plain/x.clab.yml"])
def test_an_output_that_cannot_be_a_file_is_one_line_and_nothing_is_written(
        tmp_path, capsys, where):
    (tmp_path / "adir").mkdir()  # -o names a directory
    (tmp_path / "plain").write_text("mine\n")  # -o goes through a file
    rc = main(["--results", str(tmp_path), "topo", "export", "clos", "--spines", "1",
               "--servers", "1", "-o", str(tmp_path / where)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert str(tmp_path / where.split("/")[0]) in err  # what is in the way
    # not half-built: no FRR files beside it either
    assert sorted(os.listdir(tmp_path)) == ["adir", "plain"]
    assert not os.listdir(tmp_path / "adir") and (tmp_path / "plain").read_text() == "mine\n"


# -- reading a containerlab file -----------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("name: x\ntopology:\n  nodes:\n    a: {kind: linux\n", ":5: malformed YAML"),
    ("- 1\n", ":1: a containerlab topology is a mapping"),
    ("name: x\ntopology:\n  nodes:\n    a: {kind: nokia_srlinux}\n",
     ":4: topology.nodes.a.kind: 'nokia_srlinux'"),
    ("name: x\ntopology:\n  nodes:\n    a: {kind: linux}\n  links:\n"
     "    - endpoints: [\"a:eth1\", \"b:eth1\"]\n", ":6: topology.links.0.endpoints.1: unknown node"),
    ("name: x\ntopology:\n  nodes:\n    a: {kind: linux}\n    b: {kind: linux}\n  links:\n"
     "    - endpoints: [\"a:eth1\"]\n", ":7: topology.links.0: a link needs 'endpoints'"),
    ("name: x\ntopology:\n  nodes:\n    a: {kind: linux, exec: [\"ip 'addr\"]}\n",
     ":4: topology.nodes.a.exec.0: cannot split"),
    ("name: x\ntopology:\n  nodes:\n    a: {kind: linux}\n    router-1: {kind: linux}\n",
     ":5: as an nslab topology: "),
])
def test_a_bad_containerlab_file_is_one_located_error(tmp_path, text, message):
    p = tmp_path / "bad.clab.yml"
    p.write_text(text)
    with pytest.raises(InputError) as ei:
        from_containerlab(str(p))
    assert str(ei.value).startswith(str(p)) and message in str(ei.value)
    assert "\n" not in str(ei.value)


def test_a_file_not_written_by_nslab_is_read_as_far_as_it_goes(tmp_path):
    p = tmp_path / "frr01.clab.yml"
    p.write_text("name: frr01\ntopology:\n  nodes:\n"
                 "    r1: {kind: linux, image: frr, binds: [r1/frr.conf:/etc/frr/frr.conf]}\n"
                 "    pc1:\n      kind: linux\n      exec:\n        - ip addr add 192.168.11.2/24 dev eth1\n"
                 "        - ip route add 192.168.0.0/16 via 192.168.11.1\n"
                 "    br:\n      kind: bridge\n"
                 "  links:\n    - endpoints: [r1:eth1, pc1:eth1]\n"
                 "    - endpoints: [{node: r1, interface: eth2}, {node: br, interface: brp1}]\n")
    t = from_containerlab(str(p))
    assert {n: x.kind for n, x in t.nodes.items()} == {"r1": "router", "pc1": "host",
                                                         "br": "switch"}
    assert graph(t) == {frozenset([("r1", "eth1"), ("pc1", "eth1")]),
                        frozenset([("r1", "eth2"), ("br", "brp1")])}
    assert {k: str(v) for k, v in t.addresses().items()} == {("pc1", "eth1"): "192.168.11.2/24"}
    assert [r.tokens() for r in t.nodes["pc1"].routes] == \
        [["192.168.0.0/16", "via", "192.168.11.1"]]


def test_the_command_line_defaults_are_the_module_s():
    from nslab.cmdline.topocli import topo_export
    defaults = {p.name: p.default for p in topo_export.params}
    assert defaults["image"] == HOST_IMAGE and defaults["frr_image"] == FRR_IMAGE
