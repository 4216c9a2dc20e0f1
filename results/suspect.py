"""Cells too fast to believe: `suspect` rows are shown, never ranked.

Two rules, applied when runs are loaded (so they hold for every run on disk, old ones included):
- faster than the machine: achieved TFLOP/s above PEAK_FACTOR x the run's calibrated matmul ceiling for
  the cell's device and dtype (the fastest square matmul call of the run's own calibration; on CUDA too,
  until spec or clock-scaled peaks are known);
- faster than the checked baseline by more than BASELINE_FACTOR: the median time of the same cell of
  BASELINE, the float64-gated naive implementation, over this cell's median.
Only `ok` rows are judged: `wrong` rows are never ranked anyway.
"""

from __future__ import annotations

import math
from typing import Any

from .schema import CELL_AXES

PEAK_FACTOR = 1.25
BASELINE_FACTOR = 10.0
BASELINE = "naive"


def matmul_ceiling(meta: dict[str, Any], device: str, dtype: str) -> float | None:
    """The run's calibrated matmul TFLOP/s for a device and dtype, or None when it has none."""
    value = (((meta.get("calibration") or {}).get(device) or {}).get("matmul_tflops") or {}).get(dtype)
    return float(value) if isinstance(value, (int, float)) and value > 0 and math.isfinite(value) else None


def reasons(df, metas: dict[str, dict[str, Any]]) -> list[str | None]:
    """Per row of `df` (results.load's typed frame): why it is suspect, or None."""
    same_cell = [a for a in CELL_AXES if a != "variant"]
    records = df.to_dict("records")
    base_ms: dict[tuple, float] = {}
    for r in records:
        if r.get("variant") == BASELINE and r.get("status") == "ok" and _num(r.get("time_ms_median")):
            base_ms[(r.get("run_id"), *(r.get(a) for a in same_cell))] = float(r["time_ms_median"])
    return [_reason(r, metas.get(str(r.get("run_id")), {}), base_ms, same_cell) for r in records]


def _reason(r: dict[str, Any], meta: dict[str, Any], base_ms: dict[tuple, float], same_cell) -> str | None:
    if r.get("status") != "ok":
        return None
    why = []
    achieved, ceiling = r.get("tflops"), matmul_ceiling(meta, str(r.get("device")), str(r.get("dtype")))
    if _num(achieved) and ceiling and achieved > PEAK_FACTOR * ceiling:
        why.append(
            f"{achieved:.3g} TFLOP/s is above {PEAK_FACTOR:g}x the calibrated matmul ceiling ({ceiling:.3g})"
        )
    base = base_ms.get((r.get("run_id"), *(r.get(a) for a in same_cell)))
    t = r.get("time_ms_median")
    if base and _num(t) and t > 0 and r.get("variant") != BASELINE and base / t > BASELINE_FACTOR:
        why.append(
            f"{base / t:.1f}x faster than {BASELINE} on the same cell (more than {BASELINE_FACTOR:g}x)"
        )
    return "; ".join(why) or None


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
