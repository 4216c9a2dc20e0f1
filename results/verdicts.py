"""A cell's verdict (results.judge's module docstring, 5 to 7), Holm's step-down over a family, and the
verdict Holm's family allows a cell (results.judge.Judged): what bench's race counts and what the gate of
results.judge fails, one rule for both. results.judge re-exports them: callers name them there."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .spreads import same_band
from .ttest import ALPHA, Test

TOLERANCE = 0.02  # a ratio whose CI stays within ±2% of 1 is 'same' (without a relative --fail-above)


def verdict(test: Test, *, tolerance: float = TOLERANCE, alpha: float = ALPHA, unseen: float = 0.0) -> str:
    """same, slower, faster or ambiguous (results.judge's module docstring, 5 to 7); `unseen` is the spread
    the evidence cannot see (a blind comparison's floor, the visit-to-visit floor of samples of few visits),
    which the ratio must clear as well: each floor is the largest ratio identical code showed as measured."""
    lo, hi = math.exp(test.low), math.exp(test.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "ambiguous"
    band = same_band(tolerance, unseen)
    if band > 1 and 1 / band <= lo and hi <= band:
        return "same"  # practically equal, even where a huge sample makes a 1% shift significant
    significant = math.isfinite(test.p) and test.p < alpha
    if significant and lo > 1 and test.ratio > 1 + unseen:
        return "slower"
    if significant and hi < 1 and test.ratio < 1 / (1 + unseen):  # as far below 1, in log terms
        return "faster"
    return "ambiguous"


def holm_verdict(j: Any, alpha: float = ALPHA) -> Any:
    """The cell (a results.judge.Judged, which imports this module) with its verdict as Holm's family
    allows: 'slower' or 'faster' only where its p_holm is below alpha as well, else 'ambiguous' (what a
    count of verdicts over a family says). A blind cell keeps its verdict: one 'slower' there cleared the
    floor, the largest ratio identical runs ever showed, which keeps identical code from failing, and
    Holm's adjustment is not laid on top of it (results.judge's module docstring 8)."""
    if j.verdict in ("slower", "faster") and not j.blind and not j.p_holm < alpha:
        return replace(j, verdict="ambiguous")
    return j


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest of the m finite ones times
    (m - i + 1), made monotone, at most 1; NaN stays NaN and is not counted in m."""
    finite = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, p * (len(finite) - rank)))
        out[i] = running
    return out
