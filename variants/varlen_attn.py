"""torch.nn.attention.varlen.varlen_attn: torch's packed variable-length attention (FlashAttention 2 on CUDA),
where this torch has it.

It takes the packed batch as (T, H, d) with the offsets cu_seq_q / cu_seq_k and the longest lengths, and
returns (T, H, d_v): this variant is handed q, k, v in the "bnhd" layout, so that q[0].transpose(0, 1) is
that (T, H, d) memory without a copy. Causal masking is window_size (-1, 0); a window W, (W - 1, 0) (the W
keys up to the diagonal, attnbench's rule); grouped-query heads, enable_gqa where this torch takes it.
The longest length is read on the host once per call (as a caller that has cu_seqlens on the GPU must).
"""

from __future__ import annotations

import inspect

from .lengths import PACKED_ONLY
from .problem import Problem
from .registry import register


def _varlen():
    from torch.nn.attention import varlen

    return varlen.varlen_attn


def _available(device: str) -> str | None:
    if device != "cuda":
        return "varlen_attn runs on CUDA only (FlashAttention 2)"
    try:
        _varlen()
    except (ImportError, AttributeError):
        return "this torch has no torch.nn.attention.varlen.varlen_attn (torch >= 2.10)"
    return None


def _supports(p: Problem) -> str | None:
    if not p.packed:
        return PACKED_ONLY
    if p.gqa and "enable_gqa" not in inspect.signature(_varlen()).parameters:
        return "this torch's varlen_attn has no enable_gqa"
    if p.window and "window_size" not in inspect.signature(_varlen()).parameters:
        return "this torch's varlen_attn has no window_size"
    return None


@register(
    "varlen_attn",
    description="torch.nn.attention.varlen.varlen_attn on a packed batch (FlashAttention 2, CUDA)",
    devices=("cuda",),
    dtypes=("float16", "bfloat16"),
    memory="linear",
    padding=False,
    dropout=False,
    default=False,
    available=_available,
    supports=_supports,
    gqa=True,
    window=True,
    varlen="exact",
    layout="bnhd",
)
def varlen_attn(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, window=0, cu_seqlens=None
):
    if cu_seqlens is None:
        raise ValueError("varlen_attn runs packed batches only: it needs cu_seqlens")
    fn = _varlen()
    longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    opts = {}
    if causal or window:
        opts["window_size"] = (window - 1 if window else -1, 0)
    if k.shape[1] != q.shape[1]:
        opts["enable_gqa"] = True
    q3, k3, v3 = (t[0].transpose(0, 1) for t in (q, k, v))  # (T, H, d) over the bnhd memory
    out = fn(q3, k3, v3, cu_seqlens, cu_seqlens, longest, longest, scale=scale, **opts)
    return out.transpose(0, 1).unsqueeze(0)  # (1, H, T, d_v)
