"""Which free worker takes which cell next: the one hand-out rule of the GPU pool and the Ray executor.

Skip-ahead stays here, with the dispatcher: a cell is prechecked (`cellrunner.precheck`: unsupported, or
skipped after a smaller N of its series ran out of memory or time) just before it is handed out, against
every row finished so far, wherever it was measured. Cells of one series (`CellSpec.group_key`) are handed
out one at a time while other work is waiting, so that a larger N is measured only once the smaller one
has finished and skip-ahead can still spare it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnbench.harness.run.executors.base import OnRow
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers.cellrunner import SkipAhead, precheck


class Dispatcher:
    """The cells not yet handed out, those in flight, and the skip-ahead they feed; single-threaded."""

    def __init__(self, cells: Iterable[CellSpec], done: list[dict[str, Any]], max_call_ms: int = 0) -> None:
        self.pending: list[CellSpec] = list(cells)
        self.skip = SkipAhead(done, max_call_ms)
        self.flying: dict[str, CellSpec] = {}  # cell_id -> spec handed out and not yet back

    @property
    def finished(self) -> bool:
        return not self.pending and not self.flying

    def take(self, device: str, on_row: OnRow) -> CellSpec | None:
        """The next cell for a free worker measuring `device`, or None when none is left for it. Cells that
        need no worker on the way are finished here and their rows handed to on_row."""
        busy = {spec.group_key for spec in self.flying.values()}
        fallback = None
        i = 0
        while i < len(self.pending):
            spec = self.pending[i]
            if spec.device != device:
                i += 1
                continue
            row = precheck(spec, self.skip)
            if row is not None:
                del self.pending[i]
                self.skip.note(spec, row)
                on_row(row)
                continue
            if spec.group_key not in busy:
                return self._hand_out(i)
            if fallback is None:
                fallback = i
            i += 1
        # only cells of series already in flight are left: keep the worker busy rather than idle
        return None if fallback is None else self._hand_out(fallback)

    def _hand_out(self, index: int) -> CellSpec:
        spec = self.pending.pop(index)
        self.flying[spec.cell_id] = spec
        return spec

    def back(self, spec: CellSpec, row: dict[str, Any]) -> None:
        """A handed-out cell's row came back (any status, `crashed` included)."""
        self.flying.pop(spec.cell_id, None)
        self.skip.note(spec, row)

    def devices_left(self) -> set[str]:
        return {spec.device for spec in self.pending}
