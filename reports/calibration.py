"""Machine speed is not code speed: two runs' calibrations side by side, and times normalised by them.

Every run calibrates its device at the start (harness.calibrate): the fastest square matmul call
(TFLOP/s per dtype) and the fastest device-to-device copy (GB/s). Two runs whose ceilings differ by more
than CALIBRATION_WARN measured different machines, or one machine on a different day, and their raw
time ratios mix the machine's speed with the code's.

`--normalize calibration` rescales run B's times to run A's machine: each cell is priced against the
ceiling that bounds it (a roofline over the cell's FLOPs and an estimate of the bytes it moves), and B's
samples are multiplied by ceiling_B / ceiling_A. A cell that is 1.25x slower on a machine whose bounding
ceiling is 0.8x as fast then compares as the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CALIBRATION_WARN = 0.10  # ceilings more than 10% apart: the runs measured machines of different speed
ELEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
SCORE_PASSES = 4  # score-sized tensors a materialising variant moves per call: write S, read/write P, read P


@dataclass(frozen=True)
class Ceiling:
    """One calibrated ceiling of each run, and B's over A's."""

    device: str
    what: str  # "matmul float32 TFLOP/s", "copy GB/s"
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float:
        return self.b / self.a if self.a and self.b else math.nan

    @property
    def differs(self) -> bool:
        return math.isfinite(self.ratio) and abs(self.ratio - 1) > CALIBRATION_WARN


def _cal(meta: dict[str, Any], device: str) -> dict[str, Any]:
    return (meta.get("calibration") or {}).get(device) or {}


def _positive(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def ceilings(meta_a: dict[str, Any], meta_b: dict[str, Any], pairs: list[tuple[str, str]]) -> list[Ceiling]:
    """The matmul ceiling per (device, dtype) of `pairs` and the copy bandwidth per device, in both runs.
    A pair is (device in A, device in B): they differ when two machines' CPU and GPU runs are compared."""
    out = []
    for dev_a, dev_b in dict.fromkeys(pairs):
        ca, cb = _cal(meta_a, dev_a), _cal(meta_b, dev_b)
        device = dev_a if dev_a == dev_b else f"{dev_a} / {dev_b}"
        for dtype in sorted(set(ca.get("matmul_tflops") or {}) | set(cb.get("matmul_tflops") or {})):
            a = _positive((ca.get("matmul_tflops") or {}).get(dtype))
            b = _positive((cb.get("matmul_tflops") or {}).get(dtype))
            out.append(Ceiling(device, f"matmul {dtype} TFLOP/s", a, b))
        out.append(
            Ceiling(device, "copy GB/s", _positive(ca.get("copy_gbps")), _positive(cb.get("copy_gbps")))
        )
    return out


def warnings_for(cs: list[Ceiling], a: str = "A", b: str = "B") -> list[str]:
    """One line per ceiling that differs by more than CALIBRATION_WARN between the runs (named a and b)."""
    return [
        f"calibration differs: {c.device} {c.what} is {c.b:.3g} in {b} against {c.a:.3g} in {a} "
        f"({c.ratio:.2f}x): raw ratios mix the machine's speed with the code's; see --normalize calibration"
        for c in cs
        if c.differs
    ]


def bound(row: dict[str, Any], meta: dict[str, Any]) -> str:
    """'compute' or 'memory': which ceiling bounds the cell on this run's machine (a roofline).

    Bytes moved: q, k, v and the output once, plus SCORE_PASSES score-sized tensors for a variant whose
    recorded memory class is quadratic (it materialises the N x N scores); FLOPs: the row's own count.
    """
    cal = _cal(meta, str(row["device"]))
    tflops = _positive((cal.get("matmul_tflops") or {}).get(str(row["dtype"])))
    gbps = _positive(cal.get("copy_gbps"))
    flops = _positive(row.get("flops"))
    if not (tflops and gbps and flops):
        return "compute"
    e = ELEM_BYTES.get(str(row["dtype"]), 4)
    bh, n_q = int(row["batch"]) * int(row["heads"]), int(row["seq_len"])
    n_k = _int_or(row.get("seq_k"), n_q)  # keys apart from queries (decode); older rows: = seq_len
    kv_heads = _int_or(row.get("kv_heads"), int(row["heads"]))  # grouped-query k/v heads; older rows: = heads
    d = int(row["d_k"]) + int(row["d_v"])
    moved = (bh * n_q + int(row["batch"]) * kv_heads * n_k) * d * e  # q and the output, k and v
    memory_class = ((meta.get("variant_capabilities") or {}).get(str(row["variant"])) or {}).get("memory")
    if memory_class == "quadratic":
        moved += SCORE_PASSES * bh * n_q * n_k * e
    return "memory" if moved / (gbps * 1e9) > flops / (tflops * 1e12) else "compute"


def _int_or(value: Any, default: int) -> int:
    """value as an int, or default when it is missing (None, NA, NaN)."""
    try:
        return default if value is None or value != value else int(value)
    except TypeError:  # pd.NA != x is NA, whose truth value raises
        return default


def factor(
    row: dict[str, Any], meta_a: dict[str, Any], meta_b: dict[str, Any], device_b: str
) -> tuple[float, str]:
    """(ceiling_B / ceiling_A for the ceiling that bounds this cell in A, 'compute' or 'memory'):
    B's times multiplied by it are B's times on A's machine. NaN when either run lacks that ceiling."""
    which = bound(row, meta_a)
    ca, cb = _cal(meta_a, str(row["device"])), _cal(meta_b, device_b)
    if which == "compute":
        a = _positive((ca.get("matmul_tflops") or {}).get(str(row["dtype"])))
        b = _positive((cb.get("matmul_tflops") or {}).get(str(row["dtype"])))
    else:
        a, b = _positive(ca.get("copy_gbps")), _positive(cb.get("copy_gbps"))
    return (b / a if a and b else math.nan), which
