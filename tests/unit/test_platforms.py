"""`nslab doctor` names the distribution and its known problems (no root)."""
import os

import pytest

from nslab.runtime.platforms import distribution, known_problems, parse_os_release

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "os-release")


def _read(name):
    with open(os.path.join(DATA, name)) as f:
        return f.read()


def test_debian_12_as_captured_here_is_known_and_quiet():
    d = distribution(_read("debian-12"), kernel="6.18.44")
    assert (d.id, d.version_id, str(d)) == ("debian", "12", "Debian GNU/Linux 12 (bookworm)")
    assert d.known and not d.wsl
    assert known_problems(d, {"iperf2": "2.1.8", "frr": "8.4.4"}) == []


def test_iperf_2_2_is_named_as_a_version_dependent_reading():
    d = distribution(_read("debian-12"), kernel="6.12.0")
    problems = known_problems(d, {"iperf2": "2.2.1", "frr": "10.3"})
    assert len(problems) == 1 and "iperf 2.2.1" in problems[0] and "-P SUM" in problems[0]


def test_an_unknown_distribution_and_wsl_are_named():
    d = distribution('ID=arch\nPRETTY_NAME="Arch Linux"\n',
                     kernel="5.15.167.4-microsoft-standard-WSL2")
    assert d.wsl and not d.known and str(d) == "Arch Linux (WSL2)"
    problems = known_problems(d, {})
    assert any("pktgen" in p for p in problems)
    d = distribution('ID=gentoo\nPRETTY_NAME="Gentoo"\n', kernel="6.6.0")
    assert "does not know this distribution" in known_problems(d, {})[0]


def test_os_release_quoting():
    assert parse_os_release("A=\"x y\"\nB='z'\nC=plain\n# comment\nbad line\n") == \
        {"A": "x y", "B": "z", "C": "plain"}


SETUP = os.path.join(os.path.dirname(os.path.dirname(DATA)), "..", "scripts", "setup-system.sh")


def _setup(release, *args, **env):
    import subprocess
    return subprocess.run(["bash", SETUP, *args], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, NSLAB_OS_RELEASE=os.path.join(DATA, release), **env))


@pytest.mark.parametrize("release,browser", [("debian-12", True), ("debian-13", True),
                                             ("ubuntu-24.04", False)])
def test_setup_knows_each_distributions_packages(release, browser):
    res = _setup(release, "--list")
    pkgs = res.stdout.split()
    assert res.returncode == 0 and {"frr", "openvswitch-switch", "iperf", "gcc"} <= set(pkgs)
    # Ubuntu's chromium is a snap: never installed there (set-up must not wait on snapd)
    assert ("chromium" in pkgs and "chromium-driver" in pkgs) is browser
    assert distribution(_read(release)).known


def test_setup_names_the_packages_on_a_distribution_it_does_not_know():
    res = _setup("arch")
    assert res.returncode == 1 and "Arch Linux is not a distribution this script knows" in res.stderr
    assert "openvswitch-switch" in res.stderr and "NSLAB_SKIP_SYSTEM=1" in res.stderr
    assert _setup("arch", NSLAB_SKIP_SYSTEM="1").returncode == 0
    assert not distribution(_read("arch")).known


def test_a_probe_that_times_out_counts_as_missing_and_says_so(caplog):
    """A capability probe is a command; one that gives no answer in time
    (a module loading in a slow guest) is counted as missing, and logged,
    so a doctor report or a failed stock-kernel test can be traced to it."""
    import logging

    from nslab.runtime import caps
    assert caps.PROBE_TIMEOUT >= 30
    with caplog.at_level(logging.WARNING, logger="nslab.runtime.caps"):
        cp = caps._q(["sleep", "5"], timeout=0.2)
    assert cp.returncode == 127 and "timed out" in cp.stderr
    assert "probe sleep 5: no answer in 0.2 s; counted as missing" in caplog.text
    assert caps._q(["true"]).returncode == 0
    assert caps._q(["/nonexistent/tool"]).returncode == 127
