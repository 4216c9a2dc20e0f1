"""Which executor measures a run, and with what: the options a front end gives (`attnbench run --executor
--devices --ray-address --slurm-*`, attnbench.run's executor=, devices=, ray_address=, slurm_*=) checked
and made into the chosen executor's constructor keywords (harness.run.executors), in one place for the CLI and
the Python API, each error naming the options as the CLI's flags (a front end respells them:
harness.sweep.sweeps.respell).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnbench.harness.run import executors
from attnbench.harness.sweep.spec import SweepSpec
from attnbench.harness.sweep.sweeps import flag_name

# a front end's option key -> SlurmExecutor's keyword (harness/run/executors/slurm.py)
SLURM_OPTIONS = {
    "slurm_partition": "partition",
    "slurm_gpus_per_node": "gpus_per_node",
    "slurm_time": "time",
    "slurm_array_parallelism": "array_parallelism",
    "slurm_tasks": "tasks",
    "slurm_opt": "opts",
    "slurm_local": "local",
}
OPTIONS = ("devices", "ray_address", *SLURM_OPTIONS)


def options(executor: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor keywords of `executor` from the options given ({key of OPTIONS: value}, None or
    False meaning not given); ValueError naming an option of another executor or a bad value, before
    anything starts."""
    if executor not in executors.EXECUTORS:
        known = ", ".join(executors.EXECUTORS)
        raise ValueError(f"unknown executor {executor!r}; known: {known}")
    chosen: dict[str, Any] = {}
    if given.get("devices") is not None:
        if executor != "local":
            raise ValueError(f"--devices picks this machine's GPUs for --executor local, not {executor}")
        chosen["devices"] = given["devices"]
    if given.get("ray_address") is not None:
        if executor != "ray":
            raise ValueError("--ray-address names the Ray cluster of --executor ray")
        chosen["address"] = given["ray_address"]
    slurm = {key: given.get(option) for option, key in SLURM_OPTIONS.items()}
    slurm = {key: value for key, value in slurm.items() if value is not None and value is not False}
    if executor != "slurm":
        if slurm:
            option = next(o for o, k in SLURM_OPTIONS.items() if k in slurm)
            raise ValueError(f"{flag_name(option)} is an option of --executor slurm; give that too")
        return chosen
    chosen_executor(executor, slurm, None)  # the options' own checks, before anything starts
    return slurm


def chosen_executor(
    executor: str, options: dict[str, Any] | None, sweep: SweepSpec | None
) -> executors.Executor:
    """The executor built with its options and, given a sweep, its check of it (devices there, Ray or
    submitit installed); ValueError naming the flags."""
    built = executors.get(executor, options)
    if sweep is not None:
        built.check(sweep)
    return built
