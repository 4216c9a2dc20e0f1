"""Whether a run's append-only files still hold what attnbench wrote there, and nothing else.

A run's writer (store.RunWriter for rows.jsonl, visits.VisitLog for visits.jsonl) knows every byte it
appends: `Tracked` keeps the file's size and a running sha256 of it, checks the size before each append and
the hash when it closes, and keeps the state in the run's written.json, so that a later reader can check it
too (`changed_files`). What else changed a file (a plug-in appending forged rows, an editor, a sync tool) is
recorded there under `changed`, said when the run ends, and read by results.load, which warns
(ChangedWarning), and by the report, which says it first. A process that runs as the same user can rewrite
every file of a run, written.json among them: this keeps a changed run from reading as a clean one, no more.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .formulas import counted
from .whole import write_whole

WRITTEN = "written.json"  # {"files": {name: state}, "changed": [{"file", "at", "what"}]}


class ChangedWarning(UserWarning):
    """A run file holds bytes attnbench did not write, or its rows.jsonl repeats cells unexplained."""


def _read(run: Path) -> dict[str, Any]:
    try:
        got = json.loads((run / WRITTEN).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {"unreadable": True}
    return got if isinstance(got, dict) else {"unreadable": True}


def _save(run: Path, record: dict[str, Any]) -> None:
    """written.json replaced whole (results.whole.write_whole); OSError when it cannot be written, the old
    one left as it was."""
    write_whole(run / WRITTEN, json.dumps(record, indent=1) + "\n")


def _state(size: int, digest: Any) -> dict[str, Any]:
    return {"size": size, "sha256": digest.hexdigest()}


def _matches(data: bytes, state: dict[str, Any]) -> bool:
    """Whether `data` is the file a writer recorded: the state after its last append, or the one before it
    (that append failed, or a kill came before it was written), or that with a torn last line (a kill in the
    middle of it: no newline, which the next writer cuts off and results.store skips)."""
    if len(data) == state.get("size") and hashlib.sha256(data).hexdigest() == state.get("sha256"):
        return True
    before = state.get("before")
    if not isinstance(before, dict) or not isinstance(before.get("size"), int):
        return False
    head, tail = data[: before["size"]], data[before["size"] :]
    return hashlib.sha256(head).hexdigest() == before.get("sha256") and b"\n" not in tail


def _what(name: str, data: bytes, size: int, digest: Any) -> str:
    """How `data` differs from the `size` bytes hashing to `digest` that attnbench wrote, in words."""
    if len(data) > size and hashlib.sha256(data[:size]).hexdigest() == digest.hexdigest():
        lines = [ln for ln in data[size:].split(b"\n") if ln.strip()]
        cells = []
        for ln in lines:
            try:
                cells.append(str(json.loads(ln).get("cell_id")))
            except (ValueError, AttributeError):
                continue
        named = f" (cells {', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''})" if cells else ""
        were = "was" if len(lines) == 1 else "were"
        return (
            f"{name}: {counted(len(lines), 'line')} {were} appended by something other than attnbench{named}"
        )
    if len(data) < size:
        return f"{name} was cut from {size} to {len(data)} bytes by something other than attnbench"
    return f"{name} was rewritten by something other than attnbench ({size} bytes written, {len(data)} found)"


class Tracked:
    """One append-only file of a run, as this process has written it (its size and a running sha256)."""

    def __init__(self, run: str | Path, name: str) -> None:
        self.run, self.name = Path(run), name
        self.changes: list[str] = []
        data = self._bytes()
        prior = _read(self.run).get("files", {}).get(name)
        self.size, self.hash = len(data), hashlib.sha256(data)
        if isinstance(prior, dict) and not _matches(data, prior):
            self._note(f"{name} differs from what attnbench last wrote there, since that session ended")
            self._save_state(None)

    def _bytes(self) -> bytes:
        p = self.run / self.name
        return p.read_bytes() if p.is_file() else b""

    def _note(self, what: str) -> None:
        self.changes.append(what)
        record = _read(self.run)
        at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record.setdefault("changed", []).append({"file": self.name, "at": at, "what": what})
        _save(self.run, record)

    def _recheck(self, fd: int | None = None) -> None:
        """Compare the file with what was written (its size, cheap; its hash too with fd None); a difference
        is noted, and the file as found is what later appends follow on from."""
        size = os.fstat(fd).st_size if fd is not None else None
        if size == self.size:
            return
        data = self._bytes()
        if len(data) == self.size and hashlib.sha256(data).digest() == self.hash.digest():
            return
        self._note(_what(self.name, data, self.size, self.hash))
        self.size, self.hash = len(data), hashlib.sha256(data)
        self._save_state(None)

    def rebase(self) -> None:
        """Take the file as it is now: the writer itself changed it (a torn last line cut off)."""
        data = self._bytes()
        self.size, self.hash = len(data), hashlib.sha256(data)

    def before(self, fd: int, data: bytes) -> None:
        """Called before `data` is appended to the open file `fd`: the file is checked, and written.json
        records the state it will have (and the one it has, should the append not happen)."""
        self._recheck(fd)
        self._save_state(data)

    def _save_state(self, data: bytes | None) -> None:
        after = self.hash.copy()
        if data:
            after.update(data)
        state = {**_state(self.size + len(data or b""), after), "before": _state(self.size, self.hash)}
        record = _read(self.run)
        record.setdefault("files", {})[self.name] = state
        _save(self.run, record)

    def after(self, data: bytes) -> None:
        """Called once `data` was appended."""
        self.size += len(data)
        self.hash.update(data)

    def close(self) -> None:
        """The last check: the file's whole content, against every byte written."""
        self._recheck()


def changed_files(run: str | Path) -> list[str]:
    """What the run's written.json recorded as changed by something other than attnbench, and any file that
    differs now from what attnbench last wrote into it; [] for a clean run, or one older than written.json."""
    run = Path(run)
    record = _read(run)
    if record.get("unreadable"):
        return [f"{WRITTEN} is unreadable, so whether its files hold only what attnbench wrote is not known"]
    out = [str(c.get("what")) for c in record.get("changed", []) if isinstance(c, dict)]
    for name, state in (record.get("files") or {}).items():
        p = run / str(name)
        data = p.read_bytes() if p.is_file() else b""
        if isinstance(state, dict) and not _matches(data, state):
            out.append(f"{name} was changed after attnbench last wrote it")
    return out


def repeated(rows: list[dict[str, Any]], resumes: list[dict[str, Any]]) -> list[str]:
    """The cell_ids rows.jsonl holds more often than the run explains: a cell has one row, and one more per
    `--resume --redo-drift` (resumes.jsonl records it; a record made before it did may have been one)."""
    redo = sum(1 for r in resumes if r.get("redo_drift", True))
    counts = Counter(str(r.get("cell_id")) for r in rows)
    return [cid for cid, n in counts.items() if n > 1 + redo]


def sentences(run: str | Path, rows: list[dict[str, Any]], resumes: list[dict[str, Any]]) -> list[str]:
    """Everything changed_files and repeated find in one run, one sentence each."""
    out = [f"{run}: {what}" for what in changed_files(run)]
    cells = repeated(rows, resumes)
    if cells:
        n = counted(len(cells), "cell")
        out.append(
            f"{run}: rows.jsonl repeats {n} that no `--resume --redo-drift` measured again "
            f"({', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''}): the last row of each is read"
        )
    return out
