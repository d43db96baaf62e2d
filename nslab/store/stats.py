"""Statistics behind every claim a report makes: an estimate, its interval, and a
verdict of ``agrees``, ``disagrees`` or ``undecided`` with the reason.

No verdict comes from one sample: with fewer than two values (or an interval
that straddles the margin) the verdict is ``undecided``. Intervals say how they
were computed:

* a mean: Student's t interval;
* a difference or ratio of two means: Welch's t interval for the difference
  (unequal variances), expressed relative to the reference mean;
* a proportion: Wilson's score interval (``scipy.stats.binomtest``);
* a shift between two groups where some values are known only to lie
  between two bounds: the Hodges-Lehmann estimate with the Mann-Whitney
  test's distribution-free interval (:func:`shift`), whose ends move with
  each value, so a box of values gives the interval's range at its corners;
* "the same": two one-sided tests (TOST) at level alpha, i.e. the (1 - 2 alpha)
  interval of the relative difference lies inside +-margin;
* a curve against a published one at fixed points: each point's own t
  interval at level 1 - alpha/k over k points (Bonferroni), the curve within
  a band where every interval lies inside it, apart where any lies outside.

Sampling to a decision: a study may measure its points in up to ``rounds``
rounds, judging its claims after each and stopping once every claim is decided
(:func:`nslab.run.study.run_study`). Each look at the data is a chance to decide
wrongly, so every interval of such a run is drawn at level 1 - alpha/rounds
(Bonferroni over the looks planned, not the looks made): the chance that any
look decides wrongly stays at most alpha. :func:`sequential` sets that for a
block; the functions below take their default level from it.

scipy does the distributions; nothing here is hand-rolled beyond arithmetic.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import statistics
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

from typing_extensions import Literal

Verdict = Literal["agrees", "disagrees", "undecided"]
VERDICTS: Tuple[str, ...] = ("agrees", "disagrees", "undecided")

#: The error rate of every verdict: a claim is decided wrongly at most this often.
ALPHA = 0.05
_LOOKS: contextvars.ContextVar[int] = contextvars.ContextVar("nslab_stats_looks", default=1)


@contextlib.contextmanager
def sequential(looks: int) -> Iterator[None]:
    """Within the block, intervals are drawn for a run that looks at its data
    up to ``looks`` times (level 1 - :data:`ALPHA` / looks)."""
    if looks < 1:
        raise ValueError(f"looks {looks}: at least 1")
    token = _LOOKS.set(int(looks))
    try:
        yield
    finally:
        _LOOKS.reset(token)


def level() -> float:
    """The confidence level of intervals here: 1 - ALPHA / looks (0.95 for one look)."""
    return 1 - ALPHA / _LOOKS.get()


def _level(given: Optional[float]) -> float:
    return level() if given is None else given


@dataclass(frozen=True)
class Interval:
    """A confidence interval: ``[low, high]`` at ``level`` by ``method``."""

    low: float
    high: float
    level: float
    method: str

    def inside(self, low: float, high: float) -> bool:
        return low <= self.low and self.high <= high

    def outside(self, low: float, high: float) -> bool:
        return self.high < low or self.low > high

    def ends(self, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
        """``[low, high]`` and the unit, scaled."""
        return f"[{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]{unit}"

    def fmt(self, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
        """:meth:`ends`, then the level and method."""
        return f"{self.ends(scale, digits, unit)} ({round(self.level * 100, 1):g} % {self.method})"


@dataclass(frozen=True)
class Estimate:
    """A point estimate, its interval (None when it cannot be computed, e.g. one
    sample) and the number of observations behind it."""

    value: float
    ci: Optional[Interval]
    n: int

    def fmt(self, scale: float = 1.0, digits: int = 1, unit: str = "", sign: bool = False) -> str:
        text = f"{self.value * scale:{'+' if sign else ''}.{digits}f}{unit}"
        if self.ci is None:
            return f"{text} (n={self.n}: no interval)"
        return f"{text}, {self.ci.fmt(scale, digits, unit)}, n={self.n}"


@dataclass(frozen=True)
class Summary:
    """Per-point summary over repeats."""

    n: int
    median: float
    mean: float
    stdev: float
    min: float
    max: float
    ci: Optional[Interval]

    @property
    def spread(self) -> float:
        """(max - min) / median: the spread between repeats, relative."""
        return (self.max - self.min) / self.median if self.median else 0.0


def summarize(values: Sequence[float], level: Optional[float] = None) -> Summary:
    """Median, mean, stdev, range and the t interval of the mean."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values to summarize")
    est = mean(vals, level)
    return Summary(len(vals), statistics.median(vals), est.value,
                   statistics.stdev(vals) if len(vals) > 1 else 0.0, min(vals), max(vals), est.ci)


def mean(values: Sequence[float], level: Optional[float] = None) -> Estimate:
    """The mean with Student's t interval (None for one value)."""
    level = _level(level)
    from scipy import stats
    vals = [float(v) for v in values]
    n = len(vals)
    m = statistics.fmean(vals)
    if n < 2:
        return Estimate(m, None, n)
    sem = statistics.stdev(vals) / math.sqrt(n)
    if sem == 0:
        return Estimate(m, Interval(m, m, level, "t, no spread"), n)
    low, high = stats.t.interval(level, n - 1, loc=m, scale=sem)
    return Estimate(m, Interval(float(low), float(high), level, "t"), n)


def relative_difference(a: Sequence[float], b: Sequence[float],
                        level: Optional[float] = None) -> Estimate:
    """(mean(a) - mean(b)) / mean(b), with Welch's t interval of the difference
    divided by mean(b). None interval when either side has one value."""
    level = _level(level)
    mb = statistics.fmean([float(v) for v in b])
    if mb == 0:
        raise ValueError("relative difference to a zero mean")
    d = difference(a, b, level)
    ci = None if d.ci is None else Interval(d.ci.low / mb, d.ci.high / mb, level, d.ci.method)
    return Estimate(d.value / mb, ci, d.n)


def proportion(k: int, n: int, level: Optional[float] = None) -> Estimate:
    """k of n, with Wilson's score interval."""
    level = _level(level)
    from scipy import stats
    if n <= 0:
        raise ValueError("a proportion of nothing")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return Estimate(k / n, Interval(float(ci.low), float(ci.high), level, "Wilson"), n)


def equivalence(a: Sequence[float], b: Sequence[float], margin: float,
                alpha: Optional[float] = None) -> Tuple[Verdict, Estimate]:
    """Two one-sided tests: are the means of ``a`` and ``b`` within
    +-``margin`` (relative to ``b``)? ``agrees`` when the (1 - 2 alpha) interval
    lies inside the margin, ``disagrees`` when it lies wholly outside,
    ``undecided`` otherwise or with too few values."""
    if alpha is None:
        alpha = 1 - level()
    est = relative_difference(a, b, level=1 - 2 * alpha)
    return within(est, -margin, margin), est


def within(est: Estimate, low: float, high: float) -> Verdict:
    """Is the estimated quantity within [low, high]? Decided by its interval."""
    if est.ci is None:
        return "undecided"
    if est.ci.inside(low, high):
        return "agrees"
    if est.ci.outside(low, high):
        return "disagrees"
    return "undecided"


def above(est: Estimate, threshold: float) -> Verdict:
    """Is the estimated quantity above ``threshold``? Decided by its interval."""
    if est.ci is None:
        return "undecided"
    if est.ci.low > threshold:
        return "agrees"
    if est.ci.high < threshold:
        return "disagrees"
    return "undecided"


def below(est: Estimate, threshold: float) -> Verdict:
    """Is the estimated quantity below ``threshold``? Decided by its interval."""
    flipped = {"agrees": "disagrees", "disagrees": "agrees", "undecided": "undecided"}
    if est.ci is None:
        return "undecided"
    if est.ci.high < threshold:
        return "agrees"
    if est.ci.low > threshold:
        return "disagrees"
    return flipped["undecided"]  # type: ignore[return-value]


def pointwise(groups: Sequence[Sequence[float]], reference: Sequence[float],
              level: Optional[float] = None) -> List[Estimate]:
    """A curve against a published one at k fixed points (e.g. offered loads):
    at each point, the mean of our values there minus the published value
    (taken as exact), with Student's t interval from that point's own values
    at level 1 - (1 - level)/k (Bonferroni: the k intervals hold together at
    ``level``). A point with one value has no interval."""
    if len(groups) != len(reference):
        raise ValueError("points of unequal number")
    k = max(1, len(groups))
    each = 1 - (1 - _level(level)) / k
    return [mean([float(v) - float(ref) for v in g], each) for g, ref in zip(groups, reference)]


def within_everywhere(ests: Sequence[Estimate], low: float, high: float) -> Verdict:
    """Does a curve stay within ``[low, high]`` of a published one at every
    point (:func:`pointwise`)? ``agrees`` when every point's interval lies
    inside (an intersection-union test), ``disagrees`` when any point's lies
    outside (the curves part there, whatever the rest do), else
    ``undecided``; a point without an interval decides nothing."""
    if any(e.ci is not None and e.ci.outside(low, high) for e in ests):
        return "disagrees"
    if ests and all(e.ci is not None and e.ci.inside(low, high) for e in ests):
        return "agrees"
    return "undecided"


def difference(a: Sequence[float], b: Sequence[float], level: Optional[float] = None) -> Estimate:
    """mean(a) - mean(b) in the values' own unit, with Welch's t interval."""
    level = _level(level)
    from scipy import stats
    xa, xb = [float(v) for v in a], [float(v) for v in b]
    ma, mb = statistics.fmean(xa), statistics.fmean(xb)
    n = min(len(xa), len(xb))
    if len(xa) < 2 or len(xb) < 2:
        return Estimate(ma - mb, None, n)
    va, vb = statistics.variance(xa) / len(xa), statistics.variance(xb) / len(xb)
    se = math.sqrt(va + vb)
    if se == 0:
        return Estimate(ma - mb, Interval(ma - mb, ma - mb, level, "Welch t, no spread"), n)
    den = ((va ** 2 / (len(xa) - 1) if va else 0) + (vb ** 2 / (len(xb) - 1) if vb else 0))
    # den 0 with se > 0: variances so small their squares underflow (Welch's
    # df lies between the smaller group's n - 1 and the sum's)
    df = (va + vb) ** 2 / den if den else min(len(xa), len(xb)) - 1
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return Estimate(ma - mb, Interval(ma - mb - half, ma - mb + half, level, "Welch t"), n)


#: Beyond this many pairs (values of one group times the other's), the
#: Mann-Whitney test's null distribution is taken from its normal
#: approximation (with the continuity correction) rather than counted.
EXACT_UP_TO = 2_500


def _rank_k(m: int, n: int, level: float) -> int:
    """The number of the smallest (and of the largest) of the ``m * n``
    pairwise differences an interval at ``level`` leaves out: the largest
    k with P(U <= k - 1) <= (1 - level) / 2 under the Mann-Whitney test's null
    distribution (scipy's, exact for small groups); 0 when even the
    widest interval does not reach ``level``."""
    from scipy import stats
    method = "exact" if m * n <= EXACT_UP_TO else "asymptotic"
    ys = list(range(n))

    def below(u: int) -> float:
        # P(U <= u): the p-value of a sample whose U is u (x's i-th value
        # above c_i of the y's, the c_i summing to u), against "less"
        xs, left = [], u
        for i in range(m):
            c = min(n, left)
            left -= c
            xs.append(c - 0.5 + i * 1e-6)
        # (the continuity correction makes the normal approximation one of
        # P(U <= u), not of P(U <= u - 1/2); the exact count ignores it)
        return float(stats.mannwhitneyu(xs, ys, alternative="less", method=method,
                                        use_continuity=True).pvalue)
    tail = (1 - level) / 2
    lo, hi = 0, (m * n) // 2 + 1  # below(lo - 1) is 0; the answer is under hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if below(mid - 1) <= tail + 1e-12:  # 1/20 against 0.1/2, in floats
            lo = mid
        else:
            hi = mid
    return lo


def shift(a: Sequence[float], b: Sequence[float], level: Optional[float] = None) -> Estimate:
    """How far ``a``'s values lie above ``b``'s: the Hodges-Lehmann estimate
    (the median of every ``a_i - b_j``) with the distribution-free interval
    of the Mann-Whitney test (the k-th smallest and k-th largest of those
    differences, k from the test's null distribution, :func:`_rank_k`), which
    holds at ``level`` where the two groups differ by a shift.

    Each end is one of the differences in order, so it moves the same way as
    every value of ``a`` and the other way from every value of ``b``: for
    values known only to lie between two bounds each, the interval's low end
    is lowest with ``a`` at its lower bounds and ``b`` at its upper, and its
    high end highest the other way round (no other choice of values passes
    those). None interval when the groups are too small for one at ``level``."""
    level = _level(level)
    xa, xb = [float(v) for v in a], [float(v) for v in b]
    if not xa or not xb:
        raise ValueError("a shift between empty groups")
    diffs = sorted(x - y for x in xa for y in xb)
    est = float(statistics.median(diffs))
    n = min(len(xa), len(xb))
    k = _rank_k(len(xa), len(xb), level)
    if k < 1:
        return Estimate(est, None, n)
    return Estimate(est, Interval(diffs[k - 1], diffs[-k], level,
                                  "Hodges-Lehmann, Mann-Whitney"), n)


def relative_shift(a: Sequence[float], b: Sequence[float],
                   level: Optional[float] = None) -> Estimate:
    """:func:`shift` of the logarithms, as a ratio less one: how many times
    ``b``'s values ``a``'s are, less one (+0.02: 2 % above). Its ends move
    with each value as :func:`shift`'s do."""
    if any(float(v) <= 0 for v in list(a) + list(b)):
        raise ValueError("a relative shift of values that are not positive")
    est = shift([math.log(float(v)) for v in a], [math.log(float(v)) for v in b], level)
    ci = None if est.ci is None else Interval(math.expm1(est.ci.low), math.expm1(est.ci.high),
                                              est.ci.level, est.ci.method)
    return Estimate(math.expm1(est.value), ci, est.n)


def r_squared(ours: Sequence[float], theirs: Sequence[float]) -> Optional[float]:
    """1 - SS_res/SS_tot of ``ours`` as a prediction of ``theirs`` (None when
    ``theirs`` has no spread): how much of the published curve ours explains."""
    t = [float(v) for v in theirs]
    if len(t) < 2:
        return None
    m = statistics.fmean(t)
    tot = sum((v - m) ** 2 for v in t)
    if tot == 0:
        return None
    res = sum((float(o) - v) ** 2 for o, v in zip(ours, t))
    return 1 - res / tot


@dataclass(frozen=True)
class Check:
    """A verdict and the reason for it, in words a reader can check."""

    verdict: Verdict
    why: str


def judge(est: Estimate, low: float, high: float, what: str,
          scale: float = 1.0, unit: str = "", digits: int = 1,
          need: str = "more repeats") -> Check:
    """Is ``est`` within ``[low, high]`` (either may be +-inf)? The reason names
    the interval and the band; too few samples says what to run."""
    def f(x: float) -> str:
        return "-inf" if x == -math.inf else "+inf" if x == math.inf else f"{x * scale:.{digits}f}"
    band = f"[{f(low)}, {f(high)}]{unit}"
    if est.ci is None:
        return Check("undecided", f"n={est.n}: no interval from one sample; {need}")
    v = within(est, low, high)
    if v == "agrees":
        return Check(v, f"the interval lies inside {what} {band}")
    if v == "disagrees":
        return Check(v, f"the interval lies outside {what} {band}")
    return Check(v, f"the interval straddles the edge of {what} {band}; {need}")
