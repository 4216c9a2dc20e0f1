"""Test-only variants that declare the memory layout of their inputs (Capability.layout), loaded with
--variant-file. Each records what every call was handed, so that the tests see the strides of the gated,
timed and fresh-input calls alike."""

import torch

from attnbench import register, variants

# one entry per call: (variant, q's shape, q's, k's and v's strides, whether xformers' packing of the batch
# into one sequence, transpose(1, 2).reshape(1, -1, H, d), is a view of q's memory rather than a copy)
SEEN: list = []


def _answer(name, q, k, v, causal, key_lengths):
    b, h, n, d = q.shape  # (B, H, N_q, d_k)
    packed = q.transpose(1, 2).reshape(1, -1, h, d)  # (1, B*N_q, H, d_k)
    SEEN.append((name, tuple(q.shape), q.stride(), k.stride(), v.stride(), packed.data_ptr() == q.data_ptr()))
    return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths)


@register("layout_bnhd", description="naive on (B, N, H, d) memory, recording its inputs", layout="bnhd")
def layout_bnhd(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _answer("layout_bnhd", q, k, v, causal, key_lengths)


@register("layout_default", description="naive, no layout declared, recording its inputs")
def layout_default(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _answer("layout_default", q, k, v, causal, key_lengths)


@register("layout_bnhd_mutate", description="bnhd; right answer, then doubles v in place", layout="bnhd")
def layout_bnhd_mutate(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    out = _answer("layout_bnhd_mutate", q, k, v, causal, key_lengths)
    with torch.no_grad():
        v.mul_(2.0)
    return out
