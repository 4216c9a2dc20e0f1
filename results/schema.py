"""The results schema: one tidy row per cell, units in column names, machine metadata once per run."""

from __future__ import annotations

from typing import Any

from . import axes
from .axes import AXES

SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)  # file versions this code can load
# How to get an attnbench that reads a newer file: attnbench is installed from a clone (README), not PyPI.
UPGRADE = "update attnbench: `git pull` in the clone it was installed from, then `pip install -e .` there"

STATUSES = ("ok", "wrong", "unsupported", "oom", "error", "crashed", "timeout", "skipped")
RANKED_STATUSES = ("ok",)  # `wrong` cells are measured but never ranked
GATE_FAILED = "failed the float64 gate"  # a wrong cell's message, before what the gate found
NOISY_REL_IQR = 0.10  # a cell whose IQR/median exceeds this is flagged noisy (the `noisy` column)

# column -> pandas dtype; the order is the export order. The list columns (LIST_COLUMNS: samples_ms, the raw
# per-call samples, and each visit's median and sample count) are kept in rows.jsonl and in the DataFrame,
# and left out of CSV exports.
COLUMNS: dict[str, str] = {
    "run_id": "string",
    "machine": "string",
    "cell_id": "string",
    # the axes (results.axes: one entry each, in cell_id order), then the model label
    **{a.name: a.dtype for a in AXES},
    "status": "string",
    "message": "string",
    "time_ms_median": "Float64",
    "time_ms_p25": "Float64",
    "time_ms_p75": "Float64",
    "rel_iqr": "Float64",
    "noisy": "boolean",
    "n_samples": "Int64",
    "first_call_ms": "Float64",  # the cell's first (gated) forward call: lazy init, autotune, compile, plans
    "setup_ms": "Float64",  # the variant's setup hook, kept out of the timed call; NA when it has none
    # --rounds R: the warm-up calls and setup hooks of a cell's visits after the first (the first's are
    # first_call_ms and setup_ms), outside the timed calls; NA without rounds
    "rewarm_ms": "Float64",
    # the checks after timing (the refill and fresh-input calls, their inputs and float64 reference), in
    # every visit; with rounds, a forward CPU cell's fresh-input check is its second visit's warm-up call
    # (harness.measure.cell.defers_fresh_check). NA in runs before it
    "checks_ms": "Float64",
    # the rest of a cell's wall time (elapsed_s), phase by phase, so that every second of a cell is in a
    # column (harness.measure.cell): the inputs copied and validated; the gate with its float64 reference
    # and the gradient and dropout checks; the timer's choice and the timing loop (warm-up calls, the timed
    # calls themselves, whose sum is samples_ms', and the syncs between them); the peak-memory call; the
    # retained-bytes accounting (live tensors counted before the
    # variant is first bound and after the checks). NA in runs before them; a later visit has timing_ms alone
    "inputs_ms": "Float64",
    "gate_ms": "Float64",
    "timing_ms": "Float64",
    "peak_ms": "Float64",
    "teardown_ms": "Float64",
    # the memory layout the variant was handed q, k, v in ("bhnd", or "bnhd": (B, N, H, d) memory under the
    # same (B, H, N, d) shape; variants.problem.LAYOUTS), made outside the timed calls. NA in runs before
    # it and in cells never handed inputs (unsupported, skipped); runs before it handed every cell "bhnd"
    "layout": "string",
    # which kernel the variant's calls ran, where its kernel hook says (variants.registry.Capability.kernel):
    # SDPA's backend and FlashAttention implementation, xformers' operator; NA where it has none
    "kernel": "string",
    # derived when loading (results.load.picks_among), never stored: the variants whose kernels the row's
    # variant's own dispatch picks among (Capability.picks_among in meta.json; sdpa's, by its name, in runs
    # recorded before it), space-separated; where `kernel` does not say which one ran, the report ranks none
    # of them against it. NA for a variant that runs one kernel
    "picks_among": "string",
    # measured on one call above what was live before it; plus retained_mem_bytes when that is large
    # (over max(1 MiB, 10% of the peak), harness.measure.outcomes.retains; mem_method then ends
    # "+ retained_mem_bytes")
    "peak_mem_bytes": "Int64",
    # memory the variant still holds after the cell's calls (a workspace kept across calls, a setup hook's
    # state), above what was live before it was first bound in the cell (harness.measure.cell.retained_bytes);
    # NA in runs before it and in cells not measured
    "retained_mem_bytes": "Int64",
    "flops": "Int64",
    "flops_formula": "string",
    "tflops": "Float64",
    # a packed batch (the lengths axis): its sequences' lengths, the FLOPs its kernel executes (flops counts
    # the useful ones: results.formulas.executed_pairs), executed_flops / median time
    "seq_lens": "object",
    "executed_flops": "Int64",
    "executed_tflops": "Float64",
    "io_bytes": "Int64",  # a paged decode cell: K/V of every context, Q, O and the page table (formulas)
    "io_gbps": "Float64",  # io_bytes / median time: against the calibrated copy bandwidth
    "tokens_per_s": "Float64",  # query tokens (B x N_q; a pack's T) per second of the median call
    "kv_bytes": "Int64",  # bytes of K and V read once: B * kv_heads * seq_k * (d_k + d_v) * itemsize
    "kv_gbps": "Float64",  # kv_bytes / median time, GB/s: a decode cell against the calibrated copy bandwidth
    "speed_tflops": "Float64",  # the speed probe just before the cell (harness.measure.calibrate.speed_probe)
    "speed_factor": "Float64",  # derived when loading: speed_tflops / the run's median probe on that device
    # derived when loading (results.drift): speed_factor more than 10% off 1, or a cell measured more than
    # once whose earlier answers moved beyond its own spread (drift_reason says which); NA unprobed
    "drift": "boolean",
    "drift_reason": "string",  # why: the probe's factor, or the cell's medians one measurement after another
    # derived when loading: the rows the run holds for the cell (one per measurement: `--resume --redo-drift`
    # appends one; the last is the row read), and the largest of their ok medians over the smallest (NA for
    # fewer than two)
    "measured_times": "Int64",
    "medians_spread": "Float64",
    # CUDA cells: NVML readings during the timed calls (harness.measure.telemetry); NA on CPU or without NVML
    "sm_clock_min_mhz": "Int64",
    "sm_clock_max_mhz": "Int64",
    "sm_clock_drop": "Float64",  # the SM clock's largest fall below its earlier high, as a fraction
    # NVML's power readings (each the board's power over the second before it, on Ampere but GA100 and later)
    # during the timed calls; not --energy's window after them (energy_power_w, its mean)
    "timed_power_w_mean": "Float64",
    "timed_power_w_max": "Float64",
    "temp_c_max": "Int64",
    "clock_event_reasons": "string",  # NVML clock-event reasons seen (bitwise or), hex
    "telemetry_samples": "Int64",
    "throttled": "boolean",  # sm_clock_drop > 10%: the time says as much about the clock as the kernel
    # CUDA cells with --energy: NVML's energy counter over a window of >= 1 s of the timed callable repeated,
    # edge to edge, the board's idle draw subtracted (harness.measure.energy); NA otherwise, energy_note why
    "energy_j_per_call": "Float64",  # joules per call above the idle draw
    "energy_power_w": "Float64",  # the board's mean power over the energy window (idle included)
    "idle_power_w": "Float64",  # the board's draw with no work, measured once per worker and GPU
    "energy_calls": "Int64",  # calls in the window
    "energy_window_s": "Float64",  # the window, edge to edge
    "tflops_per_w": "Float64",  # flops / energy_j_per_call / 1e12: TFLOP per joule
    "energy_ms": "Float64",  # the wall time of the windows and their edge waits, outside the timed calls
    "energy_note": "string",  # why the energy columns are empty (no counter, no NVML), or what to doubt
    "suspect": "boolean",  # derived when loading (results.suspect), never stored: ok but not believable
    "suspect_reason": "string",
    "max_abs_err": "Float64",
    "rel_err": "Float64",
    "grad_rel_err": "Float64",
    "masked_rows": "string",
    "rows_checked": "Int64",
    "fresh_rel_err": "Float64",  # after timing: the answer on fresh inputs of the same shape (another seed)
    # after timing: the answer on the timed tensors themselves, refilled in place with those fresh values (an
    # answer remembered by tensor identity or data_ptr; harness.measure.cell.refill_in_place). NA in runs
    # before it
    "refill_rel_err": "Float64",
    # a quantising variant (Capability.quant, FP8): its recipe (variants.quant: "e4m3fn:tensor",
    # "e4m3fn:head"); rel_err is then its kernel's error against the float64 reference of the rounded inputs,
    # quant_rel_err the rounding's own (that reference against the original inputs'), sqnr_db the output
    # against the original inputs' reference, 10 log10(signal / error power) = -20 log10(end-to-end rel_err)
    # (harness.measure.correctness). NA for every other variant and in runs before them
    "quant_recipe": "string",
    "quant_rel_err": "Float64",
    "sqnr_db": "Float64",
    # a variant declared approximate (Capability.approximate: random features, low rank, sparsity): the
    # rel_err against float64 its gates held it to, its declared bound or its dtype's tolerance where that
    # is larger. NA for an exact kernel
    "approximate": "Float64",
    "drop_frac": "Float64",  # dropout cells: the fraction of attention weights the variant zeroed (about p)
    "drop_mean_z": "Float64",  # dropout cells: |mean of K calls - float64| over its expected noise (about 1)
    "threads": "Int64",
    "host": "string",  # where the cell was measured (harness.measure.fingerprint.where_measured)
    "gpu_name": "string",
    "gpu_uuid": "string",
    "gpu_index": "Int64",
    "where": "string",  # derived when loading: formulas.where_key of host, device and gpu_uuid
    "device_group": "string",  # derived when loading (results.devices): '' unless the run is split
    "mem_method": "string",
    "stop_reason": "string",
    # how the calls were timed: "perf_counter" (CPU), "events" or "graph" (CUDA; harness.measure.timing), and
    # why ("cpu", "given", "auto: launch-bound (...)", "...graph capture failed: ..."); NA in runs written
    # before
    "timing_mode": "string",
    "timing_reason": "string",
    "graph_calls_per_replay": "Int64",  # graph mode: calls captured in one CUDA graph replay; NA otherwise
    "elapsed_s": "Float64",
    # the cell's request on the worker's timer clock over the parent's own clock (harness.measure.outcomes.
    # clock_mismatch): just under 1 for an honest worker; NA in runs before it
    "clock_ratio": "Float64",
    "clock_bounds_ms": "Float64",  # how far apart the worker's readings bounded its timing loops (ms)
    # CUDA: the share of the host's wall time of the timing loops that the events span (harness.measure.
    # timing.event_cover; outcomes.events_mismatch): about 1 for an honest call; NA on CPU and before it
    "event_cover": "Float64",
    "finished_at": "string",
}
# every phase of a cell's wall time (harness.measure.cell): together they make up elapsed_s
PHASE_COLUMNS = (
    "inputs_ms", "setup_ms", "first_call_ms", "gate_ms", "timing_ms", "energy_ms", "peak_ms", "checks_ms",
    "teardown_ms", "rewarm_ms",
)  # fmt: skip

# visit_medians_ms: the median of each of the cell's visits (R with --rounds R, more where --settle-rounds
# visited it again), in the order they were made (round-robin over the sweep: they span the run);
# visit_samples: how many of samples_ms each visit took, in the same order (samples_ms holds them visit
# after visit). results.visits.summary writes both; compare judges by them (results.judge: two cells' visits
# pair by round only where both have their counts)
LIST_COLUMNS = ("samples_ms", "visit_medians_ms", "visit_samples")
# what runs written before today's names called a list column: the loader reads them under today's
LEGACY_LIST_COLUMNS = {"round_medians_ms": "visit_medians_ms", "round_samples": "visit_samples"}
# what runs written before today's names called a scalar column: the loader reads them under today's (the
# power readings of the timed calls were power_w_mean and power_w_max, read beside energy_power_w as one
# window's mean above its max: trial U)
LEGACY_COLUMNS = {"power_w_mean": "timed_power_w_mean", "power_w_max": "timed_power_w_max"}
# each worker process's median of --processes K (removed; no run of results/reference/ has more than one):
# the loader reads 2 or more as the visit medians of a row that has none, without sample counts, so that
# they are replicates that never pair (results.judge)
PROCESS_MEDIANS = "process_medians_ms"


def upgrade_lists(df):
    """A loaded frame's list columns as today's: the names of runs written before (LEGACY_LIST_COLUMNS), the
    process medians of --processes K (PROCESS_MEDIANS), and an empty list where a row has none (a row not
    measured, a run written before a column existed)."""
    for old, new in LEGACY_LIST_COLUMNS.items():
        if old in df.columns:
            had = df[new] if new in df.columns else [None] * len(df)
            df[new] = [n if isinstance(n, list) else o for n, o in zip(had, df.pop(old), strict=True)]
    for col in LIST_COLUMNS:
        if col not in df.columns:
            df[col] = None
    for col in LIST_COLUMNS[1:]:
        df[col] = [v if isinstance(v, list) else [] for v in df[col]]
    if PROCESS_MEDIANS in df.columns:
        df["visit_medians_ms"] = [
            v or (p if isinstance(p, list) and len(p) >= 2 else [])
            for v, p in zip(df["visit_medians_ms"], df.pop(PROCESS_MEDIANS), strict=True)
        ]
    return df


def medians_of(row: dict[str, Any]) -> list[float]:
    """A row's replicate medians, one per visit (visit_medians_ms), or its one median where it has none."""
    visits = float_list(row.get("visit_medians_ms"))
    return visits or ([float(row["time_ms_median"])] if row.get("time_ms_median") is not None else [])


def float_list(x: Any) -> list[float]:
    """A list column's cell (samples_ms, visit_medians_ms, visit_samples, ...) as floats; [] where it holds
    no list (None or NaN in older runs, a string) or a value that is not a number."""
    if not isinstance(x, (list, tuple)):
        return []
    try:
        return [float(v) for v in x]
    except (TypeError, ValueError):
        return []


CELL_AXES = axes.CELL_AXES  # the identity axes, in cell_id order
# What a row written before an axis existed measured (results.load fills these in); kv_heads and seq_k
# follow heads and seq_len (axes.FOLLOWS)
AXIS_DEFAULTS = axes.QUIET
