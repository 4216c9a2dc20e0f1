"""What a run stopped by Ctrl-C says to a Python caller: attnbench.run (and bench) raise RunInterrupted once
the run directory is closed with every finished row kept (harness.run.runner), so that a script's loop of runs
stops there too, as at any other Ctrl-C. The command line says the same in its own words (cli_run)."""

from __future__ import annotations

from typing import Any


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped attnbench.run (or bench) once its directory was there: `run` is the Run
    (interrupted=True), and the message says how to finish it, with the API's keywords or, for a command
    (`flags`: `attnbench bench`), with `attnbench run`'s flags."""

    def __init__(self, run: Any, *, flags: bool = False) -> None:
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
            finish = f"attnbench run --resume --out {where}" if flags else (
                f"attnbench.run(out={str(where)!r}, resume=True)"
            )  # fmt: skip
            counts = ", ".join(f"{n} {s}" for s, n in sorted(run.counts.items())) or "no cells run"
            said = f"interrupted: finished rows are kept in {where} ({counts}); finish with: {finish}"
        super().__init__(said)
