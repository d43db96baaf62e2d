"""The route-table reader behind ECMP readiness: netlink route messages
captured from a namespace (multipath over IPv6 link-locals as BGP unnumbered
installs them, multipath over IPv4, a single IPv6 nexthop, a default route,
link and blackhole routes, a route in another table) counted as ``ip -j route
show`` of the same namespace counts them."""
import base64
import json
import os

from nslab.runtime.proc import ip_json_routes, parse_route_messages

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "route_dump.json")


def captured():
    d = json.load(open(DATA))
    return [base64.b64decode(m) for m in d["messages"]], d["ip_json"]


def test_netlink_routes_count_like_ip_json():
    msgs, ip_json = captured()
    ours = parse_route_messages(msgs)
    assert ours == ip_json_routes(ip_json)
    assert ours["10.9.0.0/24"] == 3 and ours["10.8.0.0/16"] == 2
    assert ours["10.0.200.7/32"] == 1 and ours["default"] == 1
    assert ours["10.7.0.0/24"] == 0 and ours["10.6.0.0/24"] == 0
    assert "10.4.0.0/24" not in ours  # table 100, not main


def test_foreign_or_cut_messages_do_not_break_the_reader():
    msgs, _ = captured()
    # IPv6 family, a message too short for its header, attributes cut short
    junk = [bytes([10]) + msgs[0][1:], b"\x02\x18", msgs[0][:14]]
    assert parse_route_messages(junk + msgs) == parse_route_messages(msgs)
