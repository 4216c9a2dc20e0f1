"""FLOP counts, by the convention of FlashAttention's benchmarks (Dao-AILab/flash-attention,
benchmarks/benchmark_flash_attention.py) and triton's fused-attention tutorial.

forward  = 2*B*H*N_q*N_k*d_k (Q K^T) + 2*B*H*N_q*N_k*d_v (P V)   = 4*B*H*N_q*N_k*d when d_k = d_v = d
causal   x 0.5 (half the score matrix is needed)
backward = 2.5 x forward (five matmuls of the forward's size instead of two)
fwd+bwd  = 3.5 x forward
Softmax, scaling and masking are not counted, nor is key padding subtracted: every variant is
credited with the same work for the same cell, so TFLOP/s compare like with like.
"""

from __future__ import annotations

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


def tflops(flops: int, time_ms: float) -> float:
    """Achieved TFLOP/s for `flops` done in `time_ms` milliseconds."""
    return flops / (time_ms * 1e-3) / 1e12 if time_ms > 0 else float("nan")
