"""A lab's capability check probes what the lab needs, not everything
(nslab.runtime.caps.probe_for): the kernel's features it names, and the
kinds' probes only for a capability no kernel probe answers."""
from __future__ import annotations

from typing import List

import pytest

from nslab.runtime import caps
from nslab.runtime.caps import Capability


@pytest.fixture
def probes(monkeypatch):
    """The probes, recorded instead of run (no root, no namespace)."""
    calls: List[object] = []
    caps.probe.cache_clear()
    monkeypatch.setattr(caps, "_SOME", {})
    monkeypatch.setattr(caps, "is_root", lambda: True)
    monkeypatch.setattr(caps.shutil, "which", lambda p: f"/usr/bin/{p}")

    def kernel(names=None):
        calls.append(("kernel", None if names is None else sorted(names)))
        return {n: Capability(n, n != "netem") for n in (names or caps.KERNEL_CAPS)}

    def kinds(found):
        calls.append(("kinds",))
        return {"ovs_running": Capability("ovs_running", False, "ovs-vswitchd is not running")}

    monkeypatch.setattr(caps, "_kernel_probes", kernel)
    monkeypatch.setattr(caps, "kind_capabilities", kinds)
    yield calls
    caps.probe.cache_clear()


def test_a_bridge_lab_probes_its_kernel_features_only(probes):
    caps.require(["netns", "veth", "bridge", "tool:ip"], "a bridge lab")
    assert probes == [("kernel", ["bridge", "netns", "veth"])]
    caps.require(["netns", "u32"], "the DUT's cost knob")  # what is known is not asked again
    assert probes[1:] == [("kernel", ["u32"])]


def test_a_missing_kernel_feature_is_still_refused_in_one_line(probes):
    with pytest.raises(caps.CapabilityError, match="^a delay link needs netem, which this "
                                                   "machine lacks"):
        caps.require(["netem"], "a delay link")


def test_a_kinds_capability_runs_every_probe_once(probes):
    with pytest.raises(caps.CapabilityError, match="needs ovs_running"):
        caps.require(["ovs_running"], "an OVS lab")
    assert probes == [("kernel", None), ("kinds",)]
    caps.require(["bridge"], "a bridge lab")  # everything is known now
    assert len(probes) == 2
