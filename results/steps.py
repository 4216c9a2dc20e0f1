"""Steps in each series of the history store (a cell on one machine over its runs in time): where its median
time moves for good, found by ruptures' PELT on the log medians (a maintained detector, not one of our own).

The cost is ruptures' `l1` (each segment around its median): a run's time is a median, and the medians of
real runs have heavy tails (a slow visit, a busy neighbour), which a mean-based cost takes for steps. The
penalty per step is PENALTY x the series' own noise x log(runs), the noise read robustly from the run-to-run
differences, so that a quiet machine's 3% step counts and a noisy one's 3% wobble does not. A segment holds at
least MIN_RUNS runs: a step shows once two runs after it agree, and one slow run alone is never a step.

Long series are searched in two passes, as `benchmarks/history_check.py` measured: PELT over every
`jump`-th run (n // COARSE_POINTS), then each step placed at the run where the same cost is least within a
jump of it; a series of up to COARSE_POINTS runs is searched at every run.

Each step says its size (after / before, the ratio of the two segments' medians) with the judge's 95%
interval (results.judge: Welch's t on the runs' log times, a run each replicate), the last run before it and
the first after (their commits, versions and variant source), the runs it may be at (every first run after
it whose cost is within LOCATION_SLACK x the noise of the least: the range to bisect, when the noise cannot
pin one run), and whether the device's calibration moved by more than CALIBRATION_MOVED between the two
segments, beyond its own noise (its interval, made as the step's, leaves out no change): then the machine,
not the code, may have changed.

A change to a variant's code moves many of its cells at once, and its series (one machine, one variant,
the same runs) are searched together too: PELT on all of them at once, each over its own noise, penalised
by (K + (PENALTY - 1) x sqrt K) x log(runs) for K series, PENALTY at one (share_steps). A step found there is
given to each series with a step of its own about there, and to each whose own cost a cut there lowers by
SHARED_SAVING x its noise x log(runs). Then steps of one machine and variant whose ranges overlap are one
step: placed where the sum of their l1 costs, each over its series' noise, is least, its range every run
within LOCATION_SLACK of that (place_shared). A variant's cells are noisy nearly independently (in one visit
they correlate 0.03 on the 2-core VM), so the more cells step together, the smaller the step that is found
and the surer its run (benchmarks/history_check.py). The gate judges such cells as one (pool_shared) only
where their steps go one way and may be one step: a cell that stepped the other way, or a cell of no step by
its own test whose interval leaves out theirs, would cancel or dilute a real step, and is judged alone; and a
cell whose own test is surer than theirs is judged by its own (Step.as_one): pooling never hides a slowdown.

A shared machine drifts: a slow spell moves every variant at once. Each step therefore also says how the
machine's other variants moved across it (per run, the median over a variant's series of its time over the
series' median; per run, the median over the other variants), and its size beyond them: the step of its
times over that move. The gate (`attnbench history check --fail-on-step`) judges a step beyond the other
variants where they were measured and none of ENVIRONMENT changed across it, and the step itself where it
did (a torch upgrade may move every variant, and that is no drift), or a run from it (`Step.nearby`: noise can
place a step a run off the change that made it). A step is judged against its segment before it, or where
that holds fewer than MIN_REPLICATES runs (a short segment between two steps, which never grows), against the
nearest earlier segment that holds as many (`Step.against`). It fails a latest step as compare's gate fails a
cell (results.judge, 7): 'slower' by the judge's test, its p Holm-adjusted over its machine's series that
could have been judged (2 x MIN_REPLICATES runs or more: one test per series, the more series, the more noise
steps one of them shows; another machine's series are another question), below ALPHA, and more than
--fail-on-step slower (`Step.fails`). A step with fewer than MIN_REPLICATES runs before it in its whole series
can never be judged (`Step.untestable`): `check` says it, and it fails nothing. Its words are
results.steps_text's.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from .devices import SPLIT_CALIBRATION
from .identity import code_differs
from .judge import ALPHA, holm
from .steps_pool import pool_shared
from .ttest import MIN_REPLICATES, NO_TEST, ratio_interval, welch_test

PENALTY = 3.0  # x noise x log(n): benchmarks/history_check.py's planted steps and flat series chose it
MIN_RUNS = 2  # the fewest runs a segment holds (ruptures' min_size)
RUNS_TO_JUDGE = (
    2 * MIN_REPLICATES
)  # the fewest runs of a series that can judge a step: MIN_REPLICATES each side
COARSE_POINTS = 100  # longer series are searched over every (n // COARSE_POINTS)-th run, then refined
NOISE_FLOOR = 1e-3  # the least noise assumed (0.1% in log): a series of identical times still has a scale
CALIBRATION_MOVED = SPLIT_CALIBRATION  # a calibration more than 10% apart: another machine, as for groups
# the runs a step may be at: cost within this x the series' noise of the least. On the 2-core VM's visit
# noise (benchmarks/history_check.py: 40 runs, each the median of 3 visits, a 10% step) the range held the
# planted run in 92% of 200 seeds, 3.7 runs wide on average; the least-cost run alone was it in 69%
LOCATION_SLACK = 3.0
# what is compared on both sides of a step: the run's fingerprint (the code's commit and sha256, versions,
# the settings that move its times: the sweep's --env, the allocator and thread variables, torch's threads,
# transparent huge pages) and the variant's source
SIDES = (
    "git_commit", "code_sha256", "torch", "cuda", "driver", "python", "xformers", "attnbench_version",
    "sweep_env", "allocator_env", "torch_threads", "transparent_hugepages", "thp_mem_alloc_enable",
    "variant_source",
)  # fmt: skip
# a series takes a step its variant's series share where a cut there saves this x its noise x log(n) of its
# own l1 cost (a third of PENALTY: the place is given, not searched). On the 2-core VM's visit noise, a 10%
# step in 1 cell of 5 gave 0.3% of the other 4 a false step (a 95% bootstrap interval instead: 2.2%)
SHARED_SAVING = 1.0
RUN_FIELDS = ("run_id", "created", "path", *SIDES)
# the software under every variant: where any of it changed across a step, the other variants' move may be
# it, so the gate judges the step itself
ENVIRONMENT = ("torch", "cuda", "driver", "python", "xformers")


@dataclass(frozen=True)
class Step:
    """A step in one series: its size with an interval, where it is, and what changed across it."""

    machine: str
    cell_id: str
    at: int  # the first run after the step: its place in the series (0-based)
    runs: int  # the series' length
    ratio: float  # the segment after over the runs it is judged against (against), by their medians (1.1:
    # 10% slower): its segment before it, or where that holds fewer than MIN_REPLICATES runs, the nearest
    # earlier segment that holds as many (short_before), so that the judge can test it
    low: float  # the ratio's 95% interval (the judge's: Welch's t of the runs after against those
    # before, welch_test; NaN when a side has fewer than 3 runs)
    high: float
    before: dict[str, Any]  # the last run before the step (RUN_FIELDS)
    after: dict[str, Any]  # the first run after it
    calibration: float | None  # the device's calibration after / before (the sides' medians), None unknown
    latest: bool  # the series' last step
    runs_before: int = 0  # the runs on each side: those it is judged against, its segment after it
    runs_after: int = 0
    first: tuple[int, int] = (0, 0)  # the earliest and latest place the first run after it may have
    # the last run surely before it (before first[0]) and the first surely after it (first[1]): the commits to
    # bisect between
    since: dict[str, Any] | None = None
    until: dict[str, Any] | None = None
    variant: str = ""
    calibration_interval: tuple[float, float] = (math.nan, math.nan)  # its 95% interval, as the step's
    cells: int = 1  # the series of this machine and variant placed with it, itself included (1: alone)
    other_way: int = 0  # those of them whose step went the other way (faster where it is slower, or slower)
    others: float | None = None  # the machine's other variants' move across it (after / before), None unknown
    beyond: float | None = None  # the step of its times over that move (after / before)
    beyond_interval: tuple[float, float] = (math.nan, math.nan)  # its 95% interval, as the step's
    # a step its variant's cells took together (cells > 1) the same way and of one size (pool_shared): the
    # cells' step as one, per run the median of their times over their medians before it (and over the other
    # variants' move, where the gate judges beyond them): (ratio, low, high), Student's t; None alone or
    # with fewer than 3 runs a side
    pooled: tuple[float, float, float] | None = None
    pooled_p: float = math.nan  # that step's p
    pooled_cells: int = 1  # the cells judged as one, itself included (1: judged alone)
    p: float = math.nan  # the judge's p of what the gate judges (gated), NaN with fewer than 3 runs a side
    own_p: float = math.nan  # the judge's p of its own step (own), as the gate would judge it alone
    p_holm: float = math.nan  # that p Holm-adjusted over its machine's family (holm_adjusted)
    family: int = 0
    against: tuple[int, int] = (0, 0)  # the runs it is judged against (0-based, the end left out)
    # where its own segment before it is too short to judge (fewer than MIN_REPLICATES runs, so that it is
    # judged against an earlier segment): those runs, and the step over them alone; 0 and None otherwise
    short_before: int = 0
    short_ratio: float | None = None
    # what changed between two runs near it but not across it (within its range, or a run from it):
    # ((t, {field: (before, after)}), ...) with t the first run after that change (0-based), as changed()
    nearby: tuple[tuple[int, dict[str, tuple[Any, Any]]], ...] = ()

    @property
    def change(self) -> float:
        """The step as a fraction: +0.10 is 10% slower after it."""
        return self.ratio - 1.0

    @property
    def against_others(self) -> bool:
        """The gate judges it beyond the other variants: they were measured, and no ENVIRONMENT changed."""
        near = [k for _, changed in self.nearby for k in changed]
        return self.beyond is not None and not any(k in (*self.changed(), *near) for k in ENVIRONMENT)

    @property
    def own(self) -> tuple[float, float, float]:
        """(ratio, low, high) of its own step as the gate judges it alone: beyond the other variants
        (against_others), else as it is."""
        if self.against_others:
            return (self.beyond, *self.beyond_interval)
        return self.ratio, self.low, self.high

    @property
    def as_one(self) -> bool:
        """The gate judges it as one with the cells that took it together (pooled), which it does unless its
        own test is surer (or has a test where theirs has none): pooling makes a step surer sooner, and never
        hides a cell's own slowdown."""
        return self.pooled is not None and (self.own_p != self.own_p or self.pooled_p <= self.own_p)

    @property
    def gated(self) -> tuple[float, float, float]:
        """(ratio, low, high) that the gate judges: the step of the cells that took it together (as_one),
        else its own (own)."""
        return self.pooled if self.as_one else self.own

    @property
    def gated_change(self) -> float:
        """What the gate judges as a fraction: +0.10 is 10% slower after it."""
        return self.gated[0] - 1.0

    @property
    def judged(self) -> bool:
        """What the gate judges has a test: 3 runs or more on each side (welch_test)."""
        return self.p == self.p

    @property
    def untestable(self) -> bool:
        """No test can ever judge it: fewer than MIN_REPLICATES runs before it in its whole series, and as
        many after it (until then it is pending: the next runs may still move it)."""
        return self.runs_before < MIN_REPLICATES <= self.runs_after

    def verdict(self, limit: float) -> str | None:
        """What the gate says of it (VERDICTS' keys), None for a step it does not judge: not its series'
        latest, or not over `limit` slower."""
        if not self.latest or not self.gated_change > limit:
            return None
        if self.untestable:
            return "untestable"
        if not self.judged:
            return "pending"
        if not self.gated[1] > 1.0:
            return "noise"
        if self.ratio < 1.0:  # slower only beside the others' larger fall: its own time did not rise
            return "fell"
        return "holm" if not self.p_holm < ALPHA else "fails"

    def fails(self, limit: float) -> bool:
        """The gate's verdict, as compare's (results.judge, 7): the series' latest step, over `limit` slower,
        'slower' by the judge's test (its interval above 1, p < ALPHA), its own time risen (a step slower only
        beyond the other variants while its own time fell, as when a setting speeds the others more, is
        'fell': said, not failed), and its p Holm-adjusted over the family below ALPHA. A step no test can
        ever judge (untestable) fails nothing: `check` marks it UNJUDGED and counts it, since failing it
        would fail every night after it, on two runs' word."""
        return self.verdict(limit) == "fails"

    @property
    def calibration_moved(self) -> bool:
        """More than CALIBRATION_MOVED, and its interval leaves out no change. Without an interval (a side
        with too few runs) it is not said to have moved: a VM's calibration alone can move that much between
        two runs (calibration_text says there are too few runs to tell)."""
        low, high = self.calibration_interval
        beyond = self.calibration is not None and abs(self.calibration - 1.0) > CALIBRATION_MOVED
        return beyond and low == low and not low <= 1.0 <= high

    def changed(self) -> dict[str, tuple[Any, Any]]:
        """What differs between the last run before and the first after: {field: (before, after)}."""
        return differ(self.before, self.after)


def noise(logs: Sequence[float]) -> float:
    """The series' noise in log units, robust to steps and outliers: the median absolute run-to-run
    difference, scaled to a standard deviation (/ 0.6745 for the normal's MAD, / sqrt 2 for a difference)."""
    import numpy as np

    x = np.asarray(logs, dtype=float)
    if len(x) < 2:
        return NOISE_FLOOR
    return max(float(np.median(np.abs(np.diff(x)))) / 0.6745 / math.sqrt(2), NOISE_FLOOR)


def breakpoints(values: Sequence[float], *, penalty: float = PENALTY, min_runs: int = MIN_RUNS) -> list[int]:
    """Where each new segment of `values` (times, > 0) starts: ruptures' PELT with the l1 cost on their logs,
    penalised by `penalty` x noise x log(n); [] for a series too short to hold two segments."""
    return joint_breakpoints([values], penalty=penalty, min_runs=min_runs)


def joint_breakpoints(
    series: Sequence[Sequence[float]], *, penalty: float = PENALTY, min_runs: int = MIN_RUNS
) -> list[int]:
    """Where K series of times measured in the same runs step together: ruptures' PELT with the l1 cost on
    their logs, each over its own noise, penalised by (K + (penalty - 1) x sqrt K) x log(n) (`penalty` for
    one series: the cost a step saves grows as K in flat series, its spread as sqrt K)."""
    import numpy as np

    z = np.column_stack([np.log(np.asarray(t, dtype=float)) for t in series])
    z = z / np.array([noise(z[:, j]) for j in range(z.shape[1])])
    n, k = z.shape
    if n < 2 * min_runs:
        return []
    return _pelt(z, (k + (penalty - 1) * math.sqrt(k)) * math.log(n), min_runs)


def _pelt(z, pen: float, min_runs: int) -> list[int]:
    """PELT over every jump-th run (n // COARSE_POINTS), then each step placed where the same cost is least
    within a jump of it."""
    rpt = ruptures()
    n = len(z)
    jump = max(1, n // COARSE_POINTS)
    found = rpt.Pelt(model="l1", min_size=min_runs, jump=jump).fit(z).predict(pen=pen)[:-1]
    if jump == 1 or not found:
        return [int(b) for b in found]
    cost = rpt.costs.CostL1().fit(z)
    edges = [0, *found, n]
    out = []
    for i, b in enumerate(found):  # the same cost's least point within a jump of each coarse step
        lo, hi = max(edges[i] + min_runs, b - jump), min(edges[i + 2] - min_runs, b + jump)
        out.append(
            min(range(lo, hi + 1), key=lambda t: cost.error(edges[i], t) + cost.error(t, edges[i + 2]))
        )
        edges[i + 1] = out[-1]
    return out


def location(values: Sequence[float], at: int, lo: int, hi: int, min_runs: int = MIN_RUNS) -> tuple[int, int]:
    """(earliest, latest) first run after a step found at `at` between segment edges lo and hi: every t whose
    two-segment l1 cost on the logs of values[lo:hi] is within LOCATION_SLACK x the series' noise of at's."""
    cost, logs = l1_cost(values)
    slack = LOCATION_SLACK * noise(logs)
    cut = {t: cost.error(lo, t) + cost.error(t, hi) for t in range(lo + min_runs, hi - min_runs + 1)}
    least = cut.get(at, min(cut.values()))
    near = [at, *(t for t, c in cut.items() if c - least <= slack)]
    return min(near), max(near)


def l1_cost(values: Sequence[float]):
    """ruptures' l1 cost fitted to the logs of values (what PELT segments here), and the logs."""
    import numpy as np

    logs = np.log(np.asarray(values, dtype=float))
    return ruptures().costs.CostL1().fit(logs.reshape(-1, 1)), logs


def ruptures():
    """The ruptures module; ImportError in one line saying how to install it where it is missing."""
    try:
        import ruptures as rpt
    except ImportError:
        raise ImportError(
            "finding steps needs ruptures: pip install 'attnbench[history]' (or pip install ruptures)"
        ) from None
    return rpt


def _median(values: Sequence[float]) -> float | None:
    good = sorted(v for v in values if v is not None and v == v and v > 0)
    if not good:
        return None
    mid = len(good) // 2
    return good[mid] if len(good) % 2 else (good[mid - 1] + good[mid]) / 2


def _calibration(series, before_runs: tuple[int, int], after_runs: tuple[int, int]):
    """The device's calibration after / before a step, and its interval (welch_test): the matmul ceiling for
    the cell's dtype where the runs have it, else the copy bandwidth; the median over each side's runs
    ((first, end) each)."""
    for col in ("cal_matmul_tflops", "cal_copy_gbps"):
        values = [None if _missing(v) else float(v) for v in series[col].tolist()]
        before, after = (
            [v for v in values[a:b] if v is not None and v > 0] for a, b in (before_runs, after_runs)
        )
        if before and after:
            return _median(after) / _median(before), ratio_interval(welch_test(before, after))
    return None, (math.nan, math.nan)


def run_fields(series, i: int) -> dict[str, Any]:
    """The i-th run of a series as a step names its sides (RUN_FIELDS, each None where not recorded)."""
    row = series.iloc[i]
    return {k: (None if _missing(row.get(k)) else str(row.get(k))) for k in RUN_FIELDS}


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(value != value)
    except TypeError:  # pd.NA
        return True


@dataclass
class _Series:
    """One series with its steps while they are placed: the first run after each, its range, how many
    series share it."""

    frame: Any
    times: list[float]
    cuts: list[int]
    firsts: list[tuple[int, int]] = field(default_factory=list)
    cells: list[int] = field(default_factory=list)
    others: list[float] | None = None  # per run, the other variants' move (log), None where one is missing

    def edges(self, i: int) -> tuple[int, int]:
        """The segment edges around step i: the previous step (or 0) and the next (or the series' end)."""
        edges = [0, *self.cuts, len(self.times)]
        return edges[i], edges[i + 2]

    def against(self, i: int) -> tuple[int, int]:
        """The runs step i is judged against: its segment before it, or where that holds fewer than
        MIN_REPLICATES runs, the nearest earlier segment that holds as many (a short segment between two
        steps never grows, and the judge needs 3 a side; the runs between are a passing level, left out), or
        where none does, every run before it."""
        edges = [0, *self.cuts, len(self.times)]
        for k in range(i, -1, -1):
            if edges[k + 1] - edges[k] >= MIN_REPLICATES:
                return edges[k], edges[k + 1]
        return 0, edges[i + 1]

    @cached_property
    def key(self) -> tuple:
        """What series must share to share a step: the machine, the variant, the runs."""
        f = self.frame
        return (str(f["machine"].iloc[0]), str(f["variant"].iloc[0]), tuple(f[run_column(f)].astype(str)))

    @cached_property
    def cost(self) -> tuple[Any, float]:
        """ruptures' l1 cost fitted to the logs of its times, and its noise (what joint placing reads)."""
        cost, logs = l1_cost(self.times)
        return cost, noise(logs)


def _found(series, penalty: float) -> _Series:
    times = [float(t) for t in series["time_ms_median"]]
    found = _Series(series, times, breakpoints(times, penalty=penalty))
    for i, at in enumerate(found.cuts):
        found.firsts.append(location(times, at, *found.edges(i)))
        found.cells.append(1)
    return found


def share_steps(found: Sequence[_Series], penalty: float) -> None:
    """Steps that series of one machine and variant, measured in the same runs, take together
    (joint_breakpoints), given to each series that has a step of its own within MIN_RUNS of one (moved
    there) or whose own cost a cut there lowers by SHARED_SAVING x noise x log(n) (added), in place."""
    groups = defaultdict(list)
    for s in found:
        groups[s.key].append(s)
    for members in groups.values():
        if len(members) > 1:
            for b in joint_breakpoints([s.times for s in members], penalty=penalty):
                for s in members:
                    _take(s, b)


def _take(s: _Series, b: int) -> None:
    near = [i for i, (lo, hi) in enumerate(s.firsts) if lo - MIN_RUNS < b < hi + MIN_RUNS]
    if len(near) > 1:
        return  # two steps of its own about there: left as they are
    others = [c for i, c in enumerate(s.cuts) if i not in near]
    lo = max((c for c in others if c < b), default=0)
    hi = min((c for c in others if c > b), default=len(s.times))
    if b - lo < MIN_RUNS or hi - b < MIN_RUNS:
        return
    if not near:  # a series without a step of its own there takes it where cutting there saves enough
        cost, scale = s.cost
        saved = (cost.error(lo, hi) - cost.error(lo, b) - cost.error(b, hi)) / scale
        if saved < SHARED_SAVING * math.log(len(s.times)):
            return
    i = near[0] if near else sum(c < b for c in s.cuts)
    if not near:
        s.cuts.insert(i, b)
        s.firsts.insert(i, (b, b))
        s.cells.insert(i, 1)
    s.cuts[i], s.firsts[i] = b, location(s.times, b, lo, hi)


def place_shared(found: Sequence[_Series]) -> None:
    """Place every step that series of one machine and variant, measured in the same runs, share (their
    ranges overlap) at the run of least summed cost, each cost over its series' noise (in place)."""
    groups = defaultdict(list)
    for s in found:
        for i in range(len(s.cuts)):
            groups[s.key].append((s, i))
    for members in groups.values():
        members.sort(key=lambda m: m[0].firsts[m[1]][0])
        cluster, reach = [members[0]], members[0][0].firsts[members[0][1]][1]
        for s, i in members[1:]:
            if s.firsts[i][0] <= reach:
                cluster.append((s, i))
                reach = max(reach, s.firsts[i][1])
                continue
            _place_jointly(cluster)
            cluster, reach = [(s, i)], s.firsts[i][1]
        _place_jointly(cluster)


def _place_jointly(cluster: list[tuple[_Series, int]]) -> None:
    if len(cluster) < 2 or len({id(s) for s, _ in cluster}) < len(cluster):
        return  # alone, or two steps of one series: left where each series put them
    terms, lo_t, hi_t = [], min(s.firsts[i][0] for s, i in cluster), max(s.firsts[i][1] for s, i in cluster)
    for s, i in cluster:
        lo, hi = s.edges(i)
        terms.append((*s.cost, lo, hi))
        lo_t, hi_t = max(lo_t, lo + MIN_RUNS), min(hi_t, hi - MIN_RUNS)
    if lo_t > hi_t:
        return
    joint = {
        t: sum((cost.error(lo, t) + cost.error(t, hi)) / scale for cost, scale, lo, hi in terms)
        for t in range(lo_t, hi_t + 1)
    }
    best = min(joint, key=joint.get)
    near = [t for t, c in joint.items() if c - joint[best] <= LOCATION_SLACK]
    for s, i in cluster:
        s.cuts[i], s.firsts[i], s.cells[i] = best, (min(near), max(near)), len(cluster)


def _steps(found: _Series) -> list[Step]:
    """The Steps of a series whose steps are placed."""
    series, times = found.frame, found.times
    machine, cell = str(series["machine"].iloc[0]), str(series["cell_id"].iloc[0])
    steps = []
    for i, at in enumerate(found.cuts):
        lo, hi = found.edges(i)
        judged = found.against(i)
        before, after = times[judged[0] : judged[1]], times[at:hi]
        short = at - lo if judged != (lo, at) else 0
        own = welch_test(before, after)
        low, high = ratio_interval(own)
        first = found.firsts[i]
        calibration, calibration_interval = _calibration(series, judged, (at, hi))
        others, beyond, against = _beyond_others(found.others, times, judged, (at, hi))
        steps.append(
            Step(
                machine=machine,
                cell_id=cell,
                at=at,
                runs=len(times),
                ratio=_median(after) / _median(before),
                low=low,
                high=high,
                before=run_fields(series, at - 1),
                after=run_fields(series, at),
                calibration=calibration,
                calibration_interval=calibration_interval,
                latest=i == len(found.cuts) - 1,
                runs_before=len(before),
                runs_after=len(after),
                first=first,
                since=run_fields(series, first[0] - 1),
                until=run_fields(series, first[1]),
                variant=str(series["variant"].iloc[0]),
                cells=found.cells[i],
                others=others,
                beyond=beyond,
                beyond_interval=ratio_interval(against),
                against=judged,
                short_before=short,
                short_ratio=_median(after) / _median(times[at - short : at]) if short else None,
                nearby=_nearby(series, at, first),
            )
        )
        gated = against if steps[-1].against_others else own
        steps[-1] = replace(steps[-1], p=gated.p, own_p=gated.p)
    return steps


def differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The run fields (SIDES: commits, versions, sources, device) that differ from run a to run b; a variant's
    source by its code alone (identity.code_differs): the same file loaded another way, or hashed by an older
    attnbench's rule, is no change."""
    out = {k: (a.get(k), b.get(k)) for k in SIDES if a.get(k) != b.get(k)}
    if "variant_source" in out and not code_differs(a.get("variant_source"), b.get("variant_source")):
        del out["variant_source"]
    return out


def _nearby(series, at: int, first: tuple[int, int]) -> tuple[tuple[int, dict[str, tuple[Any, Any]]], ...]:
    """What changed between two runs other than across the step, within the runs it may be at (first) or one
    run from it: noise can place a step a run off the change that made it."""
    near = []
    for t in range(max(1, min(first[0], at - 1)), min(len(series) - 1, max(first[1], at + 1)) + 1):
        changed = differ(run_fields(series, t - 1), run_fields(series, t))
        if t != at and changed:
            near.append((t, changed))
    return tuple(near)


def _beyond_others(others, times, before_runs: tuple[int, int], after_runs: tuple[int, int]):
    """(the other variants' move across a step, its times' step over that move, that step's test: each run
    divided by the others' move that run, as compare's control divides), each side its runs ((first, end));
    None, None, NO_TEST where the other variants were not measured in every run."""
    if others is None:
        return None, None, NO_TEST
    sides = [range(*before_runs), range(*after_runs)]
    moved = math.exp(
        statistics.median(others[r] for r in sides[1]) - statistics.median(others[r] for r in sides[0])
    )
    before, after = ([times[r] / math.exp(others[r]) for r in side] for side in sides)
    return moved, _median(after) / _median(before), welch_test(before, after)


def run_column(df) -> str:
    """What tells a frame's runs apart: results.history's run_key (two runs of one run_id made in the same
    second are two keys), else the run_id."""
    return "run_key" if "run_key" in df.columns else "run_id"


def machine_moves(ok) -> dict[tuple[str, str], dict[str, float]]:
    """{(machine, run): {variant: its move that run}}: the median over the variant's series of log(time /
    the series' median)."""
    import numpy as np

    logs = np.log(ok["time_ms_median"].astype(float))
    rel = logs - logs.groupby([ok["machine"], ok["cell_id"]]).transform("median")
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (machine, run, variant), move in (
        rel.groupby([ok["machine"], ok[run_column(ok)], ok["variant"]]).median().items()
    ):
        out[(str(machine), str(run))][str(variant)] = float(move)
    return out


def _others(series, moves) -> list[float] | None:
    """Per run of the series, the median move of the machine's other variants; None where a run has none."""
    machine, variant = str(series["machine"].iloc[0]), str(series["variant"].iloc[0])
    out = []
    for run in series[run_column(series)].astype(str):
        other = [m for v, m in moves.get((machine, run), {}).items() if v != variant]
        if not other:
            return None
        out.append(statistics.median(other))
    return out


def series_steps(series, *, penalty: float = PENALTY) -> list[Step]:
    """The steps of one series alone: the store's rows of one machine and cell_id, ok, in time order
    (results.history.frame's columns)."""
    return _steps(_found(series, penalty))


def _timed(df):
    """The rows of a history frame a series is made of: ok, with a positive median time."""
    return df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)]


def lengths(df) -> list[int]:
    """The runs of each series of a history frame (find's): fewer than RUNS_TO_JUDGE hold no test yet."""
    ok = _timed(df)
    return [int(n) for n in ok.groupby(["machine", "cell_id"]).size()] if len(ok) else []


def find(df, *, penalty: float = PENALTY) -> list[Step]:
    """Every step of every series of a history frame (results.history.frame): per machine and cell_id, the ok
    rows with a positive median time, in the order their runs were made; steps that series of one machine
    and variant share placed together (place_shared)."""
    ok = _timed(df).sort_values(["machine", "cell_id", "created", "run_id"], kind="stable")
    found = [
        _found(series.reset_index(drop=True), penalty) for _, series in ok.groupby(["machine", "cell_id"])
    ]
    moves = machine_moves(ok) if len(ok) else {}
    for s in found:
        s.others = _others(s.frame, moves)
    share_steps(found, penalty)
    place_shared(found)
    return holm_adjusted(pool_shared([(s, _steps(s)) for s in found]), series=judgeable(found))


def judgeable(found: Sequence[_Series]) -> dict[str, int]:
    """{machine: its series that could have been judged}: those with MIN_REPLICATES runs or more on both
    sides of a place a step could be (2 x MIN_REPLICATES runs): a shorter series can hold no test."""
    out: dict[str, int] = defaultdict(int)
    for s in found:
        out[s.key[0]] += len(s.times) >= RUNS_TO_JUDGE
    return dict(out)


def holm_adjusted(found: Sequence[Step], series: Mapping[str, int] | None = None) -> list[Step]:
    """The steps, each latest one with a p given its p Holm-adjusted over its machine's family, and the
    family's size. A machine's steps are a question of their own, so each machine is a family: one test per
    series of it that could have been judged (`series`: {machine: how many}; a series without a step, or
    whose latest step has no test yet, counts as a test that found nothing, p = 1), since any of them could
    have shown a noise step. A series too short for any test, or another machine's, is no test here.
    """
    judged = defaultdict(list)
    for i, s in enumerate(found):
        if s.latest and s.judged:
            judged[s.machine].append(i)
    adjusted = {}
    for machine, steps_ in judged.items():
        family = max((series or {}).get(machine, 0), len(steps_))
        ps = holm([found[i].p for i in steps_] + [1.0] * (family - len(steps_)))
        adjusted.update({i: (p, family) for i, p in zip(steps_, ps, strict=False)})
    return [
        replace(s, p_holm=adjusted[i][0], family=adjusted[i][1]) if i in adjusted else s
        for i, s in enumerate(found)
    ]
