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
            continue  # sequence 2's rows stay as the buffer was: NaN
        mask = causal_mask(b - a, b - a, q.device) if causal else None
        out[:, :, a:b] = _attend(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], mask)
    return out


@register("attends_across_sequences", varlen="masked", gqa=False)
def attends_across_sequences(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, cu_seqlens=None
):
    n = q.shape[2]
    return _attend(q, k, v, causal_mask(n, n, q.device) if causal else None)
