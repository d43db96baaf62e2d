"""Where an error in topology input is, and what its one line says: the model
at a location is read from the models' own field types (no list of them
kept by hand), so an unknown key anywhere names the keys allowed there."""
import pytest

from nslab.errors import TopologyError
from nslab.frr.options import BfdOptions, BgpOptions
from nslab.model.fields import Route
from nslab.model.topo import Link, LinkEnd, Node, Topology
from nslab.model.topo_errors import field_path, model_at


@pytest.mark.parametrize("loc, model", [
    ((), Topology),
    (("nodes", "h1"), Node),
    (("nodes", "h1", "bgp"), BgpOptions),
    (("nodes", "h1", "bgp", "bfd"), BfdOptions),
    (("nodes", "h1", "routes", 0), Route),
    (("links", 3), Link),
    (("links", 3, "params2"), LinkEnd),
    (("hosts",), None),            # an alias, of no model
    (("nodes", "h1", "sysctls"), None),
    (("nodes",), None),            # the mapping itself, not a node
    (("nope",), None),
])
def test_the_model_at_a_location(loc, model):
    assert model_at(Topology, loc) is model


def test_an_unknown_key_deep_in_a_node_names_the_keys_allowed_there():
    with pytest.raises(TopologyError) as exc:
        Topology.from_dict({"nodes": {"r1": {"kind": "router", "bgp": {
            "asn": 65001, "router_id": "10.0.0.1", "bfd": {"intervall": 100}}}}})
    msg = str(exc.value)
    assert msg.startswith("nodes.r1.bgp.bfd: unknown key 'intervall' (allowed: ")
    assert all(k in msg for k in BfdOptions.model_fields)


def test_a_field_path_quotes_a_key_with_a_dot():
    assert field_path(("nodes", "h1", "sysctls", "net.ipv4.ip_forward")) == \
        "nodes.h1.sysctls['net.ipv4.ip_forward']"
