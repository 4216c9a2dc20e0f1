"""Cells that broke in the history store: a series (a cell on one machine over its runs in time) whose latest
run is one of results.judge.BROKEN (wrong, error, crashed, timeout) while an earlier run of it was ok. That is
compare's rule for a cell ok in A and broken in B, over a series: `attnbench history check` says each, and its
gate (--fail-on-step) fails on them, since a gate on slowdowns that passed a kernel gone wrong would be no
gate. A cell that was never ok, or is ok again in its latest run, is not broken; one out of memory or
unsupported is not either, as in compare.

And cells gone (`missing`): a series ok in the run before the latest of its sweep on its machine that the
latest run of that sweep has no row of (MISSING). Each sweep is compared with itself (the store's `sweep`,
results.axes.sweep_identity), so two sweeps kept in one store never make each other's cells MISSING.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .judge import BROKEN
from .steps import run_fields


@dataclass(frozen=True)
class Broken:
    """A series whose latest run is broken: what it is now, and its last ok run."""

    machine: str
    cell_id: str
    variant: str
    status: str  # its latest run's (one of BROKEN)
    latest: dict[str, Any]  # that run, as a step names its sides (steps.run_fields)
    last_ok: dict[str, Any]  # its last run that was ok
    runs_broken: int  # its runs since the last ok one, the latest included


def find(df) -> list[Broken]:
    """Every series of a history frame (results.history.frame) whose latest run is broken after an ok one, in
    the order of machine and cell_id; each series' runs in the order they were made."""
    out = []
    ordered = df.sort_values(["machine", "cell_id", "created", "run_id"], kind="stable")
    for (machine, cell), series in ordered.groupby(["machine", "cell_id"], sort=True):
        statuses = [str(s) for s in series["status"]]
        oks = [i for i, s in enumerate(statuses) if s == "ok"]
        if statuses[-1] not in BROKEN or not oks:
            continue
        out.append(
            Broken(
                machine=str(machine),
                cell_id=str(cell),
                variant=str(series["variant"].iloc[-1]),
                status=statuses[-1],
                latest=run_fields(series, -1),
                last_ok=run_fields(series, oks[-1]),
                runs_broken=len(statuses) - 1 - oks[-1],
            )
        )
    return out


def describe(broken: Broken) -> str:
    """One line: 'naive|cpu|...|fwd on AMD EPYC (2 cores) on vm: wrong in run R (2026-12-06), the latest; ok
    last in run Q (2026-12-05), 1 run before'."""
    when = (broken.latest.get("created") or "?")[:10]
    last = (broken.last_ok.get("created") or "?")[:10]
    since = "the run before" if broken.runs_broken == 1 else f"{broken.runs_broken} runs before"
    latest, ok = broken.latest.get("run_id"), broken.last_ok.get("run_id")
    return (
        f"{broken.cell_id} on {broken.machine}: {broken.status} in its latest run {latest} ({when}); "
        f"ok last in run {ok} ({last}), {since}"
    )


@dataclass(frozen=True)
class Missing:
    """A series ok in the run before the latest run of a sweep on its machine that the latest has no row of:
    a run that stopped short, or a kernel no longer run. A run is compared only with the run before it of its
    own sweep (the store's `sweep`, results.axes.sweep_identity), whatever other sweeps ran between them, so
    a cell of another sweep is never MISSING because that sweep did not run last. `check` says each
    (MISSING); its gate fails on them, as on BROKEN."""

    machine: str
    cell_id: str
    variant: str
    latest: dict[str, Any]  # the latest run of its sweep on the machine (steps.run_fields)
    before: dict[str, Any]  # the run of that sweep before it, where the series was ok
    sweep: str  # the sweep's identity ('' for runs whose meta.json records none: one sweep together)


def missing(df, runs=None) -> list[Missing]:
    """Every series of a history frame ok in the run before the latest of a sweep on its machine and without
    a row in that latest run, in the order of machine and cell_id (a sweep's runs in the order they were
    made). `runs` (results.history_runs.runs: a row per run and machine) orders each sweep's runs, a run with
    no cells among them (stopped before its first row: it lacks every cell); without it, the runs are those
    with cells in `df`. A frame without a `sweep` column (one made by hand) is one sweep per machine. A cell
    two sweeps both lost is said once, for the sweep that ran last."""
    cells = df.assign(_sweep=_sweeps(df))
    runs = cells if runs is None else runs.assign(_sweep=_sweeps(runs))
    found: dict[tuple[str, str], Missing] = {}
    for (machine, sweep), mine in runs.groupby(["machine", "_sweep"], sort=True):
        ordered = mine.sort_values(["created", "run_id"], kind="stable").drop_duplicates("run_key")
        if len(ordered) < 2:
            continue
        latest, before = ordered["run_key"].iloc[-1], ordered["run_key"].iloc[-2]
        here = cells[cells["machine"] == machine]
        now = set(here.loc[here["run_key"] == latest, "cell_id"])
        was = here[(here["run_key"] == before) & (here["status"] == "ok").fillna(False).astype(bool)]
        was = was.sort_values("cell_id", kind="stable")
        for i, cell in enumerate(was["cell_id"]):
            if cell in now:
                continue
            gone = Missing(str(machine), str(cell), str(was["variant"].iloc[i]), run_fields(ordered, -1),
                           run_fields(was, i), str(sweep))  # fmt: skip
            known = found.get((gone.machine, gone.cell_id))
            if known is None or _later(gone.latest, known.latest):
                found[(gone.machine, gone.cell_id)] = gone
    return [found[k] for k in sorted(found)]


def _sweeps(df):
    """Each row's sweep ('' where none is recorded, or the frame has no `sweep` column: one sweep)."""
    return df["sweep"].astype("string").fillna("") if "sweep" in df.columns else [""] * len(df)


def _later(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether run a (run_fields) was made after run b."""
    return (str(a.get("created")), str(a.get("run_id"))) > (str(b.get("created")), str(b.get("run_id")))


def describe_missing(gone: Missing) -> str:
    """One line: 'naive|cpu|...|fwd on AMD EPYC ...: ok in run Q (2026-12-05), no row in run R (2026-12-06),
    the latest of its sweep'."""
    when = (gone.latest.get("created") or "?")[:10]
    was = (gone.before.get("created") or "?")[:10]
    return (
        f"{gone.cell_id} on {gone.machine}: ok in run {gone.before.get('run_id')} ({was}), no row in run "
        f"{gone.latest.get('run_id')} ({when}), the latest of its sweep"
    )
