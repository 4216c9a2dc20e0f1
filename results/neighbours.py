"""The other attnbench runs a run measured beside on its machine, as the run recorded them when it ended
(harness.run.neighbours: one line per such run in RECORD, its folder, pid, host and the overlap, from and
to, in seconds since the epoch), and the sentence a report opens with on them."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RECORD = "neighbours.jsonl"
LISTED = 3  # the runs a sentence names; past them it counts the rest and points to RECORD, which has each


def read(run_dir: str | Path) -> list[dict[str, Any]]:
    """The runs recorded in run_dir's RECORD (none where there is none; a torn line is skipped)."""
    try:
        lines = (Path(run_dir) / RECORD).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def at(t: Any, beside: Any = None) -> str:
    """A moment t (seconds since the epoch) as every line on the neighbours says it: '2026-12-07 10:02:11
    UTC', or '10:02:11 UTC' where `beside` (a moment the line gives already: now, or the overlap's start)
    falls on the same UTC day; '?' for no time."""
    moment, near = _moment(t), _moment(beside)
    if moment is None:
        return "?"
    same_day = near is not None and near.date() == moment.date()
    return moment.strftime("%H:%M:%S UTC" if same_day else "%Y-%m-%d %H:%M:%S UTC")


def _overlap(entry: dict[str, Any]) -> str:
    """'2026-12-07 10:02:11 UTC to 10:05:40 UTC': the end's date said only where it is another day's."""
    return f"{at(entry.get('from'))} to {at(entry.get('to'), beside=entry.get('from'))}"


def _moment(t: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(t), timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def sentence(run_dir: str | Path, run: str | None = None) -> str | None:
    """'Another attnbench run measured on this machine during this run: runs/nightly (pid 4242, from ...
    to ...); the cells measured then shared its cores.' (`run`: the run's id, where a report has several);
    None where the run recorded none. Past LISTED runs it names the first LISTED, counts the others and
    points to the RECORD that has them all, so that the findings after it are not buried under the list."""
    seen = read(run_dir)
    if not seen:
        return None
    each = "; ".join(f"{e.get('out', '?')} (pid {e.get('pid', '?')}, {_overlap(e)})" for e in seen[:LISTED])
    if len(seen) > LISTED:
        each += f"; and {len(seen) - LISTED} more, each with its pid and times in {Path(run_dir) / RECORD}"
    who = "Another attnbench run" if len(seen) == 1 else f"{len(seen)} other attnbench runs"
    during = "this run" if run is None else f"run {run}"
    them = "it" if len(seen) == 1 else "them"
    return (
        f"{who} measured on this machine during {during}: {each}. The cells measured meanwhile shared its "
        f"cores and memory with {them}."
    )
