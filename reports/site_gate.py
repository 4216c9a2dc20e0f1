"""What `attnbench history check`'s gate fails on besides steps, as the published site shows it
(reports.dashboard): the series broken in their latest run (results.breaks.find: BROKEN) and those the
latest run of their sweep lacks (results.breaks.missing: MISSING), each machine's in tables on its page and
counted on the index, by the same functions the gate calls, so that a red gate is never a green site."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnbench.results import breaks

from .page import Heading, Link, Table


@dataclass(frozen=True)
class Gate:
    """The series `history check` fails on without a threshold: BROKEN and MISSING, every machine's."""

    broken: tuple[Any, ...]  # results.breaks.Broken
    missing: tuple[Any, ...]  # results.breaks.Missing

    @classmethod
    def of(cls, df, runs=None) -> Gate:
        """The gate's series of a history frame (results.history.frame) and the store's runs
        (results.history_runs.runs: a run with no cells among them), as `history check` finds them."""
        if not len(df):
            return cls((), ())
        return cls(tuple(breaks.find(df)), tuple(breaks.missing(df, runs)))

    def count(self, machine: str) -> tuple[int, int]:
        """A machine's (broken, missing) series."""
        return (
            sum(b.machine == machine for b in self.broken),
            sum(g.machine == machine for g in self.missing),
        )

    def sentence(self) -> str:
        """The index's line on the gate: what it fails on, or that nothing is broken or missing."""
        if not self.broken and not self.missing:
            return "No series is broken in its latest run or missing from the latest run of its sweep."
        said = []
        if self.broken:
            their = "its" if len(self.broken) == 1 else "their"
            said.append(f"{len(self.broken)} broken in {their} latest run (BROKEN)")
        if self.missing:
            their = "its" if len(self.missing) == 1 else "their"
            said.append(f"{len(self.missing)} missing from the latest run of {their} sweep (MISSING)")
        total = len(self.broken) + len(self.missing)
        return f"`attnbench history check` fails on {total} series: {' and '.join(said)}."

    def blocks(self, machine: str, reports: dict[str, str]) -> list[Any]:
        """A machine page's headings and tables of its BROKEN and MISSING series (none where it has none)."""
        out: list[Any] = []
        broken = [b for b in self.broken if b.machine == machine]
        if broken:
            out += [Heading("Broken in their latest run"), broken_table(broken, reports)]
        gone = [g for g in self.missing if g.machine == machine]
        if gone:
            out += [Heading("Missing from the latest run of their sweep"), missing_table(gone, reports)]
        return out


def run_cell(text: str, run_path: Any, reports: dict[str, str]) -> tuple[Any, ...]:
    """A run in a table: linked to its report's copy in the site, else its name and that it has none."""
    href = reports.get(str(run_path)) if run_path else None
    return (Link(text, href, relative=True),) if href else (f"{text} (no report)",)


def broken_table(broken: Sequence[Any], reports: dict[str, str]) -> Table:
    """The series broken in their latest run after an ok one (results.breaks: `history check` fails on them),
    each with that run and its last ok run linked."""
    rows = [
        (
            b.cell_id,
            b.status,
            run_cell(str(b.latest.get("run_id")), b.latest.get("path"), reports),
            run_cell(str(b.last_ok.get("run_id")), b.last_ok.get("path"), reports),
            str(b.runs_broken),
        )
        for b in broken
    ]
    headers = ("cell", "status", "its latest run", "its last ok run", "runs since")
    return Table(headers, tuple(rows), "ok in an earlier run, broken in the latest: `history check` fails")


def missing_table(gone: Sequence[Any], reports: dict[str, str]) -> Table:
    """The series ok in the run before the latest of their sweep that the latest has no row of
    (results.breaks.missing: `history check` fails on them), each with both runs linked."""
    rows = [
        (
            g.cell_id,
            run_cell(str(g.latest.get("run_id")), g.latest.get("path"), reports),
            run_cell(str(g.before.get("run_id")), g.before.get("path"), reports),
        )
        for g in gone
    ]
    headers = ("cell", "the latest run of its sweep (no row)", "the run of its sweep before (ok)")
    caption = "ok in the run of their sweep before its latest, no row in the latest: `history check` fails"
    return Table(headers, tuple(rows), caption)
