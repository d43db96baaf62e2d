"""The stock-kernel tier's closing summary, over JUnit XML that pytest itself writes."""
import subprocess
import sys
import textwrap

from nslab.runtime.testing import junit_summary


def test_counts_and_each_failure_with_its_message_on_one_line(tmp_path):
    (tmp_path / "test_some.py").write_text(textwrap.dedent('''\
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("no guest")

        def test_ok():
            pass

        def test_bad():
            assert {"max_ms": 0.79} == {"max_ms": 45}, "no delay\\nat all"

        def test_setup(broken):
            pass

        def test_long():
            assert False, "x" * 1000

        @pytest.mark.skip(reason="no netem")
        def test_skipped():
            pass
        '''))
    xml = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", "--rootdir", str(tmp_path), str(tmp_path)],
                   cwd=tmp_path, capture_output=True, text=True, timeout=120)
    counts, *bad = junit_summary(str(xml), width=120)
    assert counts == "1 passed, 2 failed, 1 error, 1 skipped"
    assert len(bad) == 3
    assert bad[0].startswith("FAILED test_some.py::test_bad: AssertionError: no delay at all")
    assert bad[1].startswith("ERROR test_some.py::test_setup: failed on setup with ")
    assert "RuntimeError: no guest" in bad[1]
    assert bad[2].startswith("FAILED test_some.py::test_long: AssertionError: xxx")
    assert len(bad[2]) == len("FAILED test_some.py::test_long: ") + 120 and bad[2].endswith("...")
    assert all("\n" not in line for line in bad)


def test_a_tier_that_wrote_no_xml_says_so(tmp_path):
    assert junit_summary(str(tmp_path / "junit-guest.xml")) == [
        f"no JUnit XML (FileNotFoundError: {tmp_path / 'junit-guest.xml'})"]
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite")
    assert junit_summary(str(tmp_path / "cut.xml"))[0].startswith("no JUnit XML (ParseError")


def test_a_guest_kernel_that_died_is_named_from_its_console():
    """The Debian 13 guest's console as captured here when its kernel died
    mid-test (an int3 met while TCG patched kernel code, then a panic)."""
    import os

    from nslab.runtime.testing import console_trouble
    here = os.path.dirname(os.path.dirname(__file__))
    with open(os.path.join(here, "data", "kernel-tier", "console-6.12-int3-panic.log")) as f:
        text = f.read()
    assert console_trouble(text) == [
        "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
        "CPU: 0 UID: 0 PID: 2444 Comm: iperf Not tainted 6.12.118+deb13-amd64 #1  "
        "Debian 6.12.118-1",
        "RIP: 0010:netif_rx_internal+0x1c/0x110",
        "Kernel panic - not syncing: Fatal exception in interrupt"]
    # Debian 12's 6.1 words the task line without the uid
    assert console_trouble("[ 9.1] BUG: kernel NULL pointer dereference\n"
                           "[ 9.2] CPU: 1 PID: 7 Comm: ip Not tainted 6.1.0-56-amd64\n") == [
        "BUG: kernel NULL pointer dereference", "CPU: 1 PID: 7 Comm: ip Not tainted 6.1.0-56-amd64"]
    assert console_trouble("[ 1.0] virtme-init: ok\n[ 2.0] veth: entered promiscuous mode\n") == []


def test_a_collection_error_says_its_cause(tmp_path):
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    xml = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", "--rootdir", str(tmp_path), str(tmp_path)],
                   cwd=tmp_path, capture_output=True, text=True, timeout=120)
    counts, *bad = junit_summary(str(xml))
    assert counts == "1 error"
    assert len(bad) == 1 and bad[0].startswith("ERROR ") and "collection failure" in bad[0]
    assert "No module named 'no_such_module_here'" in bad[0], bad


def test_a_guest_tier_whose_kernel_died_booting_boots_once_more(tmp_path, monkeypatch, capsys):
    """scripts/kernel-tier.py: a guest whose kernel died before its init (no
    test ran) boots once more, keeping the first console; a second death, or
    a failure after boot, is the tier's result as it stands."""
    import importlib.util
    import os

    from nslab.hosts import vm
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("kernel_tier_under_test",
                                                  os.path.join(here, "scripts", "kernel-tier.py"))
    kt = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script adds its folders: undone after
    spec.loader.exec_module(kt)
    monkeypatch.setenv("NSLAB_TIERS", str(tmp_path / "tiers"))
    monkeypatch.setattr(vm, "code_dirs", lambda py, root=None: [])
    monkeypatch.setattr(vm, "kernel_release", lambda k: "6.12.118+deb13-amd64")
    died = "[    2.676839] Kernel panic - not syncing: Fatal exception in interrupt"

    def tier(results):
        calls = []

        def run(guest):
            calls.append(guest.cpus)
            console = os.path.join(guest.out_dir, "kernel-tier.console.log")
            with open(console, "w") as f:
                f.write(f"boot {len(calls)}\n")
            return results[len(calls) - 1]
        monkeypatch.setattr(vm, "run", run)
        done: list = []
        rc = kt.guest_tier(str(tmp_path / "out"), 60, [], "trixie-x", "/k/vmlinuz", done, "guest",
                           2, ["tests/integration/test_frr.py"], part="frr")
        return rc, calls, done

    def result(rc, dead=None):
        return vm.GuestResult("kernel-tier", rc, "", "", 7.0, died_booting=dead)

    rc, calls, done = tier([result(255, died), result(0)])
    assert rc == 0 and calls == [2, 2] and done[0][1].startswith("exit 0")
    out = tmp_path / "out" / "guest-trixie-x-frr"
    assert (out / "kernel-tier.died-booting.console.log").read_text() == "boot 1\n"
    assert (out / "kernel-tier.console.log").read_text() == "boot 2\n"
    assert "its kernel died booting (" + died + "), before any test ran: booting it once more" \
        in capsys.readouterr().out
    rc, calls, _ = tier([result(255, died), result(255, died), result(0)])
    assert rc == 1 and len(calls) == 2  # once more, not twice
    rc, calls, _ = tier([result(3), result(0)])
    assert rc == 1 and len(calls) == 1  # it booted and failed: no second boot
