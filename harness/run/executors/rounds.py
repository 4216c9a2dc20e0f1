"""The local executor's rounds (Settings.rounds) and settle rounds (Settings.settle_rounds,
harness.run.settle): every cell visited R times, round-robin over the whole sweep, then the pairs of one shape
the ranking cannot yet tell apart visited again."""

from __future__ import annotations

from typing import Any

from attnbench.harness.measure.rows import merge_rounds
from attnbench.harness.run.executors.base import OnRow, Plan
from attnbench.harness.run.settle import unsettled
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers.cellrunner import Processes, SkipAhead, precheck


def run_rounds(plan: Plan, measure: Processes, skip: SkipAhead, on_row: OnRow) -> None:
    """Settings.rounds R: every cell visited R times, round-robin over the whole sweep (each cell of
    plan.cells once, in order, then each again in the reverse order, and so on, alternating: the machine's
    drift within a round, which favours the cells visited first or last, falls on each side of every pair
    of cells alike), each visit with 1/R of the budget (harness.measure.cell measure_cell, measure_visit), so
    that the machine's drift over the run falls on every cell alike. A cell's row, the merge of its visits
    (rows.merge_rounds), is handed to on_row when its last visit ends; a visit that is not ok ends its cell
    with its row (no later visits).

    Settings.settle_rounds S: a shape's rows wait until all its cells have made their R visits; then the
    cells in a pair the ranking cannot tell apart (harness.run.settle.unsettled) are visited again, one settle
    round over every such shape at a time (the alternation going on), at most S times, each time only
    those still in such a pair among the previous settle round's cells; every other cell's row is written
    as soon as it is left out.

    Each visit whose row is not written at once is kept in visits.jsonl (results.store.VisitLog) as it
    ends, and a resume measures only the visits missing from there (the settle decisions, made from the
    visits alone, are made again the same way)."""
    from attnbench.results import store

    rounds, settle = plan.sweep.settings.rounds, plan.sweep.settings.settle_rounds
    written = {row["cell_id"] for row in plan.done}  # a redone cell (--redo-drift) starts its visits afresh
    visits = {cid: rows for cid, rows in store.read_visits(plan.run_dir).items() if cid not in written}
    ended: set[str] = set()
    log = store.VisitLog(plan.run_dir)

    def finish(spec: CellSpec) -> None:
        had = visits[spec.cell_id]
        ended.add(spec.cell_id)
        row = merge_rounds(had, max(rounds, len(had)))
        skip.note(spec, row["status"])
        on_row(row)

    def visit(spec: CellSpec, index: int, kept: bool) -> bool:
        """The cell's index-th visit (unless made before a resume); False once the cell has ended."""
        had = visits.setdefault(spec.cell_id, [])
        if len(had) < index:
            row = (precheck(spec, skip) if index == 1 else None) or measure.run(spec, (index, rounds))
            had.append(row)
            if row.get("status") != "ok":
                finish(spec)
                return False
            if kept:
                log.append(spec.cell_id, index, row)
        return True

    shapes = _Shapes(plan.cells, visits, rounds)
    try:
        for index in range(1, rounds + 1):
            last = index == rounds
            for spec in plan.cells if index % 2 else plan.cells[::-1]:
                going = spec.cell_id not in ended and visit(spec, index, kept=not last or settle > 0)
                if last and settle:
                    for done in shapes.arrived(spec, ended):
                        finish(done)
                elif last and going:
                    finish(spec)
        for k in range(1, settle + 1):
            again = shapes.again()
            if not again:
                break
            index = rounds + k
            for spec in again if index % 2 else again[::-1]:
                if spec.cell_id not in ended:
                    visit(spec, index, kept=True)
            for done in shapes.settled(ended, final=k == settle):
                finish(done)
    finally:
        log.close()


class _Shapes:
    """The settle rounds' bookkeeping: the cells of each shape (CellSpec.rank_key), the shapes decided, and
    the cells waiting to be visited again."""

    def __init__(self, cells: list[CellSpec], visits: dict[str, list[dict[str, Any]]], rounds: int) -> None:
        self.cells: dict[tuple, list[CellSpec]] = {}
        for spec in cells:
            self.cells.setdefault(spec.rank_key, []).append(spec)
        self.order = cells
        self.visits, self.made = visits, rounds  # the visits each waiting cell has made
        self.decided: set[tuple] = set()
        self.waiting: dict[tuple, list[CellSpec]] = {}  # shape -> its cells to visit again

    def arrived(self, spec: CellSpec, ended: set[str]) -> list[CellSpec]:
        """After spec's last round visit (or its end): once every cell of its shape has made its R visits
        or ended, the shape is decided: the cells to visit again wait, the others are returned (their rows
        are written now)."""
        key = spec.rank_key
        cells = self.cells[key]
        if key in self.decided or any(
            c.cell_id not in ended and len(self.visits.get(c.cell_id, [])) < self.made for c in cells
        ):
            return []
        self.decided.add(key)
        return self._decide(key, [c for c in cells if c.cell_id not in ended], among=None)

    def again(self) -> list[CellSpec]:
        """The cells of the next settle round, in the sweep's order."""
        chosen = {c.cell_id for cells in self.waiting.values() for c in cells}
        self.made += 1
        return [c for c in self.order if c.cell_id in chosen]

    def settled(self, ended: set[str], final: bool) -> list[CellSpec]:
        """After a settle round: the cells whose rows are written now (every one after the last)."""
        out = []
        for key, cells in list(self.waiting.items()):
            live = [c for c in cells if c.cell_id not in ended]
            del self.waiting[key]
            out += live if final else self._decide(key, live, among={c.cell_id for c in live})
        return out

    def _decide(self, key: tuple, live: list[CellSpec], among: set[str] | None) -> list[CellSpec]:
        chosen = unsettled([merge_rounds(self.visits[c.cell_id][: self.made]) for c in live], among)
        if chosen:
            self.waiting[key] = [c for c in live if c.cell_id in chosen]
        return [c for c in live if c.cell_id not in chosen]
