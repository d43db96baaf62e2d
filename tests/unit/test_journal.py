"""The run journal survives a kill at any point of its atomic write, and
FRR daemons' command lines keep their arguments out of the shell."""
import json
import os
import stat
import subprocess

import pytest

from nslab.runtime import clean
from nslab.frr.daemon import private_tmp


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(clean, "STATE_DIR", str(tmp_path))
    return tmp_path


def test_write_then_read_round_trips_and_leaves_no_tmp(state):
    clean.write_journal("nl1234", {"run": "nl1234", "restore": []})
    assert clean.read_journal("nl1234") == {"run": "nl1234", "restore": []}
    assert sorted(os.listdir(state)) == ["nl1234.json"]


def test_a_complete_tmp_left_by_a_kill_before_the_rename_is_the_newer_state(state):
    clean.write_journal("nl1234", {"run": "nl1234", "restore": []})
    newer = {"run": "nl1234", "restore": [{"what": "uplink eth9", "argv": [["true"]]}]}
    (state / "nl1234.json.tmp").write_text(json.dumps(newer))
    assert clean.read_journal("nl1234") == newer


def test_a_truncated_tmp_left_by_a_kill_during_the_write_is_ignored(state):
    clean.write_journal("nl1234", {"run": "nl1234", "restore": []})
    (state / "nl1234.json.tmp").write_text('{"run": "nl1234", "rest')
    assert clean.read_journal("nl1234") == {"run": "nl1234", "restore": []}


def test_a_tmp_alone_still_marks_the_run_as_having_something_to_clean(state):
    (state / "nl1234.json.tmp").write_text('{"run": "nl12')
    inv = clean.Inventory("nl1234")
    assert not inv.empty
    assert any("incomplete" in line for line in inv.describe())
    clean.remove_journal("nl1234")
    assert os.listdir(state) == [] and clean.Inventory("nl1234").empty


def test_remove_journal_takes_both_copies(state):
    clean.write_journal("nl1234", {"run": "nl1234"})
    (state / "nl1234.json.tmp").write_text("{}")
    clean.remove_journal("nl1234")
    assert os.listdir(state) == []


def test_frr_wrapper_passes_the_daemon_argv_through_untouched(tmp_path):
    # A stand-in `mount` first on PATH, so the wrapper runs without root; the
    # daemon argv must reach exec as-is: no word splitting, no expansion.
    fake = tmp_path / "mount"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    tricky = ["a b", "$(touch pwned)", "; rm -rf x", "*", "'\""]
    argv = private_tmp(["printf", "%s\\n", *tricky])
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert out.stdout.splitlines() == tricky
    assert not (tmp_path / "pwned").exists()


def test_frr_wrapper_refuses_to_start_the_daemon_without_its_private_tmp(tmp_path):
    fake = tmp_path / "mount"
    fake.write_text("#!/bin/sh\nexit 32\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    res = subprocess.run(private_tmp(["echo", "started"]), capture_output=True, text=True, env=env)
    assert res.returncode == 1 and "started" not in res.stdout
    assert "cannot mount a private /var/tmp for echo" in res.stderr


def _clock_stepped(monkeypatch, seconds):
    """The wall clock stepped by ``seconds`` since the processes started: the
    boot time in seconds since the epoch (``btime`` in /proc/stat, psutil's
    ``boot_time``) moves by as much. Seen by hand here: ``date -s "+2 seconds"``
    moved psutil's create_time of a running process by 2.00 s."""
    import psutil
    import psutil._pslinux as pslinux
    was = pslinux.boot_time()
    monkeypatch.setattr(pslinux, "boot_time", lambda: was + seconds)
    monkeypatch.setattr(psutil, "boot_time", lambda: was + seconds)


def test_a_live_run_stays_live_when_the_wall_clock_steps(monkeypatch):
    from nslab.runtime.proc import process_start_time
    child = subprocess.Popen(["sleep", "30"])
    try:
        journal = {"run": "nl1234", "pid": child.pid, "pid_start": process_start_time(child.pid)}
        _clock_stepped(monkeypatch, 2)
        assert process_start_time(child.pid) == journal["pid_start"]
        assert clean.run_is_live(journal)
    finally:
        child.kill()
        child.wait()
    assert not clean.run_is_live(journal)  # gone


def test_a_start_time_an_older_nslab_recorded_still_names_its_process():
    import psutil
    child = subprocess.Popen(["sleep", "30"])
    try:
        older = {"run": "nl1234", "pid": child.pid, "pid_start": psutil.Process(child.pid).create_time()}
        assert older["pid_start"] > 1e9 and clean.run_is_live(older)
        assert not clean.run_is_live(dict(older, pid_start=older["pid_start"] - 1))
        assert not clean.run_is_live(dict(older, pid_start="now"))
        assert not clean.run_is_live(dict(older, pid_start=True))
    finally:
        child.kill()
        child.wait()


def test_another_process_of_the_same_pid_is_not_the_run():
    from nslab.runtime.proc import process_start_time
    me = process_start_time(os.getpid())
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not clean.run_is_live({"run": "nl1234", "pid": child.pid, "pid_start": me})
    finally:
        child.kill()
        child.wait()


def test_a_run_of_another_root_directory_is_neither_killed_nor_cleaned(state, monkeypatch):
    """The Debian 13 tier's chroot shares this machine's PIDs and links but
    keeps its journals in its own /run: a clean here sees its runs' processes
    and interfaces with no journal. Its processes are not this root's to kill,
    and its run is skipped, saying why."""
    import time
    import psutil
    from nslab.runtime import extension, proc
    from nslab.runtime.proc import Result
    child = subprocess.Popen(["sleep", "30"], env={"NSLAB_RUN": "nl9e9e", "PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 60  # just exec'd, its environment reads empty for a moment
    while not psutil.Process(child.pid).environ() and time.monotonic() < deadline:
        time.sleep(0.01)
    real = proc.root_dir
    monkeypatch.setattr(proc, "root_dir",  # the child runs under a chroot
                        lambda pid="self": (0, 0) if pid == child.pid else real(pid))
    link = [{"ifname": "nl9e9e-p1", "ifalias": "nslab:nl9e9e:s1:s1-eth1"}]
    monkeypatch.setattr(clean, "run", lambda argv, check=False, **kw: Result(
        argv, 0, json.dumps(link) if "link" in argv else "", ""))
    monkeypatch.setattr(extension, "registered", lambda: {})
    try:
        assert proc.pids_with_tag("nl9e9e") == {}
        assert proc.pids_with_tag("nl9e9e", elsewhere=True) == {child.pid: "nl9e9e"}
        assert clean.clean("nl9e9e", dry_run=True) == {"nl9e9e": [
            f"skipped: run of another root directory (pid {child.pid} runs under a chroot): "
            "its own nslab clean removes it"]}
        assert child.poll() is None
        monkeypatch.setattr(proc, "root_dir", real)  # the same process, under this root
        assert proc.pids_with_tag("nl9e9e") == {child.pid: "nl9e9e"}
        assert clean.clean("nl9e9e", dry_run=True)["nl9e9e"][:2] == [
            "interface nl9e9e-p1", f"process {child.pid} (sleep)"]
    finally:
        child.kill()
        child.wait()
