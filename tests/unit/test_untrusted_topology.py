"""A topology file is untrusted input: every field is parsed into a typed value,
and a hostile value is refused with one line naming the file, the line and the
field, before anything could be built. No root needed."""
import copy
import json
import re

import pytest
import yaml

from nslab.errors import InputError, TopologyError
from nslab.frr.rundir import NodeDir
from nslab.frr.version import FrrVersion
from nslab.runtime.plan import plan
from nslab.model.render import RenderError, line, token
from nslab.model.topo import Topology, schema

FRR_8_4 = FrrVersion("8.4.4", 8, 4)


def _frr_dirs(tmp_path):
    """A node's FRR run and config directories, both ``tmp_path`` (nothing is written)."""
    return NodeDir(str(tmp_path)), NodeDir(str(tmp_path))


#: A valid file with every kind of field, as a Python structure (dumped to YAML per test).
BASE = {
    "name": "every-field",
    "switch": "bridge",
    "auto_ip": True,
    "ip_base": "10.0.0.0/8",
    "nodes": {
        "h1": {"ip": "10.1.0.1/24", "mac": "02:00:00:00:00:01", "loopback": "10.9.9.1/32",
               "routes": ["10.2.0.0/16 via 10.1.0.254", {"dst": "default", "via": "10.1.0.254"}],
               "sysctls": {"net.ipv4.tcp_congestion_control": "cubic"}},
        "r1": {"kind": "router", "ip": "10.1.0.254/24",
               "bgp": {"asn": 65001, "router_id": "10.9.9.2", "unnumbered": ["r1-eth1"],
                       "networks": ["10.1.0.0/24"]}},
        "s1": {"kind": "switch", "type": "bridge", "stp": True},
        "s2": {"kind": "switch", "type": "ovs", "dpid": "00000000000000a1",
               "controller": "tcp:127.0.0.1:6653"},
        "h2": {},
    },
    "links": [
        ["h1", "r1"],
        {"a": "r1", "b": "s1", "bw": "100Mbit", "delay": "1ms", "jitter": "100us", "loss": 0.5,
         "max_queue_size": 100, "qdisc": "htb", "burst": 32000, "overhead": 24, "mtu": 1400,
         "params1": {"intf": "r1-eth1", "ip": "10.3.0.1/24", "mac": "02:00:00:00:00:02"}},
        {"a": "h2", "b": "s2", "framing": True, "bw": 1000},
    ],
}

#: (field path, hostile value, what the message must say). Paths index BASE.
HOSTILE = [
    # newlines and batch-line injection
    (("nodes", "h1", "loopback"), "10.9.9.9/32 dev lo\nnetns add injected2", "not an IP address"),
    (("nodes", "h1", "ip"), "10.1.0.1/24\nnetns add x", "not an IP address"),
    (("nodes", "h1", "routes", 0), "10.2.0.0/16 via 10.1.0.254\nnetns add x", "not one line"),
    (("nodes", "h1", "routes", 0), "10.2.0.0/16 via 10.1.0.254 ; reboot", "unexpected ';'"),
    (("nodes", "h1", "routes", 0), "10.2.0.0/16 via 10.1.0.254 proto static", "unexpected 'proto'"),
    (("nodes", "h1", "routes", 0), "10.2.0.0/16 via 10.1.0.254 via 10.1.0.253", "given twice"),
    (("nodes", "h1", "routes", 0), "10.2.0.0/16", "needs 'via'"),
    (("nodes", "h1", "routes", 0), "10.2.0.0/16 dev eth9", "does not have"),
    (("nodes", "h1", "routes", 1), {"dst": "default", "via": "10.1.0.254", "table": 5},
     "unknown key 'table'"),
    (("links", 1, "params1", "intf"), "eth0\nnetns add x", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "r1 eth1", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "r1;eth1", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "..", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "a/b", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "a:b", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "-h", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "x" * 16, "not a valid interface name"),
    (("links", 1, "params1", "intf"), "", "not a valid interface name"),
    (("links", 1, "params1", "intf"), "#c", "not a valid interface name"),
    (("links", 1, "params1", "intf"), '"q"', "not a valid interface name"),
    (("links", 1, "params1", "intf"), 5, "must be a string"),
    (("links", 1, "params1", "ip"), "fe80::1%eth0/64", "zone ids"),
    (("links", 1, "params1", "mac"), "02:00:00:00:00:02\nx", "not a MAC address"),
    (("links", 1, "params1", "mac"), "01:00:5e:00:00:01", "multicast"),
    # names
    (("links", 0, 0), "h1 x", "not a valid node name"),
    (("links", 1, "a"), "r1\n", "not a valid node name"),
    (("links", 1, "a"), "nosuch", "unknown node 'nosuch'"),
    # sysctls: only the per-namespace net. tree
    (("nodes", "h1", "sysctls"), {"kernel.domainname": "x"}, "not in the per-namespace net. tree"),
    (("nodes", "h1", "sysctls"), {"kernel.core_pattern": "|/bin/sh"}, "net. tree"),
    (("nodes", "h1", "sysctls"), {"vm.swappiness": 1}, "net. tree"),
    (("nodes", "h1", "sysctls"), {"fs.file-max": 1}, "net. tree"),
    (("nodes", "h1", "sysctls"), {"net.ipv4/../../kernel/x": 1}, "not a sysctl key"),
    (("nodes", "h1", "sysctls"), {"net.ipv4.ip_forward": "1\nkernel.x=1"}, "not a sysctl value"),
    (("nodes", "h1", "sysctls"), {"net.ipv4.ip_forward": 2 ** 70}, "does not fit"),
    (("nodes", "h1", "sysctls"), {"net.ipv4.ip_forward": [1]}, "must be a string"),
    # numbers with units, and huge numbers
    (("links", 1, "bw"), "10 parsecs", "bad rate"),
    (("links", 1, "bw"), 10 ** 9, "above 1 Tbit/s"),
    (("links", 1, "bw"), -5, "must be positive"),
    (("links", 1, "bw"), True, "a rate must be"),
    (("links", 1, "delay"), "5 ms; rm", "bad delay"),
    (("links", 1, "delay"), "100000s", "more than 60 s"),
    (("links", 1, "loss"), 101, "less than or equal to 100"),
    (("links", 1, "loss"), "1%", "expected a number"),
    (("links", 1, "max_queue_size"), 10 ** 12, "less than or equal to"),
    (("links", 1, "max_queue_size"), "100", "valid integer"),
    (("links", 1, "burst"), 0, "greater than or equal to 1"),
    (("links", 1, "overhead"), 1000, "less than or equal to 255"),
    (("links", 1, "mtu"), 10 ** 6, "less than or equal to 65535"),
    (("links", 1, "qdisc"), "netem delay 1s", "is not one of"),
    (("links", 1, "framing"), "yes please", "valid boolean"),
    # OVS and BGP options that reach ovs-vsctl and FRR's configuration
    (("nodes", "s2", "dpid"), "0x1\n", "not a datapath id"),
    (("nodes", "s2", "dpid"), 2 ** 64, "64 bits"),
    (("nodes", "s2", "controller"), "tcp:127.0.0.1:6653 -- del-br x", "not an OpenFlow"),
    (("nodes", "s2", "uplink"), "eth0\n", "not a valid interface name"),
    (("nodes", "r1", "bgp", "asn"), 2 ** 33, "less than or equal to"),
    (("nodes", "r1", "bgp", "asn"), "65001\n!", "valid integer"),
    (("nodes", "r1", "bgp", "router_id"), "10.9.9.2\nrouter bgp 1", "not an IP address"),
    (("nodes", "r1", "bgp", "unnumbered", 0), "r1-eth1\n neighbor x", "not a valid interface"),
    (("nodes", "r1", "bgp", "networks", 0), "10.1.0.0/24\n network 0.0.0.0/0", "not a network"),
    (("nodes", "r1", "bgp", "networks", 0), "10.1.0.1/24", "host bits set"),
    (("nodes", "r1", "bgp", "keepalive"), 0, "greater than or equal to 1"),
    # options that do not fit the node's kind, typos
    (("nodes", "h1", "stp"), True, "applies to switches only"),
    (("nodes", "s1", "ip"), "10.5.0.1/24", "a switch takes no ip"),
    (("nodes", "s1", "dpid"), 1, "apply to OVS switches only"),
    (("nodes", "h1", "kind"), "hub", "is not one of"),
    (("nodes", "h2", "sysctl"), {"net.ipv4.ip_forward": 1}, "unknown key 'sysctl'"),
    (("links", 1, "colour"), "red", "unknown key 'colour'"),
    (("name",), "x\ny", "not a valid label"),
    (("switch",), "hub", "is not one of"),
    (("ip_base",), "10.0.0.1/8", "not an IPv4 network"),
]


def _set(doc, path, value):
    cur = doc
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value


def _write(tmp_path, doc, name="t.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    return str(p)


def _needle(path, value, message):
    """What the named line must contain: the offending key, or the start of the value."""
    if "unknown key" in message:
        return message.split("unknown key '")[1].split("'")[0]
    if isinstance(value, dict):
        return str(next(iter(value)))
    last = path[-1]
    if isinstance(last, str) and last not in ("a", "b"):
        return f"{last}:"
    return str(value).splitlines()[0][:8] if str(value).strip() else None


def test_the_base_file_is_valid(tmp_path):
    t = Topology.from_yaml(_write(tmp_path, BASE))
    assert len(t.nodes) == 5 and len(t.links) == 3
    assert str(t.nodes["h1"].routes[0].via) == "10.1.0.254"
    assert t.nodes["s2"].dpid == 0xa1


@pytest.mark.parametrize("path, value, message", HOSTILE,
                         ids=[f"{'.'.join(map(str, p))}={v!r}"[:60] for p, v, _ in HOSTILE])
def test_hostile_values_are_refused_naming_file_line_and_field(tmp_path, path, value, message):
    doc = copy.deepcopy(BASE)
    _set(doc, path, value)
    fname = _write(tmp_path, doc)
    with pytest.raises(InputError) as info:
        Topology.from_yaml(fname)
    text = str(info.value)
    assert "\n" not in text, text  # one line
    assert text.startswith(f"{fname}:"), text
    assert message in text, text
    # the line named is the line where the bad field is written
    lineno = int(text.split(":")[1])
    written = open(fname).read().splitlines()[lineno - 1]
    needle = _needle(path, value, message)
    if needle:
        assert needle in written, (text, written)
    # and the field is named
    keys = [p for p in path if isinstance(p, str) and p not in ("a", "b")]
    if keys and "unknown node" not in message:
        assert f"{keys[-1]}" in text or (isinstance(value, dict) and str(next(iter(value))) in text), text


@pytest.mark.parametrize("path, value, message", [h for h in HOSTILE if h[0][0] == "nodes"
                                                   and len(h[0]) >= 3],
                         ids=lambda x: str(x)[:40])
def test_the_python_api_refuses_the_same_values(path, value, message):
    node = path[1]
    opts = copy.deepcopy(BASE["nodes"][node])
    _set(opts, path[2:], value)
    kind = opts.pop("kind", "host")
    t = Topology()
    with pytest.raises(TopologyError, match=re.escape(message)) as info:
        t.add_node(node, kind, **opts)
        for other in ("h1", "r1", "s1", "s2", "h2"):
            if other != node:
                o = copy.deepcopy(BASE["nodes"][other])
                t.add_node(other, o.pop("kind", "host"), **o)
        for link in BASE["links"]:
            if isinstance(link, list):
                t.add_link(*link)
            else:
                lk = copy.deepcopy(link)
                t.add_link(lk.pop("a"), lk.pop("b"), lk.pop("params1", None), None, **lk)
        t.validate()
    assert f"nodes.{node}" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("opts, message", [
    ({"params1": {"intf": "eth0\nnetns add x"}}, "not a valid interface name"),
    ({"params1": {"intf": "e;x"}}, "not a valid interface name"),
    ({"params2": {"ip": "10.0.0.2/24 dev lo"}}, "not an IP address"),
    ({"bw": "1Gbit; x"}, "bad rate"),
    ({"colour": "red"}, "unknown option(s) colour"),
])
def test_python_links_refuse_hostile_values(opts, message):
    t = Topology()
    t.add_host("h1")
    t.add_host("h2")
    p1, p2 = opts.pop("params1", None), opts.pop("params2", None)
    with pytest.raises(TopologyError, match=re.escape(message)):
        t.add_link("h1", "h2", p1, p2, **opts)


class _FakeMininetTopo:
    """Just enough of Mininet's Topo interface for the converter."""

    def __init__(self, nodes, links):
        self._nodes, self._links = nodes, links

    def nodes(self, sort=False):
        return list(self._nodes)

    def nodeInfo(self, n):  # noqa: N802
        return self._nodes[n]

    def links(self, sort=False, withKeys=False, withInfo=True):  # noqa: N803
        return [(a, b, info) for a, b, info in self._links]


@pytest.mark.parametrize("nodes, links, message", [
    ({"h1": {"ip": "10.0.0.1/8\nnetns add x"}, "h2": {}}, [("h1", "h2", {})], "not an IP address"),
    ({"h1": {"privateDirs": ["/tmp"]}, "h2": {}}, [("h1", "h2", {})], "unknown key 'privateDirs'"),
    ({"h1": {"defaultRoute": "via 10.0.0.1; x"}, "h2": {}}, [("h1", "h2", {})], "unexpected"),
    ({"h1": {}, "h2": {}}, [("h1", "h2", {"intfName1": "e x"})], "not a valid interface name"),
    ({"h1": {}, "h2": {}}, [("h1", "h2", {"bw": "fast"})], "bad rate"),
])
def test_mininet_topos_are_parsed_the_same_way(nodes, links, message):
    with pytest.raises(TopologyError, match=re.escape(message)):
        Topology.from_mininet(_FakeMininetTopo(nodes, links))


def test_mininet_options_map_to_typed_fields():
    topo = _FakeMininetTopo(
        {"h1": {"ip": "10.0.0.1/24", "defaultRoute": "via 10.0.0.254", "cls": object},
         "s1": {"isSwitch": True, "dpid": "1f", "cls": object}, "h2": {"ip": "10.0.0.2/24"}},
        [("h1", "s1", {"bw": 10, "use_htb": True, "intfName1": "h1-e0", "addr1": "02:00:00:00:00:09",
                       "port1": 1, "port2": 1, "key": 0, "cls": object}), ("h2", "s1", {})])
    t = Topology.from_mininet(topo, switch_type="ovs")
    assert [r.tokens() for r in t.nodes["h1"].routes] == [["default", "via", "10.0.0.254"]]
    assert t.nodes["s1"].dpid == 0x1f
    assert t.links[0].shaping.qdisc == "htb" and t.links[0].params1.intf == "h1-e0"
    assert t.macs()[("h1", "h1-e0")] == "02:00:00:00:00:09"


def test_yaml_duplicate_keys_aliases_and_size_are_bounded(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("nodes:\n  h1: {}\n  h1: {ip: 10.0.0.1/24}\nlinks: []\n")
    with pytest.raises(InputError, match=r"dup\.yaml:3: .*duplicate key 'h1'"):
        Topology.from_yaml(str(p))
    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):
        laughs.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    p = tmp_path / "laughs.yaml"
    p.write_text("\n".join(laughs) + "\nnodes: {h1: {}}\n")
    with pytest.raises(InputError, match="expands to more than"):
        Topology.from_yaml(str(p))
    p = tmp_path / "loop.yaml"
    p.write_text("nodes: &n {h1: *n}\n")
    with pytest.raises(InputError, match="loop.yaml"):
        Topology.from_yaml(str(p))
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"nodes: {h1: {}}\n\xff\xfe")
    with pytest.raises(InputError, match="not UTF-8"):
        Topology.from_yaml(str(p))
    p = tmp_path / "tag.yaml"
    p.write_text("nodes: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(InputError, match="malformed YAML"):
        Topology.from_yaml(str(p))


def test_merge_keys_still_work_for_shared_link_options(tmp_path):
    p = tmp_path / "merge.yaml"
    p.write_text("x-fast: &fast {bw: 100Mbit, framing: true}\n"
                 "nodes: {h1: {}, h2: {}, h3: {}}\n"
                 "links:\n  - {a: h1, b: h2, <<: *fast}\n  - {a: h2, b: h3, <<: *fast}\n")
    with pytest.raises(InputError, match=r"merge\.yaml:1: unknown key 'x-fast'"):
        Topology.from_yaml(str(p))
    p.write_text(p.read_text().replace("x-fast: &fast {bw: 100Mbit, framing: true}\n", "")
                 .replace("<<: *fast", "<<: {bw: 100Mbit, framing: true}"))
    t = Topology.from_yaml(str(p))
    assert all(link.shaping.rate == 100_000_000 for link in t.links)


# -- rendering: no accepted value can add a line or a token --------------------------------
@pytest.mark.parametrize("value", ["a b", "a\nb", "a\rb", "#x", "'x'", '"x"', "x\\y", "", "-x",
                                   "a\tb", "a;b"])
def test_the_renderer_refuses_anything_but_one_plain_token(value):
    with pytest.raises(RenderError):
        line("link", "set", "dev", value, "up")
    if value not in (";",):
        with pytest.raises(RenderError):
            token(value)


def test_frr_configs_render_every_value_as_one_token(tmp_path):
    from nslab.frr.daemon import Bgpd
    from nslab.topologies.clos import clos

    class FakeNode:
        name = "server1"
    bgp = clos().nodes["server1"].bgp
    ctx = {"node": "server1", "run_id": "nl0000", "interfaces": ["server1-eth0"], "bgp": bgp}
    assert "router bgp 65001" in Bgpd(FakeNode(), *_frr_dirs(tmp_path), ctx, FRR_8_4).render()
    # A value that typing would refuse, forced in: rendering still refuses it.
    forced = bgp.model_copy(update={"unnumbered": ["server1-eth0\n neighbor 192.0.2.1 remote-as 1"]})
    with pytest.raises(RenderError):
        Bgpd(FakeNode(), *_frr_dirs(tmp_path), dict(ctx, bgp=forced), FRR_8_4).render()


def test_the_published_schema_accepts_the_examples_and_refuses_hostile_files(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    sch = schema()
    jsonschema.Draft202012Validator.check_schema(sch)
    v = jsonschema.Draft202012Validator(sch)
    assert not list(v.iter_errors(json.loads(json.dumps(BASE))))
    assert not list(v.iter_errors(yaml.safe_load(open("examples/two-hosts.yaml"))))
    for path, value, _ in HOSTILE:
        doc = copy.deepcopy(BASE)
        _set(doc, path, value)
        if path[-1] in ("sysctl", "colour", "table", "kind", "qdisc", "switch") or \
                path[-2:] == ("h1", "stp") or path[-1] == "sysctls":
            assert list(v.iter_errors(json.loads(json.dumps(doc)))), (path, value)


def test_plan_uses_typed_values_only():
    t = Topology.from_dict(copy.deepcopy(BASE))
    p = plan(t, "nl0001", ["ovs"])
    h1 = p.ns_lines["nl0001-h1"]
    assert "route add 10.2.0.0/16 via 10.1.0.254" in h1
    assert "route add default via 10.1.0.254" in h1
    assert "addr add 10.9.9.1/32 dev lo" in h1
    r1 = p.ns_lines["nl0001-r1"]
    assert "link set dev r1-eth1 mtu 1400" in r1
    assert p.sysctls["nl0001-r1"]["net.ipv4.ip_forward"] == "1"
    assert any("address 02:00:00:00:00:02" in ln for ln in p.link_lines)
    assert p.root_ports == {"s2": ["nl0001-p1"]}
