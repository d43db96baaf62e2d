"""A kind of node is one folder outside the core (issue 50): a throwaway kind in
tests/plugins/nslab_beacon, registered by a dist-info with entry point lines and
nothing else, adds a node option with its own validation and file:line errors,
a tool that the provenance's versions probe, a probe of its own, a drawing and a
JSON Schema entry.
Run in a child process, so the registry there holds the toy kind."""
import json
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.path.join(os.path.dirname(HERE), "plugins")


def registered_env(tmp_path):
    dist = tmp_path / "site" / "nslab_beacon-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nslab-beacon\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[nslab.kinds]\nbeacon = nslab_beacon:KIND\n\n"
        "[nslab.extensions]\nbeacon = nslab_beacon.extension:BeaconExtension\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), PLUGINS]))


PROBE = textwrap.dedent("""
    import json, sys
    from nslab.errors import TopologyError
    from nslab.model.topo import Topology, schema
    from nslab.runtime import caps
    from nslab.store.draw import to_graph
    out = {}
    t = Topology.from_yaml(sys.argv[1])
    out["features"] = sorted(t.features())
    out["address"] = str(t.nodes["r1"].option("beacon").address)
    out["schema"] = schema()["$defs"]["Node"]["properties"]["beacon"]
    out["dot"] = to_graph(t).source
    out["versions"] = caps.versions()
    probed = caps.kind_capabilities({})
    out["probed"] = {k: [c.ok, c.detail] for k, c in probed.items()}
    errors = []
    for bad in sys.argv[2:]:
        try:
            Topology.from_yaml(bad)
        except TopologyError as exc:
            errors.append(str(exc))
    out["errors"] = errors
    print(json.dumps(out))
""")


def test_a_kind_outside_the_core_adds_its_option_tool_drawing_and_schema(tmp_path):
    env = registered_env(tmp_path)
    good = tmp_path / "good.yaml"
    good.write_text("nodes:\n  h1: {}\n  r1:\n    kind: router\n    beacon:\n"
                    "      address: 10.9.9.9/32\nlinks:\n  - [h1, r1]\n")
    on_switch = tmp_path / "on-switch.yaml"
    on_switch.write_text("nodes:\n  h1: {}\n  s1:\n    kind: switch\n    beacon:\n"
                         "      address: 10.9.9.9/32\nlinks:\n  - [h1, s1]\n")
    bad_key = tmp_path / "bad-key.yaml"
    bad_key.write_text("nodes:\n  r1:\n    kind: router\n    beacon:\n      address: 10.9.9.9/32\n"
                       "      colour: red\n")
    res = subprocess.run([sys.executable, "-c", PROBE, str(good), str(on_switch), str(bad_key)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["features"] == ["beacon"]
    assert out["address"] == "10.9.9.9/32"
    assert out["schema"]["description"] == "an address the node answers on"
    assert "shape=star" in out["dot"] and "fillcolor=\"#ffee88\"" in out["dot"]
    assert out["versions"]["beacontool"] == "%d.%d.%d" % sys.version_info[:3]
    assert out["probed"]["beacon"] == [True, "loopback addresses"]  # its probe, beside OVS's
    assert "ovs_running" in out["probed"]
    on_switch_err, bad_key_err = out["errors"]
    assert on_switch_err.startswith(f"{on_switch}:5: nodes.s1.beacon: a switch takes no beacon")
    assert bad_key_err.startswith(f"{bad_key}:6: nodes.r1.beacon: unknown key 'colour'")


def test_without_the_kind_its_option_is_an_unknown_key(tmp_path):
    """The same file where the kind is not installed: refused by name, with the
    keys a node takes (the core's and the installed kinds')."""
    good = tmp_path / "good.yaml"
    good.write_text("nodes:\n  r1:\n    kind: router\n    beacon:\n      address: 10.9.9.9/32\n")
    res = subprocess.run([sys.executable, "-c", PROBE, str(good)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert f"{good}:4: nodes.r1: unknown key 'beacon'" in last and "bgp" in last, last


def test_a_kind_in_the_current_folder_is_never_imported(tmp_path):
    """A lab folder from anyone may ship a dist-info that registers a kind:
    kinds are read when the model is first imported, before the ``nslab``
    command drops the current directory from ``sys.path``, so they are found
    and imported with absolute path entries only. ``python -c`` puts ``""``
    (the current directory) first on ``sys.path``."""
    folder = tmp_path / "lab"
    dist = folder / "evil-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nslab.kinds]\nevil = evilkind:KIND\n")
    marker = tmp_path / "marker"
    (folder / "evilkind.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    res = subprocess.run([sys.executable, "-c", "import sys; assert sys.path[0] == ''; "
                          "import nslab.model.topo as t; print(' '.join(t.SWITCH_TYPES))"],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["bridge", "ovs"]
    assert not marker.exists(), "a kind's module from the current folder ran"


def test_a_broken_kind_is_reported_and_stops_no_command(tmp_path):
    """A registered kind that fails to import, and one that claims an option
    the core has, are each one log line and a failing row of the capability
    check (``nslab doctor``); the other kinds load, and a command that needs
    no kind (``nslab --version``, ``nslab clean``) still runs."""
    env = registered_env(tmp_path)
    site = tmp_path / "site"
    dist = site / "nslab_broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nslab-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nslab.kinds]\nbroken = nslab_broken_missing:KIND\n"
                                           "clash = nslab_clash:KIND\n")
    (site / "nslab_clash.py").write_text(
        "from nslab.model.kinds import Kind, NodeOption\n"
        "KIND = Kind('clash', node_options=(NodeOption('routes', int),))\n")
    script = ("import json; from nslab.model import kinds; from nslab.runtime import caps\n"
              "rows = caps.kind_capabilities({})\n"
              "print(json.dumps({'kinds': sorted(kinds.registered()), "
              "'broken': sorted(kinds.broken()), "
              "'rows': {k: [c.ok, c.required] for k, c in rows.items() if k.startswith('kind:')}}))")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["kinds"] == ["beacon", "frr", "ovs"]
    assert out["broken"] == ["broken", "clash"]
    assert out["rows"] == {"kind:broken": [False, True], "kind:clash": [False, True]}
    assert "kind broken (nslab_broken_missing:KIND) failed to load: ModuleNotFoundError" \
        in res.stderr
    assert "kind 'clash': node option 'routes' is already the core's" in res.stderr
    nslab = os.path.join(os.path.dirname(sys.executable), "nslab")
    version = subprocess.run([nslab, "--version"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert version.returncode == 0 and version.stdout.strip(), version.stderr


def test_a_null_option_on_a_node_it_does_not_fit_is_refused():
    from nslab.errors import TopologyError
    from nslab.model.topo import Topology
    try:
        Topology.from_dict({"nodes": {"s1": {"kind": "switch", "bgp": None}}})
    except TopologyError as exc:
        assert str(exc).startswith("nodes.s1.bgp: a switch takes no bgp"), exc
    else:
        raise AssertionError("bgp: null on a switch was accepted")


def test_an_unknown_switch_type_is_a_topology_error_naming_those_installed():
    from nslab.errors import TopologyError
    from nslab.topologies.basic import single
    try:
        single(k=2).with_switch_type("hub")
    except TopologyError as exc:
        assert str(exc) == ("switch type 'hub' is not one of bridge, ovs (the core's and the "
                            "installed kinds')"), exc
    else:
        raise AssertionError("switch type hub was accepted")
