"""FRR across hosts: what a host's agent tells the controller, and the stand-in
the controller makes of it (the extension's own hooks, not the core's)."""
import time

from nslab.frr.remote import RemoteFrr
from nslab.frr.router import FrrExtension


class _Router:
    def __init__(self, d):
        self.dir = d


def test_an_agent_tells_the_age_of_the_start_and_the_run_directories():
    ext = FrrExtension()
    assert ext.agent_facts(None) == {}  # not started: nothing to tell
    ext.started_at = time.monotonic() - 2.0
    ext.routers = {"r1": _Router("/run/nslab/x/r1")}
    told = ext.agent_facts(None)
    assert 2.0 <= told["started_ago"] < 10.0
    assert told["dirs"] == {"r1": "/run/nslab/x/r1"}


def test_the_controller_takes_the_earliest_start_on_its_own_clock_and_every_router():
    class Lab:
        nodes = {"r1": "node r1", "r2": "node r2"}
    facts = [({"started_ago": 3.0, "dirs": {"r1": "/a"}}, 100.0),
             ({"started_ago": 1.0, "dirs": {"r2": "/b"}}, 101.5)]
    frr = FrrExtension().remote(Lab(), facts)
    assert isinstance(frr, RemoteFrr)
    assert frr.started_at == 97.0  # min(100 - 3, 101.5 - 1)
    assert {n: (r.node, r.dir) for n, r in frr.routers.items()} == \
        {"r1": ("node r1", "/a"), "r2": ("node r2", "/b")}
