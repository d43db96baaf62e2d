"""A test that measures on this host (marked ``quiet`` or ``root``, not
``vm``) and fails while the hypervisor steals CPU time is run again (``nslab.runtime.testing``): real pytest runs, with the steal of
``/proc/stat`` replaced by one the test sets."""
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest


from nslab.runtime import testing

CONFTEST = """
import os, time
import nslab.runtime.proc as proc
from nslab.runtime import testing

testing.STEAL_SAMPLE_S = 0.05
HERE = os.path.dirname(os.path.abspath(__file__))
_state = {"t": time.monotonic(), "ns": 0}


def _steal():
    # the share of all CPUs the test last wrote, stolen since the last read
    try:
        with open(os.path.join(HERE, "share")) as f:
            share = float(f.read())
    except OSError:
        share = 0.0
    now = time.monotonic()
    _state["ns"] += int((now - _state["t"]) * 1e9 * (os.cpu_count() or 1) * share / 100)
    _state["t"] = now
    return _state["ns"]


proc.read_steal_ns = _steal
"""


def _run(tmp_path, body):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(textwrap.dedent("""
        import os, time
        import pytest

        HERE = os.path.dirname(os.path.abspath(__file__))

        def attempt():
            path = os.path.join(HERE, "attempts")
            n = int(open(path).read()) + 1 if os.path.exists(path) else 1
            with open(path, "w") as f:
                f.write(str(n))
            return n

        def steal(share):
            with open(os.path.join(HERE, "share"), "w") as f:
                f.write(str(share))
            time.sleep(0.3)
    """) + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nslab.runtime.testing",
                          "-p", "no:cacheprovider", "-p", "no:xdist", "--strict-markers",
                          f"--junitxml={tmp_path / 'junit.xml'}", "test_it.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    attempts = int((tmp_path / "attempts").read_text())
    props = [p.get("value") for p in ET.parse(tmp_path / "junit.xml").getroot().iter("property")
             if p.get("name") == "steal"]
    return run, attempts, props


def test_a_failure_under_steal_runs_again_and_the_clean_run_counts(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            if attempt() == 1:
                steal(30)
                assert False, "a rate the stolen CPU held down"
            steal(0)
    """)
    assert run.returncode == 0 and attempts == 2, run.stdout
    assert "failed on a disturbed bed, run again" in run.stdout, run.stdout
    (said,) = props
    first, second = said.split("; ")
    assert first.startswith("run 1: the hypervisor stole") and first.endswith("run again"), said
    assert float(first.split("stole ")[1].split(" %")[0]) >= 20, said  # ~30 % in its worst period
    assert second.startswith("run 2: the hypervisor stole 0 %"), said


def test_a_failure_without_steal_stands_at_once(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            attempt()
            steal(0)
            assert False, "a real regression"
    """)
    assert run.returncode == 1 and attempts == 1, run.stdout
    assert "a real regression" in run.stdout and "run again" not in run.stdout, run.stdout
    assert props == ["run 1: the hypervisor stole 0 % of the CPUs in the worst 0.05 s "
                     "(0.0 % over the whole)"], props


def test_a_bed_disturbed_every_time_fails_after_the_last_run(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.quiet
        def test_rate():
            attempt()
            steal(30)
            assert False, "held down every time"
    """)
    assert run.returncode == 1 and attempts == 1 + testing.STEAL_RERUNS, run.stdout
    assert "held down every time" in run.stdout, run.stdout
    assert "quiet: runs on a disturbed bed" in run.stdout, run.stdout  # the failure's sections
    assert run.stdout.count("failed on a disturbed bed, run again") >= testing.STEAL_RERUNS


@pytest.mark.parametrize("marks", [(), ("quiet", "vm")])
def test_a_test_that_does_not_measure_here_is_run_once_whatever_the_steal(tmp_path, marks):
    """Unmarked (a unit test) or starting guests (``vm``: minutes each)."""
    run, attempts, props = _run(tmp_path, "\n" + "".join(f"@pytest.mark.{m}\n" for m in marks) + """
def test_rate():
    attempt()
    steal(30)
    assert False, "not watched"
""")
    assert run.returncode == 1 and attempts == 1 and props == [], run.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="a test marked root skips without root")
def test_a_root_test_is_watched_as_a_quiet_one(tmp_path):
    run, attempts, props = _run(tmp_path, """
        @pytest.mark.root
        def test_rate():
            if attempt() == 1:
                steal(30)
                assert False, "a rate the stolen CPU held down"
            steal(0)
    """)
    assert run.returncode == 0 and attempts == 2 and len(props) == 1, run.stdout


def test_the_watch_says_not_known_where_the_kernel_has_no_steal():
    with testing.StealWatch(every=0.01, read=lambda: None) as w:
        pass
    assert (w.peak, w.total) == (None, None) and w.says() == "steal not known"
