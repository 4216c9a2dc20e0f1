"""Grouped-query attention without repeating K and V: the G = H / H_kv query heads that share a k/v head
are folded into that head's query rows, so Q K^T and P V are one matmul per k/v head.

q (B, H, N_q, d) is (B, H_kv, G * N_q, d) in the same memory (query head h = kv head h // G, group member
h % G), so the fold is a free view of a contiguous q, and the (B, H_kv, G * N_q, N_k) scores are the
(B, H, N_q, N_k) scores in the same memory too. K and V are read as they are: no repeat_interleave, no
broadcast matmul (which would expand K to H heads and copy it). With H_kv = H both are plain matmuls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q (B, H, N_q, d_k), k (B, H_kv, N_k, d_k) -> q k^T (B, H, N_q, N_k), unscaled."""
    b, h, n_q, d_k = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    s = q.reshape(b, h_kv, (h // h_kv) * n_q, d_k) @ k.transpose(-2, -1)  # (B, H_kv, G*N_q, N_k)
    return s.view(b, h, n_q, n_k)


def weighted_values(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """weights (B, H, N_q, N_k), v (B, H_kv, N_k, d_v) -> weights @ v (B, H, N_q, d_v)."""
    b, h, n_q, n_k = weights.shape
    h_kv, d_v = v.shape[1], v.shape[3]
    out = weights.reshape(b, h_kv, (h // h_kv) * n_q, n_k) @ v  # (B, H_kv, G*N_q, d_v)
    return out.view(b, h, n_q, d_v)
