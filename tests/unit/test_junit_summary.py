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
