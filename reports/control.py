"""`attnbench compare --control VARIANT`: run B against run A relative to a variant whose code is the same in
both, so that what moved every cell alike (the machine between the two runs) is taken out of the verdicts.

Two runs of the same code on a shared machine differ as wholes: on the 2-core reference VM whole runs took
9.5 to 13.8 s, and every cell of the slow one was slower. No interval inside either run can see that, so a
gate on identical code fails (benchmarks/false_alarm.py). A control variant measured in both runs at every
shape shows it: its ratio B/A at a shape is the machine's change at that shape. Each other variant's times
in B are divided by it (B's median and samples times median(control, A) / median(control, B)). Where both
runs measured the cells in 3 or more rounds, every visit is put in the control's A units by the control's
visit of the same round, measured seconds before or after it (by_visit: its samples and median times
median(control, A) / that visit's control median, on both sides), and the ratio, interval and gate are
computed from those, so they also leave out the drift within each run; with process medians (--processes)
each is taken over the control's of the same process for the interval, and the ratio is the scaled one.

What it cannot see is a change of the control's own speed: the control's cells are compared as measured and
never fail the gate (a slower control is the machine's, or shared code's, and every other verdict has been
divided by it). A cell whose control is not ok in both runs is compared as measured, and says so.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from attnbench.results.ranks import split_visits
from attnbench.results.schema import float_list

from .tables import present

CONTROL_RULE = (
    "Relative to the control variant {control}: its B/A at each shape (its code is the same in both runs, "
    "so its change is the machine's) divides the other variants' B times; in runs made in 3 or more "
    "rounds, each visit is divided by the control's visit of the same round (measured seconds apart) on "
    "both sides, and the ratio, interval and gate come from those; with process medians, each is taken "
    "over the control's of the same process; in run sets, each run's over the control's in the same run "
    "(visit by visit where made in rounds). "
    "The control's own cells are shown as measured and never fail the gate."
)


def shape_key(r: Any, axes: list[str]) -> tuple:
    """A paired cell's axes but its variant: the shape the control is looked up at."""
    return tuple(r[x] for x in axes if x != "variant")


def index(paired, axes: list[str], control: str) -> dict[tuple, Any]:
    """The control's paired rows by shape (compare._paired's rows: A's columns _a, B's _b)."""
    rows = paired[paired["variant"] == control]
    return {shape_key(r, axes): r for _, r in rows.iterrows()}


def usable(c: Any) -> bool:
    """Whether a control cell is ok in both runs with a positive median on each side."""
    if c is None or c["status_a"] != "ok" or c["status_b"] != "ok":
        return False
    if not (present(c["time_ms_median_a"]) and present(c["time_ms_median_b"])):
        return False
    return float(c["time_ms_median_a"]) > 0 and float(c["time_ms_median_b"]) > 0


def factor(c: Any) -> float:
    """What B's times are multiplied by: median(control, A) / median(control, B) (NaN without one)."""
    return float(c["time_ms_median_a"]) / float(c["time_ms_median_b"]) if usable(c) else math.nan


def by_visit(r: Any, c: Any, fewest: int = 3) -> tuple[list, list, list, list] | None:
    """A cell of two runs in rounds, each visit in the control's A units (its samples and median times
    median(control, A) / the control's median of the same visit, in its own run): (samples A, samples B,
    visit medians A, visit medians B). None unless both sides have `fewest` or more visits with their
    sample counts (round_samples) made in rounds the control was visited in too, and every median
    positive. The first k visits of any two cells are the same k rounds (a settle round, harness.run.settle,
    visits again only some variants): a side's visits are those its cell and the control both made."""
    ref = float(c["time_ms_median_a"])
    out = []
    for side in ("a", "b"):
        samples, medians = float_list(r[f"samples_ms_{side}"]), float_list(r[f"round_medians_ms_{side}"])
        counts, controls = float_list(r[f"round_samples_{side}"]), float_list(c[f"round_medians_ms_{side}"])
        visits = split_visits(samples, counts)
        if len(counts) != len(medians) or visits is None:
            return None
        k = min(len(medians), len(controls))
        if k < fewest:
            return None
        visits, medians, controls = visits[:k], medians[:k], controls[:k]
        if min(medians) <= 0 or min(controls) <= 0:
            return None
        factors = [ref / m for m in controls]
        scaled = [s * f for visit, f in zip(visits, factors, strict=True) for s in visit]
        out.append((scaled, [m * f for m, f in zip(medians, factors, strict=True)]))
    (sa, pa), (sb, pb) = out
    return sa, sb, pa, pb


def by_run(r: Any, c: Any) -> tuple[list[float], list[float]] | None:
    """A cell of two run sets (results.runset), each run's level in the control's A units: the median over
    the run's visits of (visit median / the control's visit of the same round), times median(control, A),
    or, in a run made without rounds, its median over the control's median in the same run. None where a
    side's runs and the control's do not match one to one or a median is not positive."""
    ref = float(c["time_ms_median_a"])
    out = []
    for side in ("a", "b"):
        medians, controls = float_list(r[f"run_medians_ms_{side}"]), float_list(c[f"run_medians_ms_{side}"])
        visits, control_visits = r[f"run_round_medians_{side}"], c[f"run_round_medians_{side}"]
        if not medians or len(medians) != len(controls) or min(medians + controls) <= 0:
            return None
        n = len(medians)
        if not (isinstance(visits, list) and isinstance(control_visits, list)) or {
            len(visits),
            len(control_visits),
        } != {n}:
            visits = control_visits = [[]] * n  # no visits to pair: each run's median over the control's
        levels = []
        for m, cm, v, cv in zip(medians, controls, visits, control_visits, strict=True):
            v, cv = float_list(v), float_list(cv)
            k = min(len(v), len(cv))  # the rounds both were visited in (settle rounds visit some again)
            if k and min(v[:k] + cv[:k]) > 0:
                levels.append(ref * statistics.median(x / y for x, y in zip(v[:k], cv[:k], strict=True)))
            else:
                levels.append(ref * m / cm)
        out.append(levels)
    return out[0], out[1]


def per_visit(values: list[float], control_values: list[float]) -> list[float] | None:
    """Each visit's (or process's) median over the control's of the same visit; None where the counts
    differ or a value is not positive (the scalar factor is used then)."""
    if len(values) != len(control_values) or not values:
        return None
    if min(values) <= 0 or min(control_values) <= 0:
        return None
    return [v / c for v, c in zip(values, control_values, strict=True)]


def check(control: str | None, normalize: str | None, a, b) -> None:
    """ValueError (one line) unless the control is a variant of both runs, and not with --normalize."""
    if control is None:
        return
    if normalize:
        raise ValueError("--control and --normalize both rescale B's times: choose one")
    require_variant(a, control, "--control", "A")
    require_variant(b, control, "--control", "B")


def require_variant(df, name: str, flag: str, side: str) -> None:
    """ValueError (one line, naming the run's variants) unless `name` is a variant of run `side`."""
    names = set(df["variant"].dropna().astype(str))
    if name not in names:
        known = ", ".join(sorted(names)) or "none"
        raise ValueError(f"{flag} {name!r} is not a variant of run {side} (it has: {known})")
