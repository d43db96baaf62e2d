"""Who owns the OVS daemons, with the real daemons: started by `nslab ovs start`
they outlive every lab until `nslab ovs stop`; started by a lab they go with the
last lab. Runs only where OVS is down at the start (never touches a system's)."""
import os
import subprocess
import sys

import pytest


from nslab.ovs import probes as ovs_probes
from nslab.topologies import single

pytestmark = pytest.mark.root
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def nslab(*args):
    res = subprocess.run([NSLAB, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.fixture
def ovs_down():
    if not os.path.exists("/usr/bin/ovs-vsctl"):
        pytest.skip("Open vSwitch is not installed")
    if ovs_probes.ovs_running():
        from nslab.ovs.daemon import owner
        if owner() is None:
            pytest.skip("OVS is running and was not started by nslab: not ours to stop")
        nslab("ovs", "stop")
    assert not ovs_probes.ovs_running()
    yield
    if ovs_probes.ovs_running():
        from nslab.ovs.daemon import owner
        if owner() is not None:
            nslab("ovs", "stop")


def test_ovs_started_by_the_user_stays_until_ovs_stop(ovs_down):
    assert "it stays up until nslab ovs stop" in nslab("ovs", "start")
    nslab("topo", "up", "single", "--k", "2", "--switch", "ovs", "--for", "0")
    assert ovs_probes.ovs_running(), "a lab's teardown stopped the user's OVS"
    nslab("clean")
    assert ovs_probes.ovs_running(), "nslab clean stopped the user's OVS"
    assert "stays up until nslab ovs stop" in nslab("ovs", "status")
    assert "stopped" in nslab("ovs", "stop")
    assert not ovs_probes.ovs_running()


def test_ovs_started_by_a_lab_goes_with_the_last_lab(ovs_down):
    from nslab import Lab
    with Lab(single(k=2, switch="ovs")):
        assert ovs_probes.ovs_running()
        assert "started by a lab" in nslab("ovs", "status")
    assert not ovs_probes.ovs_running()


def test_ovs_start_during_a_lab_keeps_it_after(ovs_down):
    from nslab import Lab
    with Lab(single(k=2, switch="ovs")):
        nslab("ovs", "start")  # takes over the daemons the lab started
    assert ovs_probes.ovs_running()
    nslab("ovs", "stop")
