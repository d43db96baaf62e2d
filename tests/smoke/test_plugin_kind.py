"""The proof of issue 50: a lab is built with a kind of node from outside the
core (tests/plugins/nslab_beacon, registered by entry point lines only), and
its extension's part is there in the node's namespace, and gone with it."""
import json
import subprocess
import sys
import textwrap

import pytest

from tests.unit.test_plugin_kind import registered_env

pytestmark = [pytest.mark.root]

BUILD = textwrap.dedent("""
    import json, sys
    from nslab.model.topo import Topology
    from nslab.runtime.lab import Lab
    t = Topology.from_yaml(sys.argv[1])
    with Lab(t) as lab:
        lo = lab["r1"].run(["ip", "-4", "-o", "addr", "show", "dev", "lo"]).stdout
        ping = lab["h1"].run(["ping", "-c", "1", "-W", "2", "10.9.9.9"], check=False).returncode
        print(json.dumps({"lo": lo, "netns": lab["r1"].netns, "ping": ping,
                          "extensions": sorted(lab.extensions)}))
""")


def test_a_lab_is_built_with_a_kind_from_outside_the_core(tmp_path):
    env = registered_env(tmp_path)
    topo = tmp_path / "beacon.yaml"
    topo.write_text("nodes:\n  h1:\n    ip: 10.0.0.1/24\n    routes: ['10.9.9.9/32 via 10.0.0.2']\n"
                    "  r1:\n    kind: router\n    ip: 10.0.0.2/24\n    beacon:\n"
                    "      address: 10.9.9.9/32\nlinks:\n  - [h1, r1]\n")
    res = subprocess.run([sys.executable, "-c", BUILD, str(topo)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["extensions"] == ["beacon"]
    assert "inet 10.9.9.9/32" in out["lo"]
    assert out["ping"] == 0  # the host reaches the beacon through the router
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert out["netns"] not in left
