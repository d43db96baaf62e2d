"""Device nodes in a lab folder (issue 51), as a tarball unpacked by root
leaves them: never opened, never read. Before, a root-owned run directory
whose records.jsonl was a character device (`mknod c 1 5`: /dev/zero's)
passed the ownership check and was read to MemoryError, and the copy of a
foreign folder opened a planted device before leaving it out (a
/dev/watchdog node would have armed the watchdog). Root: making a device
node needs it. Scratch folders only; nothing is built."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

import pytest

from nslab import safeio
from nslab.store.results import ResultStore

pytestmark = pytest.mark.root

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
PEAK_MIB = 400
ZERO = os.makedev(1, 5)  # /dev/zero's numbers: endless bytes if ever read


def nslab(args, cwd, timeout=60):
    """``(exit code, stdout, stderr, peak resident MiB)``; failed if it runs
    past ``timeout`` s."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([NSLAB, *args], cwd=cwd, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode == -9:
        pytest.fail(f"nslab {' '.join(args)} still ran after {timeout} s")
    return p.returncode, stdout, stderr, usage.ru_maxrss / 1024


def one_line(rc, err):
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture
def run(tmp_path):
    """A root-owned run directory whose records.jsonl is a character device."""
    path = tmp_path / "run"
    shutil.copytree(os.path.join(DATA, "alias_run"), path)
    os.unlink(path / "records.jsonl")
    os.mknod(path / "records.jsonl", 0o644 | stat.S_IFCHR, ZERO)
    return path


def test_report_leaves_a_device_records_file_unread(run):
    assert "records.jsonl is a character device" in safeio.tree_is_safe(str(run))
    rc, out, err, peak = nslab(["report", str(run)], cwd=run.parent)
    assert peak < PEAK_MIB, f"peaked at {peak:.0f} MiB: the device was read"
    assert "records.jsonl is a character device" in out  # so the report went to a copy
    assert "left out: records.jsonl" in out


def test_export_refuses_a_device_records_file_in_one_line(run):
    rc, _, err, peak = nslab(["export", str(run), "-o", "out"], cwd=run.parent)
    assert "records.jsonl: a link or not a regular file" in one_line(rc, err)
    assert peak < PEAK_MIB


def test_resume_refuses_a_folder_with_a_device_before_reading_it(run, tmp_path):
    rc, _, err, peak = nslab(["run", "alias", "--resume", str(run)], cwd=tmp_path)
    assert "not a run directory of nslab's own" in one_line(rc, err)
    rep = tmp_path / "results" / "reproduce" / "20260101-000000"
    rep.mkdir(parents=True)
    os.mknod(rep / "mode", 0o644 | stat.S_IFCHR, ZERO)
    rc, _, err, peak = nslab(["reproduce", "--resume", str(rep)], cwd=tmp_path)
    err = one_line(rc, err)
    assert "not a reproduction directory of nslab's own" in err and "mode is a character" in err
    assert peak < PEAK_MIB


def test_a_device_is_neither_read_nor_appended_to(run, tmp_path):
    dev = str(run / "records.jsonl")
    for act in (lambda: safeio.read_bytes(dev, 100), lambda: safeio.open_append(dev),
                lambda: list(safeio.read_lines(dev, 100, 10))):
        with pytest.raises(safeio.UnsafePathError, match="character device"):
            act()
    store = ResultStore.open(str(run))
    with pytest.raises(safeio.UnsafePathError, match="character device"):
        store.append({"n": 1}, {})
    # and the copy of a foreign folder leaves it out, as every planted node
    out = safeio.make_fresh_dir(str(tmp_path / "copy"))
    os.mknod(run / "watchdog", 0o600 | stat.S_IFCHR, ZERO)
    assert sorted(safeio.copy_tree(str(run), out)) == ["records.jsonl", "watchdog"]
