"""RFC 2544 logic, the generator on loopback (no root), and the report from a captured run."""
import json
import os
import shutil
import subprocess

import pytest

from nslab.errors import InputError
from nslab.experiments.rfc2544 import (PAPER_FPS, Rfc2544Config, busy_pct, pktgen_path,
                                       theory_table)
from nslab.experiments.rfc2544_report import table3, write_report
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
    assert r.addresses()[("dut", "dut-eth1")] == "192.168.2.1/24"
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
