"""Many runs in one store: every run's cells keyed by cell_id, machine, versions, commits and time (SQLite).

The store is an index, not the data: each run's raw rows stay in its own directory (meta.json + rows.jsonl),
and `rebuild` makes the store again from the paths it recorded. What it keeps per run: where the run is, when
it was made, its origin (what tells two runs of one run_id apart), its fingerprint's versions (torch, CUDA,
the GPU driver, Python, attnbench), the project's commit, the sha256 of its code, the settings that move its
times (the sweep's --env, the allocator and thread variables, torch's threads, transparent huge pages), which
sweep it is and the machines its meta.json plans (a run stopped before its first row is recorded with no
cells on them); per cell: its identity (cell_id and the axes), the machine (the device's model and host, as
`results.devices` names it; the where key and the device group beside it), its status and median time with
quartiles, the variant's source, the calibration of the device that measured it, and its trust flags as the
loader derives them (results.history_cells), so that no page ranks a cell its run's report did not.

Why SQLite: a nightly `add` of one run is one fsync'd commit (7x cheaper than DuckDB's) and a load of 60,000
rows half a second, with no dependency, and one file with transactions makes `add` all or nothing (measured in
docs/experiments/history.md, `benchmarks/history_storage.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import devices, history_file
from .axes import FOLLOWS, QUIET, sweep_identity
from .formulas import command, counted
from .history_cells import AXIS_NAMES, CELL_COLUMNS, cell_records, plain  # noqa: F401 (re-exported)
from .history_file import VERSION, DamagedStore, StoreError, check_writable, is_new  # noqa: F401 (re-exported)
from .history_find import find_runs, repro_note, runs_and_others  # noqa: F401 (find_runs re-exported)
from .integrity import changed_files
from .load import trust_flags
from .rowfile import readable_bytes
from .schema import COLUMNS
from .store import (
    META,
    ROWS,
    SHARDS,
    RunDirError,
    latest,
    no_cells_text,
    read_meta,
    read_rows,
    skipped_rows,
    uncollected_rows,
    unfinished,
    unstarted_below,
    writer_holder,
)

DEFAULT_STORE = "runs/history.sqlite"

# a run's columns: what it is, where it is, and its set-up as its fingerprint recorded it
RUN_COLUMNS = (
    "run_key", "run_id", "created", "path", "schema_version", "host", "git_commit", "code_sha256",
    "attnbench_version", "torch", "cuda", "driver", "python", "xformers", "digest", "origin", "added_at",
    "sweep", "machines", "sweep_env", "allocator_env", "torch_threads", "transparent_hugepages",
    "thp_mem_alloc_enable",
)  # fmt: skip
_SCHEMA = history_file.schema(RUN_COLUMNS, CELL_COLUMNS)


@dataclass(frozen=True)
class Added:
    """What `add` did with one run: 'added', 'updated' (its rows changed: a resume), 'unchanged', 'older' (a
        copy of a run the store holds more of: not written), 'stopped' (a run with no rows, stopped before its
    first: recorded with no cells, so that `history check` fails on what it lacks), 'empty' (a directory a
    run's start left, without meta.json: not recorded) or 'other' (a folder below those given that holds no
    run: not recorded); what `rebuild`
        did with a run whose directory is gone: 'kept' (the cells the store held) or 'dropped'. `notes` are
        sentences for the user: an unfinished run, another run of the same run_id, an older copy."""

    path: Path
    run_id: str
    cells: int
    state: str
    notes: tuple[str, ...] = ()


# how a summary names each state of a run, in this order ("other", a folder below those given that holds no
# run, is no run: the summary counts it apart)
STATES = {
    "added": "added", "updated": "updated", "unchanged": "unchanged", "older": "older copy left out",
    "stopped": "recorded with no cells",
    "empty": "with no cells left out",
    "kept": "kept as the store held them, their directories gone",
    "dropped": "dropped, their directories gone", "repro": "repro left out",
}  # fmt: skip


def _connect(
    store: Path, *, create: bool, any_version: bool = False, reading: bool = False
) -> sqlite3.Connection:
    """The store, checked (history_file.connect); made new only when `create`; one of an older version it
    reads as it is (history_file.READABLE) where only `reading`."""
    return history_file.connect(store, _SCHEMA, create=create, any_version=any_version, reading=reading)


def run_columns(con: sqlite3.Connection, columns: Sequence[str]) -> str:
    """`columns` of the runs table as a SELECT names them, each a later version added that the store lacks
    as NULL (a store of an older version read as it is: history_file.READABLE)."""
    have = {r[1] for r in con.execute("PRAGMA table_info(runs)").fetchall()}
    return ", ".join(f"runs.{c}" if c in have else f"NULL AS {c}" for c in columns)


def older_note(store: str | Path) -> str | None:
    """A line for a store of an older version read as it is: what it does not record (history_file)."""
    con = _connect(Path(store), create=False, reading=True)
    try:
        info = dict(con.execute("SELECT key, value FROM info").fetchall())
    finally:
        con.close()
    return history_file.older_note(Path(store), info)


def rows_digest(run: str | Path) -> str:
    """The sha256 of a run's rows.jsonl and shards less the lines a reader skips: `add` skips an unchanged
    run, and a report records the rows it was drawn from (reports.rendered_from), which publish checks."""
    run, h = Path(run), hashlib.sha256()
    for f in filter(Path.is_file, [run / ROWS, *sorted((run / SHARDS).glob("*.jsonl"))]):
        h.update(f.name.encode() + b"\0" + readable_bytes(f))  # a corrupt line adds no row
    return h.hexdigest()


def run_key(meta: dict[str, Any]) -> str:
    """A run's key in the store: its run_id and when it was made (a copy of a run is the same run). Another
    run made in the same second on a host of the same name (CI containers started by one cron) has the
    same run_id: it is keyed with its origin beside it (`add`)."""
    return f"{meta.get('run_id')}@{meta.get('created')}"


def origin(meta: dict[str, Any]) -> str:
    """The sha256 of a run's meta.json as its first session wrote it (a later session adds only `devices`):
    its fingerprint, plan and measured calibration, which tell two runs of one run_id apart."""
    first = {k: v for k, v in meta.items() if k != "devices"}
    return hashlib.sha256(json.dumps(first, sort_keys=True, default=str).encode()).hexdigest()


def _relative(run: Path, store: Path) -> str:
    """A run's path as the store keeps it: relative to the store's folder, so that a moved checkout still
    rebuilds."""
    return os.path.relpath(run.resolve(), store.resolve().parent)


def _run_record(meta: dict[str, Any], path: str, digest: str, key: str) -> tuple[Any, ...]:
    fp = meta.get("fingerprint") or {}
    record = {
        "run_key": key,
        "run_id": meta.get("run_id"),
        "created": meta.get("created"),
        "path": path,
        "schema_version": meta.get("schema_version"),
        "host": fp.get("hostname"),
        "git_commit": fp.get("git_commit"),
        "code_sha256": fp.get("code_sha256"),
        "attnbench_version": fp.get("attnbench_version"),
        "torch": fp.get("torch"),
        "cuda": fp.get("cuda"),
        "driver": (fp.get("gpu") or {}).get("driver"),
        "python": fp.get("python"),
        "xformers": fp.get("xformers"),
        "digest": digest,
        "origin": origin(meta),
        "added_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sweep": sweep_identity(meta),
        "machines": devices.planned_machines(meta),
        "sweep_env": fp.get("sweep_env"),
        "allocator_env": fp.get("allocator_env"),
        "torch_threads": fp.get("torch_threads"),
        "transparent_hugepages": fp.get("transparent_hugepages"),
        "thp_mem_alloc_enable": fp.get("THP_MEM_ALLOC_ENABLE"),
    }
    return tuple(plain(record[c]) for c in RUN_COLUMNS)


def add(store: str | Path, paths: Sequence[str | Path]) -> list[Added]:
    """Record runs (a run, a run set, a folder of runs) into the store, creating it: all of them in one
    transaction, or none (every path is read and checked before the store is touched; a run a live process
    is still writing is refused, and so is a run that cannot be read: a folder of runs is added whole or not
    at all). A run already there with the same rows is 'unchanged'; one whose rows grew since (a resume) is
    'updated'; a copy of it with fewer rows is 'older' and not written. Two copies of one run with the same
    rows are recorded once, from the copy attnbench's files say is as it wrote it (results.integrity).
    Another run with the same run_id and created time is kept beside it; one that cannot be told from it is
    refused naming both paths (_same_run). A folder below that holds no run is said, not recorded. Two adds
    into one store take turns (history_file.locked)."""
    store = Path(store)
    runs: list[Path] = []
    other: list[Path] = []
    repros: dict[Path, str] = {}  # below a folder given: left out (history_find)
    for p in paths:  # a run still starting (no meta.json yet), given or below a folder given, as one written
        for live in [Path(p), *unstarted_below(p, live=True)]:
            _not_being_written(live)
        found, left, repro = runs_and_others(p)
        runs += [r.resolve() for r in found]
        other += [o.resolve() for o in left]
        repros.update((r.resolve(), of) for r, of in repro)
    runs = list(dict.fromkeys(runs))
    repros = {r: of for r, of in repros.items() if r not in runs}  # one given by its name too is added
    if not runs and not repros:
        raise RunDirError("no run given")
    for run in runs:
        _not_being_written(run)
    unstarted = list(dict.fromkeys(d.resolve() for p in paths for d in unstarted_below(p)))
    with history_file.locked(store):
        work = _write(store, runs) if runs else []
    said = [Added(w.run, str(w.meta.get("run_id")), len(w.rows), w.state, tuple(w.notes)) for w in work]
    return (
        said
        + [
            Added(
                d,
                "",
                0,
                "empty",
                (f"{d} has no cells (stopped before its meta.json was written): not added",),
            )
            for d in unstarted
        ]
        + [
            Added(o, "", 0, "other", (f"{o} holds no run (no {META} in it or below it): left out",))
            for o in dict.fromkeys(other)
        ]  # fmt: skip
        + [Added(r, "", 0, "repro", (repro_note(r, of),)) for r, of in repros.items()]
    )


def _not_being_written(run: Path) -> None:
    """RunDirError where a live process writes `run` (its writer.lock held): its cells are not all there."""
    holder = writer_holder(run)
    if holder:
        raise RunDirError(f"{run} is still being written (by {holder}): add it once that run has finished")


def _write(store: Path, runs: list[Path]) -> list[_Work]:
    """Plan each run against what the store holds, then write them in one transaction."""
    known = _Known.of(store)  # a bad store is refused before any run is read
    try:
        check_writable(store)
        work = [_plan(run, known) for run in runs]
    finally:
        known.close()
    cells = [w for w in work if w.write and w.state != "unchanged"]
    # typed at once; each run's every row, so that a cell measured again is judged on all its measurements
    for w, flags in zip(cells, trust_flags([(w.meta, w.every) for w in cells]), strict=True):
        w.flags = flags
    existed = store.exists()
    new = is_new(store)
    if existed or any(w.write for w in work):  # nothing to add makes no store where there was none
        con = _connect(store, create=True)
        try:
            with con:
                for w in work:
                    if w.write:
                        _record(con, store, w)
        except sqlite3.OperationalError as exc:  # the transaction was rolled back: the store is as it was
            if new:  # as it was: no file, or the empty file it was
                with contextlib.suppress(OSError):
                    store.write_bytes(b"") if existed else store.unlink()
            raise StoreError(f"--store {str(store)!r} cannot be written: {exc}") from None
        finally:
            con.close()
    return work


def _pair(row: dict[str, Any]) -> tuple[str, str]:
    """A row as the store can tell it again: its cell and when it finished (to the millisecond)."""
    return (str(row.get("cell_id")), str(row.get("finished_at")))


def _last(pairs: frozenset[tuple[str, str]]) -> str:
    return max((f for _, f in pairs if f != "None"), default="")


@dataclass
class _Work:
    """What `add` writes of one run given: its run record and cells under `key`, unless not `write`."""

    run: Path
    meta: dict[str, Any]
    digest: str
    rows: list[dict[str, Any]]
    state: str
    key: str
    write: bool = True
    notes: list[str] = field(default_factory=list)
    flags: list[dict[str, Any]] | None = None  # its rows' trust flags (load.trust_flags)
    every: list[dict[str, Any]] = field(default_factory=list)  # its rows as its files hold them, repeats too


@dataclass
class _Run:
    """A run the store holds, or that this `add` writes (`work`): what tells a run given the same run."""

    key: str
    origin: str | None  # None: recorded by a store of version 2 or older
    digest: str
    path: str
    pairs: frozenset[tuple[str, str]] | None  # its cells' _pair; None until read from the store
    work: _Work | None = None


class _Known:
    """The store's runs by (run_id, created), and each run this `add` writes as it is planned."""

    def __init__(self) -> None:
        self.con: sqlite3.Connection | None = None
        self.runs: dict[tuple[str, str], list[_Run]] = {}

    @classmethod
    def of(cls, store: Path) -> _Known:
        known = cls()
        if not store.exists() or (store.is_file() and store.stat().st_size == 0):  # a new store
            return known
        known.con = _connect(store, create=False)
        for key, rid, created, path, digest, orig in known.con.execute(
            "SELECT run_key, run_id, created, path, digest, origin FROM runs"
        ).fetchall():
            where = os.path.normpath(store.parent / path)
            known.runs.setdefault((str(rid), str(created)), []).append(_Run(key, orig, digest, where, None))
        return known

    def pairs(self, run: _Run) -> frozenset[tuple[str, str]]:
        if run.pairs is None:
            query = "SELECT cell_id, finished_at FROM cells WHERE run_key = ?"
            run.pairs = frozenset((str(c), str(f)) for c, f in self.con.execute(query, (run.key,)).fetchall())
        return run.pairs

    def close(self) -> None:
        if self.con is not None:
            self.con.close()


def _plan(run: Path, known: _Known) -> _Work:
    """What to write of `run`: a new run (beside another of its run_id, keyed with its origin), or what it
    is to the same run the store holds or this add writes (_same_run): 'unchanged', 'updated' (it has every
    row that run has, and more), or 'older' (a copy with fewer rows: not written). RunDirError naming both
    paths when neither holds all the other's rows."""
    meta, digest = read_meta(run), rows_digest(run)
    every = read_rows(run)
    extra = uncollected_rows(run)
    rows = latest(every + extra)  # a later row of a cell is its row (extra: cells not in rows.jsonl)
    pairs = frozenset(_pair(r) for r in every + extra)
    rid, created = str(meta.get("run_id")), str(meta.get("created"))
    cands = known.runs.setdefault((rid, created), [])
    w = _Work(run, meta, digest, rows, "added", run_key(meta), every=every + extra)
    same = _same_run(w, pairs, cands, known)
    if same is None:
        if not rows:  # stopped before its first row: recorded, so that it is its sweep's latest run (MISSING)
            w.state = "stopped"
            resume = (
                f"`{command('attnbench', 'run', '--resume', '--out', run)}` measures them; add it again then"
            )
            w.notes.append(f"{no_cells_text(run, meta)}: recorded as a run with no cells ({resume})")
        if any(c.key == w.key for c in cands):
            w.key = f"{w.key}#{origin(meta)[:8]}"
        if cands:
            w.notes.append(
                f"{run} is another run than {cands[0].path} with the same run_id {rid} and created time "
                "(made in the same second on a host of the same name): both are kept"
            )
        cands.append(_Run(w.key, origin(meta), digest, str(run), pairs, w))
    else:
        _relate(w, pairs, same, known)
    left = unfinished(meta, [r["cell_id"] for r in rows]) if w.state in ("added", "updated") else None
    if left:
        w.notes.append(
            f"{run} is unfinished: {left[0]} of {left[1]} planned cells "
            f"(`{command('attnbench', 'run', '--resume', '--out', run)}` finishes it; add it again then)"
        )
    return w


def _same_run(w: _Work, pairs: frozenset[tuple[str, str]], cands: list[_Run], known: _Known) -> _Run | None:
    """The run of `cands` (the store's and this add's runs with w's run_id and created time) that w is:
    the one of the same origin (meta.json as first written), or, of a store too old to record origins, the
    one that shares rows with it. RunDirError where the origins differ but the rows are shared: two runs
    that cannot be told apart (a copy whose meta.json was edited)."""
    mine = origin(w.meta)
    for c in cands:
        if c.origin == mine:
            return c
        shared = c.digest == w.digest or bool(pairs & known.pairs(c))
        if shared and c.origin is None:
            return c
        if shared:
            raise RunDirError(
                f"{w.run} and {c.path} are both run {w.meta.get('run_id')} with cells that finished at the "
                "same times, but their meta.json differ (one was edited?): add only the one to keep"
            )
    return None


def _relate(w: _Work, pairs: frozenset[tuple[str, str]], same: _Run, known: _Known) -> None:
    """w's state as the same run as `same`: what to write, and `same` then stands for w."""
    w.key = same.key
    theirs = known.pairs(same)
    rid = w.meta.get("run_id")
    if same.digest == w.digest and same.work is not None:  # the same rows twice in one add: written once
        first, changed = same.work, _damage(same.work.run)
        if not changed or _damage(w.run):  # the first copy, unless only it was changed
            w.state, w.write, w.rows = "unchanged", False, []
            w.notes.append(f"{w.run} is the same run as {same.path}: recorded once")
            return
        w.state, first.state, first.write, first.rows = first.state, "unchanged", False, []
        w.rows = w.rows if w.state != "unchanged" else []
        first.notes.append(
            f"{first.run} is the same run as {w.run}, but its {changed[0]}: recorded once, from {w.run}"
        )
    elif same.digest == w.digest:
        w.state, w.rows = "unchanged", []
    elif same.work is not None and (
        damaged := next(((p, d[0]) for p in (w.run, same.work.run) if (d := _damage(p))), None)
    ):  # two copies given at once, with different rows: which is the run is not for attnbench to guess
        raise RunDirError(
            f"{w.run} and {same.path} are both run {rid} with different rows, and in {damaged[0]} "
            f"{damaged[1]}: add only the one to keep"
        )
    elif theirs <= pairs:  # every row it has, and more: a resume, or a fuller copy
        w.state = "updated"
        if same.work is not None:
            w.state = "added" if same.work.state in ("added", "stopped") else "updated"
            _older(same.work, w.run, len(w.rows))
    elif _last(pairs) <= _last(theirs):
        w.notes.append(
            f"{w.run} is an older copy of run {rid} ({counted(len(w.rows), 'cell')} of the {len(theirs)} of "
            f"{same.path}): not added, the store keeps {same.path}'s"
        )
        w.state, w.write, w.rows = "older", False, []
        return
    else:
        raise RunDirError(
            f"{w.run} and {same.path} are both run {rid}, and each has cells the other lacks: add only the "
            "one to keep"
        )
    same.digest, same.pairs, same.path, same.work = w.digest, pairs, str(w.run), w


def _damage(run: str | Path) -> list[str]:
    """What says a copy of a run is not as attnbench wrote it: the changes its written.json records or
    finds (results.integrity), else the lines of its rows.jsonl a reader skips; [] for an intact copy."""
    return changed_files(run) or [f"{ROWS} has a line that is no row ({s})" for s in skipped_rows(run)]


def _older(w: _Work, newer: Path, cells: int) -> None:
    """An earlier run of this add that a later one given holds more of: not written."""
    w.notes.append(
        f"{w.run} is an older copy of run {w.meta.get('run_id')} ({counted(len(w.rows), 'cell')} of the "
        f"{cells} of {newer}): not added, the store keeps {newer}'s"
    )
    w.state, w.write, w.rows = "older", False, []


def _record(con: sqlite3.Connection, store: Path, w: _Work) -> None:
    """Write w's run record (its path as now) and, unless unchanged, its cells."""
    record = _run_record(w.meta, _relative(w.run, store), w.digest, w.key)
    con.execute(f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' * len(RUN_COLUMNS))})", record)
    if w.state == "unchanged":
        return
    con.execute("DELETE FROM cells WHERE run_key = ?", (w.key,))
    con.executemany(
        f"INSERT INTO cells VALUES ({', '.join('?' * len(CELL_COLUMNS))})",
        cell_records(w.meta, w.rows, w.key, w.flags),
    )


GONE = ("keep", "drop")  # what `rebuild --gone` does with a recorded run whose directory is gone


def rebuild(store: str | Path, *, gone: str | None = None, runs: Sequence[str | Path] = ()) -> list[Added]:
    """Make the store again from its runs' own directories, in this version (a store of an older version, or
    one to trust again), and from the runs `runs` names (a run, or a folder of runs): written beside it and
    moved into place, so that a rebuild that fails leaves the old store. A recorded run whose directory is
    gone (a retention policy removed it) is refused in one line naming the first, unless `gone` says what to
    do: 'keep' keeps what the store holds of it (its run record and cells, the columns an older store lacked
    left empty), 'drop' leaves it out. A damaged store (history_file.DamagedStore) is made again from the
    runs it still names, if SQLite can read them, and `runs`; it is set aside under its name + '.damaged',
    never removed, and the first run's notes say where."""
    store = Path(store)
    if gone not in (None, *GONE):
        raise ValueError(f"--gone takes {' or '.join(GONE)}, not {gone!r}")
    with history_file.locked(store):
        return _rebuild(store, gone, runs)


def _rebuild(store: Path, gone: str | None, runs: Sequence[str | Path]) -> list[Added]:
    given = [r.resolve() for p in runs for r in find_runs(p)]  # a bad run: one line, before the store
    damaged = None
    try:
        con = _connect(store, create=False, any_version=True)
    except DamagedStore as exc:
        damaged = exc
        recorded = history_file.recorded_in_damaged(store) or []
        if not recorded and not given:
            raise StoreError(
                f"{store} is damaged ({exc.why}) and the runs it recorded cannot be read from it: name them, "
                f"`attnbench history rebuild RUN... --store {store}` (a run, or a folder of runs)"
            ) from None
        gone = gone or "drop"  # what a damaged store held of a run cannot be copied
    else:
        try:
            recorded = con.execute(
                "SELECT run_key, run_id, path FROM runs ORDER BY created, run_id"
            ).fetchall()
        finally:
            con.close()
    paths = {key: Path(os.path.normpath(store.parent / p)) for key, _, p in recorded}
    missing = [(key, rid) for key, rid, _ in recorded if not (paths[key] / META).is_file()]
    if missing and gone is None:
        first = paths[missing[0][0]]
        raise RunDirError(
            f"{counted(len(missing), 'run')} the store recorded {'is' if len(missing) == 1 else 'are'} gone, "
            f"e.g. {first}: rebuild reads each run from its directory; put them back, or pass --gone keep "
            "(keep what the store holds of them) or --gone drop (leave them out)"
        )
    gone_keys = {key for key, _ in missing}
    present = [paths[key] for key, _, _ in recorded if key not in gone_keys] + given
    fresh = store.with_name(store.name + ".rebuild")
    fresh.unlink(missing_ok=True)
    try:
        _connect(fresh, create=True).close()
        kept = _copy_runs(store, fresh, [key for key, _ in missing]) if gone == "keep" else {}
        added = add(fresh, list(dict.fromkeys(present))) if present else []
        aside = history_file.set_aside(store) if damaged is not None else None
        os.replace(fresh, store)
    finally:
        fresh.unlink(missing_ok=True)
    left = [Added(paths[key], str(rid), kept.get(key, 0), "kept" if gone == "keep" else "dropped")
            for key, rid in missing]  # fmt: skip
    out = added + left
    if aside is not None and out:
        out[0] = dataclasses.replace(
            out[0], notes=(f"the damaged store was set aside as {aside}", *out[0].notes)
        )
    return out


def _copy_runs(old: Path, fresh: Path, keys: list[str]) -> dict[str, int]:
    """Copy the runs `keys` (run records and cells) from the store `old`, of this or an older version, into
    `fresh`: the columns `old` has, the others empty (an axis it lacks at its quiet value); {key: cells}."""
    src = _connect(old, create=False, any_version=True)
    dst = _connect(fresh, create=False)
    counts = {}
    try:
        with dst:
            for table, columns in (("runs", RUN_COLUMNS), ("cells", CELL_COLUMNS)):
                have = {r[1] for r in src.execute(f"PRAGMA table_info({table})").fetchall()}
                for key in keys:
                    found = src.execute(f"SELECT * FROM {table} WHERE run_key = ?", (key,))
                    names = [d[0] for d in found.description]
                    rows = [dict(zip(names, r, strict=True)) for r in found.fetchall()]
                    out = [_filled(r, have, columns) for r in rows]
                    marks = ", ".join("?" * len(columns))
                    dst.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", out)
                    if table == "cells":
                        counts[key] = len(out)
    finally:
        src.close()
        dst.close()
    return counts


def _filled(record: dict[str, Any], have: set[str], columns: Sequence[str]) -> tuple[Any, ...]:
    """A record of an older store in `columns`' order: a column it lacks empty, an axis at its quiet value
    (or the axis it follows), as cell_records reads a row written before the axis existed."""
    out = {c: record.get(c) if c in have else QUIET.get(c) for c in columns}
    for axis, followed in FOLLOWS.items():
        if axis in out and out[axis] is None:
            out[axis] = out.get(followed)
    return tuple(out[c] for c in columns)


def machines(store: str | Path) -> list[str]:
    """The machines the store holds cells of, by name."""
    con = _connect(Path(store), create=False, reading=True)
    try:
        return [m for (m,) in con.execute("SELECT DISTINCT machine FROM cells ORDER BY machine").fetchall()]
    finally:
        con.close()


# what holds the machines pick_machine chooses among, as its error names it: the store, or the runs given
# directly (frame_of: attnbench.history(RUN) without store=, read through a temporary store)
IN_STORE = ("no machine of the store", "the store has")
IN_RUNS = ("no machine of the runs given", "they have")


def pick_machine(store: str | Path, machine: str, among: tuple[str, str] = IN_STORE) -> str:
    """The one machine of the store that `machine` names (its whole name, or a part of it found in one
    machine's name only); a ValueError in one line naming the known ones when none or several match, in
    the words of `among` (IN_STORE, or IN_RUNS where the store holds the runs given and no more)."""
    known = machines(store)
    if not machine.strip():  # a part found in every name: an unset variable ("$MACHINE") read as all machines
        raise ValueError(
            f"--machine {machine!r} is empty: give a machine's name or a part of one; {among[1]}: "
            f"{', '.join(known) or 'none'}"
        )
    if machine in known:
        return machine
    found = [m for m in known if machine.lower() in m.lower()]
    if len(found) == 1:
        return found[0]
    none, have = among
    what = "matches several machines" if found else f"is {none}"
    raise ValueError(f"--machine {machine!r} {what}; {have}: {', '.join(found or known) or 'none'}")


def frame(store: str | Path, *, machine: str | None = None, among: tuple[str, str] = IN_STORE):
    """The store as one pandas DataFrame: a row per cell per run, with its run's columns (when, commit,
    versions, path, origin) beside it, ordered by machine, cell and time; the times tz-aware (as_times).
    `machine` keeps one machine's cells (pick_machine's rule; `among`: its error's words)."""
    import pandas as pd

    store = Path(store)
    chosen = pick_machine(store, machine, among) if machine is not None else None
    run_cols = [c for c in RUN_COLUMNS if c not in ("run_key", "digest")]
    con = _connect(store, create=False, reading=True)
    try:
        query = (
            f"SELECT cells.*, {run_columns(con, run_cols)} FROM cells JOIN runs USING (run_key)"
            + (" WHERE cells.machine = ?" if chosen else "")
            + " ORDER BY cells.machine, cells.cell_id, runs.created, runs.run_id"
        )
        df = pd.read_sql_query(query, con, params=(chosen,) if chosen else None)
    finally:
        con.close()
    df["path"] = [os.path.normpath(store.parent / p) for p in df["path"]]
    for col in (c for c in CELL_COLUMNS if c not in df.columns):  # a READABLE older version's: unknown
        df[col] = None
    for col, dtype in _TYPES.items():
        df[col] = df[col].astype(dtype)
    for col in TIMES:
        df[col] = as_times(df[col])
    return df


def as_times(values):
    """ISO 8601 texts (a run's `created`, a row's `finished_at`) as tz-aware datetimes in UTC; one without an
    offset (a pytest-benchmark import's) is read as UTC, and one that is not a time is NaT."""
    import pandas as pd

    return pd.to_datetime(values, utc=True, format="ISO8601", errors="coerce")


def frame_of(paths: Sequence[str | Path], *, machine: str | None = None):
    """`frame` of the runs `paths` alone, read through a temporary store that is removed: nothing is written
    where the runs or the caller are (attnbench.history(RUN) without store=)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attnbench-history-") as tmp:
        store = Path(tmp) / "history.sqlite"
        add(store, paths)
        return frame(store, machine=machine, among=IN_RUNS)


# the frame's typed columns: the axes and measurements as results.load types them, the times as datetimes
# (TIMES), the rest as text
TIMES = ("created", "finished_at", "added_at")
_TYPES = {
    **{c: "string" for c in (*CELL_COLUMNS, *RUN_COLUMNS) if c not in ("digest", *TIMES)},
    **{c: COLUMNS[c] for c in CELL_COLUMNS if c in COLUMNS and c not in ("machine", "host")},
    "cal_matmul_tflops": "Float64",
    "cal_copy_gbps": "Float64",
    "schema_version": "Int64",
    "torch_threads": "Int64",
}
