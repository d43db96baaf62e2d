"""A run's report is rendered once: ``run_study`` stores what was measured
(between sampling rounds it judges the claims without writing or drawing
anything), and ``nslab run`` or ``nslab reproduce`` renders the report from
the stored files, once. ``nslab report DIR`` renders it again on demand.

The run replays a stored alias run (``tests/data/alias_run``): a lab that
builds nothing, a runner that answers each point with its stored
measurements, the real report (Markdown, HTML, matplotlib). No root. Before,
``nslab run`` rendered a run's report twice (in ``run_study`` and again in
the command), plus once per extra sampling round."""
import json
import os
import types

import pytest

from nslab.cmdline import cliutil, reproduce, runcli
from nslab.experiments.alias import report as alias_report
from nslab.experiments.alias.records import SCHEMA
from nslab.experiments.alias.study import AliasStudy
from nslab.runtime import lab as lab_module
from nslab.store import reporting

STORED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                      "alias_run")


def stored_points():
    """The stored run's points, upgraded to the schema a run writes today."""
    return [{"params": r.params.model_dump(mode="json"),
             "measurements": r.measurements.model_dump(mode="json")} for r in SCHEMA.load(STORED)]


class NoLab:
    """A lab that builds nothing (the replayed points need none)."""

    remote, datapath, build_seconds = False, None, 0.0

    def __init__(self, topology, run_id="nl0000", host_grants=None):
        self.topology, self.run_id = topology, run_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def __iter__(self):
        return iter(())


class Replay:
    """Each point's stored measurements, in turn."""

    def __init__(self):
        self.by_key = {json.dumps(r["params"], sort_keys=True): r["measurements"]
                       for r in stored_points()}

    def setup(self):
        return {}

    def measure(self, point):
        return self.by_key[json.dumps(point, sort_keys=True)], [], "replayed"

    def finish(self):
        pass


class ReplayedAlias(AliasStudy):
    """The alias study, its points those of the stored run, measured by replay."""

    def needs(self, cfg):
        return []

    def points(self, cfg):
        return [r["params"] for r in stored_points()]

    def runner(self, key, lab, cfg, store):
        return Replay()


@pytest.fixture
def renders(monkeypatch):
    """Counts, per run directory, the reports written (report.md/.html) and the
    plots drawn; commands' logging and signal handlers left alone."""
    seen = {"written": [], "plots": 0}
    real_write, real_plot = reporting.write_markdown_and_html, alias_report.plot

    def write(run_dir, stem, *a, **k):
        seen["written"].append(os.path.realpath(run_dir))
        return real_write(run_dir, stem, *a, **k)

    def plot(*a, **k):
        seen["plots"] += 1
        return real_plot(*a, **k)
    monkeypatch.setattr(reporting, "write_markdown_and_html", write)
    monkeypatch.setattr(alias_report, "plot", plot)
    monkeypatch.setattr(lab_module, "Lab", NoLab)
    monkeypatch.setattr(cliutil, "setup_logging", lambda *a, **k: None)
    monkeypatch.setattr(cliutil, "install_signals", lambda *a, **k: None)
    return seen


def test_nslab_run_renders_the_report_once(tmp_path, renders, capsys):
    ctx = types.SimpleNamespace(obj=cliutil.Ctx(str(tmp_path), 0))
    # "quick": three sampling rounds, so the claims are judged between rounds too
    runcli.run_study_command(ctx, ReplayedAlias, "quick", {"host_reruns": 0}, None, None)
    (run_dir,) = [os.path.join(tmp_path, "alias", d) for d in os.listdir(tmp_path / "alias")]
    prov = json.load(open(os.path.join(run_dir, "provenance.json")))
    assert prov["sampling"]["rounds_run"] > 1  # judged between rounds, rendered at the end
    assert renders["written"] == [os.path.realpath(run_dir)]
    assert renders["plots"] == 1
    assert os.path.exists(os.path.join(run_dir, "report.html"))
    assert os.path.exists(os.path.join(run_dir, "alias.png"))
    out = capsys.readouterr().out
    assert f"results: {run_dir}" in out and "report: " in out
    # `nslab report DIR` renders it again, on demand
    from click.testing import CliRunner
    res = CliRunner().invoke(runcli.report, [run_dir], obj=cliutil.Ctx(str(tmp_path), 0))
    assert res.exit_code == 0, res.output
    assert renders["written"] == [os.path.realpath(run_dir)] * 2 and renders["plots"] == 2


def test_nslab_reproduce_renders_each_study_once_and_the_combined_report_once(
        tmp_path, renders, monkeypatch):
    monkeypatch.setattr(reproduce, "ordered_studies", lambda: {"alias": ReplayedAlias})
    html = reproduce.reproduce("quick", str(tmp_path), echo=lambda m: None)
    root = os.path.dirname(html)
    (run_dir,) = [os.path.join(root, "alias", d) for d in os.listdir(os.path.join(root, "alias"))]
    assert sorted(renders["written"]) == sorted([os.path.realpath(run_dir), os.path.realpath(root)])
    assert renders["plots"] == 1


@pytest.mark.parametrize("name", ["ecmp_run", "failover_run"])
def test_claims_judged_between_rounds_are_the_reports_and_nothing_is_written(tmp_path, name):
    import shutil

    from nslab.cmdline.runcli import study_of_run
    from nslab.run.study import report_of
    run_dir = str(tmp_path / name)
    shutil.copytree(os.path.join(os.path.dirname(STORED), name), run_dir)
    cls = study_of_run(run_dir, None)
    before = sorted(os.listdir(run_dir))
    with reporting.claims_only():
        judged = report_of(cls(), run_dir)
    assert sorted(os.listdir(run_dir)) == before and judged.files == {} and not judged.figures
    rendered = report_of(cls(), run_dir)
    assert judged.claims == rendered.claims and judged.claims
    assert "report.html" in os.listdir(run_dir)


def test_reproduce_runs_cpu_bound_studies_first_then_starts_the_guest_beside_the_rest(tmp_path):
    """The alias study (its figures depend on the host's CPU) runs alone; the
    RFC 2544 virtual bed's guest starts next and runs beside ECMP and the
    failover study, whose figures a guest taking only idle CPU time cannot
    move (a hash, timers); the report keeps the reading order."""
    from nslab.cmdline.reproduce import ordered_studies, run_order
    registered = ordered_studies()
    names = list(registered)
    order = run_order(registered, names, "quick", str(tmp_path))
    assert [(name, elsewhere) for name, _, _, _, elsewhere in order] == [
        ("alias", False), ("rfc2544", True), ("ecmp", False), ("ecmp-failover", False)]
    assert names == ["alias", "ecmp", "rfc2544", "ecmp-failover"]
    real = run_order(registered, ["rfc2544", "ecmp"], "quick", str(tmp_path))
    assert [name for name, *_ in real] == ["rfc2544", "ecmp"]


def test_the_study_beside_runs_idle_and_ends_with_its_parent():
    """The RFC 2544 study started beside the others runs at SCHED_IDLE (so no
    host study counts its threads, nor waits for them) and gets SIGINT when
    the reproduction's process dies: checked in a real child."""
    import signal
    import subprocess
    import sys

    from nslab.cmdline.reproduce import _beside_child
    parent = os.getpid()
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import ctypes, os; sig = ctypes.c_int(); "
         "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); "
         "print(os.sched_getscheduler(0), sig.value)"],
        preexec_fn=lambda: _beside_child(parent), capture_output=True,
        text=True, check=True).stdout.split()
    assert out == [str(os.SCHED_IDLE), str(int(signal.SIGINT))]
    # a parent gone before the death signal was asked for: the child does not run
    gone = subprocess.run([sys.executable, "-I", "-S", "-c", "print('ran')"],
                          preexec_fn=lambda: _beside_child(parent + 1), capture_output=True,
                          text=True)
    assert gone.returncode == 1 and "ran" not in gone.stdout
