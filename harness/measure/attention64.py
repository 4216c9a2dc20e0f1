"""float64 attention by the rules correctness's docstring fixes (the gate's reference), and which keys each
query row sees by them: one place for the gate, its readings of common mistakes (correctness) and those its
rules cannot say (misread), which all compute attention in float64."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from attnbench.harness.measure.guard import REFERENCE_ROW_BLOCK  # the reference's block, which guard counts
from attnbench.variants.mods import NONE, apply_mod

# The gate's own work on the CPU (the float64 reference, its copies and comparisons; never a variant's call)
# of fewer scores than this runs on one thread. None of it is timed, and each of its operations on more than
# torch's grain of 32k elements is a parallel region: on an idle machine a second thread saves at most a few
# ms at this size (one thread: 8 ms for the reference at B 1, H 2, N 256); on a busy one every region waits
# for the other thread to be scheduled (the reference at N 128: 70 ms on two threads against 0.7 ms on one;
# a gate of a given answer at N 300: 100 ms against 0.5 ms, on the 2-core VM with other work running).
ONE_THREAD_SCORES = 1 << 18


def scores(q: torch.Tensor, k: torch.Tensor, block_table=None) -> int:
    """B*H*N_q*N_k of a (B, H, N, d) q and k; of a paged cache (block_table given, k a pool of pages (P,
    page, H_kv, d)), N_k counts the whole pool."""
    n_k = k.shape[2] if block_table is None else k.shape[0] * k.shape[1]
    return q.shape[0] * q.shape[1] * q.shape[2] * n_k


@contextmanager
def one_thread_below(device: torch.device, scores: int) -> Iterator[None]:
    """Torch's CPU work inside on one thread where `scores` is below ONE_THREAD_SCORES (the thread count
    put back after); elsewhere (a larger problem, another device) as it was. Never around a variant's call:
    it runs on the threads the run asked for."""
    threads = torch.get_num_threads()
    if torch.device(device).type != "cpu" or scores >= ONE_THREAD_SCORES or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def key_interval(
    rows: torch.Tensor, n_q: int, n_k: int, *, causal: bool, causal_align: str = "top-left", window: int = 0,
    cu_seqlens=None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(lo, hi): query row i may see exactly the keys lo_i <= j <= hi_i (before key padding), by the rules
    in correctness's docstring. rows: 1-D query indices."""
    if causal_align not in ("top-left", "lower-right"):
        raise ValueError(f"unknown causal alignment {causal_align!r}")
    if window and not causal:
        raise ValueError("a sliding window needs causal masking")
    t = rows + (n_k - n_q if causal and causal_align == "lower-right" else 0)  # the diagonal key of row i
    hi = torch.clamp(t, max=n_k - 1) if causal else torch.full_like(rows, n_k - 1)
    lo = torch.clamp(t - window + 1, min=0) if window else torch.zeros_like(rows)
    if cu_seqlens is not None:  # a packed batch: only the keys of the row's own sequence
        cu = cu_seqlens.to(device=rows.device, dtype=rows.dtype)
        seq = torch.searchsorted(cu[1:], rows, right=True)
        lo, hi = torch.maximum(lo, cu[seq]), torch.minimum(hi, cu[seq + 1] - 1)
    return lo, hi


def visible(
    ids: torch.Tensor, n_q: int, n_k: int, *, key_lengths=None, causal=False, causal_align: str = "top-left",
    window: int = 0, cu_seqlens=None,
) -> torch.Tensor:  # fmt: skip
    """(B or 1, 1, len(ids), N_k) bool: the keys each query row of ids sees (key_interval, then key padding),
    on ids' device."""
    j = torch.arange(n_k, device=ids.device)[None, :]
    lo, hi = key_interval(
        ids, n_q, n_k, causal=causal, causal_align=causal_align, window=window, cu_seqlens=cu_seqlens
    )
    seen = ((j >= lo[:, None]) & (j <= hi[:, None]))[None, None]
    if key_lengths is not None:
        seen = seen & (j < key_lengths.to(ids.device)[:, None])[:, None, None, :]
    return seen


def reference(
    q, k, v, *, causal=False, key_lengths=None, scale=None, rows=None, causal_align="top-left", window=0,
    mod=NONE, cu_seqlens=None, block_table=None,
) -> torch.Tensor:  # fmt: skip
    """float64 attention, computed in query-row blocks so its memory stays bounded.

    rows: optional 1-D index tensor of query rows to compute (every row is independent);
    returns (B, H, len(rows) or N_q, d_v) float64. Written independently of the variants: k/v heads are
    repeated, masks are built from the index rules above. A paged cache (block_table: k, v pools of pages,
    key_lengths each sequence's context) is read sequence by sequence, its queries at the context's end.
    """
    if block_table is not None:
        return _paged(q, k, v, key_lengths, block_table, causal=causal, scale=scale, rows=rows)
    return _weighted(
        q, k, v, causal=causal, key_lengths=key_lengths, scale=scale, rows=rows, power=1,
        causal_align=causal_align, window=window, mod=mod, cu_seqlens=cu_seqlens,
    )  # fmt: skip


def second_moment(
    q, k, v, *, causal=False, key_lengths=None, scale=None, rows=None, causal_align="top-left", window=0,
    mod=NONE, cu_seqlens=None,
) -> torch.Tensor:  # fmt: skip
    """sum_j P_ij^2 V_jc^2 in float64, shaped as `reference`: with dropout p (independent keeps of probability
    1 - p, kept weights scaled by 1/(1 - p)) the variance of output element (i, c) is p/(1 - p) times this."""
    return _weighted(
        q, k, v, causal=causal, key_lengths=key_lengths, scale=scale, rows=rows, power=2,
        causal_align=causal_align, window=window, mod=mod, cu_seqlens=cu_seqlens,
    )  # fmt: skip


def attend(
    q, k, v, *, rows: torch.Tensor, scale, seen=None, bias=None, mod: str = NONE, causal_align="top-left"
) -> torch.Tensor:
    """float64 softmax(mod(q kᵀ scale) + bias) v on `rows` (B, H, R, d_v), the keys `seen` hides left out in
    place of the rules' (every key when None): a mistake's reading (misread). seen and bias: (B or 1, 1, R,
    N_k); a row that sees no key is 0. mod: the cell's score mod, at a causal cell's positions by
    causal_align (ALiBi's t_i)."""
    return _weighted(
        q, k, v, causal=mod != NONE, key_lengths=None, scale=scale, rows=rows, power=1,
        causal_align=causal_align, window=0, mod=mod, seen=seen, bias=bias,
    )  # fmt: skip


def _weighted(
    q, k, v, *, causal, key_lengths, scale, rows, power: int, causal_align: str, window: int, mod: str = NONE,
    cu_seqlens=None, seen=None, bias=None,
) -> torch.Tensor:  # fmt: skip
    """(P ** power) @ (V ** power) in float64, P the softmax weights, over query-row blocks; seen and bias:
    attend's, (B or 1, 1, len(rows), N_k), each block's rows sliced from them."""
    q64, k64, v64 = (t.detach().to(torch.float64) for t in (q, k, v))
    b, h, n_q, d_k = q64.shape
    n_k = k64.shape[2]
    k64, v64 = heads_repeated(h, k64, v64)  # (B, H, N_k, d)
    scale = d_k**-0.5 if scale is None else scale
    row_ids = torch.arange(n_q, device=q.device) if rows is None else rows.to(q.device)
    vp = v64 if power == 1 else v64.pow(power)
    block = max(1, REFERENCE_ROW_BLOCK // max(1, b * h * n_k))

    def rows_from(start: int) -> torch.Tensor:  # (B, H, block, d_v): the rows of one block
        ids = row_ids[start : start + block]
        s = torch.einsum("bhqd,bhkd->bhqk", q64[:, :, ids], k64) * scale
        s = apply_mod(s, mod, causal=causal, causal_align=causal_align, rows=ids, n_q=n_q)  # before masks
        s = s if bias is None else s + bias[:, :, start : start + block].to(s.device)
        sees = visible(
            ids, n_q, n_k, key_lengths=key_lengths, causal=causal, causal_align=causal_align, window=window,
            cu_seqlens=cu_seqlens,
        ) if seen is None else seen[:, :, start : start + block].to(s.device)  # fmt: skip
        p = weights(s, sees)
        return p @ vp if power == 1 else p.pow_(power) @ vp

    with one_thread_below(q64.device, b * h * len(row_ids) * n_k):
        return torch.cat([rows_from(start) for start in range(0, len(row_ids), block)], dim=2)


def differentiable(
    q64, k64, v64, *, causal, key_lengths, scale, causal_align="top-left", window=0, mod=NONE, cu_seqlens=None
):
    """The reference in one differentiable piece (no detach, no blocks) for gradient checks."""
    b, h, n_q, d_k = q64.shape
    n_k = k64.shape[2]
    k64, v64 = heads_repeated(h, k64, v64)  # their grads sum back over the repeats
    scale = d_k**-0.5 if scale is None else scale
    s = (q64 @ k64.transpose(-2, -1)) * scale
    s = apply_mod(s, mod, causal=causal, causal_align=causal_align)  # before the masks
    seen = visible(
        torch.arange(n_q, device=q64.device), n_q, n_k, key_lengths=key_lengths, causal=causal,
        causal_align=causal_align, window=window, cu_seqlens=cu_seqlens,
    )  # fmt: skip
    return weights(s, seen) @ v64


def weights(s: torch.Tensor, seen: torch.Tensor | None) -> torch.Tensor:
    """The softmax over the keys (dim -1) of float64 scores s, the keys `seen` hides left out (none when
    None): a row that sees no key is 0, not NaN."""
    s = s if seen is None else s.masked_fill(~seen, -math.inf)
    m = s.amax(-1, keepdim=True).detach()  # the shift cancels in the softmax: no gradient through it
    p = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    total = p.sum(-1, keepdim=True)
    return p / torch.where(total == 0, torch.ones_like(total), total)


def heads_repeated(heads: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v (B, H_kv, N_k, d) with their heads repeated to q's H: query head h reads k/v head
    h // (H / H_kv)."""
    group = _group(heads, k.shape[1])
    return (k, v) if group == 1 else (k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))


def _paged(q, k, v, key_lengths, block_table, *, causal, scale, rows) -> torch.Tensor:
    """The float64 reference of a paged decode call: each sequence's pages read in table order up to its
    context length L_b, its N_q queries at positions L_b - N_q .. L_b - 1 (causal: lower-right)."""
    outs = []
    for b, length in enumerate(key_lengths.tolist()):
        kb, vb = (context(t, block_table, b, length)[None] for t in (k, v))  # (1, H_kv, L, d)
        outs.append(_weighted(
            q[b : b + 1], kb, vb, causal=causal, key_lengths=None, scale=scale, rows=rows, power=1,
            causal_align="lower-right", window=0,
        ))  # fmt: skip
    return torch.cat(outs, dim=0)


def context(pool: torch.Tensor, block_table, b: int, length: int) -> torch.Tensor:
    """Sequence b's keys (or values) of a pool of pages (P, page, H_kv, d), read through its row of the page
    table up to its context length: (H_kv, length, d)."""
    ids = block_table[b, : -(-length // pool.shape[1])].long()
    return pool[ids].flatten(0, 1)[:length].transpose(0, 1)


def _group(heads: int, kv_heads: int) -> int:
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"k/v heads ({kv_heads}) must divide q heads ({heads})")
    return heads // kv_heads


def empty_rows(
    n_q: int, key_lengths, *, n_k: int | None = None, causal=False, causal_align="top-left", window=0,
    cu_seqlens=None, block_table=None,
) -> torch.Tensor | None:  # fmt: skip
    """(B or 1, 1, N_q, 1) bool: rows that see no key at all (correctness's docstring), or None (a paged
    cell has none: each context holds at least its N_q queries)."""
    if block_table is not None:
        return None
    n_k = n_q if n_k is None else n_k
    lo, hi = key_interval(
        torch.arange(n_q), n_q, n_k, causal=causal, causal_align=causal_align, window=window,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    hi = hi[None, :]
    if key_lengths is not None:
        hi = torch.minimum(hi, key_lengths.cpu()[:, None] - 1)  # (B, N_q)
    empty = lo[None, :] > hi
    return empty[:, None, :, None] if bool(empty.any()) else None
