"""What `attnbench history check`'s gate decides over a history store, in one place: the CLI's exit status
and the published site (reports.site_gate, reports.dashboard) both read it, so that a page never says other
than the gate.

With a threshold (`--fail-on-step N%`) the gate fails on each series whose latest step fails at it
(results.steps.Step.fails: slower by the judge's test, its p Holm-adjusted over its machine's series below
ALPHA, and more than N% slower), on each series broken in its latest run (results.breaks.find: BROKEN), on
each series missing from the latest run of its sweep (results.breaks.missing: MISSING), and on a store that
holds nothing ok to judge. Without one it fails on nothing; what it would fail on at any threshold is then
BROKEN and MISSING, and at some threshold each latest step that fails at 0%: a slowdown the judge finds
significant after Holm's adjustment, failed by every threshold below its size (`significant`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import breaks

# how `check` starts a step's line, and the site marks its row, by the step's verdict (Step.verdict)
MARKS = {"fails": "FAIL", "pending": "PENDING", "untestable": "UNJUDGED"}


@dataclass(frozen=True)
class Gate:
    """The gate over a history frame at a threshold (`limit`, a fraction; None: none given)."""

    limit: float | None
    steps: tuple[Any, ...]  # every step found (results.steps.find)
    broken: tuple[Any, ...]  # results.breaks.Broken
    missing: tuple[Any, ...]  # results.breaks.Missing
    series: int  # the ok series there are to judge

    @classmethod
    def of(cls, df, steps, runs=None, limit: float | None = None) -> Gate:
        """The gate of a history frame (results.history.frame), its steps (results.steps.find) and the store's
        runs (results.history_runs.runs: a run with no cells among them), as `history check` decides it."""
        if not len(df):
            return cls(limit, tuple(steps), (), (), 0)
        ok = df[(df["status"] == "ok").fillna(False).astype(bool)]
        series = ok.groupby(["machine", "cell_id"]).ngroups if len(ok) else 0
        return cls(limit, tuple(steps), tuple(breaks.find(df)), tuple(breaks.missing(df, runs)), series)

    def verdict(self, step: Any) -> str | None:
        """What the gate says of a step at its threshold (Step.verdict), None without a threshold."""
        return step.verdict(self.limit) if self.limit is not None else None

    @property
    def failing(self) -> list[Any]:
        """The steps the gate fails on at its threshold ([] without one)."""
        return [s for s in self.steps if self.limit is not None and s.fails(self.limit)]

    @property
    def significant(self) -> list[Any]:
        """The latest steps the judge finds significant slowdowns after Holm's adjustment (Step.fails at 0%):
        each fails the gate at any threshold below its size (Step.gated_change)."""
        return [s for s in self.steps if s.fails(0.0)]

    @property
    def fails(self) -> bool:
        """The gate's verdict, `check`'s exit status 1: a threshold given, and a step failing at it, a series
        BROKEN or MISSING, or nothing ok to judge."""
        return self.limit is not None and bool(self.failing or self.broken or self.missing or not self.series)


def kind_text(kind: str, n: int, limit: float | None = None) -> str:
    """A count of one kind of series the gate fails on, as `history check`'s summary and the published site
    (reports.site_gate) both say it: 'fails' (its latest step failing at `limit`: FAIL), 'broken' (BROKEN),
    'missing' (MISSING), or 'empty' (the store holds nothing ok to judge; `n` unused)."""
    its = "its" if n == 1 else "their"
    if kind == "fails":
        return f"{n} series' latest step slower by more than {percent(limit)} beyond its noise (FAIL)"
    if kind == "broken":
        return f"{n} series broken in {its} latest run (BROKEN)"
    if kind == "missing":
        return f"{n} series missing from the latest run of {its} sweep (MISSING)"
    if kind == "empty":
        return "nothing ok to judge"
    raise ValueError(f"no kind of series the gate fails on is called {kind!r}")


def percent(fraction: float) -> str:
    """A --fail-on-step limit as the user gave it: 0.005 -> '0.5%', 0.055 -> '5.5%', 0.05 -> '5%'."""
    return f"{fraction * 100:.4g}%"
