"""Many runs in one store: every run's cells keyed by cell_id, machine, versions, commits and time (SQLite).

The store is an index, not the data: each run's raw rows stay in its own directory (meta.json + rows.jsonl),
and `rebuild` makes the store again from the paths it recorded. What it keeps per run: where the run is, when
it was made, its fingerprint's versions (torch, CUDA, the GPU driver, Python, attnbench) and the project's
commit; per cell: its identity (cell_id and the axes), the machine (the device's model and host, as
`results.devices` names it; the where key and the device group beside it), its status and median time with
quartiles, the variant's source, and the calibration of the device that measured it.

Why SQLite (measured 2026-11-27 on the 2-core EPYC VM, 1,000 synthetic runs of 60 rows, SQLite 3.40 against
DuckDB 2.0.1; `benchmarks/history_storage.py`):

| storage | add, one transaction per run | add, one transaction | load all into pandas | file |
| --- | --- | --- | --- | --- |
| SQLite (stdlib) | 14.8 s (15 ms a commit, fsync'd) | 0.52 s | 0.49 s | 12.9 MB |
| DuckDB file | 101.6 s (100 ms a commit) | 0.47 s | 0.22 s | 2.1 MB |
| Parquet file per run, read by DuckDB | 7.4 s | - | 0.90 s | 5.7 MB |

The store's queries are small (a nightly `add` of one run, a load of every series), where SQLite's commit is
7x cheaper than DuckDB's and its load of 60,000 rows is half a second; it needs no dependency (DuckDB's wheel
unpacks to 69 MB), and one file with transactions makes `add` all or nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import devices
from .axes import AXES, FOLLOWS, QUIET
from .schema import COLUMNS
from .store import (
    META,
    ROWS,
    SHARDS,
    RunDirError,
    latest_rows,
    not_there,
    read_meta,
    runs_inside,
    uncollected_rows,
)
from .writable import why_unwritable

DEFAULT_STORE = "runs/history.sqlite"
FORMAT = "attnbench-history"
# the store's own layout; a store of another version is refused in one line, and `rebuild` makes it again
# (2: cells keep a declared approximation's bound, `approximate`)
VERSION = 2

# a run's columns: what it is, where it is, and its set-up as its fingerprint recorded it
RUN_COLUMNS = (
    "run_key", "run_id", "created", "path", "schema_version", "host", "git_commit", "attnbench_version",
    "torch", "cuda", "driver", "python", "xformers", "digest", "added_at",
)  # fmt: skip
# a cell's columns: its identity, the machine that measured it, what was measured, that device's calibration
AXIS_NAMES = tuple(a.name for a in AXES)
CELL_COLUMNS = (
    "run_key", "cell_id", "machine", "where_key", "device_group", *AXIS_NAMES, "status", "time_ms_median",
    "time_ms_p25", "time_ms_p75", "tflops", "peak_mem_bytes", "variant_source", "cal_matmul_tflops",
    "cal_copy_gbps", "finished_at", "approximate",
)  # fmt: skip
_SCHEMA = (
    "CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT)",
    f"CREATE TABLE runs ({', '.join(RUN_COLUMNS)}, PRIMARY KEY (run_key))",
    f"CREATE TABLE cells ({', '.join(CELL_COLUMNS)}, PRIMARY KEY (run_key, cell_id))",
    "CREATE INDEX cells_by_series ON cells (machine, cell_id)",
)


class StoreError(ValueError):
    """The store is not one (a corrupt file, another tool's database, another version): one line."""


@dataclass(frozen=True)
class Added:
    """What `add` did with one run: 'added', 'updated' (its rows changed: a resume) or 'unchanged'."""

    path: Path
    run_id: str
    cells: int
    state: str


def find_runs(path: str | Path) -> list[Path]:
    """The run `path` is, or every run below the folder `path` (a run set, a folder of runs, nested); a
    RunDirError in one line when it is neither."""
    p = Path(path)
    if (p / META).is_file():
        read_meta(p)  # a damaged meta.json or another schema version: one line, before anything is written
        return [p]
    if not p.is_dir():
        raise not_there(path)
    found = list(runs_inside(p))
    for child in sorted(c for c in p.iterdir() if c.is_dir() and not (c / META).is_file()):
        found += [r for r in _runs_below(child)]
    if not found:
        read_meta(p)  # says what the folder is (stopped while starting, or no run at all)
    for run in found:
        read_meta(run)
    return found


def _runs_below(p: Path) -> Iterable[Path]:
    try:
        children = sorted(c for c in p.iterdir() if c.is_dir())
    except OSError:
        return
    for c in children:
        if (c / META).is_file():
            yield c
        else:
            yield from _runs_below(c)


def _connect(store: Path, *, create: bool, any_version: bool = False) -> sqlite3.Connection:
    """The store, checked: StoreError when the file is not an attnbench history store of this VERSION (of
    any version with `any_version`: what `rebuild` reads of an older one; the file is left as it was). A
    missing store is created only when `create`."""
    if not store.exists():
        if not create:
            raise StoreError(f"no history store at {store} (`attnbench history add RUN...` makes one)")
        store.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(store)
        with con:
            for statement in _SCHEMA:
                con.execute(statement)
            con.executemany("INSERT INTO info VALUES (?, ?)", [("format", FORMAT), ("version", str(VERSION))])
        return con
    if store.is_dir():
        raise StoreError(f"{store} is a directory, not a history store (give the store's file)")
    con = sqlite3.connect(f"file:{store}?mode=rw", uri=True)
    try:
        info = dict(con.execute("SELECT key, value FROM info").fetchall())
    except sqlite3.DatabaseError as exc:  # not a database, or a database without our tables
        con.close()
        raise StoreError(f"{store} is not an attnbench history store ({exc})") from None
    if info.get("format") != FORMAT:
        con.close()
        raise StoreError(f"{store} is not an attnbench history store (its format is {info.get('format')!r})")
    if info.get("version") != str(VERSION) and not any_version:
        con.close()
        raise StoreError(
            f"{store} is a history store of version {info.get('version')}; this attnbench reads version "
            f"{VERSION}: make it again with `attnbench history rebuild --store {store}`"
        )
    return con


def _digest(run: Path) -> str:
    """What a run's rows are: the sha256 of rows.jsonl and its shards, so that an unchanged run is skipped."""
    h = hashlib.sha256()
    for f in [run / ROWS, *sorted((run / SHARDS).glob("*.jsonl"))]:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def run_key(meta: dict[str, Any]) -> str:
    """A run's identity in the store: its run_id and when it was made (a copy of a run is the same run)."""
    return f"{meta.get('run_id')}@{meta.get('created')}"


def _relative(run: Path, store: Path) -> str:
    """A run's path as the store keeps it: relative to the store's folder, so that a moved checkout still
    rebuilds."""
    return os.path.relpath(run.resolve(), store.resolve().parent)


def _run_record(meta: dict[str, Any], path: str, digest: str) -> tuple[Any, ...]:
    fp = meta.get("fingerprint") or {}
    record = {
        "run_key": run_key(meta),
        "run_id": meta.get("run_id"),
        "created": meta.get("created"),
        "path": path,
        "schema_version": meta.get("schema_version"),
        "host": fp.get("hostname"),
        "git_commit": fp.get("git_commit"),
        "attnbench_version": fp.get("attnbench_version"),
        "torch": fp.get("torch"),
        "cuda": fp.get("cuda"),
        "driver": (fp.get("gpu") or {}).get("driver"),
        "python": fp.get("python"),
        "xformers": fp.get("xformers"),
        "digest": digest,
        "added_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return tuple(_plain(record[c]) for c in RUN_COLUMNS)


def _plain(value: Any) -> Any:
    """A value SQLite stores as it is (text, number, NULL); anything else as its JSON text."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    return json.dumps(value, sort_keys=True)


def machine_of(meta: dict[str, Any], where: str, row: dict[str, Any]) -> str:
    """The machine of a row, as a series is keyed: the device's model on its host ('NVIDIA H200 on vm', 'AMD
    EPYC (2 cores) on vm'), so that one host's CPU and GPU, or two GPU models, are separate series."""
    fp = meta.get("fingerprint") or {}
    host = devices.device_record(meta, where).get("host") or row.get("host") or fp.get("hostname") or "?"
    model = devices.model_of(meta, where, row)
    cores = fp.get("physical_cores")
    if row.get("device") != "cuda" and cores and host == fp.get("hostname"):
        model = f"{model} ({cores} cores)"
    return f"{model} on {host}"


def cell_records(meta: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The store's cell records of one run's rows (CELL_COLUMNS' order)."""
    key = run_key(meta)
    group = {w: g.label for g in devices.groups(meta, rows) for w in g.wheres}
    sources = {v: c.get("source") for v, c in (meta.get("variant_capabilities") or {}).items()}
    out = []
    for row in rows:
        where = devices.where_of(row)
        cal = devices.calibration_for(meta, str(row.get("device")), where)
        record = {
            **{a: row.get(a, QUIET.get(a)) for a in AXIS_NAMES},
            "run_key": key,
            "cell_id": row["cell_id"],
            "machine": machine_of(meta, where, row),
            "where_key": where,
            "device_group": group.get(where, ""),
            "status": row.get("status"),
            "time_ms_median": row.get("time_ms_median"),
            "time_ms_p25": row.get("time_ms_p25"),
            "time_ms_p75": row.get("time_ms_p75"),
            "tflops": row.get("tflops"),
            "peak_mem_bytes": row.get("peak_mem_bytes"),
            "variant_source": sources.get(row.get("variant")),
            "cal_matmul_tflops": devices.matmul_tflops(cal, str(row.get("dtype"))),
            "cal_copy_gbps": devices.positive(cal.get("copy_gbps")),
            "finished_at": row.get("finished_at"),
            "approximate": row.get("approximate"),  # its bound, so that pages name it as approximate
        }
        for axis, followed in FOLLOWS.items():  # rows written before the axis existed (results.load does so)
            if record[axis] is None:
                record[axis] = record[followed]
        out.append(tuple(_plain(record[c]) for c in CELL_COLUMNS))
    return out


def add(store: str | Path, paths: Sequence[str | Path]) -> list[Added]:
    """Record runs (a run, a run set, a folder of runs) into the store, creating it: all of them in one
    transaction, or none (every path is read and checked before the store is touched). A run already there
    with the same rows is 'unchanged'; one whose rows changed since (a resume) is 'updated'."""
    store = Path(store)
    runs = list(dict.fromkeys(r.resolve() for p in paths for r in find_runs(p)))
    if not runs:
        raise RunDirError("no run given")
    con = _connect(store, create=False) if store.exists() else None  # a bad store is refused before reading
    if con is not None:
        con.close()
    _check_writable(store)
    known = _digests(store) if store.exists() else {}
    work = []
    for run in runs:
        meta, digest = read_meta(run), _digest(run)
        state = (
            "unchanged"
            if known.get(run_key(meta)) == digest
            else "updated"
            if run_key(meta) in known
            else "added"
        )
        rows = latest_rows(run) + uncollected_rows(run) if state != "unchanged" else []
        work.append((run, meta, digest, state, rows))
    made = not store.exists()
    con = _connect(store, create=True)
    try:
        with con:
            for run, meta, digest, state, rows in work:
                record = _run_record(meta, _relative(run, store), digest)
                con.execute(
                    f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' * len(RUN_COLUMNS))})", record
                )
                if state == "unchanged":
                    continue
                con.execute("DELETE FROM cells WHERE run_key = ?", (run_key(meta),))
                con.executemany(
                    f"INSERT INTO cells VALUES ({', '.join('?' * len(CELL_COLUMNS))})",
                    cell_records(meta, rows),
                )
    except sqlite3.OperationalError as exc:  # the transaction was rolled back: the store is as it was
        if made:
            store.unlink(missing_ok=True)
        raise StoreError(f"--store {str(store)!r} cannot be written: {exc}") from None
    finally:
        con.close()
    return [Added(run, str(meta.get("run_id")), len(rows), state) for run, meta, _, state, rows in work]


def _check_writable(store: Path) -> None:
    """StoreError naming --store when the store (or, where it is not yet, its folder) cannot be written:
    SQLite writes its journal beside the file, so the folder is asked either way (results.writable)."""
    folder = store.parent
    why = why_unwritable(folder)
    if why:
        raise StoreError(f"--store {str(store)!r}: its folder {str(folder)!r} {why}")
    if store.exists() and not os.access(store, os.W_OK):
        raise StoreError(f"--store {str(store)!r} is read-only: the store cannot be written")


def _digests(store: Path) -> dict[str, str]:
    con = _connect(store, create=False)
    try:
        return dict(con.execute("SELECT run_key, digest FROM runs").fetchall())
    finally:
        con.close()


def recorded_paths(store: str | Path) -> list[Path]:
    """The run directories the store recorded, as paths from here (in the order they were made)."""
    store = Path(store)
    con = _connect(store, create=False, any_version=True)  # every version's runs table holds them so
    try:
        paths = [p for (p,) in con.execute("SELECT path FROM runs ORDER BY created, run_id").fetchall()]
    finally:
        con.close()
    return [Path(os.path.normpath(store.parent / p)) for p in paths]


def rebuild(store: str | Path) -> list[Added]:
    """Make the store again from its runs' own directories (a new version of the store, or one to trust
    again): written beside it and moved into place, so that a rebuild that fails leaves the old store. Every
    recorded run must still be there (one line naming the first that is not)."""
    store = Path(store)
    paths = recorded_paths(store)
    gone = [p for p in paths if not (p / META).is_file()]
    if gone:
        raise RunDirError(
            f"{len(gone)} run(s) the store recorded are gone, e.g. {gone[0]}: the store cannot be rebuilt "
            "without them (put them back, or make a new store with `attnbench history add`)"
        )
    fresh = store.with_name(store.name + ".rebuild")
    fresh.unlink(missing_ok=True)
    try:
        added = add(fresh, paths) if paths else []
        if not paths:
            _connect(fresh, create=True).close()
        os.replace(fresh, store)
    finally:
        fresh.unlink(missing_ok=True)
    return added


def machines(store: str | Path) -> list[str]:
    """The machines the store holds cells of, by name."""
    con = _connect(Path(store), create=False)
    try:
        return [m for (m,) in con.execute("SELECT DISTINCT machine FROM cells ORDER BY machine").fetchall()]
    finally:
        con.close()


def pick_machine(store: str | Path, machine: str) -> str:
    """The one machine of the store that `machine` names (its whole name, or a part of it found in one
    machine's name only); a ValueError in one line naming the known ones when none or several match."""
    known = machines(store)
    if machine in known:
        return machine
    found = [m for m in known if machine.lower() in m.lower()]
    if len(found) == 1:
        return found[0]
    what = "matches several machines" if found else "is no machine of the store"
    raise ValueError(f"--machine {machine!r} {what}; the store has: {', '.join(found or known) or 'none'}")


def frame(store: str | Path, *, machine: str | None = None):
    """The store as one pandas DataFrame: a row per cell per run, with its run's columns (when, commit,
    versions, path) beside it, ordered by machine, cell and time. `machine` keeps one machine's cells
    (pick_machine's rule)."""
    import pandas as pd

    store = Path(store)
    chosen = pick_machine(store, machine) if machine is not None else None
    run_cols = [c for c in RUN_COLUMNS if c not in ("run_key", "digest")]
    query = (
        f"SELECT cells.*, {', '.join('runs.' + c for c in run_cols)} FROM cells JOIN runs USING (run_key)"
        + (" WHERE cells.machine = ?" if chosen else "")
        + " ORDER BY cells.machine, cells.cell_id, runs.created, runs.run_id"
    )
    con = _connect(store, create=False)
    try:
        df = pd.read_sql_query(query, con, params=(chosen,) if chosen else None)
    finally:
        con.close()
    df["path"] = [os.path.normpath(store.parent / p) for p in df["path"]]
    for col, dtype in _TYPES.items():
        df[col] = df[col].astype(dtype)
    return df


# the frame's typed columns: the axes and measurements as results.load types them, the rest as text
_TYPES = {
    **{c: "string" for c in (*CELL_COLUMNS, *RUN_COLUMNS) if c != "digest"},
    **{c: COLUMNS[c] for c in CELL_COLUMNS if c in COLUMNS and c not in ("machine", "host")},
    "cal_matmul_tflops": "Float64",
    "cal_copy_gbps": "Float64",
    "schema_version": "Int64",
}
