import textwrap

import pytest

from nslab.errors import InputError
from nslab.model.topo import Topology


def write(tmp_path, text):
    p = tmp_path / "t.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_good_yaml_builds_the_described_topology(tmp_path):
    path = write(tmp_path, """
        name: demo
        switch: ovs
        nodes:
          h1: {ip: 10.1.0.1/24}
          h2: {ip: 10.1.0.2/24}
          s1: {kind: switch}
        links:
          - [h1, s1]
          - {a: h2, b: s1, bw: 100Mbit, framing: true}
        """)
    t = Topology.from_yaml(path)
    assert t.name == "demo" and t.switch_type_of("s1") == "ovs"
    assert str(t.addresses()[("h1", "h1-eth0")]) == "10.1.0.1/24"
    assert t.links[1].shaping.rate == 100_000_000 and t.links[1].shaping.overhead == 24
    assert t.links[0].shaping is None


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, """
        nodes:
          h1: {ip: 10.0.0.1/24
          h2: {}
        """)
    with pytest.raises(InputError, match=r"t\.yaml:\d+: malformed YAML"):
        Topology.from_yaml(path)


def test_bad_node_name_names_its_line(tmp_path):
    path = write(tmp_path, """
        nodes:
          h1: {}
          "bad name": {}
        links: []
        """)
    with pytest.raises(InputError, match=r"t\.yaml:4: nodes\.bad name: 'bad name' is not a valid node name"):
        Topology.from_yaml(path)


def test_bad_link_names_its_line(tmp_path):
    path = write(tmp_path, """
        nodes:
          h1: {}
          h2: {}
        links:
          - [h1, h2]
          - {a: h1, b: h2, bw: 10 parsecs}
        """)
    with pytest.raises(InputError, match=r"t\.yaml:7: links\.1\.bw: bad rate '10 parsecs'"):
        Topology.from_yaml(path)


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, """
        nodes: {h1: {}}
        lnks: []
        """)
    with pytest.raises(InputError, match="unknown key.*lnks"):
        Topology.from_yaml(path)


def test_missing_file():
    with pytest.raises(InputError, match="cannot read"):
        Topology.from_yaml("/nonexistent/t.yaml")


@pytest.mark.parametrize("switch", ["ovs", "bridge"])
def test_an_address_on_a_switch_port_is_refused_at_its_line(tmp_path, switch):
    # An OVS switch's ports live in the root namespace, where the address was
    # silently never applied; a Linux bridge's port passes frames to the bridge
    # and never answers for it. Both are refused where they are written.
    path = write(tmp_path, f"""
        nodes:
          h1: {{}}
          s1: {{kind: switch, type: {switch}}}
        links:
          - a: h1
            b: s1
            params2:
              ip: 10.0.0.9/24
        """)
    with pytest.raises(InputError, match=r"t\.yaml:9: links\.0\.params2\.ip: link h1-s1: "
                                         r"10\.0\.0\.9/24 is on a port of switch s1"):
        Topology.from_yaml(path)
    # the same address on the host's end is built
    ok = Topology.from_yaml(write(tmp_path, f"""
        nodes:
          h1: {{}}
          s1: {{kind: switch, type: {switch}}}
        links:
          - a: h1
            b: s1
            params1:
              ip: 10.0.0.9/24
        """))
    assert {k: str(v) for k, v in ok.addresses().items()} == {("h1", "h1-eth0"): "10.0.0.9/24"}


def test_an_address_on_a_switch_port_is_refused_from_python():
    from nslab.errors import TopologyError
    t = Topology()
    t.add_host("h1")
    t.add_switch("s1")
    t.add_link("h1", "s1", params2={"ip": "10.0.0.9/24"})
    with pytest.raises(TopologyError, match=r"links\.0\.params2\.ip: .* switch s1"):
        t.validate()
