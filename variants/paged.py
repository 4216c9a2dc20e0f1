"""Paged-KV decode (the page_size axis): each sequence's keys and values live in fixed-size pages of one
pool, scattered, found through a page table, as vLLM's and FlashAttention's paged caches keep them.

The calling convention of a paged cell:
  q            (B, H, N_q, d_k): each sequence's N_q newest tokens
  k, v         (P, page_size, H_kv, d): the pool of P pages (FlashAttention's and torch varlen_attn's layout)
  key_lengths  (B,): each sequence's context length L_b >= N_q, the valid tokens of its pages (its last
               page is partly filled: the slots past L_b hold values that must be ignored)
  block_table  (B, max_pages) int32: page j of sequence b is pool page block_table[b, j]; entries past
               ceil(L_b / page_size) are 0 and must be ignored
Query i of sequence b sits at position L_b - N_q + i: with causal masking (lower-right, per sequence) it sees
keys j <= L_b - N_q + i, else all L_b. The output is (B, H, N_q, d_v).

Two variants: `paged_gather` copies each sequence's pages into a contiguous (B, H_kv, max L, d) batch and
calls SDPA under a key-length mask (what code without a paged kernel does: it pays for the copy), and
`paged_chunked` walks the page table column by column with an online softmax, reading each page where it
lies. torch's varlen_attn takes the pages directly on CUDA (variants/varlen_attn.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .lengths import PAGED_ONLY
from .problem import Problem
from .registry import register


def _paged_only(p: Problem) -> str | None:
    return None if p.page_size else PAGED_ONLY


def gather_pages(pages: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """(P, page, H_kv, d) pool -> (B, H_kv, length, d): each sequence's first `length` slots, contiguous."""
    b, page = block_table.shape[0], pages.shape[1]
    n_pages = math.ceil(length / page)
    picked = pages[block_table[:, :n_pages].long()]  # (B, n_pages, page, H_kv, d)
    return picked.flatten(1, 2)[:, :length].transpose(1, 2).reshape(b, pages.shape[2], length, pages.shape[3])


def visible_keys(key_lengths: torch.Tensor, n_q: int, n_k: int, causal: bool) -> torch.Tensor:
    """(B, 1, N_q, N_k) mask: query i of sequence b sees key j < L_b, and j <= L_b - N_q + i with causal."""
    lengths = key_lengths.to(torch.int64)[:, None, None]  # (B, 1, 1)
    j = torch.arange(n_k, device=key_lengths.device)[None, None, :]
    mask = j < lengths
    if causal:
        i = torch.arange(n_q, device=key_lengths.device)[None, :, None]
        mask = mask & (j <= lengths - n_q + i)
    return mask[:, None]


def _gqa(q, heads_kv: int) -> dict:
    return {"enable_gqa": True} if heads_kv != q.shape[1] else {}


@register(
    "paged_gather",
    description="a paged K/V cache gathered into a contiguous batch, then one SDPA call: pays for the copy",
    padding=False,
    dropout=False,
    backward=False,
    default=False,
    gqa=True,
    lower_right=True,
    paged=True,
    supports=_paged_only,
)
def paged_gather(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
    block_table=None,
):  # fmt: skip
    if block_table is None or key_lengths is None:
        raise ValueError("paged_gather reads a paged cache only: it needs block_table and key_lengths")
    longest = int(key_lengths.max())  # a host read, as a caller with lengths on the GPU must make
    kb, vb = gather_pages(k, block_table, longest), gather_pages(v, block_table, longest)
    mask = visible_keys(key_lengths, q.shape[2], longest, causal)
    return F.scaled_dot_product_attention(q, kb, vb, attn_mask=mask, scale=scale, **_gqa(q, k.shape[2]))


@register(
    "paged_chunked",
    description="online softmax over a paged K/V cache, one page-table column at a time (no gather)",
    padding=False,
    dropout=False,
    backward=False,
    default=False,
    memory="linear",
    gqa=True,
    lower_right=True,
    paged=True,
    supports=_paged_only,
)
def paged_chunked(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
    block_table=None,
):  # fmt: skip
    if block_table is None or key_lengths is None:
        raise ValueError("paged_chunked reads a paged cache only: it needs block_table and key_lengths")
    b, h, n_q, d_k = q.shape
    page, h_kv, d_v = k.shape[1], k.shape[2], v.shape[3]
    group = h // h_kv
    scale = d_k**-0.5 if scale is None else scale
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    qg = (q.to(acc_dtype) * scale).reshape(b, h_kv, group * n_q, d_k)  # rows (head in group, query)
    lengths = key_lengths.to(torch.int64)
    m = torch.full((b, h_kv, group * n_q, 1), -math.inf, dtype=acc_dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(b, h_kv, group * n_q, d_v, dtype=acc_dtype, device=q.device)
    i = torch.arange(n_q, device=q.device).repeat(group)[None, :, None]  # each row's query index
    for col in range(math.ceil(int(lengths.max()) / page)):
        ids = block_table[:, col].long()
        kp = k[ids].to(acc_dtype).permute(0, 2, 3, 1)  # (B, H_kv, d, page)
        vp = v[ids].to(acc_dtype).transpose(1, 2)  # (B, H_kv, page, d_v)
        s = torch.matmul(qg, kp)  # (B, H_kv, rows, page)
        j = col * page + torch.arange(page, device=q.device)[None, None, :]
        hide = j >= lengths[:, None, None]
        if causal:
            hide = hide | (j > lengths[:, None, None] - n_q + i)
        s = s.masked_fill(hide[:, None], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        fix = torch.exp(m - safe)
        l = l * fix + p.sum(-1, keepdim=True)
        acc = acc * fix + torch.matmul(p, vp)
        m = m_new
    out = acc / l
    return out.reshape(b, h, n_q, d_v).to(q.dtype)
