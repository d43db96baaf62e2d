"""MLRsearch on a simulated DUT with a known loss curve: it must find NDR and
PDR within its goal width, in fewer trial-seconds than it would take to measure
every load. No root, no lab."""
import pytest

from nslab.experiments.rfc2544.mlr import mlr_search

CAPACITY = 60000.0  # frames/s the simulated DUT forwards; above it, the excess is lost


def dut(fps: float, seconds: float):
    offered = int(round(fps * seconds))
    forwarded = int(round(min(fps, CAPACITY) * seconds))
    return offered, offered - forwarded


def test_ndr_and_pdr_of_a_dut_with_a_known_loss_curve():
    res = mlr_search(dut, 1000.0, 148810.0, relative_width=0.01)
    ndr, pdr = res.goals["NDR"], res.goals["PDR"]
    # NDR: the capacity, found from below within the goal width
    assert CAPACITY * 0.98 <= ndr["fps"] <= CAPACITY * 1.0001, ndr
    assert ndr["lower_bound"] <= CAPACITY <= ndr["upper_bound"] * 1.0001
    # PDR: 0.5 % loss is allowed: the load with loss 0.5 % is CAPACITY / 0.995,
    # and the conditional throughput discounts the loss again
    assert ndr["fps"] <= pdr["fps"] <= CAPACITY / 0.995 * 1.0001, pdr
    assert pdr["lower_bound"] >= ndr["lower_bound"]
    assert res.trials and res.duration_s == pytest.approx(sum(t["seconds"] for t in res.trials))


def test_a_dut_that_loses_nothing_reaches_the_maximum_load():
    res = mlr_search(lambda fps, s: (int(fps * s), 0), 1000.0, 8127.0)
    assert res.goals["NDR"]["fps"] == pytest.approx(8127.0, rel=0.001)
