"""Pytest helpers for lab tests, the way nslab's own integration tests are written.

In a ``conftest.py``::

    pytest_plugins = ["nslab.testing"]

then::

    def test_ping(make_lab):
        lab = make_lab(single(k=2))
        lab["h1"].run(["ping", "-c1", lab["h2"].ip])

Labs made by ``make_lab`` are always torn down, pass or fail, and the test
fails if a run left a tagged object behind. ``needs_root`` and
``needs_tool("iperf")`` skip with a reason.
"""
from __future__ import annotations

import os
import shutil
from typing import Callable, Iterator, List

import pytest

from .lab import Lab
from .topo import Topology


def needs_root() -> "pytest.MarkDecorator":
    return pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def needs_tool(*tools: str) -> "pytest.MarkDecorator":
    missing = [t for t in tools if not shutil.which(t) and not os.path.exists(t)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (not installed)")


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """A factory: ``make_lab(topology, **kwargs)`` returns a started :class:`Lab`."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    labs: List[Lab] = []

    def _make(topology: Topology, **kwargs) -> Lab:
        lab = Lab(topology, **kwargs)
        lab.start()
        labs.append(lab)
        return lab

    yield _make
    from .clean import discover
    for lab in reversed(labs):
        lab.stop()
    leftovers = {r: i.describe() for r, i in discover().items()
                 if r in {lab.run_id for lab in labs} and not i.empty}
    assert not leftovers, f"lab objects left behind: {leftovers}"
