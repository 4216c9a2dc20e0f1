"""The plan of a run: which cell is visited when. Pure (no torch, no processes), so it is tested as data.

A run visits each of its cells R times (Settings.rounds): round-robin over the whole sweep, every cell once
in the sweep's order, then every cell again in the reverse order, and so on, alternating, so that the
machine's drift over the run, and within a round, falls on every cell alike. Each visit samples 1/R of
the cell's budget (harness.measure.cell). A visit that is not ok ends its cell. The cell's row is the
summary of its visits (results.visits.summary), handed out once its last visit ends.

Settle rounds (Settings.settle_rounds S): the variants of one shape (CellSpec.rank_key) that are 1.1x
(SETTLE_RATIO) or more apart by median but that the ranking cannot yet tell apart (results.judge.separated:
one disturbed visit among three ties even a pair 1.3x apart) are visited again, a round of only them at a
time, at most S times; the rows of a shape wait until its cells have made their R visits. Each settle
round visits a subset of the previous one's cells, so that the k-th visits of any two cells of a shape are
always one round, and the ranking's pairing by visit stays aligned. Pairs closer than SETTLE_RATIO are
left as measured: more visits rarely separate them, and each visit of a slow cell costs a warm-up call.

Executors carry out a plan (`carry_out`: the local executor) and never reorder it. Those that measure
cells in parallel (a pool of GPUs, Ray, Slurm) cannot keep one order for drift to fall on alike: a plan of
more than one round is refused for them before any work (`check`). Every visit is written to the run's
visits.jsonl as it ends (results.visits.VisitLog), and a resume makes only the visits missing from there:
the settle decisions, made from the visits alone, are made again the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.harness.run.estimate import duration_text
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results import visits as visit_rows
from attnbench.results.formulas import counted

SETTLE_RATIO = 1.1  # a pair this far apart by median is visited again while the ranking ties it

Row = dict[str, Any]


@dataclass(frozen=True)
class Visit:
    """One visit of a cell: its index (from 1) among the run's `rounds` visits (settle visits go beyond),
    and the worker process it is made in ((index - 1) mod Settings.workers)."""

    cell: CellSpec
    index: int
    rounds: int
    worker: int = 0

    def options(self) -> dict[str, Any]:
        """What the worker hands harness.measure.cell.measure_cell for this visit, and whether it takes the
        speed probe before it (the first visit's is the row's: a later visit's would be thrown away)."""
        return {"visit": (self.index, self.rounds), "probe": self.index == 1}


def check(settings: Settings, executor: str, ordered: bool) -> None:
    """ValueError (one line) when a plan of these settings cannot be carried out by `executor` (`ordered`:
    whether it follows a plan's order, one cell at a time), or when settle rounds have no rounds to follow."""
    if settings.settle_rounds and settings.rounds < 2:
        raise ValueError(
            f"--settle-rounds {settings.settle_rounds} visits again after the rounds: needs --rounds 2 or "
            "more (e.g. --rounds 3)"
        )
    if settings.workers > settings.rounds:
        raise ValueError(
            f"--workers {settings.workers} with --rounds {settings.rounds}: visit i of a cell is made in "
            f"worker (i - 1) mod K, so at most {counted(settings.rounds, 'worker')} can be used: give "
            f"--workers {settings.rounds}, or --rounds {settings.workers} for every worker to make a visit"
        )
    if settings.rounds > 1 and not ordered:
        raise ValueError(
            f"--rounds {settings.rounds} visits the whole sweep in one order on one worker: "
            + (
                "not with --devices, whose workers measure cells in parallel"
                if executor == "local"
                else f"not with --executor {executor}, which measures cells in parallel"
            )
        )


def once_in_parallel(options: dict) -> dict:
    """A run's keywords (attnbench.bench's, over its preset's rounds) with one round each where its executor
    measures cells in parallel (ray, slurm, --devices), which no plan of rounds can follow (check), and
    the caller asked for no rounds of its own; unchanged otherwise."""
    parallel = options.get("executor", "local") != "local" or options.get("devices")
    return {**options, "rounds": 1} if parallel and "rounds" not in options else options


def per_cell(settings: Settings) -> int:
    """The visits a cell gets before any settle round (the estimate's count)."""
    return max(1, settings.rounds)


class VisitPlan:
    """The visits of a run's cells, in order; see the module docstring.

    Iterating gives the next Visit; `record(visit, row)` takes its row; `ready()` hands out the cells' rows
    whose last visit has ended (in the order they ended). `made` holds visits of an earlier session of the
    run (a resume): they are not made again. `journal(cell_id, index, row)` is called for every visit
    recorded (the run's VisitLog); `say(line)`, where given, is told as each round but the last ends
    (round_line), since a cell's own line waits for its last visit."""

    def __init__(
        self,
        cells: list[CellSpec],
        rounds: int = 1,
        settle: int = 0,
        made: dict[str, list[Row]] | None = None,
        journal: Callable[[str, int, Row], None] | None = None,
        workers: int = 1,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cells, self.rounds, self.settle = list(cells), max(1, rounds), settle
        self.say, self.clock = say, clock
        self.workers = max(1, workers)
        ids = {c.cell_id for c in self.cells}
        self.made = {cid: list(rows) for cid, rows in (made or {}).items() if cid in ids}
        self.journal = journal
        self.close: Callable[[], None] = lambda: None  # what for_run opened
        self.ended: set[str] = set()
        self._ready: list[Row] = []
        self._shapes = _Shapes(self.cells, self.made, self.rounds)
        self._order = self._visits()
        for spec in self.cells:  # a visit of an earlier session that was not ok ended its cell there
            had = self.made.get(spec.cell_id, [])
            broken = [i for i, row in enumerate(had) if row.get("status") != "ok"]
            if broken:
                del had[broken[0] + 1 :]
                self._finish(spec)

    def __iter__(self) -> Iterator[Visit]:
        return self._order

    def record(self, visit: Visit, row: Row) -> None:
        """The row of a visit just made; a row that is not ok ends its cell."""
        had = self.made.setdefault(visit.cell.cell_id, [])
        had.append(row)
        if self.journal is not None:
            self.journal(visit.cell.cell_id, visit.index, row)
        if row.get("status") != "ok":
            self._finish(visit.cell)

    def ready(self) -> list[Row]:
        """The cells' rows whose visits have all ended since the last call."""
        out, self._ready = self._ready, []
        return out

    def carry_out(
        self,
        measure: Callable[[CellSpec, dict[str, Any], int], Row],
        on_row: Callable[[Row], None],
        precheck: Callable[[CellSpec], Row | None] = lambda spec: None,
    ) -> None:
        """Make every visit in order: `precheck(cell)` first for a cell's first visit (a row: the cell ends
        there, unmeasured), else `measure(cell, visit.options(), visit.worker)`; each cell's row to on_row
        once ready; `say` told as each round but the last ends."""
        # the round of the visit made last, and this session's visits measured: in it, and in all
        began, index, in_round, made = self.clock(), None, 0, 0
        for visit in self:
            if index is not None and visit.index != index:
                if index < self.rounds and in_round and self.say is not None:
                    self.say(self.round_line(index, in_round, (self.clock() - began) / made))
                in_round = 0
            index = visit.index
            self._hand(on_row)
            first = precheck(visit.cell) if visit.index == 1 else None
            row = first or measure(visit.cell, visit.options(), visit.worker)
            self.record(visit, row)
            in_round, made = in_round + (first is None), made + (first is None)
            self._hand(on_row)
        self._hand(on_row)

    def round_line(self, index: int, visited: int, per_visit_s: float) -> str:
        """The line said as round `index` ends, before any cell's own line (those wait for its last visit):
        'visit 1 of 3 done: 20 cells, ~40 s left' (`visited`: the cells it measured; the visits left, settle
        rounds not counted, at this session's time per visit so far)."""
        left = sum(
            self.rounds - len(self.made.get(spec.cell_id, []))
            for spec in self.cells
            if spec.cell_id not in self.ended
        )
        return (
            f"visit {index} of {self.rounds} done: {counted(visited, 'cell')}, "
            f"~{duration_text(per_visit_s * max(0, left))} left"
        )

    def _hand(self, on_row: Callable[[Row], None]) -> None:
        for row in self.ready():
            on_row(row)

    # ---- the order ----------------------------------------------------------------------------------

    def _visits(self) -> Iterator[Visit]:
        rounds, settle = self.rounds, self.settle
        for index in range(1, rounds + 1):
            last = index == rounds
            for spec in self.cells if index % 2 else self.cells[::-1]:
                if spec.cell_id not in self.ended and len(self.made.get(spec.cell_id, [])) < index:
                    yield Visit(spec, index, rounds, (index - 1) % self.workers)
                if last and settle:
                    for done in self._shapes.arrived(spec, self.ended):
                        self._finish(done)
                elif last and spec.cell_id not in self.ended:
                    self._finish(spec)
        for k in range(1, settle + 1):
            again = self._shapes.again()
            if not again:
                break
            index = rounds + k
            for spec in again if index % 2 else again[::-1]:
                if spec.cell_id not in self.ended and len(self.made.get(spec.cell_id, [])) < index:
                    yield Visit(spec, index, rounds, (index - 1) % self.workers)
            for done in self._shapes.settled(self.ended, final=k == settle):
                self._finish(done)

    def _finish(self, spec: CellSpec) -> None:
        if spec.cell_id in self.ended:
            return
        self.ended.add(spec.cell_id)
        self._ready.append(visit_rows.summary(self.made[spec.cell_id], self.rounds))


def for_run(
    run_dir: Path,
    cells: list[CellSpec],
    settings: Settings,
    written: set[str],
    say: Callable[[str], None] | None = None,
) -> VisitPlan:
    """The plan of a run's cells left to measure, journalled in its visits.jsonl (results.visits.VisitLog),
    with the visits an earlier session made of the cells without a row (`written`: the cell_ids with
    one; a cell measured again, --redo-drift, starts its visits afresh), telling `say` as each round ends.
    Close it (`close()`) when done."""
    made = {cid: rows for cid, rows in visit_rows.read_visits(run_dir).items() if cid not in written}
    log = visit_rows.VisitLog(run_dir)
    order = VisitPlan(
        cells, settings.rounds, settings.settle_rounds, made, log.append, settings.workers, say=say
    )
    order.close = log.close
    return order


class _Shapes:
    """The settle rounds' bookkeeping: the cells of each shape (CellSpec.rank_key), the shapes decided, and
    the cells waiting to be visited again."""

    def __init__(self, cells: list[CellSpec], made: dict[str, list[Row]], rounds: int) -> None:
        self.cells: dict[tuple, list[CellSpec]] = {}
        for spec in cells:
            self.cells.setdefault(spec.rank_key, []).append(spec)
        self.order = cells
        self.made, self.count = made, rounds  # the visits each waiting cell has made
        self.decided: set[tuple] = set()
        self.waiting: dict[tuple, list[CellSpec]] = {}  # shape -> its cells to visit again

    def arrived(self, spec: CellSpec, ended: set[str]) -> list[CellSpec]:
        """After spec's last round visit (or its end): once every cell of its shape has made its R visits
        or ended, the shape is decided: the cells to visit again wait, the others are returned (their rows
        are handed out now)."""
        key = spec.rank_key
        cells = self.cells[key]
        if key in self.decided or any(
            c.cell_id not in ended and len(self.made.get(c.cell_id, [])) < self.count for c in cells
        ):
            return []
        self.decided.add(key)
        return self._decide(key, [c for c in cells if c.cell_id not in ended], among=None)

    def again(self) -> list[CellSpec]:
        """The cells of the next settle round, in the sweep's order."""
        chosen = {c.cell_id for cells in self.waiting.values() for c in cells}
        self.count += 1
        return [c for c in self.order if c.cell_id in chosen]

    def settled(self, ended: set[str], final: bool) -> list[CellSpec]:
        """After a settle round: the cells whose rows are handed out now (every one after the last)."""
        out = []
        for key, cells in list(self.waiting.items()):
            live = [c for c in cells if c.cell_id not in ended]
            del self.waiting[key]
            out += live if final else self._decide(key, live, among={c.cell_id for c in live})
        return out

    def _decide(self, key: tuple, live: list[CellSpec], among: set[str] | None) -> list[CellSpec]:
        rows = [visit_rows.summary(self.made[c.cell_id][: self.count]) for c in live]
        chosen = unsettled(rows, among)
        if chosen:
            self.waiting[key] = [c for c in live if c.cell_id in chosen]
        return [c for c in live if c.cell_id not in chosen]


def unsettled(rows: list[Row], among: set[str] | None = None) -> set[str]:
    """The cell_ids, of one shape's rows (each the summary of the visits made so far), in a pair whose
    medians are SETTLE_RATIO or more apart that the ranking cannot tell apart (results.judge.separated);
    only pairs of cells in `among` (the previous settle round's cells) where given."""
    from attnbench.results.judge import separated

    ok = [
        r
        for r in rows
        if r.get("status") == "ok"
        and (r.get("time_ms_median") or 0) > 0
        and (among is None or r["cell_id"] in among)
    ]
    ok.sort(key=lambda r: r["time_ms_median"])
    out: set[str] = set()
    for i, first in enumerate(ok):
        for other in ok[i + 1 :]:
            if other["time_ms_median"] / first["time_ms_median"] < SETTLE_RATIO:
                continue
            if not separated(first, other):
                out |= {first["cell_id"], other["cell_id"]}
    return out
