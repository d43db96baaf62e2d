"""Mininet's ready topologies by name (linear, tree, torus): the same nodes and
links as Mininet's own classes, `mn --topo` style `name,a,b`, STP where there are
loops, and size limits that are the kernel's or the address plan's. No root."""
import pytest

from nslab.errors import InputError, TopologyError
from nslab.run.topoload import load_topology

mtopo = pytest.importorskip("mininet.topo")
mlib = pytest.importorskip("mininet.topolib")


def same_as_mininet(ours, theirs):
    assert set(ours.nodes) == set(theirs.nodes())
    assert sorted(tuple(sorted((l.a, l.b))) for l in ours.links) == \
        sorted(tuple(sorted(l)) for l in theirs.links())
    assert set(ours.switches()) == set(theirs.switches())


@pytest.mark.parametrize("spec,cls,args", [
    ("linear,4", mtopo.LinearTopo, dict(k=4)),
    ("linear,3,2", mtopo.LinearTopo, dict(k=3, n=2)),
    ("tree,2,3", mlib.TreeTopo, dict(depth=2, fanout=3)),
    ("torus,3,4", mlib.TorusTopo, dict(x=3, y=4)),
])
def test_named_topologies_are_mininets_own(spec, cls, args):
    same_as_mininet(load_topology(spec, {}), cls(**args))


def test_options_by_name_equal_the_positional_form():
    a = load_topology("tree", {"depth": "2", "fanout": "3"})
    b = load_topology("tree,2,3", {})
    assert a.to_dict() == b.to_dict()


def test_stp_only_where_there_are_loops():
    torus = load_topology("torus,3,3", {})
    assert all(torus.nodes[s].stp for s in torus.switches())
    for spec in ("linear,4", "tree,2,3"):
        t = load_topology(spec, {})
        assert not any(t.nodes[s].stp for s in t.switches())
    # Mininet's datapath ids are kept for OVS and dropped for a Linux bridge
    assert load_topology("torus,3,3", {"switch": "ovs"}).nodes["s1x1"].dpid == 257
    assert load_topology("torus,3,3", {}).nodes["s1x1"].dpid is None


@pytest.mark.parametrize("spec,opts,message", [
    ("tree,2,3,ovs,9", {}, "tree takes at most 3 values (depth, fanout, switch)"),
    ("tree,2", {"depth": "3"}, "depth is given twice"),
    ("torus,2,3", {}, "x=2 and y=3 must be at least 3"),
    ("linear,x", {}, "--k: expected an integer, got 'x'"),
    ("linear,2", {"switch": "p4"}, "--switch 'p4': one of bridge, ovs"),
])
def test_bad_values_are_one_clear_line(spec, opts, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_topology(spec, dict(opts))


def test_size_is_limited_by_the_kernel_and_the_address_plan_only():
    big = load_topology("single,1000", {})  # was refused above 250
    assert len(big.hosts()) == 1000
    assert str(big.addresses()[("h1000", "h1000-eth0")]) == "10.0.3.232/8"
    with pytest.raises(TopologyError, match="a Linux bridge holds at most 1023 ports"):
        load_topology("single,1024", {})
    assert len(load_topology("single,1024", {"switch": "ovs"}).hosts()) == 1024


def test_importing_mininet_leaves_nslabs_loggers_stdlib_ones():
    """mininet.log makes every logger created after it a MininetLogger (level
    25, a stderr handler of its own: INFO hidden, warnings printed twice).
    Where nslab imports Mininet (the studies' registry, Mininet's topologies,
    the Mininet CLI), loggers created afterwards are logging's own. A fresh
    interpreter: this one may have imported Mininet already."""
    import subprocess
    import sys
    code = "\n".join([
        "import logging",
        "logging.basicConfig(level=logging.DEBUG, format='%(name)s %(levelname)s %(message)s')",
        "from nslab.run import registry",
        "registry.studies()",
        "from nslab.run.topoload import load_topology",
        "load_topology('linear,2', {})",
        "import mininet.log",
        "assert type(mininet.log.lg).__name__ == 'MininetLogger'",  # mn --custom keeps its own
        "log = logging.getLogger('nslab.created_after_mininet')",
        "print(type(log).__name__, log.level, len(log.handlers))",
        "log.info('an info line')",
        "log.warning('a warning line')",
    ])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["Logger", "0", "0"]
    lines = res.stderr.splitlines()
    assert "nslab.created_after_mininet INFO an info line" in lines
    assert sum("a warning line" in ln for ln in lines) == 1
