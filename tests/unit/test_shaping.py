import pytest

from nslab.errors import InputError
from nslab.model.shaping import Shaping, format_rate, frame_rate, parse_rate, parse_time_ms


@pytest.mark.parametrize("text, bps", [
    ("1Gbit", 10**9), ("1 Gbit/s", 10**9), ("100Mbit", 10**8), ("100M", 10**8),
    ("500k", 500_000), ("2.5gbps", 2_500_000_000), (100, 10**8), ("100", 10**8),
])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["10 parsecs", "fast", "-5M", "0", "1e3Mbit", "", "5 Tbit"])
def test_bad_rates_are_refused(text):
    with pytest.raises(InputError, match="bad rate"):
        parse_rate(text)


def test_time_parsing():
    assert parse_time_ms("5ms") == 5 and parse_time_ms("200us") == 0.2 and parse_time_ms(3) == 3
    with pytest.raises(InputError):
        parse_time_ms("soon")


def test_htb_burst_scales_so_1g_reaches_line_rate():
    lines = Shaping(rate=10**9).tc_batch("h1-eth0")
    assert lines[0] == "qdisc add dev h1-eth0 root handle 1: htb default 1"
    assert lines[1] == ("class add dev h1-eth0 parent 1: classid 1:1 htb rate 1000000000bit "
                        "burst 62500 cburst 62500")
    # At low rates the burst never drops below 16 KiB (two jumbo-ish frames).
    assert "burst 16384" in Shaping(rate=10**6).tc_batch("x")[1]


def test_framing_overhead_goes_on_the_rate_spec():
    lines = Shaping(rate=10**8, overhead=24).tc_batch("d")
    assert lines[0] == "qdisc add dev d root handle 1: htb default 1"
    assert lines[1].endswith("burst 16384 cburst 16384 overhead 24")
    assert Shaping(rate=10**8, qdisc="tbf", overhead=24).tc_batch("d")[0].endswith(
        "latency 50ms overhead 24")


def test_tbf_and_netem_child():
    lines = Shaping(rate=10**8, qdisc="tbf", delay_ms=5, jitter_ms=1, loss_pct=0.5).tc_batch("d")
    assert lines[0].startswith("qdisc add dev d root handle 1: tbf rate 100000000bit")
    assert lines[1] == "qdisc add dev d parent 1:1 handle 10: netem delay 5ms 1ms loss 0.5%"


def test_netem_alone_sits_at_root():
    assert Shaping(delay_ms=10).tc_batch("d") == ["qdisc add dev d root handle 10: netem delay 10ms"]


@pytest.mark.parametrize("kwargs, message", [
    ({"qdisc": "fq"}, "qdisc"), ({"loss_pct": 120}, "loss"), ({"jitter_ms": 1}, "jitter needs"),
    ({"overhead": -1}, "overhead"),
])
def test_bad_shaping(kwargs, message):
    with pytest.raises(InputError, match=message):
        Shaping(**kwargs)


def test_theoretical_frame_rates_match_rfc2544_tables():
    assert round(frame_rate(100e6, 64)) == 148_810
    assert round(frame_rate(100e6, 1518)) == 8_127
    assert round(frame_rate(1e9, 64)) == 1_488_095


def test_format_rate():
    assert format_rate(954.2e6) == "954.2 Mbit/s" and format_rate(1.97e9) == "2.0 Gbit/s"
