"""The formulas every layer shares, in one place: a cell's identity, statistics of raw timing samples,
FLOPs and TFLOP/s, and how bytes and dtypes are written for people.

The harness computes result rows with them, the pytest-benchmark importer rebuilds rows with them, and
reports read what they produced; nothing else derives these numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .schema import NOISY_REL_IQR

SHORT_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}


def cell_id(
    variant: str, device: str, dtype: str, batch: int, heads: int, seq_len: int, d_k: int, d_v: int,
    causal: bool, padding: float, pass_: str,
) -> str:  # fmt: skip
    """A cell's identity, for resume, merge and compare: variant|device|dtype|b|h|n|dk|dv|mask|pad|pass."""
    mask = "causal" if causal else "full"
    shape = f"b{batch}|h{heads}|n{seq_len}|dk{d_k}|dv{d_v}"
    return f"{variant}|{device}|{dtype}|{shape}|{mask}|pad{padding:g}|{pass_}"


# ---- timing statistics ----------------------------------------------------------------------------


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(p25, median, p75) with linear interpolation between order statistics (numpy's default method)."""
    if not samples:
        return math.nan, math.nan, math.nan
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    p25, median, p75 = statistics.quantiles(samples, n=4, method="inclusive")
    return p25, median, p75


def rel_iqr(p25: float, median: float, p75: float) -> float:
    """IQR / median: the spread the `noisy` flag and the adaptive sampling stop look at."""
    return (p75 - p25) / median if median > 0 else math.inf


def summarize(samples_ms: Sequence[float]) -> dict[str, float | int | bool]:
    """The timing columns of a result row, derived from its raw per-call samples (ms)."""
    p25, median, p75 = quartiles(samples_ms)
    spread = rel_iqr(p25, median, p75)
    return {
        "time_ms_median": median,
        "time_ms_p25": p25,
        "time_ms_p75": p75,
        "rel_iqr": spread,
        "noisy": spread > NOISY_REL_IQR,
        "n_samples": len(samples_ms),
    }


# ---- FLOPs ----------------------------------------------------------------------------------------
# The convention of FlashAttention's benchmarks (Dao-AILab/flash-attention,
# benchmarks/benchmark_flash_attention.py) and triton's fused-attention tutorial:
#   forward  = 2*B*H*N_q*N_k*d_k (Q K^T) + 2*B*H*N_q*N_k*d_v (P V)  = 4*B*H*N_q*N_k*d when d_k = d_v = d
#   causal   x 0.5 (half the score matrix is needed)
#   backward = 2.5 x forward (five matmuls of the forward's size instead of two); fwd+bwd = 3.5 x forward
# Softmax, scaling and masking are not counted, nor is key padding subtracted: every variant is credited
# with the same work for the same cell, so TFLOP/s compare like with like.

PASS_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}


def attention_flops(
    batch: int, heads: int, seq_q: int, seq_k: int, d_k: int, d_v: int, *, causal: bool, pass_: str = "fwd"
) -> int:
    """FLOPs of one call under the convention above."""
    if pass_ not in PASS_FACTOR:
        raise ValueError(f"unknown pass {pass_!r}; known: {', '.join(PASS_FACTOR)}")
    fwd = 2 * batch * heads * seq_q * seq_k * (d_k + d_v)
    if causal:
        fwd //= 2
    return int(fwd * PASS_FACTOR[pass_])


def tflops(flops: float | None, time_ms: float) -> float:
    """Achieved TFLOP/s for `flops` done in `time_ms` milliseconds (NaN when either is missing)."""
    if flops is None or not time_ms or time_ms <= 0:
        return math.nan
    return flops / (time_ms * 1e-3) / 1e12


# ---- text for people ------------------------------------------------------------------------------


def bytes_text(b: float | None) -> str:
    """Binary units, three significant digits: 512 KiB, 1.5 GiB, -2 KiB; '-' for None."""
    if b is None:
        return "-"
    sign, b = ("-" if b < 0 else ""), abs(b)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{sign}{b / size:.3g} {unit}"
    return f"{sign}{b:.3g} B"


def short_dtype(name: str) -> str:
    """f32, f16, bf16, f64 for the dtype names; any other name as it is."""
    return SHORT_DTYPE.get(name, name)
