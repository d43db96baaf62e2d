"""The sysctls a node may set: an allow-list of keys each network namespace
holds for itself and discards with it.

"Writable in a fresh namespace" is not enough: a key can sit in a
namespace's ``/proc/sys/net`` and still change the whole machine. Writing
``net.netfilter.nf_hooks_lwtunnel`` in any namespace turns on a static key of
the kernel's that can never be turned off again, and the table-wide
neighbour limits (``net.ipv4.neigh.default.gc_thresh3``) are one table for
every namespace. So a file, a study or a caller may set only the keys listed
here, each known to be per namespace and gone with the namespace on the
kernels nslab supports (Debian 12's 6.1, Debian 13's 6.12, and 6.18): their
value lives in the namespace's own ``struct net`` (``net->ipv4``,
``net->ipv6``, the devices' ``devconf``), and their handlers change nothing
else. Anything else is refused in one line. A test writes each key in a
throwaway namespace on every kernel of the stock-kernel tier and checks that
the host's value never moved and that a new namespace has the old value
again (``tests/integration/test_sysctl_allowlist.py``).

Each key carries two values a test can write (it writes the one that differs
from the current value). Per-device keys (``net.ipv4.conf.<dev>.<key>``,
``net.ipv6.conf.<dev>.<key>``) are listed once, for any ``<dev>``: ``all``,
``default`` or an interface of the node.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

#: Per-device IPv4 settings (``net.ipv4.conf.<dev>.<key>``): the namespace's
#: ``all``/``default`` copies and its own devices' (``devinet``).
IPV4_CONF: Dict[str, Tuple[str, str]] = {
    "forwarding": ("0", "1"), "rp_filter": ("0", "2"), "accept_redirects": ("0", "1"),
    "secure_redirects": ("1", "0"), "send_redirects": ("1", "0"),
    "accept_source_route": ("0", "1"), "accept_local": ("0", "1"),
    "route_localnet": ("0", "1"), "proxy_arp": ("0", "1"), "proxy_arp_pvlan": ("0", "1"),
    "arp_ignore": ("0", "1"), "arp_announce": ("0", "2"), "arp_filter": ("0", "1"),
    "arp_accept": ("0", "1"), "arp_notify": ("0", "1"), "log_martians": ("0", "1"),
    "src_valid_mark": ("0", "1"), "ignore_routes_with_linkdown": ("0", "1"),
    "promote_secondaries": ("0", "1"), "drop_gratuitous_arp": ("0", "1"),
    "bc_forwarding": ("0", "1"), "disable_policy": ("0", "1"), "disable_xfrm": ("0", "1"),
}

#: Per-device IPv6 settings (``net.ipv6.conf.<dev>.<key>``, ``addrconf``).
IPV6_CONF: Dict[str, Tuple[str, str]] = {
    "forwarding": ("0", "1"), "disable_ipv6": ("0", "1"), "accept_dad": ("1", "0"),
    "dad_transmits": ("1", "0"), "accept_ra": ("1", "0"), "accept_ra_defrtr": ("1", "0"),
    "accept_ra_pinfo": ("1", "0"), "autoconf": ("1", "0"), "accept_redirects": ("1", "0"),
    "accept_source_route": ("0", "-1"), "router_solicitations": ("3", "1"),
    "use_tempaddr": ("0", "1"), "keep_addr_on_down": ("0", "1"),
    # not ignore_routes_with_linkdown: Linux 6.1 refuses it for "all" (EINVAL)
    "proxy_ndp": ("0", "1"),
    "hop_limit": ("64", "63"), "ndisc_notify": ("0", "1"), "drop_unsolicited_na": ("0", "1"),
}

#: Whole-namespace keys (``struct netns_ipv4``/``netns_ipv6``/``netns_core``/
#: ``netns_unix``).
NAMESPACE: Dict[str, Tuple[str, str]] = {
    "net.ipv4.ip_forward": ("0", "1"),
    "net.ipv4.ip_default_ttl": ("64", "63"),
    "net.ipv4.ip_local_port_range": ("32768 60999", "20000 40000"),
    "net.ipv4.ip_nonlocal_bind": ("0", "1"),
    "net.ipv4.ip_no_pmtu_disc": ("0", "1"),
    "net.ipv4.ip_forward_use_pmtu": ("0", "1"),
    "net.ipv4.icmp_echo_ignore_all": ("0", "1"),
    "net.ipv4.icmp_echo_ignore_broadcasts": ("1", "0"),
    "net.ipv4.icmp_ignore_bogus_error_responses": ("1", "0"),
    "net.ipv4.icmp_errors_use_inbound_ifaddr": ("0", "1"),
    "net.ipv4.icmp_ratelimit": ("1000", "100"),
    "net.ipv4.fib_multipath_hash_policy": ("0", "1"),
    "net.ipv4.fib_multipath_use_neigh": ("0", "1"),
    # reno and cubic are built into Debian's kernels: a name the kernel must
    # load a module for is refused at run time (nslab.runtime.caps)
    "net.ipv4.tcp_congestion_control": ("cubic", "reno"),
    "net.ipv4.tcp_ecn": ("2", "1"),
    "net.ipv4.tcp_sack": ("1", "0"),
    "net.ipv4.tcp_dsack": ("1", "0"),
    "net.ipv4.tcp_timestamps": ("1", "0"),
    "net.ipv4.tcp_window_scaling": ("1", "0"),
    "net.ipv4.tcp_syncookies": ("1", "0"),
    "net.ipv4.tcp_fin_timeout": ("60", "30"),
    "net.ipv4.tcp_keepalive_time": ("7200", "600"),
    "net.ipv4.tcp_keepalive_intvl": ("75", "30"),
    "net.ipv4.tcp_keepalive_probes": ("9", "5"),
    "net.ipv4.tcp_syn_retries": ("6", "3"),
    "net.ipv4.tcp_synack_retries": ("5", "3"),
    "net.ipv4.tcp_retries2": ("15", "8"),
    "net.ipv4.tcp_reordering": ("3", "5"),
    "net.ipv4.tcp_mtu_probing": ("0", "1"),
    "net.ipv4.tcp_no_metrics_save": ("0", "1"),
    "net.ipv4.tcp_slow_start_after_idle": ("1", "0"),
    "net.ipv4.tcp_tw_reuse": ("2", "1"),
    "net.ipv4.tcp_frto": ("2", "0"),
    "net.ipv4.tcp_early_retrans": ("3", "0"),
    "net.ipv4.tcp_recovery": ("1", "0"),
    "net.ipv4.tcp_autocorking": ("1", "0"),
    "net.ipv4.tcp_moderate_rcvbuf": ("1", "0"),
    "net.ipv4.tcp_notsent_lowat": ("4294967295", "131072"),
    "net.ipv4.tcp_limit_output_bytes": ("1048576", "262144"),
    "net.ipv4.tcp_min_tso_segs": ("2", "4"),
    "net.ipv4.tcp_pacing_ss_ratio": ("200", "100"),
    "net.ipv4.tcp_pacing_ca_ratio": ("120", "100"),
    "net.ipv4.tcp_rmem": ("4096 131072 6291456", "4096 87380 6291456"),
    "net.ipv4.tcp_wmem": ("4096 16384 4194304", "4096 65536 4194304"),
    "net.ipv4.tcp_l3mdev_accept": ("0", "1"),
    "net.ipv4.udp_l3mdev_accept": ("0", "1"),
    "net.ipv4.udp_rmem_min": ("4096", "8192"),
    "net.ipv4.udp_wmem_min": ("4096", "8192"),
    "net.ipv6.fib_multipath_hash_policy": ("0", "1"),
    "net.ipv6.bindv6only": ("0", "1"),
    "net.ipv6.icmp.ratelimit": ("1000", "100"),
    "net.core.somaxconn": ("4096", "1024"),
    "net.unix.max_dgram_qlen": ("512", "64"),
}


def _conf(key: str) -> Optional[Tuple[str, str]]:
    """``(family, setting)`` of a per-device key (``net.ipv4.conf.eth0.rp_filter``
    -> ``("ipv4", "rp_filter")``), None for another key."""
    parts = key.split(".")
    if len(parts) == 5 and parts[0] == "net" and parts[1] in ("ipv4", "ipv6") \
            and parts[2] == "conf":
        return parts[1], parts[4]
    return None


def values(key: str) -> Optional[Tuple[str, str]]:
    """The two test values of an allowed ``key``, None for a key nslab refuses."""
    conf = _conf(key)
    if conf is not None:
        family, setting = conf
        return (IPV4_CONF if family == "ipv4" else IPV6_CONF).get(setting)
    return NAMESPACE.get(key)


def allowed(key: str) -> bool:
    """Whether a node may set ``key``: on the allow-list (per namespace, gone
    with it)."""
    return values(key) is not None


def listed() -> Dict[str, Tuple[str, str]]:
    """Every allowed key with its test values, per-device keys once for
    ``all`` and once for ``default`` (what a fresh namespace has)."""
    out = dict(NAMESPACE)
    for family, table in (("ipv4", IPV4_CONF), ("ipv6", IPV6_CONF)):
        for dev in ("all", "default"):
            out.update({f"net.{family}.conf.{dev}.{k}": v for k, v in table.items()})
    return out


def refusal(key: str) -> str:
    """Why ``key`` is refused, one line (without the file and field)."""
    return (f"{key} is not on the allow-list of sysctls a node may set (keys known to be "
            "per network namespace and undone with it, docs/security.md): another may change "
            "the host for good")


__all__ = ["IPV4_CONF", "IPV6_CONF", "NAMESPACE", "allowed", "listed", "refusal", "values"]
