"""Attention with the softmax written out: max-subtracted exp / sum, and its unstable twin.

Subtracting the row max leaves softmax unchanged (exp(x - m) / sum exp(x - m) = exp(x) / sum exp(x))
but keeps every exponent <= 0, so exp cannot overflow. The twin skips that step: exp overflows to inf
once a logit passes ~11 in float16 or ~88 in float32/bfloat16, and inf / inf is NaN. It is registered
with default=False (left out of sweeps) and exists for the numerics probe.
"""

from __future__ import annotations

from . import grouped, lazy
from .masks import attention_mask
from .mods import NONE, apply_mod
from .registry import register

torch = lazy.module("torch", globals())
F = lazy.module("torch.nn.functional", globals(), "F")

_DTYPES = ("float32", "float16", "bfloat16", "float64")
# grouped k/v heads, lower-right causal, windows, score modifications, packed batches (one T x T score matrix
# under the block-diagonal mask)
_AXES = dict(gqa=True, lower_right=True, window=True, mods=("alibi", "softcap"), varlen="masked")


def _scores(q, k, causal, key_lengths, scale, causal_align, window, mod, cu_seqlens=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = grouped.scores(q, k) * scale  # (B, H, N_q, N_k)
    scores = apply_mod(scores, mod, causal=causal, causal_align=causal_align)  # before the masks
    mask = attention_mask(
        q.shape[-2], k.shape[-2], causal=causal, key_lengths=key_lengths, device=q.device,
        causal_align=causal_align, window=window, cu_seqlens=cu_seqlens,
    )  # fmt: skip
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


@register(
    "stable_softmax",
    description="explicit softmax: exp(x - rowmax) / rowsum; materialises the scores",
    dtypes=_DTYPES,
    memory="quadratic",
    **_AXES,
)
def stable_softmax(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0,
    mod=NONE, cu_seqlens=None,
):  # fmt: skip
    scores = _scores(q, k, causal, key_lengths, scale, causal_align, window, mod, cu_seqlens)
    row_max = scores.amax(dim=-1, keepdim=True)  # (B, H, N_q, 1)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)  # fully masked row: exp(-inf - 0) = 0
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)  # fully masked row: 0 / 1 = 0, not 0 / 0
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return grouped.weighted_values(weights, v)


@register(
    "unstable_softmax",
    description="exp(x) / sum(exp(x)) with no max subtraction: overflows on large logits (numerics demo)",
    dtypes=_DTYPES,
    memory="quadratic",
    default=False,
    **_AXES,
)
def unstable_softmax(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0,
    mod=NONE, cu_seqlens=None,
):  # fmt: skip
    scores = _scores(q, k, causal, key_lengths, scale, causal_align, window, mod, cu_seqlens)
    e = torch.exp(scores)  # overflows to inf for large logits
    weights = e / e.sum(dim=-1, keepdim=True)
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return grouped.weighted_values(weights, v)
