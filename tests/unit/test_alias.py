"""Alias study logic, and its report redrawn from a captured real run (no root)."""
import os
import shutil

import pytest

from nslab.errors import InputError
from nslab.experiments.alias import (AliasConfig, alias_addresses, alias_batch, goodput_ceiling,
                                     parse_proc_stat, parse_ss_bytes_received, points)
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


def test_ss_and_proc_stat_parsers_on_captured_output():
    with open(data("ss", "ss_tin_established.txt")) as f:
        total, socks = parse_ss_bytes_received(f.read())
    assert socks == 2 and total > 1_000_000_000
    with open(data("ss", "proc_stat.txt")) as f:
        busy, all_ = parse_proc_stat(f.read())
    assert 0 < busy < all_


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
