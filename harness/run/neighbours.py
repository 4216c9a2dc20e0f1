"""Other attnbench runs measuring on this machine at the same time as this one.

Two runs on one machine share its cores, caches and memory bandwidth (and a GPU both use): each run's times
then say as much about the other as about its own kernels, and nothing in either run's cells shows why.
So every run that measures (`attnbench run`, and a pytest-benchmark session that times the plugin's grid:
harness.tools.pytest_plugin) says so in a folder all runs on the host read (FOLDER: one small JSON file per
run session, `ATTNBENCH_NEIGHBOURS_DIR` to put it elsewhere). A run starting beside another is told at
once (`alongside`), and a run another one measured beside, for part of it, is told when it ends
(`Announced.seen`): in its closing note, and in its `neighbours.jsonl`, whose sentence
(results.neighbours) the report's findings open with.

A session's file holds its pid and that process's start time (so that a pid reused by another process is
not taken for it), its run, and when it began; it is touched with each row the run writes and given an
end when the run closes. A run killed outright leaves a file without an end: its last touch is its end.
Files that ended more than a day ago are removed. Nothing here ever fails a run: a folder that cannot be
written to announces nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# RECORD: the runs it measured beside, a line each; LISTED: the runs a line names before it counts the rest
from attnbench.results.neighbours import LISTED, RECORD, at

ENV = "ATTNBENCH_NEIGHBOURS_DIR"
KEPT_S = 24 * 3600  # an ended session is kept this long, for the runs that overlapped it to find it
# a run looks at the others at most this often while it writes rows: each look reads every session the
# folder holds (a nightly machine's day of runs), and a run writes a row every few milliseconds at small N
LOOK_S = 2.0


def folder() -> Path:
    """Where every run on this host announces itself (ENV, else a folder in the system's temp dir)."""
    return Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / "attnbench-runs")


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name (state first), [] where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _started(pid: int) -> str:
    """The start time of process `pid` in clock ticks since boot (Linux), '' where it cannot be read."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""


def _alive(entry: dict[str, Any]) -> bool:
    """Whether the session's process still runs: it exists, is no zombie (killed, not yet reaped by its
    parent) and started when the session says (its pid not another process's since)."""
    pid = int(entry.get("pid", 0))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    fields = _stat(pid)
    if fields and fields[0] in ("Z", "X"):
        return False
    return not entry.get("ticks") or _started(pid) == entry["ticks"]


def _now() -> float:
    return time.time()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        entry["touched"] = path.stat().st_mtime
        return entry if isinstance(entry, dict) else None
    except (OSError, ValueError):
        return None


def _span(entry: dict[str, Any]) -> tuple[float, float]:
    """(began, ended) of a session: its end, else now if it is alive, else its last touch."""
    end = entry.get("ended")
    if end is None:
        end = _now() if _alive(entry) else float(entry["touched"])
    return float(entry.get("began", 0.0)), float(end)


def others(me: str = "") -> list[dict[str, Any]]:
    """The sessions announced on this host other than `me` (a file name) and this process's own, ended
    ones included; removes those that ended over KEPT_S ago."""
    found, own = [], (os.getpid(), _started(os.getpid()))
    try:
        paths = list(folder().glob("*.json"))
    except OSError:
        return []
    for path in paths:
        if path.name == me:
            continue
        entry = _read(path)
        if entry is None or (entry.get("pid"), entry.get("ticks")) == own:
            continue
        if _span(entry)[1] < _now() - KEPT_S:
            path.unlink(missing_ok=True)
            continue
        entry["file"] = path.name
        found.append(entry)
    return found


def described(entry: dict[str, Any]) -> str:
    """'runs/quick1 (pid 4242, since 10:02:11 UTC)' (with its date where that is not today's)."""
    since = at(entry.get("began", 0), _now())
    return f"{entry.get('out', '?')} (pid {entry.get('pid', '?')}, since {since})"


def measuring() -> list[dict[str, Any]]:
    """The other sessions measuring on this machine now: announced, not ended, their process alive. Only
    reads the folder (a dry run, which measures nothing, asks this and announces nothing)."""
    return [e for e in others() if e.get("ended") is None and _alive(e)]


def alongside() -> str | None:
    """The line a run starting now prints where other runs measure on this machine; None where none does."""
    live = measuring()
    if not live:
        return None
    runs = "; ".join(described(e) for e in live[:LISTED])
    runs += f"; and {len(live) - LISTED} more" if len(live) > LISTED else ""
    return (
        f"another attnbench run is measuring on this machine: {runs}. Runs at once share its cores and "
        "memory (and a GPU both use): each one's times are the other's too; measure one at a time."
    )


@dataclass
class Announced:
    """This run's session in folder(): made by announce(), touched with each row (touch), ended by end()."""

    path: Path | None
    began: float
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # file -> the other session, by file
    looked: float = 0.0  # when touch last looked

    def touch(self, now: bool = False) -> None:
        """Mark this session alive, and note each other session that overlapped it so far: at most every
        LOOK_S seconds (a row's touch), or `now` (the run's end)."""
        if not now and _now() - self.looked < LOOK_S:
            return
        self.looked = _now()
        if self.path is not None:
            try:
                os.utime(self.path)
            except OSError:
                pass
        for entry in others(self.path.name if self.path else ""):
            began, ended = _span(entry)
            if began <= _now() and ended >= self.began:
                self.seen[entry["file"]] = entry

    def end(self, run_dir: Path | None) -> list[str]:
        """Give this session its end, record the sessions that overlapped it in run_dir's RECORD (a run's;
        a pytest session has none), and the closing note that names them (nothing where none did)."""
        self.touch(now=True)
        if self.path is not None:
            try:
                entry = json.loads(self.path.read_text(encoding="utf-8"))
                self.path.write_text(json.dumps({**entry, "ended": _now()}), encoding="utf-8")
            except (OSError, ValueError):
                pass
        if not self.seen:
            return []
        if run_dir is not None:
            self._record(run_dir)
        seen = list(self.seen.values())
        runs = "; ".join(described(e) for e in seen[:LISTED])
        if len(seen) > LISTED:  # the rest counted, and where each is recorded (a run's RECORD)
            runs += f"; and {len(seen) - LISTED} more" + (f", each in {run_dir / RECORD}" if run_dir else "")
        again = " (`attnbench run --resume --redo-drift` remeasures those that drifted)" if run_dir else ""
        return [
            f"another attnbench run measured on this machine during this one: {runs}. The cells measured "
            f"meanwhile shared its cores: measure them again alone{again}."
        ]

    def _record(self, run_dir: Path) -> None:
        """The sessions that overlapped this one, a line each in run_dir's RECORD."""
        lines = []
        for entry in self.seen.values():
            began, ended = _span(entry)
            kept = {k: entry.get(k) for k in ("out", "pid", "host")}
            lines.append(json.dumps({**kept, "from": max(began, self.began), "to": min(ended, _now())}))
        try:
            with open(run_dir / RECORD, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
        except OSError:
            pass


def announce(out: str | Path) -> Announced:
    """This run's session (into the run folder `out`, or what a pytest session says it is), written to
    folder(); one that cannot be written announces nothing."""
    began = _now()
    pid = os.getpid()
    entry = {"pid": pid, "ticks": _started(pid), "out": str(out), "began": began}
    entry["host"] = os.uname().nodename if hasattr(os, "uname") else ""
    path = folder() / f"{pid}-{entry['ticks'] or int(began)}.json"
    try:
        folder().mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entry), encoding="utf-8")
    except OSError:
        return Announced(None, began)
    return Announced(path, began)
