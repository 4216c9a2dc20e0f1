"""The history gate judges as compare's gate does (results.judge, 7): a latest step fails when the judge's
test calls it slower and its p, Holm-adjusted over its machine's series that could have been judged (one
test per series), is below ALPHA."""

from __future__ import annotations

import math
from dataclasses import replace

from attnbench.results import steps, steps_text
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
    (searched,) = steps.holm_adjusted([step(0.01)], series={"vm": 42})
    assert searched.family == 42 and math.isclose(searched.p_holm, 0.42) and not searched.fails(0.05)


def test_a_step_slower_only_beyond_the_others_while_its_own_time_fell_is_said_not_failed():
    """The reference store's sdpa_flash at N 2,048: its own time -21% across a step where the other variants
    went x0.59 (a setting that sped them far more), so +31% beyond them. Its time did not rise: no slowdown
    to fail a night on; the line says why."""
    (fell,) = steps.holm_adjusted(
        [replace(step(0.0001, ratio=0.787, low=0.46), runs_before=4, runs_after=11, against=(0, 4),
                 others=0.59, beyond=1.314, beyond_interval=(1.08, 1.53), p_holm=0.0001)]
    )  # fmt: skip
    assert fell.gated_change > 0.05 and fell.verdict(0.05) == "fell" and not fell.fails(0.05)
    assert "its own time fell (-21.3%): not a slowdown" in steps_text.verdict_text(fell, 0.05)
    rose = replace(fell, ratio=1.02, low=0.95)  # the same move beyond the others, its own time up: fails
    assert rose.verdict(0.05) == "fails"


def test_each_machine_is_a_family_of_its_own():
    """Another machine's series, and its steps, are another question: they never dilute this machine's."""
    mine, theirs = step(0.001), replace(step(0.5, cell="d"), machine="gpu")
    found = steps.holm_adjusted([mine, theirs], series={"vm": 6, "gpu": 900})
    assert [s.family for s in found] == [6, 900] and math.isclose(found[0].p_holm, 0.006)
    assert found[0].fails(0.05) and "Holm-adjusted 0.006 over 6 series of this machine" in (
        steps_text.gate_text(found[0])
    )


def test_the_family_is_the_series_that_could_have_been_judged():
    """A series of fewer than 6 runs can hold no step with 3 runs a side: it is no test in the family, as a
    store of every machine's few runs made it (the edited variant's 3 cells passed beside 2 H200 runs)."""
    import pandas as pd

    df = _store(lambda v, k, i: 0.01 * ((i * 7 + k * 3 + len(v)) % 5), runs=9, cells=3, step=1.3, after=4)
    short = _store(lambda v, k, i: 0.0, stepped=(), others=("gpu_v",), runs=2, cells=200).assign(
        machine="gpu"
    )
    short5 = _store(lambda v, k, i: 0.0, stepped=(), others=("few",), runs=5, cells=50)
    alone = steps.find(df)
    together = steps.find(pd.concat([df, short, short5], ignore_index=True))
    judged = [s for s in together if s.latest and s.judged]
    assert judged and [(s.p_holm, s.family) for s in judged] == [
        (s.p_holm, s.family) for s in alone if s.latest and s.judged
    ]
    assert {s.family for s in judged} == {9}  # mine, a and b: 3 cells each, 9 runs


def test_a_step_after_a_short_segment_is_judged_against_the_runs_before_it():
    """3 runs at 1.0, 2 at 0.6, then 5 at 1.5: the 2-run segment between the steps never grows, so the latest
    step is judged against the 3-run segment before it, not left without a test for ever."""
    df = _series([1.0] * 3 + [0.6] * 2 + [1.5] * 5)
    *_, latest = steps.find(df)
    assert latest.latest and latest.at == 5 and latest.short_before == 2 and latest.against == (0, 3)
    assert latest.judged and latest.verdict(0.05) == "fails" and latest.fails(0.05)
    assert 1.4 < latest.ratio < 1.6 and 2.4 < latest.short_ratio < 2.6 and latest.low > 1.4
    line = steps_text.describe(latest)
    assert line.startswith(f"v|a on vm: {latest.change:+.1%} [{latest.low - 1:+.1%}, ")
    assert "] against runs 1 to 3 (the 2 runs just before it, between two steps, are too few" in line
    assert f"over them alone it is {latest.short_ratio - 1:+.1%}) at run r05" in line


def test_a_step_no_test_can_ever_judge_is_said_and_pending_only_while_runs_after_it_are_few():
    *_, new = steps.find(_series([1.0] * 2 + [1.5] * 2))
    assert new.verdict(0.05) == "pending" and "the next runs decide it" in steps_text.verdict_text(new, 0.05)
    *_, old = steps.find(_series([1.0] * 2 + [1.5] * 8))
    assert old.verdict(0.05) == "untestable" and not old.fails(0.05) and not old.judged
    assert "no test can ever judge it: 2 runs before it in its whole series" in steps_text.verdict_text(
        old, 0.05
    )


def _series(levels, *, noise=0.01, seed=1, **columns):
    """A frame of one series ("v|a" on "vm"): run i at levels[i] x a seeded jitter; `columns` each a list of
    per-run values (a variant_source, a torch version)."""
    import random

    import pandas as pd

    rng = random.Random(seed)
    rows = [
        {
            "machine": "vm",
            "variant": "v",
            "cell_id": "v|a",
            "run_id": f"r{i:02d}",
            "created": f"2026-01-01T{i:02d}",
            "status": "ok",
            "time_ms_median": level * math.exp(rng.gauss(0, noise)),
            "cal_matmul_tflops": None,
            "cal_copy_gbps": None,
            **{k: v[i] for k, v in columns.items()},
        }  # fmt: skip
        for i, level in enumerate(levels)
    ]
    return pd.DataFrame(rows)


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


def _store(cells_noise, *, stepped=("mine",), others=("a", "b"), runs=20, after=3, step=1.10, cells=6):
    """A frame of one machine: `cells` series of each variant over `runs` runs, `stepped` variants `step`
    slower in their last `after` runs; each run's time 1 x exp of cells_noise(variant, cell, run)."""
    import pandas as pd

    rows = []
    for v in (*stepped, *others):
        for k in range(cells):
            for i in range(runs):
                slower = step if v in stepped and i >= runs - after else 1.0
                rows.append(
                    {
                        "machine": "vm", "variant": v, "cell_id": f"{v}|n{k}", "run_id": f"r{i:02d}",
                        "created": f"2026-01-01T{i:02d}", "status": "ok",
                        "time_ms_median": slower * math.exp(cells_noise(v, k, i)),
                        "cal_matmul_tflops": None, "cal_copy_gbps": None,
                    }
                )  # fmt: skip
    return pd.DataFrame(rows)


def test_cells_that_stepped_together_are_judged_as_one_step_surer_than_any_cell_alone():
    import random

    rng = random.Random(7)
    noise = {(v, k, i): rng.gauss(0, 0.03) for v in "mab" for k in range(6) for i in range(20)}
    found = steps.find(_store(lambda v, k, i: noise[(v[0], k, i)]))
    mine = [s for s in found if s.variant == "mine" and s.latest]
    assert len(mine) == 6 and all(s.cells == 6 and s.at == 17 and s.pooled is not None for s in mine)
    assert len({s.pooled for s in mine}) == 1 and all(s.fails(0.05) for s in mine)
    assert not any(s.fails(0.05) for s in found if s.variant != "mine")
    # the cells' step as one has a narrower interval than any cell's own
    alone = [s.beyond_interval for s in mine]
    ratio, low, high = mine[0].pooled
    assert 1.0 < low < ratio < high and high - low < min(h - lo for lo, h in alone)
    assert "of its 6 cells as one, +" in steps_text.gate_text(mine[0])


def test_cells_that_move_together_in_every_run_count_as_one_run_not_six():
    import random

    from attnbench.results.ttest import student_test

    rng = random.Random(3)
    shared = [rng.gauss(0, 0.03) for _ in range(20)]  # every cell of a run the same: no more than one cell
    found = steps.find(_store(lambda v, k, i: shared[i], others=(), step=1.3, after=5))
    mine = [s for s in found if s.latest]
    assert len(mine) == 6 and all(s.cells == 6 and s.at == 15 for s in mine)
    times = [math.exp(x) for x in shared]
    times = times[:15] + [1.3 * t for t in times[15:]]
    assert math.isclose(mine[0].p, student_test(times[:15], times[15:]).p, rel_tol=1e-9)


def test_two_runs_of_one_run_id_are_two_runs_to_the_other_variants_move():
    """results.history keeps two runs made in the same second on hosts of one name under two run_keys."""
    df = _store(lambda v, k, i: 0.0, runs=4, after=0, cells=2)
    df["run_key"] = df["run_id"] + "@t"
    df.loc[df["run_id"] == "r03", "run_key"] = "r02@t#other"
    df.loc[df["run_id"] == "r03", "run_id"] = "r02"  # same run_id, another run
    moves = steps.machine_moves(df)
    assert {run for _, run in moves} == {"r00@t", "r01@t", "r02@t", "r02@t#other"}


def test_a_broken_series_whose_run_fields_are_missing_is_said_not_raised():
    """breaks had its own copy of run_fields, which asked `bool(pd.NA != pd.NA)` of a run without a path."""
    import pandas as pd

    from attnbench.results import breaks

    df = pd.DataFrame({
        "machine": ["vm"] * 2, "cell_id": ["c"] * 2, "variant": ["v"] * 2, "status": ["ok", "wrong"],
        "run_id": ["r0", "r1"], "created": ["t0", "t1"],
        "path": pd.array([pd.NA, pd.NA], dtype="string"), "git_commit": [None, None],
    })  # fmt: skip
    (broken,) = breaks.find(df)
    assert broken.latest["path"] is None and broken.last_ok["run_id"] == "r0"


def test_missing_compares_each_sweep_with_itself_and_a_frame_without_sweeps_as_one():
    """Sweep a (runs r0, r2) and sweep b (r1, r3) interleaved: r2 lost c2, which a had ok in r0; b's runs
    between and after change nothing. A frame without the `sweep` column (made by hand) is one sweep: r3
    against r2, which had c1 ok."""
    import pandas as pd

    from attnbench.results import breaks

    runs = [("r0", "a", ["c1", "c2"]), ("r1", "b", ["c3"]), ("r2", "a", ["c1"]), ("r3", "b", ["c3"])]
    df = pd.DataFrame(
        [{"machine": "vm", "cell_id": c, "variant": "v", "status": "ok", "run_id": r, "run_key": r,
          "created": f"t{r}", "sweep": s, "path": None} for r, s, cells in runs for c in cells]
    )  # fmt: skip
    (gone,) = breaks.missing(df)
    assert (gone.cell_id, gone.latest["run_id"], gone.before["run_id"], gone.sweep) == ("c2", "r2", "r0", "a")
    assert breaks.describe_missing(gone).endswith("no row in run r2 (tr2), the latest of its sweep")
    assert [(g.cell_id, g.latest["run_id"]) for g in breaks.missing(df.drop(columns="sweep"))] == [
        ("c1", "r3")
    ]


def test_missing_sees_the_latest_run_of_a_sweep_that_has_no_cells():
    """A run with no cells (stopped before its first row) is in no history frame (cells joined to runs): the
    runs frame (results.history_runs.runs) gives it, and it is the latest of its sweep on its machine, lacking
    every cell the run before had ok; another machine's runs and a cell not ok before are not said."""
    import pandas as pd

    from attnbench.results import breaks

    cells = [("r0", "vm", "c1", "ok"), ("r0", "vm", "c2", "wrong"), ("r0", "gpu", "c3", "ok"),
             ("r1", "gpu", "c3", "ok")]  # fmt: skip
    df = pd.DataFrame(
        [{"machine": m, "cell_id": c, "variant": "v", "status": s, "run_id": r, "run_key": r,
          "created": f"t{r}", "sweep": "a", "path": None} for r, m, c, s in cells]
    )  # fmt: skip
    runs = pd.DataFrame(
        [{"machine": m, "run_id": r, "run_key": r, "created": f"t{r}", "sweep": "a", "path": None}
         for r, m in (("r0", "vm"), ("r0", "gpu"), ("r1", "gpu"), ("r2", "vm"))]
    )  # fmt: skip
    assert breaks.missing(df) == []  # r2 is not in the frame: r0 is vm's latest run
    (gone,) = breaks.missing(df, runs)
    assert (gone.machine, gone.cell_id, gone.latest["run_id"], gone.before["run_id"]) == (
        "vm",
        "c1",
        "r2",
        "r0",
    )
    assert breaks.describe_missing(gone).endswith("no row in run r2 (tr2), the latest of its sweep")
