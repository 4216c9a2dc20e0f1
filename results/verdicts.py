"""The verdict Holm's family allows a cell (results.judge.Judged): what bench's race counts and what the
gate of results.judge fails, one rule for both."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .ttest import ALPHA


def holm_verdict(j: Any, alpha: float = ALPHA) -> Any:
    """The cell (a results.judge.Judged, which imports this module) with its verdict as Holm's family
    allows: 'slower' or 'faster' only where its p_holm is below alpha as well, else 'ambiguous' (what a
    count of verdicts over a family says). A blind cell keeps its verdict: one 'slower' there cleared the
    floor, the largest ratio identical runs ever showed, which keeps identical code from failing, and
    Holm's adjustment is not laid on top of it (results.judge's module docstring 8)."""
    if j.verdict in ("slower", "faster") and not j.blind and not j.p_holm < alpha:
        return replace(j, verdict="ambiguous")
    return j
