"""The history store's runs as a frame, a row per run and machine, a run with no cells among them: what
MISSING (results.breaks.missing) orders each sweep's runs by, so that a night stopped before its first row is
the latest run of its sweep, not a night that never was."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .history import IN_STORE, RUN_COLUMNS, _connect, as_times, pick_machine, run_columns


def runs(store: str | Path, *, machine: str | None = None, among: tuple[str, str] = IN_STORE):
    """The store's runs as a pandas DataFrame, a row per run and machine it is on: the machines of its cells,
    or, for a run with no cells (stopped before its first row: history.add's 'stopped'), the machines its
    meta.json plans (the store's `machines`); its run columns beside them (`created` tz-aware, `path` as
    results.history.frame gives it), ordered by time. `machine` keeps one machine's runs (pick_machine)."""
    import pandas as pd

    store = Path(store)
    chosen = pick_machine(store, machine, among) if machine is not None else None
    con = _connect(store, create=False, reading=True)
    try:
        recorded = pd.read_sql_query(f"SELECT {run_columns(con, RUN_COLUMNS)} FROM runs", con)
        measured = pd.read_sql_query("SELECT DISTINCT run_key, machine FROM cells", con)
    finally:
        con.close()
    with_cells = set(measured["run_key"])
    planned = [
        (key, str(m))
        for key, names in zip(recorded["run_key"], recorded["machines"], strict=True)
        if key not in with_cells
        for m in json.loads(names or "[]")
    ]
    on = pd.concat([measured, pd.DataFrame(planned, columns=["run_key", "machine"])], ignore_index=True)
    df = on.merge(recorded[[c for c in RUN_COLUMNS if c != "machines"]], on="run_key", how="inner")
    if chosen is not None:
        df = df[df["machine"] == chosen]
    df["path"] = [os.path.normpath(store.parent / p) for p in df["path"]]
    df["created"] = as_times(df["created"])
    return df.sort_values(["machine", "created", "run_id"], kind="stable").reset_index(drop=True)
