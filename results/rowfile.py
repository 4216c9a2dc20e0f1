"""How a JSONL file of records (rows.jsonl, a shard, resumes.jsonl) is read: every complete line, and the
lines a reader skips (a torn write, a corrupt line) with what is wrong with each. Within `read_once`, each
file is read and parsed once however many readers ask (a report's digest of a run's rows and its load)."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

Scanned = tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]  # (records, skipped), by line number

# within read_once: {(file, rows): (its lines, scan's records and skipped lines)}; None outside it
_READ: ContextVar[dict[tuple[Path, bool], tuple[list[bytes], Scanned]] | None] = ContextVar(
    "attnbench_read_once", default=None
)


class RowWarning(UserWarning):
    """A line of rows.jsonl (or of a shard) that is not a row (a torn write, or corrupt data) was skipped."""


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """Each file read inside is read and parsed once: the readers inside see the same lines, even as a
    writer appends to it (the records are shared: a reader inside must not change them)."""
    token = _READ.set({})
    try:
        yield
    finally:
        _READ.reset(token)


def read_lines(p: Path, *, rows: bool = True) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every complete line of a JSONL file; a torn or corrupt line is skipped
    with a warning naming it (with rows=True, so is a record without a cell_id)."""
    out, skipped = scan(p, rows=rows)
    for _lineno, said in skipped:
        warnings.warn(said, RowWarning, 3)
    return out


def scan(p: Path, *, rows: bool = True) -> Scanned:
    """read_lines' records, and (line number, what is wrong) of every line skipped: one that is
    not JSON is a torn write only where it is the last line (a kill mid-write); before other rows, it is
    corrupt."""
    return _read(p, rows)[1]


def _read(p: Path, rows: bool) -> tuple[list[bytes], Scanned]:
    """The lines of `p` and their scan, read now or, within read_once, where they were first."""
    memo = _READ.get()
    if memo is not None and (p, rows) in memo:
        return memo[p, rows]
    lines: list[bytes] = []
    if p.is_file():
        with p.open("rb") as fh:
            lines = fh.readlines()
    read = (lines, _scan_lines(p, lines, rows=rows))
    if memo is not None:
        memo[p, rows] = read
    return read


def _scan_lines(p: Path, lines: list[bytes], *, rows: bool = True) -> Scanned:
    """scan of the lines of `p` already read."""
    last = max((i for i, raw in enumerate(lines, 1) if raw.strip()), default=0)
    out, skipped = [], []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            why = "torn write?" if lineno == last else "corrupt: not the last line, so no torn write"
            skipped.append((lineno, f"{p}:{lineno}: skipped an unreadable row ({why})"))
            continue
        if isinstance(rec, dict) and (not rows or "cell_id" in rec):
            out.append((lineno, rec))
        else:  # valid JSON but not a result row: corrupt, or not written by attnbench
            skipped.append((lineno, f"{p}:{lineno}: skipped a line that is not a result row (no cell_id)"))
    return out, skipped


def readable_bytes(p: Path) -> bytes:
    """A JSONL file's bytes less the lines a reader skips (scan): what its rows are, whatever else a
    line in it holds."""
    lines, (_, skipped) = _read(p, True)  # read once: the lines _scan_lines numbers
    drop = {lineno for lineno, _said in skipped}
    return b"".join(raw for i, raw in enumerate(lines, 1) if i not in drop)
