"""RFC 2544 logic, the generator on loopback (no root), and the report from a captured run."""
import json
import os
import shutil
import subprocess

import pytest

from nslab.errors import InputError
from nslab.experiments.rfc2544 import (PAPER_FPS, Rfc2544Config, busy_pct, pktgen_path,
                                       theory_table)
from nslab.experiments.rfc2544_report import back_to_back_rows, table3, write_report
from nslab.published import load_published
from nslab.results import ResultStore
from nslab.topologies.rfc2544 import dut_chain, roles
from tests.conftest import data


def test_theory_table_matches_rfc2544():
    rows = {s: fps for s, fps, _ in theory_table(100e6, [64, 1518])}
    assert round(rows[64]) == 148_810 and round(rows[1518]) == 8_127


@pytest.mark.parametrize("kwargs, message", [
    ({"frame_sizes": [63]}, "under Ethernet's minimum"),
    ({"frame_sizes": [1519]}, "over what an MTU of 1500"),
    ({"duts": ["switch9"]}, "unknown DUT 'switch9'"),
    ({"tests": ["speed"]}, "unknown test"),
    ({"link_rate": "10 parsecs"}, "bad rate"),
    ({"trial": 0.1}, "too short"),
    ({"resolution": 0}, "resolution"),
    ({"dut_cost": -1}, "--dut-cost"),
    ({"tests": []}, "empty list"),
    ({"tests": ["back-to-back"], "b2b_repeat": 0}, "--b2b-repeat"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(InputError, match=message):
        Rfc2544Config(**kwargs).validate()


def test_topologies_for_each_dut():
    b = dut_chain("bridge")
    assert b.nodes["dut"].is_switch and b.switch_type_of("dut") == "bridge"
    assert b.links[0].shaping.overhead == 24 and b.links[0].shaping.rate == 100_000_000
    r = dut_chain("router")
    assert r.nodes["dut"].kind == "router"
    assert str(r.addresses()[("dut", "dut-eth1")]) == "192.168.2.1/24"
    assert roles("router") == ("192.168.2.10", "dut-eth0")
    with pytest.raises(InputError):
        dut_chain("hub")


def test_busy_pct():
    assert busy_pct([(0, 0), (10, 100)], [(0, 0), (60, 200)], 1) == 50.0


def test_published_table3_is_stored_as_data():
    t3 = load_published("rfc2544")["table3_bridge_overload_64B"]
    assert [r[0] for r in t3["rows"]] == PAPER_FPS
    assert t3["rows"][-2][2] == 22987


def test_generator_and_sink_on_loopback_without_root():
    try:
        pg = pktgen_path()
    except Exception:
        pytest.skip("nslab-pktgen not built (make setup)")
    port = 20000 + os.getpid() % 20000
    sink = subprocess.Popen([pg, "recv", "--port", str(port), "--duration", "2.5", "--warmup", "0.2"],
                            stdout=subprocess.PIPE, text=True)
    assert "ready" in sink.stdout.readline()
    gen = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--port", str(port), "--size", "64",
                          "--rate", "5000", "--duration", "1"], capture_output=True, text=True,
                         timeout=10)
    g = json.loads(gen.stdout)
    s = json.loads(sink.communicate(timeout=10)[0].strip().splitlines()[-1])
    assert 4500 <= g["sent"] <= 5100 and g["batch"] == 1  # paced, one frame per send at 5 kfps
    assert s["received"] == g["sent"]
    assert 0 < s["latency_us"]["min"] <= s["latency_us"]["avg"] < 10_000


def test_generator_rejects_a_runt_frame():
    try:
        pg = pktgen_path()
    except Exception:
        pytest.skip("nslab-pktgen not built (make setup)")
    res = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--size", "40", "--rate", "1",
                          "--duration", "0.1"], capture_output=True, text=True)
    assert res.returncode == 2 and "bad frame size" in res.stderr


def test_report_from_a_captured_run(tmp_path):
    run = tmp_path / "rfc2544" / "nlb9f9"
    shutil.copytree(data("rfc2544_run"), run)
    paths = write_report(str(run))
    text = open(paths["report"]).read()
    assert "Table 3 format: bridge" in text and "Published: the paper's Table 3" in text
    assert "| 66,667 | 34,133,333 | 22,987 | 25,000,000 | N/A |" in text
    rows = table3(ResultStore.open(str(run)).records(), "bridge")
    assert rows[0]["fps"] == 1000 and rows[-1]["fps"] == 100000
    # The captured run saturated the DUT at the top load: latency far above the bottom.
    assert rows[-1]["latency_us"] > 100 * rows[0]["latency_us"]
    assert os.path.getsize(paths["plot_png"]) > 0


def test_back_to_back_is_a_known_but_opt_in_test():
    assert "back-to-back" not in Rfc2544Config().tests
    assert Rfc2544Config(tests=["throughput", "back-to-back"]).validate()


def test_generator_sends_an_exact_burst_with_count():
    try:
        pg = pktgen_path()
    except Exception:
        pytest.skip("nslab-pktgen not built (make setup)")
    port = 20000 + (os.getpid() + 7) % 20000
    sink = subprocess.Popen([pg, "recv", "--port", str(port), "--duration", "2"],
                            stdout=subprocess.PIPE, text=True)
    assert "ready" in sink.stdout.readline()
    gen = subprocess.run([pg, "send", "--dst", "127.0.0.1", "--port", str(port), "--size", "64",
                          "--rate", "100000", "--count", "1234", "--duration", "5"],
                         capture_output=True, text=True, timeout=10)
    g = json.loads(gen.stdout)
    s = json.loads(sink.communicate(timeout=10)[0].strip().splitlines()[-1])
    assert g["sent"] == 1234 and g["count"] == 1234 and g["errors"] == 0
    assert g["elapsed"] < 1.0  # stopped at the count, not at --duration
    assert s["received"] == 1234 and s["max_seq"] == 1233


def test_back_to_back_report_from_a_captured_run(tmp_path):
    run = tmp_path / "rfc2544" / "nlbdce"
    shutil.copytree(data("rfc2544_b2b_run"), run)
    text = open(write_report(str(run))["report"]).read()
    assert "## Back-to-back" in text
    recs = ResultStore.open(str(run)).records()
    rows = {(x["dut"], x["frame"]): x for x in back_to_back_rows(recs)}
    assert set(rows) == {("bridge", 64), ("bridge", 1518), ("router", 64), ("router", 1518)}
    # 1518 bytes: the DUT kept up for the whole trial, so there is no limit to predict.
    assert rows[("bridge", 1518)]["whole_trial"] and rows[("bridge", 1518)]["predicted"] is None
    assert "all 4,064 tried" in text
    # 64 bytes: the prediction is the input queue over the rate it fills at.
    tp = next(r["measurements"] for r in recs
              if r["params"] == {"dut": "bridge", "frame": 64, "repeat": 0, "test": "throughput"})
    b2b = next(r["measurements"] for r in recs
               if r["params"] == {"dut": "bridge", "frame": 64, "repeat": 0, "test": "back-to-back"})
    want = b2b["backlog_limit"] / (1 - tp["throughput_fps"] / tp["line_fps"])
    assert rows[("bridge", 64)]["predicted"] == pytest.approx(want)
    assert f"| bridge | 64 | {b2b['frames_mean']:,.0f} |" in text
    # The captured search: the reported burst was clean, every longer one lost frames.
    probes = b2b["searches"][0]["probes"]
    best = b2b["frames_mean"]
    assert any(p["frames_requested"] == best and p["lost"] == 0 for p in probes)
    assert all(p["lost"] > 0 for p in probes if p["frames_requested"] > best)
    assert "back-to-back, bridge at 64 bytes" in text
