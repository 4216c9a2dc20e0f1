"""A step that several cells of one variant share (results.steps.place_shared): placed where their summed
cost is least, said once per cell with how many stepped there, and never merged across variants, machines
or series measured in other runs."""

from __future__ import annotations

import pandas as pd

from attnbench.results import steps, steps_text

# a 10% step from run 8 (0-based); run 7 is halfway, closer to after: alone, the step may be at 7
HALFWAY = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.07, 1.1, 1.11, 1.09, 1.1, 1.12, 1.1]
CLEAN = [1.0, 0.99, 1.01, 1.0, 0.98, 1.02, 1.0, 1.0, 1.1, 1.09, 1.11, 1.1, 1.08, 1.1]


def frame(cells: dict[str, list[float]], variants: dict[str, str] | None = None, machine="vm", runs=None):
    """A history frame's columns that steps.find reads: a series of times per cell, in the same runs."""
    rows = []
    for cell, times in cells.items():
        for i, t in enumerate(times):
            run = (runs or {}).get(cell, "r")
            rows.append(
                {
                    "machine": machine,
                    "variant": (variants or {}).get(cell, "v"),
                    "cell_id": f"{(variants or {}).get(cell, 'v')}|{cell}",
                    "run_id": f"{run}{i:02d}",
                    "created": f"2026-01-{i + 1:02d}",
                    "status": "ok",
                    "time_ms_median": t,
                    "cal_matmul_tflops": None,
                    "cal_copy_gbps": None,
                    "git_commit": f"{i:02x}" * 20,
                }
            )
    return pd.DataFrame(rows)


def placed(found):
    return {s.cell_id: (s.at, s.first, s.cells) for s in found}


def test_alone_the_halfway_run_leaves_the_step_between_two_runs():
    assert placed(steps.find(frame({"a": HALFWAY}))) == {"v|a": (7, (7, 8), 1)}
    assert placed(steps.find(frame({"b": CLEAN}))) == {"v|b": (8, (8, 8), 1)}


def test_cells_of_one_variant_that_step_together_are_placed_at_one_run():
    found = steps.find(frame({"a": HALFWAY, "b": CLEAN, "c": CLEAN[:7] + [1.01] + CLEAN[8:]}))
    assert placed(found) == {f"v|{c}": (8, (8, 8), 3) for c in "abc"}
    line = steps_text.describe(next(s for s in found if s.cell_id == "v|a"))
    assert (
        "run 9 of 14), with 2 other cells of v that stepped there too; commit 0707070707 -> 0808080808"
        in line
    )
    assert "or any run" not in line  # placed together, the run is one


def test_other_variants_machines_and_runs_are_placed_alone():
    other_variant = steps.find(frame({"a": HALFWAY, "b": CLEAN}, variants={"b": "w"}))
    assert placed(other_variant) == {"v|a": (7, (7, 8), 1), "w|b": (8, (8, 8), 1)}
    other_runs = steps.find(frame({"a": HALFWAY, "b": CLEAN}, runs={"b": "s"}))
    assert placed(other_runs) == {"v|a": (7, (7, 8), 1), "v|b": (8, (8, 8), 1)}
    machines = pd.concat([frame({"a": HALFWAY}), frame({"b": CLEAN}, machine="other")])
    assert {(s.machine, s.at, s.cells) for s in steps.find(machines)} == {("vm", 7, 1), ("other", 8, 1)}


def test_steps_far_apart_in_one_variant_stay_where_each_series_put_them():
    late = [1.0] * 11 + [1.1] * 3
    found = steps.find(frame({"a": HALFWAY, "b": late}))
    assert placed(found) == {"v|a": (7, (7, 8), 1), "v|b": (11, (11, 11), 1)}


# eight runs of a 2-core VM, 1 round each: a variant file made 25% more work from run 5 (0-based 4) in `mine`
# (N 256, 512, 1024), and sdpa beside it unchanged
MINE = {
    "n256": [0.234, 0.283, 0.228, 0.281, 0.443, 0.319, 0.438, 0.443],
    "n512": [1.072, 0.863, 0.881, 1.053, 1.417, 1.128, 1.376, 1.41],
    "n1024": [3.909, 3.265, 3.463, 3.387, 4.645, 4.207, 4.733, 4.625],
}
SDPA = {
    "n256": [0.257, 0.234, 0.227, 0.277, 0.276, 0.231, 0.28, 0.277],
    "n512": [0.963, 0.856, 1.037, 1.055, 1.052, 0.858, 1.049, 1.034],
}


def test_steps_too_small_for_one_noisy_series_are_found_in_the_cells_that_took_them_together():
    alone = {cell: [s.at for s in steps.find(frame({cell: times}))] for cell, times in MINE.items()}
    assert alone == {"n256": [], "n512": [], "n1024": [4]}  # 8 runs of +-20% noise: one step of three
    sdpa = {f"sdpa-{c}": t for c, t in SDPA.items()}
    together = steps.find(frame({**MINE, **sdpa}, variants={c: "sdpa" for c in sdpa}))
    assert placed(together) == {f"v|{c}": (4, (4, 4), 3) for c in MINE}  # sdpa, unchanged, takes none
    sizes = {s.cell_id: s.change for s in together}
    assert sizes["v|n256"] > 0.5 and 0.3 < sizes["v|n512"] < 0.5


def test_a_step_one_cell_took_is_not_given_to_its_variants_other_cells():
    late = [1.0] * 6 + [1.3] * 6
    flat = [1.0, 1.02, 0.99, 1.01, 0.98, 1.0, 1.01, 0.99, 1.02, 1.0, 0.98, 1.01]
    found = steps.find(frame({"late": late, "a": flat, "b": flat[::-1], "c": flat[1:] + flat[:1]}))
    assert placed(found) == {"v|late": (6, (6, 6), 1)}


# an outside trial's store (6 runs of a 2-core VM, 1 round each): mine's variant file made N 256 3x slower
# from run 4 (0-based 3), while mine at N 512 drifted down in the same runs; sdpa unchanged beside it
OPPOSITE = {
    "n256": [0.6812, 0.5755, 0.5714, 1.7282, 1.7152, 1.45],
    "n512": [18.168, 16.2537, 10.3668, 10.9885, 9.1434, 12.9483],
    "n1024": [46.6522, 60.222, 25.7234, 45.8133, 46.0076, 48.6829],
}
OPPOSITE_SDPA = {
    "sdpa-n256": [0.5247, 0.4516, 0.4512, 0.4418, 0.4411, 0.4418],
    "sdpa-n512": [2.0407, 1.9285, 8.8443, 3.0208, 1.8428, 1.7802],
    "sdpa-n1024": [25.5292, 43.057, 23.3832, 14.593, 14.7117, 14.8045],
}


def _mine_and_sdpa(mine: dict[str, list[float]]):
    variants = {**{c: "mine" for c in mine}, **{c: "sdpa" for c in OPPOSITE_SDPA}}
    found = steps.find(frame({**mine, **OPPOSITE_SDPA}, variants=variants))
    return {s.cell_id: s for s in found}


def test_a_cell_that_stepped_the_other_way_never_hides_a_slowdown():
    """The trial's gate passed a 3x slowdown: pooled with N 512 (-32%, its own interval holding no change),
    the 2 cells as one were +47% and not significant after Holm. Cells are judged as one only where their
    steps go the same way."""
    found = _mine_and_sdpa(OPPOSITE)
    slow, other = found["mine|n256"], found["mine|n512"]
    assert slow.at == other.at == 3 and slow.cells == other.cells == 2  # placed together, as before
    assert slow.pooled is None and other.pooled is None  # but never judged as one
    assert slow.p == slow.own_p < 0.01 and slow.fails(0.05) and slow.gated == slow.own
    assert steps_text.verdict_text(slow, 0.05).startswith("the judge: p ")
    line = steps_text.describe(slow)
    assert "run 4 of 6), with 1 other cell of mine that stepped there the other way;" in line
    assert not other.fails(0.05) and other.verdict(0.05) is None  # faster: nothing for the gate to say


def test_a_cell_of_no_step_of_its_own_does_not_dilute_a_slowdown_it_went_the_way_of():
    """N 512 up 2% in the same runs after a slow first run, its own interval holding no change and leaving out
    the step of the 2 cells as one: that is not its step, and each is judged alone. A cell that is a step by
    its own test joins, however it compares with the others'."""
    quiet = {**OPPOSITE, "n512": [11.6, 10.0, 9.98, 10.22, 10.2, 10.22]}
    slow, other = (_mine_and_sdpa(quiet)[f"mine|{n}"] for n in ("n256", "n512"))
    assert slow.pooled is None and other.pooled is None and slow.fails(0.05) and not other.fails(0.05)
    assert other.own[0] > 1.0 and other.own[1] < 1.0 < other.own[2]  # up, but no step by its own test
    assert slow.cells == 2 and other.other_way == slow.other_way == 0
    assert "with 1 other cell of mine that stepped there too;" in steps_text.describe(slow)
    stepped = {**OPPOSITE, "n512": [10.4, 9.1, 10.5, 10.9, 11.3, 11.2]}  # +37.5% [+18.8%, +55.6%]
    slow, other = (_mine_and_sdpa(stepped)[f"mine|{n}"] for n in ("n256", "n512"))
    assert other.own[1] > 1.0 and other.as_one and other.pooled_cells == 2 and other.fails(0.05)
    assert slow.fails(0.05) and slow.p <= slow.own_p  # as one, no less sure than alone


def test_a_cell_whose_own_step_is_surer_than_its_cells_as_one_is_judged_by_its_own():
    """Two cells of one step, one quiet and one noisy: as one, the noisy cell makes the quiet cell's step less
    sure (p 7e-08 alone, 4e-05 as one). Pooling makes a step visible sooner, and never hides one: the quiet
    cell is judged by its own test, the noisy one with the quiet one."""
    quiet = [1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.3, 1.25, 1.35, 1.3, 1.28, 1.32]
    noisy = [1.0, 1.15, 0.9, 1.05, 0.95, 1.1, 1.2, 1.4, 1.2, 1.35, 1.25, 1.45]
    a, b = steps.find(frame({"a": quiet, "b": noisy}))
    (alone,) = steps.find(frame({"a": quiet}))
    assert a.p == alone.p and a.cells == b.cells == 2 and a.pooled == b.pooled and a.pooled_cells == 2
    assert a.p < a.pooled_p < b.own_p and not a.as_one and a.gated == a.own
    assert b.as_one and b.p == b.pooled_p and b.gated == b.pooled
    assert "the judge of its own step (its 2 cells as one, +" in steps_text.gate_text(a)
    assert "the judge of its 2 cells as one, +" in steps_text.gate_text(b)
