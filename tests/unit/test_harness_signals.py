"""The test harness (``nslab.runtime.testing``, the plugin nslab's own suite
and users' lab tests load) ends on SIGTERM as on Ctrl-C: through teardown."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_run_ended_by_a_signal_tears_down_what_its_tests_started(tmp_path, sig):
    """A test holding a process in a session of its own (as a guest's vng
    is) stops it in its ``finally``; a run sent SIGTERM or SIGHUP mid-test
    gets there (Python's default ended the run at once, and the process
    outlived it)."""
    started, gone = tmp_path / "started", tmp_path / "gone"
    (tmp_path / "test_holds.py").write_text(textwrap.dedent(f"""
        import os, signal, subprocess, time

        def test_holds():
            child = subprocess.Popen(["sleep", "600"], start_new_session=True)
            try:
                with open({str(started)!r}, "w") as f:
                    f.write(str(child.pid))
                time.sleep(600)
            finally:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                open({str(gone)!r}, "w").close()
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "nslab.runtime.testing",
                            "-p", "no:cacheprovider", "-p", "no:xdist",
                            str(tmp_path / "test_holds.py")],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists() or not started.read_text():
            assert run.poll() is None, run.stdout.read().decode() if run.stdout else ""
            assert time.monotonic() < deadline, "the test did not start"
            time.sleep(0.05)
        held = int(started.read_text())
        run.send_signal(sig)
        out = run.communicate(timeout=60)[0].decode()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        if started.exists() and started.read_text():
            try:  # a failed run may have left it: it is this test's own
                os.killpg(int(started.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert gone.exists(), out
    assert not os.path.exists(f"/proc/{held}") or _zombie(held), out
    assert run.returncode != 0 and "KeyboardInterrupt" in out, out


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_signal_ignored_or_handled_before_is_left_as_it_was():
    """Under ``nohup`` SIGHUP is ignored, and a caller's own handler stays:
    the plugin takes only a signal at its default, and gives back what it
    took when the run ends."""
    from nslab.runtime import testing
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

    def mine(signum, frame):
        pass
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        testing.pytest_unconfigure(None)  # whatever this run's own plugin took
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, mine)
        config = _Config()
        testing.pytest_configure(config)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is mine
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        testing.pytest_configure(config)
        assert signal.getsignal(signal.SIGTERM) is testing._interrupted
        testing.pytest_unconfigure(config)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _Config:
    """What ``pytest_configure`` uses of a pytest config."""

    def addinivalue_line(self, name, line):
        pass
