"""Typed helpers the studies use on a running lab's nodes and processes (no root:
a LabNode is built without a lab, a Process runs in this namespace)."""
import subprocess
import sys

import pytest

from nslab.errors import InputError
from nslab.runtime.node import LabNode
from nslab.runtime.proc import Process


def test_require_ip_is_the_first_address_or_one_line_naming_the_node():
    node = LabNode(None, "h2", "host", "nl0000-h2")
    node.addrs = {"h2-eth0": "10.0.0.2/8", "h2-eth1": "10.1.0.2/16"}
    assert node.require_ip() == "10.0.0.2" == node.ip
    bare = LabNode(None, "s1", "switch", None)
    assert bare.ip is None
    with pytest.raises(InputError, match="node s1 has no IPv4 address"):
        bare.require_ip()


def test_readline_reads_a_piped_output_line_by_line():
    p = Process([sys.executable, "-c", "print('ready'); print('two')"])
    assert p.readline() == "ready\n"
    assert p.readline() == "two\n"
    assert p.readline() == ""  # its end
    p.wait(timeout=10)


def test_readline_of_an_output_that_is_not_a_pipe_is_empty(tmp_path):
    with open(tmp_path / "out", "w") as out:
        p = Process([sys.executable, "-c", "print('ready')"], stdout=out,
                    stderr=subprocess.DEVNULL)
        assert p.popen.stdout is None
        assert p.readline() == ""
        p.wait(timeout=10)
    assert (tmp_path / "out").read_text() == "ready\n"


def test_a_file_study_reads_routes_only_in_a_node_of_its_own_namespace():
    from nslab.errors import LabError
    from nslab.experiments.filestudy.runner import _netns, _ns_cpu
    assert _netns(LabNode(None, "r1", "router", "nl0000-r1")) == "nl0000-r1"
    with pytest.raises(LabError, match="s1 has no network namespace"):
        _netns(LabNode(None, "s1", "switch", None))
    assert _ns_cpu(None) == {}  # the root namespace: no processes of its own counted
