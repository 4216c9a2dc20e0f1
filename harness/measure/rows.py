"""A cell's result row (see results.schema), built in steps: base_row -> start_row -> finish.

- base_row(spec): the cell's identity (its spec and cell_id): all a row of a cell that never ran has;
- start_row(spec): what is known before the cell runs: torch's thread count, and counted_work(spec): FLOPs
  and K/V bytes, counted from the spec alone;
- finish(row, status, message, **fields): the verdict and when it was reached.

The parent (harness.workers.cellrunner, the executors) builds rows of cells it decides without a worker, so
this module does not import torch at its top: start_row, which only a measuring process calls, imports it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import (
    PASS_FACTOR,
    attention_flops,
    decode_bytes,
    flops_formula,
    kv_bytes,
    packed_pairs,
)
from attnbench.results.formulas import executed_flops as packed_executed_flops


def base_row(spec: CellSpec) -> dict[str, Any]:
    row = spec.to_dict()
    row["cell_id"] = spec.cell_id
    return row


def start_row(spec: CellSpec) -> dict[str, Any]:
    """The row's fields known before anything runs: the spec, cell_id, torch's thread count and FLOPs."""
    import torch  # in the measuring process, which has imported it already

    row = base_row(spec)
    row["threads"] = torch.get_num_threads()
    row.update(counted_work(spec))
    return row


def counted_work(spec: CellSpec) -> dict[str, Any]:
    """What one call of the cell does, counted from its spec alone (no torch): `flops` (the pairs it
    attends: causal, window, padded keys, a pack's sequences, a paged cache's contexts, times the pass),
    `flops_formula`, `kv_bytes`, and a pack's or a paged cell's `seq_lens` (and the paged cell's
    `io_bytes`). The row's columns, and what --max-call-ms scales a series' time by
    (harness.workers.cellrunner.SkipAhead)."""
    row: dict[str, Any] = {}
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
    seq_lens = spec.seq_lens()
    if spec.paged:  # each sequence's N_q queries at the end of its context (variants/paged.py)
        row["flops"] = sum(
            attention_flops(1, spec.heads, spec.seq_len, n, spec.d_k, spec.d_v, causal=spec.causal,
                            pass_=spec.pass_, causal_align="lower-right")
            for n in seq_lens
        )  # fmt: skip
        row["flops_formula"] = f"{row['flops_formula']} of each sequence's context"
        row["seq_lens"] = seq_lens
        row["kv_bytes"] = kv_bytes(1, spec.kv_heads, sum(seq_lens), spec.d_k, spec.d_v, spec.dtype)
        table = len(seq_lens) * max(-(-n // spec.page_size) for n in seq_lens)
        row["io_bytes"] = decode_bytes(
            spec.heads, spec.kv_heads, spec.seq_len, seq_lens, spec.d_k, spec.d_v, spec.dtype, table
        )
    elif seq_lens is not None:  # a packed batch: the pairs of each sequence alone (results.formulas)
        pairs = packed_pairs(seq_lens, causal=spec.causal, window=spec.window)
        row["flops"] = flop_count(spec, pairs)
        row["flops_formula"] = f"{row['flops_formula']} within each sequence"
        row["seq_lens"] = seq_lens
    return row


def flop_count(spec: CellSpec, pairs: int) -> int:
    """FLOPs of one call of `spec` that attends `pairs` (query, key) pairs per query head."""
    return int(2 * spec.heads * pairs * (spec.d_k + spec.d_v) * PASS_FACTOR[spec.pass_])


def executed_flops(spec: CellSpec, work: str) -> int | None:
    """What a kernel whose capability's `varlen` is `work` computes for a packed cell (None otherwise)."""
    seq_lens = None if spec.paged else spec.seq_lens()
    if seq_lens is None or not work:
        return None
    return packed_executed_flops(
        seq_lens, work=work, heads=spec.heads, d_k=spec.d_k, d_v=spec.d_v, causal=spec.causal,
        window=spec.window, pass_=spec.pass_,
    )  # fmt: skip


def finish(row: dict[str, Any], status: str, message: str = "", **fields: Any) -> dict[str, Any]:
    row.update(fields)
    row["status"] = status
    row["message"] = message
    row["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return row


def noted(row: dict[str, Any], note: str) -> dict[str, Any]:
    """The row (or probe record) with `note` after its message, its status as it was (what a variant did
    that is said, not blamed: harness.workers.worker's threads left running)."""
    if note:
        row["message"] = "; ".join(m for m in (str(row.get("message") or ""), note) if m)
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
