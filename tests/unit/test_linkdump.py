"""The netlink link dump the lab uses to wait for carriers, against `ip -j link`."""
import json
import shutil
import subprocess

import pytest

from nslab.runtime.proc import _link_dump

OPER = {"UNKNOWN": 0, "NOTPRESENT": 1, "DOWN": 2, "LOWERLAYERDOWN": 3, "TESTING": 4,
        "DORMANT": 5, "UP": 6}


@pytest.mark.skipif(not shutil.which("ip"), reason="needs iproute2")
def test_link_dump_matches_ip_link():
    ours = _link_dump()
    theirs = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                       text=True, check=True).stdout)
    assert set(ours) == {l["ifname"] for l in theirs}
    for l in theirs:
        flags, oper = ours[l["ifname"]]
        assert oper == OPER[l["operstate"]]
        assert bool(flags & 1) == ("UP" in l["flags"])
