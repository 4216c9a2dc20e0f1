"""The Python API's keywords checked before any work, each error naming the keyword: a switch given anything
but True or False, a keyword that takes one kind of Python value given another (the CLI's argparse checks its
flags' types; here a `ray_address=6379` would fail deep inside), and a keyword no function of the API knows,
with the one it most likely meant. The values of the axes and settings are the grammar's
(harness.sweep.grammar), which reads text and Python values alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Kind = tuple[tuple[type, ...], str]  # the Python types taken, and how a message says them

_TEXT: Kind = ((str,), "text (str)")
_WHOLE: Kind = ((int,), "a whole number (int)")

# keyword -> what it takes (None always means "not given"); a bool is never a number here
KINDS: dict[str, Kind] = {
    # run's (and bench's): where the cells are measured (harness.run.executor_choice.OPTIONS), and a rerun's
    "executor": _TEXT,
    "devices": ((str,), "text such as 'cuda:0,cuda:1' (str)"),
    "ray_address": ((str,), "the cluster's address as text, such as '10.0.0.5:6379' (str)"),
    "slurm_partition": _TEXT,
    "slurm_gpus_per_node": _WHOLE,
    "slurm_time": ((str, int), "minutes (int) or text such as '90' or '1:30:00' (str)"),
    "slurm_array_parallelism": _WHOLE,
    "slurm_tasks": _WHOLE,
    "slurm_opt": ((str, list, tuple), "KEY=VALUE text, or a list of them"),
    "preset": _TEXT,
    "status": _TEXT,
    "cells": ((str, list, tuple), "cell_ids as a comma list (str) or a list of them"),
    "repro_of": ((str,), "a run_id (str)"),
    # profile's
    "name": _TEXT,
    "seconds": ((int, float), "a number of seconds (int or float)"),
    "rate": ((int,), "samples per second (int)"),
    "iters": ((int,), "a number of calls (int)"),
    "threads": _WHOLE,
}
RUN_KINDS = (
    "executor",
    "devices",
    "ray_address",
    "preset",
    "status",
    "cells",
    "repro_of",
    *(k for k in KINDS if "slurm" in k),
)


# the keywords of attnbench.run that take no value: a message's --resume is `resume=True` here
SWITCHES = ("resume", "redo_drift", "force_resume", "dry_run", "slurm_local")
RENAMED = {"pass": "pass_", "variant_file": "variant_files", "quiet": "progress"}


def keyword(key: str, value: str | None = None) -> str:
    """This API's spelling of `attnbench run`'s flag for `key` (harness.sweep.sweeps.respell): `seq_len`,
    `out=DIR`, `rounds=3`, `resume=True`."""
    key = RENAMED.get(key, key)
    if value is not None:
        return f"{key}={value}"
    return f"{key}=True" if key in SWITCHES else key


def given_as(value: Any) -> str:
    """A value as a one-line message says what was given: its type and its repr cut at 60 characters (`str
    '2'`), or its type alone where its repr spans lines (a DataFrame, a tensor)."""
    text = repr(value)
    if "\n" in text:
        return type(value).__name__
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def switches(**given: Any) -> None:
    """TypeError naming the keyword where a switch (resume=, dry_run=, ...) is given anything but True or
    False: a string such as "False" is true to Python, and would do what it says not to. `progress` may
    also be None (its default: shown in a notebook only)."""
    for key, value in given.items():
        if not isinstance(value, bool) and not (key == "progress" and value is None):
            also = " or None" if key == "progress" else ""
            raise TypeError(f"{key}= takes True or False{also}, not {given_as(value)}")


def typed(**given: Any) -> None:
    """TypeError naming the keyword where one of KINDS is given another kind of value (`seconds="2"`,
    `ray_address=6379`, `slurm_tasks=True`); None is not given. A list's items are text."""
    for key, value in given.items():
        types, said = KINDS[key]
        if value is None:
            continue
        if isinstance(value, (list, tuple)) and isinstance(value, types):
            wrong = [v for v in value if not isinstance(v, str)]
            value = wrong[0] if wrong else None
            if value is None:
                continue
        elif isinstance(value, types) and not isinstance(value, bool):
            continue
        raise TypeError(f"{key}= takes {said}, not {given_as(value)}")


def executor_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """run()'s executor keywords (harness.run.executor_choice.OPTIONS: devices, ray_address, slurm_*) checked
    (typed, switches) and as the CLI gives them: `slurm_time=90` as minutes ('90'), `slurm_opt="account=x"`
    as one option (['account=x'])."""
    typed(**{k: v for k, v in given.items() if k in KINDS})
    switches(**{k: v for k, v in given.items() if k not in KINDS})
    out = dict(given)
    if isinstance(out.get("slurm_time"), int):
        out["slurm_time"] = str(out["slurm_time"])
    if isinstance(out.get("slurm_opt"), str):
        out["slurm_opt"] = [out["slurm_opt"]]
    return out


def refuse_unknown(
    given: Iterable[str], fn: Callable[..., Any], cell: Iterable[str] | None = None, also: Iterable[str] = ()
) -> None:
    """ValueError for the first keyword of `given` that is none of `cell` (what `fn` sweeps or measures, by
    default every axis and setting: harness.sweep.sweeps, with the other spellings of an axis and the
    removed options, which have their own message) nor `also` (other spellings taken); it says the keyword
    it most likely meant among those and `fn`'s own keywords (executor=, slurm_partition=, out=, ...), every
    one of them listed. A key that is one of `fn`'s own (in a sweep mapping) is left to the sweep's reader."""
    import inspect

    from attnbench.harness.sweep.grammar import unknown
    from attnbench.harness.sweep.settings import REMOVED_OPTIONS
    from attnbench.harness.sweep.sweeps import AXIS_KEYS, SETTING_KEYS, SWEEP_AXES

    own = [
        p.name for p in inspect.signature(fn).parameters.values()
        if p.kind == p.KEYWORD_ONLY and not p.name.startswith("_")
    ]  # fmt: skip
    if cell is None:
        known, also = [a.option for a in SWEEP_AXES] + list(SETTING_KEYS), [*AXIS_KEYS, *REMOVED_OPTIONS]
    else:
        known, also = list(cell), list(also)
    for key in given:
        if key not in known and key not in also and key not in own:
            raise ValueError(unknown("keyword", key, [*known, *own], also=also))


def sweep_given(sweep: Any) -> None:
    """TypeError or ValueError where run()'s first argument, the sweep (a SweepSpec, a sweep file, a mapping
    of axes), is what to measure instead: a function, a list of them, or a variant's or a preset's name
    (`attnbench.bench(fn)` takes fn so, and run(fn) is the natural next thing to type); the message says
    the keyword that takes it."""
    import os
    from pathlib import Path

    from attnbench.harness.sweep.sweeps import presets
    from attnbench.variants import all_variants

    if callable(sweep) or isinstance(sweep, (list, tuple)):
        raise TypeError(
            f"run()'s first argument is the sweep (a sweep file or a mapping of axes), not "
            f"{given_as(sweep)}: give what to measure as variants=, e.g. attnbench.run(variants=[my_attn, "
            "'sdpa'], ...)"
        )
    if isinstance(sweep, str) and not Path(os.path.expanduser(sweep)).exists():
        if sweep in all_variants():
            raise ValueError(f"{sweep!r} is a variant, not a sweep file: give it as variants={sweep!r}")
        if sweep in presets():
            raise ValueError(f"{sweep!r} is a preset, not a sweep file: give it as preset={sweep!r}")
