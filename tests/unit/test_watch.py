"""`nslab watch`'s arithmetic on captured `ip -s -j link` output. No root."""
import copy
import json

import pytest

from nslab.errors import InputError
from nslab.traffic.watch import find_run, parse_link_stats, rates, table
from tests.conftest import data


def test_parse_leaves_loopback_out_and_reads_both_directions():
    text = open(data("ip/link-stats.json")).read()
    got = parse_link_stats(text)
    raw = {x["ifname"]: x["stats64"] for x in json.loads(text)}
    assert "lo" not in got and set(got) == set(raw) - {"lo"}
    for name, c in got.items():
        assert c["rx_bytes"] == raw[name]["rx"]["bytes"]
        assert c["tx_packets"] == raw[name]["tx"]["packets"]


def test_rates_between_two_samples():
    text = open(data("ip/link-stats.json")).read()
    a = parse_link_stats(text)
    b = copy.deepcopy(a)
    (intf,) = list(b)[:1]
    b[intf]["rx_bytes"] += 125_000_000  # 1 Gbit in 2 s
    b[intf]["tx_packets"] += 20_000
    b[intf]["drops"] += 3
    (r,) = [x for x in rates((10.0, {"h1": a}), (12.0, {"h1": b})) if x.intf == intf]
    assert r.rx_bps == pytest.approx(500e6) and r.tx_pps == pytest.approx(10_000)
    assert r.drops == 3 and r.tx_bps == 0
    assert table("nl1234", [r]).row_count == 1


def test_no_lab_or_an_unknown_one_is_one_clear_line(monkeypatch):
    monkeypatch.setattr("nslab.runtime.clean.live_journals", lambda exclude=None: [])
    with pytest.raises(InputError, match="no lab is running"):
        find_run(None)
    monkeypatch.setattr("nslab.runtime.clean.live_journals", lambda exclude=None: [
        {"run": "nlaaaa", "pid": 10, "topology": "pair", "nodes": 2},
        {"run": "nlbbbb", "pid": 11, "topology": "clos-2x2", "nodes": 4}])
    with pytest.raises(InputError, match="2 labs are running: nlaaaa \\(pair, 2 nodes\\), "
                                         "nlbbbb \\(clos-2x2, 4 nodes\\); name the one"):
        find_run(None)
    with pytest.raises(InputError, match="no lab 'nlffff' is running on this host"):
        find_run("nlffff")
