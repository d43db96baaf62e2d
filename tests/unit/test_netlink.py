"""The rtnetlink requests a namespace sends itself (nslab.runtime.netlink), checked
byte for byte against pyroute2's encoding of the same requests, and the
acknowledgement reader against a captured kernel refusal. No root."""
import ipaddress
import struct

import pytest

from nslab.runtime import netlink as nl
from nslab.errors import CommandError
from nslab.model.fields import Route
from nslab.model.render import RenderError

INDEX = {"eth0": 7, "lo": 1, "s1": 42}


def _pyroute2(msg_cls, kind, flags, fields, attrs):
    """pyroute2's bytes for one request (header seq/pid zero)."""
    m = msg_cls()
    for k, v in fields.items():
        m[k] = v
    m["attrs"] = attrs
    m["header"]["type"] = kind
    m["header"]["flags"] = flags
    m["header"]["sequence_number"] = 0
    m.encode()
    return bytes(m.data[:m["header"]["length"]])


def _ours(op):
    kind, flags, body = op.encode(INDEX.__getitem__)
    return nl.message(kind, nl.NLM_F_REQUEST | nl.NLM_F_ACK | flags, body)


REQ = nl.NLM_F_REQUEST | nl.NLM_F_ACK


def test_link_up_mtu_and_master_match_pyroute2():
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    assert _ours(nl.LinkUp("eth0")) == _pyroute2(
        ifinfmsg, nl.RTM_NEWLINK, REQ, {"family": 0, "index": 0, "flags": 1, "change": 1},
        [("IFLA_IFNAME", "eth0")])
    assert _ours(nl.LinkMtu("eth0", 9000)) == _pyroute2(
        ifinfmsg, nl.RTM_NEWLINK, REQ, {"family": 0, "index": 0, "flags": 0, "change": 0},
        [("IFLA_IFNAME", "eth0"), ("IFLA_MTU", 9000)])
    assert _ours(nl.LinkMaster("eth0", "s1")) == _pyroute2(
        ifinfmsg, nl.RTM_NEWLINK, REQ, {"family": 0, "index": 0, "flags": 0, "change": 0},
        [("IFLA_IFNAME", "eth0"), ("IFLA_MASTER", 42)])


@pytest.mark.parametrize("addr,family,scope", [("10.0.0.1/8", 2, 0), ("127.0.0.2/8", 2, 254),
                                               ("2001:db8::1/64", 10, 0)])
def test_addresses_match_pyroute2(addr, family, scope):
    from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
    iface = ipaddress.ip_interface(addr)
    ours = _ours(nl.AddrAdd(iface, "eth0"))
    theirs = _pyroute2(ifaddrmsg, nl.RTM_NEWADDR, REQ | nl.NLM_F_CREATE | nl.NLM_F_EXCL,
                       {"family": family, "prefixlen": iface.network.prefixlen, "flags": 0,
                        "scope": scope, "index": 7},
                       [("IFA_LOCAL", str(iface.ip)), ("IFA_ADDRESS", str(iface.ip))])
    assert ours == theirs


@pytest.mark.parametrize("text,family,dst_len,scope,attrs", [
    ("default via 10.0.0.254", 2, 0, 0, [("RTA_GATEWAY", "10.0.0.254")]),
    ("10.1.0.0/16 via 10.0.0.254 dev eth0 metric 10 src 10.0.0.1", 2, 16, 0,
     [("RTA_DST", "10.1.0.0"), ("RTA_GATEWAY", "10.0.0.254"), ("RTA_OIF", 7),
      ("RTA_PRIORITY", 10), ("RTA_PREFSRC", "10.0.0.1")]),
    ("192.0.2.0/24 dev eth0", 2, 24, 253, [("RTA_DST", "192.0.2.0"), ("RTA_OIF", 7)]),
    ("2001:db8:1::/48 via 2001:db8::1", 10, 48, 0,
     [("RTA_DST", "2001:db8:1::"), ("RTA_GATEWAY", "2001:db8::1")]),
])
def test_routes_match_pyroute2_and_ip(text, family, dst_len, scope, attrs):
    from pyroute2.netlink.rtnl.rtmsg import rtmsg
    op = nl.RouteAdd(Route.model_validate(text))
    theirs = _pyroute2(rtmsg, nl.RTM_NEWROUTE, REQ | nl.NLM_F_CREATE | nl.NLM_F_EXCL,
                       {"family": family, "dst_len": dst_len, "src_len": 0, "tos": 0,
                        "table": 254, "proto": 3, "scope": scope, "type": 1, "flags": 0}, attrs)
    assert _ours(op) == theirs
    assert op.line() == "route add " + text  # what the plan shows and an error quotes


def test_bridge_with_stp_nests_its_options():
    kind, flags, body = nl.BridgeAdd("s1", True, 200).encode(INDEX.__getitem__)
    assert (kind, flags) == (nl.RTM_NEWLINK, nl.NLM_F_CREATE | nl.NLM_F_EXCL)
    top = dict(nl.attrs(body, 16))
    assert top[nl.IFLA_IFNAME] == b"s1\0"
    info = dict(nl.attrs(top[nl.IFLA_LINKINFO], 0))
    assert info[nl.IFLA_INFO_KIND] == b"bridge"
    data = dict(nl.attrs(info[nl.IFLA_INFO_DATA], 0))
    assert data == {nl.IFLA_BR_STP_STATE: struct.pack("=I", 1),
                    nl.IFLA_BR_FORWARD_DELAY: struct.pack("=I", 200)}
    assert nl.BridgeAdd("s1", True, 200).line() == \
        "link add name s1 type bridge stp_state 1 forward_delay 200"
    plain = dict(nl.attrs(nl.BridgeAdd("s1").encode(INDEX.__getitem__)[2], 16))
    assert nl.IFLA_INFO_DATA not in dict(nl.attrs(plain[nl.IFLA_LINKINFO], 0))


@pytest.mark.parametrize("name", ["a b", "x\nlink del", "-rf", "abcdefghijklmnop", "a/b", ""])
def test_names_are_checked_again_before_encoding(name):
    with pytest.raises((RenderError, ValueError)):
        nl.LinkUp(name).encode(INDEX.__getitem__)


def test_sysctl_paths_stay_in_the_net_tree():
    assert nl.SysctlSet("net.ipv4.conf.eth0.rp_filter", "1").path() == \
        "/proc/sys/net/ipv4/conf/eth0/rp_filter"
    for bad in ("kernel.core_pattern", "net.ipv4/../../kernel/x", "net..x"):
        with pytest.raises(ValueError):
            nl.SysctlSet(bad, "1").path()


#: The kernel's answers (6.18, NETLINK_CAP_ACK and NETLINK_EXT_ACK on), captured
#: with ``socket.recv`` in a fresh namespace on the development VM: to
#: ``route add 192.0.2.0/24 via 172.31.255.1`` (no such network on a link),
#: then to ``link set dev lo up``.
CAPTURED_REFUSAL = bytes.fromhex(
    "440000000200000301000000915d00009bffffff2c00000018000506010000000000000020000100"
    "4e657874686f702068617320696e76616c6964206761746577617900")
CAPTURED_ACK = bytes.fromhex(
    "240000000200000102000000915d00000000000028000000100005000200000000000000")


def test_acknowledgements_give_errno_and_the_kernels_message():
    assert list(nl.parse_ack(CAPTURED_REFUSAL + CAPTURED_ACK)) == [
        (1, 101, "Nexthop has invalid gateway"), (2, 0, "")]


def test_a_refusal_names_the_request_as_an_ip_line():
    class FakeSock:
        def __init__(self):
            self.sent = b""

        def send(self, data):
            self.sent += data

        def recv(self, n):
            inner = self.sent[:16]
            return struct.pack("=IHHII", 36, nl.NLMSG_ERROR, 0x100, 1, 0) + \
                struct.pack("=i", -17) + inner

        def close(self):
            pass

    s = nl.Session.__new__(nl.Session)
    s.where, s.sock, s.seq, s.pending, s.out, s.index = "configuring h1", FakeSock(), 0, {}, [], {}
    s.add(nl.AddrAdd(ipaddress.ip_interface("10.0.0.1/8"), "lo"))
    with pytest.raises(CommandError) as err:
        s.flush()
    assert "configuring h1" in str(err.value)
    assert "ip addr add 10.0.0.1/8 dev lo" in str(err.value)
    assert "File exists" in str(err.value)


def test_no_link_local_matches_pyroute2():
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    theirs = _pyroute2(ifinfmsg, nl.RTM_NEWLINK, REQ,
                       {"family": 0, "index": 0, "flags": 0, "change": 0},
                       [("IFLA_IFNAME", "eth0"),
                        ("IFLA_AF_SPEC", {"attrs": [("AF_INET6", {"attrs": [
                            ("IFLA_INET6_ADDR_GEN_MODE", 1)]})]})])
    assert _ours(nl.NoLinkLocal("eth0")) == theirs
    assert nl.NoLinkLocal("eth0").line() == "link set dev eth0 addrgenmode none"


def test_a_device_without_ipv6_needs_no_link_local_refusal():
    """EAFNOSUPPORT to addrgenmode (a device with an MTU under 1280 has no
    IPv6 at all) is not an error; to anything else it is."""
    class FakeSock:
        def __init__(self):
            self.sent = []

        def send(self, data):
            off = 0
            while off < len(data):
                n = struct.unpack_from("=I", data, off)[0]
                self.sent.append(data[off:off + 16])
                off += n

        def recv(self, n):
            hdr = self.sent.pop(0)
            return struct.pack("=IHHII", 36, nl.NLMSG_ERROR, 0x100, struct.unpack_from("=I", hdr, 8)[0], 0) + \
                struct.pack("=i", -97) + hdr

    s = nl.Session.__new__(nl.Session)
    s.where, s.sock, s.seq, s.pending, s.out, s.index = "configuring s1", FakeSock(), 0, {}, [], {}
    s.add(nl.NoLinkLocal("s1-eth1"))
    s.flush()
    s.add(nl.LinkUp("s1-eth1"))
    with pytest.raises(CommandError, match="Address family not supported"):
        s.flush()


def test_a_failed_batch_names_the_kernels_answer_not_only_the_line_number():
    err = CommandError(["ip", "-batch", "-"], 1, "",
                       "RTNETLINK answers: File exists\nCommand failed -:2\n", "creating links")
    assert str(err).endswith("ip -batch -: RTNETLINK answers: File exists (Command failed -:2)")
