"""A reproduction interrupted and resumed: no point measured twice, none lost."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nslab.experiments.ecmp.config import EcmpConfig
from nslab.runtime.testing import needs

pytestmark = [pytest.mark.root, pytest.mark.slow]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def records(path):
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []


# Runs once, in the host tier (not versioned): nslab's journal and resume; the ECMP study runs in test_ecmp_smoke
@needs("frr")
def test_reproduce_interrupted_and_resumed(tmp_path):
    p = subprocess.Popen([NSLAB, "--results", str(tmp_path), "reproduce", "--quick", "--only",
                          "ecmp"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    rec_path = None
    while time.time() < deadline:
        for dirpath, _, files in os.walk(tmp_path):
            if "records.jsonl" in files:
                rec_path = os.path.join(dirpath, "records.jsonl")
        if rec_path and len(records(rec_path)) >= 2:
            break
        time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    kept = records(rec_path)
    assert 2 <= len(kept) < 6
    root = os.path.dirname(os.path.dirname(os.path.dirname(rec_path)))
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "reproduce", "--only", "ecmp",
                          "--resume", root], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    done = [(r["params"]["policy"], r["params"]["trial"]) for r in records(rec_path)]
    # the quick preset samples to a decision: as many rounds of its trials as it took
    with open(os.path.join(os.path.dirname(rec_path), "provenance.json")) as f:
        rounds = json.load(f)["sampling"]["rounds_run"]
    trials = EcmpConfig.preset("quick").trials * rounds
    assert sorted(done) == sorted({(p, t) for p in (0, 1) for t in range(trials)})  # none twice, none lost
    assert os.path.exists(os.path.join(root, "report.html"))
    # The report is redrawn from files alone.
    res = subprocess.run([NSLAB, "report", root], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "report.html" in res.stdout
