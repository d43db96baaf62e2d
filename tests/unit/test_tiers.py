"""scripts/tiers.py: the CI table's CPU column, over a CPU log and records
written the way scripts/ci.py writes them."""
import importlib.util
import os
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def tiers(tmp_path, monkeypatch):
    monkeypatch.setenv("NSLAB_TIERS", str(tmp_path))
    spec = importlib.util.spec_from_file_location("tiers", os.path.join(ROOT, "scripts",
                                                                         "tiers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_each_part_shows_the_machines_cpu_use_over_its_own_interval(tiers, tmp_path):
    t0 = 1_800_000_000.0
    rows = [(t0 + 5 * i, 1.0 if i <= 4 else 0.5, 0.1) for i in range(1, 9)]
    (tmp_path / "cpu.tsv").write_text("time\tbusy\tsteal\n" + "".join(
        f"{t:.1f}\t{b:.3f}\t{s:.3f}\n" for t, b, s in rows))
    tiers.record("first", 20.0, 0, None, t0)  # lines at +5..+20: busy 1.0
    tiers.record("second", 20.0, 1, None, t0 + 20)  # +25..+40: 0.5
    assert tiers.cpu_use(t0, t0 + 20) == pytest.approx((1.0, 0.1))
    assert tiers.cpu_use(t0 + 20, t0 + 40) == pytest.approx((0.5, 0.1))
    assert tiers.cpu_use(t0 + 100, t0 + 200) is None
    table = tiers.summary()
    first = next(line for line in table if line.startswith("first"))
    second = next(line for line in table if line.startswith("second"))
    wall = next(line for line in table if line.startswith("wall"))
    assert first.split()[-1] == "100%" and second.split()[-1] == "50%", table
    assert second.split()[1:3] == ["exit", "1"]
    assert wall.split()[-2:] == ["0.7", "75%"], table
    assert "stole 10% over the run" in table[-1]


@pytest.mark.timed
def test_the_log_measures_a_busy_thread(tiers, tmp_path):
    log = tiers.CpuLog(every=0.1)
    log.start()
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        pass
    log.stop()
    lines = (tmp_path / "cpu.tsv").read_text().splitlines()
    assert lines[0] == "time\tbusy\tsteal" and len(lines) >= 4, lines
    busy = [float(line.split("\t")[1]) for line in lines[1:]]
    # this thread alone keeps one CPU busy: at least that share of the machine
    assert min(busy) >= 0.9 / (os.cpu_count() or 1), busy
    assert tiers.reset() is None and not (tmp_path / "cpu.tsv").exists()


def test_the_table_names_each_test_run_again_on_a_disturbed_bed(tiers, tmp_path):
    """The ``steal`` property nslab.runtime.testing writes: a test that ran
    again is listed after the slowest tests, with its outcome."""
    junit = tmp_path / "quiet.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_lab" name="test_framed" time="30.0">'
        '<properties><property name="steal" value="run 1: the hypervisor stole 27 % of the '
        'CPUs in the worst 1 s (9.0 % over the whole): failed on a disturbed bed, run again; '
        'run 2: the hypervisor stole 1 % of the CPUs in the worst 1 s (0.5 % over the whole)"/>'
        '</properties></testcase>'
        '<testcase classname="tests.integration.test_lab" name="test_calm" time="3.0">'
        '<properties><property name="steal" value="run 1: the hypervisor stole 0 % of the '
        'CPUs in the worst 1 s (0.0 % over the whole)"/></properties></testcase>'
        '</testsuite></testsuites>')
    tiers.record("host: quiet", 33.0, 0, str(junit), 1_800_000_000.0)
    table = tiers.summary()
    at = table.index("run again after failing while the hypervisor stole CPU time "
                     "(the last run decides):")
    assert table[at + 1:] == [
        "  host: quiet        tests/integration/test_lab.py::test_framed: passed; run 1: the "
        "hypervisor stole 27 % of the CPUs in the worst 1 s (9.0 % over the whole): failed on a "
        "disturbed bed, run again; run 2: the hypervisor stole 1 % of the CPUs in the worst 1 s "
        "(0.5 % over the whole)"], table
