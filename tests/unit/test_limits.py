"""Size limits, checked before anything is built (issue 31): the ceilings'
arithmetic, ready topologies counted from their parameters, YAML bounded while
it is parsed, and a study's sweep counted, never expanded. No root."""
import os
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from nslab.model import limits
from nslab.errors import InputError
from nslab.model.limits import LimitError, derive
from nslab.run.topoload import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def cpu_s() -> float:
    """CPU seconds this process's ended children have used (user and system).

    These tests bound the work a refusal does (nothing is built or expanded),
    so they count CPU time, never wall time: Debian 13's unit tier runs at the
    idle policy beside the host's labs, where a process can wait seconds for a
    CPU while doing nothing. In-process checks use ``time.process_time()``."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


#: MemTotal of a QEMU guest given 2 GiB (what `nslab vm run` and the guest tiers use)
GUEST_2G_KIB = 2_000_000
#: MemTotal of the machine the benchmarks (docs/benchmarks.md) ran on
BENCH_KIB = 24_684_096


# -- the arithmetic ------------------------------------------------------------------------
def test_ceilings_follow_memory_as_documented():
    big, guest = derive(BENCH_KIB), derive(GUEST_2G_KIB)
    assert (big.nodes, big.namespaces, big.links) == (24105, 24105, 48211)
    assert (guest.nodes, guest.links, guest.trials) == (1953, 3906, 3906)
    assert big.labs == guest.labs == limits.MAX_LABS
    assert big.duration == guest.duration == 86400
    # the kernel's own ceiling on namespaces wins when it is lower
    low = derive(BENCH_KIB, netns_max=500)
    assert low.namespaces == 500 and low.nodes == 24105
    assert "max_net_namespaces" in low.why["namespaces"]


@pytest.mark.parametrize("shape, size", [
    ("single,1000", (1001, 1000, 1001)),          # README: a thousand hosts on one bridge
    ("clos,16,64", (80, 1024, 80)),               # docs/benchmarks.md: nslab bench clos 16x64
    ("single,1000,ovs", (1001, 1000, 1000)),
])
def test_documented_topologies_fit_a_2_gib_guest(shape, size):
    with limits.use(derive(GUEST_2G_KIB)):
        t = load_topology(shape, {})
    assert t.size() == size


def test_the_studies_nslab_ships_fit_a_2_gib_guest_at_their_full_preset():
    from nslab.run.registry import studies
    with limits.use(derive(GUEST_2G_KIB)):
        for name, cls in studies().items():
            cfg = cls.Config.preset("full")
            study = cls()
            limits.check_plan(len(study.labs(cfg)), study.points(cfg), name)


def test_a_refusal_is_one_line_naming_the_count_the_ceiling_and_the_flag():
    lim = derive(GUEST_2G_KIB)
    with pytest.raises(LimitError) as info:
        lim.check("nodes", 250_000, "t.yaml:3: nodes")
    assert str(info.value) == ("t.yaml:3: nodes: 250,000 nodes, over the limit of 1,953 "
                               "(from 1.9 GiB of memory); raise it with --limit nodes=N")
    lim.check("nodes", 1953)  # the ceiling itself is allowed


@pytest.mark.parametrize("item, parsed", [
    ("nodes=30000", ("nodes", 30000)), ("points=1_000_000", ("points", 1000000)),
    ("duration=36h", ("duration", 129600.0)), ("duration=90m", ("duration", 5400.0)),
    ("duration=3600", ("duration", 3600.0)), ("LINKS = 5", ("links", 5)),
])
def test_limit_options_parse(item, parsed):
    assert limits.parse_limit(item) == parsed


@pytest.mark.parametrize("item", ["nodes", "nodez=5", "nodes=0", "nodes=-5", "nodes=1e9",
                                  "nodes=5000000000", "duration=forever", "duration=0"])
def test_bad_limit_options_are_one_line(item):
    with pytest.raises(InputError, match="--limit"):
        limits.parse_limit(item)


def test_given_values_replace_the_machines_and_say_so():
    lim = derive(GUEST_2G_KIB).with_values({"nodes": 5000, "duration": 60})
    assert (lim.nodes, lim.duration, lim.links) == (5000, 60.0, 3906)
    assert lim.raised() == {"nodes", "duration"}
    assert "nodes 5,000 (--limit)" in lim.describe()


def test_the_count_of_combinations_stops_at_its_cap():
    assert limits.product([1000, 1000, 1000]) == 10**9
    assert limits.product([10**6] * 1000, cap=10**12) == 10**12 + 1
    assert limits.product([]) == 1 and limits.product([3, 0, 5]) == 0


def test_use_restores_the_limits_it_replaced():
    outer = derive(BENCH_KIB)
    with limits.use(outer):
        with limits.use(derive(GUEST_2G_KIB)):
            assert limits.active().nodes == 1953
        assert limits.active() is outer


# -- ready topologies: counted from their parameters ----------------------------------------
@pytest.mark.parametrize("spec", ["single,7", "single,7,ovs", "linear,4,3", "linear,3,2,ovs",
                                  "tree,3,3", "tree,4,1", "tree,2,4,ovs", "torus,3,4,2",
                                  "torus,4,3,1,ovs", "clos,3,5", "clos", "pair"])
def test_counted_sizes_are_exactly_the_built_ones(spec):
    if spec.startswith(("linear", "tree", "torus")):
        pytest.importorskip("mininet.topo")
    built = load_topology(spec, {})
    nodes, links, namespaces = built.size()
    exact = derive(BENCH_KIB).with_values({"nodes": nodes, "links": links,
                                          "namespaces": namespaces})
    with limits.use(exact):
        assert load_topology(spec, {}).size() == (nodes, links, namespaces)
    for key, value in (("nodes", nodes), ("links", links), ("namespaces", namespaces)):
        with limits.use(exact.with_values({key: value - 1})), \
                pytest.raises(LimitError, match=f"--limit {key}=N"):
            load_topology(spec, {})


def test_clos_with_leaves_and_hosts_is_counted_exactly():
    from nslab.topologies.clos import clos
    built = clos(spines=2, leaves=3, hosts_per_leaf=4)
    assert built.size() == (2 + 3 + 3 * 5, 2 * 3 + 3 * 5, 2 + 3 + 3 * 5)
    with limits.use(derive(BENCH_KIB).with_values({"nodes": built.size()[0] - 1})), \
            pytest.raises(LimitError, match="clos: 2 spines x 3 x 4"):
        clos(spines=2, leaves=3, hosts_per_leaf=4)


def test_a_huge_tree_is_refused_at_once_without_building_it(monkeypatch):
    pytest.importorskip("mininet.topo")
    from nslab.topologies import mininet

    def never(*a, **kw):
        raise AssertionError("built a topology over the limit")
    monkeypatch.setattr(mininet, "_mininet", never)
    t0 = time.process_time()  # the work done, not the wait for a CPU (cpu_s)
    with pytest.raises(LimitError) as info:
        load_topology("tree", {"depth": "20", "fanout": "20"})
    assert time.process_time() - t0 < 1.0
    assert str(info.value).startswith("tree: depth=20, fanout=20: ")
    with pytest.raises(LimitError):  # a deep chain of one-child switches too
        load_topology("tree", {"depth": "1000000", "fanout": "1"})
    with pytest.raises(LimitError):
        load_topology("single", {"k": "250000", "switch": "ovs"})


def test_any_other_topology_is_checked_when_validated():
    from nslab.model.topo import Topology
    t = Topology(name="by-hand")
    for i in range(5):
        t.add_host(f"h{i}")
    with limits.use(derive(BENCH_KIB).with_values({"nodes": 4})), \
            pytest.raises(LimitError, match="topology 'by-hand': 5 nodes"):
        t.validate()


def test_the_cli_shows_the_limits_and_refuses_in_one_line():
    res = subprocess.run([NSLAB, "topo", "check", "tree", "--depth", "20", "--fanout", "20"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "--limit nodes=N" in res.stderr
    res = subprocess.run([NSLAB, "topo", "check", "single,8", "--limit", "nodes=9"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "valid: 9 nodes, 8 links, 9 namespaces" in res.stdout
    assert "nodes 9 (--limit)" in res.stdout
    res = subprocess.run([NSLAB, "topo", "check", "single,8", "--limit", "nodes=8"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and "9 nodes, over the limit of 8 (--limit)" in res.stderr


# -- YAML: bounded while it is parsed ---------------------------------------------------------
def _topology_error(path):
    from nslab.model.topo import Topology
    t0 = time.process_time()
    with pytest.raises(InputError) as info:
        Topology.from_yaml(str(path))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}"), msg
    return msg, time.process_time() - t0


def test_ten_thousand_nested_brackets_are_one_line(tmp_path):
    p = tmp_path / "deep.yaml"
    p.write_text("[" * 10000)
    msg, took = _topology_error(p)
    assert msg == f"{p}:1: malformed YAML: nested more than 64 levels deep" and took < 2


def test_deep_mappings_name_their_line(tmp_path):
    p = tmp_path / "deep.yaml"
    p.write_text("".join("  " * i + f"k{i}:\n" for i in range(100)))
    assert _topology_error(p)[0] == f"{p}:64: malformed YAML: nested more than 64 levels deep"


def test_aliases_of_aliases_cannot_nest_past_the_bound(tmp_path):
    p = tmp_path / "chain.yaml"
    p.write_text("a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 3000)))
    assert "aliases nest the document more than 64 levels deep" in _topology_error(p)[0]


def test_a_huge_file_is_refused_before_parsing(tmp_path):
    from nslab.model.topo_yaml import MAX_BYTES
    p = tmp_path / "huge.yaml"
    p.write_text("#" * (MAX_BYTES + 1))
    msg, took = _topology_error(p)
    assert msg == f"{p}: larger than 4 MiB" and took < 1


def test_a_file_of_many_small_nodes_stops_at_the_node_budget(tmp_path):
    from nslab.model.topo_yaml import MAX_NODES
    p = tmp_path / "flat.yaml"
    p.write_text("[" + "a," * (MAX_NODES + 10) + "a]")
    assert f"more than {MAX_NODES:,} YAML nodes" in _topology_error(p)[0]


def test_a_topology_file_is_counted_right_after_parsing(tmp_path, monkeypatch):
    from nslab.model.topo import Topology
    p = tmp_path / "many.yaml"
    p.write_text("name: many\nnodes:\n" + "".join(f"  h{i}: {{}}\n" for i in range(50)) +
                 "  s1: {kind: switch}\nlinks:\n" + "".join(f"  - [h{i}, s1]\n" for i in range(50)))

    def never(*a, **kw):
        raise AssertionError("validated a topology over the limit")
    monkeypatch.setattr(Topology, "model_validate", never)
    for key, line, field in (("nodes", 2, "nodes"), ("namespaces", 2, "nodes"),
                             ("links", 54, "links")):
        with limits.use(derive(BENCH_KIB).with_values({key: 10})):
            msg, _ = _topology_error(p)
        assert msg.startswith(f"{p}:{line}: {field}: ") and f"--limit {key}=N" in msg, msg


def test_a_file_cannot_raise_a_limit(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("limits: {nodes: 1000000}\nnodes: {h1: {}, h2: {}}\nlinks: [[h1, h2]]\n")
    assert "unknown key 'limits'" in _topology_error(p)[0]


# -- study files: the sweep is counted, not expanded -------------------------------------------
def _huge_study(tmp_path, values=1000, extra=""):
    axis = lambda p: "[" + ", ".join(f"{p}{i}" for i in range(values)) + "]"  # noqa: E731
    p = tmp_path / "huge.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: huge
        title: a sweep of {values}^3 points
        topology: {{ready: pair}}
        duration: 2
        traffic:
          - {{id: p, kind: ping, src: h1, dst: h2}}
        events:
          - {{at: 1, when: {{vars.a: a1, vars.b: b1, vars.c: c1}}, do: link-down, link: [h1, h2]}}
        sweep:
          vars.a: {axis('a')}
          vars.b: {axis('b')}
          vars.c: {axis('c')}
        metrics:
          - {{metric: latency, flow: p}}
        """) + extra)
    return str(p)


def test_a_billion_point_sweep_is_refused_at_once(tmp_path, monkeypatch):
    from nslab.run import study
    from nslab.experiments.filestudy import spec

    def never(*a, **kw):
        raise AssertionError("expanded the sweep")
    monkeypatch.setattr(study, "expand", never)
    monkeypatch.setattr(spec.itertools, "product", never)
    path = _huge_study(tmp_path)
    t0 = time.process_time()
    with pytest.raises(LimitError) as info:
        spec.load(path)
    assert time.process_time() - t0 < 1.0
    assert str(info.value).startswith(
        f"{path}:9: sweep: 1,000,000,000 sweep points (vars.a 1,000 x vars.b 1,000 x "
        "vars.c 1,000), over the limit of ")


def test_study_check_refuses_it_in_one_line_and_a_flag_moves_the_ceiling(tmp_path):
    path = _huge_study(tmp_path)
    t0 = cpu_s()
    res = subprocess.run([NSLAB, "study", "check", path], capture_output=True, text=True,
                         timeout=60, cwd=str(tmp_path))
    took = cpu_s() - t0
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert "1,000,000,000 sweep points" in res.stderr and "--limit points=N" in res.stderr
    assert took < 5, took  # a Python start and the file's checks; expansion took 28 s+ and OOM
    res = subprocess.run([NSLAB, "study", "check", path, "--limit", "points=1000000000"],
                         capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 2
    assert "3,000,000,000 trials (1,000,000,000 points x repeat 3)" in res.stderr
    # nslab run reads the file before its options: the flag is in force by then
    res = subprocess.run([NSLAB, "run", path, "--limit", "points=1000000000", "--help"],
                         capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 2 and "3,000,000,000 trials" in res.stderr


def test_the_plan_count_is_exact_with_single_key_exclusions(tmp_path):
    from nslab.experiments.filestudy.spec import load, plan_size
    from nslab.experiments.filestudy.study import study_class
    path = _huge_study(tmp_path, values=4, extra="exclude:\n  - {vars.a: a0}\n  - {vars.c: c3}\n"
                                                 "repeat: 2\n")
    size = plan_size(load(path).spec)
    cls = study_class(path)
    cfg = cls.Config.preset("default")
    assert size.exact and size.points == 3 * 4 * 3 and size.trials == 72
    assert size.trials == len(cls().points(cfg))


def test_exclusions_of_several_keys_give_an_upper_bound(tmp_path):
    from nslab.experiments.filestudy.spec import load, plan_size
    from nslab.experiments.filestudy.study import study_class
    path = _huge_study(tmp_path, values=3, extra="exclude:\n  - {vars.a: a0, vars.b: b0}\n")
    size = plan_size(load(path).spec)
    actual = len(study_class(path)().points(study_class(path).Config.preset("default")))
    assert not size.exact and size.trials == 81 and actual == 72 < size.trials


def test_the_planned_duration_counts_swept_durations(tmp_path):
    from nslab.experiments.filestudy.spec import LAB_OVERHEAD_S, TRIAL_OVERHEAD_S, load, \
        plan_size
    p = tmp_path / "d.yaml"
    p.write_text(textwrap.dedent("""\
        name: d
        title: two durations
        topology: {ready: pair}
        duration: 10
        traffic:
          - {id: p, kind: ping, src: h1, dst: h2}
        sweep:
          duration: [10, 20]
          sysctl.h1.net.ipv4.tcp_ecn: [0, 1, 2]
        metrics:
          - {metric: latency, flow: p}
        """))
    size = plan_size(load(str(p)).spec)
    # 3 x 2 points, repeat 3, settle 1 s; traffic 3 x 3 x (10 + 20) s
    assert (size.points, size.trials) == (6, 18)
    assert size.seconds == pytest.approx(LAB_OVERHEAD_S + 18 * (1 + TRIAL_OVERHEAD_S) + 270)
    with limits.use(derive(BENCH_KIB).with_values({"duration": size.seconds - 1})), \
            pytest.raises(LimitError, match=r"d.yaml:4: duration: [0-9.]+ min planned"):
        load(str(p))


def test_too_many_labs_are_refused_before_any_is_made(tmp_path, monkeypatch):
    from nslab.experiments.filestudy import spec
    p = tmp_path / "labs.yaml"
    p.write_text(textwrap.dedent("""\
        name: labs
        title: one lab per k
        topology: {ready: single}
        duration: 2
        traffic:
          - {id: p, kind: ping, src: h1, dst: h2}
        sweep:
          topology.k: [2, 3, 4, 5, 6]
        metrics:
          - {metric: latency, flow: p}
        """))
    monkeypatch.setattr(spec, "build_topology", lambda *a: pytest.fail("built a lab"))
    with limits.use(derive(BENCH_KIB).with_values({"labs": 4})), \
            pytest.raises(LimitError, match=r"labs.yaml:7: sweep: 5 labs"):
        spec.load(str(p))


def test_a_study_file_cannot_raise_a_limit(tmp_path):
    from nslab.experiments.filestudy import spec
    path = _huge_study(tmp_path, values=2, extra="limits: {points: 1000000000}\n")
    with pytest.raises(InputError, match="unknown key 'limits'"):
        spec.load(path)


def test_a_registered_studys_plan_is_checked_before_a_lab_is_built():
    plan = [{"n": n, "repeat": r} for n in range(10) for r in range(3)]
    with limits.use(derive(BENCH_KIB).with_values({"trials": 29})), \
            pytest.raises(LimitError, match="the alias study: 30 trials"):
        limits.check_plan(1, plan, "the alias study")
    with limits.use(derive(BENCH_KIB).with_values({"points": 9})), \
            pytest.raises(LimitError, match="10 sweep points"):
        limits.check_plan(1, plan, "the alias study")
    with limits.use(derive(BENCH_KIB).with_values({"points": 10, "trials": 30})):
        limits.check_plan(1, plan, "the alias study")


def test_a_deep_or_huge_study_file_is_one_line(tmp_path):
    from nslab.experiments.filestudy import spec
    deep = tmp_path / "deep.yaml"
    deep.write_text("sweep: " + "[" * 10000)
    with pytest.raises(InputError) as info:
        spec.load(str(deep))
    assert str(info.value) == f"{deep}:1: malformed YAML: nested more than 64 levels deep"
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: x\n" + "#" * (4 * 1024 * 1024))
    with pytest.raises(InputError, match=r"huge.yaml: larger than 4 MiB$"):
        spec.load(str(huge))
