"""What an executor is given (a Plan) and what it must do (the Executor protocol)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from attnbench.harness.run.plan import VisitPlan
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.workers.cellrunner import CellRunner

OnRow = Callable[[dict[str, Any]], None]
OnDevice = Callable[[dict[str, Any]], None]
Say = Callable[[str], None]  # a line for the person watching (the runner's progress.message)


@dataclass
class Plan:
    """The cells left to measure, in the order the runner wants them, and what a worker needs."""

    sweep: SweepSpec
    cells: list[CellSpec]
    config: dict[str, Any]  # worker configuration: threads, env, variant files, cpu affinity, log path
    run_dir: Path
    done: list[dict[str, Any]] = field(default_factory=list)  # rows already written (skip-ahead seeds)
    # the runner's own CellRunner, already fingerprinted and calibrated on this machine's devices; an
    # executor that measures here (local) reuses it instead of starting another worker process
    local: CellRunner | None = None
    # where_keys of the devices meta.json describes already: an executor describes (and calibrates) only
    # the devices it reaches that are not among them
    described: set[str] = field(default_factory=set)
    # the order of every visit of the cells (harness.run.plan), which an ordered executor carries out; one
    # that measures in parallel measures `cells`, in this order, once each
    order: VisitPlan | None = None


class CellsLeft(RuntimeError):
    """An executor that can measure no more of the plan's cells (no worker of its pool could start, every
    Ray actor of a device gone): the runner ends the run incomplete, with this message as a note and the
    cells left for a resume, as an array task cancelled on Slurm leaves them."""


class Executor(Protocol):
    name: str
    notes: list[str]  # what the command tells the user once the run ends (lost tasks, duplicates), in order
    running: list[str]  # jobs left queued or running on a scheduler when run() was stopped (Ctrl-C): Slurm's
    ordered: bool  # carries out plan.order (one worker, in order); False: cells in parallel, one visit each

    def check(self, sweep: SweepSpec) -> None:
        """ValueError (one line) when this executor cannot run `sweep` here; called before any work."""

    def session(self) -> AbstractContextManager[None]:
        """What run() needs that can fail and outlives one call (a private Ray cluster), set up on entry,
        before anything is written and only for a run that measures (not a dry run): ValueError (one line)
        when it cannot be; taken down on exit. Nothing, for most (contextlib.nullcontext())."""

    def resume(
        self, run_dir: Path, done: dict[str, dict[str, Any]], on_row: OnRow, on_device: OnDevice, message: Say
    ) -> list[str]:
        """Before a resume plans the cells left: hand to on_row (and on_device) what sessions of this
        executor left in the run directory outside rows.jsonl (`done`: its rows by cell_id), waiting for
        work of theirs still under way (message(text) says so); returns notes for the user. The runner
        holds the writer lock. Nothing to do for an executor whose rows all came back through on_row."""

    def run(self, plan: Plan, on_row: OnRow, on_device: OnDevice) -> None:
        """Measure plan.cells; call on_row(row) for each finished row (from this thread: the runner writes
        it at once) and on_device(record) for each device first used that the runner has not described
        yet. KeyboardInterrupt propagates after the executor's own workers are stopped; CellsLeft where it
        can measure no more of the cells."""


@contextmanager
def quiet_loggers(*names: str, level: int = logging.ERROR) -> Iterator[None]:
    """Third-party loggers (submitit's, Ray's) held at `level` while a run uses them: their INFO lines and
    warnings of retries are not the user's; their errors still show. Their own levels come back after."""
    loggers = [logging.getLogger(name) for name in names]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(level, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        for logger, old in zip(loggers, saved, strict=True):
            logger.setLevel(old)
