"""A node's FRR run directory belongs to the frr user, who can place links,
hard links, FIFOs and pid files there: root never follows a link there, copies
out only regular files of their own, and signals only the processes it started.
No root needed (a fake run directory in tmp_path)."""
import os
import signal
import stat
import subprocess
import sys

import pytest

from nslab.errors import LabError
from nslab.frr.daemon import Bgpd, Zebra, frr_prologue
from nslab.frr.rundir import NodeDir, copy_frr_files, owned_process
from nslab.frr.version import FrrVersion
from nslab.runtime.proc import Process, process_start_time
from nslab.safeio import UnsafePathError

FRR_8_4 = FrrVersion("8.4.4", 8, 4)


@pytest.fixture
def hostile(tmp_path):
    """A work dir whose node run dir holds what a hostile frr user would leave."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "shadow"
    secret.write_text("root's secret\n")
    work = tmp_path / "run"
    run = work / "frr" / "spine1"
    run.mkdir(parents=True)
    conf = work / "frr-conf" / "spine1"
    conf.mkdir(parents=True)
    (conf / "zebra.conf").write_text("hostname spine1\n")
    (run / "bgpd.log").write_text("bgpd says hello\n")
    (run / "zebra.log").symlink_to(secret)                 # a link to a root file
    os.link(secret, run / "bfdd.log")                       # a hard link to it
    os.mkfifo(run / "mgmtd.log")                            # would block a plain open()
    (run / "zebra.stdout").symlink_to(secret)
    (run / "zebra.pid").write_text(f"{os.getppid()}\n")     # an unrelated process
    (run / "zebra.conf").write_text("a config the frr user wrote\n")
    return {"work": work, "run": run, "conf": conf, "secret": secret, "outside": outside}


def test_copying_out_takes_regular_files_only_and_follows_no_link(hostile, tmp_path, caplog):
    dest = tmp_path / "results" / "raw" / "frr"
    written = copy_frr_files(str(hostile["work"]), str(dest), (".log", ".conf", ".stdout"))
    assert sorted(os.path.relpath(p, dest) for p in written) == ["spine1/bgpd.log",
                                                                 "spine1/zebra.conf"]
    assert (dest / "spine1" / "bgpd.log").read_text() == "bgpd says hello\n"
    assert (dest / "spine1" / "zebra.conf").read_text() == "hostname spine1\n"  # root's, not frr's
    assert sorted(os.listdir(dest / "spine1")) == ["bgpd.log", "zebra.conf"]
    skipped = caplog.text
    for name in ("zebra.log", "bfdd.log", "mgmtd.log", "zebra.stdout"):
        assert f"spine1/{name}" in skipped
    assert "root's secret" not in "".join(p.read_text() for p in (dest / "spine1").iterdir())


def test_copying_out_into_a_results_folder_with_a_planted_link_is_refused(hostile, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)  # the lab folder nslab runs from
    dest = tmp_path / "results"
    dest.mkdir()
    (dest / "frr").symlink_to(hostile["outside"])
    with pytest.raises(UnsafePathError, match="symbolic link"):
        copy_frr_files(str(hostile["work"]), str(dest / "frr"), (".log",))
    assert sorted(os.listdir(hostile["outside"])) == ["shadow"]


def test_a_daemon_output_file_that_is_a_link_fifo_or_hard_link_is_refused(hostile):
    run = NodeDir(str(hostile["run"]))
    with pytest.raises(UnsafePathError, match="symbolic link"):
        run.open_output("zebra.stdout")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        run.open_output("mgmtd.log")          # a FIFO: refused at once, not waited on
    with pytest.raises(UnsafePathError, match="2 links"):
        run.open_output("bfdd.log")
    assert hostile["secret"].read_text() == "root's secret\n"  # nothing truncated or appended
    with run.open_output("bgpd.stdout") as f:                   # a new one is fine
        f.write(b"started\n")
    with run.open_output("bgpd.stdout") as f:                   # and appended to on restart
        f.write(b"restarted\n")
    assert (hostile["run"] / "bgpd.stdout").read_text() == "started\nrestarted\n"


def test_writing_a_config_replaces_a_link_instead_of_writing_through_it(hostile):
    conf = NodeDir(str(hostile["conf"]), "root")
    (hostile["conf"] / "bgpd.conf").symlink_to(hostile["secret"])
    conf.write("bgpd.conf", "router bgp 65000\n")
    assert not os.path.islink(hostile["conf"] / "bgpd.conf")
    assert (hostile["conf"] / "bgpd.conf").read_text() == "router bgp 65000\n"
    assert hostile["secret"].read_text() == "root's secret\n"
    assert stat.S_IMODE(os.stat(hostile["conf"] / "bgpd.conf").st_mode) == 0o640


def test_a_node_directory_is_made_fresh_and_never_through_a_link(tmp_path):
    d = NodeDir(str(tmp_path / "w" / "frr" / "n1"))
    d.create()
    assert stat.S_IMODE(os.stat(d.path).st_mode) == 0o770
    with pytest.raises(UnsafePathError, match="exists already"):
        d.create()
    (tmp_path / "w" / "frr" / "n2").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        NodeDir(str(tmp_path / "w" / "frr" / "n2")).create()
    with pytest.raises(UnsafePathError):
        NodeDir(str(tmp_path / "w" / "frr" / "n2")).names()


class _Lab:
    run_id = "nl0f0f"


class _Node:
    name = "spine1"
    lab = _Lab()


def _zebra(hostile):
    return Zebra(_Node(), NodeDir(str(hostile["run"])), NodeDir(str(hostile["conf"]), "root"),
                 {}, FRR_8_4)


def test_a_pid_file_naming_another_process_is_never_signalled(hostile, monkeypatch):
    kills = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    d = _zebra(hostile)
    assert d.pid() is None  # the pid file says the test's parent; nslab started nothing
    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT):
        with pytest.raises(LabError, match="spine1/zebra is not running"):
            d.signal(sig)
    d.stop()
    assert kills == []


def test_a_process_that_is_not_the_one_nslab_started_is_refused(hostile, monkeypatch):
    """Even with a Popen-like object naming a live pid: its start time and its
    NSLAB_RUN tag must be the ones recorded when nslab started the daemon."""
    kills = []
    d = _zebra(hostile)

    class Foreign:
        pid = os.getppid()

        class popen:
            @staticmethod
            def poll():
                return None
    d.process = Foreign()  # type: ignore[assignment]
    d.started_at = 0.0
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    with pytest.raises(LabError, match=f"not signalling: pid {os.getppid()} started "
                                       r"[0-9.]+ s after boot, not when"):
        d.signal(signal.SIGKILL)
    assert kills == []


def test_only_the_daemon_nslab_started_with_its_run_tag_is_signalled(hostile):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    d = _zebra(hostile)
    other = Process(sleeper, run_id="nl9999", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        d.process = other
        d.started_at = process_start_time(other.pid)
        with pytest.raises(LabError, match="carries NSLAB_RUN='nl9999', not 'nl0f0f'"):
            d.signal(signal.SIGTERM)
        assert other.alive()
    finally:
        other.stop()
    mine = Process(sleeper, run_id="nl0f0f", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        d.process = mine
        d.started_at = process_start_time(mine.pid)
        assert owned_process(mine.pid, d.started_at, "nl0f0f") is None
        assert d.signal(signal.SIGTERM) == mine.pid
        d.reap(timeout=10)
        assert mine.popen.returncode == -signal.SIGTERM
        assert d.pid() is None  # exited and reaped: nothing left to signal
        with pytest.raises(LabError, match="is not running"):
            d.signal(signal.SIGKILL)
    finally:
        mine.stop()


def _fake_mount(tmp_path, code=0):
    log = tmp_path / "mounts.log"
    fake = tmp_path / "bin" / "mount"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {log}\necho >> {log}\nexit {code}\n')
    fake.chmod(0o755)
    return dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}"), log


def test_the_frr_10_prologue_gives_the_daemon_its_node_s_directories_then_execs_it(tmp_path):
    env, log = _fake_mount(tmp_path)
    v = FrrVersion("10.3", 10, 3, "/etc/frr", "/run/frr", "/var/lib/frr")
    tricky = ["a b", "$(touch pwned)", "*"]
    argv = frr_prologue(["printf", "%s\\n", *tricky], v, "/run/nslab/nl1/frr/s 1", "/c/s1")
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert out.stdout.splitlines() == tricky and not (tmp_path / "pwned").exists()
    mounts = log.read_text().splitlines()
    assert mounts[0].startswith("-t|tmpfs|-o|mode=1777,size=16m|nslab-frr-tmp|/var/tmp|")
    assert mounts[1] == "--bind|/run/nslab/nl1/frr/s 1|/run/frr|"
    assert mounts[2] == "--bind|/c/s1|/etc/frr|"
    assert mounts[3].startswith("-t|tmpfs|-o|mode=0750,size=16m,uid=")
    assert mounts[3].endswith("|nslab-frr-lib|/var/lib/frr|")
    assert len(mounts) == 4


def test_a_failed_mount_stops_the_daemon_from_starting(tmp_path):
    env, _ = _fake_mount(tmp_path, code=32)
    v = FrrVersion("10.3", 10, 3)
    res = subprocess.run(frr_prologue(["echo", "started"], v, "/r", "/c"), capture_output=True,
                         text=True, env=env)
    assert res.returncode == 1 and "started" not in res.stdout
    assert "nslab: cannot mount a private /var/tmp for echo" in res.stderr
    env, _ = _fake_mount(tmp_path, code=0)
    res = subprocess.run(frr_prologue(["echo", "started"], FRR_8_4, "/r", "/c"),
                         capture_output=True, text=True, env=env)
    assert res.stdout == "started\n"


def test_readiness_names_a_daemon_that_exited_and_its_last_output(hostile):
    from nslab.errors import ReadinessError
    from nslab.frr.router import wait_ready
    d = _zebra(hostile)
    (hostile["run"] / "zebra.stdout").unlink()
    (hostile["run"] / "zebra.stdout").write_text("line 1\nzebra: cannot bind zserv socket\n")
    d.process = Process([sys.executable, "-c", "raise SystemExit(3)"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    d.process.popen.wait()
    with pytest.raises(ReadinessError, match=r"spine1: zebra exited before it served .*exit 3; "
                       r"its output ends:\nline 1\nzebra: cannot bind zserv socket"):
        wait_ready([d], 5)
    b = Bgpd(_Node(), NodeDir(str(hostile["run"])), NodeDir(str(hostile["conf"]), "root"), {},
             FRR_8_4)
    wait_ready([b], 0.1)  # no READY socket: nothing to wait for


def test_an_environment_read_in_the_instant_after_exec_is_read_again(monkeypatch):
    # Popen returns once the exec pipe closes, before the kernel has laid out
    # the new environment: /proc/PID/environ reads empty for that instant
    # (seen in CI on a loaded 2-core machine). The check reads again.
    import psutil
    readings = [{}, {}, {"NSLAB_RUN": "nl0f0f", "PATH": "/bin"}]
    calls = []

    class Fake:
        def __init__(self, pid):
            pass

        def environ(self):
            calls.append(1)
            return readings[min(len(calls) - 1, len(readings) - 1)]

    monkeypatch.setattr(psutil, "Process", Fake)
    monkeypatch.setattr("nslab.runtime.proc.process_start_time", lambda pid: 123.0)
    assert owned_process(4242, 123.0, "nl0f0f") is None
    assert len(calls) == 3
    # an environment that stays empty is still refused, once the second is up
    readings[:] = [{}]
    calls.clear()
    why = owned_process(4242, 123.0, "nl0f0f")
    assert why == "pid 4242 carries NSLAB_RUN=None, not 'nl0f0f'"
    assert len(calls) > 3
