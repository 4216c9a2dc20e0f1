"""Whether bench's answer (reports.answer) may say a declared workload right: not where any line of it is
wrong, a gate cell of the same workload or a sweep cell of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# the sweep axis (and its quiet value) whose cells are a workload's: bench's sweeps of a workload kernel
_WORKLOAD_AXES = {"paged": ("page_size", "0"), "packed": ("lengths", "none"), "window": ("window", "0")}


def contradicted(label: str, bad: Sequence[Any], wrong) -> bool:
    """Whether a passing workload is wrong in another line: a gate row of it wrong (in another dtype, or
    another cell of its pack or paged cache: a decode step's one query where N_q 4 passed), or a sweep
    cell of it wrong (`wrong`, fn's rows; a paged cell by its page_size, a pack's by its lengths, a
    window's by its window)."""
    kind = label.split(",")[0].split()[0]  # 'paged' / 'packed' of a pack's or a paged cache's cells
    kind = kind if kind in ("paged", "packed") else label
    if any(r.workload == label or r.workload.split(",")[0].split()[0] == kind for r in bad):
        return True
    word = next((w for w in _WORKLOAD_AXES if kind.startswith(w)), "")
    if not word or wrong is None or _WORKLOAD_AXES[word][0] not in wrong:
        return False
    column, quiet = _WORKLOAD_AXES[word]
    return bool((wrong[column].fillna(quiet).astype(str) != quiet).any())
