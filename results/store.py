"""Run directories: meta.json written once, rows.jsonl appended and flushed after every cell.

A run killed at any moment leaves every finished row readable: each row is one line written with a
single write() and fsync'd; a torn last line (the kill landed mid-write) is skipped with a warning.
Nothing is ever overwritten: a directory that already holds a run is refused unless resuming.
JSON only, never pickle.
"""

from __future__ import annotations

import json
import os
import socket
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .schema import READABLE_VERSIONS, SCHEMA_VERSION

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows: no advisory locks; one writer is then up to the user)
    fcntl = None

META = "meta.json"
ROWS = "rows.jsonl"
LOCK = "writer.lock"  # flock'd by the run's one writer (RunWriter)


class RunDirError(ValueError):
    """A run directory is missing, not a run, from an unreadable schema version, or already taken."""


class RowWarning(UserWarning):
    """A line of rows.jsonl that is not a row (a torn write, or corrupt data) was skipped."""


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / META).is_file()


def read_meta(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_dir():
        raise RunDirError(f"run directory {str(path)!r} does not exist")
    if not (p / META).is_file():
        raise RunDirError(f"{str(path)!r} is not an attnbench run (no {META})")
    try:
        meta = json.loads((p / META).read_text())
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{p / META} is not valid JSON: {exc}") from None
    version = meta.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise RunDirError(
            f"{p / META} has schema version {version!r}; this attnbench reads {list(READABLE_VERSIONS)}"
        )
    return meta


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every complete row; a torn or corrupt line is skipped with a warning naming it."""
    p = Path(path) / ROWS
    if not p.is_file():
        return []
    rows = []
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                warnings.warn(f"{p}:{lineno}: skipped an unreadable row (torn write?)", RowWarning, 2)
                continue
            if isinstance(row, dict) and "cell_id" in row:
                rows.append(row)
            else:  # valid JSON but not a result row: corrupt, or not written by attnbench
                warnings.warn(
                    f"{p}:{lineno}: skipped a line that is not a result row (no cell_id)", RowWarning, 2
                )
    return rows


def latest_rows(path: str | Path) -> list[dict[str, Any]]:
    """One row per cell: a later row of a cell is a deliberate re-measurement (--resume --redo-drift) and
    replaces the earlier one, in the earlier one's place."""
    return list({r["cell_id"]: r for r in read_rows(path)}.values())


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
        self._lock = _acquire(self.path)
        if resume:  # read after locking: the previous writer's last rows are all in
            self.done = {r["cell_id"]: r for r in read_rows(self.path)}
        else:
            self._refuse_taken()  # again under the lock: another writer may have started in between
            self.done = {}

    def _refuse_taken(self) -> None:
        if self.path.exists() and any(p.name != LOCK for p in self.path.iterdir()):
            raise RunDirError(
                f"{str(self.path)!r} already exists and is not empty; pass --resume to finish that run "
                "or choose another --out"
            )

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write meta.json once (atomically: a temp file renamed into place)."""
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / META
        if target.exists():
            raise RunDirError(f"{target} exists already; run metadata is written once")
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(
            json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=2, sort_keys=False) + "\n"
        )
        os.replace(tmp, target)

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
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n")
        os.replace(tmp, target)

    def write_json(self, name: str, data: Any) -> None:
        """Write a side file of the run once (atomically), e.g. the numerics probe."""
        target = self.path / name
        if target.exists():
            raise RunDirError(f"{target} exists already")
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, target)

    def append(self, row: dict[str, Any]) -> None:
        """Append one row as one line, flushed and fsync'd before returning."""
        if self._fh is None:
            self._fh = (self.path / ROWS).open("ab")
            self._repair_tail()
        data = (json.dumps(row, separators=(",", ":")) + "\n").encode()
        self._fh.write(data)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done[row["cell_id"]] = row

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
            self._fh.write(b"\n")
        else:
            os.truncate(p, cut)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None


def _acquire(path: Path):
    """An open writer.lock holding an exclusive flock, or RunDirError naming who holds it."""
    path.mkdir(parents=True, exist_ok=True)
    fh = (path / LOCK).open("a+")
    if fcntl is not None:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise RunDirError(
                f"{str(path)!r} is being written by {holder}; a run has one writer at a time: wait for it "
                "to finish (or stop it), then --resume"
            ) from None
    fh.seek(0)
    fh.truncate()
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fh.write(f"pid {os.getpid()} on host {socket.gethostname()} since {since}\n")
    fh.flush()
    return fh
