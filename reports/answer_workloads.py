"""Whether bench's answer (reports.answer) may say a declared workload right: not where any line of it is
wrong, a gate cell of the same workload or a sweep cell of it; and why a decode bench raced one mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# the sweep axis (and its quiet value) whose cells are a workload kind's (GateRow.kind): bench's sweeps of a
# workload kernel
_WORKLOAD_AXES = {"paged": ("page_size", "0"), "packed": ("lengths", "none"), "window": ("window", "0")}
# the kinds whose gate cells share one pack or one paged cache: a wrong one makes each of them suspect
_SHARED = ("paged", "packed")


def contradicted(row: Any, bad: Sequence[Any], wrong) -> bool:
    """Whether a passing workload's gate row is wrong in another line: a gate row of it wrong (in another
    dtype, or another cell of its pack or paged cache, told by GateRow.kind: a decode step's one query
    where N_q 4 passed), or a sweep cell of its kind wrong (`wrong`, fn's rows; a paged cell by its
    page_size, a pack's by its lengths, a window's by its window)."""
    kind = row.kind
    if any(r.workload == row.workload or (kind in _SHARED and r.kind == kind) for r in bad):
        return True
    if kind not in _WORKLOAD_AXES or wrong is None or _WORKLOAD_AXES[kind][0] not in wrong:
        return False
    column, quiet = _WORKLOAD_AXES[kind]
    return bool((wrong[column].fillna(quiet).astype(str) != quiet).any())


def one_query(mine: Any) -> list[str]:
    """The line that says why a decode step's bench raced no mask alone (attnbench.bench_sweep): every cell
    of fn (`mine`, its rows) holds one query, where causal lower-right is the same problem."""
    if len(mine) and (mine["seq_len"] == 1).all() and not mine["causal"].astype(bool).any():
        return [
            "N_q = 1 in every cell: causal lower-right is the same problem as no mask there (the one query "
            "sees every key), so it was raced once, without a mask"
        ]
    return []
