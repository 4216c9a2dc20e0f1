"""The Python API: run a sweep, load runs into pandas, render a report, from a notebook or a script.

Each function is what the matching CLI command does (`attnbench run`, `export`, `report`), without the
command line: errors are exceptions (ValueError naming the bad value, RunDirError for a bad run
directory) instead of one line on stderr. Nothing heavy is imported until a function is called.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from attnbench import page_out
from attnbench.api_keywords import (
    RUN_KINDS,
    SWITCHES,
    executor_options,
    given_as,
    keyword,
    refuse_unknown,
    sweep_given,
    switches,
    typed,
)
from attnbench.bench_sweep import bench_plan, resumed_baseline
from attnbench.interrupted import RunInterrupted, bench_interrupted

PathLike = str | Path


@dataclass(frozen=True)
class Run:
    """A finished (or interrupted) run: its directory and how many cells ended in each status."""

    path: Path
    counts: dict[str, int] = field(default_factory=dict)  # the run's cells by status, a resume's earlier too
    interrupted: bool = False
    resumed: int = 0  # cells already done before a resume
    notes: tuple[str, ...] = ()  # what the run tells its user (the CLI's "note:" lines)
    forecast: Any = None  # dry_run=True: the cells and the estimated time (harness.run.estimate.Forecast)
    missing: int = 0  # the run's cells without a row (a Slurm array task cancelled): warned; resume to finish

    def load(self):
        """This run's rows as a pandas DataFrame (attnbench.load)."""
        return load(self.path)

    def report(self, out: PathLike | None = None, *, baseline: str | None = None):
        """Render this run's report (attnbench.report)."""
        return report(self.path, out=out, baseline=baseline)

    def table(self, columns: Sequence[str] | None = None):
        """This run's rows for a notebook, with readable numbers (attnbench.table)."""
        return table(self.load(), columns)

    def plot(self, kinds: str | Sequence[str] = ("time", "memory"), *, baseline: str | None = None):
        """The report's figures of this run, per device, dtype and pass: time and peak memory vs N unless
        `kinds` names others ('throughput', 'speedup', 'status', and the workload panels' 'varlen',
        'decode', 'speed-accuracy'). A list of matplotlib Figures, shown inline when a notebook cell ends
        with it; saved nowhere (report() writes them with their CSVs)."""
        from attnbench.reports.notebook import figures

        return figures([self.path], kinds, baseline)

    def __str__(self) -> str:
        if self.forecast is not None:  # a dry run: what it would measure, and how long it would take
            return "\n".join([f"run {self.path}: a dry run, nothing measured", *self.forecast.lines()])
        return repr(self)

    def _repr_html_(self) -> str:
        """In a notebook: the run directory, its cells by status, the findings and the fastest variant per N,
        as the report words them; a dry run's forecast."""
        if self.forecast is not None:
            import html

            return f"<pre>{html.escape(str(self))}</pre>"
        from attnbench.reports.notebook import run_html

        return run_html(self.path, self.interrupted, self.resumed)


def run(
    sweep: Any = None,
    *,
    preset: str | None = None,
    config: PathLike | None = None,
    out: PathLike | None = None,
    resume: bool = False,
    redo_drift: bool = False,
    force_resume: bool = False,
    variant_files: Sequence[PathLike] = (),
    progress: bool | None = None,
    dry_run: bool = False,
    rerun: PathLike | None = None,
    cells: str | Sequence[str] | None = None,
    status: str | None = None,
    repro_of: str | None = None,
    executor: str = "local",
    devices: str | None = None,
    ray_address: str | None = None,
    slurm_partition: str | None = None,
    slurm_gpus_per_node: int | None = None,
    slurm_time: str | None = None,
    slurm_array_parallelism: int | None = None,
    slurm_tasks: int | None = None,
    slurm_opt: Sequence[str] | None = None,
    slurm_local: bool = False,
    _race: tuple[str, str] | None = None,  # bench's (fn, baseline): RunRequest.race
    **axes: Any,
) -> Run:
    """Run a sweep into a run directory and return it.

    `sweep` is a harness SweepSpec, a TOML sweep file, or a mapping of axes; axes may also be given as
    keywords, as text or as Python values, over a preset or config file:

        attnbench.run(preset="quick", variants="naive,sdpa", seq_len="256..1024", out="runs/nb")
        attnbench.run({"seq_len": [256, 512], "causal": "both"}, budget_ms=200, out="runs/nb")
        attnbench.run(variants="naive,chunked", mod=["none", "alibi", "softcap:30"], out="runs/mods")
        attnbench.run(out="runs/nb", resume=True)      # finish a run Ctrl-C stopped (RunInterrupted)
        attnbench.run(rerun="runs/old", status="ok", out="runs/again")  # measure a run's cells again

    Every option of `attnbench run` is a keyword, its flag's name with '_' for '-' (`pass_` for --pass, since
    `pass` is Python's keyword; `**{"pass": "fwd"}` works too): the modes (`resume`, `redo_drift`,
    `force_resume`, `dry_run`: nothing measured, the Run's `forecast` says what would be), a rerun's
    cells (`rerun`, `cells`, `status`), where the cells are measured (`executor` "local", "ray" or
    "slurm", with `devices`, `ray_address`, `slurm_*`: docs/scale-out.md), and every axis and setting
    (harness.sweep.settings), as text a flag takes ('256..4096', 'both') or as Python values. `variants`
    takes names, callables, `attnbench.variant(...)`s or a {name: callable} mapping: a callable is shipped
    to the worker processes by value (docs/api.md). The rules are `attnbench run`'s
    (harness.run.request.RunRequest), and errors name the keyword (a wrong type: attnbench.api_keywords).
    `progress`: None (the default) shows one display in a notebook, redrawn in place, and nothing in a
    script; True shows it anywhere (rich's bar and a line per cell on stderr, as `attnbench run`)."""
    from attnbench.harness.run.progress import progress_for
    from attnbench.harness.run.request import RunRequest
    from attnbench.harness.run.runner import run as run_sweep
    from attnbench.harness.sweep.spec import SweepSpec

    scale_out = executor_options(dict(
        devices=devices, ray_address=ray_address, slurm_partition=slurm_partition, slurm_local=slurm_local,
        slurm_gpus_per_node=slurm_gpus_per_node, slurm_time=slurm_time,
        slurm_array_parallelism=slurm_array_parallelism, slurm_tasks=slurm_tasks, slurm_opt=slurm_opt,
    ))  # fmt: skip
    switches(resume=resume, redo_drift=redo_drift, force_resume=force_resume, dry_run=dry_run,
             progress=progress)  # fmt: skip
    typed(executor=executor, preset=preset, status=status, cells=cells, repro_of=repro_of)
    with in_keywords():
        sweep, config, out, rerun, variant_files = _run_paths_given(sweep, config, out, rerun, variant_files)
        spec = sweep if isinstance(sweep, SweepSpec) else None
        given = {**(dict(sweep or {}) if spec is None else {}), **axes}
        _refuse_capabilities(given, GIVE_WITH_FN)  # approximate=, gqa=, takes=: what a function is
        refuse_unknown(given, run)  # slurm_partion=: did you mean slurm_partition?
        given.update({k: _variant_names(given[k], k) for k in ("variants", "variant") if k in given})
        request = RunRequest(
            options=given, preset=preset, config=config, sweep=spec, out=out, resume=resume,
            redo_drift=redo_drift, force_resume=force_resume, dry_run=dry_run,
            variant_files=tuple(str(p) for p in variant_files), rerun=rerun, cells=cells, status=status,
            repro_of=repro_of, executor=executor, executor_options=scale_out, race=_race,
        )  # fmt: skip
        summary = run_sweep(request, progress=progress_for(progress))
    return _finished(summary)


# True while a command line calls this API (`attnbench bench`): its messages keep the flags' names
_AS_FLAGS: ContextVar[bool] = ContextVar("attnbench_as_flags", default=False)


@contextmanager
def as_flags():
    """The API called by a command (`attnbench bench` calls bench): what the harness refuses is said with
    the command's flags (`--out`, `--resume`), as `attnbench run` says it, not respelled (in_keywords)."""
    token = _AS_FLAGS.set(True)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)


@contextmanager
def in_keywords():
    """What the harness refuses (a ValueError naming the CLI's flags), said with this API's keywords: the one
    place the API respells a message. The exception keeps its type (RunDirError, VariantError)."""
    from attnbench.harness.sweep.sweeps import respell

    try:
        yield
    except ValueError as exc:
        said = str(exc) if _AS_FLAGS.get() else respell(str(exc), keyword)
        if said == str(exc):
            raise
        raise type(exc)(said) from None


def as_path(value: Any, keyword: str, *, run: bool = False) -> Path:
    """A path given to this API, a leading `~` expanded as a shell would (taken literally, `out="~/x"` would
    make a folder named `~`); `run`: a Run stands for its directory. TypeError, `keyword` (`out=`) naming
    what was given, for anything else (a number, a list)."""
    if run and isinstance(value, Run):
        return value.path
    if isinstance(value, str) and not value.strip():  # Path("") is ".": the current directory, unasked
        raise ValueError(f"{keyword} is empty: name a path")
    if isinstance(value, (str, os.PathLike)):
        try:
            return Path(value).expanduser()
        except (TypeError, RuntimeError):  # a bytes path; a ~user that names no user
            pass
    kinds = "a path (str or pathlib.Path)" + (" or a Run" if run else "")
    raise TypeError(f"{keyword} takes {kinds}, not {given_as(value)}")


def _run_paths_given(sweep: Any, config: Any, out: Any, rerun: Any, variant_files: Any) -> tuple:
    """run()'s paths, `~` expanded (as_path): the sweep file (given as `sweep` or `config`), out and rerun (a
    Run for either), variant_files. What to measure given as the sweep (run(fn), run("naive")) is refused."""
    sweep_given(sweep)
    if isinstance(sweep, (str, os.PathLike)):
        if config is not None:
            raise ValueError("give the sweep file as `sweep` or as `config`, not both")
        sweep, config = None, sweep
    config, out, rerun = (
        None if value is None else as_path(value, f"{key}=", run=key != "config")
        for key, value in (("config", config), ("out", out), ("rerun", rerun))
    )
    return sweep, config, out, rerun, paths_of(variant_files, "variant_files=")


def paths_of(value: Any, keyword: str, *, run: bool = False) -> list[Path]:
    """as_path of each of a sequence of paths (or of one path given alone)."""
    return [as_path(v, keyword, run=run) for v in (value if isinstance(value, (list, tuple)) else [value])]


def _finished(summary) -> Run:
    """The Run of a harness.run.runner.RunSummary; RunInterrupted where Ctrl-C stopped it (the directory is
    closed, its finished rows kept: the Ctrl-C goes on to the caller, a script's loop of runs included)."""
    ran = Run(
        summary.path, _counts(summary), summary.interrupted, summary.resumed, tuple(summary.notes),
        summary.forecast, summary.missing,
    )  # fmt: skip
    if ran.interrupted:
        raise RunInterrupted(ran, flags=_AS_FLAGS.get())  # `attnbench bench`: said as `attnbench run` says it
    if ran.missing:  # the CLI's "run incomplete" (exit 3), said where a script or a notebook sees it
        again = ", executor='slurm'" if summary.executor == "slurm" else ""
        warnings.warn(
            f"run incomplete: {ran.path} ({ran.missing} of its cells not measured); finish with: "
            f"attnbench.run(out={str(ran.path)!r}, resume=True{again})",
            stacklevel=3,
        )
    return ran


def _counts(summary) -> dict[str, int]:
    """The run's cells by status, read off its rows: every cell it has measured, those a resume found done
    included (the session's own counts, harness.run.runner.RunSummary's, are what this session measured);
    the session's where there are no rows to read (a dry run, a start stopped before meta.json)."""
    from collections import Counter

    from attnbench.results.store import is_run_dir, latest_rows

    if summary.forecast is not None or not is_run_dir(summary.path):
        return dict(summary.counts)
    return dict(Counter(str(row.get("status")) for row in latest_rows(summary.path)))


@dataclass(frozen=True)
class Bench(Run):
    """What attnbench.bench returns: the Run, and the answer a kernel author asked for, printed in a few lines
    (correct per dtype and mask, what it does not support and what would add it, faster or slower than the
    baseline at which N, how time and memory grow: reports.answer)."""

    variant: str = ""
    baseline: str = "sdpa"
    seconds: float | None = None  # the run's wall time, as bench timed it
    # the float64 gate of each workload fn declares (grouped heads, a window, a pack, ...), gated in a worker
    # after the run as `attnbench check` gates them, and the workload keywords it takes undeclared
    declared: Any = None  # reports.answer.Declared

    @cached_property
    def answer(self):
        from attnbench.reports.answer import answer

        if self.forecast is not None:
            raise ValueError(
                "bench(dry_run=True) measured nothing: its forecast says what bench would measure"
            )
        from attnbench.harness.sweep.sweeps import respell

        def spell(text: str) -> str:  # a row's `--max-call-ms 1000`, as this API's `max_call_ms=1000`
            return respell(text, keyword)

        return answer(self.path, self.variant, self.baseline, self.seconds, self.declared, spell=spell)

    def __str__(self) -> str:
        if self.forecast is not None:  # a dry run: what bench would measure, and how long it would take
            said = f"bench {self.variant} against {self.baseline}: a dry run, nothing measured"
            return "\n".join([said, *self.forecast.lines()])
        return self.answer.text()

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:  # a dry run's forecast as Run shows it
        return super()._repr_html_() if self.forecast is not None else self.answer.html()


def bench(fn: Any, *, baseline: Any = None, name: str | None = None, **keywords: Any) -> Bench:
    """The one line a kernel author wants: `fn` against `baseline` over every mask (causal no/yes, key
    padding none/25%) and dtype it supports (float32 and bfloat16, or its own where it supports neither),
    each cell gated against the float64 reference (and once more at N = 100 and 300, forward and
    backward), across a scaling sweep of N (64..512) in three rounds (the `bench` preset); returns a Bench,
    whose answer prints in a few lines: `print(attnbench.bench(fn))` (in a notebook it shows itself). It is
    also the Run (`.report()` for the whole story, `.table()` for every cell).

    `fn` is a callable (with its capabilities from its signature, or `attnbench.variant(fn, ...)`) or a
    registered variant's name, and so is `baseline` (your previous version of fn, say; by default `sdpa`);
    what it cannot do is `unsupported`, with the reason. A kernel that runs packed variable-length batches
    only (its `cu_seqlens=` has no default), or given `lengths=`, is benched on packs of 8 sequences in the
    uniform and long-tail patterns against `sdpa_loop`; one that reads paged K/V caches only, or given
    `page_size=`, on decode steps against contexts of 256..2048 tokens in pages of 16 and 128 against
    `paged_gather`; one that runs sliding windows only (its `window=` has no default), or given `window=`,
    on causal windows against `sdpa` (attnbench.bench_sweep). Every keyword of `run`
    goes through (`out=`, `seq_len=`, `dtype=`, `device=`, `budget_ms=`, `executor=`, ...) over the preset;
    with `seq_k=` (keys apart from the queries: a decode step) causal masking is aligned lower-right, as
    decoding aligns it, beside no mask, unless `causal=` says otherwise (with one query, `seq_len=1`, the two
    are one problem: no mask alone); with an executor that measures cells in parallel
    (`executor="ray"` or `"slurm"`, `devices=`) each cell is visited once (`rounds=1`), and the race is
    judged on its timed calls. `bench(fn, out=..., resume=True)` finishes a bench Ctrl-C stopped
    (RunInterrupted says so) with the run's own sweep and baseline, and answers.
    """
    if "variants" in keywords or "variant" in keywords:
        raise ValueError("bench measures fn against baseline=: give no variants=")
    switches(**{k: keywords[k] for k in SWITCHES + ("progress",) if k in keywords})
    typed(**{k: v for k, v in keywords.items() if k in RUN_KINDS})  # read by bench's plan before run
    for key in ("out", "config", "rerun"):  # read by bench's plan before run: `~` expanded first
        if keywords.get(key) is not None:
            keywords[key] = as_path(keywords[key], f"{key}=", run=key != "config")
    if "variant_files" in keywords:
        keywords["variant_files"] = paths_of(keywords["variant_files"], "variant_files=")
    _refuse_capabilities(keywords, "bench: {k}= says what fn takes, not what to sweep: give it with fn, as "
                         "bench(attnbench.variant(fn, {k}=...))")  # fmt: skip
    if not keywords.get("env"):  # run() starts it for the run's env, once that is read
        from attnbench.harness.workers.isolation import prestart_for

        # the workers' forkserver imports torch beside variant()'s own import of it
        prestart_for(None, pinned=bool(keywords.get("cpu_affinity")), dry_run=bool(keywords.get("dry_run")))
    measured = fn if isinstance(fn, str) else variant(fn, name=name)
    resume = keywords.get("resume", False)  # the run's own sweep and variants, from its meta.json
    if resume:
        given = baseline = resumed_baseline(
            getattr(measured, "name", measured), baseline, keywords.get("out")
        )
    else:
        given, (baseline, keywords) = baseline, bench_plan(measured, baseline, keywords)
    against = baseline if isinstance(baseline, str) else variant(baseline)  # your previous version, say
    who, base = (v if isinstance(v, str) else v.name for v in (measured, against))
    with in_keywords():  # said with --baseline by `attnbench bench`, with baseline= here
        if who == base and given is None:  # bench("sdpa"): the default baseline measured
            raise ValueError(
                f"bench: {who} is bench's default baseline here: race it against --baseline VARIANT"
            )
    if who == base:
        raise ValueError(
            f"bench: fn and baseline= are both named {who!r}: give fn another, bench(fn, name=...)"
        )
    t0, flags = time.perf_counter(), _AS_FLAGS.get()
    if not (resume or keywords.get("rerun")):  # the run's own cells: measured before
        _refuse_none_measured(measured, who, keywords)
    try:
        # the baseline measured only in the cells fn runs: one beside fn's unsupported row races nothing
        raced = {"variants": [measured, against], "preset": "bench", "_race": (who, base)}
        ran = run(**{**({} if resume else raced), **keywords})
    except RunInterrupted as stop:  # said as bench's resume, which answers too
        raise bench_interrupted(stop.run, fn, name, flags) from None
    try:
        declared = None if ran.forecast is not None else _declared(who, ran.path)
    except KeyboardInterrupt:  # in the gate at N = 100 and 300, after the sweep: the same resume answers
        raise bench_interrupted(
            ran, fn, name, flags, stage="the gate at N = 100 and 300, after the sweep"
        ) from None
    took = None if resume else time.perf_counter() - t0  # a resume's time is not the bench's
    same = {f.name: getattr(ran, f.name) for f in fields(Run)}
    return Bench(**same, variant=who, baseline=base, seconds=took, declared=declared)


def _refuse_none_measured(measured: Any, who: str, keywords: dict[str, Any]) -> None:
    """ValueError, before any work, where fn would measure no cell of bench's sweep, every one unsupported
    (a kernel of packs only given page_size= or window=): the reasons of a dry run of fn alone."""
    alone = {**keywords, "dry_run": True, "progress": False}
    plan = run(variants=[measured], **{"preset": "bench", **alone}).forecast
    if plan is not None and plan.nothing_to_measure():  # the rule a run refuses a sweep by, for fn alone
        why = "; ".join(r for r, _ in plan.unsupported.most_common())  # the capability's, commonest first
        raise ValueError(
            f"bench: {who} would measure none of its {plan.cells} cells, every one unsupported: {why}"
        )


def _declared(name: str, run_dir: Path):
    """What bench gates of variant `name` beyond its sweep's cells (reports.answer.Declared): each workload
    it declares and every mask, forward and backward, at check's N, on each device and dtype its run
    measured, in worker processes (check.bench_gates); the workload keywords its function takes undeclared."""
    from attnbench import variants
    from attnbench.harness.tools import check
    from attnbench.reports.answer import Declared

    v, n = variants.get(name), check.SEQ_LEN
    devices, dtypes = check.measured(run_dir, name)
    gated, masks = check.bench_gates(run_dir, name, devices, dtypes)

    def declares(device: str) -> bool:  # a workload of its own, beside causal's top-left cell
        return any(not check.implied(label) for label, _ in check.workload_cells(v, device, dtypes[0], n))

    # a device the run measured on elsewhere (ray, slurm) that this process cannot gate on
    away = tuple((d, why, declares(d)) for d in devices if (why := check.unavailable(v, d)))
    tile = check.TILE_ONLY if check.tile_only(masks, name) else ""  # wrong only where a tile is partial
    return Declared(gated, n, v.undeclared(), away, masks, v.mask_kind(), v.foreign(), check.SEQ_LENS, tile)


@dataclass(frozen=True)
class Profile:
    """What attnbench.profile wrote: its folder (index.html, index.md and the files they link) and the
    error when the torch.profiler part failed. Prints as the top operators; a notebook shows its pages
    linked, the calls and the top operators."""

    path: Path
    error: str = ""

    def __str__(self) -> str:
        from attnbench.reports.profile_page import top_ops_text

        said = f"profile: {self.path / 'index.html'} and {self.path / 'index.md'}"
        return "".join([top_ops_text(self.path), said, f"\nfailed: {self.error}" if self.error else ""])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        from attnbench.reports.profile_page import notebook_html

        return notebook_html(self.path)


def profile(
    fn: Any,
    *,
    out: PathLike | None = None,
    name: str | None = None,
    seconds: float = 5.0,
    rate: int = 100,
    iters: int = 5,
    threads: int | None = None,
    native: bool = False,
    py_spy: bool = True,
    **cell: Any,
) -> Profile:
    """`attnbench profile` from Python: one cell of `fn` looped under py-spy (a flame graph and a speedscope
    profile, when py-spy is installed), then `iters` calls under torch.profiler (a Chrome trace and the
    operators by self time), with index.html beside them in `out` (default reports/out/profile-...).

    `fn` is what `bench` takes: a callable (shipped to the profiled process by value, as `run` ships it),
    `attnbench.variant(fn, ...)` or a registered variant's name. The cell is `run`'s axes as keywords, one
    value each (`seq_len=1024` by default, `device=`, `dtype=`, `causal=`, `pass_=`, ...). Bad input is a
    ValueError naming the keyword, before anything is written; a cell that fails in the profiled process
    is the Profile's `error`, beside what was written."""
    from dataclasses import replace

    from attnbench.harness.tools.profile import CELL_OPTIONS, prepare, profile_cell, removed_if_interrupted
    from attnbench.reports.profile_page import write_pages
    from attnbench.results.whole import write_whole
    from attnbench.variants import shipped

    switches(native=native, py_spy=py_spy)
    typed(name=name, seconds=seconds, rate=rate, iters=iters, threads=threads)
    refuse_unknown(sorted(cell), profile, sorted(o.key for o in CELL_OPTIONS), also=["pass_"])
    given = {("pass" if k == "pass_" else k): v for k, v in cell.items()}
    with in_keywords():
        who = fn if isinstance(fn, str) else _variant_names(variant(fn, name=name), "variants")[0]
        plan = prepare(who, given, threads=threads, seconds=seconds, rate=rate, iters=iters, native=native,
                       use_py_spy=py_spy)  # fmt: skip
        target = page_out.report_dir(
            None if out is None else as_path(out, "out="), plan.default_dir_name(), "profile"
        )
        if target.exists() and any(target.iterdir()):
            raise ValueError(f"--out {str(target)!r} already exists and is not empty; choose another --out")
    files = shipped.files_of([who], [])
    packed = shipped.pack([who])  # a callable of this session: the profiled process loads it from here
    with removed_if_interrupted(target):  # KeyboardInterrupt: what it wrote removed, and said
        if packed is not None:
            target.mkdir(parents=True, exist_ok=True)
            write_whole(target / "variants.pkl", packed)
            files = shipped.files_with(target / "variants.pkl", files)
        result = profile_cell(replace(plan, variant_files=tuple(files)), target)
        write_pages(target)
    return Profile(target, result.error)


def variant(fn: Callable[..., Any], *, name: str | None = None, **capability: Any):
    """A callable as a variant, with its capabilities given inline: the keywords `register` takes
    (`causal=True`, `dtypes=("float32",)`, `backward=False`, ...). Hand it to `run(variants=[...])`.

    Of causal, key_lengths, dropout_p and scale, `fn` is handed only the keywords it takes; what it does
    not declare follows from them (no `causal` parameter: causal cells are `unsupported`, with the reason).
    ValueError naming the keyword: `name=` taken by a built-in variant, a capability it cannot have.
    """
    from attnbench.variants import VariantError
    from attnbench.variants.shipped import inline

    try:
        made = inline(fn, name=name, **capability)
    except VariantError as exc:
        raise ValueError(f"attnbench.variant: {exc}") from None
    _check_free(made.name, "name=")
    return made


# a capability's keyword given to run: where it goes instead
GIVE_WITH_FN = (
    "{k}= says what a variant takes, not what to sweep: give it with the function, as "
    "attnbench.variant(fn, {k}=...)"
)


def _refuse_capabilities(given: Mapping[str, Any], how: str) -> None:
    """ValueError, `how` with the keyword for {k}, where a keyword of a variant's capability (approximate=,
    gqa=, takes=: what a function is) was given as one of a sweep's."""
    misplaced = sorted(set(given) & _capability_only())
    if misplaced:
        raise ValueError(how.format(k=misplaced[0]))


def _capability_only() -> set[str]:
    """The keywords of attnbench.variant (a capability, a declared shape) that are not also sweep keywords."""
    from attnbench.harness.sweep.sweeps import AXIS_KEYS, SETTING_KEYS
    from attnbench.variants.adapt import DECLARED
    from attnbench.variants.registry import Capability

    return (
        ({f.name for f in fields(Capability)} | set(DECLARED)) - set(AXIS_KEYS) - set(SETTING_KEYS) - {"name"}
    )


def _variant_names(value: Any, key: str) -> Any:
    """`variants=` as names: each callable or attnbench.variant(...) (in a list, or a {name: callable}
    mapping) registered under its name, to be shipped to the workers by value (variants.shipped)."""
    from attnbench.variants import VariantError
    from attnbench.variants.registry import add
    from attnbench.variants.shipped import inline

    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        items = list(value.items())
    else:
        items = [(None, value)] if callable(value) else [(None, item) for item in value]
    names = []
    for label, item in items:
        if isinstance(item, str):  # a registered variant keeps its name
            if label not in (None, item):
                raise ValueError(f"{key}=: {label!r}: {item!r} is a registered variant, not a callable")
            names.append(item)
            continue
        try:
            made = inline(item, name=label)
        except VariantError as exc:
            raise ValueError(f"{key}=: {exc}") from None
        _check_free(made.name, f"{key}=")
        _check_apart(made, names, key)
        add(made, replaces=True)  # a later call may name another function so (_check_apart: not this one)
        names.append(made.name)
    return names


def _check_apart(made: Any, names: list[str], key: str) -> None:
    """ValueError where `made` is another function than the variant of its name listed before it (two
    functions of one __name__: the second would replace the first), naming the ways to tell them apart."""
    from attnbench.variants import all_variants

    earlier = all_variants().get(made.name) if made.name in names else None
    if earlier is not None and earlier.fn is not made.fn and _function(earlier) is not _function(made):
        raise ValueError(
            f"{key}=: two functions share the name {made.name!r}: give them names apart, "
            f"{key}={{'v1': fn_v1, 'v2': fn}} or attnbench.variant(fn, name='v2')"
        )


def _function(v: Any) -> Any:
    """The user's function of a variant (variants.convention.Keywords hands it only the keywords it takes)."""
    return getattr(v.fn, "fn", v.fn)


def _check_free(name: str, keyword: str) -> None:
    """ValueError naming `keyword` when `name` is taken by a variant that is not one defined at run time
    (a built-in, a plug-in file's, an entry point's): yours would be measured under another's name."""
    from attnbench.variants import all_variants
    from attnbench.variants.origin import by_value

    old = all_variants().get(name)
    if old is not None and not by_value(old.source):
        whose = "a built-in variant" if old.source == "builtin" else f"the variant of {old.source}"
        raise ValueError(f"{keyword} {name!r} is the name of {whose}; give yours another name")


def load(*run_dirs: PathLike | Run | Sequence[PathLike | Run]):
    """The given runs (run directories or Runs, or lists of them) as one typed pandas DataFrame, a row per
    cell of each run (docs/results-schema.md). A cell measured more than once (`--resume --redo-drift`
    appends a row) is its last row, with `measured_times` and `medians_spread` (its ok medians' largest over
    smallest); where an earlier answer moved beyond the cell's own spread other than as the speed probe saw
    the machine move, it is flagged `drift`, and `drift_reason` names its medians in order."""
    from attnbench.results import load as load_runs

    if not run_dirs:  # an empty frame would read as runs that measured nothing
        raise TypeError("load() takes one or more run directories or Runs: attnbench.load('runs/mine')")
    return load_runs(*_run_paths(run_dirs, "load: each run"))


def _run_paths(args: Sequence[Any], keyword: str) -> list[Path]:
    """Run directories given as paths, Runs, or lists of them, as paths (as_path)."""
    return [p for arg in args for p in paths_of(arg, keyword, run=True)]


def table(df: Any, columns: Sequence[str] | None = None):
    """attnbench.load's frame for a notebook: a pandas Styler of the run, variant, the axes that vary and the
    main numbers (or `columns`), with readable formats: rel_err as 3.0e-07, bytes as 96.0 KiB, rel_iqr as a
    percentage (pandas shows a nullable float such as 3e-07 as 0.0). The frame and its dtypes are unchanged;
    `.data` is the frame shown. `df` may be a run instead (its directory, or a Run): its rows are loaded;
    `columns` a list of names, or one name or a comma list of them as text ('variant,time_ms_median')."""
    from attnbench.reports.notebook import styled

    if isinstance(df, (str, os.PathLike, Run)):
        df = load(df)
    elif not _is_frame(df):
        raise TypeError(
            f"table takes attnbench.load()'s DataFrame, a run directory or a Run, not {type(df).__name__}"
        )
    if isinstance(columns, str):
        columns = [c.strip() for c in columns.split(",") if c.strip()]
    return styled(df, columns)


def _is_frame(value: Any) -> bool:
    """Whether `value` is a pandas DataFrame (pandas imported only where one may be)."""
    import sys

    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, pd.DataFrame)


def report(*run_dirs: PathLike | Run, out: PathLike | None = None, baseline: str | None = None):
    """Fits, figures, README.md and report.html of one or more runs; returns the written report.

    `out` defaults to reports/out/<run ids>; a run directory, a file, a page's name (x.html) or the folder of
    the runs is refused as `out`. Written whole or not at all: Ctrl-C or a failure leaves `out` as it was."""
    dirs = _run_paths(run_dirs, "report: each run")
    out = None if out is None else as_path(out, "out=")
    with in_keywords():
        return write_report(dirs, out, baseline)


def write_report(run_dirs: Sequence[PathLike | Run], out: PathLike | None, baseline: str | None):
    """report(), for `attnbench report` too (its errors name --out)."""
    from attnbench.reports import rendered_from
    from attnbench.reports.render import prepare, refuse_empty, render
    from attnbench.reports.style import slug
    from attnbench.results.whole import written_whole

    dirs = [str(d.path if isinstance(d, Run) else d) for d in run_dirs]
    inputs = refuse_empty(prepare(dirs, baseline))
    target = page_out.report_dir(out, slug(*inputs.metas) if inputs.metas else "report")
    before = rendered_from.files(target)  # an earlier report's files there: those not written again go
    with written_whole(target, "the report") as partial:  # Ctrl-C or a failure leaves `target` as it was
        written = render(inputs, target, into=partial)
    rendered_from.remove_left(target, before)
    return written
