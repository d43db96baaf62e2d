import json
import os
import subprocess
import sys

import pytest

from nslab.runtime.testing import needs
from tests.conftest import undisturbed

pytestmark = [pytest.mark.root, pytest.mark.slow]

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


@pytest.mark.versioned  # FRR, iperf, tcpdump
@needs("iperf", "tcpdump")
@needs("frr")
def test_ecmp_policies_end_to_end(tmp_path):
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "run", "ecmp", "--trials", "2",
                          "--duration", "2"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (run,) = (tmp_path / "ecmp").iterdir()
    recs = [json.loads(l) for l in open(run / "records.jsonl")]
    assert len(recs) == 4
    for r in recs:
        m = r["measurements"]
        assert m["unassigned_streams"] == 0 and len(m["streams"]) == 3
        if r["params"]["policy"] == 0:
            # L3 hashing: one (src, dst) pair, so one link for all three streams.
            assert m["split"] == "3+0"
    # ... so their SUM is one link's: the cap holds for both trials, the floor
    # (850 Mbit/s, 88 % of TCP's 965 on the link; 964-967 measured) for the
    # better of the two single 2 s trials the host left undisturbed, and half
    # of it for both (see the alias smoke test; CI of 2026-12-02 read 818 and
    # 826 while the hypervisor stole 10-23 % of the CPUs).
    l3 = [r for r in recs if r["params"]["policy"] == 0]
    one_link = [r["measurements"]["sum_bps"] / 1e6 for r in l3]
    assert len(one_link) == 2 and all(425 < x < 1000 for x in one_link), one_link
    calm = [r["measurements"]["sum_bps"] / 1e6 for r in undisturbed(l3)]
    assert not calm or max(calm) > 850, (calm, one_link)
    assert (run / "report.md").exists() and (run / "ecmp.png").exists()


def test_an_unknown_policy_is_one_line_before_anything_is_built(tmp_path):
    res = subprocess.run([NSLAB, "--results", str(tmp_path), "run", "ecmp", "--policy", "0,9"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--policy 9" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
