"""The history store's file (results.history): made, opened and checked, one writer at a time, and a
damaged one set aside for `rebuild`.

Two `history add`s into one store at once (two CI jobs) take turns: each holds a lock on the store's folder
(`locked`) from reading the store to its commit, so the second sees what the first recorded; and the tables
are made with `IF NOT EXISTS` in one transaction, so that two processes making one new store never both
make them (one failed: "table info already exists").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .schema import UPGRADE
from .writable import too_long, why_unwritable

FORMAT = "attnbench-history"
# the store's own layout. A store of an older one is refused in one line, and `rebuild` makes it again in this
# one; a store of a newer one was made by a newer attnbench, and is refused with what to upgrade.
# (2: cells keep a declared approximation's bound, `approximate`; 3: runs keep their `origin`, so that two
# runs with one run_id and created time are told apart; 4: runs keep the sha256 of attnbench's code,
# `code_sha256`, which tells two installs apart where no commit is recorded; 5: runs keep which sweep they
# are, `sweep` (axes.sweep_identity), so that MISSING compares a run with the run before it of its sweep;
# 6: runs keep the `machines` their meta.json plans, so that a run with no cells is on them: `runs`;
# 7: runs keep the settings that move their times, `sweep_env`, `allocator_env`, `torch_threads`,
# `transparent_hugepages` and `thp_mem_alloc_enable`, which a step's sides compare; 8: cells keep the
# loader's trust flags, results.load.TRUST_COLUMNS, so that the site ranks no cell its run's report did not)
VERSION = 8
# the oldest version read as it is (a frame, `check`, `publish`): the versions after it only added columns,
# which read empty there (ADDED says what each holds: a flag empty is unknown) until `rebuild` fills them
# from each run's files; `add` writes a store of VERSION only
READABLE = 6
ADDED = {
    7: "the runs' settings (--env, the allocator and thread variables, torch threads, huge pages)",
    8: "the cells' trust flags (suspect, drift, noisy, throttled)",
}
# what a store without them cannot do, by the version that added them
WITHOUT = {
    7: "what changed across a step cannot name them",
    8: "the site cannot leave a suspect cell out of who leads",
}
DAMAGED = ".damaged"  # the suffix a damaged store is set aside under by `rebuild`
WAIT_S = 600.0  # how long SQLite waits for another process's transaction on the store


class StoreError(ValueError):
    """The store is not one (a corrupt file, another tool's database, another version): one line."""


class DamagedStore(StoreError):
    """The store's file is not a database SQLite can read (damaged, or another kind of file); `why`: SQLite's
    words."""

    def __init__(self, text: str, why: str) -> None:
        super().__init__(text)
        self.why = why


def schema(run_columns: Sequence[str], cell_columns: Sequence[str]) -> tuple[str, ...]:
    """The statements that make the store's tables, each a no-op where the table is there."""
    return (
        "CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT)",
        f"CREATE TABLE IF NOT EXISTS runs ({', '.join(run_columns)}, PRIMARY KEY (run_key))",
        f"CREATE TABLE IF NOT EXISTS cells ({', '.join(cell_columns)}, PRIMARY KEY (run_key, cell_id))",
        "CREATE INDEX IF NOT EXISTS cells_by_series ON cells (machine, cell_id)",
    )


def is_new(store: Path) -> bool:
    """No store there yet: no file, or an empty one (nothing in it to lose: `touch`ed, or made by SQLite)."""
    return not store.exists() or (store.is_file() and store.stat().st_size == 0)


def connect(
    store: Path, statements: Sequence[str], *, create: bool, any_version: bool = False, reading: bool = False
):
    """The store, checked: StoreError when the file is not an attnbench history store of this VERSION (of
    READABLE or later when only `reading`; of any older version with `any_version`: what `rebuild` reads;
    the file is left as it was), a DamagedStore when SQLite cannot read it. A new store (is_new) is made, by
    `statements` in one transaction, only when `create`."""
    if is_new(store):
        if not create:
            if store.exists():
                raise StoreError(
                    f"{store} is an empty file, not a history store yet (`attnbench history add RUN... "
                    f"--store {store}` makes one there)"
                )
            raise StoreError(f"no history store at {store} (`attnbench history add RUN...` makes one)")
        store.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(store, timeout=WAIT_S, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")  # another process making it meanwhile waits, then finds it made
            for statement in statements:
                con.execute(statement)
            said = [("format", FORMAT), ("version", str(VERSION))]
            con.executemany("INSERT OR IGNORE INTO info VALUES (?, ?)", said)
            con.execute("COMMIT")
        finally:
            con.close()
    if store.is_dir():
        raise StoreError(f"{store} is a directory, not a history store (give the store's file)")
    con = sqlite3.connect(f"file:{store}?mode=rw", uri=True, timeout=WAIT_S)
    try:
        info = dict(con.execute("SELECT key, value FROM info").fetchall())
    except sqlite3.OperationalError as exc:  # a database without our tables: another tool's
        con.close()
        raise StoreError(f"{store} is not an attnbench history store ({exc})") from None
    except sqlite3.DatabaseError as exc:  # not a database SQLite can read: damaged, or another kind of file
        con.close()
        raise DamagedStore(
            f"{store} is not an attnbench history store, or a damaged one ({exc}): `attnbench history "
            f"rebuild RUN... --store {store}` makes it again from the runs (a run, or a folder of runs), "
            f"the file set aside as {store.name}{DAMAGED}",
            str(exc),
        ) from None
    problem = _version_problem(store, info, any_version, reading)
    if problem:
        con.close()
        raise StoreError(problem)
    return con


def _version_problem(store: Path, info: dict[str, Any], any_version: bool, reading: bool) -> str | None:
    """Why the store's info is not one this attnbench reads (another format, a newer version, an older one
    unless `any_version`, or READABLE or later where `reading`), or None."""
    if info.get("format") != FORMAT:
        return f"{store} is not an attnbench history store (its format is {info.get('format')!r})"
    version = str(info.get("version"))
    if not version.isdigit():
        return f"{store} is not an attnbench history store (its version is {info.get('version')!r})"
    if int(version) > VERSION:
        return (
            f"{store} was made by a newer attnbench (a history store of version {version}; this attnbench "
            f"reads version {VERSION}): {UPGRADE}"
        )
    if int(version) < VERSION and not any_version and not (reading and int(version) >= READABLE):
        if int(version) >= READABLE:
            return (
                f"{store} is a history store of version {version}, which this attnbench reads but adds no "
                f"run to (version {VERSION} records {_added(int(version))} too): make it again with "
                f"`attnbench history rebuild --store {store}`, which reads each recorded run again"
            )
        return (
            f"{store} is a history store of version {version}; this attnbench reads version {VERSION}: make "
            f"it again with `attnbench history rebuild --store {store}`, which reads each recorded run again "
            "(`--gone keep` keeps what the store holds of runs whose directories are gone)"
        )
    return None


def _added(version: int) -> str:
    """What the versions after `version` record that it does not (ADDED), in words."""
    return " and ".join(ADDED[v] for v in range(version + 1, VERSION + 1))


def older_note(store: Path, info: dict[str, Any]) -> str | None:
    """A line for a store of an older version read as it is (READABLE): what it does not record, and the
    command that records it; None for a store of this VERSION."""
    version = int(info.get("version") or VERSION)
    if version >= VERSION:
        return None
    return (
        f"note: {store} is a history store of version {version}, which does not record {_added(version)}: "
        + "; ".join(WITHOUT[v] for v in range(version + 1, VERSION + 1))
        + f"; `attnbench history rebuild --store {store}` records them from each run's files"
    )


def recorded_in_damaged(store: Path) -> list[tuple[Any, ...]] | None:
    """What a damaged store's runs table still says (run_key, run_id, path), or None where SQLite cannot
    read it either."""
    try:
        con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        return con.execute("SELECT run_key, run_id, path FROM runs ORDER BY created, run_id").fetchall()
    except sqlite3.Error:
        return None
    finally:
        con.close()


def set_aside(store: Path) -> Path:
    """Move a damaged store out of the way, kept under a name of its own (store.damaged, .damaged-2, ...)."""
    aside, n = store.with_name(store.name + DAMAGED), 1
    while aside.exists():
        n += 1
        aside = store.with_name(f"{store.name}{DAMAGED}-{n}")
    os.replace(store, aside)
    return aside


def check_writable(store: Path) -> None:
    """StoreError naming --store when the store (or, where it is not yet, its folder) cannot be written:
    SQLite writes its journal beside the file, so the folder is asked either way (results.writable)."""
    long = too_long(store)  # before the OS is asked: it names a long name only once the folder above it is
    if long:
        raise StoreError(f"--store {str(store)!r} {long}")
    folder = store.parent
    why = why_unwritable(folder)
    if why:
        raise StoreError(f"--store {str(store)!r}: its folder {str(folder)!r} {why}")
    if store.exists() and not os.access(store, os.W_OK):
        raise StoreError(f"--store {str(store)!r} is read-only: the store cannot be written")


_HELD: dict[tuple[str, int], int] = {}  # (folder, thread) holding its lock, and how many times over
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def locked(store: Path) -> Iterator[None]:
    """Hold the lock on the store's folder (flock: released when the process ends, however it ends) while
    the block reads and writes the store; another process's `add` or `rebuild` waits for it. Re-entrant in
    one process (rebuild adds into a fresh store beside the old). No lock where the folder is not there
    yet: then the store's tables are made in one transaction (connect)."""
    folder = str(store.absolute().parent)
    key = (folder, threading.get_ident())
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        with _HELD_LOCK:
            mine = _HELD.get(key, 0) > 0
            _HELD[key] = _HELD.get(key, 0) + 1
        if not mine:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            with _HELD_LOCK:
                _HELD[key] -= 1
    finally:
        os.close(fd)  # closing the one open description that took the lock releases it
