"""pytest-benchmark integration: the variant registry times a small shape grid as parametrised benchmarks.

    pytest benchmarks/ --benchmark-only [--benchmark-json out.json] [--attn-seq-len 512,2048 ...]

Loaded through its `pytest11` entry point (`pip install attnbench`: every pytest session of a project
that has attnbench installed) and by `benchmarks/conftest.py` (a checkout without the install). It acts
only where it is used: it adds its --attn-* options, and builds the grid when a test asks for the `attn_cell`
fixture, at collection, after that test's module was imported, so a variant the test file registers
(`@attnbench.register`) is part of the grid; a session that never uses the fixture (attnbench's own
`tests/`, a project's unit tests) sees no grid, no header, no summary and no JSON block. Each grid cell is
one test, `test_attention[<cell id>]`:

- Everything but the timing is harness.measure.cell's, as in `attnbench run`: the capability check and the
  memory guard, then `prepare` (seeded inputs, the float64 correctness gate, gradients too for fwdbwd,
  and the call to time), FLOPs and `peak` memory. pytest-benchmark times prepare's call.
- Timing is `benchmark.pedantic`, one call per round. On CUDA the untimed setup flushes L2 and
  synchronises, and the timed target synchronises after the call, so a round is the device time of
  one call (plus launch latency), never the time to enqueue async kernels. On CPU the call is timed
  as it is. Warm-up as in the harness (Settings.warmup_ms, at least one call), then rounds that fill
  --benchmark-max-time, at least --benchmark-min-rounds, at most Settings.max_samples.
- A cell that fails the float64 gate is `wrong` and fails before it is timed: a wrong kernel never stands
  in pytest-benchmark's table (where it might read as the fastest) nor in its JSON or saved files, which
  later sessions compare against. After the timed rounds, `check_after` as in `attnbench run`: the inputs
  are unchanged and the answer still follows the inputs (fresh ones, another seed); a cell that fails
  either is `wrong`, fails, and is kept out of the file (pytest-benchmark's has_error) as an untimed row.
- Just before its timing, the speed probe a run's worker takes (speed_tflops), by which the summary and
  the imported run flag the cells timed while the machine drifted.
- extra_info holds the cell spec (every axis, cell_id), status, flops and executed_flops (a pack's
  padding tax), the median's rates as a run's row has them (results.formulas.median_rates: tflops,
  executed_tflops, tokens_per_s, kv_gbps, io_gbps), rel_iqr and noisy, peak_mem_bytes, the gate's
  max_abs_err / rel_err / grad_rel_err / fresh_rel_err, first_call_ms and setup_ms: what `attnbench
  import-benchmark` needs to rebuild result rows. Cells that are not timed (unsupported here, memory
  guard, OOM, error, wrong) are skipped or failed with their reason and listed in
  the JSON file's top-level "attnbench" block, beside this machine's fingerprint, the capability record
  of each variant of the grid (what the report's theory reads) and this machine's calibration (matmul and
  copy ceilings for % of peak: --attn-calibrate-ms of sampling per dtype, after the timed tests).
- A cell a Ctrl-C cuts short while it is timed or checked after is marked has_error, so that
  pytest-benchmark saves it nowhere (its partial rounds would read as a finished `ok` cell): a run's
  interrupted cell has no row either.
- A session that times the grid announces itself to the other attnbench runs on this machine as a run does
  (harness.run.neighbours): it says after collection when another one is measuring, and in its summary
  which ones measured during it; a run started meanwhile is told of it. One that times nothing
  (--benchmark-disable, --benchmark-skip) does not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from attnbench.harness.sweep import options
from attnbench.results.formulas import median_rates

EXTRA_INFO_FORMAT = 1  # version of the extra_info / "attnbench" JSON block read by results.pytest_benchmark
PREFIX = "attn_"  # --attn-seq-len is the sweep's seq_len: the same options as `attnbench run`, prefixed
# the axes of `attnbench run` (the defaults of a sweep) and its --threads (harness.sweep.options)
RATES = tuple(median_rates({}, 1.0))  # a row's rates of its median call: tflops, executed_tflops, kv_gbps...
# what only a timed cell has: dropped from the row of a cell found wrong after its timing
TIMED_ONLY = (*RATES, "rel_iqr", "noisy", "speed_tflops")
GRID_OPTIONS = [
    *options.axis_options(), *(o for o in options.setting_options() if o.key in ("threads", "calibrate_ms")),
]  # fmt: skip


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnbench", "attnbench grid (the attn_cell fixture)")
    for option in GRID_OPTIONS:
        default = f" (default: {option.default})" if option.default is not None else ""
        group.addoption(
            option.flag("--attn-"),
            dest=option.dest(PREFIX),
            default=None,  # not given: the sweep's default, as for `attnbench run`
            metavar="VALUES",
            help=option.help + default,
        )
    group.addoption(
        "--attn-variant-file",
        dest="attn_variant_file",
        action="append",
        default=[],
        metavar="PATH",
        help="python file registering variants (repeatable), as attnbench run --variant-file",
    )


@dataclass
class _Session:
    """Per pytest session: the sweep the --attn-* options give, and once a test uses the grid its cells,
    the shared input cache and the cells that were not timed."""

    sweep: object | None = None  # the SweepSpec, checked at configure when an --attn-* option is given
    cells: dict | None = None  # cell_id -> CellSpec, in sweep order; None: no test used the grid
    settings: object = None
    cache: object = None
    untimed: list | None = None
    peaks: object = None  # guard.MeasuredPeaks: the grid's ok cells' peaks, the guard's evidence
    error: str | None = None  # why the grid could not be built (an unknown variant), said after collection
    announced: object = None  # this session's neighbours.Announced, while it times the grid
    notes: tuple[str, ...] = ()  # its closing note on the runs that measured during it
    calibration: dict | None = None  # measured once: the JSON file and the saved file hold the same


_KEY = pytest.StashKey[_Session]()


def _sweep(config: pytest.Config):
    """The SweepSpec of the --attn-* options, the variant files loaded; ValueError naming a bad value."""
    from attnbench import variants
    from attnbench.harness.sweep.sweeps import build_sweep, respell

    given = options.given_options(vars(config.option), GRID_OPTIONS, PREFIX)
    try:
        sweep = build_sweep(given)
    except ValueError as exc:  # the run's flags as this plugin's options
        raise ValueError(respell(str(exc), _attn_option)) from None
    for path in config.getoption("attn_variant_file"):
        variants.load_variant_file(path)
    return sweep


def _attn_option(key: str, value: str | None) -> str:
    """This plugin's spelling of `attnbench run`'s flag for `key` (sweeps.respell): --attn-seq-len."""
    return "--attn-" + key.replace("_", "-") + (f" {value}" if value else "")


def build_cells(config: pytest.Config):
    """The CellSpecs of the grid the --attn-* options describe, over the variants registered now (the test
    modules collected so far among them); ValueError naming a bad value."""
    from attnbench import variants

    state = config.stash.get(_KEY, None)
    sweep = state.sweep if state is not None and state.sweep is not None else _sweep(config)
    if sweep.variants:
        names = [v.name for v in variants.resolve(list(sweep.variants))]
    else:
        from attnbench.harness.run.runner import default_variants

        names = default_variants()
    return sweep.cells(names), sweep.settings


def _given(config: pytest.Config) -> bool:
    given = options.given_options(vars(config.option), GRID_OPTIONS, PREFIX)
    return any(v is not None for v in given.values()) or bool(config.getoption("attn_variant_file"))


def pytest_configure(config: pytest.Config) -> None:
    state = _Session()
    if _given(config):  # bad values are refused before collection, in one line
        try:
            state.sweep = _sweep(config)
        except ValueError as exc:  # SweepSpec, Settings, parse_* and VariantError all name the bad value
            raise pytest.UsageError(f"attnbench: {exc}") from None
    config.stash[_KEY] = state


def _grid(config: pytest.Config) -> _Session:
    """The session's grid, built on first use."""
    state = config.stash[_KEY]
    if state.cells is None:
        from attnbench.harness.measure.inputs import InputCache

        try:
            cells, settings = build_cells(config)
        except ValueError as exc:  # an unknown variant: pytest_collection_finish ends the session with it
            state.error = f"attnbench: {exc}"
            state.cells = {}
            return state
        if settings.threads:
            import torch

            torch.set_num_threads(settings.threads)  # as the harness's worker does; recorded in each row
        state.cells = {c.cell_id: c for c in cells}
        from attnbench.harness.measure.guard import MeasuredPeaks

        state.settings, state.cache, state.untimed, state.peaks = settings, InputCache(), [], MeasuredPeaks()
    return state


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash.get(_KEY, None)
    if state is None or state.sweep is None:
        return None  # the options only: the grid is built at collection, where a test uses it
    sweep = state.sweep
    names = ", ".join(sweep.variants) if sweep.variants else "every default variant"
    return f"attnbench grid: variants {names}; seq_len {list(sweep.seq_len)}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "attn_cell" in metafunc.fixturenames:
        # cells come grouped by shape (SweepSpec.cells), so consecutive variants share inputs and reference;
        # the parameter is the cell_id (a string pytest-benchmark can store), turned into its CellSpec below
        ids = list(_grid(metafunc.config).cells)
        metafunc.parametrize("attn_cell", ids, ids=[i.replace("|", "-") for i in ids], indirect=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A grid that could not be built ends the session in one line, `ERROR: attnbench: ...`, with pytest's
    usage-error status, as a bad option refused in pytest_configure is (an exception inside collection would
    be a collection error with a traceback; pytest.exit, a `! _pytest.outcomes.Exit: ...` banner)."""
    state = session.config.stash.get(_KEY, None)
    if state is not None and state.error:
        raise pytest.UsageError(state.error)
    if state is not None and state.cells and _times(session.config):
        _announce(session.config, state)


def _times(config: pytest.Config) -> bool:
    """Whether pytest-benchmark times this session's benchmarks (not --benchmark-disable or -skip)."""
    bs = getattr(config, "_benchmarksession", None)
    return bs is not None and not bs.disabled and not bs.skip


def _announce(config: pytest.Config, state: _Session) -> None:
    """Say where another attnbench run is measuring on this machine, then announce this session, as a run
    does before its worker starts (harness.run.runner)."""
    from attnbench.harness.run import neighbours

    beside = neighbours.alongside()
    if beside:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"attnbench: warning: {beside}", yellow=True)
    state.announced = neighbours.announce(f"pytest-benchmark in {config.rootpath}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """End this session's announcement after everything it measures (pytest-benchmark's calibration
    included), keeping its note for the summary."""
    state = session.config.stash.get(_KEY, None)
    if state is not None and state.announced is not None:
        state.notes = tuple(state.announced.end(None))
        state.announced = None


@pytest.fixture
def attn_cell(request: pytest.FixtureRequest):
    """The CellSpec of this test's grid cell."""
    return request.config.stash[_KEY].cells[request.param]


def measure(benchmark, spec, config: pytest.Config) -> dict:
    """Measure one cell with pytest-benchmark timing; its row (without timing columns) is the extra_info.

    Skips a cell that cannot run here (with the reason), fails one that errs or is wrong.
    """
    from attnbench import variants
    from attnbench.harness.measure import guard
    from attnbench.harness.measure.cell import check_after, peak, prepare
    from attnbench.harness.measure.failures import failure, stops_the_process
    from attnbench.harness.measure.rows import base_row, executed_flops, finish, start_row
    from attnbench.harness.workers.worker import free_memory
    from attnbench.variants.handed import exercised

    state = config.stash[_KEY]
    settings = state.settings
    t_start = time.perf_counter()
    variant = variants.get(spec.variant)
    reason = variant.check(spec.problem())
    if reason:
        _untimed(state, finish(base_row(spec), "unsupported", reason))
    measured = state.peaks.of(spec)  # the shorter cells of its series measured in this session
    predicted = guard.predict(spec, variant.cap.memory, settings, variant.cap.varlen, measured)
    reason = guard.fits(predicted, free_memory(spec.device), settings.memory_guard)
    if reason:
        _untimed(state, finish(base_row(spec), "skipped", reason, predicted_peak_bytes=predicted.bytes))

    row = start_row(spec)
    row["executed_flops"] = executed_flops(spec, variant.cap.varlen)  # a pack's padding tax, as a run's row
    ready = None
    try:
        ready = prepare(spec, settings, state.cache)
        row.update(ready.fields(), **ready.setup_fields())
        peak_bytes, method = peak(ready.call, spec.device)  # before timing: an OOM here is an untimed row
    except BaseException as exc:  # the cell boundary, as in measure_cell: the variant's failure is this row
        if stops_the_process(exc):
            raise
        _untimed(
            state,
            finish(row, *failure(exc, spec.device, ready, exercised(variant, spec.problem()))),
            benchmark,
        )
    status, message = ready.verdict()
    if status == "wrong":  # failed the float64 gate: not timed, so not in pytest-benchmark's table or file
        _untimed(state, finish(row, status, message, peak_mem_bytes=peak_bytes, mem_method=method), benchmark)
    # the rates and elapsed_s keep their place in the row (measure_cell's order) until timing fills them
    row = finish(
        row, status, message, peak_mem_bytes=peak_bytes, mem_method=method, **dict.fromkeys(RATES),
        elapsed_s=None,
    )  # fmt: skip

    benchmark.group = spec.cell_id.split("|", 1)[1].replace("|", " ")  # the shape: variants side by side
    benchmark.extra_info.update(row, attnbench_format=EXTRA_INFO_FORMAT)
    m = _timed(benchmark, ready.call, spec, row, config)
    try:  # after the timed rounds: inputs unchanged, and the answer follows fresh inputs
        after = check_after(ready, spec, settings, state.cache)
        status, message = ready.verdict(m, after)  # an ok cell's message says when it is noisy
        benchmark.extra_info.update(after.fields())
    except BaseException as exc:  # the variant failed on fresh inputs: this cell's row, as in measure_cell
        if stops_the_process(exc):
            benchmark.has_error = (
                True  # cut short (Ctrl-C) before its verdict: never saved as a finished cell
            )
            raise
        status, message = failure(exc, spec.device, ready, exercised(variant, spec.problem()))
    benchmark.extra_info.update(status=status, message=message)
    benchmark.extra_info["elapsed_s"] = round(time.perf_counter() - t_start, 3)
    if status == "wrong":  # wrong on fresh inputs after the timing: kept out of the file, a row untimed
        benchmark.has_error = True  # pytest-benchmark writes no JSON or saved entry for it
        _untimed(state, {k: v for k, v in benchmark.extra_info.items() if k not in TIMED_ONLY})
    if status != "ok":
        pytest.fail(f"{status}: {spec.variant}: {message}", pytrace=False)
    state.peaks.note(spec, benchmark.extra_info)
    return dict(benchmark.extra_info)


def _timed(benchmark, call, spec, row: dict, config: pytest.Config):
    """Time `call` with benchmark.pedantic, the speed probe just before (the drift rule's, as a run's worker
    takes it); the timing.Measurement of its rounds with the median's rates and spread put in extra_info,
    or None (--benchmark-disable: one plain call, no statistics)."""
    state = config.stash[_KEY]
    setup, target = _device_calls(call, spec.device, state.settings.flush_l2)
    if not benchmark.enabled:
        benchmark.pedantic(target, setup=setup)
        return None
    from attnbench.harness.measure import timing
    from attnbench.harness.measure.calibrate import speed_probe

    benchmark.extra_info["speed_tflops"] = round(speed_probe(spec.device), 6)
    calls = _calls(config, setup, target, state.settings)
    try:
        benchmark.pedantic(target, setup=setup, rounds=calls, warmup_rounds=0, iterations=1)
    except BaseException:
        # pytest-benchmark marks an Exception only: a Ctrl-C (KeyboardInterrupt) mid-rounds would leave the
        # cell's partial rounds in the session's JSON and saved files, its extra_info's status `ok` already.
        # As a run does with the cell its Ctrl-C cuts, no row: has_error keeps it out of every file
        benchmark.has_error = True
        raise
    if state.announced is not None:
        state.announced.touch()  # alive, and the runs measuring beside it noted
    stats = benchmark.stats.stats if benchmark.stats is not None else None
    if not stats:
        return None
    m = timing.Measurement(tuple(s * 1e3 for s in stats.data))
    benchmark.extra_info.update(median_rates(row, m.median), rel_iqr=m.rel_iqr, noisy=m.noisy)
    return m


def _untimed(state: _Session, row: dict, benchmark: Any = None) -> NoReturn:
    """Record a cell that is not timed, then skip it (cannot run here) or fail it (an error, a wrong answer).
    A failed cell's fixture is marked used (`benchmark`): leaving it untimed is the plugin's choice, and
    pytest-benchmark's `Benchmark fixture was not used at all in this test!` would blame the user's test."""
    state.untimed.append(row)
    text = f"{row['variant']}: {row['message']}"
    if row["status"] in ("unsupported", "skipped", "oom"):
        pytest.skip(f"{row['status']}: {text}" if row["status"] != "unsupported" else text)
    if benchmark is not None and hasattr(benchmark, "_mode") and not benchmark._mode:
        benchmark._mode = "attnbench: failed untimed"  # the one thing its warning reads (fixture._cleanup)
    pytest.fail(f"{row['status']}: {text}", pytrace=False)


def _device_calls(call, device: str, flush_l2: bool):
    """(setup, target) for benchmark.pedantic; setup runs outside the timed window."""
    if device != "cuda":
        return None, call
    import torch

    from attnbench.harness.measure.timing import l2_flush_buffer

    flush = l2_flush_buffer(torch.device("cuda")) if flush_l2 else None  # the harness's CUDA timers' buffer

    def setup() -> None:
        if flush is not None:
            flush.zero_()  # evict L2 so every round starts cold, as harness.measure.timing.CudaTimer does
        torch.cuda.synchronize()  # nothing queued may run inside the timed window

    def target() -> None:
        call()
        torch.cuda.synchronize()  # the round ends when the device has finished, not when work is queued

    return setup, target


def _calls(config: pytest.Config, setup, target, settings) -> int:
    """Warm up as harness.measure.timing.measure does (calls until settings.warmup_ms, at least one), then the
    rounds that fill --benchmark-max-time: at least --benchmark-min-rounds, at most settings.max_samples
    (unless min-rounds asks for more)."""
    from attnbench.harness.measure.timing import CpuTimer

    def one_call() -> None:
        if setup is not None:
            setup()
        target()  # synchronises on CUDA, so perf_counter sees the device time

    timer = CpuTimer()
    warm = timer.time_calls(one_call, 1)
    while sum(warm) < settings.warmup_ms and len(warm) < settings.max_samples:
        warm += timer.time_calls(one_call, max(1, min(len(warm), 64)))
    estimate_s = sorted(warm)[len(warm) // 2] * 1e-3
    max_time = float(config.getoption("benchmark_max_time"))
    fewest = int(config.getoption("benchmark_min_rounds"))
    wanted = math.ceil(max_time / max(estimate_s, 1e-9))
    return max(fewest, min(wanted, settings.max_samples))


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    """Add the attnbench block: format version, this machine's fingerprint, the cells not timed, each grid
    variant's capability record and the calibration of the devices that timed cells."""
    state = config.stash.get(_KEY, None)
    if state is None or state.cells is None:
        return  # no test used the grid: nothing imported (calibrate's torch cost a plain session ~3 s)
    from attnbench import variants
    from attnbench.harness.measure.calibrate import calibrate
    from attnbench.harness.measure.fingerprint import collect

    cells = list(state.cells.values())
    names = list(dict.fromkeys(c.variant for c in cells))
    timed = [c for c in cells if any(b.get("extra_info", {}).get("cell_id") == c.cell_id for b in benchmarks)]
    if state.calibration is None:  # --benchmark-json and --benchmark-autosave: two files, one calibration
        state.calibration = {}
        for device in dict.fromkeys(c.device for c in timed):
            dtypes = list(dict.fromkeys(c.dtype for c in timed if c.device == device))
            state.calibration[device] = calibrate(device, dtypes, state.settings.calibrate_ms)
    output_json["attnbench"] = {
        "format": EXTRA_INFO_FORMAT,
        "fingerprint": collect(),
        "untimed": list(state.untimed),
        "variant_capabilities": {name: variants.get(name).record() for name in names},
        "calibration": state.calibration,
    }


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """One line per timed cell: what pytest-benchmark's table does not show (its spread, TFLOP/s or a decode
    step's K/V GB/s, memory, error), and its flags by the rules a run's cells are flagged by: noisy
    (IQR/median over results.schema.NOISY_REL_IQR) and drift (its speed probe more than results.drift.DRIFT
    off the session's median probe: the machine was slower or faster than usual while it was timed), and
    the sentence that the machine was busy where enough of them are (results.drift.is_busy)."""
    from attnbench.results.drift import (
        busy_cells,
        drifted,
        fewer_threads,
        is_busy,
        most_threads,
        speed_factors,
    )
    from attnbench.results.formulas import iqr_percent, speed

    state = config.stash.get(_KEY, None)
    bs = getattr(config, "_benchmarksession", None)
    if state is None or state.cells is None or bs is None:
        return
    for note in state.notes:
        terminalreporter.write_line(f"attnbench: warning: {note}", yellow=True)
    timed = [b for b in bs.benchmarks if b.extra_info.get("attnbench_format") and b.stats and not b.has_error]
    if not timed:
        return
    tr = terminalreporter
    tr.section("attnbench: throughput, peak memory and error vs float64 (median time)")
    width = max(len(b.param or b.name) for b in timed)
    tr.write_line(
        f"{'cell':<{width}} {'median ms':>10} {'IQR':>7} {'speed':>17} {'peak MiB':>9} {'rel_err':>9} "
        f"{'status':>7}  flags"
    )
    factors = speed_factors([b.extra_info for b in timed])
    for b, factor in zip(timed, factors, strict=True):
        e = b.extra_info
        mem = e.get("peak_mem_bytes")
        value, unit = speed(e)
        spread = e.get("rel_iqr")
        flags = [f for f, on in (("noisy", e.get("noisy") is True), ("drift", drifted(factor))) if on]
        tr.write_line(
            f"{b.param or b.name:<{width}} {b.stats.median * 1e3:>10.3f} "
            f"{'' if spread is None else iqr_percent(spread):>7} {f'{value:.4g} {unit}':>17} "
            f"{(mem or 0) / 2**20:>9.2f} {e.get('rel_err', math.nan):>9.1e} {e.get('status', ''):>7}  "
            f"{' '.join(flags)}".rstrip()
        )
    flagged, ok = busy_cells([b.extra_info for b in timed])
    if is_busy(flagged, ok):  # the one rule a run's closing sentence and the report's findings say it by
        fewer = fewer_threads(most_threads([b.extra_info for b in timed])).replace(
            "--threads", "--attn-threads"
        )
        # the clause in this plugin's spelling: --attn-threads 1
        tr.write_line(
            f"attnbench: warning: the machine was busy during this session ({flagged} of {ok} cells drifted "
            f"or were noisy); measure them again on a quiet machine{fewer} before comparing against them",
            yellow=True,
        )
