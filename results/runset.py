"""Run sets: a directory whose subdirectories are runs of the same code (`attnbench interleave` makes one per
side), loaded as one row per cell that keeps each run's median, so that compare can judge by the spread
between runs (results.judge: the run level; run i of two sets made interleaved pairs with run i).

The same code moves from one run to the next by more than any interval inside one run shows (on a shared
machine), so two single runs cannot tell a small slowdown from re-running; several runs a side sample that
variance, as pyperf's several processes do.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .judge import RUN_COLUMNS, run_columns
from .load import load as load_runs
from .load import load_meta
from .schema import LIST_COLUMNS, float_list
from .store import META, RunDirError, not_there, runs_inside

MIN_RUNS = 2  # a set of one run is a run: say so rather than judge it as a set


def members(path: str | Path) -> list[Path] | None:
    """The runs of a run set, in name order; None when `path` is a run itself. RunDirError (one line)
    when it is neither: missing, a file, or a directory with fewer than MIN_RUNS runs directly inside."""
    p = Path(path)
    if (p / META).is_file():
        return None
    if not p.is_dir():
        raise not_there(p)
    runs = runs_inside(p)
    if len(runs) < MIN_RUNS:
        found = f"{len(runs)} run" if runs else "no meta.json and no runs"
        raise RunDirError(
            f"{p}: not a run ({found} in its subdirectories); a run set holds {MIN_RUNS} or more runs, "
            "one per subdirectory"
        )
    return runs


def load(path: str | Path) -> tuple[Any, dict[str, Any], str]:
    """(rows, meta, label) of a run or a run set: load_each's first three."""
    return load_each(path)[:3]


def load_each(path: str | Path) -> tuple[Any, dict[str, Any], str, Any]:
    """(rows, meta, label, runs) of a run or a run set, `runs` a set's runs' rows as results.load gives them
    (one row per cell of each run, its run_id; None for a run), which what is said of each run alone reads
    (compare's busy lines) instead of loading each run again. A set's rows: one per cell_id, its columns
    those of the first run that has the cell, but
    - status 'ok' only where every run that has the cell measured it ok (else the first other status and
      its message: a cell broken in one run of the code is broken);
    - time_ms_median the median of the runs' medians, samples_ms every run's samples;
    - run_medians_ms each run's median, run_index each such run's place in the set (in the order made:
      run i of two interleaved sets is pair i), run_visit_medians each run's visit medians ([] per run
      without rounds), and the per-run visit columns emptied: the runs are what is judged by.
    meta is the first run's, with `runset` (the runs' ids and paths) added."""
    runs = members(path)
    if runs is None:
        rows = load_runs(path)
        meta = next(iter(load_meta(path).values()))
        return rows, meta, str(meta.get("run_id")), None
    metas = load_meta(*runs)
    if len(metas) != len(runs):
        raise RunDirError(f"{path}: two of its runs have the same run_id; a run set's runs are separate runs")
    # in the order they were made: run i of two interleaved sets is then pair i (interleaved)
    made = sorted(zip(runs, metas.items(), strict=True), key=lambda x: str(x[1][1].get("created", "")))
    runs, metas = [r for r, _ in made], dict(m for _, m in made)
    rows = load_runs(runs)
    first = next(iter(metas.values()))
    created = [str(m.get("created", "")) for m in metas.values()]
    record = {"path": str(path), "runs": [str(r) for r in runs], "run_ids": list(metas), "created": created}
    meta = {**first, "runset": record}
    ids = sorted(metas)
    label = f"{len(ids)} runs ({ids[0]} .. {ids[-1]})"
    return _collapse(rows, list(metas)), meta, label, rows


def _collapse(rows, run_order: list[str]):
    """One row per cell_id over the set's runs (see load)."""
    import pandas as pd

    rows = rows.drop_duplicates(subset=["run_id", "cell_id"], keep="last")
    order = {rid: i for i, rid in enumerate(run_order)}
    out = []
    for _, cell in rows.groupby("cell_id", sort=False):
        cell = cell.sort_values("run_id", key=lambda s: s.map(order), kind="stable")
        first = cell.iloc[0].to_dict()
        statuses = list(cell["status"])
        broken = [i for i, s in enumerate(statuses) if s != "ok"]
        measured = cell[cell["time_ms_median"].notna()]
        medians = [float(x) for x in measured["time_ms_median"]]
        runs = measured.to_dict("records") if not broken else []
        row = {
            **first,
            "run_id": first["run_id"] if len(cell) == 1 else f"{len(cell)} runs",
            **{col: [] for col in LIST_COLUMNS[1:]},  # a run's own replicates: the runs are judged by now
            "samples_ms": [s for v in cell["samples_ms"] for s in float_list(v)],
            **run_columns(runs, [order[r["run_id"]] for r in runs]),
        }
        if broken:
            row["status"] = statuses[broken[0]]
            row["message"] = cell.iloc[broken[0]]["message"]
        row["time_ms_median"] = statistics.median(medians) if medians and not broken else pd.NA
        out.append(row)
    df = pd.DataFrame(out, columns=list(rows.columns) + list(RUN_COLUMNS))
    for col, dtype in rows.dtypes.items():  # the schema's types, as results.load gave them
        if col not in LIST_COLUMNS:
            df[col] = df[col].astype(dtype)
    return df


def interleaved(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> bool:
    """Whether two run sets were made interleaved: as many runs each, and the i-th run of A and the i-th of
    B (in the order they were made) next to each other among all the runs of both, e.g. A1 B1 A2 B2 .. or
    B1 A1 A2 B2 ..; each such pair met the same stretch of the machine's drift, and compare pairs them."""
    sa, sb = meta_a.get("runset"), meta_b.get("runset")
    if not sa or not sb or len(sa["created"]) != len(sb["created"]) or "" in sa["created"] + sb["created"]:
        return False
    if sa["path"] == sb["path"]:
        return False
    order = sorted(
        [(t, "a", i) for i, t in enumerate(sa["created"])]
        + [(t, "b", i) for i, t in enumerate(sb["created"])]
    )
    return all(
        {order[2 * i][1], order[2 * i + 1][1]} == {"a", "b"} and order[2 * i][2] == order[2 * i + 1][2] == i
        for i in range(len(order) // 2)
    )
