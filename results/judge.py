"""The judge: whether B is slower than A, cell by cell, by one rule at one level of repetition.

How compare judges
------------------
A measurement repeats at three levels: a sample (one timed call) < a visit (a cell measured once, its
samples in a row; `--rounds R` visits every cell R times, round-robin over the sweep) < a run (a directory;
a run set is a folder of runs). Each level's replicates hold the spread of the levels below it, and only a
level above one can see the spread between its replicates: samples do not show what moves between visits,
visits do not show what moves between runs.

1. **One level.** For a comparison the judge chooses, once, the coarsest level at which every cell judged
   has 3 or more replicates a side (run > visit > sample). A replicate is that level's median (a visit's, a
   run's), or at the sample level the sample itself.
2. **Pairs.** Replicates that share a key are paired: visit i of two cells of ONE run (made in round i,
   seconds apart; over the visits both have, since a settle round visits only some cells again), or run i
   of two run sets made interleaved (back to back). Anything else is unpaired.
3. **A control.** With `compare --control V` each replicate is divided by V's replicate of the same key (its
   visit of the same round; its level in the same run, visit by visit inside the run; at the sample level,
   V's median on that side) and multiplied by V's median in A, so the numbers stay in A's units.
4. **One test** on the logs: a paired t-test of the log ratios, or Welch's t-test of the log replicates.
   The ratio shown is exp(mean log difference), a ratio of geometric means; its CI is exp of the t interval.
5. **Verdict.** 'same' when the CI lies from 1 / (1 + tolerance) to 1 + tolerance (the --fail-above
   percentage, else 2%; a ratio and its inverse alike);
   'slower' ('faster') when p < alpha and the whole CI lies above (below) 1; else 'ambiguous'.
6. **Blind comparisons.** Two different single runs, no control, nothing paired: no interval here holds
   how much a whole run moves, which on a shared machine is far more than a run's own visits show. The
   verdict says so and calls a cell slower (faster) only when, besides 5, its ratio lies above 1 + s (below
   1 / (1 + s)), s the run-to-run spread measured for identical code (RUN_SPREAD_FLOOR: the largest ratio
   of identical single runs as measured; or the figure stated with --run-spread), times the factor by
   which the speed probe found the machine off its usual speed during either cell (drift), and 'same'
   only from 1 / b to b, b = (1 + tolerance) / (1 + that spread), where b > 1.
7. **Few visits.** At the sample level a cell not judged relative to a control is judged by the samples of
   fewer than 3 visits a side, which do not show how far the next visit of the same code moves (far more
   than one visit's samples spread). Like 6, with v for s: v the visit-to-visit spread of identical code
   (VISIT_SPREAD_FLOOR: the largest ratio between two visits of one cell of one run as measured; or
   --visit-spread, sample_spread=); in a blind comparison the larger factor of the two applies (the run
   floor was measured on runs of one visit a cell, so it holds their visits' spread).
8. **Gate.** `--fail-above STAT:N%` fails a cell that is 'slower', whose p, Holm-adjusted over the cells
   judged (the control's own excluded: they never fail it), is below alpha, and whose STAT grew by more
   than N%: median, each side's median (the row's time_ms_median, which run, report and export show; a
   run set's, the median of its runs' medians); mean, min, max, of each side's samples; B's over the
   control's median on each side, in A's units, where the cell was judged relative to it. The verdict is
   the judge's (its ratio of geometric means), the size is the STAT's. In a blind comparison the floor
   takes Holm's place: a cell 'slower' there cleared the largest ratio identical runs showed. A cell ok in
   A and wrong, error, crashed or timeout in B fails whatever the statistics. A cell whose medians point
   the other way from its ratio names no direction: `disagreement` says so, with both ratios.

`Judgement.rule` is this, filled in for one comparison: the one text a compare page and terminal print.
`history check`'s gate judges a step by the same test and Holm (results.steps: the runs after it against
those before, unpaired, the other variants' move as the control).
`separated` is the same test for the report's ranking (results.ranks) and the harness's settle rounds (two
variants of one shape in one run). Pure Python (math only): the harness asks it in the run's own process.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .schema import float_list
from .spreads import (  # noqa: F401
    RUN_SPREAD_FLOOR,
    RUN_SPREAD_SOURCE,
    VISIT_SPREAD_FLOOR,
    VISIT_SPREAD_SOURCE,
    band_text,
    same_band,
)
from .thresholds import Threshold  # the gate's threshold (its grammar: results.thresholds)
from .ttest import (  # noqa: F401 (the tests, part of the judge's word)
    ALPHA,
    CI_LEVEL,
    MIN_REPLICATES,
    NO_TEST,
    Test,
    beta_inc,
    paired_test,
    t_ppf,
    t_sf,
    welch_test,
)
from .ttest import logs as ttest_logs
from .verdicts import (  # a cell's verdict, Holm's step-down and Holm's rule for a family's verdict
    TOLERANCE,
    holm,
    holm_verdict,
    verdict,
)

LEVELS = ("run", "visit", "sample")  # coarsest first
VERDICTS = ("faster", "slower", "same", "ambiguous")
BROKEN = ("wrong", "error", "crashed", "timeout")  # ok in A and one of these in B fails the gate


def verdict_words(j: Judged) -> str:
    """What a verdict must say beside a CI that excludes 1 (compare's change text): why an 'ambiguous' one
    is not slower (faster), where a floor held it back, and that a 'same' one is significant but within
    the tolerance; '' otherwise."""
    if not (j.ci_low > 1 or j.ci_high < 1):
        return ""
    if j.verdict == "same":  # a CI excluding 1 is never 'same' without saying so
        band = f" ({band_text(j.band)})" if math.isfinite(j.band) else ""
        return f"significant but within the tolerance{band}: same"
    if j.verdict != "ambiguous":
        return ""
    words = ["within the run-to-run spread"] if j.blind else []
    if j.few_visits:
        words.append("fewer than 3 visits a side: within the visit-to-visit spread; measure with --rounds 3")
    return "; ".join(words)


def _direction(ratio: float) -> int:
    """1 slower, -1 faster, 0 where a ratio shows as 1.00x either way or is none (compare's change text)."""
    if not (math.isfinite(ratio) and ratio > 0) or f"{ratio:.2f}" == f"{1 / ratio:.2f}" == "1.00":
        return 0
    return 1 if ratio > 1 else -1


DISAGREE = 0.05  # how far from 1 each of a cell's two ratios must be for their opposite directions to be said


def disagreement(j: Judged) -> str:
    """The words a cell says in place of a direction where its medians (each side's time_ms_median: what
    run and report show and the gate's median:N% sizes) point the other way from the ratio judged (of the
    geometric means of its replicates); '' where they agree. A heavy tail, or one slow visit of three, can
    set them apart (B/A 1.46 by the geometric means of visits, 0.58 by the medians); each past DISAGREE."""
    apart = _direction(j.ratio) * _direction(j.median_ratio) < 0
    if not apart or min(abs(math.log(j.ratio)), abs(math.log(j.median_ratio))) <= math.log1p(DISAGREE):
        return ""
    return f"medians and {j.level}s disagree ({j.median_ratio:.2f} vs {j.ratio:.2f})"  # B/A each, as named


# ---- what is judged ----------------------------------------------------------------------------------------


# the list columns a Side reads, in its fields' order
_LISTS = ("samples_ms", "visit_medians_ms", "visit_samples", "run_medians_ms", "run_index")
# a run set's rows' own list columns (results.runset, from run_columns), and every column a Side reads
RUN_COLUMNS = ("run_medians_ms", "run_index", "run_visit_medians")
SIDE_COLUMNS = ("time_ms_median", "speed_factor", *_LISTS[:3], *RUN_COLUMNS)


def run_columns(runs: Sequence[Mapping[str, Any]], index: Sequence[int]) -> dict[str, list]:
    """A run set's cell, for the run level: each run's median, its place in the set (`index`, in the order
    made) and its visit medians, from the rows of the runs that measured it."""
    return {
        "run_medians_ms": [float(r["time_ms_median"]) for r in runs],
        "run_index": list(index),
        "run_visit_medians": [float_list(r.get("visit_medians_ms")) for r in runs],
    }


@dataclass(frozen=True)
class Side:
    """What one run (or run set) measured of one cell: its median, samples, each visit's median and sample
    count, and for a run set each run's median, index in the set (in the order made) and visit medians."""

    median: float
    samples: tuple[float, ...] = ()
    visits: tuple[float, ...] = ()
    visit_samples: tuple[float, ...] = ()
    runs: tuple[float, ...] = ()
    run_index: tuple[float, ...] = ()
    run_visits: tuple[tuple[float, ...], ...] = ()
    speed: float = math.nan  # speed_factor: the machine's speed probe before the cell over the run's usual

    @property
    def off(self) -> float:
        """How far off its usual speed the machine ran for this cell, as a factor >= 1 (1: not known)."""
        s = self.speed
        return max(s, 1 / s) if math.isfinite(s) and s > 0 else 1.0

    @classmethod
    def of(cls, row: Mapping[str, Any], suffix: str = "") -> Side:
        """A side from a results row (results.load, results.runset), its columns ending in `suffix`."""
        get = {c: row.get(c + suffix) for c in ("time_ms_median", *_LISTS, "run_visit_medians")}
        median, run_visits = get["time_ms_median"], get["run_visit_medians"]
        speed = row.get("speed_factor" + suffix)
        return cls(
            float(median) if isinstance(median, (int, float)) and median == median else math.nan,
            *(tuple(float_list(get[c])) for c in _LISTS),
            tuple(tuple(float_list(v)) for v in run_visits) if isinstance(run_visits, (list, tuple)) else (),
            float(speed) if isinstance(speed, (int, float)) and speed == speed else math.nan,
        )

    def scaled(self, f: float) -> Side:
        """Every time times `f` (compare --normalize: B's times on A's machine)."""
        samples, visits, runs = (tuple(x * f for x in xs) for xs in (self.samples, self.visits, self.runs))
        run_visits = tuple(tuple(x * f for x in v) for v in self.run_visits)
        return Side(
            self.median * f, samples, visits, self.visit_samples, runs, self.run_index, run_visits, self.speed
        )

    @property
    def usable(self) -> bool:
        return math.isfinite(self.median) and self.median > 0


@dataclass(frozen=True)
class Cell:
    """One cell of both runs: their statuses, what each measured (None where not ok), and the control
    variant's cell of the same shape where one is named."""

    status_a: str
    status_b: str
    a: Side | None = None
    b: Side | None = None
    control_a: Side | None = None
    control_b: Side | None = None
    is_control: bool = False

    @property
    def ok(self) -> bool:
        return (
            self.status_a == "ok" and self.status_b == "ok" and bool(self.a and self.a.usable)
            and bool(self.b and self.b.usable)
        )  # fmt: skip

    @property
    def has_control(self) -> bool:
        return bool(self.control_a and self.control_a.usable and self.control_b and self.control_b.usable)


@dataclass(frozen=True)
class Design:
    """How a comparison was made, which decides what can be paired and what the evidence can see."""

    alpha: float = ALPHA
    threshold: Threshold | None = None
    control: str | None = None  # compare --control VARIANT
    same_run: bool = False  # A and B are one run (or one run set): visits (runs) pair by index
    interleaved: bool = False  # two run sets made interleaved (results.runset.interleaved): runs pair
    run_spread: float | None = None  # compare --run-spread: this machine's figure instead of the floor
    sample_spread: float | None = None  # compare --visit-spread: this machine's figure between visits

    @property
    def tolerance(self) -> float:
        return self.threshold.value if self.threshold is not None and self.threshold.relative else TOLERANCE

    @property
    def floor(self) -> float:
        return RUN_SPREAD_FLOOR if self.run_spread is None else self.run_spread

    @property
    def sample_floor(self) -> float:
        if self.sample_spread is not None and not self.sample_spread >= 0:  # checked where read
            raise ValueError(f"sample_spread must be 0 or more, got {self.sample_spread!r}")
        return VISIT_SPREAD_FLOOR if self.sample_spread is None else self.sample_spread

    def pairs(self, level: str) -> bool:
        return (self.same_run and level in ("run", "visit")) or (self.interleaved and level == "run")


@dataclass(frozen=True)
class Judged:
    """One cell's answer. level_a, level_b: the geometric means of the replicates tested (ms, A's units);
    ratio = level_b / level_a. blind: no control, pairing or run level let it see the spread between runs;
    few_visits: judged by the samples of fewer than 3 visits a side, no control, blind to the spread between
    visits."""

    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    p_holm: float = math.nan
    verdict: str = "n/a"
    level_a: float = math.nan
    level_b: float = math.nan
    n_a: int = 0
    n_b: int = 0
    paired: bool = False
    blind: bool = False
    few_visits: bool = False  # judged by samples, no control: the visit-to-visit spread unseen (docstring 7)
    band: float = math.nan  # the top of its 'same' band (same_band)
    control_ratio: float = math.nan  # the control's B/A at this shape, where it divided this cell
    regression: bool = False
    why: str = ""
    level: str = ""  # the level its replicates were judged at (run, visit, sample)
    median_ratio: float = math.nan  # the gate's median:N% figures, B's over A's (_stat): run and report's


@dataclass(frozen=True)
class _Replicates:
    a: list[float]
    b: list[float]
    paired: bool
    by_control: bool


def _at(side: Side, level: str) -> tuple[list[Any], list[float], bool]:
    """(keys, values, keyed) of a side's replicates at a level; keyed: the keys name moments shared with
    the other cells of its run (a visit's round: only visits with their sample counts, made in rounds;
    a run's place in its set), so that they may pair."""
    if level == "run":
        keys = side.run_index if len(side.run_index) == len(side.runs) else range(len(side.runs))
        return list(keys), list(side.runs), True
    if level == "visit" and side.runs:  # a run set judged below its runs: every run's visits
        keys = side.run_index if len(side.run_index) == len(side.runs) else range(len(side.runs))
        pairs = [((k, i), v) for k, vs in zip(keys, side.run_visits, strict=False) for i, v in enumerate(vs)]
        return [k for k, _ in pairs], [v for _, v in pairs], True
    if level == "visit":
        return list(range(len(side.visits))), list(side.visits), len(side.visit_samples) == len(side.visits)
    return list(range(len(side.samples))), list(side.samples), False


def _relative(side: Side, control: Side, level: str, ref: float) -> tuple[list[Any], list[float], bool]:
    """A side's replicates each over the control's of the same key, times ref (the control's median in A);
    where they cannot be keyed, over the control's median on that side."""
    keys, values, keyed = _at(side, level)
    if level == "run":  # each run's level over the control's in the same run, visit by visit inside it
        ck, cv, _ = _at(control, "run")
        c_runs = dict(zip(ck, cv, strict=True))
        c_visits = dict(zip(ck, control.run_visits, strict=False))
        own = dict(zip(keys, side.run_visits, strict=False))
        out = []
        for k, m in zip(keys, values, strict=True):
            if k in c_runs:
                v, c = own.get(k, ()), c_visits.get(k, ())
                n = min(len(v), len(c))  # the rounds both were visited in
                if n and min(v[:n] + c[:n]) > 0:
                    out.append((k, ref * statistics.median(x / y for x, y in zip(v[:n], c[:n], strict=True))))
                else:
                    out.append((k, ref * m / c_runs[k]))
        return [k for k, _ in out], [v for _, v in out], True
    ck, cv, c_keyed = _at(control, level)
    if keyed and c_keyed:
        by_key = dict(zip(ck, cv, strict=True))
        out = [(k, ref * v / by_key[k]) for k, v in zip(keys, values, strict=True) if k in by_key]
        return [k for k, _ in out], [v for _, v in out], True
    return keys, [ref * v / control.median for v in values], keyed


def _replicates(cell: Cell, design: Design, level: str) -> _Replicates:
    """A cell's replicates at a level, each side over the control where it has one, paired where the
    design pairs and both sides are keyed (over the keys both have)."""
    assert cell.a is not None and cell.b is not None
    by_control = design.control is not None and not cell.is_control and cell.has_control
    if by_control:
        assert cell.control_a is not None and cell.control_b is not None
        ref = cell.control_a.median
        ka, va, keyed_a = _relative(cell.a, cell.control_a, level, ref)
        kb, vb, keyed_b = _relative(cell.b, cell.control_b, level, ref)
    else:
        (ka, va, keyed_a), (kb, vb, keyed_b) = _at(cell.a, level), _at(cell.b, level)
    if design.pairs(level) and keyed_a and keyed_b:
        da, db = dict(zip(ka, va, strict=True)), dict(zip(kb, vb, strict=True))
        common = [k for k in ka if k in db]
        return _Replicates([da[k] for k in common], [db[k] for k in common], True, by_control)
    return _Replicates(va, vb, False, by_control)


def choose_level(cells: Sequence[Cell], design: Design) -> str:
    """The coarsest level at which every cell ok in both runs has MIN_REPLICATES or more a side."""
    judged = [c for c in cells if c.ok]
    for level in LEVELS[:-1]:
        reps = [_replicates(c, design, level) for c in judged]
        if reps and all(min(len(r.a), len(r.b)) >= MIN_REPLICATES for r in reps):
            return level
    return "sample"


# ---- one comparison --------------------------------------------------------------------------------------


def _geomean(values: list[float]) -> float:
    logs = ttest_logs(values)
    return math.exp(statistics.fmean(logs)) if logs else math.nan


def _judge_cell(cell: Cell, design: Design, level: str) -> Judged:
    """One cell's test and verdict (Holm and the gate come after, over the whole comparison)."""
    if not cell.ok:
        return Judged()
    reps = _replicates(cell, design, level)
    test = paired_test(reps.a, reps.b) if reps.paired else welch_test(reps.a, reps.b)
    blind = not design.same_run and level != "run" and not reps.by_control
    few_visits = level == "sample" and not reps.by_control
    # what a blind comparison cannot see: the spread between runs, and more where the speed probe found
    # the machine off its usual speed during either cell (drift, which moves the cell's time by as much);
    # what samples of few visits cannot see: the spread between visits (module docstring, 6 and 7)
    # (the run floor was measured on runs of one visit a cell, so it holds their visits' spread: the larger
    # of the two applies, not their product)
    unseen = (1 + design.floor) * max(cell.a.off, cell.b.off) if blind else 1.0
    unseen = max(unseen, 1 + design.sample_floor if few_visits else 1.0) - 1
    control_ratio = math.nan
    if reps.by_control:
        assert cell.control_a is not None and cell.control_b is not None
        control_ratio = cell.control_b.median / cell.control_a.median
    level_a, level_b = _geomean(reps.a), _geomean(reps.b)  # exp(test.d) = level_b / level_a
    median_a, median_b = _stat(cell, "median", design)  # what the gate's median:N% and a report show
    return Judged(
        ratio=level_b / level_a,
        ci_low=math.exp(test.low) if math.isfinite(test.low) else math.nan,
        ci_high=math.exp(test.high) if math.isfinite(test.high) else math.nan,
        p_value=test.p,
        verdict=verdict(test, tolerance=design.tolerance, alpha=design.alpha, unseen=unseen),
        level_a=level_a,
        level_b=level_b,
        n_a=len(reps.a),
        n_b=len(reps.b),
        paired=reps.paired,
        blind=blind,
        few_visits=few_visits,
        band=same_band(design.tolerance, unseen),
        control_ratio=control_ratio,
        level=level,
        median_ratio=median_b / median_a,
    )


def _stat(cell: Cell, stat: str, design: Design) -> tuple[float, float]:
    """The gate's statistic on each side (module docstring, 8): its median (the row's time_ms_median, the
    median run and report show, never the judge's geometric mean), or the mean, min or max of its samples;
    B's over the control's median on each side, in A's units, where the cell was judged relative to it."""
    assert cell.a is not None and cell.b is not None
    if stat == "median":
        va, vb = cell.a.median, cell.b.median
    else:
        fn = {"mean": statistics.fmean, "min": min, "max": max}[stat]
        if not (cell.a.samples and cell.b.samples):
            return math.nan, math.nan
        va, vb = float(fn(cell.a.samples)), float(fn(cell.b.samples))
    if design.control is not None and not cell.is_control and cell.has_control:
        assert cell.control_a is not None and cell.control_b is not None
        vb *= cell.control_a.median / cell.control_b.median
    return va, vb


def _gate(cell: Cell, judged: Judged, design: Design, family: int) -> tuple[bool, str]:
    """(fails, why), module docstring 8; the control's own cells never fail."""
    if cell.is_control:
        return False, "the control (its change is the machine's)"
    note = ""
    if design.control is not None and cell.ok and not cell.has_control:
        note = f"no ok {design.control} cell of this shape in both runs: compared as measured"
    t = design.threshold
    if t is None:
        return False, note
    if cell.status_a == "ok" and cell.status_b in BROKEN:
        return True, f"status ok -> {cell.status_b}"
    if judged.verdict != "slower":
        return False, note
    va, vb = _stat(cell, t.stat, design)
    if not (math.isfinite(va) and math.isfinite(vb) and t.exceeded(va, vb)):
        return False, note
    if holm_verdict(judged, design.alpha).verdict != "slower":
        adjusted = f"Holm-adjusted {judged.p_holm:.2g} over {family} cells"
        return False, f"not over the family: p {judged.p_value:.2g}, {adjusted}"
    relative = f", B's relative to {design.control}" if math.isfinite(judged.control_ratio) else ""
    return True, f"{t.stat} {va:.4g} -> {vb:.4g} ms ({vb / va - 1:+.0%}{relative})"


@dataclass(frozen=True)
class Judgement:
    """A whole comparison: the level chosen, each cell's answer (in the order given) and the rule text."""

    design: Design
    level: str
    cells: tuple[Judged, ...]
    family: int  # cells in Holm's family: judged, with a p, not the control's own
    runs: tuple[int, int] = (1, 1)  # the runs a side holds (a run set's), most over the cells judged

    @property
    def paired(self) -> bool:
        return any(c.paired for c in self.cells)

    @property
    def blind(self) -> bool:
        return any(c.blind for c in self.cells)

    @property
    def few_visits(self) -> bool:
        return any(c.few_visits for c in self.cells)

    @property
    def reference_floors(self) -> tuple[bool, bool]:  # whether the run and visit floors applied are the VM's
        d = self.design
        return self.blind and d.run_spread is None, self.few_visits and d.sample_spread is None

    @property
    def rule(self) -> str:
        return rule_text(self)

    @property
    def basis(self) -> str:
        """What the cells were judged by, in a few words: 'visits paired by round', 'runs paired by index',
        'samples, unpaired'."""
        if not self.paired:
            return f"{self.level}s, unpaired"
        return f"{self.level}s paired by " + ("round" if self.level == "visit" else "index")


def judge(cells: Sequence[Cell], design: Design) -> Judgement:
    """Every cell of a comparison judged at one level by one test, Holm's step-down over the family, and
    the gate (module docstring)."""
    level = choose_level(cells, design)
    judged = [_judge_cell(c, design, level) for c in cells]
    in_family = [not c.is_control for c in cells]
    p_holm = holm([j.p_value if keep else math.nan for j, keep in zip(judged, in_family, strict=True)])
    family = sum(math.isfinite(p) for p in p_holm)
    out = []
    for cell, j, ph in zip(cells, judged, p_holm, strict=True):
        j = replace(j, p_holm=ph)
        regression, why = _gate(cell, j, design, family)
        out.append(replace(j, regression=regression, why=why))
    ok = [c for c in cells if c.ok]
    runs = (max([1, *(len(c.a.runs) for c in ok if c.a)]), max([1, *(len(c.b.runs) for c in ok if c.b)]))
    return Judgement(design, level, tuple(out), family, runs)


# ---- the rule text ---------------------------------------------------------------------------------------

_REPLICATE = {
    "run": "each run's median (the runs of a run set)",
    "visit": "each visit's median (a run visits every cell once per round, round-robin over the sweep)",
    "sample": "each timed call",
}


# what the gate's STAT is on each side (module docstring, 8): the verdict is the judge's, the size the STAT's
_STAT_TEXT = {
    "median": "its median (each side's time_ms_median, the median run and report show, not the geometric "
    "means of the test)",
    "mean": "the mean of its samples",
    "min": "the min of its samples",
    "max": "the max of its samples",
}


def _pairing_text(j: Judgement) -> str:
    if not j.paired:
        return "Unpaired: no replicate of B shares a moment with one of A."
    if j.level == "run":
        return (
            "Paired: run i of B with run i of A (the sets were made interleaved, or are one set), so the "
            "drift over minutes that each pair met alike leaves the test."
        )
    return (
        "Paired: visit i of B with visit i of A, made in the same round of one run seconds apart, over the "
        "visits both cells have (a settle round visits only some cells again), so the drift between rounds "
        "leaves the test."
    )


def _control_text(j: Judgement) -> str:
    c = j.design.control
    if c is None:
        return ""
    return (
        f"Relative to the control variant {c} (the same code in both runs, so its change is the machine's): "
        "each replicate is divided by the control's replicate of the same key (its visit of the same "
        "round; its level in the same run, visit by visit inside the run; at the sample level its median on "
        "that side) and multiplied by the control's median in A. The control's own cells are compared as "
        "measured and never fail the gate; a cell whose control is not ok in both runs is compared as "
        "measured. "
    )


def _sides_text(j: Judgement) -> str:
    """What each side held: one run, or a run set of too few runs to judge by runs."""
    held = [f"a run set of {n} runs" if n > 1 else "one run" for n in j.runs]
    if j.runs == (1, 1):
        return "A and B are different runs, one a side"
    return f"A is {held[0]} and B {held[1]}, too few to judge by runs ({MIN_REPLICATES} a side)"


def _blind_text(j: Judgement) -> str:
    d = j.design
    who = (
        "Cells compared as measured (the control's own, and any whose control is not ok in both runs) are"
        if d.control
        else "This comparison is"
    )
    band = same_band(d.tolerance, d.floor)
    same = f"'same' only from {band_text(band)}" if band > 1 else "none 'same'"
    return (
        f"{who} BLIND to the spread between runs: {_sides_text(j)}, with nothing paired, so no interval here"
        f" holds how a whole run moves. Identical code moved by a factor of up to {1 + d.floor:.2f} ("
        + (RUN_SPREAD_SOURCE if d.run_spread is None else "stated with --run-spread")
        + "), so a cell is called slower (faster) only where, besides the verdict rule, its ratio lies above "
        f"{1 + d.floor:.2f} (below {1 / (1 + d.floor):.2f}), and {same}; a cell measured while the speed "
        "probe found the machine off its usual speed (drift) must clear that factor as well."
        + (
            ""
            if d.control
            else " To see more: both kernels as variants of one run (--variant-a/--variant-b), a --control, "
            "or interleaved run sets of 3 or more runs; --run-spread PCT states your own machine's figure."
        )
    )


def _few_visits_text(j: Judgement) -> str:
    d = j.design
    v = d.sample_floor
    who = "Cells compared as measured are" if d.control else "This comparison is"
    both = " (or past the run-to-run floor below, where that is larger)" if j.blind else ""
    band = same_band(d.tolerance, v)
    same = f"'same' only from {band_text(band)}" if band > 1 else "none 'same'"
    return (
        f"{who} BLIND to the spread between visits: judged by the samples of fewer than {MIN_REPLICATES} "
        "visits a side, nothing paired by round, so no interval here holds how much the next visit of the "
        f"same code moves. Identical code's visits of one run moved by a factor of up to {1 + v:.2f} "
        f"({VISIT_SPREAD_SOURCE if d.sample_spread is None else 'stated with --visit-spread'}), "
        f"so a cell is called slower (faster) only where, besides the verdict rule, its ratio lies above "
        f"{1 + v:.2f} (below {1 / (1 + v):.2f}){both}, and {same}. To see more: --rounds "
        f"{MIN_REPLICATES} or more."
    )


def _unseen_text(j: Judgement) -> str:
    d = j.design
    if d.same_run:
        seen = "It cannot see what moves between runs, which falls on both cells of one run alike."
    elif j.level == "run":
        seen = (
            "It sees the spread between runs; it cannot see a change that every run of one side met and "
            "the other's did not (a machine slower through all of B), which a --control takes out."
        )
    else:
        seen = ""
    if d.control is not None:
        seen += " It cannot see a change of the control's own speed, which the other verdicts are divided by."
    if j.few_visits:
        seen += " " + _few_visits_text(j)
    return (seen + " " + _blind_text(j)) if j.blind else seen


def rule_text(j: Judgement) -> str:
    """The one rule text of a comparison: the level, the pairing, the control, the test, the verdict rule,
    the Holm family and the gate, and what the evidence cannot see."""
    d = j.design
    test = "a paired t-test of the log ratios" if j.paired else "Welch's t-test of the logs"
    family = f"the {j.family} cells judged" + (" (not the control's own)" if d.control else "")
    gate = (
        f"Gate (--fail-above {d.threshold.text}): a cell fails when it is 'slower', its p Holm-adjusted "
        f"over {family} is below {d.alpha:g} (in a blind comparison the floor below takes Holm's place), and "
        f"{_STAT_TEXT[d.threshold.stat]} grew by more than the threshold"
        + (" (B's over the control's median on each side)" if d.control else "")
        + "; a cell ok in A and wrong, error, crashed or timeout in B fails whatever the statistics."
        if d.threshold is not None
        else f"No gate (no --fail-above); p_holm is Holm's step-down over {family}."
    )
    return " ".join(
        [
            f"Judged at the {j.level} level: the replicates are {_REPLICATE[j.level]}, the coarsest level "
            f"(run > visit > sample) with {MIN_REPLICATES} or more a side in every cell judged.",
            _pairing_text(j),
            _control_text(j).strip(),
            f"Test: {test}; B/A is exp(mean log difference), a ratio of geometric means, and its "
            f"{CI_LEVEL:.0%} CI exp of the t interval.",
            f"Verdict: 'same' when the CI lies from {band_text(same_band(d.tolerance))} "
            f"({d.tolerance:.0%} either way, as a ratio); 'slower' ('faster') when "
            f"p < {d.alpha:g} and the whole CI lies above (below) 1; else 'ambiguous'.",
            gate,
            _unseen_text(j),
        ]
    ).replace("  ", " ")


# ---- two variants of one shape in one run: the report's ranking and the settle rounds ---------------------


def _row_list(row: Any, name: str) -> list[float]:
    """A list column of a row (a dict or a pandas row) as floats, [] where it has none."""
    return float_list(row.get(name) if hasattr(row, "get") else None)


def _visits(row: Any) -> list[float]:
    """A row's visit medians where it has MIN_REPLICATES or more, each with its sample count."""
    medians, counts = _row_list(row, "visit_medians_ms"), _row_list(row, "visit_samples")
    return medians if len(medians) >= MIN_REPLICATES and len(counts) == len(medians) else []


def separation(first: Any, other: Any) -> Test:
    """The ranking's test of `other` against `first` (rows of one run and one shape): their visits paired by
    index (over the visits both have) where both have 3 or more with their sample counts, else Welch's t
    on the log samples."""
    va, vb = _visits(first), _visits(other)
    if va and vb:
        k = min(len(va), len(vb))
        return paired_test(va[:k], vb[:k])
    return welch_test(_row_list(first, "samples_ms"), _row_list(other, "samples_ms"))


def separated(
    first: Any, other: Any, *, tolerance: float = TOLERANCE, alpha: float = ALPHA, test: Test | None = None
) -> bool:
    """Whether `other` is told apart from the faster `first`: at least `tolerance` slower by median and
    judged slower at alpha by `separation` (given as `test` where the caller has it already)."""
    try:
        lead = float(other["time_ms_median"]) / float(first["time_ms_median"])
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    if not lead >= 1 + tolerance:
        return False
    test = separation(first, other) if test is None else test
    return math.isfinite(test.p) and test.p < alpha and test.d > 0
