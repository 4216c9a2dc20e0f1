"""A cell's result row (see results.schema), built in steps: base_row -> start_row -> finish.

- base_row(spec): the cell's identity (its spec and cell_id): all a row of a cell that never ran has;
- start_row(spec): what is known before the cell runs: torch's thread count, FLOPs and K/V bytes;
- finish(row, status, message, **fields): the verdict and when it was reached;
- merge_processes(rows): the rows of one cell measured in several worker processes (--processes), as one;
- merge_rounds(rows): the rows of one cell's visits (--rounds), as one, by the same rule.

The parent (harness.workers.cellrunner, the executors) builds rows of cells it decides without a worker, so
this module does not import torch at its top: start_row, which only a measuring process calls, imports it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import attention_flops, flops_formula, gbps, kv_bytes, summarize, tflops


def base_row(spec: CellSpec) -> dict[str, Any]:
    row = spec.to_dict()
    row["cell_id"] = spec.cell_id
    return row


def start_row(spec: CellSpec) -> dict[str, Any]:
    """The row's fields known before anything runs: the spec, cell_id, torch's thread count and FLOPs."""
    import torch  # in the measuring process, which has imported it already

    row = base_row(spec)
    row["threads"] = torch.get_num_threads()
    lengths = spec.key_lengths()
    axes = {"causal_align": spec.causal_align, "window": spec.window}
    row["flops"] = attention_flops(
        spec.batch,
        spec.heads,
        spec.seq_len,
        spec.seq_k,
        spec.d_k,
        spec.d_v,
        causal=spec.causal,
        pass_=spec.pass_,
        key_lengths=lengths,
        **axes,
    )
    row["flops_formula"] = flops_formula(causal=spec.causal, padded=lengths is not None, **axes)
    row["kv_bytes"] = kv_bytes(spec.batch, spec.kv_heads, spec.seq_k, spec.d_k, spec.d_v, spec.dtype)
    return row


def finish(row: dict[str, Any], status: str, message: str = "", **fields: Any) -> dict[str, Any]:
    row.update(fields)
    row["status"] = status
    row["message"] = message
    row["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return row


def blame(row: dict[str, Any], offences: list[str]) -> dict[str, Any]:
    """Mark `row` as the one whose variant did what `offences` say (changed torch's global state, left a
    process running): `error`, the offences first in its message, whatever it measured kept. A `crashed`
    row stays crashed (its worker is gone already)."""
    if not offences:
        return row
    old = str(row.get("message") or "")
    row["message"] = "; ".join([*offences, *([old] if old else [])])
    if row.get("status") != "crashed":
        row["status"] = "error"
    return row


def merge_processes(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell's rows from K worker processes (Settings.processes), in the order they were measured, as the
    cell's one row: the first non-ok row when any process's is not ok (its message says which process
    when it is not the first); else the first row with every process's samples pooled (`samples_ms`), the
    timing columns recomputed from them (results.formulas.summarize, TFLOP/s and GB/s from the pooled
    median), each process's own median in `process_medians_ms` (the spread compare judges by), the largest
    peak and retained memory of any process, and the time all of them took."""
    return _merge(rows, "process_medians_ms", "worker process")


# a first visit's gate and check columns, kept in the row of a later visit that ends its cell not ok
FIRST_VISIT_CHECKS = (
    "max_abs_err",
    "rel_err",
    "grad_rel_err",
    "masked_rows",
    "rows_checked",
    "refill_rel_err",
)


def merge_rounds(rows: list[dict[str, Any]], rounds: int | None = None) -> dict[str, Any]:
    """One cell's rows from its visits (Settings.rounds), in the order they were measured, as the cell's one
    row, by merge_processes' rule: each visit's median in `round_medians_ms` and its count of samples in
    `round_samples` (samples_ms holds them visit after visit; process_medians_ms stays the
    per-worker-process spread compare judges by: visits in one process do not show it), the first visit's
    gate, checks and memory, the fresh-input check wherever it ran (harness.measure.cell.defers_fresh_check:
    the second visit's warm-up) and every visit's checks_ms; later visits' warm-up calls and setup hooks in
    `rewarm_ms` (first_call_ms stays the first visit's: the compile and first-call costs the reports
    read). A later visit that ends the cell not ok keeps the first visit's gate columns."""
    merged = _merge(rows, "round_medians_ms", "round", rounds or len(rows))
    if merged.get("status") == "ok" and merged.get("samples_ms"):
        merged["round_samples"] = [len(row.get("samples_ms") or []) for row in rows]
    if merged.get("status") != "ok":
        if merged is not rows[0]:
            for col in FIRST_VISIT_CHECKS:
                if merged.get(col) is None and rows[0].get(col) is not None:
                    merged[col] = rows[0][col]
        return merged
    merged["rewarm_ms"] = round(
        sum((row.get("first_call_ms") or 0.0) + (row.get("setup_ms") or 0.0) for row in rows[1:]), 6
    )
    fresh = [row["fresh_rel_err"] for row in rows if row.get("fresh_rel_err") is not None]
    if fresh:
        merged["fresh_rel_err"] = max(fresh)
    checks = [row["checks_ms"] for row in rows if row.get("checks_ms") is not None]
    if checks:
        merged["checks_ms"] = round(sum(checks), 6)
    return merged


def _merge(rows: list[dict[str, Any]], column: str, unit: str, k: int | None = None) -> dict[str, Any]:
    if not rows:
        raise ValueError("merging needs at least one row")
    k = k or len(rows)
    for i, row in enumerate(rows):
        if row.get("status") != "ok":
            if i:
                old = str(row.get("message") or "")
                row["message"] = f"in {unit} {i + 1} of {k}: {old}" if old else f"in {unit} {i + 1} of {k}"
            return row
    merged = dict(rows[0])
    samples = [s for row in rows for s in row.get("samples_ms") or []]
    merged[column] = [row.get("time_ms_median") for row in rows]
    if not samples:
        return merged
    merged["samples_ms"] = samples
    merged.update(summarize(samples))
    median = merged["time_ms_median"]
    merged["tflops"] = tflops(merged.get("flops"), median)
    if merged.get("kv_bytes") is not None:
        merged["kv_gbps"] = gbps(merged["kv_bytes"], median)
    for col in ("peak_mem_bytes", "retained_mem_bytes"):
        values = [row[col] for row in rows if row.get(col) is not None]
        if values:
            merged[col] = max(values)
    if all(row.get("elapsed_s") is not None for row in rows):
        merged["elapsed_s"] = round(sum(row["elapsed_s"] for row in rows), 3)
    merged["finished_at"] = rows[-1].get("finished_at", merged.get("finished_at"))
    return merged
