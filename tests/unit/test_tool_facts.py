"""The tools' versions and the commit are asked once per process, and a guest
that runs its host's programs takes them from the host's record
(nslab.runtime.provenance.use_tool_facts) instead of asking them through 9p."""
from __future__ import annotations

import os

import pytest

from nslab.runtime import caps, provenance


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(caps, "_TOOL_VERSIONS", {})
    monkeypatch.setattr(provenance, "_GIT", {})
    asked = []
    monkeypatch.setattr(caps, "tool_version", lambda argv, *a: asked.append(argv[0]) or "1.0")
    return asked


def test_the_tools_are_asked_once_per_process(fresh):
    first = caps.versions()
    assert first["kernel"] == os.uname().release and first["iperf2"] == "1.0"
    n = len(fresh)
    assert caps.versions() == first and len(fresh) == n


def test_a_guest_records_its_hosts_versions_and_its_own_kernel(fresh):
    provenance.use_tool_facts({"versions": {"kernel": "6.18.0-host", "iperf2": "2.1.8",
                                            "frr": None},
                               "git_commit": "d5d10bc"})
    got = provenance.tool_facts()
    assert got["versions"] == {"kernel": os.uname().release, "iperf2": "2.1.8", "frr": None}
    assert got["git_commit"] == "d5d10bc" and fresh == []


@pytest.mark.parametrize("facts", [
    None, "x", {"versions": {"iperf2": 2}}, {"versions": {"iperf2": "x" * 101}},
    {"versions": []}, {"git_commit": ["a"]}])
def test_what_a_results_file_holds_otherwise_is_asked_here(fresh, facts):
    """The host's record is read from the run's folder: anything but short
    strings is not taken; the tools are asked instead."""
    provenance.use_tool_facts(facts)
    assert provenance.tool_facts()["versions"]["iperf2"] == "1.0"
    assert fresh
