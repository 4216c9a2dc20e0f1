"""The runs a path given to `history add` holds (results.history): the run it is, or every run below the
folder it is, each readable, and the folders below it that hold no run. A run below a folder that is a repro
(meta.json `repro_of`: `attnbench repro`'s line made it, by default into runs/, which the nightly's `history
add runs/` reads) is left out of the series and named; given by its own name, it is added."""

from __future__ import annotations

from pathlib import Path

from .formulas import command
from .store import META, ROWS, SHARDS, RunDirError, is_unstarted, not_there, read_meta


def find_runs(path: str | Path) -> list[Path]:
    """The run `path` is, or every run below the folder `path` (a run set, a folder of runs, nested) but a
    repro (repro_of); a RunDirError in one line when it is neither, or when a run below it cannot be read (a
    damaged meta.json, rows without their meta.json): nothing is added then, and the line names that run."""
    return runs_and_others(path)[0]


def runs_and_others(path: str | Path) -> tuple[list[Path], list[Path], list[tuple[Path, str]]]:
    """find_runs, the folders below `path` that hold no run (not a run's start's leftovers, which
    unstarted_below names), and the repros below it with the run_id each measures a cell of again: `add`
    says it left them out."""
    p = Path(path)
    if (p / META).is_file():
        read_meta(p)  # a damaged meta.json or another schema version: one line, before anything is written
        return [p], [], []  # a run given by its own name is added, a repro too
    if not p.is_dir():
        raise not_there(path)
    found, lost, other = _below(p)
    whole = f"nothing was added: put it right, move it out of {p}, or give the runs to add one by one"
    if (p / ROWS).is_file() or lost:
        where = p if (p / ROWS).is_file() else lost[0]
        raise RunDirError(
            f"{where} holds {ROWS} but no {META}, without which its rows cannot be read; {whole}"
        )
    if not found:
        read_meta(p)  # says what the folder is (stopped while starting, or no run at all)
    repros = []
    for run in found:
        try:
            repro = read_meta(run).get("repro_of")
        except RunDirError as exc:
            raise RunDirError(f"{exc}; {whole}") from None
        if repro:
            repros.append((run, str(repro)))
    left = {run for run, _ in repros}
    return [run for run in found if run not in left], other, repros


def repro_note(run: Path, of: str) -> str:
    """`add`'s line on a repro below a folder given, left out."""
    keep = command("attnbench", "history", "add", run)
    return (
        f"left out: {run} is a repro of run {of} (its meta.json's repro_of), not a run of the series; add it "
        f"by name to keep it (`{keep}`)"
    )


def _below(p: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """Below the folder `p`, by name: the runs, the folders that hold rows but no meta.json (a run that lost
    it), and the highest folders with neither anywhere below them that hold anything (an empty folder holds
    nothing to say; a run's start's leftovers are unstarted_below's)."""
    runs: list[Path] = []
    lost: list[Path] = []
    other: list[Path] = []
    try:
        children = sorted(c for c in p.iterdir() if c.is_dir())
    except OSError:
        return runs, lost, other
    for c in children:
        if (c / META).is_file():
            runs.append(c)
        elif (c / ROWS).is_file() or (c / SHARDS).is_dir():
            lost.append(c)
        else:
            r, lo, o = _below(c)
            if r or lo:
                runs, lost, other = runs + r, lost + lo, other + o
            elif not is_unstarted(c):  # an empty folder holds nothing; a start's leftovers are named apart
                other.append(c)
    return runs, lost, other
