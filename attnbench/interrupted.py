"""What a run stopped by Ctrl-C says to a Python caller: attnbench.run (and bench) raise RunInterrupted once
the run directory is closed with every finished row kept (harness.run.runner), so that a script's loop of runs
stops there too, as at any other Ctrl-C. The command line says the same in its own words (cli_run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped attnbench.run (or bench) once its directory was there: `run` is the Run
    (interrupted=True), and the message says how to finish it, with the API's keywords or, for a command
    (`flags`: `attnbench bench`), with `attnbench run`'s flags. `finish`: the call that finishes it where
    it is not run's (bench's, which answers too); `stage`: what was stopped where it was not the sweep
    (bench's gate at N = 100 and 300, after every cell's row was written)."""

    def __init__(self, run: Any, *, flags: bool = False, finish: str | None = None, stage: str = "") -> None:
        from attnbench.results.formulas import command
        from attnbench.results.store import is_run_dir

        self.run = run
        where = run.path
        if not is_run_dir(where):
            again = "run the same command again" if flags else "call attnbench.run again as before"
            said = (
                "interrupted while starting, before the run's meta.json was written: nothing was measured; "
                f"{again} (it reuses {where})"
            )
        else:
            finish = finish or (command("attnbench", "run", "--resume", "--out", where) if flags else (
                f"attnbench.run(out={str(where)!r}, resume=True)"
            ))  # fmt: skip
            kept = kept_text(where, run.counts)
            said = f"interrupted: finished rows are kept in {where} ({kept}); finish with: {finish}"
            if stage:  # after the sweep: the run is whole, and its answer is what the call gives
                said = f"interrupted during {stage}: rows kept in {where} ({kept}); answer with: {finish}"
        super().__init__(said)


def kept_text(path: str | Path, counts: dict[str, int], none: str = "no cell finished") -> str:
    """What a stopped run keeps, in words: its cells by status (`counts`; `none` where there are none) and,
    with rounds, the visits of cells not finished yet (results.visits.unfinished: a resume makes only the
    visits missing): '3 ok; 7 visits of 4 cells not finished'."""
    from attnbench.results.visits import unfinished_text

    said = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or none
    pending = unfinished_text(path)
    return f"{said}; {pending}" if pending else said


def bench_interrupted(run: Any, fn: Any, name: str | None, flags: bool, stage: str = "") -> RunInterrupted:
    """The RunInterrupted of attnbench.bench (or `attnbench bench`, `flags`): finished, and answered, by
    bench's own resume, not run's, which would leave the run without its gate at N = 100 and 300 and its
    answer."""
    from dataclasses import replace

    from attnbench.results.formulas import command

    where = run.path
    if flags:
        again = command("attnbench", "bench", fn, "--resume", "--out", where)
    else:
        called = fn if isinstance(fn, str) else getattr(fn, "__name__", "fn")
        spelled = repr(called) if isinstance(fn, str) else called if called.isidentifier() else "fn"
        named = f", name={name!r}" if name else ""
        again = f"attnbench.bench({spelled}, out={str(where)!r}, resume=True{named})"
    return RunInterrupted(replace(run, interrupted=True), flags=flags, finish=again, stage=stage)
