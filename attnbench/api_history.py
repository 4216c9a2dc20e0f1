"""The Python API's history: attnbench.history() (the store, or given runs, as a DataFrame) and
attnbench.steps() (the steps `attnbench history check` prints, as a DataFrame); results.history and
results.steps do the work."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from attnbench.api import PathLike, _is_frame, _run_paths, as_path, in_keywords
from attnbench.api_keywords import given_as


def history(*runs: PathLike | Sequence[PathLike], store: PathLike | None = None, machine: str | None = None):
    """The history store (`attnbench history`) as one pandas DataFrame: a row per cell per run, with the run's
    time, commit, versions and path beside it, ordered by machine, cell and time. With runs given (run
    directories, run sets, folders of runs) and `store`, the runs are recorded into that store first, as
    `attnbench history add` does (a note on an unfinished run, or an older copy, is a warning); with runs and
    no `store`, the frame is of those runs alone, and nothing is written. Without runs, `store` is read
    (default: runs/history.sqlite, from the current directory). `machine` keeps one machine's cells (its
    name, or a part of it that names one machine)."""
    import warnings

    from attnbench.results import history as store_

    paths = _run_paths(runs, "history: each run")
    _machine_text(machine, "history")
    if paths and store is None:
        with in_keywords():
            return store_.frame_of(paths, machine=machine)
    store = as_path(store_.DEFAULT_STORE if store is None else store, "store=")
    with in_keywords():
        if paths:
            for note in (n for a in store_.add(store, paths) for n in a.notes):
                warnings.warn(note, UserWarning, stacklevel=2)
        return store_.frame(store, machine=machine)


def steps(frame: Any = None, *, store: PathLike = "runs/history.sqlite", machine: str | None = None):
    """The steps in the history store's series (`attnbench history check`) as a pandas DataFrame, a row per
    step: its series, size (`change`, +0.10 is 10% slower after it) with its 95% interval, the first run
    after it and the runs it may be at, the cells of its variant that took it together, the machine's other
    variants' move across it and the step beyond it (`others`, `beyond_others`), what the gate judges
    (`gated`, with `gated_low` and `gated_high`: the cells' step as one where cells took it together) with
    the judge's p and, for a series' latest step, that p Holm-adjusted over its machine's series that could
    have been judged (`p`, `p_holm`: the gate fails a step below 0.05), the commits on both sides and what
    else changed (`changed`), what changed a run or so from it (`nearby`), the calibration, the one line
    `check` prints and the command that measures the cell again (`repro`). `frame` is attnbench.history()'s
    (or a part of it: the other variants, and the series Holm's adjustment counts, are then those in the
    part); without one, the store's (`machine` keeps one machine's cells). Needs ruptures: pip install
    'attnbench[history]'."""
    from attnbench.harness.run.rerun import repro_text
    from attnbench.results import history as store_
    from attnbench.results import steps as steps_
    from attnbench.results import steps_text

    if frame is not None and not _is_frame(frame):
        said = f"store={frame!r}" if isinstance(frame, (str, os.PathLike)) else "store=PATH"
        raise TypeError(
            f"steps: frame is a DataFrame of attnbench.history(), not {given_as(frame)}; a history store is "
            f"given as steps({said})"
        )
    if frame is not None:
        _history_frame(frame)
    _machine_text(machine, "steps")
    store = as_path(store, "store=")
    with in_keywords():
        df = store_.frame(store, machine=machine) if frame is None else frame
        found = steps_.find(df)
    out = steps_text.as_frame(found)
    out["created"] = store_.as_times(out["created"])  # the first run after it, as the history frame's
    out["repro"] = [repro_text(s.after.get("path"), s.cell_id) for s in found]
    return out


# what the steps are read from: a history frame's series (machine, cell), their runs' order and statuses
_STEP_COLUMNS = ("machine", "cell_id", "variant", "run_id", "created", "status", "time_ms_median")


def _history_frame(frame: Any) -> None:
    """ValueError where `frame` lacks the columns attnbench.history()'s frame gives the steps (the frame of
    attnbench.load() has no run times, an empty DataFrame no columns at all)."""
    lacks = [c for c in _STEP_COLUMNS if c not in frame.columns]
    if lacks:
        kind = "attnbench.load()'s frame, which" if "samples_ms" in frame.columns else "a frame that"
        raise ValueError(
            f"steps: frame is attnbench.history()'s DataFrame (a row per cell per run), not {kind} lacks "
            f"{', '.join(lacks)}; give attnbench.history(RUN...) of the runs, or steps(store=PATH)"
        )


def _machine_text(machine: Any, name: str) -> None:
    """TypeError where `machine` is given and is not text (a machine's name, or a part of one)."""
    if machine is not None and not isinstance(machine, str):
        raise TypeError(
            f"{name}: machine= takes a machine's name or a part of one (str, such as 'H100'), not "
            f"{given_as(machine)}"
        )
