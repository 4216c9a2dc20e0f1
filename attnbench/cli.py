"""The attnbench CLI: run, collect, repro, export, report, compare, list, check, env, profile, import.

(`import` is import-benchmark: a pytest-benchmark JSON file as a run.)

Bad input (unknown names, bad numbers, missing files) is reported as one line on stderr with exit
status 2, before any work starts and before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from attnbench.harness.run import executor_choice
from attnbench.harness.run.executor_choice import OPTIONS, SLURM_OPTIONS
from attnbench.harness.run.executors import EXECUTORS
from attnbench.harness.sweep import options
from attnbench.results.formulas import printable, sentence_columns, wrap_text

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class BadInput(ValueError):
    """A user error found before any work started."""


def _fail(msg: str) -> int:
    print(f"attnbench: error: {printable(msg)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _tell(text: str) -> None:
    """A sentence for the person at the terminal, on stderr, wrapped to its width (a path kept whole)."""
    print("\n".join(wrap_text(printable(text), sentence_columns(sys.stderr), "  ")), file=sys.stderr)


# ---- run ------------------------------------------------------------------------------------------


def _add_sweep_flags(p: argparse.ArgumentParser) -> None:
    """The sweep's axes and the measurement settings, one flag each, from the tables
    (harness.sweep.options)."""
    g = p.add_argument_group("sweep (override the preset or config file)")
    g.add_argument("--preset", help="named sweep shipped with attnbench (see `attnbench list --presets`)")
    g.add_argument("--config", metavar="FILE", help="sweep TOML file ([sweep] and [settings] tables)")
    for option in AXIS_OPTIONS:
        g.add_argument(
            option.flag(), dest=option.key, metavar=option.metavar, help=option.help_with_default()
        )
    t = p.add_argument_group("measurement")
    for option in SETTING_OPTIONS:
        action = "append" if option.repeat else "store"
        t.add_argument(
            option.flag(), dest=option.key, action=action, metavar=option.metavar, help=option.help
        )


# The flags of _add_sweep_flags by argparse dest (the option keys of harness.sweep.options): what the sweep
# is, and how each cell is measured. A new axis or setting is one entry of its table (results.axes,
# harness.sweep.settings).
AXIS_OPTIONS = options.axis_options()
SETTING_OPTIONS = options.setting_options()
SWEEP_FLAGS = ("preset", "config", *(o.key for o in AXIS_OPTIONS))
SETTING_FLAGS = tuple(o.key for o in SETTING_OPTIONS)


def _add_slurm_flags(g) -> None:
    g.add_argument("--slurm-partition", metavar="NAME", help="slurm: the partition to submit to")
    g.add_argument(
        "--slurm-gpus-per-node",
        type=int,
        metavar="N",
        help="slurm: GPUs per array task; the task runs one worker process per GPU (default 0: CPU only)",
    )
    g.add_argument("--slurm-time", metavar="TIME", help="slurm: time limit per task, minutes or HH:MM:SS")
    g.add_argument("--slurm-array-parallelism", type=int, metavar="N", help="slurm: most tasks at once")
    g.add_argument(
        "--slurm-tasks",
        type=int,
        metavar="N",
        help="slurm: array tasks to split the cells into (default: one per series, at most 32); a series "
        "(a variant and shape at every seq_len) stays in one task",
    )
    g.add_argument(
        "--slurm-opt",
        action="append",
        metavar="KEY=VALUE",
        help="slurm: any other sbatch option, e.g. --slurm-opt account=proj (repeatable)",
    )
    g.add_argument(
        "--slurm-local",
        action="store_true",
        help="slurm: run the array tasks as processes on this machine (submitit's LocalExecutor; no Slurm "
        "needed: for testing, and for machines without it)",
    )


def sweep_from_args(args: argparse.Namespace):
    """SweepSpec from preset/config + flags; BadInput naming the bad value."""
    from attnbench.harness.sweep.sweeps import build_sweep

    given = options.given_options(vars(args), AXIS_OPTIONS + SETTING_OPTIONS)
    try:
        return build_sweep(given, preset=args.preset, config=args.config)
    except (ValueError, TypeError) as exc:
        raise BadInput(str(exc)) from None


def _rerun_plan(args: argparse.Namespace):
    """--rerun RUN_DIR [--cells ID,... | --status S]: the old run's cells to measure again, or None."""
    if args.rerun is None:
        if args.cells is not None or args.status is not None:
            raise BadInput("--cells and --status choose cells of --rerun RUN_DIR; give --rerun too")
        return None
    given = [f for f in (*SWEEP_FLAGS, *SETTING_FLAGS, "variant_file") if getattr(args, f) is not None]
    if given:
        flag = given[0].replace("_", "-")
        raise BadInput(
            f"--rerun measures with the old run's sweep, settings and variant files; drop --{flag}"
        )
    if args.resume:
        raise BadInput(
            "--rerun writes a new run; to finish an interrupted rerun use --resume --out DIR alone"
        )
    from attnbench.harness.run import rerun
    from attnbench.harness.sweep.grammar import split

    try:
        cells = split(args.cells) if args.cells is not None else None
        return rerun.plan(args.rerun, cell_ids=cells, status=args.status)
    except ValueError as exc:  # RunDirError is one
        raise BadInput(str(exc)) from None


# --slurm-* flag dest -> SlurmExecutor keyword (harness/run/executors/slurm.py)
SLURM_FLAGS = SLURM_OPTIONS


def _executor_options(args: argparse.Namespace) -> dict:
    """The flags of the chosen executor (harness.run.executors), as its constructor's keywords
    (harness.run.executor_choice: the checks the Python API makes too)."""
    try:
        return executor_choice.options(args.executor, {key: getattr(args, key, None) for key in OPTIONS})
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def cmd_run(args: argparse.Namespace) -> int:
    from attnbench.harness.run.progress import Progress
    from attnbench.harness.run.run_set import is_run_set
    from attnbench.harness.run.runner import check_mode, run
    from attnbench.results import RunDirError
    from attnbench.results.drift import busy_sentence
    from attnbench.results.store import is_run_dir, latest_rows
    from attnbench.variants import VariantError

    if args.repeat is not None or (args.resume and is_run_set(args.out)):
        return _cmd_run_set(args)
    plan = _rerun_plan(args)
    sweep_flags = [f for f in (*SWEEP_FLAGS, *SETTING_FLAGS) if getattr(args, f) is not None]
    modes = dict(resume=args.resume, redo_drift=args.redo_drift, force_resume=args.force_resume)
    # the same rule harness.run.runner.run applies (check_mode), asked early so that its error comes first
    try:
        check_mode(None, args.out, **modes, given=sweep_flags)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    _check_variant_files(args)
    sweep = None if args.resume else plan.sweep if plan else sweep_from_args(args)
    progress = Progress(enabled=not args.quiet)
    try:
        files = list(plan.variant_files) if plan else args.variant_file or []
        summary = run(
            sweep,
            args.out,
            **modes,
            variant_files=files,
            progress=progress,
            only=plan.cells if plan else None,
            rerun_of=plan.origin if plan else None,
            executor=args.executor,
            executor_options=_executor_options(args),
            dry_run=args.dry_run,
            on_forecast=_warn_if_long,
        )
    except (VariantError, RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    if args.dry_run:
        for line in summary.forecast.lines():
            print("\n".join(wrap_text(printable(line), sentence_columns(), "    ")))
        print("dry run: nothing was measured or written")
        return 0
    counts = _counts(summary)
    if summary.collected:
        counts = f"{summary.collected} rows collected from array task shards; " + counts
    for note in summary.notes:
        _tell(f"attnbench: note: {note}")
    if summary.interrupted and not is_run_dir(summary.path):
        _tell(
            f"interrupted while starting, before the run's meta.json was written: nothing was measured; "
            f"run the same command again (it reuses {summary.path})"
        )
        return EXIT_INTERRUPTED
    if summary.interrupted:
        _tell(
            f"interrupted: finished rows are kept in {summary.path} ({counts}); "
            f"finish with: attnbench run --resume --out {summary.path}"
        )
        return EXIT_INTERRUPTED
    _tell(f"run complete: {summary.path} ({counts})")
    busy = busy_sentence(latest_rows(summary.path), str(summary.path))
    if busy:
        _tell(busy)
    if plan:
        _tell(f"compare with: attnbench compare {args.rerun} {summary.path}")
    print(summary.path)
    return 0


def _check_variant_files(args: argparse.Namespace) -> None:
    for path in args.variant_file or []:
        if not Path(path).is_file():
            raise BadInput(f"variant file {path!r} does not exist")


def _counts(summary) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "no cells run"


def _cmd_run_set(args: argparse.Namespace) -> int:
    """`attnbench run --repeat K --out DIR` (and its --resume): the sweep run K times into DIR/run1 ..
    DIR/runK, a run set for `attnbench compare` (harness.run.run_set)."""
    from attnbench.harness.run import estimate
    from attnbench.harness.run.progress import Progress
    from attnbench.harness.run.run_set import check_repeat, run_set
    from attnbench.harness.run.runner import run
    from attnbench.harness.sweep.sweeps import flag_name
    from attnbench.results import RunDirError
    from attnbench.variants import VariantError

    sweep_flags = [f for f in (*SWEEP_FLAGS, *SETTING_FLAGS) if getattr(args, f) is not None]
    if args.rerun:
        raise BadInput("--rerun makes one run of an earlier run's cells: not with --repeat")
    if args.resume:
        if args.repeat is not None:
            raise BadInput(f"--resume finishes the run set in {args.out} as it was started: drop --repeat")
        if sweep_flags:
            raise BadInput(
                f"--resume takes the sweep from the set's runset.json; drop {flag_name(sweep_flags[0])}"
            )
    else:
        if args.redo_drift or args.force_resume:
            raise BadInput(
                "--redo-drift and --force-resume change a resume: give them with --resume --out DIR"
            )
        if args.out is None:
            raise BadInput(
                f"--repeat {args.repeat} needs --out DIR: the set's folder (its runs: DIR/run1 ..)"
            )
        try:
            check_repeat(args.repeat, flag_name)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    _check_variant_files(args)
    sweep = None if args.resume else sweep_from_args(args)
    kw = dict(executor=args.executor, executor_options=_executor_options(args))
    try:
        if args.dry_run:
            if args.resume:
                raise BadInput(
                    "--dry-run of a run set's resume: give --dry-run to `--resume --out` one of its runs"
                )
            summary = run(sweep, args.out, variant_files=args.variant_file or [], dry_run=True, **kw)
            for line in summary.forecast.lines():
                print("\n".join(wrap_text(printable(line), sentence_columns(), "    ")))
            total = estimate.duration_text(args.repeat * summary.forecast.seconds)
            print(f"a run set of {args.repeat} such runs, one after another: about {total} in all")
            print("dry run: nothing was measured or written")
            return 0
        summaries = run_set(
            sweep,
            args.out,
            args.repeat,
            resume=args.resume,
            variant_files=args.variant_file or [],
            on_run=lambda j, k, path: _tell(f"run {j + 1} of {k}: {path}"),
            progress=Progress(enabled=not args.quiet),
            on_forecast=_warn_if_long,
            force_resume=args.force_resume,
            redo_drift=args.redo_drift,
            **kw,
        )
    except (VariantError, RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    last = summaries[-1]
    if last.interrupted:
        _tell(
            f"interrupted in {last.path} ({_counts(last)}; the set's runs before it are complete): "
            f"finish the set with: attnbench run --resume --out {args.out}"
        )
        return EXIT_INTERRUPTED
    for summary in summaries:
        _tell(f"run complete: {summary.path} ({_counts(summary)})")
    _tell(
        f"run set complete: {args.out} ({len(summaries)} runs); compare two sets with: "
        f"attnbench compare BEFORE {args.out} --control VARIANT"
    )
    print(args.out)
    return 0


def _warn_if_long(forecast) -> None:
    """One line before a sweep estimated over harness.run.estimate.LONG_S (the run goes on)."""
    from attnbench.harness.run import estimate

    if forecast.seconds > estimate.LONG_S:
        _tell(
            f"attnbench: warning: this sweep should take about {estimate.duration_text(forecast.seconds)} "
            f"({len(forecast.measured)} cells); add --dry-run to see its plan"
        )


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run a sweep into a run directory")
    _add_sweep_flags(p)
    p.add_argument(
        "--variant-file",
        action="append",
        metavar="PATH",
        help="python file registering variants (or a run's variants.pkl: the callables it measured)",
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/<timestamp>-<host>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish the run (or run set) in --out DIR (same sweep, no duplicates)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        metavar="K",
        help="run the sweep K times, one run after another, into --out DIR/run1 .. runK: a run set, which "
        "`attnbench compare` judges by the spread between its runs (what re-running the same code moves)",
    )
    p.add_argument(
        "--redo-drift",
        action="store_true",
        help="with --resume: measure again the cells measured while the machine ran more than 10%% off "
        "the run's median speed (the new rows replace the old ones when the run is loaded)",
    )
    p.add_argument(
        "--force-resume",
        action="store_true",
        help="with --resume: finish the run even though this machine's hosts, torch, attnbench commit or "
        "allocator environment differ from the run's (refused without it; logged in resumes.jsonl)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the number of cells, those unsupported here or that the memory guard would skip, and "
        "an estimated time, then exit without measuring or writing anything",
    )
    x = p.add_argument_group("where the cells are measured (scale-out)")
    x.add_argument(
        "--executor",
        default="local",
        metavar="|".join(EXECUTORS),
        help="local: this machine, one worker process (default), or one per GPU with --devices; "
        "ray: one worker per GPU (or per CPU node) of a Ray cluster; slurm: submitit array tasks (needs "
        "attnbench[slurm]; see docs/scale-out.md)",
    )
    x.add_argument(
        "--devices",
        metavar="cuda:0,cuda:1|all",
        help="--executor local: measure on these GPUs at once, one worker pinned to each (all: every "
        "visible CUDA device; cpu: one CPU worker, at most one per machine)",
    )
    x.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="--executor ray: the cluster to join (as given to `ray start --address`); default: start a "
        "local one on this machine",
    )
    _add_slurm_flags(x)
    r = p.add_argument_group(
        "measure an earlier run's cells again (into a new run; then `attnbench compare`)"
    )
    r.add_argument(
        "--rerun", metavar="RUN_DIR", help="the run whose sweep, settings and variant files to measure with"
    )
    r.add_argument("--cells", metavar="ID,...", help="only these cell_ids of --rerun RUN_DIR (default: all)")
    r.add_argument("--status", metavar="STATUS", help="only the cells of --rerun RUN_DIR with this status")
    p.set_defaults(func=cmd_run)


def cmd_collect(args: argparse.Namespace) -> int:
    """`attnbench run --resume` under another name, for a run whose driver went away: wait for the array
    tasks still running, merge their shards, then measure what is missing with the run's own executor (its
    recorded --slurm-* options), or --executor local."""
    from attnbench.results import RunDirError
    from attnbench.results.store import read_meta

    try:
        meta = read_meta(args.run_dir)
    except RunDirError as exc:
        raise BadInput(str(exc)) from None
    args.resume, args.out, args.rerun, args.redo_drift, args.dry_run = True, args.run_dir, None, False, False
    args.repeat = None  # a run's collect, not a run set's
    args.devices = args.ray_address = None
    for dest in (*SWEEP_FLAGS, *SETTING_FLAGS, "variant_file", "cells", "status", *SLURM_FLAGS):
        setattr(args, dest, None)
    if args.executor is None:
        args.executor = meta.get("executor", "local")
        if args.executor == "slurm":
            for dest, key in SLURM_FLAGS.items():
                setattr(args, dest, _last_slurm_options(args.run_dir).get(key))
    return cmd_run(args)


def _add_collect(sub) -> None:
    p = sub.add_parser(
        "collect",
        help="gather a slurm run's array-task shards (waiting for live tasks), then run what is missing",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--executor",
        metavar="|".join(EXECUTORS),
        help="measure the missing cells here (local) or again on Slurm (default: the run's own, with the "
        "--slurm-* options of its last submission)",
    )
    p.add_argument(
        "--force-resume",
        action="store_true",
        help="collect even though this machine's set-up differs from the run's (as for run --resume)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_collect)


def _last_slurm_options(run_dir: str) -> dict:
    """The --slurm-* options of a run's last submission (shards/submission-N.json), {} when it made none."""
    subs = sorted(Path(run_dir, "shards").glob("submission-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    return json.loads(subs[-1].read_text()).get("options", {}) if subs else {}


def cmd_repro(args: argparse.Namespace) -> int:
    """One line that measures one cell of a run again: `attnbench run` with every flag that cell was
    measured under written out (settings, env, CPUs, variant files), so it needs nothing but itself."""
    import shlex

    from attnbench.harness.run import rerun
    from attnbench.harness.sweep.spec import SweepSpec
    from attnbench.harness.sweep.sweeps import cell_given, flag_name

    try:
        meta, cell = rerun.find_cell(args.run_dir, args.cell_id)
    except ValueError as exc:  # RunDirError is one
        raise BadInput(str(exc)) from None
    settings = SweepSpec.from_meta(meta["sweep"]).settings
    slug = cell.cell_id.replace("|", "-")
    out = args.out or f"runs/repro-{meta.get('run_id', Path(args.run_dir).name)}-{slug}"
    texts, left = cell_given(cell, settings)
    if left:
        # a setting no flag can say: only the old run's meta.json says it, so measure again from there
        print(
            f"attnbench: note: {', '.join(left)} differ from the defaults and have no flag; "
            "the command re-measures through --rerun, which needs the run directory",
            file=sys.stderr,
        )
        argv = ["attnbench", "run", "--rerun", str(args.run_dir), "--cells", cell.cell_id, "--out", out]
    else:
        argv = ["attnbench", "run"]
        for key, text in texts.items():
            for value in text if isinstance(text, list) else [text]:
                argv += [flag_name(key), value]
        for path in meta.get("variant_files", []):
            if not Path(path).is_file():
                print(f"attnbench: warning: variant file {path} is not there any more", file=sys.stderr)
            argv += ["--variant-file", path]
        argv += ["--out", out]
    print(shlex.join(argv))
    return 0


def _add_repro(sub) -> None:
    p = sub.add_parser("repro", help="print the one `attnbench run` command that measures one cell again")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "cell_id", metavar="CELL_ID", help="as in `attnbench export RUN_DIR` (quote it: it holds |)"
    )
    p.add_argument("--out", metavar="DIR", help="the new run's directory (default: runs/repro-<run>-<cell>)")
    p.set_defaults(func=cmd_repro)


# ---- export / list / env / check --------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    from attnbench.results import RunDirError, export, load

    try:
        df = load(*args.run_dirs)
    except RunDirError as exc:
        raise BadInput(str(exc)) from None
    sys.stdout.write(export(df, args.format))
    return 0


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="print the tidy results table of runs")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p.set_defaults(func=cmd_export)


def _load_files(paths: list[str] | None) -> None:
    from attnbench import variants

    for path in paths or []:
        try:
            variants.load_variant_file(path)
        except variants.VariantError as exc:
            raise BadInput(str(exc)) from None


def _availability(variant, device: str) -> str | None:
    """variant.availability(device), or, when a plug-in's own check raises, that as the reason."""
    try:
        return variant.availability(device)
    except Exception as exc:  # the plug-in's code: list it, do not end `list`
        return f"its availability check raised {type(exc).__name__}: {exc}"


def cmd_list(args: argparse.Namespace) -> int:
    if args.presets:
        from attnbench.harness.sweep.sweeps import preset_description, presets

        for name, path in presets().items():  # the description wrapped under itself, to the terminal's width
            print("\n".join(wrap_text(preset_description(path), sentence_columns(), " " * 9, f"{name:<8} ")))
        return 0
    _load_files(args.variant_file)
    from attnbench import variants

    rows = []
    for name, v in variants.all_variants().items():
        c = v.cap
        caps = ",".join(k for k in ("causal", "padding", "dropout", "backward") if getattr(c, k))
        head = f"{c.min_head_dim}..{c.max_head_dim or 'any'}"
        where = {d: _availability(v, d) for d in ("cpu", "cuda")}
        rows.append(
            {
                "name": name,
                "memory": c.memory,
                "dtypes": ",".join(c.dtypes),
                "head_dim": head,
                "supports": caps,
                "layout": c.layout,
                "default": c.default,
                "source": v.source,
                "description": c.description,
                "available": {d: r is None for d, r in where.items()},
                "reasons": {d: r for d, r in where.items() if r},
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from attnbench.reports import terminal

    terminal.print_variants(terminal.fitted_console(), rows, variants.load_errors())
    return 0


def _add_list(sub) -> None:
    p = sub.add_parser("list", help="registered variants, their capabilities and availability here")
    p.add_argument("--variant-file", action="append", metavar="PATH")
    p.add_argument("--presets", action="store_true", help="list the named sweep presets instead")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)


def cmd_env(args: argparse.Namespace) -> int:
    from attnbench.harness.measure.fingerprint import collect

    fp = collect()
    if args.json:
        print(json.dumps(fp, indent=1))
        return 0
    for key, val in fp.items():
        if isinstance(val, dict):
            for k2, v2 in val.items():
                print(f"{key}.{k2:<22} {v2}")
        else:
            print(f"{key:<28} {val}")
    return 0


def _add_env(sub) -> None:
    p = sub.add_parser("env", help="print this machine's fingerprint")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_env)


def cmd_check(args: argparse.Namespace) -> int:
    """The correctness gate for every variant over causal x padding (and the numerics probe), as tables."""
    from attnbench.harness.sweep.grammar import read_axis, split
    from attnbench.harness.tools import check
    from attnbench.results.axes import axis

    try:
        plan = check.prepare(
            split(args.variants) if args.variants else None,
            read_axis(axis("device"), args.device, "--device"),  # the words `run` reads (bf16 too)
            read_axis(axis("dtype"), args.dtype, "--dtype"),
            args.seq_len,
            variant_files=args.variant_file or [],
        )
    except ValueError as exc:  # VariantError is one
        raise BadInput(str(exc)) from None
    from attnbench.reports import terminal

    console = terminal.fitted_console()
    rows, interrupted = [], False
    try:
        for row in check.gate_all(plan):
            rows.append(row)
    except KeyboardInterrupt:  # Ctrl-C or a time limit: what was checked is still shown (a GPU session's
        interrupted = True  # check cut at 195 s by flex's compiles printed nothing)
    shape = {"batch": check.BATCH, "heads": check.HEADS, "head_dim": check.HEAD_DIM}
    notes = terminal.print_gate(console, rows, plan.seq_len, **shape) if rows else {}
    no_key = terminal.no_key_table(rows, console.width, notes)
    if no_key is not None:
        console.print()
        console.print(no_key)
    if interrupted:
        made = f"{len(rows)} check{'' if len(rows) == 1 else 's'}"
        print(f"interrupted: the table holds the {made} made before it", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.probe:
        from attnbench.harness.measure import numerics

        console.print()
        console.print(
            terminal.probe_table(
                numerics.probe(list(plan.names), list(plan.devices), list(plan.dtypes)), console.width, notes
            )
        )
    return check.exit_status(rows)


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="run the float64 correctness gate for every variant (+ numerics probe)")
    p.add_argument("--variants", metavar="A,B")
    p.add_argument("--device", default="cpu", metavar="cpu,cuda")
    p.add_argument("--dtype", default="float32,bfloat16", metavar="DTYPES")
    p.add_argument("--seq-len", type=int, default=100)
    p.add_argument("--probe", action="store_true", help="also run the large-logit numerics probe")
    p.add_argument("--variant-file", action="append", metavar="PATH")
    p.set_defaults(func=cmd_check)


# ---- report / compare -------------------------------------------------------------------------------


def _out_dir(out: str | None, default: str) -> Path:
    """--out DIR (default reports/out/NAME, git-ignored); refused if it is a run or a file."""
    from attnbench.api import report_dir

    try:
        return report_dir(out, default)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def cmd_report(args: argparse.Namespace) -> int:
    import shutil

    from attnbench.api import write_report
    from attnbench.reports import findings
    from attnbench.results import RunDirError

    try:
        rep = write_report(args.run_dirs, args.out, args.baseline, option="--out ")
    except (RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    # the findings in sentences, not the fits table (218 columns): the tables are in the report
    if rep.findings is not None:
        sys.stdout.write(findings.text(rep.findings, shutil.get_terminal_size().columns))
        sys.stdout.flush()  # before the path on stderr, so that a pipe (nox) keeps the order
    print(f"report: {rep.readme} and {rep.html} ({len(rep.figures)} figures)", file=sys.stderr)
    return 0


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="fits, plots, README.md and report.html from runs")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", metavar="DIR", help="where to write the report (default: reports/out/<run id>)")
    p.add_argument(
        "--baseline", metavar="VARIANT", help="variant the speed-up map is relative to (default: naive)"
    )
    p.set_defaults(func=cmd_report)


def cmd_compare(args: argparse.Namespace) -> int:
    from attnbench.reports.compare import (
        compare_runs,
        parse_run_spread,
        parse_threshold,
        text_report,
        write_page,
    )
    from attnbench.reports.style import slug
    from attnbench.results import RunDirError

    out = _out_dir(args.out, "compare-" + slug(Path(args.run_a).name, "vs", Path(args.run_b).name))
    try:
        threshold = parse_threshold(args.fail_above) if args.fail_above else None
        run_spread = parse_run_spread(args.run_spread) if args.run_spread is not None else None
        if not 0 < args.alpha < 1:
            raise ValueError(f"--alpha must be in (0, 1), got {args.alpha}")
        cmp = compare_runs(
            args.run_a,
            args.run_b,
            threshold=threshold,
            alpha=args.alpha,
            normalize=args.normalize,
            control_variant=args.control,
            variant_a=args.variant_a,
            variant_b=args.variant_b,
            run_spread=run_spread,
        )
    except (RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    sys.stdout.write(text_report(cmp))
    readme, html_path = write_page(cmp, out)
    print(f"compare: {readme} and {html_path}", file=sys.stderr)
    return 1 if len(cmp.regressions) else 0


def _add_compare(sub) -> None:
    p = sub.add_parser(
        "compare", help="the same cells on two runs: ratios with CIs, effect sizes, verdicts, regression gate"
    )
    p.add_argument(
        "run_a",
        metavar="RUN_A",
        help="the reference run (before, or machine A), or a run set: a directory of runs of the same "
        "code, one per subdirectory, judged by the spread between them (3 or more)",
    )
    p.add_argument(
        "run_b", metavar="RUN_B", help="the run (or run set, as RUN_A) compared with it (after, or machine B)"
    )
    p.add_argument(
        "--fail-above",
        metavar="STAT:N%",
        help="exit 1 if a cell's verdict is 'slower' (significant after Holm's adjustment over the cells, "
        "and the ratio's CI above 1: the rule compare prints) and B is slower than A by "
        "more than this (median, mean, min or max; N%% relative, "
        "which is also the band of 'same', or a number of ms), or a cell ok in A is "
        "wrong/error/crashed/timeout in B",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the verdict's test (a paired or Welch t-test on log times: the rule "
        "compare prints)",
    )
    p.add_argument(
        "--run-spread",
        metavar="PCT",
        help="how far whole runs of identical code move on your machine, in per cent (e.g. 8; measure it "
        "with benchmarks/false_alarm.py): two single runs with no control and nothing paired cannot see "
        "it, and call a cell slower or faster only beyond it; default: the figure measured on the "
        "reference VM (results.judge.RUN_SPREAD_FLOOR)",
    )
    p.add_argument(
        "--normalize",
        choices=["calibration"],
        help="rescale B's times to A's machine by the runs' calibrated ceilings (matmul TFLOP/s for "
        "compute-bound cells, copy GB/s for memory-bound ones), so a slower machine is not a slower code",
    )
    p.add_argument(
        "--control",
        metavar="VARIANT",
        help="a variant whose code is the same in both runs: every other variant is judged relative to its "
        "change at the same shape (visit by visit in runs made in rounds), so that a machine that ran "
        "slower through all of B is not taken for slower code; its own cells never fail the gate",
    )
    p.add_argument(
        "--variant-a",
        metavar="VARIANT",
        help="compare this variant of RUN_A with --variant-b's of RUN_B (RUN_B may be RUN_A: an A/B in one "
        "run, e.g. the old and new code of a kernel registered under two names; made in rounds, each "
        "round's two visits are paired)",
    )
    p.add_argument("--variant-b", metavar="VARIANT", help="the variant of RUN_B compared (with --variant-a)")
    p.add_argument(
        "--out", metavar="DIR", help="where to write the plot and page (default: reports/out/compare-A-vs-B)"
    )
    p.set_defaults(func=cmd_compare)


# ---- profile ----------------------------------------------------------------------------------------


def cmd_profile(args: argparse.Namespace) -> int:
    """One cell looped under py-spy, then a few calls under torch.profiler; an index page beside the files."""
    from attnbench.harness.tools.profile import CELL_OPTIONS, prepare, profile_cell
    from attnbench.reports.profile_page import top_ops_text, write_pages

    if len(args.variant) != 1:
        raise BadInput(f"--variant takes one value (profile runs one cell), got {' and '.join(args.variant)}")
    try:
        plan = prepare(
            args.variant[0],
            options.given_options(vars(args), CELL_OPTIONS),
            threads=args.threads,
            seconds=args.seconds,
            rate=args.rate,
            iters=args.iters,
            native=args.native,
            use_py_spy=not args.no_py_spy,
            variant_files=args.variant_file or [],
        )
    except ValueError as exc:  # VariantError is one
        raise BadInput(str(exc)) from None
    out = _out_dir(args.out, plan.default_dir_name())
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"--out {str(out)!r} already exists and is not empty; choose another --out")
    result = profile_cell(plan, out)
    md, html_path = write_pages(out)
    sys.stdout.write(top_ops_text(out))
    print(f"profile: {html_path} and {md}", file=sys.stderr)
    if result.error:
        print(f"attnbench: {result.error}", file=sys.stderr)
        return 1
    return 0


def _add_profile(sub) -> None:
    p = sub.add_parser(
        "profile", help="profile one cell: py-spy flame graph + speedscope, torch.profiler trace"
    )
    p.add_argument("--variant", action="append", required=True, metavar="NAME", help="the variant to profile")
    from attnbench.harness.tools.profile import CELL_OPTIONS, DEFAULT_SEQ_LEN

    g = p.add_argument_group("cell (one value each, checked as `attnbench run` checks them)")
    for option in CELL_OPTIONS:  # one value each: `attnbench run`'s flags, a profile's seq_len default
        if option.key == "seq_len":
            option = dataclasses.replace(option, default=str(DEFAULT_SEQ_LEN))
        g.add_argument(
            option.flag(), dest=option.key, action="append", metavar=option.one_metavar(),
            help=option.help_with_default(),
        )  # fmt: skip
    g.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    g.add_argument("--variant-file", action="append", metavar="PATH", help="python file registering variants")
    t = p.add_argument_group("profilers")
    t.add_argument(
        "--seconds",
        type=float,
        default=5.0,
        help="seconds the cell loops under py-spy, split between the flame graph and speedscope "
        "recordings (default 5)",
    )
    t.add_argument("--rate", type=int, default=100, help="py-spy samples per second (default 100)")
    t.add_argument("--native", action="store_true", help="py-spy --native: C/C++ frames too")
    t.add_argument("--no-py-spy", action="store_true", help="torch.profiler only")
    t.add_argument("--iters", type=int, default=5, help="calls recorded by torch.profiler (default 5)")
    p.add_argument(
        "--out", metavar="DIR", help="where to write (default: reports/out/profile-<variant>-<shape>-<time>)"
    )
    p.set_defaults(func=cmd_profile)


# ---- import-benchmark -------------------------------------------------------------------------------


def cmd_import_benchmark(args: argparse.Namespace) -> int:
    """A pytest-benchmark JSON file from `pytest benchmarks/` as a run directory (report, export, compare)."""
    from attnbench import variants
    from attnbench.results import RunDirError
    from attnbench.results.pytest_benchmark import import_file

    def known(name: str) -> dict | None:  # an older file's variants, as this installation registers them
        found = variants.all_variants().get(name)
        return found.record() if found is not None else None

    def skipped(name: str) -> None:
        print(f"skipped benchmark {printable(name)}: not an attnbench grid cell (no attnbench extra_info)",
              file=sys.stderr)  # fmt: skip

    try:
        path, counts = import_file(args.json_file, args.out, capabilities=known, on_skip=skipped)
    except (RunDirError, ValueError) as exc:  # BenchmarkFileError is a ValueError
        raise BadInput(str(exc)) from None
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"imported {args.json_file} into {path} ({summary})", file=sys.stderr)
    print(path)
    return 0


def _add_import_benchmark(sub) -> None:
    p = sub.add_parser(
        "import-benchmark", help="a pytest-benchmark JSON file (pytest benchmarks/) as a run directory"
    )
    p.add_argument("json_file", metavar="JSON_FILE", help="from pytest benchmarks/ --benchmark-json FILE")
    p.add_argument("--out", metavar="RUN_DIR", required=True, help="the run directory to create")
    p.set_defaults(func=cmd_import_benchmark)


# ---- main -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_run,
        _add_collect,
        _add_repro,
        _add_export,
        _add_list,
        _add_check,
        _add_env,
        _add_report,
        _add_compare,
        _add_profile,
        _add_import_benchmark,
    ):
        add(sub)
    return parser


@contextmanager
def _one_line_warnings():
    """A skipped row (torn or corrupt) or uncollected shards reach the user as one line, as errors do:
    Python's default format adds the file and source line of the warnings.warn call, which says nothing
    to them."""
    import warnings

    from attnbench.results import RowWarning, UncollectedWarning

    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (RowWarning, UncollectedWarning)):
            print(f"attnbench: warning: {printable(str(message))}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning
    try:
        yield
    finally:
        warnings.showwarning = show


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # what the machine, not the command, got wrong


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _one_line_warnings():
            return args.func(args)
    except BadInput as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `attnbench export ... | head`
        return 0
    except OSError as exc:  # a full disk (or a quota, a read-only mount) while writing a page or a file
        if exc.errno not in _NO_ROOM:
            raise
        where = exc.filename or getattr(args, "out", None) or "the output"
        return _fail(f"cannot write {where}: {os.strerror(exc.errno).lower()}")


if __name__ == "__main__":
    sys.exit(main())
