"""Packed-batch plug-ins for tests/harness/test_packed.py: one that leaves a sequence's rows unwritten (NaN,
as pytorch#194167's paged varlen_attn did with num_splits=2), one that attends across sequences (the whole
pack, no block-diagonal mask)."""

import torch

from attnbench.variants import register
from attnbench.variants.masks import causal_mask


def _attend(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@register("leaves_a_sequence_unwritten", varlen="exact", gqa=False)
def leaves_a_sequence_unwritten(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, cu_seqlens=None
):
    bounds = cu_seqlens.tolist()
    out = torch.full_like(q, float("nan"))
    for s, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if s == 2:
            continue  # the third sequence's rows stay as the buffer was: NaN
        mask = causal_mask(b - a, b - a, q.device) if causal else None
        out[:, :, a:b] = _attend(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], mask)
    return out


@register("attends_across_sequences", varlen="masked", gqa=False)
def attends_across_sequences(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, cu_seqlens=None
):
    n = q.shape[2]
    return _attend(q, k, v, causal_mask(n, n, q.device) if causal else None)


@register("zeroes_its_last_row", varlen="exact", gqa=False)
def zeroes_its_last_row(q, k, v, *, causal=False, cu_seqlens):
    """docs/presets-and-workloads.md's my_varlen, but the pack's last row is never written: one row of one
    sequence, which a norm over the whole pack dilutes below bfloat16's tolerance."""
    bounds = cu_seqlens.tolist()
    out = torch.empty_like(q)
    for a, b in zip(bounds, bounds[1:], strict=False):
        out[:, :, a:b] = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=causal
        )
    out[:, :, -1] = 0
    return out
