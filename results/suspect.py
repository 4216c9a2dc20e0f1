"""Cells too fast to believe: `suspect` rows are shown, never ranked.

Two rules, applied when runs are loaded (so they hold for every run on disk, old ones included):
- faster than the machine: on a GPU listed in SPEC_PEAKS, achieved TFLOP/s above its datasheet peak for
  the dtype (scaled to the maximum SM clock NVML reported, when lower); elsewhere above PEAK_FACTOR x the
  calibrated matmul ceiling of the device that measured it (the fastest square matmul call of that
  device's calibration, results.devices), raised by how much faster the machine ran at the cell than while
  it was calibrated: the row's speed probe (taken just before the cell) over the calibration's own (runs
  written before it: over the run's median probe on that device). A calibration taken on a busy moment
  otherwise flags the honest cells of a quieter one. For float32 cells, the probe's own dtype, the ceiling
  is never below the speed probes' TFLOP/s, the row's or the calibration's: a busy moment slows the
  calibration's long matmul calls more than the probe's short ones;
- faster than the checked baseline by more than BASELINE_FACTOR: the median time of the same cell of
  BASELINE, the float64-gated naive implementation, over this cell's median (in a packed cell, naive's time
  scaled to the useful work: it computes the whole pack under a mask, executed_flops). Only a baseline
  row measured at the machine's usual speed judges its neighbours: one that drifted (results.drift: its
  speed factor more than DRIFT off its run's median probe) or was itself noisy (IQR/median above
  NOISY_REL_IQR) says how busy the machine was at that moment, not how fast naive is, and makes no cell
  suspect (issue: two CPU-burning processes slowed naive's N=256 cell to 36 ms, and honest chunked and
  sdpa, 43x and 117x faster, went unranked; the report crowned naive). Its time is not corrected by its
  speed factor instead: the probe is one short matmul taken just before the cell, and a memory-bound
  naive cell sharing two cores with a busy loop slows by another factor than it (the probe may even miss
  a tenant that arrived during the cell, which only the row's own spread shows). The ceiling rule still
  holds every cell of that N.
Only `ok` rows are judged: `wrong` rows are never ranked anyway. Nor are the rows of a variant declared
approximate (their `approximate` bound, Capability.approximate): a kernel that skips the N x N work its
FLOPs count (random features, low rank, sparsity) may pass both the ceiling and the baseline honestly. The
clock that times it is checked all the same (harness.measure.outcomes).
"""

from __future__ import annotations

import math
from typing import Any

from .devices import calibration_for, matmul_tflops, where_of
from .drift import drifted, speed_factors
from .schema import CELL_AXES

PEAK_FACTOR = 1.25
# The dtype of the speed probe (harness.measure.calibrate.speed_probe: a small float32 matmul): a ceiling of
# that dtype is never below what the probes attained (_probe_floor)
PROBE_DTYPE = "float32"
BASELINE_FACTOR = 10.0
BASELINE = "naive"


# Dense tensor-core peaks (TFLOP/s, without sparsity) and the boost clock they are quoted at, from NVIDIA's
# H100, H200 and A100 datasheets. float32 cells are held to the TF32 peak (a variant may enable TF32), float64
# to the FP64 tensor peak. Matched against the GPU name torch reports, first match wins (H200 before H100).
SPEC_PEAKS: tuple[tuple[tuple[str, ...], dict[str, float], float], ...] = (
    (("H200",), {"bfloat16": 989.4, "float16": 989.4, "float32": 494.7, "float64": 66.9}, 1980.0),
    (("H100", "PCIe"), {"bfloat16": 756.5, "float16": 756.5, "float32": 378.0, "float64": 51.2}, 1755.0),
    (("H100", "HBM3"), {"bfloat16": 989.4, "float16": 989.4, "float32": 494.7, "float64": 66.9}, 1980.0),
    (("H100", "SXM"), {"bfloat16": 989.4, "float16": 989.4, "float32": 494.7, "float64": 66.9}, 1980.0),
    (("A100",), {"bfloat16": 312.0, "float16": 312.0, "float32": 156.0, "float64": 19.5}, 1410.0),
)


def spec_peak(meta: dict[str, Any], dtype: str, gpu_name: str | None = None) -> tuple[float, str] | None:
    """(TFLOP/s, how it was read) of a GPU from its datasheet: the row's own GPU (`gpu_name`), else the
    run's; scaled down to the maximum SM clock NVML reported for the run's GPU when that is the same model
    and the clock is below the datasheet's boost clock; None for a GPU not in SPEC_PEAKS."""
    gpu = (meta.get("fingerprint") or {}).get("gpu") or {}
    name = str(gpu_name or gpu.get("name") or "")
    for words, peaks, boost in SPEC_PEAKS:
        if all(w in name for w in words) and dtype in peaks:
            peak, how = peaks[dtype], f"the {name} datasheet peak"
            try:  # NVML read the clock of the fingerprint's GPU: another model's says nothing of this one
                clock = (
                    float(str(gpu.get("sm_clock_max", "")).split()[0]) if name == gpu.get("name") else boost
                )
            except (ValueError, IndexError):
                clock = boost
            if 0 < clock < boost:
                peak, how = peak * clock / boost, f"{how} at its {clock:.0f} MHz maximum SM clock"
            return peak, how
    return None


def matmul_ceiling(meta: dict[str, Any], device: str, dtype: str, where: str | None = None) -> float | None:
    """The calibrated matmul TFLOP/s of the device that measured a row (its where_key's calibration, else
    the run's for that device kind) for a dtype, or None when it has none."""
    return matmul_tflops(calibration_for(meta, device, where), dtype)


def reasons(
    records: list[dict[str, Any]], metas: dict[str, dict[str, Any]], speeds: list[float] | None = None
) -> list[str | None]:
    """Per row (results.load's typed columns, as records): why it is suspect, or None. `speeds`: the rows'
    results.drift.speed_factors, where the caller has them already (results.load)."""
    same_cell = [a for a in CELL_AXES if a != "variant"]
    speeds = speed_factors(records) if speeds is None else speeds
    base_ms: dict[tuple, float] = {}
    for r, speed in zip(records, speeds, strict=True):
        # see the docstring; `drift` where the loader has judged it: a cell whose answer moved between its
        # measurements (results.drift.measured) is no more the machine's usual than one the probe caught
        usual = not drifted(speed) and r.get("noisy") is not True and r.get("drift") is not True
        if (
            r.get("variant") == BASELINE
            and r.get("status") == "ok"
            and _num(r.get("time_ms_median"))
            and usual
        ):
            base_ms[(r.get("run_id"), *(r.get(a) for a in same_cell))] = _useful_ms(r)
    factors = probe_factors(records, metas, speeds)
    return [
        _reason(r, metas.get(str(r.get("run_id")), {}), base_ms, same_cell, f)
        for r, f in zip(records, factors, strict=True)
    ]


def _useful_ms(r: dict[str, Any]) -> float:
    """The baseline's time for the useful work: its median, scaled by flops / executed_flops where it
    executes more (a packed cell, whose whole pack naive computes under a block-diagonal mask)."""
    t = float(r["time_ms_median"])
    useful, executed = r.get("flops"), r.get("executed_flops")
    if _num(useful) and _num(executed) and executed > useful > 0:
        return t * float(useful) / float(executed)
    return t


def _reason(
    r: dict[str, Any], meta: dict[str, Any], base_ms: dict[tuple, float], same_cell, probe_factor: float
) -> str | None:
    if r.get("status") != "ok" or _num(r.get("approximate")):
        return None
    why = []
    device, dtype, achieved = str(r.get("device")), str(r.get("dtype")), r.get("tflops")
    spec = spec_peak(meta, dtype, _gpu_name(r)) if device == "cuda" else None
    ceiling = matmul_ceiling(meta, device, dtype, where_of(r))
    if _num(achieved) and spec and achieved > spec[0]:
        why.append(f"{achieved:.3g} TFLOP/s is above {spec[1]} ({spec[0]:.4g})")
    elif _num(achieved) and not spec and ceiling:
        faster = max(1.0, probe_factor) if _num(probe_factor) else 1.0  # never lowered: see the docstring
        limit = ceiling * faster
        scaled = f", x{faster:.2f} for the machine's speed at the cell" if faster > 1 else ""
        probed = _probe_floor(r, meta) if dtype == PROBE_DTYPE else None
        if probed is not None and probed > limit:
            limit, scaled = probed, f"{scaled}, raised to the speed probes' {probed:.3g}"
        if achieved > PEAK_FACTOR * limit:
            why.append(
                f"{achieved:.3g} TFLOP/s is above {PEAK_FACTOR:g}x the calibrated matmul ceiling "
                f"({ceiling:.3g}{scaled})"
            )
    base = base_ms.get((r.get("run_id"), *(r.get(a) for a in same_cell)))
    t = r.get("time_ms_median")
    if base and _num(t) and t > 0 and r.get("variant") != BASELINE and base / t > BASELINE_FACTOR:
        why.append(
            f"{base / t:.1f}x faster than {BASELINE} on the same cell (more than {BASELINE_FACTOR:g}x)"
        )
    return "; ".join(why) or None


def _probe_floor(r: dict[str, Any], meta: dict[str, Any]) -> float | None:
    """The fastest float32 matmul the machine showed around a row: its own speed probe (just before the
    cell) or its calibration's, whichever is higher; None without either. A ceiling below it was timed at a
    slower moment than the probe: the calibration's few long calls of a large matmul are slowed by another
    process far more than the probe's short ones (issue 23: three CPU-burning processes took the 2-core
    VM's ceiling from 0.186 to 0.073 TFLOP/s, the probes stayed at 0.207, and honest naive at 0.128 was
    flagged suspect)."""
    seen = [float(v) for v in (r.get("speed_tflops"), _calibration_probe(r, meta)) if _num(v) and v > 0]
    return max(seen) if seen else None


def _calibration_probe(r: dict[str, Any], meta: dict[str, Any]) -> Any:
    """The speed probe the calibration of the row's device took (speed_probe_tflops), None in runs written
    before it was recorded."""
    return calibration_for(meta, str(r.get("device")), where_of(r)).get("speed_probe_tflops")


def probe_factors(
    rows: list[dict[str, Any]], metas: dict[str, dict[str, Any]], by_median: list[float] | None = None
) -> list[float]:
    """Per row: its speed probe (speed_tflops) over the probe its device's calibration took, or, where the
    calibration has none (runs written before it), over the median probe of its run and device (`by_median`:
    results.drift.speed_factors, computed here where not given); NaN without a probe."""
    by_median = speed_factors(rows) if by_median is None else by_median
    out = []
    for r, median_factor in zip(rows, by_median, strict=True):
        meta = metas.get(str(r.get("run_id")), {})
        at_calibration = _calibration_probe(r, meta)
        probe = r.get("speed_tflops")
        if _num(probe) and _num(at_calibration) and at_calibration > 0:
            out.append(float(probe) / float(at_calibration))
        else:
            out.append(median_factor)
    return out


def _gpu_name(r: dict[str, Any]) -> str | None:
    name = r.get("gpu_name")
    return name if isinstance(name, str) and name else None


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
