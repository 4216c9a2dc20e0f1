"""Run a sweep: expand cells, send each to an isolated worker, append every row as soon as it exists.

Order of events: check the run modes (harness.run.request.RunRequest: the one place, for every front end)
-> validate everything (sweep, variants, devices; a resume: its set-up against the run's) -> create the
run directory -> fingerprint and calibrate (in a worker) -> meta.json -> the plan of visits
(harness.run.plan) carried out by the executor: for each visit, capability check, OOM / timeout skip-ahead,
memory guard, measure in the worker -> rows.jsonl. Ctrl-C stops between or during cells with every
finished row kept; --resume takes in what earlier sessions left outside rows.jsonl (executors' `resume`),
then finishes the remaining cells.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnbench import variants
from attnbench.harness.measure import fingerprint, timing
from attnbench.harness.measure.guard import MeasuredPeaks
from attnbench.harness.measure.outcomes import left_behind
from attnbench.harness.run import estimate, executor_choice, executors, neighbours, plan
from attnbench.harness.run.progress import Progress
from attnbench.harness.run.request import RunRequest
from attnbench.harness.sweep.affinity import check_cpu_affinity, warn_threads
from attnbench.harness.sweep.spec import CellSpec, SweepSpec, wide_windows
from attnbench.harness.workers import interrupts, isolation
from attnbench.harness.workers.cellrunner import CellRunner, SkipAhead, precheck
from attnbench.harness.workers.isolation import WorkerDied, WorkerTimeout
from attnbench.results import RunWriter, drift, integrity, pytest_benchmark
from attnbench.results.formulas import where_key
from attnbench.results.load import tile_failed, tile_sentences
from attnbench.results.rowfile import RowWarning
from attnbench.results.store import (
    SHIPPED,
    is_run_dir,
    is_unstarted,
    no_room,
    read_meta,
    read_rows,
    shard_rows_to_add,
)
from attnbench.results.visits import skipped_lines as journal_skipped
from attnbench.results.whole import write_whole
from attnbench.variants import shipped

DEFAULT_RUNS_DIR = Path("runs")
NUMERICS_FILE = "numerics.json"
NUMERICS_EXTRA = (
    "unstable_softmax",
)  # left out of sweeps, kept in the probe to show why the max is subtracted


@dataclass
class RunSummary:
    path: Path
    counts: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    resumed: int = 0
    collected: int = 0  # rows gathered from array tasks' shards by a resume (harness.run.executors.slurm)
    notes: list[str] = field(default_factory=list)  # what the command tells the user (duplicates, lost tasks)
    # the executor this session measured with (its finish command: slurm's is collect)
    executor: str = "local"
    missing: int = 0  # the run's cells with no row when it ended: an array task cancelled, a Ctrl-C
    running: list[str] = field(default_factory=list)  # Slurm jobs still queued or running when stopped
    forecast: estimate.Forecast | None = (
        None  # the cells left and their estimated time (dry_run: nothing else)
    )


def default_variants() -> list[str]:
    return [name for name, v in variants.all_variants().items() if v.cap.default]


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + socket.gethostname().split(".")[0]


def prepare(sweep: SweepSpec, variant_files: list[str]) -> list[str]:
    """Everything checked before any directory is created: variant files, names, devices and CPUs present."""
    check_cpu_affinity(sweep.settings.cpu_affinity)
    for path in variant_files:
        variants.load_variant_file(path)
    for said in fingerprint.env_set_by_imports(variant_files, variants.registry.ENV_CHANGED):
        print(f"attnbench: warning: {said}", file=sys.stderr, flush=True)
    names = list(sweep.variants) or default_variants()
    variants.resolve(names)  # names every unknown variant at once
    if "cuda" in sweep.devices:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but torch sees no CUDA device on this machine")
    warn_threads(sweep.settings.threads, sweep.settings.cpu_affinity)
    return names


@dataclass
class _Start:
    """What a run measures, settled before anything is written: a new run's from the caller, a resumed
    run's from its meta.json (with how this machine's set-up differs from the run's)."""

    sweep: SweepSpec
    names: list[str]  # the variants
    variant_files: list[str]  # absolute paths
    chosen: list[str] | None = None  # the cell_ids to measure (a rerun: meta.json `cells`); None: all
    resume: bool = False
    redo_drift: bool = False
    identity: dict[str, Any] = field(default_factory=dict)  # a resume: fingerprint.resume_identity here
    differs: dict[str, list[Any]] = field(default_factory=dict)  # ... and how it differs from the run's
    rerun_of: dict[str, Any] | None = None  # a rerun: the run its cells were chosen from
    repro_of: str | None = None  # a repro: the run_id whose cell it measures again (RunRequest.repro_of)
    executor: str | None = None  # a resume: the executor the run was started with (meta.json `executor`)
    executor_options: dict[str, Any] = field(default_factory=dict)  # ... and its options, as given then
    cell_timeout: float | None = None  # a resume's --cell-timeout, given again: the sweep's settings hold it

    def cells(self) -> list[CellSpec]:
        """The run's cells, in order (the chosen ones of a rerun)."""
        cells = self.sweep.cells(self.names)
        if self.chosen is not None:
            keep = set(self.chosen)
            cells = [c for c in cells if c.cell_id in keep]
        return cells

    def todo(self, cells: list[CellSpec], done: dict[str, dict[str, Any]]) -> list[CellSpec]:
        """The cells still to measure: those without a row in `done`, and with redo_drift those whose row
        was measured while the machine drifted (results.drift; the new row is appended and replaces the old
        one when the run is loaded)."""
        redo = drift.drifted_cells(list(done.values())) if self.redo_drift else set()
        return [c for c in cells if c.cell_id not in done or c.cell_id in redo]

    def resume_record(self) -> dict[str, Any]:
        """This resume's line of resumes.jsonl: when, where, and how its set-up differed."""
        return {
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "forced": bool(self.differs),
            "redo_drift": self.redo_drift,  # its cells measured again have a second row (results.integrity)
            "fingerprint": self.identity,
            "fingerprint_diff": self.differs,
            "cell_timeout": self.sweep.settings.cell_timeout,  # this session's (--cell-timeout, given again)
        }


def _fresh(
    sweep: SweepSpec,
    variant_files: Sequence[str | Path],
    only: Sequence[CellSpec] | None,
    race: tuple[str, str] | None = None,
) -> _Start:
    files = [str(Path(p).resolve()) for p in variant_files]
    names = prepare(sweep, files)
    if only is not None:  # the chosen cells' variants, whether or not they are default ones now
        names = list(dict.fromkeys(c.variant for c in only))
        variants.resolve(names)
    start = _Start(sweep, names, files, chosen=None if only is None else [c.cell_id for c in only])
    if race is not None:  # kept in meta.json's `cells`, which a resume measures
        start.chosen = raced(start.cells(), *race)
    return start


def raced(cells: Sequence[CellSpec], fn: str, baseline: str) -> list[str]:
    """The cell_ids of attnbench.bench's race of fn against baseline: every cell of fn, and the baseline's
    only where fn runs, decided before the sweep as each cell's row is (cellrunner.precheck: fn's
    capability check), not by running it. A baseline's row beside fn's `unsupported` one races nothing:
    measuring it only cost the caller time; fn's own row stays, and says why it did not run."""
    rows = {c.rank_key: precheck(c, SkipAhead()) for c in cells if c.variant == fn}
    refused = {key for key, row in rows.items() if row is not None and row["status"] == "unsupported"}
    return [c.cell_id for c in cells if c.variant != baseline or c.rank_key not in refused]


def _resumed(out: str | Path, force_resume: bool, redo_drift: bool) -> _Start:
    meta = read_meta(out)
    imported = pytest_benchmark.not_resumable(meta, out)
    if imported:  # before its set-up and its variants, which a pytest session's are not a run's
        raise ValueError(imported)
    sweep = SweepSpec.from_meta(meta["sweep"], Path(out) / "meta.json")
    current = fingerprint.resume_identity(dict(sweep.settings.env))
    differs = fingerprint.identity_diff(fingerprint.recorded_identity(meta), current)
    if differs and not force_resume:
        raise ValueError(
            f"--resume of {str(out)!r} refused: it was started on another set-up "
            f"({fingerprint.diff_text(differs)}), and its rows would mix the two; "
            "pass --force-resume to finish it anyway (the difference is logged in resumes.jsonl)"
        )
    files = shipped.relocated(meta.get("variant_files", []), Path(out) / SHIPPED)
    names = prepare(sweep, files)  # loads the variant files and checks the CPUs and devices, as for a new run
    names = meta.get("variants", names)
    resumed = _Start(sweep, names, files, meta.get("cells"), True, redo_drift, current, differs)
    resumed.executor, resumed.executor_options = meta.get("executor"), meta.get("executor_options") or {}
    return resumed


def run(
    request: RunRequest,
    progress: Progress | None = None,
    on_forecast: Callable[[estimate.Forecast], None] | None = None,
) -> RunSummary:
    """Run (or resume) what `request` asks for into a run directory; returns where it went and the status
    counts. Every rule of the run modes is the request's (harness.run.request: checked before anything is
    read or written); ValueError names the options as the CLI's flags (a front end respells them).

    A rerun (request.rerun) measures the chosen cells of an earlier run into a new one; meta.json keeps
    their ids as `cells` (a resume runs those again) and `rerun_of`, the run they were chosen from. The
    request's executor names where the cells are measured (harness.run.executors); whichever it is, rows
    come back here and this function alone writes them.

    A resume on another set-up than the run's (fingerprint.RESUME_KEYS: hosts, torch, attnbench commit,
    allocator environment) is refused with a ValueError naming the difference, before anything is
    written, unless request.force_resume; every resume is logged in the run's resumes.jsonl with its
    difference.

    A dry run (request.dry_run) checks all of that and returns the summary's `forecast`
    (harness.run.estimate: the cells left, those unsupported here or that the memory guard would skip, the
    estimated time) without starting a worker or writing anything. Otherwise `on_forecast` is handed the
    same forecast once the cells left are known, before the first is measured (the CLI warns there about
    a long sweep).

    Ctrl-C (KeyboardInterrupt in the main thread) ends the run with every finished row kept, its worker
    processes killed and the directory closed, and the summary says `interrupted`; so does one that comes
    before anything was written where the run directory is there already (a resume's, an unstarted one).
    Before that it is raised. A second Ctrl-C does not cut the stopping run short (interrupts.first_only).
    """
    out, resume = request.out, request.resume
    path = Path(out) if out is not None else DEFAULT_RUNS_DIR / new_run_id()
    # a second Ctrl-C does not cut the stopping run's cleanup short; the executor's session ends with the run
    with interrupts.first_only(), contextlib.ExitStack() as held:
        try:
            start, chosen_executor, packed = _checked(request)
            done = {r["cell_id"]: r for r in read_rows(path)} if resume else {}
            if request.dry_run:  # it measures nothing, so it announces nothing; it says who measures now
                _warn_journal(path, resume)
                beside = tuple(int(e.get("pid", 0)) for e in neighbours.measuring())
                told = dataclasses.replace(forecast(start, done), beside=beside, notes=_notes(start))
                return RunSummary(path=path, forecast=told)
            cells = complete_cells(path, forecast(start, done)) if resume else None
            empty = None if resume else forecast(start, done).nothing_to_measure()
            if empty:  # a new run whose every cell the plan knows is unsupported: refused, nothing started
                raise ValueError(empty)
            if cells is not None:  # no worker started, nothing written (the CLI says so before it gets here)
                _warn_journal(path, resume)
                return RunSummary(path=path, resumed=cells, notes=[f"nothing to resume: {path} is complete"])
            # what the executor needs that can still fail (a private Ray cluster), before anything is written
            held.enter_context(chosen_executor.session())
            fresh = not path.exists()
            writer = RunWriter(path, resume=resume)
        except KeyboardInterrupt:
            # nothing measured or written yet: said as a stopped start where the directory is there
            if request.dry_run or not (is_run_dir(path) if resume else is_unstarted(path)):
                raise
            return RunSummary(path=path, interrupted=True)
        return _write(request, start, chosen_executor, packed, writer, fresh, progress, on_forecast)


def _checked(request: RunRequest) -> tuple[_Start, executors.Executor, Any]:
    """What the run measures, where, and the callables it ships, all checked before anything is written (a
    resume's set-up against its run's); the workers' forkserver started meanwhile."""
    got = request.resolve()
    if got.sweep is not None:  # the forkserver's torch import beside this process's own
        s = got.sweep.settings
        isolation.prestart_for(dict(s.env), pinned=bool(s.cpu_affinity), dry_run=request.dry_run)
    if request.resume:
        start = _resumed(request.out, request.force_resume, request.redo_drift)
        if got.cell_timeout is not None:  # when a cell is given up on, never what a row measures
            settings = dataclasses.replace(start.sweep.settings, cell_timeout=got.cell_timeout)
            start.sweep = dataclasses.replace(start.sweep, settings=settings)
            start.cell_timeout = got.cell_timeout
    else:
        start = _fresh(got.sweep, got.variant_files, got.only, request.race)
        start.rerun_of, start.repro_of = got.rerun_of, request.repro_of
    options = got.executor_options
    if request.resume and start.executor == request.executor:
        # the options the run was started with, those given again replacing theirs (docs/scale-out.md)
        given = {k: v for k, v in request.executor_options.items() if v is not None and v is not False}
        options = executor_choice.options(request.executor, {**start.executor_options, **given})
    checked = start.sweep if request.check_executor else None  # None: built, its cluster not asked
    chosen_executor = executor_choice.chosen_executor(request.executor, options, checked)
    plan.check(start.sweep.settings, request.executor, chosen_executor.ordered)
    # every variant measured must reach the workers: the files of those a file registered, and those
    # defined in a notebook or a script by value, pickled now, so that one that cannot be is refused before
    # anything is written (a resume's are in its variant files already)
    packed = None
    if not request.resume:
        start.variant_files = shipped.files_of(start.names, start.variant_files)
        packed = shipped.pack(start.names)
    return start, chosen_executor, packed


def _write(
    request: RunRequest,
    start: _Start,
    chosen_executor: executors.Executor,
    packed: Any,
    writer: RunWriter,
    fresh: bool,
    progress: Progress | None,
    on_forecast: Callable[[estimate.Forecast], None] | None,
) -> RunSummary:
    """The run itself, into the directory `writer` holds: its worker started, meta.json and the numerics
    probe (a new run), the cells measured. A Ctrl-C anywhere here ends it with every finished row kept and the
    directory closed (summary.interrupted); the closing itself is not cut short by one (interrupts.held)."""
    path = writer.path
    progress = progress or Progress(enabled=False)
    summary = RunSummary(path=path, executor=chosen_executor.name)
    local: CellRunner | None = None
    beside = neighbours.alongside()  # another run measuring on this machine now: said before this one starts
    for line in ([beside] if beside else []) + list(_notes(start)):  # and a window as wide as its cells' keys
        progress.message(line)
    announced = neighbours.announce(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if packed is not None:  # loaded as a variant file by the workers, a resume and a rerun
            write_whole(path / SHIPPED, packed)
            start.variant_files = shipped.files_with(path / SHIPPED, start.variant_files)
        if request.resume:  # under the lock: the session that adds rows says when, where and how it differed
            writer.log_resume(start.resume_record())
        if on_forecast is not None:  # before a worker starts: a warning the user can act on at once
            on_forecast(forecast(start, writer.done))
        logs = f"log: {path / 'worker.log'}"
        if chosen_executor.name != "local":  # it calibrates and probes; the executor's own workers measure
            logs += f"; the cells' {chosen_executor.name} workers log to {path / 'worker-*.log'}"
        progress.message(f"starting a worker process ({logs})")
        local = _start_worker(start, path)
        if not request.resume:
            summary.notes += _write_meta(writer, start, local, progress, request)
        else:
            summary.notes += _finish_probe(writer, start, local, progress)
        _measure(start, writer, summary, progress, local, chosen_executor, announced.touch)
    except KeyboardInterrupt:  # in the probe or the sweep: the cells it planned and left unmeasured counted
        summary.interrupted = True
        summary.missing = _unmeasured(start.cells(), writer)
    except variants.VariantError:
        if fresh and local is None:  # the first worker could not load them: no row, no meta.json yet
            shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        try:
            with interrupts.held():  # a Ctrl-C while closing comes after it: no worker is left half-killed
                progress.stop()
                writer.close()
                if local is not None:
                    local.close(kill=summary.interrupted)
        except KeyboardInterrupt:  # the first Ctrl-C came while a finished run was closing
            summary.interrupted = True
        finally:  # whatever stopped it: this run no longer measures, and says who measured beside it
            # a start stopped before meta.json measured nothing beside them: its folder, reused by the
            # same command, is left without their record, and its user without a note on its cells
            started = is_run_dir(path)
            beside_notes = announced.end(path if started else None)
            summary.notes += beside_notes if started else []
        summary.notes += [
            f"{what}: this run's numbers cannot be trusted" for what in integrity.changed_files(path)
        ]
    return summary


def _start_worker(start: _Start, path: Path) -> CellRunner:
    """The run's local worker. A worker that dies starting is said in one line where it can be: a full disk
    (it cannot write its log, so it cannot say so), or variants it cannot load that this process did (a
    callable pickled by reference to a module that imports otherwise in a fresh process)."""
    try:
        return CellRunner(_worker_config(start, path), start.sweep.settings)
    except WorkerDied as died:
        full = no_room(path / "worker.log", path)
        if full is not None:
            raise full from None
        said = str(died)
        if "VariantError: " not in said:
            raise
        why = said.rsplit("VariantError: ", 1)[1].split(" | ")[0]
        if f"{SHIPPED}' failed to load: " in why:  # this session's callables, pickled into the run
            why = why.split(" failed to load: ", 1)[1] + (
                " (a function defined in a module reaches the workers by reference: they import its module"
                " afresh)"
            )
        raise variants.VariantError(f"the worker process cannot load the variants: {why}") from None


def _notes(start: _Start) -> tuple[str, ...]:
    """What a run and its dry run say of its cells before they start: a window as wide as their keys."""
    return tuple(wide_windows(start.cells()))


def forecast(start: _Start, done: dict[str, dict[str, Any]]) -> estimate.Forecast:
    """What becomes of the run's cells without a row in `done` (harness.run.estimate), decided here in the
    parent as the run would: the capability check of cellrunner.precheck, and the memory guard against this
    machine's free memory for CPU cells (a GPU's is read in its worker, which a dry run does not start: its
    cells count as measured)."""
    from attnbench.harness.workers.worker import free_memory

    cells = start.cells()
    todo = start.todo(cells, done)

    def unsupported(spec: CellSpec) -> str | None:
        row = precheck(spec, SkipAhead())
        return None if row is None else row.get("message") or row["status"]

    return estimate.forecast(
        todo,
        start.sweep.settings,
        unsupported=unsupported,
        free_memory=lambda device: free_memory(device) if device == "cpu" else None,
        memory_class=lambda name: variants.get(name).cap.memory,
        varlen_work=lambda name: variants.get(name).cap.varlen or "masked",
        compile_key=lambda spec: estimate.compile_key(variants.get(spec.variant).cap.compiles, spec),
        done=len(cells) - len(todo),
        peaks=MeasuredPeaks(list(done.values())).of,
    )


def _worker_config(start: _Start, path: Path) -> dict[str, Any]:
    """What every worker process of the run is started with (Plan.config)."""
    settings = start.sweep.settings
    return {
        "threads": settings.threads,
        "env": dict(settings.env),
        "variant_files": start.variant_files,
        "cpu_affinity": list(settings.cpu_affinity),
        "log_path": str(path / "worker.log"),
        # a resume's --cell-timeout, for array tasks, which read the other settings from meta.json
        **({"cell_timeout": start.cell_timeout} if start.cell_timeout is not None else {}),
    }


def _write_meta(
    writer: RunWriter, start: _Start, local: CellRunner, progress: Progress, request: RunRequest
) -> list[str]:
    """A new run's meta.json (fingerprint and calibration from the worker), then its numerics probe; the
    notes for the user (a variant whose probe left something behind)."""
    meta = _meta(start.sweep, start.names, start.variant_files, local, progress, request.executor)
    # the executor's options as given (--slurm-partition ...), which a resume with the same executor reuses
    meta["executor_options"] = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in request.executor_options.items()
        if value is not None and value is not False
    }
    # how many cells the run sets out to measure: a report of a run stopped early says how many it lacks
    meta["planned_cells"] = len({c.cell_id for c in start.cells()})
    if start.chosen is not None:
        meta["cells"] = start.chosen
    if start.rerun_of is not None:
        meta["rerun_of"] = start.rerun_of
    if start.repro_of is not None:  # `history add FOLDER` leaves it out of the series (results.history)
        meta["repro_of"] = str(start.repro_of).strip()
    writer.write_meta(meta)
    progress.message("numerics probe: every variant against float64 with q scaled by 1, 10, 100")
    numerics = _numerics(start.sweep, start.names, local)
    writer.write_json(NUMERICS_FILE, numerics)
    return _probe_notes(numerics["probe"], numerics["tiles"])


def _probe_notes(records: list[dict[str, Any]], tiles: list[dict[str, Any]] = ()) -> list[str]:
    """One note per thing the numerics probe found left behind (torch's global state changed, a process left
    running), naming the variants whose records say it (the worker blamed them; the variants after one that
    changed the state were probed in a fresh worker); one per variant whose probe timed out or crashed
    its worker (the probe went on without it); and one per variant wrong at N = TILE_N (`tiles`)."""
    said: dict[str, list[str]] = {}
    for record in records:
        message = str(record.get("message") or "")
        if left_behind(message) and record["variant"] not in said.get(message, []):
            said.setdefault(message, []).append(record["variant"])
    notes = [f"numerics probe: {', '.join(names)}: {message} (records marked error)"
             for message, names in said.items()]  # fmt: skip
    for record in records:
        if record.get("status") in ("timeout", "crashed"):
            what = f"{record['variant']}: {record['status']} ({record.get('message')})"
            notes.append(
                f"numerics probe: {what}; the probe went on without it, and its cells are measured as usual"
            )
    return notes + [f"numerics probe: {said}" for said in tile_sentences(tile_failed(tiles, records))]


def _measure(
    start: _Start,
    writer: RunWriter,
    summary: RunSummary,
    progress: Progress,
    local: CellRunner,
    chosen: executors.Executor,
    on_written: Callable[[], None] = lambda: None,
) -> None:
    """The cells left, measured by the chosen executor; every row written here as it comes back (then
    `on_written`: neighbours.Announced.touch). A resume first takes in what earlier sessions left outside
    rows.jsonl."""
    path = writer.path
    run_id = read_meta(path)["run_id"]
    if start.resume:
        summary.notes += _take_left_rows(path, writer, run_id, summary, progress)
    cells = start.cells()
    todo = start.todo(cells, writer.done)
    summary.resumed = len(cells) - len(todo)
    progress.start(total=len(todo), done_before=summary.resumed, run_dir=path)

    def on_row(row: dict[str, Any]) -> None:
        row["run_id"] = run_id
        with interrupts.held():  # a finished cell's row is written whole, then Ctrl-C stops the run
            writer.append(row)
            summary.counts[row["status"]] = summary.counts.get(row["status"], 0) + 1
        on_written()
        progress.cell_done(row)

    order = plan.for_run(path, todo, start.sweep.settings, set(writer.done), say=progress.message)
    job = executors.Plan(
        sweep=start.sweep,
        cells=todo,
        config=local.config,  # the run's worker config (_worker_config), which its own worker started with
        run_dir=path,
        done=list(writer.done.values()),
        local=local,
        described=set(read_meta(path).get("devices", {})),
        order=order,
    )
    try:
        chosen.run(job, on_row, writer.add_device)
    except executors.CellsLeft as exc:  # the run ends incomplete (below), saying why
        summary.notes.append(str(exc))
    finally:
        order.close()
        summary.notes += chosen.notes
        summary.running = list(chosen.running)
    # a cell can end without a row where its array task was cancelled (scancel, a time limit) or the
    # executor could measure no more (CellsLeft): the run is then incomplete, and says so (its finish
    # command measures the rest); a Ctrl-C's are counted as the run stops (_write)
    summary.missing = _unmeasured(cells, writer)


def _unmeasured(cells: list[CellSpec], writer: RunWriter) -> int:
    """How many of the run's planned cells have no row."""
    return sum(1 for c in cells if c.cell_id not in writer.done)


def _take_left_rows(path: Path, writer: RunWriter, run_id: str, summary: RunSummary, progress) -> list[str]:
    """What earlier sessions left outside rows.jsonl (array tasks' shards, --executor slurm), written into
    it; the notes for the user. Every executor is asked, not only this session's: one run's sessions may
    use different executors (`attnbench collect RUN --executor local` finishes a Slurm run here), and
    meta.json names only the first."""

    def on_row(row: dict[str, Any]) -> None:
        row["run_id"] = run_id
        with interrupts.held():
            writer.append(row)
            summary.collected += 1

    notes = []
    for name in executors.EXECUTORS:
        executor = executors.get(name)
        try:
            notes += executor.resume(path, dict(writer.done), on_row, writer.add_device, progress.message)
        except KeyboardInterrupt:  # stopped while it waits for array tasks: the line names them
            summary.running = list(executor.running)
            raise
    return notes


def _meta(
    sweep: SweepSpec,
    names: list[str],
    variant_files: list[str],
    local: CellRunner,
    progress,
    executor: str,
) -> dict[str, Any]:
    fp = local.request({"op": "fingerprint"}, timeout=120)["value"]
    fp["sweep_env"] = " ".join(f"{k}={v}" for k, v in sweep.settings.env) or "none"
    calibration, devices = {}, {}
    for device in sweep.devices:
        progress.message(
            f"calibrating {device}: matmul throughput ({', '.join(sweep.dtypes)}) and copy bandwidth"
        )
        record = local.describe(device, list(sweep.dtypes))
        calibration[device] = record["calibration"]
        devices[where_key(record["host"], device, record.get("gpu_uuid"))] = record
    return {
        "run_id": new_run_id(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sweep": sweep.to_dict(),
        "variants": names,
        # what reports know of each variant (memory class, description, source) without loading it again
        "variant_capabilities": {name: variants.get(name).record() for name in names},
        "variant_files": variant_files,
        "fingerprint": fp,
        "executor": executor,
        "calibration": calibration,
        # each device that measured cells, with its own calibration (ARCHITECTURE.md, "Where a row was
        # measured"); executors that reach other devices add theirs as they first use them
        "devices": devices,
        "worker_threads": local.threads,
        # timing hygiene: the collector is off while samples are taken (and the worker's imports frozen out
        # of its collections, timing.freeze_imports); the CPUs asked for and those the
        # worker reported after pinning itself (null asked: the OS's choice, all of them)
        "gc_disabled": timing.GC_DISABLED,
        "gc_frozen_objects": local.gc_frozen,
        "cpu_affinity": {
            "requested": list(sweep.settings.cpu_affinity) or None,
            "worker": local.cpu_affinity,
        },
        "cwd": os.getcwd(),
    }


def _finish_probe(writer: RunWriter, start: _Start, local: CellRunner, progress: Progress) -> list[str]:
    """A resume measures the numerics probe when the run's first session stopped (Ctrl-C, a full disk)
    before numerics.json was written whole; the probe's notes, as _write_meta's."""
    if probe_written(writer.path):
        return []
    progress.message("numerics probe: missing or torn in this run; measuring it now")
    (writer.path / NUMERICS_FILE).unlink(missing_ok=True)
    numerics = _numerics(start.sweep, start.names, local)
    writer.write_json(NUMERICS_FILE, numerics)
    return _probe_notes(numerics["probe"], numerics["tiles"])


def _warn_journal(path: Path, resume: bool) -> None:
    """A resume that plans no visit (a dry run, a complete run) warns of the lines of visits.jsonl it would
    skip, as of rows.jsonl's; one that plans reads the journal and warns there (harness.run.plan)."""
    for said in journal_skipped(path) if resume else ():
        warnings.warn(said, RowWarning, 3)


def complete_cells(path: Path, planned: estimate.Forecast) -> int | None:
    """The number of cells of the run at `path` where a resume has nothing left to do (every cell `planned`
    has its row, no shard holds a row to merge or to name twice, its numerics probe is written), else None:
    `run --resume`, `collect` and attnbench.run(resume=True) then start no worker and write nothing."""
    if planned.done < planned.cells or not probe_written(path):
        return None
    shard_rows, twice = shard_rows_to_add(path, {r["cell_id"]: r for r in read_rows(path)})
    return None if shard_rows or twice else planned.cells


def probe_written(path: Path) -> bool:
    """Whether the run's numerics.json is there and whole (an object with its `probe` list)."""
    try:
        value = json.loads((path / NUMERICS_FILE).read_text())
    except (OSError, ValueError):  # missing, unreadable, or torn JSON (UnicodeDecodeError is a ValueError)
        return False
    return isinstance(value, dict) and isinstance(value.get("probe"), list)


def _numerics(sweep: SweepSpec, names: list[str], local: CellRunner) -> dict[str, Any]:
    """The probe, one variant per request so that a crashing or hanging variant costs only its own records;
    with it, the run's variants gated at N = TILE_N under the sweep's masks (`tiles`: numerics.tiles)."""
    probed = names + [n for n in NUMERICS_EXTRA if n not in names]
    timeout = min(sweep.settings.cell_timeout, 300)
    masks = sorted({bool(causal) for causal in sweep.causal})  # lower-right is causal, and top-left at N x N
    records = local.numerics(probed, sweep.devices, sweep.dtypes, timeout, dict.fromkeys(names, masks))
    value: dict[str, Any] = {
        "probe": [r for r in records if "seq_len" not in r],
        "tiles": [r for r in records if "seq_len" in r],
    }
    try:
        value["example_weights"] = local.request({"op": "example_weights"}, timeout=120)["value"]
    except (WorkerTimeout, WorkerDied):
        pass
    return value
