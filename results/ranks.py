"""Whether two variants of one shape can be told apart: the rank test on their rows' raw samples, stratified
by visit where the run was made in rounds. One rule for the report's ranking and best-variant tables and
for the harness's settle rounds (harness.run.settle), which visit again the pairs this cannot yet tell
apart."""

from __future__ import annotations

import math

from .schema import float_list


def separated(
    first, other, *, tolerance: float | None = None, alpha: float | None = None, p: float | None = None
) -> bool:
    """Whether `other` is told apart from the faster `first` (rows with time_ms_median and samples_ms):
    at least `tolerance` (2%) slower by median and p < alpha (rank_p, unless the caller has it already) on
    their raw samples. Without 3 samples on each side there is no test, so nothing is separated by the 2%
    rule alone."""
    from .stats import ALPHA, SAME_TOLERANCE

    tolerance = SAME_TOLERANCE if tolerance is None else tolerance
    alpha = ALPHA if alpha is None else alpha
    lead = float(other["time_ms_median"]) / float(first["time_ms_median"])
    p = rank_p(first, other) if p is None else p
    return lead >= 1 + tolerance and math.isfinite(p) and p < alpha


def rank_p(first, other) -> float:
    """The ranking's p-value of two rows of one N: van Elteren's test with a stratum per visit where both
    rows split their samples into visits (round_samples: each round visits every variant of an N one after
    another, so the drift between rounds leaves the test), over the visits both have (a settle round,
    harness.run.settle, visits again only the variants still in doubt: the first k visits of any two cells
    are the same k rounds), else Mann-Whitney U on the pooled samples."""
    from .stats import mann_whitney, stratified_u

    a, b = visit_samples(first), visit_samples(other)
    if a is not None and b is not None:
        k = min(len(a), len(b))
        return stratified_u(a[:k], b[:k])
    return mann_whitney(_sample_list(first), _sample_list(other))


def visit_samples(row) -> list[list[float]] | None:
    """A row's samples split by visit (round_samples: each visit's count, in samples_ms's order); None
    without rounds, or where the counts do not add up to the samples."""
    counts = row.get("visit_samples") if hasattr(row, "get") else None
    if counts is None or isinstance(counts, str) or len(counts) < 2:
        counts = row.get("round_samples") if hasattr(row, "get") else None
    if counts is None or isinstance(counts, str) or len(counts) < 2:
        return None
    return split_visits(_sample_list(row), counts)


def split_visits(samples: list[float], counts) -> list[list[float]] | None:
    """samples_ms cut into its visits by round_samples' counts; None where a count is not a non-negative
    integer or they do not add up to the samples."""
    try:
        counts = [int(c) for c in counts]
    except (TypeError, ValueError):
        return None
    if any(c < 0 for c in counts) or sum(counts) != len(samples):
        return None
    out, start = [], 0
    for c in counts:
        out.append(samples[start : start + c])
        start += c
    return out


def _sample_list(row) -> list[float]:
    return float_list(row.get("samples_ms") if hasattr(row, "get") else None)
