"""`attnbench run`, `bench`, `collect`, `repro` and `interleave`: commands that measure.

`attnbench run` translates its flags into one harness.run.request.RunRequest (the Python API builds the same
request from its keywords), and the request's rules decide which modes go together.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from attnbench.cli_common import EXIT_INCOMPLETE, EXIT_INTERRUPTED, BadInput, bad_input, say, tell
from attnbench.harness.run.executor_choice import OPTIONS, SLURM_OPTIONS
from attnbench.harness.run.executors import EXECUTORS
from attnbench.harness.sweep import options
from attnbench.harness.sweep.settings import REMOVED_OPTIONS
from attnbench.harness.sweep.sweeps import flag_name
from attnbench.results.formulas import command, counted


def _add_sweep_flags(
    p: argparse.ArgumentParser, hidden: tuple[str, ...] = (), preset: str | None = None
) -> None:
    """The sweep's axes and the measurement settings, one flag each, from the tables
    (harness.sweep.options); `hidden`: axes taken (so that a command can refuse them in its own words)
    but not shown in its help; `preset`: the command's own preset (bench's), whose values its help shows as
    the defaults."""
    axis_options, preset_settings = AXIS_OPTIONS, ""
    if preset:
        axis_options, preset_settings = options.preset_defaults(AXIS_OPTIONS, preset)
    g = p.add_argument_group(
        "sweep (override the preset or config file)",
        f"the defaults below are the {preset} preset's (a kernel that runs packs, paged caches or windows "
        "only is measured on its workload's: --dry-run says what a bench measures)"
        if preset
        else None,
    )
    g.add_argument(
        "--preset",
        help="named sweep shipped with attnbench (see `attnbench list --presets`)"
        + (f" (default: {preset})" if preset else ""),
    )
    g.add_argument("--config", metavar="FILE", help="sweep TOML file ([sweep] and [settings] tables)")
    for option in axis_options:
        shown = argparse.SUPPRESS if option.key in hidden else option.help_with_default()
        g.add_argument(option.flag(), dest=option.key, metavar=option.metavar, help=shown)
    t = p.add_argument_group(
        "measurement",
        f"the {preset} preset sets {preset_settings}; a default named below is `attnbench run`'s"
        if preset_settings
        else None,
    )
    for option in SETTING_OPTIONS:
        action = "append" if option.repeat else "store"
        alone = {"nargs": "?", "const": "yes"} if option.switch else {}  # `--energy` is `--energy yes`
        t.add_argument(
            option.flag(), dest=option.key, action=action, metavar=option.metavar, help=option.help, **alone
        )
    for key in REMOVED_OPTIONS:  # taken, so that the one line of what replaced it is said
        p.add_argument(flag_name(key), dest=key, help=argparse.SUPPRESS)


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


# --slurm-* flag dest -> SlurmExecutor keyword (harness/run/executors/slurm.py)
SLURM_FLAGS = SLURM_OPTIONS


def sweep_from_args(args: argparse.Namespace):
    """SweepSpec from preset/config + flags; BadInput naming the bad value."""
    from attnbench.harness.sweep.sweeps import build_sweep

    with bad_input():
        return build_sweep(_given(args), preset=args.preset, config=args.config)


def _given(args: argparse.Namespace) -> dict:
    """The sweep's options as given (None: not), the removed ones among them."""
    given = options.given_options(vars(args), AXIS_OPTIONS + SETTING_OPTIONS)
    return {**given, **{key: getattr(args, key, None) for key in REMOVED_OPTIONS}}


def request_of(args: argparse.Namespace, check_executor: bool = True):
    """The RunRequest of `attnbench run`'s flags (check_executor: RunRequest's)."""
    from attnbench.harness.run.request import RunRequest

    return RunRequest(
        options=_given(args),
        preset=args.preset,
        config=args.config,
        out=args.out,
        resume=args.resume,
        redo_drift=args.redo_drift,
        force_resume=args.force_resume,
        dry_run=args.dry_run,
        variant_files=tuple(args.variant_file or ()),
        rerun=args.rerun,
        cells=args.cells,
        status=args.status,
        repro_of=getattr(args, "repro_of", None),
        executor=args.executor,
        executor_options={key: getattr(args, key, None) for key in OPTIONS},
        check_executor=check_executor,
    )


def cmd_run(args: argparse.Namespace, verb: str = "resume") -> int:
    """`attnbench run`; a --resume (or `collect`, verb) of a run with nothing left to do says it is complete
    and starts nothing: no worker, no line in resumes.jsonl."""
    from attnbench.harness.run.progress import Progress
    from attnbench.harness.run.runner import run

    if args.resume and not args.dry_run:
        cells = _complete(args, forced=verb == "collect")
        if cells is not None:
            tell(f"nothing to {verb}: {args.out} is complete ({counted(cells, 'cell')})")
            print(args.out)
            return 0
    progress = Progress(enabled=not args.quiet)
    with bad_input():
        summary = run(request_of(args), progress=progress, on_forecast=_warn_if_long)
    if args.dry_run:
        for line in summary.forecast.lines():
            say(line)
        print("dry run: nothing was measured or written")
        return 0
    return _ended(summary, rerun=args.rerun)


def add_bench(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="one variant against a baseline over every mask and dtype, gated against float64, answered "
        "in a few lines (attnbench.bench)",
    )
    p.add_argument(
        "variant", metavar="VARIANT", help="the variant measured: a registered name (--variant-file)"
    )
    p.add_argument(
        "--baseline",
        metavar="VARIANT",
        help="the variant it races (default: sdpa; sdpa_loop for a pack, paged_gather for a paged cache)",
    )
    p.add_argument("--variant-file", action="append", metavar="PATH", help="python file registering variants")
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/<timestamp>-<host>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--dry-run", action="store_true", help="what it would measure and for how long; nothing run"
    )
    p.add_argument("--resume", action="store_true", help="finish the bench run in --out DIR and answer")
    p.add_argument("--executor", default="local", metavar="|".join(EXECUTORS), help="as `attnbench run`'s")
    _add_sweep_flags(p, hidden=("variants",), preset="bench")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """attnbench.bench(VARIANT, baseline=...) from the command line: its answer on stdout; exit status 1
    when VARIANT was wrong (or raised) in a cell, at N = 100 or 300, in a workload it declares or on large
    logits (the numerics probe)."""
    from attnbench.api import as_flags, bench
    from attnbench.bench_sweep import bench_plan
    from attnbench.harness.sweep.sweeps import build_sweep
    from attnbench.reports.answer import answer

    if args.variants:
        raise BadInput("bench measures VARIANT against --baseline: give no --variants")
    given = {key: value for key, value in _given(args).items() if value is not None}
    with bad_input(), as_flags():  # bad input said with the flags' names, before anything runs
        # the plan reads the variant the files register, and the axes of a sweep the flags name
        extra = {"variant_files": args.variant_file or (), "preset": args.preset, "config": args.config}
        planned = {
            k: v for k, v in bench_plan(args.variant, None, {**given, **extra})[1].items() if k not in extra
        }
        build_sweep(planned, preset=None if args.config else args.preset or "bench", config=args.config)
        ran = bench(
            args.variant, baseline=args.baseline, variant_files=args.variant_file or (), out=args.out,
            dry_run=args.dry_run, resume=args.resume, progress=not args.quiet, executor=args.executor,
            config=args.config,
            **({"preset": None} if args.config else {"preset": args.preset} if args.preset else {}), **given,
        )  # fmt: skip
    if args.dry_run:
        for line in str(ran).splitlines():
            say(line)
        return 0
    more = (
        f"the full report: {command('attnbench', 'report', ran.path)} · every cell: "
        f"{command('attnbench', 'export', ran.path)}"
    )
    said = answer(ran.path, ran.variant, ran.baseline, ran.seconds, ran.declared, more)
    for line in said.lines:
        say(line)
    return 1 if said.wrong else 0


def _ended(summary, rerun: str | None) -> int:
    """What a run says when it ends: notes, how it ended, a busy machine; the run's path on stdout."""
    from attnbench.interrupted import kept_text
    from attnbench.results.drift import busy_sentence
    from attnbench.results.store import is_run_dir, latest_rows

    counts = _counts(summary)
    if summary.collected:
        counts = f"{summary.collected} rows collected from array task shards; " + counts
    for note in summary.notes:
        tell(f"attnbench: note: {note}")
    if summary.interrupted and not is_run_dir(summary.path):
        tell(
            f"interrupted while starting, before the run's meta.json was written: nothing was measured; "
            f"run the same command again (it reuses {summary.path})"
        )
        return EXIT_INTERRUPTED
    finish = _finish(summary)
    if summary.interrupted:  # with rounds, the visits of cells not finished are kept too
        counts = counts.removesuffix(_counts(summary)) + kept_text(
            summary.path, summary.counts, "no row collected yet" if summary.running else "no cells run"
        )
        tell(f"interrupted: finished rows are kept in {summary.path} ({counts}){_left_running(summary)}; "
             f"finish with: {finish}")  # fmt: skip
        return EXIT_INTERRUPTED
    rows = latest_rows(summary.path)
    if summary.resumed:  # what this resume ran, and then the whole run's cells (a resume ran only the rest)
        whole = Counter(str(r.get("status")) for r in rows)
        counts += f" this time; the run's {counted(len(rows), 'cell')}: "
        counts += ", ".join(f"{n} {s}" for s, n in sorted(whole.items()))
    if summary.missing:  # an array task cancelled, CellsLeft: the finish command measures them; CI fails
        tell(f"run incomplete: {summary.path} ({counts}, {summary.missing} not measured: {finish})")
    else:
        tell(f"run complete: {summary.path} ({counts})")
    busy = busy_sentence(rows, str(summary.path))
    if busy:
        tell(busy)
    _again(rows, summary.path)
    if rerun:
        tell(_after_rerun(rerun, rows, summary.path))
    print(summary.path)
    return EXIT_INCOMPLETE if summary.missing else 0


def _finish(summary) -> str:
    """The command that finishes a run: a Slurm run's collect (it waits for the array tasks still running and
    submits the cells missing, with the run's --slurm-* options), else a resume."""
    if summary.executor == "slurm":
        return command("attnbench", "collect", summary.path)
    return command("attnbench", "run", "--resume", "--out", summary.path)


def _left_running(summary) -> str:
    """What a stopped Slurm driver leaves on the cluster: its array jobs still queued or running, which go on
    writing rows into the run (collect gathers them) unless cancelled."""
    if not summary.running:
        return ""
    jobs = " ".join(summary.running)
    word = "job" if len(summary.running) == 1 else "jobs"
    return (
        f"; the array tasks of Slurm {word} {jobs} are still queued or running (to stop them: scancel {jobs})"
    )


def _after_rerun(rerun: str, rows, path) -> str:
    """What to do with a rerun: compare it with the run it measured again where a cell was ok there (compare
    judges its time, or its status changed: ok -> crashed fails the gate); cells crashed or timed out there
    have no time to judge, and their new rows are read in this run's report."""
    from attnbench.results.store import latest_rows

    before = {r.get("cell_id"): str(r.get("status")) for r in latest_rows(rerun)}
    if any(before.get(r.get("cell_id")) == "ok" for r in rows):
        return f"compare with: {command('attnbench', 'compare', rerun, path)}"
    were = sorted({before[r.get("cell_id")] for r in rows if r.get("cell_id") in before})
    return (
        f"no cell measured again was ok in {rerun} ({', '.join(were) or 'none found'} there): compare would "
        f"judge none; read the new rows with: {command('attnbench', 'report', path)}"
    )


def _again(rows, path) -> None:
    """A line per status of cells that may measure otherwise another time (crashed, timeout: a killed worker,
    a busy machine), with the command that measures only them again; --resume keeps a finished row."""
    for status, word in (("crashed", "crashed"), ("timeout", "timed out")):
        n = sum(1 for r in rows if r.get("status") == status)
        if n:
            tell(
                f"{counted(n, 'cell')} {word}; measure {'it' if n == 1 else 'them'} again with: "
                + command("attnbench", "run", "--rerun", path, "--status", status, "--out", "NEW_DIR")
            )


def _counts(summary) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "no cells run"


def _warn_if_long(forecast) -> None:
    """One line before a sweep estimated over harness.run.estimate.LONG_S (the run goes on)."""
    from attnbench.harness.run import estimate

    if forecast.seconds > estimate.LONG_S:
        tell(
            f"attnbench: warning: this sweep should take about {estimate.duration_text(forecast.seconds)} "
            f"({len(forecast.measured)} cells); add --dry-run to see its plan"
        )


def add_run(sub) -> None:
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
        help="finish the run in --out DIR (same sweep, no duplicates)",
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
    r.add_argument(
        "--repro-of",
        metavar="RUN_ID",
        help="this run measures a cell of run RUN_ID again (`attnbench repro` writes it): recorded in "
        "meta.json, so that `history add FOLDER` leaves the run out of the series (add it by name to keep "
        "it)",
    )
    p.set_defaults(func=cmd_run)


def cmd_collect(args: argparse.Namespace) -> int:
    """`attnbench run --resume` under another name, for a run whose driver went away: wait for the array
    tasks still running, merge their shards, then measure what is missing with the run's own executor (its
    recorded --slurm-* options), or --executor local."""
    from attnbench.results.store import read_meta

    with bad_input():
        meta = read_meta(args.run_dir)
    args.resume, args.out, args.rerun, args.redo_drift, args.dry_run = True, args.run_dir, None, False, False
    args.devices = args.ray_address = args.preset = args.config = None
    for dest in (*SWEEP_FLAGS, *SETTING_FLAGS, *REMOVED_OPTIONS, *SLURM_FLAGS):
        setattr(args, dest, None)
    args.variant_file = args.cells = args.status = args.repro_of = None
    if args.executor is None:
        args.executor = meta.get("executor", "local")
        if args.executor == "slurm":
            for dest, key in SLURM_FLAGS.items():
                setattr(args, dest, _last_slurm_options(args.run_dir).get(key))
    return cmd_run(args, verb="collect")


def _complete(args: argparse.Namespace, forced: bool) -> int | None:
    """The number of cells of the run a resume (or `collect`) was given where nothing is left to do (every
    cell it plans has its row, no shard holds a row to merge or to name twice, its numerics probe is written,
    and with --redo-drift no row drifted), else None: decided by a dry run of the resume, which starts no
    worker and writes nothing. `collect`'s is forced: a run with nothing left is complete whatever machine
    asks (one with cells left is refused by the resume itself); `run --resume` on another set-up is refused
    as before unless --force-resume."""
    from attnbench.harness.run.runner import complete_cells, run

    dry = argparse.Namespace(**{**vars(args), "dry_run": True, "force_resume": forced or args.force_resume})
    with bad_input():  # the executor's cluster is asked by the resume that follows, not twice
        planned = run(request_of(dry, check_executor=False)).forecast
    return complete_cells(Path(args.out), planned)


def add_collect(sub) -> None:
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

    with bad_input():
        argv = rerun.repro_argv(
            args.run_dir, args.cell_id, args.out, note=lambda text: print(text, file=sys.stderr)
        )
    print(shlex.join(argv))
    return 0


def add_repro(sub) -> None:
    p = sub.add_parser("repro", help="print the one `attnbench run` command that measures one cell again")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "cell_id", metavar="CELL_ID", help="as in `attnbench export RUN_DIR` (quote it: it holds |)"
    )
    p.add_argument("--out", metavar="DIR", help="the new run's directory (default: runs/repro-<run>-<cell>)")
    p.set_defaults(func=cmd_repro)


def cmd_interleave(args: argparse.Namespace) -> int:
    """Runs of two or more set-ups made interleaved (harness.run.interleave), each by its side's command."""
    from attnbench.harness.run import interleave

    out = Path(args.out)
    with bad_input():
        if args.resume:
            if args.side or args.runs is not None or args.run_args:
                raise BadInput("--resume finishes the runs as they were started: give OUT alone")
            plan = interleave.read(out)
        else:
            if args.runs is None:
                raise BadInput("--runs K: how many runs of each side to make (3 or more)")
            sides = interleave.parse_sides(args.side or [])
            plan = interleave.check_new(out, args.runs, sides, args.run_args)
            interleave.dry_runs(plan)
    code = interleave.make(plan, tell, resume=args.resume)
    if code == EXIT_INTERRUPTED:
        tell(f"interrupted: finish with: {command('attnbench', 'interleave', out, '--resume')}")
    if code:
        return code
    names = [name for name, _ in plan.sides]
    tell(
        f"interleaved runs complete: {out} ({plan.runs} runs of each of {', '.join(names)}); compare with: "
        + command("attnbench", "compare", out / names[0], out / names[1], "--fail-above", "median:5%")
    )
    print(out)
    return 0


def add_interleave(sub) -> None:
    p = sub.add_parser(
        "interleave",
        usage="attnbench interleave OUT --runs K --side NAME[=COMMAND] --side NAME[=COMMAND] -- RUN_ARGS",
        help="runs of two or more set-ups, made interleaved (run i of each back to back), for compare",
        description="Make K runs of each side in OUT/SIDE/run1..runK, run i of every side back to back, "
        "with `attnbench run ARGS`; `attnbench compare OUT/A OUT/B` then pairs run i with run i.",
    )
    p.add_argument("out", metavar="OUT", help="the folder of the runs (OUT/SIDE/runI)")
    p.add_argument("--runs", type=int, metavar="K", help="runs of each side (3 or more)")
    p.add_argument(
        "--side",
        action="append",
        metavar="NAME[=COMMAND]",
        help="a side, and the command of its attnbench (default: this one), e.g. "
        "--side old=/envs/torch-2.12/bin/attnbench --side new; repeat for each side",
    )
    p.add_argument("--resume", action="store_true", help="finish the runs in OUT as they were started")
    p.set_defaults(func=cmd_interleave, run_args=[])
