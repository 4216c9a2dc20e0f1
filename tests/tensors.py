"""Seeded random attention inputs for the variant tests: one generator, so that every test file draws the
same q, k, v for the same arguments."""

from __future__ import annotations

import torch

from attnbench import variants


def qkv(b=2, h=4, h_kv=None, n_q=40, n_k=None, d_k=16, d_v=None, dtype="float32", seed=0):
    """q (b, h, n_q, d_k), k (b, h_kv, n_k, d_k), v (b, h_kv, n_k, d_v), standard normal from one generator
    seeded with `seed`, drawn in float32 (in that order) and then cast to `dtype` (a name or a torch dtype),
    so a half-precision draw is the float32 one rounded. h_kv, n_k and d_v default to h, n_q and d_k."""
    g = torch.Generator().manual_seed(seed)
    dt = dtype if isinstance(dtype, torch.dtype) else variants.torch_dtype(dtype)
    h_kv, n_k, d_v = h if h_kv is None else h_kv, n_q if n_k is None else n_k, d_k if d_v is None else d_v
    return (
        torch.randn(b, h, n_q, d_k, generator=g).to(dt),
        torch.randn(b, h_kv, n_k, d_k, generator=g).to(dt),
        torch.randn(b, h_kv, n_k, d_v, generator=g).to(dt),
    )
