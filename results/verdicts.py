"""The verdict a count over Holm's family may give a cell (results.judge.Judged), as bench's race counts."""

from __future__ import annotations

from dataclasses import replace

from .judge import ALPHA, Judged


def holm_verdict(j: Judged, alpha: float = ALPHA) -> Judged:
    """The cell with its verdict as Holm's family allows: 'slower' or 'faster' only where its p_holm is
    below alpha as well, else 'ambiguous' (what a count of verdicts over a family says; in a blind
    comparison the floor takes Holm's place, module docstring 8)."""
    if j.verdict in ("slower", "faster") and not j.blind and not j.p_holm < alpha:
        return replace(j, verdict="ambiguous")
    return j
