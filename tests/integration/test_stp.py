"""A topology with loops (Mininet's torus) on Linux bridges and on OVS: STP runs
on every switch, the lab is up only once it has settled, and every host then
reaches every other across the loops (without STP a broadcast storm)."""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from nslab.run.registry import topology
from nslab.runtime.testing import needs

pytestmark = pytest.mark.root


def reach_all(lab, sources):
    hosts = lab.topology.hosts()
    pairs = [(a, b) for a in sources for b in hosts if a != b]

    def reaches(pair):
        a, b = pair
        # ping's exit is 0 if any of the 3 echoes came back: reachability, not loss
        return lab[a].run(["ping", "-c", "3", "-i", "0.2", "-W", "2", lab[b].ip],
                          check=False).ok

    # every pair at once (each ping its own process): the same pairs and the
    # same test of each as one after another, in about one ping's time
    with ThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
        ok = list(pool.map(reaches, pairs))
    return [p for p, good in zip(pairs, ok) if not good]


@needs("bridge", "ping")
def test_torus_on_linux_bridges_settles_and_forwards(make_lab):
    lab = make_lab(topology("torus")(x=3, y=3))
    states = {}
    for sw in lab.topology.switches():
        for port in json.loads(lab[sw].run(["bridge", "-j", "link", "show"]).stdout):
            states[port["ifname"]] = port["state"]
    # settled: every port forwards or blocks, and some block (the loops are cut)
    assert set(states.values()) <= {"forwarding", "blocking"}, states
    assert "blocking" in states.values()
    failed = reach_all(lab, ["h1x1", "h2x3"])
    assert failed == [], (failed, bridges_now(lab))


def bridges_now(lab):
    """Every switch's port states, root and topology-change flag, as a failure's
    message: whether STP moved after the lab called it settled."""
    out = {}
    for sw in lab.topology.switches():
        ports = json.loads(lab[sw].run(["bridge", "-j", "link", "show"]).stdout or "[]")
        flags = {f: lab[sw].run(["cat", f"/sys/class/net/{sw}/bridge/{f}"],
                                check=False).stdout.strip()
                 for f in ("root_id", "topology_change", "topology_change_detected")}
        out[sw] = dict(flags, ports={p["ifname"]: p.get("state") for p in ports
                                     if p.get("master") == sw})
    return out


@pytest.mark.versioned  # OVS's STP
@needs("ovs", "ping")
def test_torus_on_ovs_settles_and_forwards(make_lab):
    from nslab.ovs.bridge import stp_unsettled
    lab = make_lab(topology("torus")(x=3, y=3, switch="ovs"))
    assert stp_unsettled(list(lab.extension("ovs").bridges.values())) == []
    assert reach_all(lab, ["h1x1"]) == []
