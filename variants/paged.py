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

Three variants: `paged_gather` copies each sequence's pages into a contiguous (B, H_kv, max L, d) batch and
calls SDPA under a key-length mask (what code without a paged kernel does: it pays for the copy),
`paged_chunked` walks the page table column by column with an online softmax, reading each page where it
lies, and `paged_flex` runs flex_attention on the pool in place with a paged block mask: a key block is a
page, each sequence visits the pool pages its table names, and its mask_mod maps a pool slot back to the
sequence's position (what torch's experimental PagedAttention builds; here from the block table alone).
torch's varlen_attn takes the pages directly on CUDA (variants/varlen_attn.py).
"""

from __future__ import annotations

import functools
import math

from . import lazy
from .errors import UnsupportedError
from .lengths import PAGED_ONLY
from .problem import Problem
from .registry import register

torch = lazy.module("torch", globals())
F = lazy.module("torch.nn.functional", globals(), "F")


def _paged_only(p: Problem) -> str | None:
    return None if p.page_size else PAGED_ONLY


# what every variant here declares: paged decode cells only, forward only, grouped-query heads and queries at
# the end of their contexts (lower-right) taken, not in default sweeps
_PAGED = dict(
    padding=False, dropout=False, backward=False, default=False, gqa=True, lower_right=True, paged=True
)


def _needs_table(name: str, block_table, key_lengths) -> None:
    if block_table is None or key_lengths is None:
        raise ValueError(f"{name} reads a paged cache only: it needs block_table and key_lengths")


def gather_pages(pages: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """(P, page, H_kv, d) pool -> (B, H_kv, length, d): each sequence's first `length` slots, gathered in
    one index_select (one copy), seen head-major (a view of it)."""
    b, page = block_table.shape[0], pages.shape[1]
    n_pages = math.ceil(length / page)
    ids = block_table[:, :n_pages].reshape(-1).long()
    picked = pages.index_select(0, ids).view(b, n_pages * page, pages.shape[2], pages.shape[3])
    return picked[:, :length].transpose(1, 2)


def visible_keys(key_lengths: torch.Tensor, n_q: int, n_k: int, causal: bool) -> torch.Tensor:
    """(B, 1, N_q, N_k) mask: query i of sequence b sees key j < L_b, and j <= L_b - N_q + i with causal."""
    lengths = key_lengths.to(torch.int64)[:, None, None]  # (B, 1, 1)
    j = torch.arange(n_k, device=key_lengths.device)[None, None, :]
    mask = j < lengths
    if causal:
        i = torch.arange(n_q, device=key_lengths.device)[None, :, None]
        mask = mask & (j <= lengths - n_q + i)
    return mask[:, None]


@register(
    "paged_gather",
    description="a paged K/V cache gathered into a contiguous batch, then one SDPA call: pays for the copy",
    # its (B, H_kv, group x N_q, N_k) key mask (and the float copy SDPA makes of it) grows as N_q x N_k, on
    # top of the contexts it copies: quadratic, which a decode series (N_q held) sees as linear in N_k
    memory="quadratic",
    supports=_paged_only,
    **_PAGED,
)
def paged_gather(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
    block_table=None,
):  # fmt: skip
    _needs_table("paged_gather", block_table, key_lengths)
    longest = int(key_lengths.max())  # a host read, as a caller with lengths on the GPU must make
    kb, vb = gather_pages(k, block_table, longest), gather_pages(v, block_table, longest)
    b, h, n_q, d_k = q.shape
    group = h // k.shape[2]
    # the query heads of a K/V head folded into its rows, (B, H_kv, group x N_q, d_k): one SDPA head per K/V
    # head, as decode kernels do (SDPA's enable_gqa on CPU copies K and V per query head instead)
    rows = q.reshape(b, k.shape[2], group * n_q, d_k)
    mask = visible_keys(key_lengths, n_q, longest, causal).repeat(1, 1, group, 1)  # row g x N_q + i: query i
    out = F.scaled_dot_product_attention(rows, kb, vb, attn_mask=mask, scale=scale)
    return out.reshape(b, h, n_q, vb.shape[-1])


@register(
    "paged_chunked",
    description="online softmax over a paged K/V cache, one page-table column at a time (no gather)",
    memory="linear",
    supports=_paged_only,
    **_PAGED,
)
def paged_chunked(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
    block_table=None,
):  # fmt: skip
    _needs_table("paged_chunked", block_table, key_lengths)
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


# ---- flex_attention with a paged block mask ------------------------------------------------------------

FLEX_Q_BLOCK = 128  # the block mask's query block (decode cells have a few query tokens: one block)


def paged_block_mask(block_table, key_lengths, n_q: int, pool_pages: int, page: int, causal: bool):
    """flex's BlockMask over the pool read in place, (B, 1, 1 query block, pool_pages key blocks): sequence b
    visits the ceil(L_b / page) pages block_table[b] names, in table order, and the mask_mod maps a pool slot
    to its position in the sequence (-1: a page it does not own), hiding slots past L_b (and later than the
    query with causal, lower-right). Built from the tensors on their device, no host read: a server builds it
    at every decode step, so it is part of the call."""
    from torch.nn.attention.flex_attention import BlockMask

    b, width = block_table.shape
    device = block_table.device
    lengths = key_lengths.to(torch.int64)
    used = (lengths + page - 1) // page  # (B,) pages each sequence holds
    cols = torch.arange(width, device=device)
    owned = cols[None, :] < used[:, None]  # (B, width): the table's entries in use
    kv_indices = torch.zeros(b, 1, 1, pool_pages, dtype=torch.int32, device=device)
    kv_indices[:, 0, 0, :width] = block_table.to(torch.int32)
    # pool page -> its index in the sequence's table (-1 where not the sequence's); unused entries go to a
    # spare column past the pool, dropped
    logical = torch.full((b, pool_pages + 1), -1, dtype=torch.int64, device=device)
    target = torch.where(owned, block_table.to(torch.int64), pool_pages)
    logical.scatter_(1, target, torch.where(owned, cols[None, :].expand(b, -1), -1))
    logical = logical[:, :pool_pages]

    def mask_mod(bi, h, q_idx, kv_idx):
        held = logical[bi, kv_idx // page]
        pos = held * page + kv_idx % page
        seen = (held >= 0) & (pos < lengths[bi])
        if causal:
            seen = seen & (pos <= lengths[bi] - n_q + q_idx)
        return seen

    # no block is "full" (every visited page runs mask_mod), said with empty full-block tensors: given none,
    # torch 2.13's CPU template emitted C++ that names them anyway for pages of 32 ("'full_kv_num_blocks'
    # was not declared"), though not for pages of 16 or 256
    counts = used.to(torch.int32).view(b, 1, 1)
    return BlockMask.from_kv_blocks(
        counts, kv_indices, torch.zeros_like(counts), torch.zeros_like(kv_indices),
        BLOCK_SIZE=(FLEX_Q_BLOCK, page), mask_mod=mask_mod, seq_lengths=(n_q, pool_pages * page),
    )  # fmt: skip


def _flex_paged_supports(p: Problem) -> str | None:
    from . import flex

    return _paged_only(p) or flex._supports(p)


@functools.cache
def _flex_compile_reason() -> str | None:
    """flex's own compile check (it imports dynamo), asked once, at the first call, not at every timed one."""
    from . import flex

    return flex._compile_reason()


def _flex_available(device: str) -> str | None:
    from . import flex

    return flex._available(device)  # not _compile_reason: it imports dynamo, asked where flex is to run


@register(
    "paged_flex",
    description="flex_attention over a paged K/V cache in place: a paged block mask (pages as key blocks)",
    dtypes=("float32", "float16", "bfloat16"),
    memory="linear",
    available=_flex_available,
    supports=_flex_paged_supports,
    compiles=True,  # a paged block mask per shape: its own static kernel
    **_PAGED,
)
def paged_flex(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
    block_table=None,
):  # fmt: skip
    from . import flex

    _needs_table("paged_flex", block_table, key_lengths)
    reason = _flex_compile_reason()
    if reason:
        raise UnsupportedError(reason)
    pool, page, h_kv = k.shape[0], k.shape[1], k.shape[2]
    mask = paged_block_mask(block_table, key_lengths, q.shape[2], pool, page, causal)
    # the pool (P, page, H_kv, d) seen as one sequence of P x page slots per head: a view, no copy
    kf = k.permute(2, 0, 1, 3).reshape(1, h_kv, pool * page, k.shape[3])
    vf = v.permute(2, 0, 1, 3).reshape(1, h_kv, pool * page, v.shape[3])
    try:
        return flex._compiled(False)(q, kf, vf, block_mask=mask, scale=scale, enable_gqa=h_kv != q.shape[1])
    except Exception as exc:  # torch's "not implemented" (inductor wraps it): the cell is unsupported
        reason = flex._not_implemented(exc)
        if reason is None:
            raise
        raise UnsupportedError(f"torch refused flex_attention: {reason}") from exc
