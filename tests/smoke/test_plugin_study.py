"""A fourth study is one folder plus one entry point line: a throwaway plugin from
tests/plugins is registered (a dist-info with one entry_points.txt line, nothing
else), then run through `nslab run` and `nslab reproduce --only`."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.path.join(os.path.dirname(HERE), "plugins")
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


@pytest.fixture
def tiny_registered(tmp_path):
    dist = tmp_path / "site" / "nslab_tiny-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nslab-tiny\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nslab.studies]\ntiny = nslab_tiny.study:TinyStudy\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), PLUGINS]))
    return env


def test_a_plugin_study_runs_through_run_and_reproduce(tmp_path, tiny_registered):
    env = tiny_registered
    listed = subprocess.run([NSLAB, "run", "--list"], capture_output=True, text=True, env=env)
    assert "tiny" in listed.stdout and "Tiny: ping over a veth" in listed.stdout
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "r"), "run", "tiny", "--quick",
                          "--set", "repeat=3"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "A veth round trip takes under a millisecond" in res.stdout
    (run_dir,) = (tmp_path / "r" / "tiny").iterdir()
    recs = [json.loads(l) for l in open(run_dir / "records.jsonl")]
    assert [r["params"]["repeat"] for r in recs] == [0, 1, 2]
    assert all(0 < r["measurements"]["rtt_ms"] < 50 for r in recs)
    prov = json.load(open(run_dir / "provenance.json"))
    # the plugin's own fields, then what every study's configuration has (one
    # sampling round, the host-interference defaults)
    assert prov["config"] == {"pings": 2, "repeat": 3, "rounds": 1, "budget_s": None,
                              "host_pct": 10.0, "host_reruns": 1}
    assert prov["setups"]["pair"]["peer"]
    # what a busy host took (0 on a quiet one): a CI machine may be busy
    took = prov["sampling"].pop("host_took_s")
    assert isinstance(took, float) and took >= 0.0
    assert prov["sampling"] == {"rounds": 1, "budget_s": None, "rounds_run": 1,
                                "stopped": "one round"}
    rep = subprocess.run([NSLAB, "--results", str(tmp_path / "q"), "reproduce", "--quick",
                          "--only", "tiny"], capture_output=True, text=True, env=env, timeout=120)
    assert rep.returncode == 0, rep.stderr
    report = open(rep.stdout.split("report: ", 1)[1].split()[0][:-5] + ".md").read()
    assert "## Tiny: ping over a veth (tests/plugins)" in report
    assert "Study 1: IP aliases" in report and "Not run." in report  # the others are listed


@pytest.mark.versioned  # importlib.metadata (Python 3.11 vs 3.13)
def test_a_plugin_that_fails_to_import_is_reported_not_skipped(tmp_path):
    dist = tmp_path / "site" / "broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nslab.studies]\nbroken = nslab_nosuch.study:X\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    res = subprocess.run([NSLAB, "run", "--list"], capture_output=True, text=True, env=env)
    assert res.returncode == 1
    assert "nslab.studies plugin 'broken' (nslab_nosuch.study:X) failed to load" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
