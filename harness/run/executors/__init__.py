"""Executors: where a run's cells are measured. The runner plans, an executor measures, the runner writes.

Every executor measures cells with `harness.workers.cellrunner.CellRunner` (a worker process, a deadline, a
row per cell, a fresh worker after a crash) and hands each row back through `on_row`; only the runner's single
`RunWriter` writes to the run directory. A new executor is a module here with a class that has what the
`Executor` protocol (base.py) names: `name`, `notes` (for the user, once the run ends), `check(sweep)`
(refuse what it cannot do, before any directory exists), `session()` (what it needs that can fail, set up
before anything is written: a private Ray cluster), `resume(...)` (before a resume: hand over what
its earlier sessions left outside rows.jsonl; nothing, for most) and `run(plan, on_row, on_device)`; and
an entry in `EXECUTORS`. The runner reaches executors only through these.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnbench.harness.run.executors.base import CellsLeft, Executor, Plan

# name -> "module:Class", imported only when chosen (ray and submitit are optional dependencies)
EXECUTORS = {
    "local": "attnbench.harness.run.executors.local:LocalExecutor",
    "ray": "attnbench.harness.run.executors.ray:RayExecutor",
    "slurm": "attnbench.harness.run.executors.slurm:SlurmExecutor",
}


def get(name: str, options: dict[str, Any] | None = None) -> Executor:
    """The executor called `name`, built with its options; ValueError naming the known ones."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    module, _, cls = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(**(options or {}))


__all__ = ["EXECUTORS", "CellsLeft", "Executor", "Plan", "get"]
