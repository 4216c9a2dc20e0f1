"""results.judge: the t distribution against scipy, the one level, pairing by key, the control, the blind
floor and its source, Holm's family and the gate, the rule text, and `separated` (the ranking's and the
settle rounds' test). Cells are built in memory; tests/reports/test_report_compare.py runs them through
real run directories."""

from __future__ import annotations

import glob
import json
import math
import random
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import ROOT

from attnbench.results import judge
from attnbench.results.judge import Cell, Design, Side, Threshold

GATE = Threshold("median", 0.05, True, "median:5%")


# ---- the t distribution ----------------------------------------------------------------------------------

DFS = [0.5, 1, 1.5, 2, 3, 4.7, 7, 10, 29.3, 100, 1e3, 1e5]


@pytest.mark.parametrize("df", DFS)
def test_t_sf_and_ppf_match_scipy(df):
    from scipy import stats

    for t in [0, 1e-6, 0.1, 0.5, 1, 1.96, 2, 3, 5, 10, 50, 300, -0.5, -3, -40]:
        assert judge.t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-300)
    for q in [0.001, 0.025, 0.1, 0.5, 0.6, 0.9, 0.95, 0.975, 0.99, 0.999, 0.9999]:
        assert judge.t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9, abs=1e-12)


def test_t_distribution_edges_and_beta():
    from scipy import special

    assert math.isnan(judge.t_sf(math.nan, 3)) and math.isnan(judge.t_sf(1.0, 0))
    assert judge.t_sf(math.inf, 3) == 0.0 and judge.t_sf(-math.inf, 3) == 1.0
    assert math.isnan(judge.t_ppf(0.0, 3)) and math.isnan(judge.t_ppf(1.0, 3))
    for a, b, x in [(0.5, 0.5, 0.3), (2.0, 0.5, 0.99), (50.0, 0.5, 0.5), (1.5, 4.0, 0.01)]:
        assert judge.beta_inc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10)


def _logs(xs):
    return [math.log(x) for x in xs]


def test_the_tests_are_scipys_on_the_logs():
    from scipy import stats

    rng = random.Random(1)
    a = [10 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(7)]
    b = [11 * (1 + rng.uniform(-0.2, 0.2)) for _ in range(5)]
    welch = judge.welch_test(a, b)
    ref = stats.ttest_ind(_logs(b), _logs(a), equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert (welch.p, welch.low, welch.high) == pytest.approx((ref.pvalue, ci.low, ci.high), rel=1e-8)
    assert welch.ratio == pytest.approx(math.exp(sum(_logs(b)) / 5 - sum(_logs(a)) / 7))
    paired = judge.paired_test(a[:5], b)
    ref = stats.ttest_rel(_logs(b), _logs(a[:5]))
    ci = ref.confidence_interval(0.95)
    assert (paired.p, paired.low, paired.high) == pytest.approx((ref.pvalue, ci.low, ci.high), rel=1e-8)


def test_the_tests_without_spread_or_replicates():
    same = judge.paired_test([1.0, 2.0, 3.0], [1.1, 2.2, 3.3])  # every pair 10% apart: certain
    assert same.p < 1e-20 and same.ratio == pytest.approx(1.1) and same.high - same.low < 1e-12
    exact = judge.paired_test([1.0, 2.0, 4.0], [1.0, 2.0, 4.0])  # no spread at all: a point, p 1
    assert (exact.p, exact.low, exact.high) == (1.0, 0.0, 0.0)
    assert judge.welch_test([2.0] * 3, [2.0] * 3).p == 1.0  # equal and without spread: no evidence
    assert judge.welch_test([1.0, 2.0], [1.0, 2.0, 3.0]) is judge.NO_TEST  # fewer than 3 a side
    assert judge.paired_test([1.0, 0.0, 2.0], [1.0, 1.0, 1.0]) is judge.NO_TEST  # a time <= 0: no log


# ---- verdict and Holm -------------------------------------------------------------------------------------


def _test(lo: float, hi: float, p: float) -> judge.Test:
    return judge.Test((math.log(lo) + math.log(hi)) / 2, math.log(lo), math.log(hi), p)


@pytest.mark.parametrize(
    "lo, hi, p, unseen, expected",
    [
        (0.99, 1.01, 0.001, 0.0, "same"),  # significant, but within ±2%: practically equal
        (1.05, 1.10, 0.001, 0.0, "slower"),
        (0.80, 0.90, 0.001, 0.0, "faster"),
        (1.05, 1.10, 0.2, 0.0, "ambiguous"),  # not significant
        (0.95, 1.10, 0.01, 0.0, "ambiguous"),  # the CI spans 1
        (1.05, 1.10, 0.001, 0.48, "ambiguous"),  # blind: inside the floor
        (2.00, 2.10, 0.001, 0.48, "slower"),  # blind: beyond it
        (0.99, 1.01, 0.5, 0.48, "ambiguous"),  # blind: never 'same' where the floor passes the band
        (0.995, 1.005, 0.5, 0.01, "same"),  # a stated 1%: 'same' within ±1%
    ],
)
def test_verdict_rule(lo, hi, p, unseen, expected):
    assert judge.verdict(_test(lo, hi, p), unseen=unseen) == expected


def test_holm_step_down():
    # five finite p: 1e-6 x 5, then 0.019 x 4 = 0.076, 0.3 x 3, 0.5 x 2 made monotone, 0.8 x 1
    out = judge.holm([0.019, 1e-6, 0.5, 0.3, math.nan, 0.8])
    assert out[:4] == pytest.approx([0.076, 5e-6, 1.0, 0.9]) and math.isnan(out[4]) and out[5] == 1.0


# ---- levels, pairing, the control ------------------------------------------------------------------------


def _visits(medians, n=4):
    """A side measured in len(medians) visits of n samples each (±0.5% around each median)."""
    samples = tuple(m * (1 + 0.005 * ((i % 3) - 1)) for m in medians for i in range(n))
    return Side(sorted(medians)[len(medians) // 2], samples, tuple(medians), (n,) * len(medians))


def _ok(a: Side, b: Side, **kw) -> Cell:
    return Cell("ok", "ok", a, b, **kw)


def test_one_level_for_the_whole_comparison():
    three, two = _visits([1.0, 1.1, 0.9]), _visits([1.0, 1.1])
    assert judge.choose_level([_ok(three, three)], Design()) == "visit"
    # one cell with 2 visits: every cell is judged by its samples
    assert judge.choose_level([_ok(three, three), _ok(two, three)], Design()) == "sample"
    sets = Side(1.0, runs=(1.0, 1.1, 0.9), run_index=(0, 1, 2), run_visits=((1.0,),) * 3)
    assert judge.choose_level([_ok(sets, sets)], Design()) == "run"
    # a cell not ok in both runs is not judged and does not count
    assert judge.choose_level([_ok(three, three), Cell("ok", "oom", two, None)], Design()) == "visit"
    j = judge.judge([_ok(three, three), _ok(two, three)], Design())
    assert j.level == "sample" and [c.n_a for c in j.cells] == [12, 8]


def test_visits_of_one_run_pair_by_round_over_the_visits_both_have():
    # the machine swings ±20% from round to round; B is 10% slower in each round; A was visited twice more
    swing = [1.0, 1.2, 0.8, 1.1, 0.9]
    a = _visits([s for s in swing] + [0.5, 0.5])  # two settle visits met a machine twice as fast
    b = _visits([1.1 * s * (1 + 0.002 * i) for i, s in enumerate(swing)])
    paired = judge.judge([_ok(a, b)], Design(threshold=GATE, same_run=True)).cells[0]
    assert paired.paired and paired.n_a == paired.n_b == 5
    assert (
        paired.ratio == pytest.approx(1.104, abs=0.005) and paired.verdict == "slower" and paired.regression
    )
    # two different runs: nothing pairs, the swing is spread, and the comparison is blind
    apart = judge.judge([_ok(a, b)], Design(threshold=GATE)).cells[0]
    assert not apart.paired and apart.blind and apart.verdict == "ambiguous" and not apart.regression
    # visits without their sample counts (old --processes medians) never pair
    counted = judge.Side(a.median, a.samples, a.visits, ())
    assert not judge.judge([_ok(counted, b)], Design(same_run=True)).cells[0].paired


def test_interleaved_run_sets_pair_by_run_index_over_the_runs_both_have():
    drift = [1.12, 0.88, 1.06, 0.94, 1.0]  # what the runs made back to back met alike

    def runs(scale, missing):
        keep = [i for i in range(5) if i != missing]
        return Side(1.0, runs=tuple(scale * drift[i] for i in keep), run_index=tuple(keep))

    a, b = runs(1.0, 2), runs(1.10, 3)  # A lacks run 3 (index 2), B run 4 (index 3)
    paired = judge.judge([_ok(a, b)], Design(interleaved=True)).cells[0]
    assert paired.paired and paired.n_a == 3 and paired.ratio == pytest.approx(1.10)
    assert paired.verdict == "slower" and not paired.blind  # the run level sees the spread between runs
    unpaired = judge.judge([_ok(a, b)], Design()).cells[0]
    assert not unpaired.paired and unpaired.n_a == 4 and unpaired.verdict == "ambiguous"


def test_a_control_divides_each_visit_by_its_own_rounds_visit():
    # run B ran 15% slow throughout and ±20% from round to round; the control met the same rounds
    rounds_a, rounds_b = [1.0, 1.2, 0.8, 1.1], [1.15 * r for r in [0.9, 1.1, 1.2, 0.8]]
    ctrl_a, ctrl_b = _visits([2.0 * r for r in rounds_a]), _visits([2.0 * r for r in rounds_b])
    twin = _ok(_visits(rounds_a), _visits(rounds_b), control_a=ctrl_a, control_b=ctrl_b)
    plant = _ok(_visits(rounds_a), _visits([1.1 * r for r in rounds_b]), control_a=ctrl_a, control_b=ctrl_b)
    own = _ok(ctrl_a, ctrl_b, is_control=True)
    j = judge.judge([twin, plant, own], Design(threshold=GATE, control="naive"))
    t, p, c = j.cells
    assert t.ratio == pytest.approx(1.0) and t.verdict == "same" and not t.blind
    assert t.level_a == pytest.approx(ctrl_a.median / 2)  # each visit half its control's, in A's units
    assert p.ratio == pytest.approx(1.10) and p.regression
    assert p.control_ratio == pytest.approx(ctrl_b.median / ctrl_a.median)
    # the control's own cells: as measured (blind between two runs), never failing, not in Holm's family
    assert c.blind and not c.regression and c.why == "the control (its change is the machine's)"
    assert math.isnan(c.p_holm) and j.family == 2


def test_a_runs_level_is_its_visits_over_the_controls_of_the_same_round():
    """A run whose second and third rounds met a slow machine (the control slowed by as much): its level
    is the median of the visits' ratios to the control's visit of the same round (1.0), not its median
    over the control's (2.0); a run made without rounds falls back to that whole-run ratio."""
    side = Side(2.0, runs=(2.0, 1.0), run_index=(0, 1), run_visits=((1.0, 2.0, 2.2), ()))
    ctrl = Side(4.0, runs=(1.0, 2.0), run_index=(0, 1), run_visits=((1.0, 2.0, 1.0), ()))
    assert judge._relative(side, ctrl, "run", 4.0) == ([0, 1], [4.0, 2.0], True)
    # a run the control lacks is left out: only runs with the same key are divided
    short = Side(4.0, runs=(1.0,), run_index=(1,), run_visits=((),))
    assert judge._relative(side, short, "run", 4.0) == ([1], [4.0], True)


def test_at_the_sample_level_a_control_divides_by_its_median_on_that_side():
    a = Side(10.0, tuple(10.0 * (1 + 0.01 * (i % 5 - 2)) for i in range(20)))
    b = Side(12.0, tuple(12.0 * (1 + 0.01 * (i % 5 - 2)) for i in range(20)))
    ctrl_a, ctrl_b = Side(2.0, (2.0,) * 2), Side(2.4, (2.4,) * 2)  # the machine: 1.2x slower in B
    j = judge.judge([_ok(a, b, control_a=ctrl_a, control_b=ctrl_b)], Design(threshold=GATE, control="naive"))
    cell = j.cells[0]
    assert j.level == "sample" and cell.ratio == pytest.approx(1.0)
    assert cell.level_a == pytest.approx(10.0, rel=0.01) and cell.verdict == "same" and not cell.blind


# ---- blind comparisons and the floor ---------------------------------------------------------------------


def _identical_single_run_ratios(doc: dict) -> list[float]:
    """The cells' B/A of every pair of identical single runs a false-alarm file holds: the pairs of a file
    without a set_size (benchmarks/false_alarm.py before its stories), or the quick look's pairs (both
    ways) of a stories file."""
    if "stories" in doc:
        quick = doc["stories"].get("quick", {}).get("false_alarms", {}).get("results", [])
        return [c["ratio"] for pair in quick for way in pair["ways"] for c in way["cells"]]
    if doc.get("set_size"):
        return []  # pairs of run sets, not of single runs
    pairs = [p for setting in doc["settings"].values() for p in setting.get("pair_results", [])]
    return [c["ratio"] for pair in pairs for c in pair["cells"]]


def test_the_floor_is_recomputed_from_its_files():
    """RUN_SPREAD_FLOOR is the largest ratio (or its inverse) between identical single runs in
    results/reference/false-alarm-*.json, as measured, rounded up to a per cent."""
    files = sorted(glob.glob(str(ROOT / "results" / "reference" / "false-alarm-*.json")))
    ratios = [r for path in files for r in _identical_single_run_ratios(json.loads(open(path).read()))]
    assert files and len(ratios) > 100
    largest = max(max(r, 1 / r) for r in ratios if r > 0) - 1
    assert largest > 0.1 and judge.RUN_SPREAD_FLOOR == math.ceil(largest * 100) / 100
    assert "results/reference/false-alarm-*.json" in judge.RUN_SPREAD_SOURCE


def test_the_sample_floor_is_recomputed_from_its_runs():
    """VISIT_SPREAD_FLOOR is the largest ratio between two visits of one ok cell of one run in the reference
    runs made in rounds, as measured, rounded up to a per cent."""
    from attnbench.results.load import load

    ratios = []
    for name in ("cpu-epyc-2core-rounds", "cpu-epyc-2core-settle"):
        df = load(ROOT / "results" / "reference" / name)
        for status, visits in zip(df["status"], df["visit_medians_ms"], strict=True):
            if status == "ok" and isinstance(visits, list) and len(visits) >= 2:
                ratios.append(max(visits) / min(visits))
    assert len(ratios) > 100
    assert judge.VISIT_SPREAD_FLOOR == math.ceil((max(ratios) - 1) * 100) / 100
    assert "cpu-epyc-2core-rounds" in judge.VISIT_SPREAD_SOURCE


def _one_visit(scale: float, seed: int, n: int = 200) -> Side:
    """A cell measured in one visit of n calls, each ±1% around `scale`: tight samples of one moment."""
    rng = random.Random(seed)
    samples = tuple(scale * (1 + rng.uniform(-0.01, 0.01)) for _ in range(n))
    return Side(statistics.median(samples), samples, (statistics.median(samples),), (n,))


def test_one_visit_a_side_is_held_to_the_visit_to_sample_spread():
    """Identical code met 8% apart in its one visit each (--rounds 1, one run, two variants): its tight
    samples give a tiny p, yet the next visit could move it by as much; it is not 'slower', does not fail
    the gate (nor 'same'); a 3x slowdown, past the largest visit-to-visit ratio measured, still fails."""
    design = Design(threshold=Threshold("median", 0.0, True, "median:0%"), same_run=True)
    j = judge.judge([_ok(_one_visit(1.0, i), _one_visit(1.08, 50 + i)) for i in range(4)], design)
    assert j.level == "sample" and j.few_visits and not j.blind
    assert all(c.p_holm < 1e-6 for c in j.cells)  # what the samples alone say
    assert {c.verdict for c in j.cells} == {"ambiguous"} and not any(c.regression for c in j.cells)
    assert "BLIND to the spread between visits" in j.rule and judge.VISIT_SPREAD_SOURCE in j.rule
    assert f"above {1 + judge.VISIT_SPREAD_FLOOR:.2f}" in j.rule and "--rounds 3" in j.rule
    near = judge.judge([_ok(_one_visit(1.0, 1), _one_visit(1.0, 2))], design)
    assert near.cells[0].verdict == "ambiguous"  # never 'same': the CI cannot hold the visits' spread
    slow = judge.judge([_ok(_one_visit(1.0, 1), _one_visit(3.0, 2))], design)
    assert slow.cells[0].verdict == "slower" and slow.cells[0].regression
    # relative to a control, the control's median on each side takes the machine's move out, as before
    ctrl = {"control_a": _one_visit(2.0, 7), "control_b": _one_visit(2.0, 8)}
    by_control = judge.judge(
        [_ok(_one_visit(1.0, 1), _one_visit(1.08, 2), **ctrl)], replace(design, control="c")
    )
    assert not by_control.few_visits and by_control.cells[0].verdict == "slower"


def _run_of(scale: float, seed: int, rounds: int = 6) -> Side:
    """A cell of one single run on a shared machine: the whole run `scale` off, each visit ±5% around it."""
    rng = random.Random(seed)
    return _visits([scale * (1 + rng.uniform(-0.05, 0.05)) for _ in range(rounds)])


@pytest.mark.parametrize("shift", [1.10, 1.15, 1.20])
def test_two_single_runs_of_identical_code_pass_both_ways_and_a_2x_slowdown_fails(shift):
    cells_a = [_run_of(1.0, i) for i in range(8)]
    cells_b = [_run_of(shift, 100 + i) for i in range(8)]
    for a, b in ((cells_a, cells_b), (cells_b, cells_a)):
        j = judge.judge([_ok(x, y) for x, y in zip(a, b, strict=True)], Design(threshold=GATE))
        assert j.blind and not any(c.regression for c in j.cells)
        assert {c.verdict for c in j.cells} == {"ambiguous"}
    # a 2x slowdown, whichever run the machine ran slow in
    for a, b in ((cells_a, [_run_of(2.0 * shift, 200 + i) for i in range(8)]),
                 (cells_b, [_run_of(2.0, 300 + i) for i in range(8)])):  # fmt: skip
        j = judge.judge([_ok(x, y) for x, y in zip(a, b, strict=True)], Design(threshold=GATE))
        assert all(c.regression and c.verdict == "slower" for c in j.cells)
    # one's own machine's figure, stated: a whole-run shift of 20% is then a slowdown, as measured
    shifted = _ok(_run_of(1.0, 1), _run_of(1.2, 2))
    stated = judge.judge([shifted], Design(threshold=GATE, run_spread=0.0))
    assert stated.cells[0].regression and "stated with --run-spread" in stated.rule


def test_a_blind_cell_measured_while_the_machine_drifted_must_clear_the_drift_too():
    """B's cell ran while the speed probe found the machine at 0.6x its usual speed: its 1.7x is the
    machine's as much as the code's, and a blind gate does not fail it; a 3x slowdown still does."""
    a, b = _run_of(1.0, 1), replace(_run_of(1.7, 2), speed=0.6)
    j = judge.judge([_ok(a, b)], Design(threshold=GATE))
    assert j.cells[0].verdict == "ambiguous" and not j.cells[0].regression
    assert not judge.judge([_ok(a, replace(b, speed=math.nan))], Design()).cells[0].verdict == "ambiguous"
    worse = judge.judge([_ok(a, replace(_run_of(3.0, 3), speed=0.6))], Design(threshold=GATE))
    assert worse.cells[0].regression and "drift" in worse.rule


def test_the_rule_names_what_the_evidence_cannot_see():
    a, b = _visits([1.0, 1.1, 0.9]), _visits([1.0, 1.1, 0.95])
    blind = judge.judge([_ok(a, b)], Design(threshold=GATE)).rule
    assert "visit level" in blind and "Unpaired" in blind and "Welch" in blind and "Holm" in blind
    assert "BLIND" in blind and "a factor of up to 1.48" in blind and "above 1.48" in blind
    assert "false-alarm-*.json" in blind and "±" not in blind  # a time moves by a factor, not by -48%
    one_run = judge.judge([_ok(a, b)], Design(same_run=True)).rule
    assert "Paired: visit i of B" in one_run and "paired t-test" in one_run and "BLIND" not in one_run
    assert "No gate" in one_run
    relative = judge.judge([_ok(a, b, control_a=a, control_b=b), _ok(a, b, is_control=True)],
                           Design(control="naive")).rule  # fmt: skip
    assert "Relative to the control variant naive" in relative and "control's own" in relative
    assert "Cells compared as measured" in relative  # the control's own cells see no run spread


# ---- the gate ---------------------------------------------------------------------------------------------


def test_the_gate_fails_a_broken_cell_and_holds_its_alpha_over_the_family():
    a = _visits([1.0, 1.01, 0.99])
    slightly = _visits([1.08, 1.11, 1.06])  # slower, but p about 0.02
    clearly = _visits([1.5, 1.51, 1.49])
    cells = [_ok(a, slightly), _ok(a, clearly)] + [_ok(a, a)] * 6 + [Cell("ok", "wrong", a, None)]
    j = judge.judge(cells, Design(threshold=GATE, same_run=True))
    weak, strong = j.cells[0], j.cells[1]
    assert weak.verdict == "slower" and weak.p_value < 0.05 <= weak.p_holm and not weak.regression
    assert weak.why.startswith("not over the family: p ") and "over 8 cells" in weak.why
    assert strong.regression and strong.why.startswith("median 1 -> 1.5")
    assert j.cells[-1].regression and j.cells[-1].why == "status ok -> wrong" and j.family == 8
    # a threshold in ms, and on the samples' max
    assert judge.judge([_ok(a, clearly)], Design(threshold=Threshold("median", 0.6, False, "median:0.6"),
                                                 same_run=True)).cells[0].regression is False  # fmt: skip
    by_max = Design(threshold=Threshold("max", 0.3, True, "max:30%"), same_run=True)
    assert judge.judge([_ok(a, clearly)], by_max).cells[0].why.startswith("max ")


def test_the_gates_median_is_each_sides_median_not_the_judges_geometric_mean():
    """B's calls: 16 at 1.6 ms and 14 at 10 ms (a heavy tail), A's all at 1 ms: the judge's ratio of
    geometric means is about 3.8 (past the visit-to-visit floor of one visit a side), the medians' 1.6.
    --fail-above median:80% reads the medians (60%: no failure) and says them; median:50% fails, naming
    the medians and their rise."""
    a = Side(1.0, tuple(1.0 * (1 + 0.001 * (i % 5 - 2)) for i in range(30)))
    b_samples = (1.6,) * 16 + (10.0,) * 14
    b = Side(statistics.median(b_samples), b_samples)
    stated = {"run_spread": 0.0}
    at_80 = judge.judge([_ok(a, b)], Design(threshold=Threshold("median", 0.8, True, "median:80%"), **stated))
    cell = at_80.cells[0]
    assert at_80.level == "sample" and cell.verdict == "slower" and cell.ratio > 3.5
    assert not cell.regression
    assert "its median (each side's time_ms_median" in at_80.rule
    at_50 = judge.judge([_ok(a, b)], Design(threshold=Threshold("median", 0.5, True, "median:50%"), **stated))
    assert at_50.cells[0].regression and at_50.cells[0].why == "median 1 -> 1.6 ms (+60%)"
    # the mean is of the samples, and says so
    by_mean = judge.judge([_ok(a, b)], Design(threshold=Threshold("mean", 0.8, True, "mean:80%"), **stated))
    assert by_mean.cells[0].regression and "the mean of its samples" in by_mean.rule


def test_a_cell_whose_medians_point_against_its_judged_ratio_says_they_disagree():
    """Trial L's row (flash_v1 against flash_v2 in one run, non-causal N 128): its visits' medians, paired by
    round, have a geometric-mean B/A of 1.46 (slower), while the rows' medians (1.174 -> 0.686, what the
    gate's median:5% reads) fell. The cell says the two disagree, with both ratios, medians first; a cell
    whose medians point the way its ratio does says nothing more."""
    a = Side(1.174428, visits=(0.797306, 1.287226, 7.593272), visit_samples=(14, 11, 12))
    b = Side(0.686082, visits=(62.378164, 0.558922, 0.701685), visit_samples=(10, 19, 19))
    gated = Design(threshold=GATE, same_run=True)
    cell = judge.judge([_ok(a, b)], gated).cells[0]
    geomean = math.exp(statistics.fmean(math.log(y / x) for x, y in zip(a.visits, b.visits, strict=True)))
    assert cell.level == "visit" and cell.ratio == pytest.approx(geomean) and cell.ratio > 1
    assert cell.median_ratio == pytest.approx(b.median / a.median) and cell.median_ratio < 1
    said = f"medians and visits disagree ({b.median / a.median:.2f} vs {geomean:.2f})"
    assert judge.disagreement(cell) == said == "medians and visits disagree (0.58 vs 1.46)"
    assert not cell.regression  # the gate's median did not grow
    agreeing = replace(b, median=a.median * 1.3)
    assert judge.disagreement(judge.judge([_ok(a, agreeing)], gated).cells[0]) == ""
    near = replace(b, median=a.median * 0.97)  # within 5% of 1: no direction to disagree with
    assert judge.disagreement(judge.judge([_ok(a, near)], gated).cells[0]) == ""
    # with a control, the medians are B's relative to it, as the gate reads them
    control = Side(1.0, visits=(1.0, 1.0, 1.0), visit_samples=(5, 5, 5))
    halved = replace(control, median=0.4, visits=(0.4, 0.4, 0.4))
    by_control = judge.judge(
        [_ok(a, agreeing, control_a=control, control_b=halved)], replace(gated, control="c")
    ).cells[0]
    assert by_control.median_ratio == pytest.approx(1.3 / 0.4)


# ---- separated: two variants of one shape in one run ------------------------------------------------------


def _row(medians, n=2):
    samples = [m * f for m in medians for f in (1.0, 1.01)][: n * len(medians)]
    return {
        "time_ms_median": sorted(samples)[len(samples) // 2],
        "samples_ms": samples,
        "visit_medians_ms": [m * 1.005 for m in medians],
        "visit_samples": [n] * len(medians),
    }


def test_separated_pairs_the_visits_of_each_round():
    # the machine ran 1.0x, 1.35x and 1.15x slow in three rounds; in each, B (visited right after A) was 8%
    # slower than A: pooled, the rounds' drift hides it; paired round by round it is told apart
    drift = (1.0, 1.35, 1.15)
    a, b = _row([10.0 * d for d in drift]), _row([10.8 * d for d in drift])
    assert judge.separated(a, b) and not judge.separated(b, a)
    pooled = ({k: v for k, v in r.items() if not k.startswith("visit")} for r in (a, b))
    assert not judge.separated(*pooled)
    # counts that do not match the visits (a hand-edited row): the samples, pooled
    odd = {**b, "visit_samples": [2, 4]}
    assert judge.separation(a, odd).p == judge.welch_test(a["samples_ms"], odd["samples_ms"]).p
    # within 2% by median: never separated, however sure the test
    assert not judge.separated(a, _row([10.1 * d for d in drift]))
    assert not judge.separated({"time_ms_median": 0.0}, b)


def test_settle_visits_are_compared_over_the_visits_both_have():
    a, b = _row([1.0, 1.0, 1.0, 1.0, 1.0]), _row([1.3, 0.95, 1.3])
    assert judge.separation(a, b).p == judge.paired_test([1.005] * 3, [m * 1.005 for m in (1.3, 0.95, 1.3)]).p


def test_a_rank_group_is_judged_against_its_own_leader_and_the_front_ends_at_the_first_told_apart():
    """a leads; b is tied to a; c is told apart from a; d is tied to a but slower than c: d is behind c, so
    behind a, and never at the front (group 0), which ends at c; d is judged against c, its group's leader,
    with c's p against a and d's against c. The walk is lazy: the front alone judges no pair after c."""
    from itertools import takewhile

    from attnbench.results.ranks import rank_groups

    rule = {  # (leader, other): (told apart, p); d tied to a as well as to c
        ("a", "b"): (False, 0.4), ("a", "c"): (True, 0.001),
        ("c", "d"): (False, 0.3), ("a", "d"): (False, 0.6),
    }  # fmt: skip
    judged = []

    def apart(leader, other):
        judged.append((leader, other))
        return rule[leader, other]

    placed = list(rank_groups("abcd", apart))
    assert [(r.row, r.group) for r in placed] == [("a", 0), ("b", 0), ("c", 1), ("d", 1)]
    assert math.isnan(placed[0].p) and [r.p for r in placed[1:]] == [0.4, 0.001, 0.3]
    assert judged == [("a", "b"), ("a", "c"), ("c", "d")]  # d against its group's leader, never against a
    judged.clear()
    assert [r.row for r in takewhile(lambda r: r.group == 0, rank_groups("abcd", apart))] == ["a", "b"]
    assert judged == [("a", "b"), ("a", "c")]
    assert list(rank_groups([], apart)) == [] and [r.group for r in rank_groups("a", apart)] == [0]


def test_the_judge_needs_neither_numpy_nor_scipy():
    code = (
        "import sys; import attnbench.results.judge as j; "
        "j.separated({'time_ms_median': 1, 'samples_ms': [1, 1.1, 1.2]}, "
        "{'time_ms_median': 2, 'samples_ms': [2, 2.1, 2.2]}); j.t_ppf(0.975, 3.5); "
        "print(sorted(m for m in ('numpy', 'scipy', 'pandas', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_students_t_pools_both_sides_spread_as_scipy_does():
    from scipy import stats

    from attnbench.results.ttest import student_test

    rng = random.Random(2)
    a = [10 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(17)]
    b = [11 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(3)]
    ref = stats.ttest_ind(_logs(b), _logs(a), equal_var=True)
    ci = ref.confidence_interval(0.95)
    mine = student_test(a, b)
    assert (mine.p, mine.low, mine.high) == pytest.approx((ref.pvalue, ci.low, ci.high), rel=1e-8)
    assert student_test(a, b[:2]) is judge.NO_TEST and student_test([2.0] * 3, [2.0] * 3).p == 1.0
