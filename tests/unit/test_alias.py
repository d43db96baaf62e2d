"""Alias study logic, and its report redrawn from a captured real run (no root)."""
import os
import shutil

import pytest

from nslab.errors import InputError
from nslab.experiments.alias import (AliasConfig, alias_addresses, alias_batch, goodput_ceiling,
                                     points, window_payload)
from nslab.experiments.alias_report import format_table, rise, summarize, write_report
from nslab.published import load_published
from nslab.results import ResultStore
from tests.conftest import data


def test_alias_addresses_and_batch_lines_follow_the_posts():
    addrs = alias_addresses("192.168.2.%d", 254)
    assert addrs[0] == "192.168.2.1" and addrs[-1] == "192.168.2.254"
    assert alias_batch("eth1", addrs[:2]) == [
        "addr add 192.168.2.1/16 dev eth1 label eth1:1",
        "addr add 192.168.2.2/16 dev eth1 label eth1:2"]


@pytest.mark.parametrize("template, n, message", [
    ("192.168.2.1", 3, "exactly one %d"),
    ("192.168.%d.%d", 3, "exactly one %d"),
    ("192.168.2.%d", 255, "not a usable host address"),
    ("10.%d.0.1", 300, "not an IPv4 address"),
])
def test_bad_templates_and_counts(template, n, message):
    with pytest.raises(InputError, match=message):
        alias_addresses(template, n)


@pytest.mark.parametrize("kwargs, message", [
    ({"aliases": [1, 2, 2]}, "duplicate N 2"),
    ({"aliases": [0, 1]}, "N must be >= 1"),
    ({"aliases": [1, 255]}, "not a usable host"),
    ({"duration": 0}, "must be positive"),
    ({"duration": -3}, "must be positive"),
    ({"modes": ("alias", "magic")}, "unknown variant 'magic'"),
    ({"addr_template": "192.168.2.x"}, "exactly one %d"),
    ({"switch": "hub"}, "unknown --switch"),
    ({"repeat": 0}, "--repeat"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(InputError, match=message):
        AliasConfig(**kwargs).validate()


def test_points_cover_the_grid_with_repeats_shuffled_but_reproducible():
    cfg = AliasConfig(aliases=[1, 16, 254], repeat=3, modes=("alias", "parallel"))
    pts = points(cfg)
    assert len(pts) == 3 * 2 * 3
    assert pts[:6] == [{"mode": m, "n": n, "repeat": 0} for m in ("alias", "parallel")
                       for n in (1, 16, 254)]
    assert {(p["mode"], p["n"]) for p in pts[6:12]} == {(p["mode"], p["n"]) for p in pts[:6]}
    assert points(cfg) == pts  # a resumed run sees the same order


def test_window_payload_counts_socket_by_socket_and_never_goes_negative():
    before = {("10.0.0.2:5001", "10.0.0.1:53934"): 1543000156,
              ("10.0.0.2:5001", "10.0.0.1:53932"): 1384272172}
    # The busiest socket closed before the second sample (a client that ended
    # early): a difference of sums goes negative, the per-socket count does not.
    after = {("10.0.0.2:5001", "10.0.0.1:53932"): 1384272172 + 1000,
             ("10.0.0.2:5001", "10.0.0.1:53940"): 500}  # opened in between: counted from 0
    assert sum(after.values()) - sum(before.values()) < 0
    assert window_payload(before, after) == (1500, 1)


def test_counters_read_tcp_payload_by_netlink():
    import socket
    import time

    from nslab.counters import tcp_bytes
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    try:
        cli.sendall(b"x" * 50000)
        got = 0
        while got < 50000:
            got += len(conn.recv(65536))
        time.sleep(0.05)
        key = (f"127.0.0.1:{port}", f"127.0.0.1:{cli.getsockname()[1]}")
        assert tcp_bytes(port, sender=False) == {key: 50000}
        # the sender's view: the peer acknowledged it all
        assert list(tcp_bytes(port, sender=True).values()) == [50000]
    finally:
        for s in (cli, conn, srv):
            s.close()


def test_goodput_ceiling():
    assert goodput_ceiling(1e9) == pytest.approx(956.4e6, rel=1e-3)
    assert goodput_ceiling(1e9, framing=True) == pytest.approx(941.5e6, rel=1e-3)


def test_rise_compares_the_small_n_plateau_with_the_largest_n():
    post2 = {int(k): v for k, v in load_published("alias")["series"][1]["points"].items()}
    assert rise(post2) == pytest.approx((990832 - 920909) / 920909, rel=0.01)
    assert rise({1: 1.0, 16: 1.0}) is None


def test_table_has_the_posts_format():
    text = format_table([("x", {1: 615216.4, 254: 670788})], [1, 2, 254])
    assert text.splitlines()[0] == "| # of alias | 1 | 2 | 254 |"
    assert text.splitlines()[2] == "| *Kbits/sec* (x) | 615,216 |  | 670,788 |"


def test_report_redraws_from_a_stored_run_without_root(tmp_path):
    run = tmp_path / "alias" / "nlc945"
    shutil.copytree(data("alias_run"), run)
    paths = write_report(str(run))
    for key in ("table", "comparison", "plot_png", "plot_svg"):
        assert os.path.getsize(paths[key]) > 0
    table = open(paths["table"]).read()
    assert "published: post 2" in table and "alias: receiver window" in table
    comparison = open(paths["comparison"]).read()
    assert "from N<=16 to N=254" in comparison
    summary = summarize(ResultStore.open(str(run)).records())
    # In the captured run the posts' method overstates N=254 relative to the receiver.
    assert summary[("alias", "clients_sum_bps")][254]["median"] > \
        summary[("alias", "receiver_bps")][254]["median"]


def test_published_alias_data_is_complete():
    pub = load_published("alias")
    assert [s["id"] for s in pub["series"]] == ["post1", "post2_tcp", "post2_nodelay"]
    for s in pub["series"]:
        assert sorted(int(k) for k in s["points"]) == [1, 2, 4, 8, 16, 32, 64, 96, 128, 160,
                                                      192, 224, 254]


def test_the_raw_sock_diag_reader_agrees_with_pyroute2():
    import socket

    from pyroute2 import DiagSocket
    from pyroute2.netlink.diag import SS_ESTABLISHED

    from nslab.counters import tcp_bytes
    srv = socket.socket(socket.AF_INET6)
    srv.bind(("::1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    pairs = []
    try:
        for i in range(5):
            cli = socket.create_connection(("::1", port))
            conn, _ = srv.accept()
            cli.sendall(b"y" * (1000 * (i + 1)))
            got = 0
            while got < 1000 * (i + 1):
                got += len(conn.recv(65536))
            pairs.append((cli, conn))
        ours = tcp_bytes(port, sender=False)
        with DiagSocket() as ds:
            ds.bind()
            theirs = {(f"[{m['idiag_src']}]:{m['idiag_sport']}", f"[{m['idiag_dst']}]:{m['idiag_dport']}"):
                      m.get_attr("INET_DIAG_INFO").get("tcpi_bytes_received")
                      for m in ds.get_sock_stats(family=socket.AF_INET6, states=1 << SS_ESTABLISHED,
                                                 extensions=2) if m["idiag_sport"] == port}
        assert ours == theirs and sorted(ours.values()) == [1000, 2000, 3000, 4000, 5000]
    finally:
        for c, d in pairs:
            c.close()
            d.close()
        srv.close()
