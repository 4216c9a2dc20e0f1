"""A cell's visits and its row: every visit recorded the same way, and a row as the summary of them.

Repetition has three levels: a sample (one timed call) < a visit (one warm-up and a share of the sampling
budget, in one worker process) < a run (one run directory). A run visits each cell R times (`--rounds R`,
harness.run.plan orders the visits); each visit's measurement is a row of its own (harness.measure.cell),
appended to the run's visits.jsonl as it ends (VisitLog: an interruption loses no visit; a resume reloads
them, read_visits), and the cell's row in rows.jsonl is their summary (summary): every sample pooled in
`samples_ms`, each visit's median in `visit_medians_ms` and its sample count in `visit_samples`, the first
visit's gate, checks and memory. A cell visited once is the summary of one visit.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from .formulas import NOISY_NOTE, counted, median_rates, noisy_note, summarize
from .integrity import WRITTEN, Tracked
from .rowfile import read_lines, scan
from .schema import PHASE_COLUMNS, float_list
from .spreads import VISIT_SPREAD_FLOOR
from .store import _append_all, _write_error, read_rows
from .ttest import MIN_REPLICATES

VISITS = "visits.jsonl"

# a first visit's gate and check columns, kept in the row of a later visit that ends its cell not ok
FIRST_VISIT_CHECKS = (
    "max_abs_err",
    "rel_err",
    "grad_rel_err",
    "masked_rows",
    "rows_checked",
    "refill_rel_err",
    "quant_recipe",
    "quant_rel_err",
    "sqnr_db",
    "approximate",
)


def summary(rows: list[dict[str, Any]], planned: int | None = None) -> dict[str, Any]:
    """One cell's row from its visits' rows, in the order they were made (`planned`: the visits the run
    meant to make, for the message of one that failed).

    - A visit that is not ok ends its cell: its row is the cell's, its message says which visit ("in visit 2
      of 3: ..."), with the first visit's gate columns where it lacks them.
    - Otherwise the first visit's row (its gate, checks, memory and first-call costs), with every visit's
      samples pooled in `samples_ms` and the timing columns and every rate recomputed from them (_rates),
      `visit_medians_ms` and `visit_samples` per visit, the largest peak and retained memory of any visit,
      the fresh-input check wherever it ran (the worst), the clock check's worst visit, and the wall time
      of all of them with each phase summed over the visits (_phases: a later visit's warm-up call and
      setup hook in `rewarm_ms`).
    """
    if not rows:
        raise ValueError("a cell's row needs at least one visit")
    planned = max(planned or len(rows), len(rows))
    for i, row in enumerate(rows):
        if row.get("status") != "ok":
            return _ended(rows, i, planned)
    merged = dict(rows[0])
    samples = [s for row in rows for s in row.get("samples_ms") or []]
    merged["visit_medians_ms"] = [row.get("time_ms_median") for row in rows]
    merged["visit_samples"] = [len(row.get("samples_ms") or []) for row in rows]
    if samples:
        merged["samples_ms"] = samples
        merged.update(summarize(samples))
        # the note of its spread is the pooled samples', as rel_iqr and noisy are now, not the first visit's
        kept = [p for p in str(merged.get("message") or "").split("; ") if p and not p.startswith(NOISY_NOTE)]
        note = noisy_note(merged["rel_iqr"]) if merged.get("noisy") else ""
        message = "; ".join([*kept, *([note] if note else [])])
        if message != str(merged.get("message") or ""):
            merged["message"] = message
        _rates(merged, merged["time_ms_median"])
    for col in ("peak_mem_bytes", "retained_mem_bytes"):
        values = [row[col] for row in rows if row.get(col) is not None]
        if values:
            merged[col] = max(values)
    _phases(merged, rows)
    merged["finished_at"] = rows[-1].get("finished_at", merged.get("finished_at"))
    clocks = [row for row in rows if row.get("clock_ratio") is not None]
    if clocks:  # the visit whose worker clock was furthest from the parent's
        worst = max(clocks, key=lambda row: abs(1.0 - row["clock_ratio"]))
        merged["clock_ratio"], merged["clock_bounds_ms"] = worst["clock_ratio"], worst.get("clock_bounds_ms")
    covers = [row["event_cover"] for row in rows if row.get("event_cover") is not None]
    if covers:  # the visit whose events covered least of the host's time
        merged["event_cover"] = min(covers)
    fresh = [row["fresh_rel_err"] for row in rows if row.get("fresh_rel_err") is not None]
    if fresh:
        merged["fresh_rel_err"] = max(fresh)
    return merged


def _rates(merged: dict[str, Any], median: float) -> None:
    """Every rate of the cell's median call (results.formulas.median_rates), from the pooled median, not the
    first visit's; a column an older row lacks stays absent. (Energy per call and TFLOP/s per W are read off
    the first visit's own energy window, not off the median.)"""
    merged.update({k: v for k, v in median_rates(merged, median).items() if k == "tflops" or k in merged})


def _phases(merged: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The cell's wall time and its phases, each summed over the visits, so that the phases add up to
    elapsed_s as each visit's do (results.schema.PHASE_COLUMNS); a later visit's setup hook and warm-up call
    are in `rewarm_ms` (setup_ms and first_call_ms stay the first visit's, outside the timed calls)."""
    if all(row.get("elapsed_s") is not None for row in rows):
        merged["elapsed_s"] = round(sum(row["elapsed_s"] for row in rows), 3)
    for col in PHASE_COLUMNS:
        values = [row[col] for row in rows if row.get(col) is not None]
        if col not in ("setup_ms", "first_call_ms", "rewarm_ms") and values:
            merged[col] = round(sum(values), 6)
    if len(rows) > 1:
        merged["rewarm_ms"] = round(
            sum((row.get("first_call_ms") or 0.0) + (row.get("setup_ms") or 0.0) for row in rows[1:]), 6
        )


def _ended(rows: list[dict[str, Any]], i: int, planned: int) -> dict[str, Any]:
    """The row of a cell whose visit i (from 0) was not ok."""
    row = dict(rows[i])
    if i:
        old = str(row.get("message") or "")
        where = f"in visit {i + 1} of {planned}"
        row["message"] = f"{where}: {old}" if old else where
        for col in FIRST_VISIT_CHECKS:
            if row.get(col) is None and rows[0].get(col) is not None:
                row[col] = rows[0][col]
    return row


def split(samples: list[float], counts: Any) -> list[list[float]] | None:
    """samples_ms cut into its visits by visit_samples' counts; None where a count is not a non-negative
    integer or they do not add up to the samples."""
    try:
        counts = [int(c) for c in counts]
    except (TypeError, ValueError):
        return None
    if any(c < 0 for c in counts) or sum(counts) != len(samples):
        return None
    out, start = [], 0
    for c in counts:
        out.append(samples[start : start + c])
        start += c
    return out


def fastest_ms(row: dict[str, Any]) -> tuple[float, str] | None:
    """The least a cell's call can be taken to cost from its ok row, with the words that say how: the
    fastest of its samples (a busy machine only adds to a call), else its median; None without a median.
    What --max-call-ms extrapolates from (harness.workers.cellrunner.SkipAhead). The speed probe does not
    correct it: one descheduled probe read 0.06 of the run's fastest and would have predicted 2.9 ms for a
    call that sleeps 41 ms."""
    median = row.get("time_ms_median")
    if not (isinstance(median, (int, float)) and 0 < median < math.inf):
        return None
    samples = [s for s in float_list(row.get("samples_ms")) if 0 < s < math.inf]
    if samples and min(samples) < median:
        return min(samples), f"the fastest of its {counted(len(samples), 'call')}"
    return float(median), "its median"


class VisitLog:
    """visits.jsonl: one fsync'd line per finished visit of a cell, {"cell_id", "visit", "row"}, so that an
    interruption loses no visit; a resume reloads them (read_visits) and makes only the visits missing. The
    cell's row in rows.jsonl, written once its last visit ends, supersedes its lines here. Written by the
    run's one writer's process only."""

    def __init__(self, path: str | Path) -> None:
        self.target = Path(path) / VISITS
        self.run = Path(path)
        try:  # every byte appended here, to see what else changed the file (results.integrity)
            self.tracked = Tracked(self.run, VISITS)
        except OSError as exc:
            raise _write_error(self.run / WRITTEN, exc) from None
        if self.target.is_file():  # a torn last line (a crash mid-write) is cut, so the next line is whole
            data = self.target.read_bytes()
            if data and not data.endswith(b"\n"):
                with self.target.open("r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
                self.tracked.rebase()
        self.fh = self.target.open("ab", buffering=0)

    def append(self, cell_id: str, visit: int, row: dict[str, Any]) -> None:
        record = {"cell_id": cell_id, "visit": visit, "row": row}
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:  # its record in written.json first: where that cannot be written, neither can the visit
            self.tracked.before(self.fh.fileno(), data)
        except OSError as exc:
            raise _write_error(self.target, exc) from None
        _append_all(self.fh.fileno(), data, self.target, self.run)
        self.tracked.after(data)

    def close(self) -> None:
        self.fh.close()
        with contextlib.suppress(OSError):  # a full disk was said by the append that met it
            self.tracked.close()


def skipped_lines(path: str | Path) -> list[str]:
    """What a reader says of each line of the run's visits.jsonl it skips (a torn write, a corrupt line), as
    results.store.skipped_rows says of rows.jsonl's; the loader warns with them."""
    return [said for _lineno, said in scan(Path(path) / VISITS)[1]]


def read_visits(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """cell_id -> its visits' rows from visits.jsonl, in visit order (1, 2, ... as long as they follow on
    from 1; a torn or corrupt line is skipped with a warning naming it)."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for _, rec in read_lines(Path(path) / VISITS):
        if isinstance(rec.get("visit"), int) and isinstance(rec.get("row"), dict):
            found.setdefault(rec["cell_id"], {})[rec["visit"]] = rec["row"]
    out: dict[str, list[dict[str, Any]]] = {}
    for cell_id, by_index in found.items():
        rows = []
        while len(rows) + 1 in by_index:
            rows.append(by_index[len(rows) + 1])
        out[cell_id] = rows
    return out


def unfinished_text(path: str | Path) -> str:
    """unfinished in words, '7 visits of 4 cells not finished', or "" where every cell has its row."""
    pending = unfinished(path)
    if not pending:
        return ""
    return f"{counted(sum(pending.values()), 'visit')} of {counted(len(pending), 'cell')} not finished"


def unfinished(path: str | Path) -> dict[str, int]:
    """cell_id -> how many of its visits visits.jsonl keeps, for each cell of the run at `path` that has no
    row yet (a run stopped mid-rounds: a cell's row is written once its last visit ends)."""
    done = {row.get("cell_id") for row in read_rows(path)}
    return {cell: len(rows) for cell, rows in read_visits(path).items() if rows and cell not in done}


def blind_lead_text(ok, imported: Collection[str] = ()) -> str | None:
    """Where a report ranks variants (two or more ok) and no ok cell was visited MIN_REPLICATES times, the
    sentence that says what its leads rest on: each cell's own timed calls, blind to how far a cell moves
    between visits (the judge's visit floor, results.spreads.VISIT_SPREAD_FLOOR, is the reference CPU VM's
    largest), with the option that ranks across visits. compare's judge holds such cells to that floor; a
    report says this after its trust line (reports.findings.trust_sentences). `imported`: the run ids of
    pytest-benchmark files (results.pytest_benchmark), to which no attnbench option adds a visit: where every
    ok cell is theirs, the sentence says so and names the command that measures in visits."""
    if "variant" not in ok.columns or ok["variant"].nunique() < 2:
        return None
    column = ok["visit_medians_ms"] if "visit_medians_ms" in ok.columns else ()
    if any(len(float_list(v)) >= MIN_REPLICATES for v in column):
        return None
    ranks = f"`attnbench run --rounds {MIN_REPLICATES}` ranks across visits"
    if "run_id" in ok.columns and len(ok) and ok["run_id"].astype(str).isin(set(imported)).all():
        ranks = f"a pytest-benchmark session visits each cell once, and {ranks} (measuring the cells again)"
    return (
        f"Each cell was measured in fewer than {MIN_REPLICATES} visits: the leads in these findings are "
        "judged on each cell's own timed calls, blind to how far a cell moves from one visit to the next "
        f"(up to {1 + VISIT_SPREAD_FLOOR:.2f}× between two visits of one cell on the shared 2-core "
        f"reference VM); {ranks}."
    )
