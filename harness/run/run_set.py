"""`attnbench run --repeat K`: one sweep run K times, one run after another, into OUT/run1 .. OUT/runK: a run
set (results.runset), which `attnbench compare` judges by the spread between its runs.

Each run is a whole run (its own worker processes, calibration and numerics probe), as a user re-running
the command makes it: the variance from one run to the next, which no run's own samples hold, is what
the set is for. OUT/runset.json records K, the sweep and the variant files, written once everything was
checked and before the first run starts, so that `--resume --out OUT` finishes the run that was stopped
and makes those not begun, whatever the moment of the stop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnbench.harness.run.runner import RunSummary, _with_value, run
from attnbench.harness.sweep.spec import SweepSpec
from attnbench.results.store import RunDirError, is_run_dir, is_unstarted

SET_FILE = "runset.json"
MIN_REPEAT = 2  # a set of one run is a run


def member(out: str | Path, j: int) -> Path:
    """The j-th run of the set in `out` (from 0)."""
    return Path(out) / f"run{j + 1}"


def is_run_set(out: str | Path | None) -> bool:
    """Whether `out` holds a run set started by run_set (its runset.json)."""
    return out is not None and (Path(out) / SET_FILE).is_file()


def check_repeat(repeat: int, name: Callable[[str], str]) -> None:
    """ValueError (one line) for a repeat count that makes no set."""
    if repeat < MIN_REPEAT:
        raise ValueError(
            f"{_with_value(name('repeat'), str(repeat))}: a run set needs {MIN_REPEAT} or more runs "
            "(3 or more for compare to judge by their spread)"
        )


def read_set(out: str | Path) -> dict[str, Any]:
    """The set's runset.json; RunDirError (one line) when it is missing or damaged."""
    path = Path(out) / SET_FILE
    try:
        record = json.loads(path.read_text())
        repeat, sweep = int(record["repeat"]), record["sweep"]
        files = [str(f) for f in record.get("variant_files", [])]
    except FileNotFoundError:
        raise RunDirError(f"{out}: not a run set ({SET_FILE} is missing)") from None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise RunDirError(f"{path} is damaged: {exc}") from None
    return {"repeat": repeat, "sweep": sweep, "variant_files": files}


def run_set(
    sweep: SweepSpec | None,
    out: str | Path,
    repeat: int | None,
    *,
    resume: bool = False,
    variant_files: list[str] | None = None,
    on_run: Callable[[int, int, Path], None] | None = None,
    **run_kw: Any,
) -> list[RunSummary]:
    """Make (or, resume: finish) the set in `out`; the summaries of the runs this call went through, the
    last one interrupted if the set was. A new set is checked whole (harness.run.runner.run's dry run on its
    first run: the sweep, the variant files, `out` empty) before runset.json is written. `on_run(j, K,
    path)` is called before each run (the CLI prints which one). run_kw go to every harness.run.runner.run
    (progress, executor, force_resume, redo_drift, ...)."""
    out = Path(out)
    if resume:
        record = read_set(out)
        repeat = record["repeat"]
        sweep = SweepSpec.from_meta(record["sweep"], out / SET_FILE)
        variant_files = record["variant_files"]
    else:
        if sweep is None or repeat is None:
            raise ValueError("a new run set needs a sweep and a repeat count")
        # everything a run checks, before anything is written: the set's folder must be free, as a run's
        run(sweep, out, variant_files=variant_files, dry_run=True, **_new_run_kw(run_kw))
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "repeat": repeat,
            "sweep": sweep.to_dict(),
            "variant_files": [str(Path(f).resolve()) for f in variant_files or []],
        }
        (out / SET_FILE).write_text(json.dumps(record, indent=1) + "\n")
        variant_files = record["variant_files"]
    summaries = []
    for j in range(repeat):
        path = member(out, j)
        if on_run is not None:
            on_run(j, repeat, path)
        if resume and is_run_dir(path):
            summary = run(None, path, resume=True, **run_kw)
        else:  # a run not begun (or stopped before its meta.json: its folder is reused)
            if path.exists() and not is_unstarted(path):
                raise RunDirError(f"{path}: neither a run nor empty; move it away and resume the set")
            summary = run(sweep, path, variant_files=variant_files, **_new_run_kw(run_kw))
        summaries.append(summary)
        if summary.interrupted:
            break
    return summaries


def _new_run_kw(run_kw: dict[str, Any]) -> dict[str, Any]:
    """run_kw without what only a resume takes (a set's resume makes its runs not begun as new ones)."""
    return {k: v for k, v in run_kw.items() if k not in ("force_resume", "redo_drift")}
