"""The markers of nslab.runtime.testing, run by pytest itself (pytester): in the
Debian 13 tier (``make test-debian13`` sets NSLAB_TIER=debian13) an integration or
smoke test runs only when marked ``versioned`` (it exercises a tool whose version
differs there) and is skipped, saying why, otherwise; unit tests always run."""
import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.mark.versioned
def test_marked_versioned():
    pass

def test_plain():
    pass
"""


@pytest.mark.parametrize("tier, where, outcome", [
    (None, "integration", dict(passed=2)),
    ("debian13", "integration", dict(passed=1, skipped=1)),
    ("debian13", "smoke", dict(passed=1, skipped=1)),
    ("debian13", "unit", dict(passed=2)),
])
def test_only_versioned_tests_run_again_in_the_debian13_tier(pytester, monkeypatch, tier,
                                                              where, outcome):
    if tier is None:
        monkeypatch.delenv("NSLAB_TIER", raising=False)
    else:
        monkeypatch.setenv("NSLAB_TIER", tier)
    d = pytester.path / "tests" / where  # no __init__.py: not this repository's tests package
    d.mkdir(parents=True)
    d.joinpath("test_suite.py").write_text(SUITE)
    res = pytester.runpytest("-p", "nslab.runtime.testing", "--strict-markers", "-rs", str(d))
    res.assert_outcomes(**outcome)
    if outcome.get("skipped"):
        res.stdout.fnmatch_lines(["*runs once, in the host tier (not marked versioned*"])
