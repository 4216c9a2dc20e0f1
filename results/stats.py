"""Statistics on raw timing samples: Mann-Whitney U, Cliff's delta, bootstrap CI of a median ratio, verdicts;
and on process medians (--processes K): a Welch t-interval and test of the log ratio.

Everything here is scipy's but van Elteren's stratified test (stratified_u, in pure Python: the harness's
settle rounds ask it in the run's own process, which need not import scipy for it); this module only fixes
the conventions (B against A, two-sided, seeded bootstrap) so that compare, the best-variant table, the
settle rounds and the harness check say "can't tell" the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_SAMPLES = 3  # fewer on a side: no test (Mann-Whitney's smallest two-sided p with 2 vs 2 is 0.33)
MIN_PROCESSES = (
    3  # process medians on each side needed to judge by them (Welch's t needs 2; 3 gives it a spread)
)
ALPHA = 0.05
SAME_TOLERANCE = 0.02  # a ratio whose CI stays within ±2% of 1 is "the same", significant or not
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0  # pages are reproducible: the same samples give the same CI
VERDICTS = ("faster", "slower", "same", "ambiguous")

VERDICT_RULE = (
    "Verdict of B against A: 'same' when the 95% bootstrap CI of the median ratio B/A lies within "
    "±tolerance of 1 (the --fail-above percentage, else 2%); otherwise 'slower' (or 'faster') when "
    "Mann-Whitney U is significant and the whole CI lies above (below) 1; 'ambiguous' in every other case, "
    "including cells with fewer than 3 samples on a side."
)
PROCESS_RULE = (
    "Where both runs measured a cell in 3 or more worker processes (--processes), the CI and the test come "
    "from the process medians instead of the pooled samples, so that they include the spread from one "
    "process to the next: the CI is the Welch t-interval of the difference of the mean log process medians, "
    "exponentiated (a ratio of geometric means), and p is the same two-sided Welch test. Where both measured "
    "it in 3 or more rounds (--rounds) instead, the visits' medians are used the same way: the visits span "
    "each run, so their spread holds the machine's drift within it."
)

RUNS_RULE = (
    "Where both sides are run sets of 3 or more runs of the same code (a directory of runs: compare "
    "judges each cell by its runs, not by the samples or visits inside one run), the CI and the test come "
    "from each run's median, so that they include the spread from one run to the next, which no run's own "
    "samples show: the Welch t-interval of the difference of the mean log run medians, exponentiated (a "
    "ratio of geometric means, which is also the ratio shown), and p the same two-sided Welch test. Where "
    "the two sets were made interleaved (run i of each back to back, as `attnbench run` alternated "
    "between them), run i of B is paired with run i of A instead (basis 'paired runs': the paired "
    "t-interval of the mean log ratio), so that the machine's drift over minutes, which the two runs of a "
    "pair met alike, leaves the verdict."
)


def _clean(x) -> list[float]:
    return [float(v) for v in x if v is not None and math.isfinite(float(v))] if x is not None else []


def u_test(a, b) -> tuple[float, float]:
    """(two-sided Mann-Whitney U p-value, Cliff's delta) of B against A from one scipy call; (NaN, NaN)
    with fewer than 3 samples on a side.

    Cliff's delta is P(b > a) - P(b < a), in [-1, 1] (> 0: B's times larger, B slower); it is the U of B
    rescaled, delta = 2·U_B / (n_A·n_B) - 1 (ties count one half in U), so no pairwise loop is written here.
    """
    a, b = _clean(a), _clean(b)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return math.nan, math.nan
    from scipy.stats import mannwhitneyu

    if len(set(a) | set(b)) == 1:  # all equal: no evidence of a difference (scipy would warn)
        return 1.0, 0.0
    res = mannwhitneyu(b, a, alternative="two-sided")
    return float(res.pvalue), 2 * float(res.statistic) / (len(a) * len(b)) - 1


def mann_whitney(a, b) -> float:
    """Two-sided Mann-Whitney U p-value of two sample sets (NaN with fewer than 3 samples on a side)."""
    return u_test(a, b)[0]


def stratified_u(a_strata, b_strata) -> float:
    """Two-sided p of van Elteren's stratified Wilcoxon rank-sum test (B against A): each stratum (a round
    of --rounds, in which both were measured seconds apart) ranked on its own, the strata's rank sums
    weighted by 1/(n_s + 1) and combined, normal approximation. The machine's drift from one stratum to
    the next falls on both sides alike and leaves the test, where pooling the samples would count it as
    spread. NaN with fewer than MIN_SAMPLES samples on a side in all, or no stratum with both sides."""
    num = var = 0.0
    total_a = total_b = 0
    for a, b in zip(a_strata, b_strata, strict=True):
        a, b = _clean(a), _clean(b)
        if not a or not b:
            continue
        m, n = len(a), len(b)
        total_a, total_b = total_a + m, total_b + n
        ranks = _average_ranks(a + b)
        w = 1.0 / (m + n + 1)
        num += w * (sum(ranks[:m]) - m * (m + n + 1) / 2)
        var += w * w * m * n * (m + n + 1) / 12
    if total_a < MIN_SAMPLES or total_b < MIN_SAMPLES or var <= 0:
        return math.nan
    return math.erfc(abs(num) / math.sqrt(var) / math.sqrt(2))  # two-sided normal p, 2 * sf(|z|)


def _average_ranks(x: list[float]) -> list[float]:
    """Ranks from 1, ties given their average rank (scipy.stats.rankdata's default), in pure Python: the
    harness's settle rounds ask the rank test in the run's own process, which need not import scipy
    (0.6 s) for it."""
    order = sorted(range(len(x)), key=x.__getitem__)
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def cliffs_delta(a, b) -> float:
    """Cliff's delta of B against A (see u_test); NaN with fewer than 3 samples on a side."""
    return u_test(a, b)[1]


def ratio_ci(a, b, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of median(B) / median(A), resampling each side on its own, seeded.

    Percentile rather than BCa: BCa's jackknife of a median is degenerate on tied samples.
    (NaN, NaN) with fewer than 3 samples on a side.
    """
    a, b = _clean(a), _clean(b)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return math.nan, math.nan
    import numpy as np
    from scipy.stats import bootstrap

    if len(set(a)) == 1 and len(set(b)) == 1:  # no spread: every resample gives the same ratio
        r = b[0] / a[0]
        return r, r

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    res = bootstrap(
        (np.asarray(a), np.asarray(b)),
        ratio,
        n_resamples=BOOTSTRAP_RESAMPLES,
        vectorized=True,
        paired=False,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def median_ci(x, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (order statistics, scipy's quantile_test); NaN when too few.

    With 9 values the 95% CI is [2nd smallest, 8th smallest] (coverage 96%); a bootstrap of 9 values
    would understate it.
    """
    x = _clean(x)
    if len(x) < 6:  # 5 values cannot reach 95% coverage: 2 · 0.5^5 = 0.0625 > 0.05
        return math.nan, math.nan
    from scipy.stats import quantile_test

    ci = quantile_test(x, q=float(sorted(x)[len(x) // 2]), p=0.5).confidence_interval(level)
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Difference:
    """B against A on raw samples: median ratio, its CI, Mann-Whitney p, Cliff's delta and the verdict."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    delta: float
    verdict: str

    @property
    def significant(self) -> bool | None:
        return None if not math.isfinite(self.p_value) else self.p_value < ALPHA


def verdict(
    p_value: float, ci_low: float, ci_high: float, *, tolerance: float = SAME_TOLERANCE, alpha: float = ALPHA
) -> str:
    """VERDICT_RULE: same, slower, faster or ambiguous (the rule is the order of the tests below)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return "ambiguous"
    if 1 - tolerance <= ci_low and ci_high <= 1 + tolerance:
        return "same"  # practically equal, even when a huge sample makes a 1% shift significant
    significant = math.isfinite(p_value) and p_value < alpha
    if significant and ci_low > 1:
        return "slower"
    if significant and ci_high < 1:
        return "faster"
    return "ambiguous"


def difference(
    a, b, *, ratio: float | None = None, tolerance: float = SAME_TOLERANCE, alpha: float = ALPHA
) -> Difference:
    """Compare B's samples with A's; ratio defaults to median(B) / median(A) of the samples."""
    import statistics

    ca, cb = _clean(a), _clean(b)
    if ratio is None:
        ratio = statistics.median(cb) / statistics.median(ca) if ca and cb else math.nan
    p, delta = u_test(ca, cb)
    lo, hi = ratio_ci(ca, cb)
    return Difference(ratio, lo, hi, p, delta, verdict(p, lo, hi, tolerance=tolerance, alpha=alpha))


def welch_log_ratio(a, b, level: float = 0.95) -> tuple[float, float, float]:
    """(CI low, CI high, two-sided p) for B/A from per-process medians: Welch's t on log(B) - log(A).

    Each side's process medians are log-transformed (a ratio becomes a difference, and a slowdown of x%
    the same shift whatever the cell's time); d = mean(log b) - mean(log a) with the standard error
    sqrt(s_a²/n_a + s_b²/n_b) and Welch-Satterthwaite degrees of freedom (scipy.stats.ttest_ind with
    equal_var=False gives p and the interval); the CI is exp(d ± t·se), a ratio of geometric means.
    (NaN, NaN, NaN) with fewer than MIN_PROCESSES on a side; no spread on either side: a point interval,
    p 1 when the means agree and 0 when they do not."""
    a, b = _clean(a), _clean(b)
    if len(a) < MIN_PROCESSES or len(b) < MIN_PROCESSES or min(a + b) <= 0:
        return math.nan, math.nan, math.nan
    import numpy as np
    from scipy.stats import ttest_ind

    la, lb = np.log(a), np.log(b)
    d = float(lb.mean() - la.mean())
    if la.var() == 0 and lb.var() == 0:  # scipy would return NaN
        return math.exp(d), math.exp(d), 1.0 if d == 0 else 0.0
    res = ttest_ind(lb, la, equal_var=False)
    ci = res.confidence_interval(level)
    return math.exp(float(ci.low)), math.exp(float(ci.high)), float(res.pvalue)


def holm_adjusted(p_values) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest of the m finite ones
    times (m - i + 1), made monotone, at most 1; NaN stays NaN and is not counted in m."""
    import numpy as np

    p = np.asarray(p_values, dtype=float)
    finite = np.isfinite(p)
    adjusted = np.full(len(p), np.nan)
    if finite.any():
        order = np.argsort(p[finite], kind="stable")
        ps = p[finite][order]
        m = len(ps)
        values = np.empty(m)
        values[order] = np.maximum.accumulate(np.minimum(1.0, ps * (m - np.arange(m))))
        adjusted[finite] = values
    return adjusted.tolist()


PAIRED_RULE = (
    "Where both variants were measured in the same run in 3 or more rounds (compare RUN RUN --variant-a A "
    "--variant-b B), each round's visit of B is paired with the same round's visit of A, made seconds "
    "apart: the CI of B/A is the paired t-interval of the mean log ratio of the visit medians, "
    "exponentiated, and p is the same paired t-test, so that the machine's drift, which falls on both "
    "visits of a round alike, leaves the verdict."
)


def paired_log_ratio(a, b, level: float = 0.95) -> tuple[float, float, float]:
    """(CI low, CI high, two-sided p) for B/A from paired visit medians (a[i] and b[i] made in one round):
    the paired t on log(b[i]) - log(a[i]) (scipy.stats.ttest_rel); (NaN, NaN, NaN) with fewer than
    MIN_PROCESSES pairs or unequal counts; no spread in the log ratios: a point interval, p 1 when they
    are all 0 and 0 otherwise."""
    a, b = _clean(a), _clean(b)
    if len(a) != len(b) or len(a) < MIN_PROCESSES or min(a + b) <= 0:
        return math.nan, math.nan, math.nan
    import numpy as np
    from scipy.stats import ttest_rel

    d = np.log(b) - np.log(a)
    if d.var() == 0:
        m = float(d.mean())
        return math.exp(m), math.exp(m), 1.0 if m == 0 else 0.0
    res = ttest_rel(np.log(b), np.log(a))
    ci = res.confidence_interval(level)
    return math.exp(float(ci.low)), math.exp(float(ci.high)), float(res.pvalue)


def paired_difference(
    a, b, *, ratio: float | None = None, tolerance: float = SAME_TOLERANCE, alpha: float = ALPHA
) -> Difference:
    """B against A on visit medians paired by round (PAIRED_RULE): paired_log_ratio's CI and p, Cliff's
    delta over the visit medians, the same verdict rule; ratio defaults to the geometric mean of the
    visits' ratios."""
    ca, cb = _clean(a), _clean(b)
    lo, hi, p = paired_log_ratio(ca, cb)
    if ratio is None and len(ca) == len(cb) and ca and min(ca + cb) > 0:
        ratio = math.exp(sum(math.log(y / x) for x, y in zip(ca, cb, strict=True)) / len(ca))
    delta = u_test(ca, cb)[1]
    ratio = math.nan if ratio is None else ratio
    return Difference(ratio, lo, hi, p, delta, verdict(p, lo, hi, tolerance=tolerance, alpha=alpha))


def process_difference(
    a, b, *, ratio: float | None = None, tolerance: float = SAME_TOLERANCE, alpha: float = ALPHA
) -> Difference:
    """B against A on per-process medians (PROCESS_RULE): the Welch CI and p of welch_log_ratio, Cliff's
    delta over the process medians, the same verdict rule; ratio defaults to the ratio of the medians of
    the process medians."""
    import statistics

    ca, cb = _clean(a), _clean(b)
    if ratio is None:
        ratio = statistics.median(cb) / statistics.median(ca) if ca and cb else math.nan
    lo, hi, p = welch_log_ratio(ca, cb)
    delta = u_test(ca, cb)[1]
    return Difference(ratio, lo, hi, p, delta, verdict(p, lo, hi, tolerance=tolerance, alpha=alpha))
