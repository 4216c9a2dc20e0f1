"""What a report was drawn from: each run's rows as results.history.rows_digest sums them (the digest
`history add` keeps), recorded in the report's folder (RECORD) when `attnbench report` writes it, so that
`attnbench history publish` links a report only while its run still holds those rows: a run resumed or
measured again since has a report that says what it no longer is ('Unfinished: 3 of 6 planned cells')."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.results.history import rows_digest

RECORD = "rendered-from.json"  # beside README.md and report.html; no page links it
FORMAT = "attnbench-rendered-from"


def digests(run_dirs: list[str | Path]) -> tuple[str, ...]:
    """Each run's rows_digest; report's prepare takes it within results.rowfile.read_once, of the very
    lines it loads, so that rows added while it loads are in neither."""
    return tuple(rows_digest(d) for d in run_dirs)


def write(out: Path, run_ids: list[str], run_dirs: tuple[str, ...], sums: tuple[str, ...]) -> None:
    """The record of a report written into `out`: {run_id: its folder as given, its rows' digest}, and the
    files it wrote there (the next report into the same folder removes those it does not write again)."""
    drawn = zip(run_ids, run_dirs, sums, strict=False)
    runs = {str(rid): {"path": str(d), "rows_sha256": s} for rid, d, s in drawn}
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    text = json.dumps({"format": FORMAT, "runs": runs, "files": files}, indent=1, sort_keys=True)
    (out / RECORD).write_text(text + "\n", encoding="utf-8")


def files(folder: str | Path) -> set[str]:
    """The files the report in `folder` wrote, as its record lists them (none where it has no record)."""
    try:
        listed = json.loads((Path(folder) / RECORD).read_text(encoding="utf-8")).get("files") or []
    except (OSError, ValueError, AttributeError):
        return set()
    return {str(name) for name in listed if "/" not in str(name) and str(name) not in ("", ".", "..")}


def holds_other_files(folder: str | Path) -> list[str]:
    """The names in `folder` (its hidden ones aside: a .gitkeep) where it holds files and no report attnbench
    wrote there (its RECORD, or a README.md or report.html of an attnbench title: a report from before the
    record), sorted; [] for a folder that is missing, empty, or an earlier report's (whose files beside it,
    the user's, stay: a report is rendered again into its own folder)."""
    from .page import PAGE_FILES, written_by_attnbench

    path = Path(folder)
    if not path.is_dir():
        return []
    if (path / RECORD).is_file() or any(written_by_attnbench(path / name) for name in PAGE_FILES["report"]):
        return []
    return sorted(p.name for p in path.iterdir() if not p.name.startswith("."))


def remove_left(folder: str | Path, before: set[str]) -> None:
    """Remove from `folder` the files an earlier report there wrote (`before`: files() read before this
    one was written) that this one did not write again: a figure of a dtype the runs no longer have would
    otherwise stay beside the new page. A file it never wrote (the user's) is kept."""
    for name in before - files(folder):
        (Path(folder) / name).unlink(missing_ok=True)


def stale(page: Path, run: str | Path, run_id: Any) -> bool:
    """Whether the report `page` was drawn from other rows than the run folder `run` holds now: its folder's
    record names run_id with another digest. False where that cannot be told: no record (a report of an
    attnbench before it, a page written by hand), one without this run, or a run folder that is gone."""
    try:
        record = json.loads((Path(page).parent / RECORD).read_text(encoding="utf-8"))
        drawn = record["runs"][str(run_id)]["rows_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return Path(run).is_dir() and drawn != rows_digest(run)


@dataclass(frozen=True)
class Stale:
    """A run whose report publish found and did not link, the report being drawn from other rows."""

    run_id: str
    run: str  # the run's folder, as the store gives it
    report: Path  # the report's page

    @property
    def command(self) -> str:
        """The command that draws the report again, into the folder publish found it in."""
        return f"attnbench report {shlex.quote(self.run)} --out {shlex.quote(str(self.report.parent))}"


def stale_line(found: list[Stale]) -> str:
    """publish's one line on the reports it left unlinked, with the command that renders each again."""
    said = "; ".join(f"{s.run_id} (`{s.command}`)" for s in found)
    were = "a report was" if len(found) == 1 else f"{len(found)} reports were"
    return (
        f"not linked: {were} drawn from other rows than the run holds now (resumed or measured again since); "
        f"render again and publish: {said}"
    )
