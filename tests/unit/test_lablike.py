"""``LabLike``: the one interface of a running lab. ``Lab`` (one machine) and
``MultiLab`` (across hosts) both offer every member of it with the same
signature, and a ``RemoteNode`` is a ``LabNode`` whose commands take the same
arguments. Built without root: neither constructor touches the machine."""
import inspect

import pytest

from nslab.hosts.remote import MultiLab, RemoteNode
from nslab.runtime.lab import Lab
from nslab.runtime.node import LabLike, LabNode
from nslab.topologies.clos import clos

#: what every kind of lab offers (a change here is a change of the interface)
MEMBERS = {"topology", "run_id", "processes", "build_seconds", "remote", "nodes", "datapath",
           "workdir", "__enter__", "__exit__", "__getitem__", "__iter__", "start", "stop",
           "extension", "run_each", "route_tables", "describe"}


def protocol_members(proto):
    """The members a class must have to be ``proto``: its annotated attributes,
    properties and methods (not the machinery ``Protocol`` adds)."""
    names = set(proto.__annotations__)
    names |= {n for n, v in vars(proto).items()
              if (isinstance(v, property) or inspect.isfunction(v))
              and n not in ("__init__", "__subclasshook__")}
    return names


def shape(fn):
    """A callable's parameters as a caller sees them: name, kind, default."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def missing_or_different(obj, proto):
    """The members of ``proto`` that ``obj`` lacks, or offers with another signature."""
    out = []
    for name in sorted(protocol_members(proto)):
        try:
            got = inspect.getattr_static(obj, name)  # a property is not run
        except AttributeError:
            out.append(f"{name}: missing")
            continue
        want = vars(proto).get(name)
        if inspect.isfunction(want):
            if not callable(got):
                out.append(f"{name}: not a method")
            elif shape(getattr(type(obj), name)) != shape(want):
                out.append(f"{name}: {inspect.signature(getattr(type(obj), name))} is not "
                           f"{inspect.signature(want)}")
    return out


@pytest.fixture
def labs(tmp_path):
    topo = clos()
    lab = Lab(topo)
    multi = MultiLab(topo, {"a": "192.0.2.1", "b": "192.0.2.2"})
    multi._dir = str(tmp_path)  # as once started: its workdir is the control directory
    return lab, multi


def test_the_interface_is_what_both_labs_offer():
    assert protocol_members(LabLike) == MEMBERS


def test_lab_and_multilab_offer_every_member_with_the_same_signature(labs):
    for lab in labs:
        assert missing_or_different(lab, LabLike) == [], type(lab).__name__
        assert isinstance(lab, LabLike)


def test_a_lab_without_one_member_is_not_lablike(labs):
    lab, _ = labs

    class Partial:
        """A Lab's every member but ``route_tables``."""

    for name in MEMBERS - {"route_tables"}:
        setattr(Partial, name, inspect.getattr_static(lab, name))
    part = Partial()
    part.__dict__.update(vars(lab))
    assert missing_or_different(part, LabLike) == ["route_tables: missing"]
    assert not isinstance(part, LabLike)

    class OtherArgs(Partial):
        def route_tables(self, names):
            return []
    assert missing_or_different(OtherArgs(), LabLike) != []


def test_a_remote_node_runs_commands_with_a_local_nodes_arguments(labs):
    _, multi = labs
    assert issubclass(RemoteNode, LabNode)
    for name in ("run", "popen"):
        assert shape(getattr(RemoteNode, name)) == shape(getattr(LabNode, name)), name
    node = RemoteNode(multi, "spine1", "router", "nl0000-spine1", "a")
    assert node.lab is multi and node.host == "a"
