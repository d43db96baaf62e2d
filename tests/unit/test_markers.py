"""The markers of nslab.runtime.testing, run by pytest itself (pytester): a test
marked ``once`` runs in the host tier and is skipped, saying why, in the Debian 13
tier (``make test-debian13`` sets NSLAB_TIER=debian13)."""
import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.mark.once
def test_marked_once():
    pass

def test_plain():
    pass
"""


@pytest.mark.parametrize("tier, outcome", [(None, dict(passed=2)),
                                           ("debian13", dict(passed=1, skipped=1))])
def test_once_runs_in_the_host_tier_and_skips_in_the_debian13_tier(pytester, monkeypatch,
                                                                   tier, outcome):
    if tier is None:
        monkeypatch.delenv("NSLAB_TIER", raising=False)
    else:
        monkeypatch.setenv("NSLAB_TIER", tier)
    pytester.makepyfile(SUITE)
    res = pytester.runpytest("-p", "nslab.runtime.testing", "--strict-markers", "-rs")
    res.assert_outcomes(**outcome)
    if tier:
        res.stdout.fnmatch_lines(["*runs once, in the host tier*"])
