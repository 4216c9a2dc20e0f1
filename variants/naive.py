"""Naive attention: matmul -> scale -> mask -> softmax -> matmul, materialising the N_q x N_k scores."""

from __future__ import annotations

from . import grouped, lazy
from .masks import attention_mask, fully_masked_rows
from .mods import NONE, apply_mod
from .registry import register

torch = lazy.module("torch", globals())
F = lazy.module("torch.nn.functional", globals(), "F")


@register(
    "naive",
    description="matmul, scale, mask, torch.softmax, matmul; materialises (B, H, N_q, N_k) scores",
    dtypes=("float32", "float16", "bfloat16", "float64"),
    memory="quadratic",
    gqa=True,
    lower_right=True,
    window=True,
    mods=("alibi", "softcap"),
    varlen="masked",  # one T x T score matrix under the block-diagonal mask
)
def naive(
    q,
    k,
    v,
    *,
    causal=False,
    key_lengths=None,
    dropout_p=0.0,
    scale=None,
    causal_align="top-left",
    window=0,
    mod=NONE,
    cu_seqlens=None,
    return_weights=False,
):
    """Textbook attention. With return_weights=True returns (out, weights (B, H, N_q, N_k))."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = grouped.scores(q, k)  # (B, H, N_q, N_k); k/v heads shared by G query heads, never repeated
    scores = scores * scale
    scores = apply_mod(scores, mod, causal=causal, causal_align=causal_align)  # before the masks: -inf stays
    rules = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window)
    mask = attention_mask(n_q, n_k, device=q.device, cu_seqlens=cu_seqlens, **rules)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    empty = fully_masked_rows(n_q, n_k=n_k, **rules)
    if empty is not None:  # softmax of an all -inf row is NaN (its gradient too); the convention is zeros
        scores = scores.masked_fill(empty.to(q.device), 0.0)
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty.to(q.device), 0.0)
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    out = grouped.weighted_values(weights, v)  # (B, H, N_q, d_v)
    return (out, weights) if return_weights else out
