"""`nslab bench generator` end to end on this kernel: the live path measured
beside UDP, the XDP sink's ceiling from its CPU time with the share it took,
frames spaced in the kernel in the pacing table, one line per header, and the
lab gone afterwards."""
import glob
import json
import os
import subprocess
import sys

import pytest

from nslab.runtime.testing import left_behind

# quiet: pacing and rates to the frame (make test runs these with nothing else)
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.quiet]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def test_bench_generator_prints_and_saves_the_sink_ceiling_and_spaced_pacing(tmp_path):
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "bench", "generator", "--sizes", "64",
                          "--modes", "udp,live", "--seconds", "0.5", "--repeat", "1"],
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, COLUMNS="120"))
    assert res.returncode == 0, res.stdout + res.stderr
    (saved,) = glob.glob(str(tmp_path / "bench" / "generator-*.json"))
    out = json.load(open(saved))
    (row,) = out["rows"]
    assert out["sink_napi_thread_on_other_cpu"] is True
    # The XDP sink at the live path's maximum: its CPU time was measured, so its
    # ceiling is frames per busy second, and its share of the frames is printed.
    (run,) = row["sink_runs"]
    assert run["napi_cpu_s"] > 0 and run["received"] > 0
    assert row["sink_ceiling_pps"] == pytest.approx(run["received"] / run["napi_cpu_s"])
    assert 0 < row["sink_taken_pct"] <= 100
    ratio = row["sink_ceiling_pps"] / row["live_pps"]
    assert f"{ratio:.2f}x" in res.stdout, res.stdout
    # Every header on one line, whatever the terminal (COLUMNS=120 here).
    for header in ("sink took (CPU)", "best / 1G line", "1 Gbit/s line"):
        assert header in res.stdout, res.stdout
    spaced = [p for p in out["pacing"] if p["spacing"] == "frames"]
    assert spaced and all(p["path"] == "live-spaced" and p["mode"] == "live" for p in spaced)
    assert "live (frames spaced)" in res.stdout
    assert {p["target_pps"] for p in spaced} <= {p["target_pps"] for p in out["pacing"]
                                                 if p["mode"] == "live" and p["spacing"] == "slots"}
    assert not left_behind()  # nothing of the bench's lab is left
