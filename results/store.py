"""Run directories: meta.json written once, rows.jsonl appended and flushed after every cell.

A run killed at any moment leaves every finished row readable: each row is one line written with a
single write() and fsync'd; a torn last line (the kill landed mid-write) is skipped with a warning.
Nothing is ever overwritten: a directory that already holds a run is refused unless resuming.
JSON only, never pickle.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .formulas import command
from .integrity import WRITTEN, Tracked
from .neighbours import RECORD as NEIGHBOURS
from .rowfile import RowWarning as RowWarning  # the loaders' warning, named here as it always was
from .rowfile import read_lines, scan
from .schema import READABLE_VERSIONS, SCHEMA_VERSION, UPGRADE
from .whole import write_whole

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows: no advisory locks; one writer is then up to the user)
    fcntl = None

META = "meta.json"
ROWS = "rows.jsonl"
LOCK = "writer.lock"  # flock'd by the run's one writer (RunWriter)
SHIPPED = "variants.pkl"  # the run's variants defined in a notebook or a script, by value (variants.shipped)
RESUMES = "resumes.jsonl"  # one line per `run --resume`: when, where, and how its set-up differed
SHARDS = "shards"  # shards/*.jsonl: rows written by one executor task each, until merge_shards collects them


class RunDirError(ValueError):
    """A run directory is missing, not a run, from an unreadable schema version, or already taken."""


class RunWriteError(RunDirError):
    """A run's file could not be written (a full disk, a quota): nothing torn is left behind; the message
    names the file and the cause in one line."""


def _write_error(target: Path, exc: OSError, run: Path | None = None) -> RunWriteError:
    """'cannot write PATH: no space left on device; ...' for an OSError raised writing a file of the run
    directory `run` (target's folder unless given); 'the run folder ... disappeared' where `run` is gone."""
    cause = (exc.strerror or str(exc)).strip()
    cause = cause[:1].lower() + cause[1:]
    run = target.parent if run is None else run
    if not run.is_dir():  # removed (or moved away) while the run wrote it: no disk is full, nothing to resume
        return RunWriteError(
            f"cannot write {target}: the run folder {run} disappeared while the run wrote it (removed or "
            "moved away): the rows measured so far went with it; run the same command again for a new run"
        )
    if (run / META).is_file():
        resume = command("attnbench", "run", "--resume", "--out", run)
        then = f"every row written before is kept: make room, then `{resume}`"
    else:  # nothing measured yet: the directory is what a stopped start leaves (START_LEFTOVERS)
        then = "nothing was measured yet: make room, then run the same command again"
    return RunWriteError(f"cannot write {target}: {cause}; {then}")


# less free than this where a run is written: its disk is full, for what failed there
ROOM_MIN_BYTES = 1 << 20


def no_room(target: Path, run: Path) -> RunWriteError | None:
    """The one-line error for `target` of the run directory `run` when its disk has (almost) no room left:
    what a process that died writing there (a worker whose log could not be written) most likely met; else
    None."""
    try:
        free = shutil.disk_usage(run).free
    except OSError:
        return None
    if free >= ROOM_MIN_BYTES:
        return None
    return _write_error(target, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), run)


def append_record(fh, record: dict[str, Any], target: Path, run: Path) -> None:
    """One record appended to the open binary file `fh` (target, a file of the run directory `run`) as one
    JSON line and fsync'd: whole, or not at all (RunWriteError, the file as it was)."""
    _append_all(fh.fileno(), (json.dumps(record, separators=(",", ":")) + "\n").encode(), target, run)


def _append_all(fd: int, data: bytes, target: Path, run: Path | None = None) -> None:
    """Append `data` to the open file `fd` and fsync it, or leave the file as it was: a failed or short
    write (ENOSPC partway through) is cut back to the size before, so no torn line stays behind."""
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, size)
        except OSError:  # pragma: no cover  (the next writer's _repair_tail cuts it then)
            pass
        raise _write_error(target, exc, run) from None


def _write_whole(target: Path, text: str) -> None:
    """A file of the run replaced whole (results.whole.write_whole: the old file or the new one, never part
    of one, and no temporary file behind), a failure said as the run's one line (RunWriteError)."""
    try:
        write_whole(target, text)
    except OSError as exc:
        raise _write_error(target, exc) from None


class UncollectedWarning(UserWarning):
    """A run's rows are (partly) still in shards/*.jsonl, not yet merged into rows.jsonl."""


# What a run's start leaves before meta.json exists (its lock, its worker's log, a temp file a kill cut
# short (results.whole names each *.tmp), the variants it ships by value, and, from a version that wrote it
# there too, the runs measuring beside it on the machine): a directory holding only these was stopped while
# starting or calibrating, measured nothing, and is reused by the next new run into it.
START_LEFTOVERS = (LOCK, "worker*.log", "*.tmp", SHIPPED, NEIGHBOURS)


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / META).is_file()


def runs_inside(path: str | Path) -> list[Path]:
    """The run directories directly inside `path`, by name: a run set's runs (results.runset)."""
    return sorted((c for c in Path(path).iterdir() if c.is_dir() and is_run_dir(c)), key=lambda c: c.name)


def runs_held(folder: str | Path) -> list[str]:
    """The run directories in `folder` and in its folders (a run set's runs), by their path below it: a
    folder of the user's runs, which a report or a site refuses to be written among."""
    out = Path(folder)
    if not out.is_dir() or out.is_symlink():
        return []
    found = []
    for child in sorted(c for c in out.iterdir() if c.is_dir() and not c.is_symlink()):
        try:
            inside = [child] if is_run_dir(child) else runs_inside(child)
        except OSError:  # a folder it may not read holds nothing to be written among
            continue
        found += [str(r.relative_to(out)) for r in inside]
    return found


def _leftovers(path: Path) -> list[Path] | None:
    """The files of a directory that a run's start left (START_LEFTOVERS), or None when it holds anything
    else, meta.json among it, or is no directory."""
    if not path.is_dir():
        return None
    found = list(path.iterdir())
    if all(p.is_file() and any(p.match(pattern) for pattern in START_LEFTOVERS) for p in found):
        return found
    return None


def is_unstarted(path: str | Path) -> bool:
    """Whether `path` is empty, or holds only what a run stopped before meta.json left (START_LEFTOVERS):
    a new run may go there, and there is nothing to resume."""
    return _leftovers(Path(path)) is not None


def unstarted_below(path: str | Path, *, live: bool = False) -> list[Path]:
    """The directories below the folder `path` that a run stopped before its meta.json was written left
    (its start's files alone: is_unstarted, not empty): no run and no cells, which `history add` names
    as it names a run without cells. With `live`, those a live run holds instead: still starting (importing
    its variants, calibrating), which `history add` refuses as it refuses a run being written."""
    p = Path(path)
    if (p / META).is_file() or not p.is_dir():
        return []
    try:
        children = sorted(c for c in p.iterdir() if c.is_dir() and not (c / META).is_file())
    except OSError:
        return []
    found = []
    for c in children:
        if is_unstarted(c) and any(c.iterdir()):
            found += [c] if bool(writer_holder(c)) == live else []  # a live one is still starting
        else:
            found += unstarted_below(c, live=live)
    return found


def not_there(path: str | Path) -> RunDirError:
    """The one-line error for a run directory that is not a directory: it does not exist, or it is a file (a
    history store given as a run says where a store goes)."""
    p = Path(path)
    if not p.is_file():
        return RunDirError(f"run directory {str(path)!r} does not exist")
    try:
        with p.open("rb") as fh:
            sqlite = fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        sqlite = False
    store = f": it is an SQLite file, as a history store is: give a store as --store {str(path)!r}"
    return RunDirError(f"{str(path)!r} is a file, not a run directory{store if sqlite else ''}")


def read_meta(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_dir():
        raise not_there(path)
    if not (p / META).is_file():
        holder = writer_holder(p) if is_unstarted(p) else None
        if holder:  # a run calibrating, or importing its variants: it writes meta.json then
            raise RunDirError(
                f"{str(path)!r} is still being written (by {holder}) and has no {META} yet: it is starting; "
                "wait for that run to finish"
            )
        if is_unstarted(p) and any(p.iterdir()):
            raise RunDirError(
                f"{str(path)!r} holds no run: it was stopped while starting (before {META} was written), "
                "so nothing was measured; run the same command again without --resume (the directory is "
                "reused)"
            )
        runs = [c.name for c in runs_inside(p)]
        if runs:  # a run set (results.runset): compare takes it whole; everything else takes its runs
            raise RunDirError(
                f"{str(path)!r} is a run set ({len(runs)} runs: {', '.join(runs[:3])}"
                f"{', ..' if len(runs) > 3 else ''}), not a run: `attnbench compare` takes it whole; "
                f"give its runs here ({Path(path, '*')})"
            )
        raise RunDirError(f"{str(path)!r} is not an attnbench run (no {META})")
    try:
        meta = json.loads((p / META).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(f"{p / META} is not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise RunDirError(
            f"{p / META} is not a run's metadata: a JSON object was expected, not {_kind(meta)}"
        )
    version = meta.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        if isinstance(version, str) and version.strip().isdigit():  # hand-edited, or written by another tool
            raise RunDirError(
                f"{p / META} has schema_version {json.dumps(version)}, a string; attnbench writes it as a "
                f"number ({version.strip()}) and reads {list(READABLE_VERSIONS)}"
            )
        raise RunDirError(f"{p / META} {_version_text(version)}")
    problem = _meta_problem(meta)
    if problem:
        raise RunDirError(f"{p / META} is damaged: {problem}")
    return meta


def _version_text(version: object) -> str:
    """What is wrong with a meta.json's schema_version that this attnbench does not read, and what to do."""
    reads = f"this attnbench reads {list(READABLE_VERSIONS)}"
    if version is None:
        return f"has no schema_version, which every run attnbench writes records ({reads})"
    if isinstance(version, int) and not isinstance(version, bool):
        if version > max(READABLE_VERSIONS):
            return f"has schema version {version}: a newer attnbench made it ({reads}); {UPGRADE}"
        return f"has schema version {version}: an older attnbench made it ({reads})"
    return f"has schema version {version!r}; {reads}"


# The JSON kinds of meta.json's fields that commands read (RunWriter writes them so); `sweep` is required.
# A field of another kind is refused by read_meta with one line, before a command trips over it.
META_KINDS: dict[str, type] = {
    "run_id": str,
    "created": str,
    "sweep": dict,
    "variants": list,
    "variant_capabilities": dict,
    "variant_files": list,
    "fingerprint": dict,
    "executor": str,
    "executor_options": dict,
    "calibration": dict,
    "devices": dict,
    "worker_threads": int,
    "cells": list,
    "planned_cells": int,
    "rerun_of": dict,
    "cpu_affinity": dict,
    "cwd": str,
}
_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
               bool: "true/false", type(None): "null"}  # fmt: skip


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with a parsed meta.json's shape (one clause), None when nothing is."""
    if "sweep" not in meta:
        return "it has no `sweep` (what the run measures)"
    for key, kind in META_KINDS.items():
        if key in meta and (not isinstance(meta[key], kind) or isinstance(meta[key], bool)):
            want = _JSON_KINDS[kind]
            return f"`{key}` should be {want}, not {_kind(meta[key])}"
    for key in ("variant_capabilities", "calibration", "devices"):  # objects of objects
        bad = next((k for k, v in meta.get(key, {}).items() if not isinstance(v, dict)), None)
        if bad is not None:
            return f"`{key}.{bad}` should be an object, not {_kind(meta[key][bad])}"
    for axis, values in meta["sweep"].items():
        want = dict if axis == "settings" else list
        if not isinstance(values, want) and not (axis == "settings" and values is None):
            return f"`sweep.{axis}` should be {_JSON_KINDS[want]}, not {_kind(values)}"
    return None


def skipped_rows(path: str | Path) -> list[str]:
    """What _read_lines says of each line of the run's rows.jsonl it skips, without warning."""
    return [said for _lineno, said in scan(Path(path) / ROWS)[1]]


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every complete row; a torn or corrupt line is skipped with a warning naming it."""
    return [row for _, row in read_lines(Path(path) / ROWS)]


def unfinished(meta: dict[str, Any], cell_ids: Any) -> tuple[int, int] | None:
    """(cells with a row, cells planned) of a run that stopped before it measured every cell it planned
    (Ctrl-C, a kill, a crash: `attnbench run --resume` finishes it), from meta.json's `planned_cells`; None
    for a run that measured them all, or whose meta.json does not say (runs made before it did)."""
    planned = meta.get("planned_cells")
    if not isinstance(planned, int) or isinstance(planned, bool):
        return None
    measured = len({str(c) for c in cell_ids})
    return (measured, planned) if measured < planned else None


def no_cells_text(run: Any, meta: dict[str, Any]) -> str:
    """'runs/empty has no measured cells (unfinished: 0 of 12 planned)': a run stopped before its first cell,
    as `history add` and `compare` say it (the planned count from meta.json's `planned_cells`, where it
    says)."""
    planned = meta.get("planned_cells")
    known = isinstance(planned, int) and not isinstance(planned, bool) and planned > 0
    return f"{run} has no measured cells" + (f" (unfinished: 0 of {planned} planned)" if known else "")


def latest_rows(path: str | Path) -> list[dict[str, Any]]:
    """One row per cell: a later row of a cell is a deliberate re-measurement (--resume --redo-drift) and
    replaces the earlier one, in the earlier one's place."""
    return latest(read_rows(path))


def latest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """latest_rows of rows already read."""
    return list({r["cell_id"]: r for r in rows}.values())


class RunWriter:
    """Creates (or, resuming, reopens) a run directory and appends rows to it: the run's single writer.

    The writer holds an exclusive flock on the run's writer.lock for as long as it is open, so a second
    writer (another `attnbench run --resume` of the same directory, say) is refused with a one-line
    error naming the holder, instead of measuring the same cells twice. The kernel drops the lock when
    the holder exits, however it exits (SIGKILL included); the file only names the last holder.
    """

    def __init__(self, path: str | Path, *, resume: bool = False) -> None:
        self.path = Path(path)
        self._fh = None
        self._lock = None
        if resume:
            read_meta(self.path)  # must exist and be readable
        else:
            self._refuse_taken()  # before the lock file is written into someone's directory
        self._lock = _acquire(self.path, resume)
        if resume:  # read after locking: the previous writer's last rows are all in
            self.done = {r["cell_id"]: r for r in read_rows(self.path)}
        else:
            self._refuse_taken(locked=True)  # again under the lock: another writer may have started since
            self._clear_leftovers()
            self.done = {}
        try:  # every byte this writer appends, to see what else changed the file
            self._rows = Tracked(self.path, ROWS)
        except OSError as exc:
            self.close()
            raise _write_error(self.path / WRITTEN, exc) from None

    def _refuse_taken(self, locked: bool = False) -> None:
        if self.path.exists() and not is_unstarted(self.path):
            holder = None if locked else writer_holder(self.path)  # under this writer's lock: itself
            if holder:  # another run writes it now: resuming it would finish that one's sweep, not this
                raise RunDirError(being_written(self.path, holder, resume=False))
            raise RunDirError(
                f"{str(self.path)!r} already exists and is not empty; pass --resume to finish that run "
                "or choose another --out"
            )

    def _clear_leftovers(self) -> None:
        """A new run into what a stopped start left: its old worker logs and temp files go (they belong to
        no run); the lock is this writer's now."""
        for p in _leftovers(self.path) or []:
            if p.name != LOCK:
                p.unlink(missing_ok=True)

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write meta.json once (atomically: a temp file renamed into place)."""
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / META
        if target.exists():
            raise RunDirError(f"{target} exists already; run metadata is written once")
        _write_whole(
            target, json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=2, sort_keys=False) + "\n"
        )

    def add_device(self, record: dict[str, Any]) -> None:
        """Add one device's record (where it is, its calibration) to meta.json `devices`, keyed by
        `formulas.where_key`: executors that reach devices after the run started (other GPUs, Ray nodes,
        Slurm tasks) report them here. The only change ever made to a written meta.json, made by this
        run's single writer, atomically; a device already described keeps its first record."""
        from .formulas import where_key

        target = self.path / META
        meta = json.loads(target.read_text())
        key = where_key(record.get("host"), record["device"], record.get("gpu_uuid"))
        devices = meta.setdefault("devices", {})
        if key in devices:
            return
        devices[key] = record
        _write_whole(target, json.dumps(meta, indent=2, sort_keys=False) + "\n")

    def write_json(self, name: str, data: Any) -> None:
        """Write a side file of the run once (atomically), e.g. the numerics probe."""
        target = self.path / name
        if target.exists():
            raise RunDirError(f"{target} exists already")
        _write_whole(target, json.dumps(data, indent=1) + "\n")

    def append(self, row: dict[str, Any]) -> None:
        """Append one row as one line, fsync'd before returning; RunWriteError (the file as it was before,
        no torn line) when the disk is full or the write fails otherwise."""
        if self._fh is None:
            self._fh = (self.path / ROWS).open("ab", buffering=0)
            self._guarded(self._rows.before, self._fh.fileno(), b"")  # what changed it since the writer began
            self._repair_tail()
            self._rows.rebase()
        data = (json.dumps(row, separators=(",", ":")) + "\n").encode()
        self._guarded(self._rows.before, self._fh.fileno(), data)
        _append_all(self._fh.fileno(), data, self.path / ROWS)
        self._rows.after(data)
        self.done[row["cell_id"]] = row

    @property
    def changes(self) -> list[str]:
        """What changed rows.jsonl while this writer had it, other than its own writes (results.integrity)."""
        return list(self._rows.changes)

    def _guarded(self, check, *args) -> None:
        """A row's record in written.json that cannot be written (a full disk) is the row that cannot be."""
        try:
            check(*args)
        except OSError as exc:
            raise _write_error(self.path / ROWS, exc) from None

    def _repair_tail(self) -> None:
        """A last line without its newline is a write a kill interrupted. A complete row (only the
        newline missing) is ended; a torn fragment is cut off, so the file reads clean again. Nothing
        finished is lost: a fragment never was a row (and its cell is not in `done`, so it runs again)."""
        p = self.path / ROWS
        data = p.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        try:
            row = json.loads(data[cut:])
        except (json.JSONDecodeError, UnicodeDecodeError):
            row = None
        if isinstance(row, dict) and "cell_id" in row:
            _append_all(self._fh.fileno(), b"\n", p)
        else:
            os.truncate(p, cut)

    def log_resume(self, record: dict[str, Any]) -> None:
        """Append one line to resumes.jsonl (flushed and fsync'd): meta.json stays as the run's first
        session wrote it, and every later session that added rows says when and how it differed."""
        with (self.path / RESUMES).open("ab", buffering=0) as fh:
            line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
            _append_all(fh.fileno(), line, self.path / RESUMES)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            with contextlib.suppress(OSError):  # a full disk was said by the append that met it
                self._rows.close()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None


def being_written(path: str | Path, holder: str, resume: bool) -> str:
    """Why `path` cannot be written now: `holder` (its writer.lock's line) writes it. A resume waits for it,
    then finishes what is left; a new run goes elsewhere: resuming would finish the other run's sweep."""
    said = f"{str(path)!r} is being written by {holder}; a run has one writer at a time: "
    if resume:
        return said + "wait for it to finish (or stop it), then resume it"
    return said + "another run is writing it, so choose another --out for this one"


def _acquire(path: Path, resume: bool = True):
    """An open writer.lock holding an exclusive flock, or RunDirError naming who holds it (and, for a new
    run, `resume` False, that it should go elsewhere)."""
    path.mkdir(parents=True, exist_ok=True)
    fh = (path / LOCK).open("a+")
    if fcntl is not None:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise RunDirError(being_written(path, holder, resume)) from None
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on host {socket.gethostname()} since {since}\n")
        fh.flush()
    except OSError as exc:
        with contextlib.suppress(OSError):  # close flushes the same unwritable line again
            fh.close()
        raise _write_error(path / LOCK, exc) from None
    return fh


def writer_holder(path: str | Path) -> str | None:
    """Who is writing the run `path` now ('pid 12 on host vm since ...', as its writer.lock names it), or None
    when no live process holds its lock: the kernel drops a writer's flock however it exits, so a lock file
    a killed run left is no writer. Asked with a shared flock, let go at once (a writer starting in that
    instant is refused as by a second writer)."""
    lock = Path(path) / LOCK
    if fcntl is None or not lock.is_file():
        return None
    try:
        fh = lock.open("r")
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return fh.read().strip() or "another process"
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return None


def read_resumes(path: str | Path) -> list[dict[str, Any]]:
    """The run's resumes.jsonl records, oldest first ([] for a run never resumed)."""
    return [rec for _, rec in read_lines(Path(path) / RESUMES, rows=False)]


# ---- shards: rows written apart by executor tasks (one file each), merged into rows.jsonl ---------------


@dataclass(frozen=True)
class Duplicate:
    """A cell found more than once: the row kept and the one dropped, each as 'file:line'."""

    cell_id: str
    kept: str
    dropped: str


@dataclass
class ShardMerge:
    """What merge_shards did: the cells it appended to rows.jsonl and the duplicates it dropped."""

    added: list[str] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)


def _finished(row: dict[str, Any]) -> datetime | None:
    """When a row's cell finished (its finished_at, UTC when it names no zone), None when unknown."""
    try:
        t = datetime.fromisoformat(str(row["finished_at"]))
    except (KeyError, TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _shard_choice(path: Path) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[Duplicate]]:
    """Per cell of the run's shards (files in name order): the first finished row, as (source, row), and
    the duplicates it won over. Rows without a readable finished_at come after every dated one, in file
    order; a torn or corrupt line is skipped with a warning (a task may still be writing its shard)."""
    found: dict[str, list[tuple[tuple, str, dict[str, Any]]]] = {}
    for order, shard in enumerate(sorted((path / SHARDS).glob("*.jsonl"))):
        for lineno, row in read_lines(shard):
            t = _finished(row)
            key = (t is None, t or datetime.min.replace(tzinfo=timezone.utc), order, lineno)
            found.setdefault(row["cell_id"], []).append((key, f"{SHARDS}/{shard.name}:{lineno}", row))
    chosen, dups = {}, []
    for cid, candidates in found.items():
        (_, src, row), *others = sorted(candidates, key=lambda c: c[0])
        chosen[cid] = (src, row)
        dups += [Duplicate(cid, src, other) for _, other, _ in others]
    return chosen, dups


def uncollected_rows(path: str | Path) -> list[dict[str, Any]]:
    """The shard rows of cells rows.jsonl does not hold yet (merge_shards' choice among duplicates)."""
    p = Path(path)
    if not (p / SHARDS).is_dir():
        return []
    collected = {r["cell_id"] for r in read_rows(p)}
    chosen, _ = _shard_choice(p)
    return [row for cid, (_, row) in chosen.items() if cid not in collected]


def same_row(collected: Mapping[str, Any], shard_row: Mapping[str, Any]) -> bool:
    """Whether a shard row is the row rows.jsonl already holds for its cell (collected there, by the driver
    or an earlier collect): every field the task wrote reads back the same, run_id aside (the collector
    sets it). Compared as JSON text, as both were written: a CPU row's NaN (executed_tflops, io_gbps) is
    the same NaN, where NaN != NaN would call every such row a second measurement."""

    def text(value: Any) -> str:
        return json.dumps(value, sort_keys=True)

    return all(k == "run_id" or text(collected.get(k)) == text(v) for k, v in shard_row.items())


def shard_rows_to_add(
    path: str | Path, done: Mapping[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Duplicate]]:
    """The one rule for merging shards: the shard rows to append to a run whose rows.jsonl holds `done` (its
    rows by cell_id), and the duplicates left out. A cell found in several shards keeps its first finished
    row; a cell rows.jsonl already holds keeps that row (rows.jsonl is append-only); a shard row identical to
    the one collected is no duplicate (merging twice adds nothing)."""
    chosen, duplicates = _shard_choice(Path(path))
    add = []
    for cid, (src, row) in chosen.items():
        if cid in done:
            if not same_row(done[cid], row):
                duplicates.append(Duplicate(cid, ROWS, src))
            continue
        add.append(row)
    return add, duplicates


def merge_shards(path: str | Path) -> ShardMerge:
    """Collect shards/*.jsonl into the run's rows.jsonl by cell_id (shard_rows_to_add), as the run's one
    writer (RunWriter: refused while another writer holds the run). Each row left out is returned as a
    Duplicate, so that the caller can say so. The shard files are left as they are."""
    p = Path(path)
    writer = RunWriter(p, resume=True)
    result = ShardMerge()
    try:
        rows, result.duplicates = shard_rows_to_add(p, writer.done)
        for row in rows:
            writer.append(row)
            result.added.append(row["cell_id"])
    finally:
        writer.close()
    return result
