"""A run's own rows, read from its folder once, for what the history store does not keep (samples, visits,
speed probes, trust flags): the history site's ties, busy machines and time exponents (reports.dashboard)."""

from __future__ import annotations

import warnings
from typing import Any

from attnbench.results.load import load
from attnbench.results.store import RunDirError, read_meta

from .busy import machine_busy
from .fit import time_fit, with_probe_after
from .tables import length_axis, ok_rows


class RunRows:
    """Each run's own rows (results.load: its samples, visits and trust flags, which the store does not keep),
    read from its folder once, when a page asks; None where the folder cannot be read (moved or removed)."""

    def __init__(self) -> None:
        self._frames: dict[str, Any] = {}
        self._cells: dict[str, dict[str, Any]] = {}
        self._probed: dict[str, Any] = {}  # the frame with each cell's probe after it (fit.with_probe_after)
        self._metas: dict[str, dict[str, Any]] = {}

    def frame(self, path: Any) -> Any:
        """The run's loaded rows (results.load), or None."""
        key = str(path)
        if key not in self._frames:
            try:
                with warnings.catch_warnings():  # a torn tail or uncollected shards: the rows read are enough
                    warnings.simplefilter("ignore")
                    self._frames[key] = load(key)
            except (RunDirError, OSError, ValueError):
                self._frames[key] = None
        return self._frames[key]

    def row(self, path: Any, cell_id: Any) -> Any:
        """A cell's loaded row, or None."""
        key = str(path)
        if key not in self._cells:
            df = self.frame(key)
            self._cells[key] = {} if df is None else {str(r["cell_id"]): r for _, r in df.iterrows()}
        return self._cells[key].get(str(cell_id))

    def time_fit(self, path: Any, cell_ids, rows) -> Any:
        """The time exponent of one series of a run (its cells `cell_ids`) as the run's report gives it
        (reports.fit.time_fit: the same points, weights and time_fit_from), from the run's own rows and
        meta.json; where its folder cannot be read, from the store's ok `rows` of those cells, which keep no
        spreads (each point then at the fit's floor)."""
        key = str(path)
        if key not in self._probed:
            df = self.frame(key)
            self._probed[key] = None if df is None else with_probe_after(df)
        df = self._probed[key]
        if df is not None:
            rows = df[df["cell_id"].isin({str(c) for c in cell_ids})]
            return time_fit(ok_rows(rows), length_axis(rows), self.meta(key))
        return time_fit(rows, length_axis(rows), self.meta(key))

    def meta(self, path: Any) -> dict[str, Any]:
        """The run's meta.json (results.store.read_meta), or {} where it cannot be read."""
        key = str(path)
        if key not in self._metas:
            try:
                self._metas[key] = read_meta(key)
            except (RunDirError, OSError, ValueError):
                self._metas[key] = {}
        return self._metas[key]

    def busy(self, path: Any, cell_ids) -> str | None:
        """reports.busy.machine_busy's sentence for the run's cells `cell_ids` (one machine's), or None:
        not busy, or the run's folder cannot be read."""
        df = self.frame(path)
        if df is None:
            return None
        mine = df[df["cell_id"].isin({str(c) for c in cell_ids})]
        return machine_busy(mine) if len(mine) else None
