"""Student's t in pure Python (math only), and the two tests the judge runs on logs: a paired t-test of log
ratios and Welch's t-test of log values (results.judge). The harness's planner asks them in the run's own
process, which need not import scipy for them; tests/results/test_judge.py checks them against scipy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_REPLICATES = 3  # a side: fewer gives no test (t with 2 has one degree of freedom per side: too wild)
CI_LEVEL = 0.95
ALPHA = 0.05  # the judge's significance level (results.judge, results.verdicts)


# ---- the t distribution: regularized incomplete beta (Numerical Recipes 6.4, Lentz's continued fraction)


def _beta_cf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for aa in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def beta_inc(a: float, b: float, x: float, y: float | None = None) -> float:
    """The regularized incomplete beta function I_x(a, b); y = 1 - x when the caller has it more exactly."""
    y = 1.0 - x if y is None else y
    if x <= 0:
        return 0.0
    if y <= 0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, y) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom (df > 0, not necessarily whole)."""
    if math.isnan(t) or not df > 0:
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tt = t * t
    tail = 0.5 * beta_inc(df / 2, 0.5, df / (df + tt), tt / (df + tt))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t with df degrees of freedom: Newton's method on t_sf, kept inside a
    bracket that bisection narrows where a step would leave it."""
    if not (0 < q < 1) or not df > 0:
        return math.nan
    if q < 0.5:
        return -t_ppf(1 - q, df)
    want = 1.0 - q
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > want:
        lo, hi = hi, hi * 2
    t = (lo + hi) / 2
    for _ in range(200):
        err = t_sf(t, df) - want  # > 0: t is too small
        lo, hi = (t, hi) if err > 0 else (lo, t)
        if abs(err) <= 1e-14 * want or hi - lo <= 1e-13 * hi:
            break
        step = t + err / _t_pdf(t, df)
        t = step if lo < step < hi else (lo + hi) / 2
    return t


# ---- the test --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Test:
    """One t-test of B against A on the logs: d the mean log difference (ratio exp(d)), its CI and p."""

    d: float
    low: float
    high: float
    p: float

    @property
    def ratio(self) -> float:
        return math.exp(self.d) if math.isfinite(self.d) else math.nan


NO_TEST = Test(math.nan, math.nan, math.nan, math.nan)


def ratio_interval(test: Test) -> tuple[float, float]:
    """A test's 95% interval as a ratio (NaN, NaN without one)."""
    return (math.exp(test.low), math.exp(test.high)) if test.p == test.p else (math.nan, math.nan)


def logs(values: Sequence[float]) -> list[float] | None:
    return [math.log(v) for v in values] if values and min(values) > 0 else None


def _t_test(d: float, se: float, df: float) -> Test:
    if se == 0:  # no spread at all: a point interval; equal means are no evidence, others are certain
        return Test(d, d, d, 1.0 if d == 0 else 0.0)
    half = t_ppf(0.5 + CI_LEVEL / 2, df) * se
    return Test(d, d - half, d + half, min(1.0, 2 * t_sf(abs(d) / se, df)))


def paired_test(a: Sequence[float], b: Sequence[float]) -> Test:
    """Paired t on log(b[i]) - log(a[i]); NO_TEST with fewer than MIN_REPLICATES pairs or a value <= 0."""
    la, lb = logs(a), logs(b)
    if la is None or lb is None or len(la) != len(lb) or len(la) < MIN_REPLICATES:
        return NO_TEST
    diffs = [y - x for x, y in zip(la, lb, strict=True)]
    n = len(diffs)
    return _t_test(statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(n), n - 1)


def welch_test(a: Sequence[float], b: Sequence[float]) -> Test:
    """Welch's t on log(b) against log(a) (Welch-Satterthwaite degrees of freedom); NO_TEST with fewer than
    MIN_REPLICATES a side or a value <= 0."""
    la, lb = logs(a), logs(b)
    if la is None or lb is None or min(len(la), len(lb)) < MIN_REPLICATES:
        return NO_TEST
    wa, wb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    d = statistics.fmean(lb) - statistics.fmean(la)
    if wa + wb == 0:
        return _t_test(d, 0.0, 1.0)
    df = (wa + wb) ** 2 / (wa**2 / (len(la) - 1) + wb**2 / (len(lb) - 1))
    return _t_test(d, math.sqrt(wa + wb), df)


def student_test(a: Sequence[float], b: Sequence[float]) -> Test:
    """Student's t on log(b) against log(a), one variance pooled over both sides (n_a + n_b - 2 degrees of
    freedom): for two segments of one series, whose spread the longer side estimates for both; NO_TEST with
    fewer than MIN_REPLICATES a side or a value <= 0."""
    la, lb = logs(a), logs(b)
    if la is None or lb is None or min(len(la), len(lb)) < MIN_REPLICATES:
        return NO_TEST
    df = len(la) + len(lb) - 2
    pooled = ((len(la) - 1) * statistics.variance(la) + (len(lb) - 1) * statistics.variance(lb)) / df
    d = statistics.fmean(lb) - statistics.fmean(la)
    return _t_test(d, math.sqrt(pooled * (1 / len(la) + 1 / len(lb))), df)
