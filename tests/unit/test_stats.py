"""The statistics behind the verdicts, on textbook values (computed here by hand
from their closed forms, independently of scipy).

Student's t quantiles come from printed tables where the degrees of freedom
are whole, and otherwise from ``_t_quantile`` below: Simpson's rule over the
t density (written out with ``math.lgamma``) and bisection, stdlib only. It is
itself checked against the tables first, so a wrong integrator fails here
rather than agreeing with a wrong nslab."""
import math

import pytest

from nslab.store import stats


def _t_density(x: float, df: float) -> float:
    c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(c - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf(x: float, df: float, steps: int = 4000) -> float:
    """P(T <= x) for x >= 0: 1/2 plus Simpson's rule from 0 to x."""
    h = x / steps
    inner = sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, steps))
    return 0.5 + h / 3 * (_t_density(0.0, df) + inner + _t_density(x, df))


def _t_quantile(p: float, df: float) -> float:
    """The p quantile (p > 1/2) of Student's t by bisection on ``_t_cdf``."""
    lo, hi = 0.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("df, table", [(1, 12.706205), (4, 2.7764451), (10, 2.2281389),
                                       (30, 2.0422725)])
def test_the_independent_t_quantile_matches_printed_tables(df, table):
    # t(0.975, df), two-sided 95 %, from the usual printed tables
    assert _t_quantile(0.975, df) == pytest.approx(table, abs=1e-5)


def test_mean_interval_is_students_t():
    # 1..5: mean 3, s = sqrt(2.5), t(0.975, 4) = 2.7764451 (tables)
    est = stats.mean([1, 2, 3, 4, 5])
    half = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)
    assert est.value == 3 and est.n == 5
    assert est.ci.low == pytest.approx(3 - half, abs=1e-6)
    assert est.ci.high == pytest.approx(3 + half, abs=1e-6)
    assert est.ci.method == "t"


def test_one_sample_has_no_interval_and_decides_nothing():
    est = stats.mean([42.0])
    assert est.ci is None
    assert stats.within(est, 0, 100) == "undecided"
    assert stats.above(est, 0) == "undecided"
    assert "no interval" in est.fmt()


def test_wilson_interval_matches_its_closed_form():
    k, n, z = 7, 50, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    est = stats.proportion(k, n)
    assert est.value == pytest.approx(0.14)
    assert est.ci.low == pytest.approx(centre - half, abs=1e-9)
    assert est.ci.high == pytest.approx(centre + half, abs=1e-9)
    # all n of n: the interval still reaches below 1 (never certainty from a count)
    assert stats.proportion(10, 10).ci.low == pytest.approx(0.7224672, abs=1e-6)


def test_welch_interval_of_a_relative_difference():
    a, b = [10.0, 12.0, 11.0, 13.0], [20.0, 21.0, 19.0, 20.0]
    ma, mb = 11.5, 20.0
    va, vb = (5 / 3) / 4, (2 / 3) / 4
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3)
    assert df == pytest.approx(147 / 29)  # Welch-Satterthwaite: not a whole number
    half = _t_quantile(0.975, df) * math.sqrt(va + vb)
    est = stats.relative_difference(a, b)
    assert est.value == pytest.approx((ma - mb) / mb)
    assert est.ci.low == pytest.approx((ma - mb - half) / mb)
    assert est.ci.high == pytest.approx((ma - mb + half) / mb)
    assert stats.below(est, 0) == "agrees" and stats.above(est, 0) == "disagrees"


@pytest.mark.parametrize("a, b, margin, verdict", [
    ([100, 101, 99, 100], [100, 100.5, 99.5, 100], 0.05, "agrees"),      # same, tight
    ([120, 121, 119, 120], [100, 100.5, 99.5, 100], 0.05, "disagrees"),  # 20 % apart, tight
    ([90, 110, 100], [100, 80, 120], 0.05, "undecided"),                # too noisy to tell
    ([100], [100], 0.05, "undecided"),                                  # one sample each
])
def test_equivalence_by_two_one_sided_tests(a, b, margin, verdict):
    got, est = stats.equivalence(a, b, margin)
    assert got == verdict, est
    assert est.ci is None or est.ci.level == pytest.approx(0.90)


def test_summary_and_spread():
    s = stats.summarize([950, 955, 960])
    assert (s.n, s.median, s.min, s.max) == (3, 955, 950, 960)
    assert s.spread == pytest.approx(10 / 955)
    with pytest.raises(ValueError):
        stats.summarize([])


def test_a_curve_against_a_published_one_point_by_point():
    # Two points, so each interval is drawn at 97.5 % (Bonferroni: the two hold
    # together at 95 %): t(0.9875, 4) for five values.
    ests = stats.pointwise([[1, 2, 3, 4, 5], [10, 10, 10]], [0, 12])
    half = _t_quantile(0.9875, 4) * math.sqrt(2.5) / math.sqrt(5)
    assert ests[0].value == 3 and ests[0].n == 5
    assert ests[0].ci.level == pytest.approx(0.975) and "(97.5 % t)" in ests[0].fmt()
    assert ests[0].ci.low == pytest.approx(3 - half, abs=1e-4)
    assert ests[0].ci.high == pytest.approx(3 + half, abs=1e-4)
    assert (ests[1].value, ests[1].ci.low, ests[1].ci.high) == (-2, -2, -2)
    assert stats.within_everywhere(ests, -10, 10) == "agrees"  # [0.5, 5.5] and [-2, -2]
    assert stats.within_everywhere(ests, -5, 5) == "undecided"  # the first straddles 5
    assert stats.within_everywhere(ests, -1, 8) == "disagrees"  # the second lies below -1
    with pytest.raises(ValueError):
        stats.pointwise([[1, 2]], [0, 1])


def test_a_curve_of_another_shape_parts_even_where_the_mean_difference_is_nil():
    # 20 points under the published curve at one load, 20 over it at another:
    # their mean difference is nil, but the curves part at both loads.
    ests = stats.pointwise([[20.0, 20.5], [80.0, 80.5]], [40, 60])
    assert [round(e.value, 2) for e in ests] == [-19.75, 20.25]
    assert stats.within_everywhere(ests, -10, 10) == "disagrees"


def test_a_point_with_one_value_decides_nothing_by_itself():
    one = stats.pointwise([[5.0], [1, 2, 3]], [0, 2])
    assert one[0].ci is None and one[1].ci is not None
    assert stats.within_everywhere(one, -10, 10) == "undecided"
    # another point that lies outside still decides
    assert stats.within_everywhere(stats.pointwise([[50.0], [1, 1]], [0, 30]), -10, 10) == \
        "disagrees"
    assert stats.within_everywhere([], -10, 10) == "undecided"
