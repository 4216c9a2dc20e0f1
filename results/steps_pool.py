"""The steps that cells of one variant took together, judged by the gate as one (results.steps finds and
places them, and gives each Step its own test first): only where their steps go one way and may be one step,
and never where a cell's own test is surer (Step.as_one). docs/history.md says the rule, and
benchmarks/history_check.py measures what it finds and what it costs."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .ttest import NO_TEST, Test, ratio_interval, student_test


def pool_shared(found: Sequence[tuple[Any, list[Any]]]) -> list[Any]:
    """Every step, those that cells of one variant took together (placed at one run, cells > 1) the same way
    (their own steps, Step.own, each slower or each faster) and as one step (_one_step) each given the cells'
    step as one (Step.pooled) and its p: per run the median over the cells of its time over the cell's median
    before the step (over the other variants' move too, where against_others), in the runs every cell's
    segments hold; Student's t on those medians, the run-to-run spread pooled over both sides (student_test).
    A run is the unit, so cells that move together in a run count as one; the median of several cells is
    steadier than one cell, and its spread is read over every run around the step. The gate judges a cell by
    that step unless its own test is surer (Step.as_one). Each step is told how many cells placed with it
    stepped the other way (Step.other_way)."""
    groups = defaultdict(list)
    for s, its in found:
        for step in its:
            way = (step.own[0] > 1.0) - (step.own[0] < 1.0)  # slower, faster, or (0) no move to share
            if step.cells > 1 and way:
                groups[(s.key, step.at, way)].append((s, step))
    out = {}
    for (key, at, way), members in groups.items():
        other_way = len(groups.get((key, at, -way), ()))
        for against in {step.against_others for _, step in members}:  # one rule of what is judged
            one, ratio, test = _one_step([m for m in members if m[1].against_others == against])
            for _, step in one:
                out[id(step)] = replace(step, pooled=(ratio, *ratio_interval(test)), pooled_p=test.p,
                                        pooled_cells=len(one))  # fmt: skip
        for _, step in members:
            out[id(step)] = replace(out.get(id(step), step), other_way=other_way)
    steps_ = [out.get(id(step), step) for _, its in found for step in its]
    return [replace(s, p=s.pooled_p) if s.as_one else s for s in steps_]


def _one_step(members: list[tuple[Any, Any]]) -> tuple[list[tuple[Any, Any]], float, Test]:
    """The cells of one group (one run, one way) judged as one, their step and its test. A cell that is a step
    by its own test (its interval leaves out no change) is one of them; a cell that is not joins where its
    step may be theirs (its interval holds the cells' step as one), so that a cell of no step never dilutes a
    real one; those left out are judged alone, and the rest as one again. [] where fewer than 2 are left, or
    they are judged against runs none of them shares."""
    while len(members) > 1:
        ratio, test = _pooled_test(members)
        if test.p != test.p and ratio != ratio:
            break  # the cells are judged against runs none of them shares: each alone
        joined = [(s, step) for s, step in members if _joins(step.own, ratio)]
        if len(joined) == len(members):
            return members, ratio, test
        members = joined
    return [], math.nan, NO_TEST


def _joins(own: tuple[float, float, float], ratio: float) -> bool:
    """A step of its own test (own: its interval leaves out 1), or one whose interval holds the cells' step
    (`ratio`), or one without an interval (too few runs to tell)."""
    _, low, high = own
    return not low <= 1.0 <= high or low <= ratio <= high


def _pooled_test(members: Sequence[tuple[Any, Any]]) -> tuple[float, Test]:
    """The cells' step as one: the ratio of the medians of the runs' values after and before, and its test."""
    at = members[0][1].at
    lo = max(step.against[0] for _, step in members)  # the runs every cell is judged against
    end = min(step.against[1] for _, step in members)
    hi = min(step.at + step.runs_after for _, step in members)
    against = members[0][1].against_others
    cells = []
    for s, _ in members:
        logs = [math.log(t) - (s.others[r] if against else 0.0) for r, t in enumerate(s.times)]
        centre = statistics.median(logs[lo:end]) if end > lo else 0.0
        cells.append([x - centre for x in logs])
    before, after = (
        [math.exp(statistics.median(cell[r] for cell in cells)) for r in side]
        for side in (range(lo, end), range(at, hi))
    )
    if not before:
        return math.nan, NO_TEST
    return statistics.median(after) / statistics.median(before), student_test(before, after)
