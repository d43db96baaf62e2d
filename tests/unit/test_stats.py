"""The statistics behind the verdicts, on textbook values (computed here by hand
from their closed forms, independently of scipy).

Student's t quantiles come from printed tables where the degrees of freedom
are whole, and otherwise from ``_t_quantile`` below: Simpson's rule over the
t density (written out with ``math.lgamma``) and bisection, stdlib only. It is
itself checked against the tables first, so a wrong integrator fails here
rather than agreeing with a wrong nslab."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# -- the rank interval (Hodges-Lehmann with Mann-Whitney's null distribution) --

def _u_counts(m: int, n: int):
    """How many of the C(m + n, m) orders of two groups give each U (the
    pairs with the first group's value above), counted by enumeration."""
    import itertools
    counts: dict = {}
    for pos in itertools.combinations(range(m + n), m):
        u = sum(p - i for i, p in enumerate(pos))
        counts[u] = counts.get(u, 0) + 1
    return counts, math.comb(m + n, m)


@pytest.mark.parametrize("m,n", [(2, 2), (3, 3), (4, 5), (5, 8), (6, 6), (6, 9), (9, 9), (3, 10)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.9833])
def test_the_rank_interval_leaves_out_what_the_null_distribution_allows(m, n, level):
    """k is the largest count with P(U <= k - 1) <= (1 - level) / 2, the
    distribution counted here by enumerating every order (textbook: 18 for
    nine against nine at 95 %, whose two-sided critical U is 17)."""
    counts, total = _u_counts(m, n)
    tail = (1 - level) / 2
    want = max(k for k in range(m * n + 1)
               if sum(counts.get(u, 0) for u in range(k)) / total <= tail + 1e-12)
    assert stats._rank_k(m, n, level) == want
    if (m, n, level) == (9, 9, 0.95):
        assert want == 18


@pytest.mark.parametrize("m,n", [(10, 60), (40, 60), (50, 50)])
def test_large_groups_take_the_normal_approximation_within_one_of_the_count(monkeypatch, m, n):
    """Past EXACT_UP_TO pairs the null distribution is scipy's normal
    approximation with the continuity correction: k within one of the exact
    count's (without the correction it was one too large about half the
    time, the interval a step too narrow)."""
    exact = stats._rank_k(m, n, 0.95)
    monkeypatch.setattr(stats, "EXACT_UP_TO", 0)
    assert abs(stats._rank_k(m, n, 0.95) - exact) <= 1


def test_the_shift_is_the_median_of_the_pairwise_differences_with_order_statistics_as_ends():
    a = [10.0, 11.0, 12.5, 13.0, 14.0, 15.5]
    b = [9.0, 9.5, 10.0, 11.0, 12.0, 12.5]
    diffs = sorted(x - y for x in a for y in b)
    est = stats.shift(a, b, 0.95)
    k = stats._rank_k(6, 6, 0.95)
    assert k == 6  # six against six at 95 %: U <= 5 is rejected
    assert est.value == pytest.approx((diffs[17] + diffs[18]) / 2)
    assert est.ci is not None and (est.ci.low, est.ci.high) == (diffs[k - 1], diffs[-k])
    assert est.ci.method == "Hodges-Lehmann, Mann-Whitney" and est.n == 6
    # three against three cannot reach 95 %: no interval, so no verdict
    assert stats.shift([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], 0.95).ci is None


def test_a_relative_shift_is_the_shift_of_the_logarithms():
    b = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    est = stats.relative_shift([2 * v for v in b], b, 0.95)
    assert est.value == pytest.approx(1.0)
    assert est.ci is not None and est.ci.low < 1.0 < est.ci.high
    with pytest.raises(ValueError, match="not positive"):
        stats.relative_shift([1.0, 0.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        stats.shift([], [1.0])


_values = st.lists(st.floats(min_value=1.0, max_value=1e3, allow_nan=False), min_size=4,
                   max_size=9)


@settings(max_examples=150, deadline=None)
@given(a=_values, b=_values, i=st.integers(min_value=0, max_value=8),
       up=st.floats(min_value=0.0, max_value=500.0), of_a=st.booleans())
def test_the_rank_interval_s_ends_move_with_each_value(a, b, i, up, of_a):
    """The property the alias study's bracket rests on: raising a value of
    ``a`` never lowers either end, raising one of ``b`` never raises one, so
    over values in boxes the ends are extreme at the boxes' corners."""
    before = stats.relative_shift(a, b, 0.9)
    grp = list(a if of_a else b)
    grp[i % len(grp)] += up
    after = stats.relative_shift(grp, b, 0.9) if of_a else stats.relative_shift(a, grp, 0.9)
    if before.ci is None:
        assert after.ci is None
        return
    assert after.ci is not None
    sign = 1 if of_a else -1
    assert sign * (after.ci.low - before.ci.low) >= -1e-12
    assert sign * (after.ci.high - before.ci.high) >= -1e-12


def test_welch_survives_variances_whose_squares_underflow():
    """Found by a property test (2026-12-02): one group without spread, the
    other's variance ~1e-198, whose square is 0 in floating point; Welch's
    degrees of freedom divided by it. The smaller group's n - 1 is used."""
    est = stats.difference([0.0, 0.0], [0.0, 2.641097982864869e-99])
    assert est.ci is not None and est.ci.low < est.value < est.ci.high
