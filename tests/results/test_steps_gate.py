"""The history gate judges as compare's gate does (results.judge, 7): a latest step fails when the judge's
test calls it slower and its p, Holm-adjusted over every series searched (one test per series), is below
ALPHA."""

from __future__ import annotations

import math

from attnbench.results import steps
from attnbench.results.judge import ALPHA


def step(p: float, *, latest=True, ratio=1.10, low=1.02, cell="c") -> steps.Step:
    return steps.Step(
        machine="vm", cell_id=cell, at=5, runs=9, ratio=ratio, low=low, high=ratio + 0.1, before={}, after={},
        calibration=None, latest=latest, p=p,
    )  # fmt: skip


def test_a_step_the_judge_calls_slower_fails_alone_and_passes_among_many_series_judged():
    alone = steps.holm_adjusted([step(0.01)])
    assert alone[0].family == 1 and alone[0].p_holm == 0.01 and alone[0].fails(0.05)
    crowd = steps.holm_adjusted([step(0.01), *(step(0.5, cell=f"c{k}") for k in range(9))])
    assert crowd[0].family == 10 and math.isclose(crowd[0].p_holm, 0.1) and not crowd[0].fails(0.05)
    assert crowd[0].p_holm >= ALPHA > crowd[0].p
    # 42 series searched, one with a step: the 41 without one are tests that found nothing
    (searched,) = steps.holm_adjusted([step(0.01)], series=42)
    assert searched.family == 42 and math.isclose(searched.p_holm, 0.42) and not searched.fails(0.05)


def test_only_latest_steps_with_a_test_are_the_family_and_only_they_fail():
    found = [step(0.001, latest=False), step(math.nan, cell="new"), step(0.004, cell="x")]
    found = steps.holm_adjusted(found)
    assert [s.family for s in found] == [0, 0, 1]
    assert not found[0].fails(0.05) and not found[1].fails(0.05) and found[2].fails(0.05)
    assert found[1].judged is False and math.isnan(found[1].p_holm)


def test_the_gate_wants_the_interval_above_one_and_the_size_above_the_limit():
    (low,) = steps.holm_adjusted([step(0.01, low=0.99)])
    (small,) = steps.holm_adjusted([step(0.01, ratio=1.04)])
    assert not low.fails(0.05) and not small.fails(0.05) and small.fails(0.03)
