"""Every file nslab reads from a folder is a regular file, opened without
following a link and without blocking, and read with a size bound (issue 51),
the files read before any ownership check included; and matplotlib reads
nothing from the current directory. Each test is a hole the second red-team
pass found: before, a 100 MB records.jsonl took `nslab report` and `nslab
export` to 3.57 GB, `reproduce --resume` read `mode` (a link to /dev/zero)
before its ownership check, a FIFO records.jsonl or matplotlibrc hung nslab
for good, and the copy of a foreign folder opened a planted node before
leaving it out. (Device nodes need root to make:
tests/integration/test_folder_devices.py.)"""
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from nslab import safeio
from nslab.errors import InputError
from nslab.store import records as records_mod
from nslab.store.results import copy_to_report_dir

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
#: What `nslab report` of tests/data/alias_run peaks at here is ~160 MiB.
PEAK_MIB = 400


def _hwm_mib(pid):
    """The process's peak resident size so far (VmHWM), MiB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def nslab(args, cwd, timeout=120):
    """``(exit code, stdout, stderr, peak resident MiB)`` of ``nslab args``;
    killed (and failed) after ``timeout`` s. The peak is the program's own
    (VmHWM, read every 5 ms while it runs): wait4's ru_maxrss also counts the
    pages the child shared with this process until its exec, which under
    pytest-xdist's large workers was 434 MiB whatever the command did."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([NSLAB, *args], cwd=cwd, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        peak = 0.0
        try:
            while p.poll() is None:
                hwm = _hwm_mib(p.pid)
                if hwm is not None and hwm > peak:
                    peak = hwm
                time.sleep(0.005)
        finally:
            timer.cancel()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode == -9:
        pytest.fail(f"nslab {' '.join(args)} still ran after {timeout} s: {stderr[-500:]}")
    return p.returncode, stdout, stderr, peak


def one_line(rc, err):
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture
def run(tmp_path):
    """A stored run of the alias study (nslab's own: root's, nothing writable
    by others) in a scratch folder, which is the current directory."""
    path = tmp_path / "run"
    shutil.copytree(os.path.join(DATA, "alias_run"), path)
    return path


# -- unbounded reads ---------------------------------------------------------------------
@pytest.mark.parametrize("command", [["report"], ["export", "-o", "out"]])
def test_a_huge_records_file_is_refused_in_one_line_without_reading_it(run, command):
    with open(run / "records.jsonl", "wb") as f:
        f.write(b"1\n" * 50_000_000)  # 100 MB, as the red team's
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, _, err, peak = nslab([command[0], str(run), *command[1:]], cwd=run.parent)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    err = one_line(rc, err)
    assert "records.jsonl: larger than 64 MiB" in err
    assert peak < PEAK_MIB, f"peaked at {peak:.0f} MiB"
    # the work it did (CPU time), not how long it waited for a CPU: Debian 13's
    # unit tier runs at the idle policy beside the host's labs
    assert (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime) < 60


def test_a_bad_first_line_ends_the_read_there(run):
    with open(run / "records.jsonl", "wb") as f:
        f.write(b"1\n" * 25_000_000)  # 50 MB: under the cap, every line bad
    rc, _, err, peak = nslab(["report", str(run)], cwd=run.parent)
    assert "records.jsonl:1: not a JSON record" in one_line(rc, err)
    assert peak < PEAK_MIB, f"peaked at {peak:.0f} MiB"


def test_records_are_read_one_bounded_line_at_a_time(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'{"kind": "x"}\n' + b"[" * (records_mod.MAX_LINE_BYTES + 10) + b"\n")
    with pytest.raises(InputError, match=r"records.jsonl:2: a line longer than 1 MiB"):
        list(records_mod.json_lines(str(path)))
    path.write_bytes(b'{"kind": "x"}\n\n[1,\n')  # a torn last line
    assert list(records_mod.json_lines(str(path)))[0] == (1, {"kind": "x"}, False)
    assert list(records_mod.json_lines(str(path)))[1][::2] == (3, True)
    path.write_bytes(b"")
    assert list(records_mod.json_lines(str(path))) == []
    assert list(records_mod.json_lines(str(tmp_path / "none.jsonl"))) == []


def test_resume_reads_no_file_of_the_folder_before_its_ownership_check(tmp_path):
    rep = tmp_path / "results" / "reproduce" / "20260101-000000"
    rep.mkdir(parents=True)
    os.symlink("/dev/zero", rep / "mode")
    rc, _, err, peak = nslab(["reproduce", "--resume", str(rep)], cwd=tmp_path, timeout=60)
    err = one_line(rc, err)
    assert "not a reproduction directory of nslab's own" in err and "mode is a symbolic link" in err
    assert peak < PEAK_MIB, f"peaked at {peak:.0f} MiB"


def test_a_mode_file_of_nslabs_own_is_read_with_a_bound(tmp_path):
    from nslab.cmdline.reproduce import MODE_BYTES, _saved_mode
    (tmp_path / "mode").write_text("quick\n")
    assert _saved_mode(str(tmp_path)) == "quick"
    (tmp_path / "mode").write_text("q" * (MODE_BYTES + 1))
    with pytest.raises(InputError, match="larger than"):
        _saved_mode(str(tmp_path))


# -- FIFOs: never waited on, never opened ----------------------------------------------
def test_a_fifo_records_file_does_not_hang_report_or_export(run):
    os.unlink(run / "records.jsonl")
    os.mkfifo(run / "records.jsonl")
    rc, out, err, _ = nslab(["report", str(run)], cwd=run.parent, timeout=60)
    assert rc == 0, err
    assert "records.jsonl is a FIFO, not a regular file" in out  # the report went to a copy
    rc, _, err, _ = nslab(["export", str(run), "-o", "out"], cwd=run.parent, timeout=60)
    assert "records.jsonl: a link or not a regular file" in one_line(rc, err)


def test_a_fifo_as_a_topology_or_study_file_is_refused_at_once(tmp_path):
    for name, args in (("lab.yaml", ["topo", "check"]), ("study.yaml", ["study", "check"])):
        os.mkfifo(tmp_path / name)
        rc, _, err, _ = nslab([*args, name], cwd=tmp_path, timeout=60)
        assert f"{name}: a FIFO, not a regular file" in one_line(rc, err)


class BlockedPeer:
    """A thread opening FIFO ``path`` from the other end (blocking): it is
    released only if someone opens the FIFO for ``mode``'s opposite."""

    def __init__(self, path, flags):
        self.path, self.opened = str(path), threading.Event()
        self.thread = threading.Thread(target=self._open, args=(flags,), daemon=True)
        self.thread.start()
        time.sleep(0.2)

    def _open(self, flags):
        fd = os.open(self.path, flags)
        self.opened.set()
        os.close(fd)

    def release(self, flags):
        if not self.opened.is_set():
            fd = os.open(self.path, flags | os.O_NONBLOCK)
            self.thread.join(5)
            os.close(fd)


def test_the_copy_of_a_foreign_folder_opens_no_planted_node(run, tmp_path):
    # a planted device would be opened too (a /dev/watchdog node arms the
    # watchdog when opened); a FIFO shows whether anything opened it: its
    # writer, blocked in open(), goes on only once a reader opens it
    (run / "raw").mkdir()
    os.mkfifo(run / "raw" / "watchdog")
    os.symlink("/etc/hostname", run / "report.md")
    writer = BlockedPeer(run / "raw" / "watchdog", os.O_WRONLY)
    try:
        out, skipped = copy_to_report_dir(str(run), str(tmp_path / "results"))
        time.sleep(0.2)
        assert not writer.opened.is_set(), "the copy opened the FIFO"
        assert sorted(skipped) == ["raw/watchdog", "report.md"]
    finally:
        writer.release(os.O_RDONLY)


def test_a_fifo_where_records_are_appended_is_never_opened(tmp_path):
    os.mkfifo(tmp_path / "records.jsonl")
    reader = BlockedPeer(tmp_path / "records.jsonl", os.O_RDONLY)
    try:
        with pytest.raises(safeio.UnsafePathError, match="FIFO"):
            safeio.open_append(str(tmp_path / "records.jsonl"))
        time.sleep(0.2)
        assert not reader.opened.is_set(), "open_append opened the FIFO"
    finally:
        reader.release(os.O_WRONLY)


@pytest.mark.parametrize("make, says", [
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: os.symlink("/etc/hostname", p), "a symbolic link"),
    (lambda p: os.mkdir(p), "a directory"),
])
def test_the_readers_open_regular_files_only(tmp_path, make, says):
    path = str(tmp_path / "f")
    make(path)
    for read in (lambda: safeio.read_bytes(path, 100), lambda: list(safeio.read_lines(path, 100, 10)),
                 lambda: safeio.open_regular(path)):
        with pytest.raises(safeio.UnsafePathError, match=f"{says}, not a regular file"):
            read()


def test_a_device_is_refused_without_being_read():
    with pytest.raises(safeio.UnsafePathError, match="a character device, not a regular file"):
        safeio.read_bytes("/dev/zero", 100)


def test_a_folder_with_a_fifo_is_not_nslabs_own(run):
    os.mkfifo(run / "pipe")
    assert "pipe is a FIFO, not a regular file" in safeio.tree_is_safe(str(run))


# -- matplotlibrc ----------------------------------------------------------------------
@pytest.mark.parametrize("plant", ["fifo", "zero", "text"])
def test_a_matplotlibrc_in_the_current_folder_is_not_read(run, plant):
    rc_file = run.parent / "matplotlibrc"
    if plant == "fifo":
        os.mkfifo(rc_file)
    elif plant == "zero":
        os.symlink("/dev/zero", rc_file)
    else:
        rc_file.write_text("evil\x1b]0;PWNED\x07: 1\nlines.linewidth: 42\n")
    rc, out, err, peak = nslab(["report", str(run)], cwd=run.parent, timeout=90)
    assert rc == 0, err
    assert os.path.isfile(run / "plot.png") or any(p.suffix == ".png" for p in run.iterdir())
    assert "Bad key" not in err and "\x1b" not in err + out and "PWNED" not in err
    assert peak < PEAK_MIB, f"peaked at {peak:.0f} MiB"


def test_published_numbers_from_nslab_published_are_a_bounded_regular_file(tmp_path, monkeypatch):
    """``NSLAB_PUBLISHED`` names another folder of published numbers: a FIFO
    there is refused at once (not waited on), a link is not followed, and a
    file past the bound is refused by its size, each as one InputError."""
    import json as json_mod
    from nslab.errors import InputError
    from nslab.store import published
    monkeypatch.setenv("NSLAB_PUBLISHED", str(tmp_path))
    os.mkfifo(tmp_path / "alias.json")
    with pytest.raises(InputError, match="a FIFO, not a regular file"):
        published.load_published("alias")
    (tmp_path / "real.json").write_text(json_mod.dumps({"x": 1}))
    os.symlink(tmp_path / "real.json", tmp_path / "ecmp.json")
    with pytest.raises(InputError):
        published.load_published("ecmp")
    with open(tmp_path / "rfc2544.json", "wb") as f:
        f.truncate(published.MAX_BYTES + 1)
    with pytest.raises(InputError, match="larger than"):
        published.load_published("rfc2544")
    assert published.load_published("real") == {"x": 1}
