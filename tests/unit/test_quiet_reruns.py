"""A test marked ``quiet`` that fails while the hypervisor steals CPU time is
run again (``nslab.runtime.testing``): real pytest runs, with the steal of
``/proc/stat`` replaced by a counter the test itself advances."""
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from nslab.runtime import testing

CONFTEST = """
import os
import nslab.runtime.proc as proc
from nslab.runtime import testing

testing.STEAL_SAMPLE_S = 0.05
testing.missing = lambda names: []  # a test marked root runs without root too
HERE = os.path.dirname(os.path.abspath(__file__))


def _steal():
    # what the test said was stolen so far (ns, all CPUs together)
    try:
        with open(os.path.join(HERE, "stolen_ns")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


proc.read_steal_ns = _steal
"""

HELPERS = """
import os, time
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

def attempt():
    path = os.path.join(HERE, "attempts")
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(n))
    return n

def steal():
    # 10 CPU-seconds per CPU: whatever window holds it reads far over 5 %,
    # however slowly this machine runs the test
    path = os.path.join(HERE, "stolen_ns")
    ns = int(open(path).read()) if os.path.exists(path) else 0
    with open(path + ".new", "w") as f:
        f.write(str(ns + 10 * 10**9 * (os.cpu_count() or 1)))
    os.replace(path + ".new", path)  # the watch reads it meanwhile
"""


def _run(tmp_path, body, *args):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(HELPERS + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nslab.runtime.testing",
                          "-p", "no:cacheprovider", "-p", "no:xdist", "--strict-markers", "--color=no",
                          f"--junitxml={tmp_path / 'junit.xml'}", *args, "test_it.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    attempts = int((tmp_path / "attempts").read_text()) if (tmp_path / "attempts").exists() else 0
    props = [p.get("value") for p in ET.parse(tmp_path / "junit.xml").getroot().iter("property")
             if p.get("name") == "steal"]
    return run, attempts, props


def _said_again(out):
    return [line for line in out.splitlines()
            if line.startswith("test_it.py::test_rate: run ") and line.endswith("run again")]


def test_a_failure_under_steal_runs_again_and_the_clean_run_counts(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            print(f"attempt {attempt()}")
            if open(os.path.join(HERE, "attempts")).read() == "1":
                steal()
                assert False, "a rate the stolen CPU held down"
    """, "-rA")
    assert run.returncode == 0 and attempts == 2, run.stdout
    assert len(_said_again(run.stdout)) == 1, run.stdout
    (said,) = props
    first, second = said.split("; ")
    assert first.startswith("run 1: the hypervisor stole") and first.endswith("run again"), said
    assert float(first.split("stole ")[1].split(" %")[0]) >= testing.STEAL_RERUN_PCT, said
    assert second.startswith("run 2: the hypervisor stole 0.0 %"), said
    # each run's captured output, labelled with its run
    assert "Captured stdout call (run 1)" in run.stdout and "attempt 1" in run.stdout, run.stdout


def test_a_failure_without_steal_stands_at_once(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            attempt()
            assert False, "a real regression"
    """)
    assert run.returncode == 1 and attempts == 1, run.stdout
    assert "a real regression" in run.stdout and not _said_again(run.stdout), run.stdout
    assert props == ["run 1: the hypervisor stole 0.0 % of the CPUs in the worst 0.05 s up to "
                     "the call's end (0.0 % over the whole run)"], props


def test_a_bed_disturbed_every_time_fails_after_the_last_run(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            attempt()
            steal()
            assert False, "held down every time"
    """)
    assert run.returncode == 1 and attempts == 1 + testing.STEAL_RERUNS, run.stdout
    assert "held down every time" in run.stdout, run.stdout
    assert "quiet: runs on a disturbed bed" in run.stdout, run.stdout  # the failure's sections
    assert len(_said_again(run.stdout)) == testing.STEAL_RERUNS, run.stdout


def test_steal_only_in_the_teardown_runs_nothing_again(tmp_path):
    """The peak that decides is the one up to the call's end: the host
    taking CPU from a lab's teardown did not fail the test."""
    run, attempts, props = _run(tmp_path, """
        @pytest.fixture
        def lab():
            yield
            steal()

        @pytest.mark.quiet
        def test_rate(lab):
            attempt()
            assert False, "failed on a quiet bed"
    """)
    assert run.returncode == 1 and attempts == 1 and not _said_again(run.stdout), run.stdout
    (said,) = props  # both spans said: none to the call's end, the teardown's over the run
    assert said.startswith("run 1: the hypervisor stole 0.0 % of the CPUs in the worst 0.05 s "
                           "up to the call's end (") and not said.endswith("(0.0 % over the "
                                                                          "whole run)"), said


def test_a_failed_teardown_is_never_hidden_by_a_run_again(tmp_path):
    """A teardown that fails (a lab left behind) stands, whatever the steal."""
    run, attempts, props = _run(tmp_path, """
        @pytest.fixture
        def lab():
            yield
            assert False, "lab objects left behind"

        @pytest.mark.quiet
        def test_rate(lab):
            attempt()
            steal()
            assert False, "held down"
    """)
    assert run.returncode == 1 and attempts == 1, run.stdout
    assert "lab objects left behind" in run.stdout and not _said_again(run.stdout), run.stdout


def test_a_run_again_has_a_timeout_of_its_own(tmp_path):
    """pytest-timeout cancels its timer at a test's first failure: the run
    again that hangs is still stopped at the timeout."""
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            if attempt() == 1:
                steal()
                assert False, "held down"
            time.sleep(60)
    """, "-o", "timeout=3", "-p", "timeout")
    assert run.returncode == 1 and attempts == 2, run.stdout
    assert "Timeout" in run.stdout and len(_said_again(run.stdout)) == 1, run.stdout


@pytest.mark.parametrize("marks", [(), ("root",)])
def test_a_test_not_marked_quiet_is_run_once_whatever_the_steal(tmp_path, marks):
    """Unmarked (a unit test) or a functional lab test (``root``): an
    intermittent failure there must show."""
    run, attempts, props = _run(tmp_path, "\n" + "".join(f"@pytest.mark.{m}\n" for m in marks) + """
def test_rate():
    attempt()
    steal()
    assert False, "not watched"
""")
    assert run.returncode == 1 and attempts == 1, run.stdout
    assert props == [] and not _said_again(run.stdout), run.stdout


def test_the_watch_says_not_known_where_the_kernel_has_no_steal():
    with testing.StealWatch(every=0.01, read=lambda: None) as w:
        pass
    assert (w.peak, w.total) == (None, None) and w.says() == "steal not known"


def test_a_block_shorter_than_a_period_is_judged_over_one_period():
    """The kernel counts steal in whole ticks: one tick of 10 ms stolen in a
    block of a few ms is not a share of that block but of one period."""
    reads = iter([0, 10_000_000])
    w = testing.StealWatch(every=1.0, read=lambda: next(reads))
    w.ncpus = 1
    w._run = lambda: None  # no sample between: the block is shorter than a period
    with w:
        pass
    assert w.peak == pytest.approx(1.0)  # 10 ms of one 1 s period, one CPU
