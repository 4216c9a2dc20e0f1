"""What a sweep will cost before it runs: its cells, those the memory guard would skip and those unsupported
here, and how long the rest should take. One model, for `attnbench run --dry-run` and for the warning before
a sweep estimated over LONG_S.

The time model, per measured cell (an estimate, not a promise; it ignores skip-ahead after an OOM, a
timeout or a call predicted past --max-call-ms (harness.workers.cellrunner.SkipAhead, which predicts from
measured calls, not this model), which only shortens a sweep):
    call     = FLOPs of one call (results.formulas.attention_flops) / an assumed attained throughput, or
               q, k and v read once at ASSUMED_GBPS where that is longer (a decode cell: memory-bound)
    cell     = R * VISIT_OVERHEAD_S + INPUT_S_PER_ELEMENT[device] * q/k/v elements + warm-up + sampling
               + extra
    warm-up  = max(warmup_ms, 1 call) in each of the R visits (Settings.rounds); a forward CPU cell without
               dropout: what of warmup_ms its first call leaves (harness.measure.cell.warmed_ms), and one call
               in each visit from the third (the second's warm-up is its fresh-input check:
               defers_fresh_check)
    extra    = EXTRA_CALLS calls (the first call, the memory measurement, the two after-checks); a forward
               CPU cell without dropout: FWD_EXTRA_CALLS (its peak is measured on the refill check's call)
    sampling = max(min_samples calls, budget_ms): on CPU the whole sampling budget, as on a busy machine
               (a stable spread stops earlier; max_samples rarely does, as the timer batches cheap calls);
               on CUDA, whose spread is stable, max(min_samples calls, min_ms), and CUDA_TIMER_CALLS more
               for the timer's choice (harness.measure.timing.cuda_timer: a warm call, the sync check, the
               launch probe)
plus RUN_OVERHEAD_S[device] for the run (start, worker start, calibration, numerics probe), the most of
its devices', and COMPILE_S[device] for each kernel the run compiles: each distinct compile key of a variant
that declares one (Capability.compiles: flex's one per dtype, pass and mask on plain cells, one per shape
on padded, packed or paged ones), as one worker runs them all. Settle rounds
(Settings.settle_rounds) are not in the model: they visit again only the pairs a run could not rank (the
quick preset's nine jobs of docs/method.md: 0 to 10 visits, up to about 5 s). The throughputs are what
attention, not matmul, attains: ASSUMED_TFLOPS per CPU core in fp32 and per GPU in bf16/fp16; on CPU a
quadratic-memory variant attains QUADRATIC_4K_FACTOR of it unless the run asks for transparent huge pages
(THP_MEM_ALLOC_ENABLE=1: each call faults its N x N scores in 4 KiB at a time otherwise).
Checked against the committed CPU runs of the 2-core VM (results/reference, each cell's elapsed_s summed
against its estimate; 2026-11-25): llm 3409 s measured, 2932 estimated; cpu 955, 973; the quick preset in
rounds 36 and 43 (two runs), 54; decode's first 256 cells 781, 339 (flex compiles a kernel per shape
there, and sdpa_math is slow at N_q = 1: neither was in the model then). With compiles counted
(2026-12-06): paged 72 s measured, 54 estimated (18 without them); varlen 37, 37 (25). On an H200 (2026-11-28,
results/reference/gpu-checks-h200-2026-11-28): the gpu preset 114 s measured on a fresh machine and 71 s
with torch's compile caches warm, paged 78 s, varlen 120 s; the CUDA terms were fitted to those runs (the
CPU model had said 352 s, 1033 s and 677 s).

Reads nothing from a device: the parent decides this without a CUDA context, as it plans cells.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from attnbench.harness.measure.allocator import worker_environ
from attnbench.harness.measure.rows import executed_flops
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import DTYPE_BYTES, attention_flops, counted, is_decode
from attnbench.variants import Problem

ASSUMED_TFLOPS = {"cpu": 0.035, "cuda": 50.0}  # cpu: per core (fp32); cuda: per GPU (bf16/fp16)
ASSUMED_GBPS = {"cpu": 10.0, "cuda": 1000.0}  # q, k and v read once: a memory-bound call's floor
# a quadratic-memory variant on CPU (its N x N scores made and freed every call) attains this fraction of
# ASSUMED_TFLOPS where each call faults its scores in 4 KiB at a time: without transparent huge pages
QUADRATIC_4K_FACTOR = 0.2
VISIT_OVERHEAD_S = 0.06  # a visit's worker round trip, speed probe and row (rounds: each visit pays it)
# inputs, copies, the float64 reference and fresh inputs, per q/k/v element: made by the CPU, or on the GPU
# (the H200 runs' time outside the timed calls: 0.2-2 ns an element)
INPUT_S_PER_ELEMENT = {"cpu": 4e-8, "cuda": 2e-9}
CUDA_TIMER_CALLS = 5  # a warm call, the sync check's call and the launch probe's three
EXTRA_CALLS = 4  # the first (gated, compiling) call, the memory measurement, the refill and fresh checks
FWD_EXTRA_CALLS = (
    3  # the same, the memory measured on the refill check's call (harness.measure.cell.peak_on_refill)
)
# start, start a worker, calibrate, probe the numerics: on an H200 4-5 s, 0.4-1.5, 1.9 and 5-21 s (every
# variant's first CUDA call, flex's compile at the probe's shape)
RUN_OVERHEAD_S = {"cpu": 10.0, "cuda": 25.0}
# one torch.compile of a kernel (dynamo, inductor, a C++ or Triton build): first calls of the flex variants
# on the 2-core VM 4.5-9.7 s (quick, decode, paged references); on an H100 a static flex compile 1-4 s
COMPILE_S = {"cpu": 6.0, "cuda": 2.5}
LONG_S = 600.0  # a sweep estimated longer than this is warned about before it starts


def assumed_tflops(device: str, dtype: str, memory: str = "linear", huge_pages: bool = True) -> float:
    """The attained throughput the model assumes for a cell on `device` in `dtype` (see the module doc),
    of a variant of that memory class (variants' Capability.memory), with or without huge pages."""
    if device == "cpu":
        tflops = ASSUMED_TFLOPS["cpu"] * (os.cpu_count() or 1)
        if memory == "quadratic" and not huge_pages:
            tflops *= QUADRATIC_4K_FACTOR
        return tflops / 2 if dtype == "float64" else tflops
    return ASSUMED_TFLOPS.get(device, ASSUMED_TFLOPS["cuda"]) / (8 if dtype in ("float32", "float64") else 1)


def huge_pages(settings: Settings) -> bool:
    """Whether the run's workers ask torch's CPU allocator for transparent huge pages
    (harness.measure.allocator: unless the run's env or this environment says otherwise)."""
    return worker_environ(settings.env).get("THP_MEM_ALLOC_ENABLE") == "1"


def cell_seconds(spec: CellSpec, settings: Settings, memory: str = "linear", work: str = "masked") -> float:
    """The estimated wall time of one measured cell (the module doc's model) of a variant of that memory
    class; a packed cell's at the work its variant executes (`work`, its capability's varlen)."""
    flops = executed_flops(spec, work) or attention_flops(
        spec.batch, spec.heads, spec.seq_len, spec.seq_k, spec.d_k, spec.d_v, causal=spec.causal,
        pass_=spec.pass_, key_lengths=spec.key_lengths(), causal_align=spec.causal_align, window=spec.window,
    )  # fmt: skip
    elements = input_elements(spec)
    call = max(
        flops / (assumed_tflops(spec.device, spec.dtype, memory, huge_pages(settings)) * 1e12),
        elements * DTYPE_BYTES.get(spec.dtype, 4) / (_on(ASSUMED_GBPS, spec.device) * 1e9),
    )
    rounds = max(1, settings.rounds)
    overhead = rounds * VISIT_OVERHEAD_S + _on(INPUT_S_PER_ELEMENT, spec.device) * elements
    if spec.device == "cpu":
        sampling = max(settings.min_samples * call, settings.budget_ms / 1e3)
    else:  # a stable spread: sampling stops at min_ms; the timer's choice before it
        sampling = max(settings.min_samples * call, settings.min_ms / 1e3) + CUDA_TIMER_CALLS * call
    if spec.device == "cpu" and spec.pass_ == "fwd" and spec.dropout == 0:  # harness.measure.cell's shortcuts
        # the first call is the warm-up; in rounds the fresh-input check is the second visit's warm-up call
        warm = max(settings.warmup_ms / 1e3 - call, 0.0) + max(rounds - 2, 0) * call
        return overhead + warm + sampling + FWD_EXTRA_CALLS * call
    return overhead + rounds * max(settings.warmup_ms / 1e3 / rounds, call) + sampling + EXTRA_CALLS * call


def _on(table: dict[str, float], device: str) -> float:
    """A device's entry of one of the model's tables: cpu's, or cuda's for any accelerator."""
    return table["cpu"] if device == "cpu" else table.get(device, table["cuda"])


def input_elements(spec: CellSpec) -> int:
    """Elements of a cell's q, k and v: what its inputs, their pristine copies, the float64 reference and
    the checks' fresh inputs cost to make, scaled by INPUT_S_PER_ELEMENT."""
    return spec.batch * (
        spec.heads * spec.seq_len * spec.d_k + spec.kv_heads * spec.seq_k * (spec.d_k + spec.d_v)
    )


def run_seconds(
    cells: Sequence[CellSpec],
    settings: Settings,
    memory_class: Callable[[str], str] = lambda name: "linear",
    varlen_work: Callable[[str], str] = lambda name: "masked",
    compile_key: Callable[[CellSpec], Hashable | None] = lambda spec: None,
) -> float:
    """The estimated wall time of a run that measures `cells` (0 when there are none); memory_class(variant),
    varlen_work(variant) and compile_key(spec) as forecast's."""
    if not cells:
        return 0.0
    compiles = {(c.variant, c.device, key) for c in cells if (key := compile_key(c)) is not None}
    return (
        max(_on(RUN_OVERHEAD_S, c.device) for c in cells)
        + sum(_on(COMPILE_S, device) for _, device, _ in compiles)
        + sum(cell_seconds(c, settings, memory_class(c.variant), varlen_work(c.variant)) for c in cells)
    )


def compile_key(compiles: bool | Callable[[Problem], Hashable], spec: CellSpec) -> Hashable | None:
    """The key of the kernel a cell of a variant with Capability.compiles `compiles` compiles (None: none):
    its shape's problem where `compiles` is True."""
    if not compiles:
        return None
    return spec.problem() if compiles is True else compiles(spec.problem())


def duration_text(seconds: float) -> str:
    """'40 s', '12 min', '3.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


REASONS_NAMED = 4  # a refused sweep's line names this many reasons its cells are unsupported, counts the rest
PIDS_NAMED = 5  # a dry run's line names this many of the runs measuring beside it, and counts the rest


@dataclass(frozen=True)
class Forecast:
    """A sweep before it runs: every cell, and what becomes of each (reasons as the rows would say them)."""

    cells: int
    measured: list[CellSpec]
    unsupported: Counter = field(default_factory=Counter)  # reason -> cells
    guarded: Counter = field(default_factory=Counter)  # memory guard's reason -> cells
    # variant -> where its skipped cells start, on the axes that grew: 'N = 4096', 'N_k = 16384 at batch 16'
    guarded_from: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    done: int = 0  # cells a resumed run measured already (counted in `cells`)
    settle: int = 0  # Settings.settle_rounds: visits the model leaves out, said beside the estimate
    # the pids of the other attnbench runs measuring on this machine as the dry run looked
    # (harness.run.neighbours.measuring): the estimate is a quiet machine's, and they make it one no longer
    beside: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()  # said before the counts: a window as wide as its cells' keys (wide_windows)

    def lines(self) -> list[str]:
        """What `attnbench run --dry-run` prints: counts, reasons, the estimate and its assumption."""
        n_unsup, n_guard = sum(self.unsupported.values()), sum(self.guarded.values())
        done = f", {self.done} measured already" if self.done else ""
        out = [
            *self.notes,
            f"{counted(self.cells, 'cell')}{done}: {len(self.measured)} to measure, {n_guard} the memory "
            f"guard would skip, {n_unsup} unsupported here",
        ]
        where = ", ".join(f"{v} from {n}" for v, n in self.guarded_from.items())
        out += [f"  skipped by the memory guard ({n}): {where}; {r}" for r, n in self.guarded.most_common()]
        out += [f"  unsupported ({n}): {reason}" for reason, n in self.unsupported.most_common()]
        out.append(f"estimated time: about {duration_text(self.seconds)} ({assumption()})")
        if self.settle:
            out.append(
                f"  and up to {self.settle} settle rounds, not in the estimate: the pairs the rounds cannot "
                "rank visited again (on the 2-core reference VM, up to an eighth more for the quick "
                "preset, a quarter for the cpu preset: docs/method.md)"
            )
        return out + self._beside()

    def nothing_to_measure(self) -> str | None:
        """Why a run of these cells would measure none (every cell left is unsupported here, as its row
        would say), or None. The memory guard's skips are not counted: a run predicts them again from the
        peaks it measures, and may measure those cells after all."""
        n_unsup = sum(self.unsupported.values())
        if not n_unsup or n_unsup < self.cells - self.done:
            return None
        reasons = [r for r, _ in self.unsupported.most_common()]  # commonest first, as the rows say them
        said = "; ".join(reasons[:REASONS_NAMED])
        more = f"; and {len(reasons) - REASONS_NAMED} more reasons" if len(reasons) > REASONS_NAMED else ""
        return (
            f"nothing to measure: every cell is unsupported ({said}{more}); "
            "--dry-run lists them, with what each variant would need"
        )

    def _beside(self) -> list[str]:
        """The line that names the runs measuring beside this one now (PIDS_NAMED pids at most), if any."""
        n, pids = len(self.beside), [str(p) for p in sorted(self.beside)]
        if not n:
            return []
        named = ", ".join(pids[:PIDS_NAMED]) + (f" and {n - PIDS_NAMED} more" if n > PIDS_NAMED else "")
        runs = "1 other attnbench run is" if n == 1 else f"{n} other attnbench runs are"
        return [
            f"{runs} measuring on this machine now (pid{'s' if n > 1 else ''} {named}): the estimate "
            "assumes a quiet machine, and each run's times would be the others' too"
        ]


def assumption() -> str:
    """The model's assumption in a few words, to print beside an estimate."""
    cpu = ASSUMED_TFLOPS["cpu"] * (os.cpu_count() or 1)
    return (
        f"assumes attention at {cpu:g} TFLOP/s on this CPU's {os.cpu_count()} cores "
        f"({cpu * QUADRATIC_4K_FACTOR:g} for N x N scores without huge pages) and each cell's whole "
        f"sampling budget, or {ASSUMED_TFLOPS['cuda']:g} TFLOP/s and {ASSUMED_GBPS['cuda']:g} GB/s on a GPU, "
        "where a cell samples its min_ms"
    )


def forecast(
    cells: Sequence[CellSpec],
    settings: Settings,
    *,
    unsupported: Callable[[CellSpec], str | None],
    free_memory: Callable[[str], int | None],
    memory_class: Callable[[str], str],
    varlen_work: Callable[[str], str] = lambda name: "masked",
    compile_key: Callable[[CellSpec], Hashable | None] = lambda spec: None,
    done: int = 0,
    peaks: Callable[[CellSpec], Mapping[tuple[int, int], int]] = lambda spec: {},
) -> Forecast:
    """What becomes of each cell: `unsupported(spec)` is the parent's capability check (a reason or None),
    `free_memory(device)` the bytes the guard compares with (None: unknown here, the worker decides), and
    `memory_class(variant)` the variant's, `varlen_work(variant)` the work it executes on a packed batch
    (its capability's varlen; "masked", the most, where it declares none), `compile_key(spec)` the kernel a
    cell compiles (None: none; cells of one key share a compile); the guard's rule is
    harness.measure.guard's, applied as a worker would, from the peaks `peaks(spec)` its series' rows
    measured already ((N_q, N_k) -> bytes: a resumed run's), else its formula (a run measures the shorter
    cells first and predicts from them: the dry run's skips are the formula's, an upper count). `done`: the
    cells of a resumed run measured already, beside these."""
    from attnbench.harness.measure import guard

    measured: list[CellSpec] = []
    unsup: Counter = Counter()
    guarded: Counter = Counter()
    skipped: list[CellSpec] = []
    free: dict[str, int | None] = {}
    for spec in cells:
        reason = unsupported(spec)
        if reason:
            unsup[reason] += 1
            continue
        if spec.device not in free:
            free[spec.device] = free_memory(spec.device)
        if free[spec.device] is not None:
            predicted = guard.predict(
                spec, memory_class(spec.variant), settings, varlen_work(spec.variant), peaks(spec)
            )
            reason = guard.fits(predicted, free[spec.device], settings.memory_guard)
            if reason:
                guarded[_general(reason)] += 1
                skipped.append(spec)
                continue
        measured.append(spec)
    seconds = run_seconds(measured, settings, memory_class, varlen_work, compile_key)
    return Forecast(
        len(cells) + done, measured, unsup, guarded, skips_start(skipped, cells), seconds, done,
        settings.settle_rounds,
    )  # fmt: skip


def skips_start(skipped: Sequence[CellSpec], cells: Sequence[CellSpec]) -> dict[str, str]:
    """Per variant, where the memory guard's skips start, named by the axes that grew: the length a series
    grows (N, or N_k where the cells hold N_q apart from N_k: a decode step's N_q is 1 whatever is skipped),
    and the batches skipped where the variant's other batches ran ('N_k = 16384 at batch 16')."""
    out: dict[str, str] = {}
    for variant in dict.fromkeys(c.variant for c in skipped):
        mine = [c for c in skipped if c.variant == variant]
        decode = any(is_decode(c.seq_len, c.seq_k) for c in cells if c.variant == variant)
        name, length = ("N_k", "seq_k") if decode else ("N", "seq_len")
        batches = sorted({c.batch for c in mine})
        every = {c.batch for c in cells if c.variant == variant} == set(batches)
        starts = []
        for b in [None] if every else batches:
            n = min(getattr(c, length) for c in mine if b is None or c.batch == b)
            starts.append(f"{name} = {n}" + ("" if b is None else f" at batch {b}"))
        out[variant] = " and from ".join(starts)
    return out


def _general(reason: str) -> str:
    """The guard's reason without the cell's own prediction, so that cells skipped alike count together."""
    _, _, tail = reason.partition(" exceeds ")
    return f"the predicted peak exceeds {tail}" if tail else reason
