"""Property-based tests (hypothesis) of the untrusted-input boundary:

* any topology validation accepts renders batch text whose lines and tokens are
  exactly the structure the planner meant (read back the way ``ip -batch``
  reads it: no injected line, token or comment);
* any random mutation of a valid file is accepted (with the same structure,
  and renderable) or refused with an ``InputError``, never a traceback.
"""
import copy
import string

import yaml
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import nslab.runtime.netlink as netlink_mod
import nslab.runtime.plan as plan_mod
from nslab.errors import InputError
from nslab.model.render import text
from nslab.model.topo import Topology

from .test_untrusted_topology import BASE

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def batch_tokens(line):
    """Tokenize one batch line as iproute2's makeargs does: whitespace
    separates, quotes group, ``#`` starts a comment."""
    out, cur, quote, started = [], "", None, False
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur += ch
            continue
        if ch in "\"'":
            quote, started = ch, True
        elif ch == "#" and not started:
            break
        elif ch.isspace():
            if started:
                out.append(cur)
            cur, started = "", False
        else:
            cur += ch
            started = True
    if started:
        out.append(cur)
    return out


names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True)
ifnames = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}", fullmatch=True).filter(
    lambda s: s not in ("lo",))
octet = st.integers(1, 254)


@st.composite
def topologies(draw):
    n = draw(st.integers(2, 6))
    node_names = draw(st.lists(names, min_size=n, max_size=n, unique_by=str.lower))
    kinds = {name: draw(st.sampled_from(["host", "host", "router", "switch"])) for name in node_names}
    nodes = {}
    for i, name in enumerate(node_names):
        opts = {"kind": kinds[name]}
        if kinds[name] == "switch":
            opts["type"] = draw(st.sampled_from(["bridge", "ovs"]))
            opts["stp"] = draw(st.booleans())
            if opts["type"] == "ovs" and draw(st.booleans()):
                opts["dpid"] = draw(st.integers(0, 2 ** 64 - 1))
        else:
            if draw(st.booleans()):
                opts["loopback"] = f"10.250.{i}.1/32"
            if draw(st.booleans()):
                opts["sysctls"] = {draw(st.sampled_from(
                    ["net.ipv4.ip_forward", "net.ipv4.conf.all.rp_filter",
                     "net.ipv4.tcp_congestion_control"])): draw(st.sampled_from(["0", "1", "reno", 2]))}
            opts["routes"] = [f"10.{200 + j}.0.0/16 via 10.0.{i}.{draw(octet)}"
                              + draw(st.sampled_from(["", f" metric {draw(st.integers(0, 2 ** 32 - 1))}"]))
                              for j in range(draw(st.integers(0, 2)))]
        nodes[name] = opts
    links = []
    used_intf = {name: set() for name in node_names}
    for j in range(draw(st.integers(1, 6))):
        a, b = draw(st.lists(st.sampled_from(node_names), min_size=2, max_size=2, unique=True))
        link = {"a": a, "b": b}
        for key, node in (("params1", a), ("params2", b)):
            end = {}
            if draw(st.booleans()):
                intf = draw(ifnames)
                if intf not in used_intf[node]:
                    used_intf[node].add(intf)
                    end["intf"] = intf
            if kinds[node] != "switch" and draw(st.booleans()):
                end["ip"] = f"10.{100 + j}.{node_names.index(node)}.1/24"
            if end:
                link[key] = end
        if draw(st.booleans()):
            link["bw"] = draw(st.sampled_from([1, 100, "1Gbit", "10.5Mbit", 0.25]))
        if draw(st.booleans()):
            link["delay"] = draw(st.sampled_from(["1ms", "0.1ms", 2, "1s"]))
            if draw(st.booleans()):
                link["jitter"] = "0.5ms"
        if draw(st.booleans()):
            link["loss"] = draw(st.floats(0, 100, allow_nan=False))
        if draw(st.booleans()):
            link["framing"] = True
        if draw(st.booleans()):
            link["mtu"] = draw(st.integers(68, 65535))
        links.append(link)
    return {"name": "prop", "nodes": nodes, "links": links}


def _expected_ns_lines(topo, name):
    """The number of lines the planner must write for a namespaced node, from the structure."""
    node = topo.nodes[name]
    intfs = topo.node_interfaces()[name]
    count = 1 + (1 if node.loopback else 0) + len(node.routes)
    if node.is_switch:
        count += 2 + len(intfs)
    addrs = topo.addresses()
    for link, na, ia, nb, ib in topo.interfaces():
        for n, i in ((na, ia), (nb, ib)):
            if n == name:
                count += 1 + (1 if link.mtu else 0) + (1 if (n, i) in addrs else 0)
                count += 1 if node.is_switch else 0  # a bridge port: no IPv6 link-local
    return count


@SETTINGS
@given(topologies())
def test_accepted_topologies_render_exactly_their_structure(doc):
    try:
        topo = Topology.from_dict(doc)
    except InputError:
        assume(False)
        return
    recorded = []
    real_line = plan_mod.line

    def spy(*tokens):
        out = real_line(*tokens)
        recorded.append((out, [str(t) for t in tokens]))
        return out

    plan_mod.line = netlink_mod.line = spy
    try:
        p = plan_mod.plan(topo, "nl0abc", ["ovs"])
        ns_lines = p.ns_lines  # the netlink requests, as the ip lines they stand for
    finally:
        plan_mod.line = netlink_mod.line = real_line
    tokens_of = dict(recorded)
    # every request encodes to one well-formed message
    for ops in p.ns_ops.values():
        for op in ops:
            kind, _flags, body = op.encode(lambda dev: 7)
            assert kind in (netlink_mod.RTM_NEWLINK, netlink_mod.RTM_NEWADDR,
                            netlink_mod.RTM_NEWROUTE) and len(body) % 4 == 0
    batches = [p.netns_lines, p.link_lines] + list(ns_lines.values())
    for lines in batches:
        rendered = text(lines)
        back = rendered.split("\n")
        assert back[-1] == "" and len(back) - 1 == len(lines)  # no line added
        for ln in back[:-1]:
            assert batch_tokens(ln) == tokens_of[ln]  # no token added, split or hidden
    for lines in p.tc_lines.values():
        for ln in text(lines).splitlines():
            assert batch_tokens(ln) == ln.split() and "#" not in ln
    # the structure: one namespace per non-OVS node, one link line per link
    in_root = [n for n in topo.switches() if topo.switch_type_of(n) == "ovs"]
    assert len(p.netns_lines) == len(topo.nodes) - len(in_root)
    assert sum(1 for ln in p.link_lines if ln.startswith("link add")) == len(topo.links)
    for name, np in p.nodes.items():
        if np.netns:
            assert len(p.ns_lines[np.netns]) == _expected_ns_lines(topo, name)
    for ns, values in p.sysctls.items():
        for k, v in values.items():
            assert "\n" not in k + v and "=" not in k


# -- mutation of a valid file ------------------------------------------------------------
def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(BASE) if p]
hostile_scalars = st.one_of(
    st.text(alphabet=string.printable + "\x00\u2028é", max_size=40), st.integers(-2 ** 70, 2 ** 70),
    st.floats(allow_nan=True), st.booleans(), st.none(), st.just("eth0\nnetns add x"),
    st.just("10.0.0.1/24 dev lo\nnetns add x"), st.just("kernel.core_pattern"))
hostile = st.recursive(hostile_scalars, lambda c: st.one_of(
    st.lists(c, max_size=3), st.dictionaries(st.text(max_size=12), c, max_size=3)), max_leaves=6)


def _count(doc):
    return len(doc.get("nodes") or {}), len(doc.get("links") or [])


@SETTINGS
@given(st.sampled_from(ALL_PATHS), hostile)
def test_mutated_values_are_accepted_renderably_or_refused(path, value):
    doc = copy.deepcopy(BASE)
    cur = doc
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    try:
        topo = Topology.from_dict(doc)
    except InputError:
        return
    assert (len(topo.nodes), len(topo.links)) == _count(doc)
    p = plan_mod.plan(topo, "nl0abc", ["ovs"])
    for lines in [p.netns_lines, p.link_lines, *p.ns_lines.values(), *p.tc_lines.values()]:
        assert text(lines).count("\n") == len(lines)


@SETTINGS
@given(st.data())
def test_mutated_yaml_text_is_accepted_or_refused_with_one_line(tmp_path_factory, data):
    src = yaml.safe_dump(BASE, sort_keys=False)
    chars = list(src)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(chars) - 1))
        op = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        ch = data.draw(st.sampled_from(list(":-[]{}\n '\"#&*!|>%@`") + list("ax19")))
        if op == "replace":
            chars[i] = ch
        elif op == "insert":
            chars.insert(i, ch)
        elif len(chars) > 1:
            del chars[i]
    path = tmp_path_factory.mktemp("mut") / "t.yaml"
    path.write_text("".join(chars))
    try:
        topo = Topology.from_yaml(str(path))
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    p = plan_mod.plan(topo, "nl0abc", ["ovs"])
    for lines in [p.netns_lines, p.link_lines, *p.ns_lines.values()]:
        assert text(lines).count("\n") == len(lines)


@pytest.mark.parametrize("value", [False, True, 167772160, 1.5])
def test_an_ip_base_that_is_no_network_string_is_refused(value):
    """A bool or a number is no network: ipaddress would take it as an
    address (false: 0.0.0.0/32), which hypothesis found accepted."""
    from nslab.errors import TopologyError
    from nslab.model.topo import Topology
    with pytest.raises(TopologyError, match="ip_base: must be an IPv4 network"):
        Topology.from_dict({"ip_base": value, "nodes": {"h1": {}}})
