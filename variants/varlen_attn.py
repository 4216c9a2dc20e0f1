"""torch.nn.attention.varlen.varlen_attn: torch's packed variable-length attention (FlashAttention 2 on CUDA),
where this torch has it; a paged K/V cache through its block_table (torch >= 2.12).

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
    if p.page_size and "block_table" not in inspect.signature(_varlen()).parameters:
        return "this torch's varlen_attn has no block_table (torch >= 2.12)"
    if p.page_size:
        return None
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
    paged=True,
    lower_right=True,  # a paged cell's queries at the end of their context: FlashAttention's causal
    layout="bnhd",
)
def varlen_attn(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0,
    cu_seqlens=None, block_table=None,
):  # fmt: skip
    if block_table is not None:
        return _paged(q, k, v, key_lengths, block_table, causal, scale)
    if cu_seqlens is None:
        raise ValueError("varlen_attn runs packed or paged batches only: it needs cu_seqlens or block_table")
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


def _paged(q, k, v, key_lengths, block_table, causal: bool, scale):
    """A paged decode step: B sequences of N_q queries, (B * N_q, H, d) over q's bnhd memory, against the
    pools (P, page, H_kv, d) as they are, seqused_k the contexts; causal is FlashAttention's bottom-right."""
    import torch

    b, h, n_q, _ = q.shape
    q3 = q.transpose(1, 2).reshape(b * n_q, h, q.shape[3])  # a view of the bnhd memory
    cu_q = torch.arange(0, (b + 1) * n_q, n_q, dtype=torch.int32, device=q.device)
    lengths = key_lengths.to(torch.int32)
    opts = {"window_size": (-1, 0)} if causal else {}
    if k.shape[2] != h:
        opts["enable_gqa"] = True
    out = _varlen()(
        q3, k, v, cu_q, None, n_q, int(lengths.max()), scale=scale, seqused_k=lengths,
        block_table=block_table.to(torch.int32), **opts,
    )  # fmt: skip
    return out.reshape(b, n_q, h, -1).transpose(1, 2)
