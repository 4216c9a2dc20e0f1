"""Power-law fits: time and peak memory against seq_len on log-log axes, with a 95% CI, R² and theory."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from attnbench.results.formulas import is_decode

from .tables import COMBO_AXES, device_memory, grouped, held_q, length_axis, length_name, ok_rows

MIN_FIT_POINTS = 3  # the fewest seq_lens a fit uses when the run has them (2 points give no CI)
CI_LEVEL = 0.95
AGREE_TOLERANCE = 0.2  # an exponent this close to theory (or with theory inside its CI) agrees with it
MAX_CI_HALF = 0.5  # a wider CI is too uncertain to agree or disagree with anything
ASYMPTOTIC_OCTAVES = 2  # a time fit's points: seq_len >= the largest / 2**2 (at least MIN_FIT_POINTS)
MEMORY_OCTAVES = ASYMPTOTIC_OCTAVES  # a memory fit's points: the same range (its constant is fitted apart)
# a cell's median is never known better than this (log units, ~2%): drift between cells of one run, which
# no cell's own samples show (ENV-NOTES: the same cell moves by several % within a run on a shared VM)
SE_FLOOR = 0.02
# a cell visited this many times or more in rounds (--rounds) takes its spread from the visits' medians
ROUNDS_FOR_SE = 3
# a run whose cells were all visited this many times or more is fitted through every visit (fit_visits)
ROUNDS_FOR_FIT = 2
# a peak's own uncertainty (log units, 0.1%): the profiler's byte counts repeat exactly from call to call, so
# what a memory fit's CI must show is how far the points stray from the model (the Birge ratio), not noise
MEM_SE = 0.001
# the standard error of a median of n normal samples is sqrt(pi/2) sigma / sqrt(n), and sigma = IQR / 1.349
MEDIAN_SE_PER_IQR = math.sqrt(math.pi / 2) / 1.349
# a weighted fit's N whose weight is under this share of its heaviest N's (its error 10x or more) weighs
# nothing: a fit through three N, one of them measured while the speed probe saw the machine at 5% of its
# speed, rests on the other two, and the two cannot show by their scatter that their own errors are too small
WEIGHTLESS_SHARE = 0.01

FIT_RULE = (
    "Time exponents: a weighted least-squares fit of log(median time) against log(seq_len) over the "
    f"asymptotic points: the ok seq_lens within the top {ASYMPTOTIC_OCTAVES} octaves (N >= the largest / "
    f"{2**ASYMPTOTIC_OCTAVES}), or those from the run's time_fit_from setting up where its preset sets one "
    "(a length from which calls are already asymptotic: the fits table's fit_seq_lens lists the points); "
    f"at least {MIN_FIT_POINTS}, or all when fewer; one fit per variant and "
    "combination of the other axes. Each point is weighted by its own uncertainty: the standard error of its "
    f"median from its raw samples (1.2533 × IQR/1.349 / sqrt(n), in log units), at least {SE_FLOOR:.0%} for "
    "the drift between cells that no cell's samples show, and |log speed_factor| more, in quadrature, where "
    "the speed probes before and after the cell saw the machine run slower or faster than usual. The 95% CI "
    "is slope ± 1.96 × its standard error where the points lie about the line as their own spreads say; "
    "where they scatter more, the standard error is scaled up by sqrt(chi²/dof) (the Birge ratio, as the "
    "Particle Data Group scales inconsistent measurements) and 1.96 becomes t(0.975, dof), the spread then "
    "being estimated from the points themselves: a run whose cells drifted, or whose times bend away from a "
    "power law, gets a wider CI. A run measured in rounds (--rounds R >= 2: every cell visited R times, "
    "round-robin over the whole run) is fitted through every visit's median instead (R points per seq_len): "
    "the Theil-Sen slope (the median of the pairwise slopes between points of different seq_lens) with "
    "Sen's rank-based 95% interval, so that one visit that met a busy moment moves neither the exponent nor "
    "its interval much, and the visits' own scatter, which holds the machine's drift over the run, sets the "
    f"width. Where all but two of a weighted fit's N weigh under {WEIGHTLESS_SHARE:.0%} of its heaviest N "
    "(an error 10x theirs: a cell the speed probe saw at a fraction of the machine's speed), the fit rests "
    "on those two and gives no CI, as a fit through two N gives none. "
    "Memory exponents: peak bytes are "
    "one deterministic measurement per cell, and a linear-memory variant's peak holds an N-independent "
    "workspace (a block of scores, a kernel's buffers) besides its O(N) part, which bends a plain power law "
    "below 1; so peak = c + a·N^b is fitted (c >= 0, in log space) over the top "
    f"{MEMORY_OCTAVES} octaves, whatever time_fit_from says (a kernel's workspace may change its size "
    "below them: sdpa's CPU peak grows 2.4x from N = 512 to 1024, 1.2x from 1536 to 2048), b is the "
    "exponent of the part that grows and c its constant, and the CI is b ± 1.96 × its standard error, each "
    f"point {MEM_SE:.1%} (byte counts repeat exactly from call to call), scaled by the Birge ratio (with t) "
    "the same way, so that the CI is as wide as the points' distance from the model; with fewer than 4 "
    "points, the weighted power law. Fewer than 2 ok seq_lens: no fit; 2: no CI."
)

EXTRAPOLATION_LIMIT = 8  # a fit is read at most 8× beyond the largest measured seq_len; further is a guess
TIME_BUDGET_MS = 1000.0  # "largest N within a time budget" for linear-memory variants: 1 s per call

# Time: every registered variant is exact attention, so Θ(N_q · N_k) work: N² where both grow with the
# series' length, N_k in a decode series (a few queries held against N_k keys). Memory: its capability
# record, "quadratic" (the N_q × N_k scores held: as the work) or "linear" (O(N_q + N_k): N either way).
MEMORY_THEORY = {"quadratic": 2.0, "linear": 1.0}


@dataclass(frozen=True)
class PowerFit:
    """value ≈ exp(intercept) · seq_len^exponent over the points used; exponent None without a fit."""

    exponent: float | None = None
    intercept: float | None = None  # natural log
    ci_low: float | None = None
    ci_high: float | None = None
    r2: float | None = None
    seq_lens: tuple[int, ...] = field(default=())  # the points the fit used
    reason: str = ""  # why there is no fit (or no CI)
    offset: float = 0.0  # a memory fit's N-independent part c (value ≈ c + exp(intercept) · N^exponent)
    scale: float | None = None  # the Birge ratio sqrt(chi²/dof) the CI was scaled by (>= 1); None: OLS
    weightless: tuple[int, ...] = field(default=())  # the N a weighted fit went through that weighed nothing

    @property
    def available(self) -> bool:
        return self.exponent is not None

    def predict(self, seq_len: float) -> float:
        """The fitted value at seq_len (NaN without a fit)."""
        if self.exponent is None or self.intercept is None:
            return math.nan
        return self.offset + math.exp(self.intercept + self.exponent * math.log(seq_len))

    def solve(self, value: float) -> float | None:
        """The seq_len at which the fit reaches value (None without a fit or a positive exponent)."""
        value = value - self.offset  # the part that grows with N must reach what the constant leaves
        if self.exponent is None or self.intercept is None or self.exponent <= 0 or value <= 0:
            return None
        # a near-flat fit (noisy small-N times) puts the answer beyond any float: cap it at ~1e304, which
        # every reader shows as "beyond N x measured" instead of overflowing
        return math.exp(min((math.log(value) - self.intercept) / self.exponent, 700.0))

    def text(self, digits: int = 2) -> str:
        """'1.98 [1.91, 2.05]', '1.98 (no CI)' (two N), '3.30 (no CI: N 512 weighs under 1%)' (a fit that
        rests on two N: WEIGHTLESS_SHARE) or 'n/a (reason)'."""
        if self.exponent is None:
            return f"n/a ({self.reason})" if self.reason else "n/a"
        if self.ci_low is None or self.ci_high is None:
            if self.weightless:
                which = ", ".join(f"{n:,}" for n in self.weightless)
                weighs = "weighs" if len(self.weightless) == 1 else "weigh"
                return f"{self.exponent:.{digits}f} (no CI: N {which} {weighs} under {WEIGHTLESS_SHARE:.0%})"
            return f"{self.exponent:.{digits}f} (no CI)"
        return f"{self.exponent:.{digits}f} [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}]"

    def r2_text(self) -> str:
        """R² in three decimals, '–' for a fit with no CI: a line through two N (or resting on two) has an R²
        of 1 that says nothing, and 'n/a' without a fit."""
        if self.exponent is None or self.r2 is None:
            return "n/a"
        return "–" if self.ci_low is None else f"{self.r2:.3f}"


def asymptotic_points(seq_lens, octaves: int = ASYMPTOTIC_OCTAVES, fit_from: int = 0) -> list[int]:
    """The seq_lens a fit uses: the distinct ones within `octaves` octaves of the largest (N >= largest /
    2**octaves), or, where the run says from which N its lengths are asymptotic (fit_from > 0, the
    time_fit_from setting), those from there up; at least MIN_FIT_POINTS of the largest (or all). A range
    of N, not a count of points: more lengths measured inside it add points to the fit instead of
    shrinking its range."""
    distinct = sorted({int(n) for n in seq_lens})
    if not distinct:
        return []
    if fit_from > 0:
        inside = [n for n in distinct if n >= fit_from]
    else:
        inside = [n for n in distinct if n * 2**octaves >= distinct[-1]]
    keep = max(len(inside), min(MIN_FIT_POINTS, len(distinct)))
    return distinct[len(distinct) - keep :]


def median_log_se(rel_iqr, n_samples) -> float:
    """The standard error of log(median) of a cell from its own samples (MEDIAN_SE_PER_IQR · IQR/median /
    sqrt(n)), at least SE_FLOOR; SE_FLOOR where they are unknown."""
    try:
        r, n = float(rel_iqr), float(n_samples)
    except (TypeError, ValueError):
        return SE_FLOOR
    if not (math.isfinite(r) and math.isfinite(n) and n >= 1 and r >= 0):
        return SE_FLOOR
    return max(SE_FLOOR, MEDIAN_SE_PER_IQR * r / math.sqrt(n))


def with_probe_after(df):
    """df with `speed_factor_after`: the speed factor of the probe taken right after each cell, which is
    the next measured cell's own probe (the worker probes before every cell), in the order the cells
    finished on one device of one run; NA for the last cell and for rows without a probe."""
    if df.empty or "speed_factor" not in df or "finished_at" not in df:
        return df
    probed = df[df["speed_factor"].notna()].sort_values("finished_at", kind="stable")
    keys = [k for k in ("run_id", "where") if k in probed]
    after = probed.groupby(keys, dropna=False)["speed_factor"].shift(-1) if keys else probed["speed_factor"]
    out = df.copy()
    out["speed_factor_after"] = after.reindex(df.index)
    return out


def round_log_se(round_medians) -> float | None:
    """The standard error of the mean of log(visit median) of a cell visited 3 or more times (--rounds), at
    least SE_FLOOR; None for fewer visits (or a median that is not a positive number)."""
    try:
        logs = [math.log(float(m)) for m in (round_medians if round_medians is not None else ())]
    except (TypeError, ValueError):
        return None
    if len(logs) < ROUNDS_FOR_SE or not all(math.isfinite(x) for x in logs):
        return None
    mean = sum(logs) / len(logs)
    var = sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)
    return max(SE_FLOOR, math.sqrt(var / len(logs)))


def cell_log_se(rel_iqr, n_samples, speed_factor=None, speed_factor_after=None, round_medians=None) -> float:
    """A cell's time uncertainty in log units. Visited 3 or more times in rounds over the whole run
    (--rounds; round_medians: each visit's median): the standard error of the mean of the visits' log
    medians (round_log_se), which holds the drift of the machine over the run as well as the samples'
    spread, since the visits span the run. Otherwise: its median's standard error (median_log_se) and,
    where the speed probes on either side of it (results.drift: the one just before it, and the next
    cell's, just after it) saw the machine run at a factor f of the run's usual speed, the larger |log f|
    besides, added in quadrature. The samples of one cell share the moment's load, so its IQR cannot
    show a machine that ran at half speed for the whole cell; the probe can, and a cell
    measured then should pull the fit less, and widen its CI, rather than bend it (drift over a run falls
    on its later, larger N alike, and would otherwise read as a wrong exponent with a narrow CI)."""
    by_rounds = round_log_se(round_medians)
    if by_rounds is not None:
        return by_rounds
    se = median_log_se(rel_iqr, n_samples)
    drift = 0.0
    for factor in (speed_factor, speed_factor_after):
        try:
            f = float(factor)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f) and f > 0:
            drift = max(drift, abs(math.log(f)))
    return math.hypot(se, drift)


# The normal's and Student's t quantiles and the plain least-squares line are computed here, not with
# scipy.stats, whose import (about 0.6 s) a report or bench's answer paid for these three formulas alone;
# tests/reports/test_report_fit.py checks them against scipy's. fit_visits (Theil-Sen) and fit_memory
# (bounded least squares) still import scipy, where a run's rounds or a memory series ask for them.


def _z() -> float:
    return statistics.NormalDist().inv_cdf(0.5 + CI_LEVEL / 2)


def _t(dof: int) -> float:
    """Student's t quantile of the CI on `dof` degrees of freedom (results.ttest: pure Python)."""
    from attnbench.results.ttest import t_ppf

    return t_ppf(0.5 + CI_LEVEL / 2, dof)


def _quantile(birge: float, dof: int) -> float:
    """The CI's multiplier: the normal's where the points agree with their own errors (birge 1), else
    Student's t on the fit's degrees of freedom (the errors are then estimated from the residuals)."""
    if birge <= 1.0 or dof < 1:
        return _z()
    return _t(dof)


def _line(x, ly) -> tuple[float, float, float, float]:
    """(slope, intercept, r, slope's standard error) of the ordinary least-squares line through (x, ly), as
    scipy.stats.linregress gives them (numpy arrays, x not all equal; the error NaN under 3 points)."""
    import numpy as np

    ssxm, ssxym, _, ssym = (float(v) for v in np.cov(x, ly, bias=True).flat)  # linregress's own sums
    r = min(1.0, max(-1.0, ssxym / math.sqrt(ssxm * ssym))) if ssxm and ssym else 0.0
    slope = ssxym / ssxm
    dof = len(x) - 2
    stderr = math.sqrt((1 - r**2) * ssym / ssxm / dof) if dof > 0 else math.nan
    return slope, float(np.mean(ly)) - slope * float(np.mean(x)), r, stderr


def _weighted_line(x, ly, se) -> tuple[float, float, float, float, float]:
    """(slope, intercept, slope's standard error scaled by the Birge ratio, the ratio, weighted R²) of a
    weighted least-squares line through (x, ly) with per-point standard errors se (numpy arrays)."""
    import numpy as np

    w = 1.0 / se**2
    xm, ym = np.sum(w * x) / np.sum(w), np.sum(w * ly) / np.sum(w)
    sxx = float(np.sum(w * (x - xm) ** 2))
    slope = float(np.sum(w * (x - xm) * (ly - ym)) / sxx)
    intercept = float(ym - slope * xm)
    resid = ly - (intercept + slope * x)
    dof = len(x) - 2
    chi2 = float(np.sum(w * resid**2))
    birge = max(1.0, math.sqrt(chi2 / dof)) if dof > 0 else 1.0
    total = float(np.sum(w * (ly - ym) ** 2))
    r2 = 1.0 - chi2 / total if total > 0 else 1.0
    return slope, intercept, birge / math.sqrt(sxx), birge, r2


def fit_power_law(
    seq_lens,
    values,
    *,
    asymptotic: bool = True,
    log_se=None,
    octaves: int = ASYMPTOTIC_OCTAVES,
    fit_from: int = 0,
    length: str = "seq_len",
) -> PowerFit:
    """Least-squares exponent of values ~ seq_len^b over the asymptotic points (or all, asymptotic=False).

    length: what seq_lens count (tables.length_axis: seq_len, or seq_k for a decode series), which a fit
    with too few points names in its reason as the report's words do ('ok at 1 N_k': tables.length_name).

    log_se: each value's standard error in log units (cell_log_se), one per value: a weighted fit whose
    CI is 1.96 standard errors, or t's where the Birge ratio scales them (FIT_RULE). Without it,
    ordinary least squares with a t CI on k-2 degrees of freedom (the plots' and panels' local fits,
    which have no samples).
    Non-finite or non-positive values are dropped first (they have no logarithm); repeated seq_lens
    (several runs) all enter the fit.
    """
    import numpy as np

    n = np.asarray(list(seq_lens), dtype=float)
    y = np.asarray(list(values), dtype=float)
    se = None if log_se is None else np.asarray(list(log_se), dtype=float)
    good = np.isfinite(n) & np.isfinite(y) & (n > 0) & (y > 0)
    n, y = n[good], y[good]
    if se is not None:  # an unknown or zero error: the floor (median_log_se floors the known ones)
        se = np.where(np.isfinite(se[good]) & (se[good] > 0), se[good], SE_FLOOR)
    distinct = sorted(set(n.astype(int).tolist()))
    if len(distinct) < 2:
        count = "no" if not distinct else "1"
        return PowerFit(seq_lens=tuple(distinct), reason=f"ok at {count} {length_name(length)}")
    used = asymptotic_points(distinct, octaves, fit_from) if asymptotic else distinct
    keep = np.isin(n.astype(int), used)
    x, ly = np.log(n[keep]), np.log(y[keep])
    if np.ptp(ly) == 0:  # a flat line: linregress would divide by zero for r
        return PowerFit(0.0, float(ly[0]), 0.0, 0.0, 1.0, tuple(used))
    if se is not None:
        slope, intercept, stderr, birge, r2 = _weighted_line(x, ly, se[keep])
        if len(used) < 3:
            reason = f"{len(used)} points, no CI"
            return PowerFit(slope, intercept, None, None, r2, tuple(used), reason=reason)
        light = weightless(n[keep], se[keep])
        if len(used) - len(light) == 2:  # it rests on two N: no scatter left to check their errors by
            reason = f"2 of {len(used)} points weigh in, no CI"
            return PowerFit(slope, intercept, None, None, r2, tuple(used), reason=reason, weightless=light)
        half = _quantile(birge, len(x) - 2) * stderr
        return PowerFit(slope, intercept, slope - half, slope + half, r2, tuple(used), scale=birge)
    slope, intercept, r, stderr = _line(x, ly)
    r2 = r**2
    dof = len(x) - 2
    if dof < 1:
        return PowerFit(slope, intercept, None, None, r2, tuple(used), reason=f"{len(x)} points, no CI")
    half = _t(dof) * stderr
    return PowerFit(slope, intercept, slope - half, slope + half, r2, tuple(used))


def weightless(seq_lens, log_se) -> tuple[int, ...]:
    """The N of a weighted fit's points (their standard errors `log_se`, one per point; an N repeated over
    several runs weighs their sum) whose weight is under WEIGHTLESS_SHARE of the heaviest N's."""
    weight: dict[int, float] = {}
    for n, se in zip(seq_lens, log_se, strict=True):
        weight[int(n)] = weight.get(int(n), 0.0) + 1.0 / float(se) ** 2
    heaviest = max(weight.values(), default=0.0)
    return tuple(sorted(n for n, w in weight.items() if w < WEIGHTLESS_SHARE * heaviest))


def fit_visits(
    seq_lens, visit_medians, octaves: int = ASYMPTOTIC_OCTAVES, fit_from: int = 0
) -> PowerFit | None:
    """Theil-Sen exponent of time ~ seq_len^b through every visit median of cells visited ROUNDS_FOR_FIT or
    more times (--rounds), over the asymptotic points, with Sen's 95% interval (FIT_RULE); None where any
    cell of those points has fewer visits (fit_power_law's weighted fit then). visit_medians: one sequence
    of visit medians per seq_len (NaN-free, positive)."""
    import numpy as np

    points: list[tuple[float, float]] = []
    distinct = sorted({int(n) for n in seq_lens if math.isfinite(float(n)) and n > 0})
    if len(distinct) < 3:
        return None
    used = asymptotic_points(distinct, octaves, fit_from)
    for n, visits in zip(seq_lens, visit_medians, strict=True):
        if int(n) not in used:
            continue
        try:
            values = [float(m) for m in (visits if visits is not None else ())]
        except (TypeError, ValueError):
            return None
        if len(values) < ROUNDS_FOR_FIT or not all(math.isfinite(m) and m > 0 for m in values):
            return None
        points += [(math.log(n), math.log(m)) for m in values]
    if len({x for x, _ in points}) < 3:
        return None
    from scipy import stats  # imported only for a fit through visits: the report of a run of one visit a cell

    x, ly = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    slope, intercept, low, high = (float(v) for v in stats.theilslopes(ly, x, alpha=CI_LEVEL)[:4])
    resid = ly - (intercept + slope * x)
    total = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / total if total > 0 else 1.0
    return PowerFit(slope, intercept, low, high, r2, tuple(used))


def fit_memory(seq_lens, values, length: str = "seq_len") -> PowerFit:
    """peak ≈ c + a·N^b (c >= 0: an N-independent workspace) over the ok seq_lens within MEMORY_OCTAVES
    octaves of the largest (the time fit's asymptotic points), fitted in log space (relative errors,
    MEM_SE each); the CI of b is 1.96 standard errors from the fit's Jacobian, or t's where the Birge
    ratio scales them.
    With fewer than 4 points (3 parameters need a degree of freedom for the CI), or where the fit fails,
    fit_power_law's weighted fit (`length`: what seq_lens count, as there)."""
    import numpy as np

    n = np.asarray(list(seq_lens), dtype=float)
    y = np.asarray(list(values), dtype=float)
    good = np.isfinite(n) & np.isfinite(y) & (n > 0) & (y > 0)
    n, y = n[good], y[good]
    plain = fit_power_law(n, y, log_se=[MEM_SE] * len(n), octaves=MEMORY_OCTAVES, length=length)
    used = asymptotic_points(n, MEMORY_OCTAVES)
    if len(used) < 4 or plain.exponent is None or plain.intercept is None:
        return plain
    from scipy.optimize import least_squares  # imported only where the model is fitted (0.2-0.3 s)

    keep = np.isin(n.astype(int), used)
    n, y = n[keep], y[keep]
    x, ly = np.log(n), np.log(y)
    top = float(np.max(y))

    def resid(p):  # p = (log a, b, c / top): c scaled so that the three parameters are of one size
        return (np.log(p[2] * top + np.exp(p[0] + p[1] * x)) - ly) / MEM_SE

    start = np.array([plain.intercept, plain.exponent, 0.0])
    try:
        res = least_squares(resid, start, bounds=([-np.inf, -np.inf, 0.0], [np.inf, np.inf, 1.0]))
        jtj = res.jac.T @ res.jac
        cov = np.linalg.inv(jtj)
    except (ValueError, np.linalg.LinAlgError):
        return plain
    if not res.success or not np.all(np.isfinite(cov)):
        return plain
    dof = len(x) - 3
    chi2 = float(np.sum(res.fun**2))
    birge = max(1.0, math.sqrt(chi2 / dof))
    b_se = math.sqrt(max(float(cov[1, 1]), 0.0)) * birge
    log_a, b, c = float(res.x[0]), float(res.x[1]), float(res.x[2]) * top
    half = _quantile(birge, dof) * b_se
    total = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - float(np.sum((res.fun * MEM_SE) ** 2)) / total if total > 0 else 1.0
    return PowerFit(b, log_a, b - half, b + half, r2, tuple(sorted(set(used))), offset=c, scale=birge)


# a fit this poor (R² below POOR_R2) with a point OFF_LINE times or more off its line names no growth: one N
# far off the others (a kernel 20x slower at one N) bends the line through them, and its exponent is noise
POOR_R2 = 0.9
OFF_LINE = 1.5


def off_line(fit: PowerFit, seq_lens, values) -> float | None:
    """The largest factor between a value at one of the fit's own N and its line there, where the fit is
    poor (R² < POOR_R2 and that factor >= OFF_LINE): its exponent then says nothing of how the series grows
    (which point is the odd one, a line through three cannot tell). None for a fit that holds, or no fit."""
    if fit.exponent is None or fit.r2 is None or fit.r2 >= POOR_R2:
        return None
    off = [
        max(y / fit.predict(n), fit.predict(n) / y)
        for n, y in zip(seq_lens, values, strict=True)
        if int(n) in fit.seq_lens and math.isfinite(y) and y > 0 and fit.predict(n) > 0
    ]
    worst = max(off, default=0.0)
    return worst if worst >= OFF_LINE else None


def approximate(variant: str, meta: dict[str, Any]) -> bool:
    """Whether the run recorded the variant as declared approximate (Capability.approximate)."""
    return bool(((meta.get("variant_capabilities") or {}).get(variant) or {}).get("approximate"))


def pair_exponent(rows, length: str) -> float:
    """How the (query, key) pairs of a series' cells, N_q · N_k, grow along its length: 2.0 where both grow
    with it (N_q = N_k = N; a packed cell's sequences with mean N), 1.0 where one is held (a decode series:
    N_q queries against a growing N_k; tables.length_axis's 'seq_k')."""
    if length == "seq_k":
        return 1.0
    if "seq_k" not in rows.columns:
        return 2.0
    held = rows["seq_k"].nunique() == 1 and is_decode(rows["seq_len"], rows["seq_k"]).any()
    return 1.0 if held and rows["seq_len"].nunique() > 1 else 2.0


def theory(variant: str, meta: dict[str, Any], pairs: float = 2.0) -> tuple[float | None, float | None, str]:
    """(time exponent, memory exponent, memory class) from the capability the run recorded and the cells'
    shape (`pairs`: pair_exponent, 2 for N², 1 for a decode series); None where unknown (a run from before
    attnbench 0.2 recorded none). Time grows as the pairs; memory as the pairs for a quadratic variant (its
    N_q × N_k scores), as N for a linear one. A variant declared approximate has no time theory: exact
    attention's pairs are the work it skips."""
    record = (meta.get("variant_capabilities") or {}).get(variant)
    mem_class = record.get("memory") if record else None
    if mem_class not in MEMORY_THEORY:
        return None, None, "unknown"
    memory = pairs if mem_class == "quadratic" else MEMORY_THEORY[mem_class]
    return None if approximate(variant, meta) else pairs, memory, mem_class


def no_theory_text(metas: dict[str, dict[str, Any]]) -> str | None:
    """Why the scaling table's theory is unknown, once for the table, where a run recorded no variant
    capabilities (theory() has nothing to read: attnbench before 0.2 recorded none); None where every run
    did."""
    without = [rid for rid, meta in metas.items() if not meta.get("variant_capabilities")]
    if not without:
        return None
    why = "recorded no variant capabilities (made before attnbench 0.2), so 'vs theory' says nothing"
    who = "runs" if len(without) > 1 else "run"
    if len(without) == len(metas):
        return f"Theory unknown for every variant: the {who} {why}."
    return f"Theory unknown for the cells of {', '.join(without)}: the {who} {why} there."


def agreement(fit: PowerFit, expected: float | None) -> str:
    """'agrees', 'above' or 'below' theory; 'uncertain' when the CI is too wide to say, or when there is
    none (a fit through two N: the findings say its growth is not measured); '' when unknown.

    A CI from 3 noisy points can span ±10 and so contain any theory: containment alone is no agreement.
    """
    if expected is None or fit.exponent is None:
        return ""
    if fit.ci_low is None or fit.ci_high is None or too_wide(fit.ci_low, fit.ci_high):
        return "uncertain"
    if agrees(fit.exponent, fit.ci_low, fit.ci_high, expected):
        return "agrees"
    return "above" if fit.exponent > expected else "below"


def too_wide(lo: float | None, hi: float | None) -> bool:
    """Whether a CI is wider than ±MAX_CI_HALF: too uncertain to agree or disagree with anything."""
    return lo is not None and hi is not None and (hi - lo) / 2 > MAX_CI_HALF


def agrees(exponent: float, lo: float | None, hi: float | None, expected: float) -> bool:
    """The one rule by which a fitted exponent (CI [lo, hi], None without one) is `expected`: within
    AGREE_TOLERANCE of it, or its CI contains it. The scaling table's 'agrees' and the findings' growth word
    ('quadratic' only where the exponent agrees with 2) both read it; a CI too wide is the caller's."""
    if abs(exponent - expected) <= AGREE_TOLERANCE:
        return True
    return lo is not None and hi is not None and lo <= expected <= hi


def largest_pow2(n: float | None) -> int | None:
    """The largest power of two not above n (None for None or n < 1)."""
    if n is None or not math.isfinite(n) or n < 1:
        return None
    return 1 << int(math.floor(math.log2(n)))


def extrapolated_text(n: int | None, measured: int | None) -> str:
    """A seq_len read off a fit, as far as the data supports it: '32,768', or '> 131,072 (beyond 8×
    measured)' when it lies more than EXTRAPOLATION_LIMIT × the largest measured seq_len away; 'n/a'."""
    if n is None:
        return "n/a"
    if measured and n > EXTRAPOLATION_LIMIT * measured:
        return f"> {EXTRAPOLATION_LIMIT * measured:,} (beyond {EXTRAPOLATION_LIMIT}× measured)"
    return f"{n:,}"


def time_fit_from(meta: dict[str, Any]) -> int:
    """The run's time_fit_from setting (the seq_len its time fits start at; 0: the top octaves), from its
    meta.json; 0 where it is absent (runs made before the setting) or not a non-negative integer."""
    sweep = meta.get("sweep") if isinstance(meta, dict) else None
    settings = sweep.get("settings") if isinstance(sweep, dict) else None
    value = settings.get("time_fit_from", 0) if isinstance(settings, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def time_fit(ok, length: str, meta: dict[str, Any]) -> PowerFit:
    """A series' time exponent as the report gives it (FIT_RULE): `ok`, the ok rows of one variant and
    combination of the other axes of one run (with_probe_after applied over the whole run), fitted against
    `length` (tables.length_axis) from the run's time_fit_from (`meta`: its meta.json): through every visit
    of a run measured in rounds (fit_visits), else weighted by each cell's uncertainty (cell_log_se). A
    column the rows lack (a history store's, which keeps no spreads or probes) counts as unknown. The one
    fit of a run's time exponent: the report's scaling table and the history site both call it."""

    def column(name: str) -> list[Any]:
        return list(ok[name]) if name in ok else [None] * len(ok)

    n = ok[length].to_numpy(dtype=float, na_value=math.nan)
    t = ok["time_ms_median"].to_numpy(dtype=float, na_value=math.nan)
    visits = column("visit_medians_ms")
    se = [
        cell_log_se(*cell)
        for cell in zip(
            column("rel_iqr"),
            column("n_samples"),
            column("speed_factor"),
            column("speed_factor_after"),
            visits,
            strict=True,
        )
    ]
    start = time_fit_from(meta)
    return fit_visits(n, visits, fit_from=start) or fit_power_law(
        n, t, log_se=se, fit_from=start, length=length
    )


def _series(df):
    """(key, rows, N_q) per series a fit is drawn through: each combination and variant, its decode cells
    apart from its others and one series per N_q they hold (tables.held_q: a decode series holds N_q and
    grows N_k, as the decode panel draws it), N_q None for the others."""
    for key, sub in grouped(df, list(COMBO_AXES) + ["variant"]):
        held = [
            held_q(r) for r in sub[[c for c in ("seq_len", "seq_k") if c in sub.columns]].to_dict("records")
        ]
        qs = sorted({int(q) for q in held if q is not None})
        if not qs:
            yield key, sub, None
            continue
        held = [-1 if q is None else int(q) for q in held]
        if -1 in held:
            yield key, sub[[q == -1 for q in held]], None
        for q in qs:
            yield key, sub[[h == q for h in held]], q


def scaling_table(df, metas: dict[str, dict[str, Any]]):
    """One row per variant and combination of the other axes: time and memory exponents against theory.

    N is the series' length (tables.length_axis): seq_len, or seq_k for a decode series.
    n_max_fit is the largest power-of-two seq_len whose predicted peak memory (memory fit extrapolated)
    stays within the device's memory, n_max_measured the largest ok seq_len, n_fit_text n_max_fit as
    far as the data supports it (extrapolated_text); for linear-memory variants, whose memory rarely
    binds, n_time_budget is the largest power-of-two seq_len whose predicted time per call stays within
    TIME_BUDGET_MS. peak_fraction_at_max is achieved / calibrated TFLOP/s at the largest ok seq_len.
    """
    import pandas as pd

    records = []
    df = with_probe_after(df)
    # every (combination, variant) that appears gets a row, so a variant that never ran ok shows "n/a"
    for key, sub, n_q in _series(df):
        ok = ok_rows(sub)
        length = length_axis(sub)  # a decode series (one seq_len, growing seq_k) is fitted against N_k
        n = ok[length].to_numpy(dtype=float, na_value=math.nan)
        m = ok["peak_mem_bytes"].astype("Float64").to_numpy(dtype=float, na_value=math.nan)
        meta = metas.get(str(key["run_id"]), {})
        tfit = time_fit(ok, length, meta)
        mfit = fit_memory(n, m, length)
        t_theory, m_theory, m_class = theory(str(key["variant"]), meta, pair_exponent(sub, length))
        dev_mem = device_memory(meta, str(key["device"]), sub["gpu_name"].dropna().unique())
        n_max_raw = mfit.solve(dev_mem) if dev_mem else None
        ok_n = n[~pd.isna(n)]
        measured = int(ok_n.max()) if len(ok_n) else None
        n_time = largest_pow2(tfit.solve(TIME_BUDGET_MS)) if m_class == "linear" else None
        frac = peak_fraction(ok, length, meta, key, sub["where"].dropna().unique())
        statuses = sub["status"].value_counts()
        records.append(
            {
                **key,
                "length": length,  # what N counts here: seq_len, or seq_k (N_k) for a decode series
                "seq_len": n_q,  # the N_q a decode series holds (held_q), NA for any other
                "ok_seq_lens": len(set(n[~pd.isna(n)].astype(int).tolist())),
                "statuses": ", ".join(f"{c} {s}" for s, c in statuses.items()),
                "time_exp": tfit.exponent,
                "time_ci_low": tfit.ci_low,
                "time_ci_high": tfit.ci_high,
                "time_r2": tfit.r2,
                "time_fit": tfit.text(),
                "time_theory": t_theory,
                "time_agreement": agreement(tfit, t_theory),
                "approximate": approximate(str(key["variant"]), meta),
                "mem_exp": mfit.exponent,
                "mem_ci_low": mfit.ci_low,
                "mem_ci_high": mfit.ci_high,
                "mem_r2": mfit.r2,
                "mem_fit": mfit.text(),
                "mem_const_bytes": mfit.offset,
                "mem_theory": m_theory,
                "mem_class": m_class,
                "mem_agreement": agreement(mfit, m_theory),
                "fit_seq_lens": " ".join(str(x) for x in tfit.seq_lens),
                "mem_fit_seq_lens": " ".join(str(x) for x in mfit.seq_lens),
                "device_mem_bytes": dev_mem,
                "n_max_pred": n_max_raw,
                "n_max_fit": largest_pow2(n_max_raw),
                "n_max_measured": measured,
                "n_fit_text": extrapolated_text(largest_pow2(n_max_raw), measured),
                "n_time_budget": n_time,
                "n_time_text": extrapolated_text(n_time, measured) if m_class == "linear" else "–",
                "peak_fraction_at_max": frac,
                "_time_fit": tfit,
                "_mem_fit": mfit,
            }
        )
    return pd.DataFrame(records)


def peak_fraction(ok, length: str, meta: dict[str, Any], key: dict[str, Any], wheres: Any) -> float:
    """Achieved TFLOP/s at a series' largest ok N (`length`: seq_len, or seq_k for a decode series) over the
    calibrated matmul TFLOP/s of its device and dtype (tables.calibrated_peak); NaN without either."""
    import pandas as pd

    from .tables import calibrated_peak

    peak = calibrated_peak(meta, str(key["device"]), str(key["dtype"]), wheres)
    if not len(ok) or not peak:
        return math.nan
    top = ok.sort_values(length).iloc[-1]
    return float(top["tflops"]) / peak if pd.notna(top["tflops"]) else math.nan


def combo_key(values: Any, variant: str | None = None) -> str:
    """A lookup key for one combination of the other axes (+ variant): str() keeps NA and NaN comparable."""
    parts = [str(values[a]) for a in COMBO_AXES]
    n_q = held_q(values)  # a decode series: one per N_q (scaling_table's _series)
    parts += [f"N_q={n_q}"] if n_q is not None else []
    return "|".join(parts + ([str(variant)] if variant is not None else []))


def fit_index(table) -> dict[str, tuple[PowerFit, PowerFit]]:
    """combo_key(row, variant) -> (time fit, memory fit) from a scaling_table."""
    if table is None or table.empty:
        return {}
    return {combo_key(r, r["variant"]): (r["_time_fit"], r["_mem_fit"]) for _, r in table.iterrows()}
