"""Memory-efficient attention in plain PyTorch: query and key blocks with an online softmax.

Forward (Rabe & Staats 2021, "Self-attention does not need O(n^2) memory"; Dao et al. 2022,
FlashAttention, Algorithm 1): for each query block keep a running row max m, a running sum l and an
unnormalised output acc; for each key block S = Q_i K_j^T * scale, m' = max(m, rowmax S),
P = exp(S - m'), l = l * exp(m - m') + rowsum P, acc = acc * exp(m - m') + P V_j; finally out = acc / l.
Only (B*H, block_q, block_k) scores exist at any time, so peak memory is linear in N.

Backward (FlashAttention 2, Dao 2023, Algorithm 2) recomputes P per block from the saved
logsumexp L = m + log l instead of storing it: dV_j += P^T dO_i, dP = dO_i V_j^T,
dS = P * (dP - D_i) with D = rowsum(dO * O), dQ_i += dS K_j * scale, dK_j += dS^T Q_i * scale.

Dropout (FlashAttention's, Dao et al. 2022, Algorithm 2): the softmax statistics m and l are those of
the undropped weights, and only the accumulation sees the mask, acc += (P * Z) V_j with Z = M / (1 - p),
M ~ Bernoulli(1 - p) per weight; so out = sum_j softmax_ij Z_ij V_j, the same distribution as dropping
the full softmax's weights. The mask of tile (query block a, key block b) on the fixed grid of block
multiples is drawn from its own generator, seeded from one number drawn from torch's default generator per
call plus the tile's index, so the backward regenerates it (whatever its loop order) instead of storing N^2
bits: dV_j += (P * Z)^T dO_i, dP = (dO_i V_j^T) * Z, and D = rowsum(dO * O) with the dropped O is
rowsum(P * dP) as the formula needs. With dropout, loops that would start a block off the grid (a window's
first key block, the backward's first query block under causal masking) start at the grid line before it
and mask the extra keys or rows, so every block is one tile. Folded grouped-query rows draw one tile for all
G query heads of a k/v head, each row its own weights, so heads stay independent.

On CPU, allocation and page faults dominate small kernels, so every block buffer is allocated once
per call and reused (`out=` matmuls, in-place exp). Key blocks no query of a query block can see are
skipped, not masked: those above the causal diagonal (top-left or lower-right), those behind a sliding
window (so a window of W keys costs O(N_q * W), not O(N_q * N_k)), and those past every batch's valid length.

Two exact rewrites made the forward 1.04-1.18x faster on CPU (fp32, N 2048-4096, 2 cores). Base 2: q is
scaled by scale * log2(e) once, and exp2 replaces exp (torch's CPU exp2 costs half of exp), with m and
the logsumexp converted back to natural units. Shift-free: softmax is shift-invariant, and the max is
subtracted only to keep exp in range. When the Cauchy-Schwarz bound |q_i| |k_j| (two O(N d) norms per call)
keeps every unshifted exp2, and the sums and outputs made from it, normal and finite (`_shift_free`), the
running max, its amax pass and the rescaling are skipped: P = exp2(S), with l and acc summed directly. Masks
are applied after exp (zeros, not -inf, since exp(-inf) takes a slow path: 2.7x the time of finite input
here). Other inputs, the score mods, and half precision (whose P copy has too little range) keep the
online max.

Grouped-query attention (H_kv < H k/v heads): the G = H / H_kv query heads of a k/v head are folded into its
query rows, so each block is one matmul per k/v head and K and V are never repeated. Rows of a block are
ordered (query i, group member), so the masks, which depend on i only, broadcast over the group.

Score modifications (variants.mods) apply to each block's scaled scores before its masks, at the block's
absolute positions: ALiBi's bias m_h * (j - t_i) with the slope of each row's query head kv * G + member,
softcap C * tanh(s / C). The backward recomputes the modded scores the same way; softcap's chain rule
multiplies dS by 1 - (modded / C)^2 (ALiBi's bias is a constant: dS is unchanged).
"""

from __future__ import annotations

import bisect
import functools
import math

from . import lazy
from .mods import NONE, apply_mod_block, grouped_alibi_slopes, mod_kind, softcap_grad
from .registry import register

torch = lazy.module("torch", globals())

BLOCK_Q = 256  # query rows per block
BLOCK_K = 512  # keys per block
_NEG_INF = float("-inf")
_LOG2E, _LN2 = 1.0 / math.log(2.0), math.log(2.0)
_SEED_SPAN = 1 << 62  # per-call dropout seeds are drawn below this; tile seeds add the tile's index


class _Blocks:
    """Reusable flat buffers, viewed as contiguous (G, rows, cols) tensors of any block size."""

    def __init__(self, g: int, bq: int, bk: int, d_v: int, dtype, device) -> None:
        self.g = g
        self.scores = torch.empty(
            g * bq * bk, dtype=torch.float32 if dtype != torch.float64 else dtype, device=device
        )
        # low-precision inputs: matmul in the input dtype, softmax statistics in float32
        self.low = (
            None
            if dtype in (torch.float32, torch.float64)
            else torch.empty(g * bq * bk, dtype=dtype, device=device)
        )
        self.acc = torch.empty(g * bq * d_v, dtype=self.scores.dtype, device=device)

    def view(self, buf: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        return buf[: self.g * rows * cols].view(self.g, rows, cols)


class _Dropout:
    """The dropout mask of every (query block, key block) tile of one call, regenerated on demand: tile
    (a, b) covers queries a*bq.. and keys b*bk.., is drawn at its full (g, bq * G, bk) size in float32 from
    a generator seeded with seed + a * (key tiles) + b, and is cut to the block's rows and keys, so the
    forward and the backward see the same values."""

    def __init__(self, p: float, seed: int, g: int, bq: int, bk: int, group: int, n_k: int, dtype, device):
        self.p, self.seed, self.bq, self.bk, self.group = p, seed, bq, bk, group
        self.n_kblocks = -(-n_k // bk)
        self.keep = 1.0 / (1.0 - p)
        self.u = torch.empty(g, bq * group, bk, dtype=torch.float32, device=device)
        # float64 blocks get Z in float64, so that 1/(1 - p) is exact to their precision
        self.z = (
            self.u if dtype == torch.float32 else torch.empty(g, bq * group, bk, dtype=dtype, device=device)
        )
        self.gen = torch.Generator(device=device)

    def block(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """Z = M / (1 - p) of query rows i0:i1 (folded: (i1 - i0) * G rows) and keys j0:j1, a view
        (g, rows, cols) valid until the next call; i0 and j0 must lie on the grid."""
        if i0 % self.bq or j0 % self.bk:
            raise RuntimeError(f"dropout block ({i0}, {j0}) is off the ({self.bq}, {self.bk}) grid")
        self.gen.manual_seed(self.seed + (i0 // self.bq) * self.n_kblocks + j0 // self.bk)
        # keep where u >= p, u ~ U[0, 1): Bernoulli(1 - p), then scaled by 1/(1 - p) in the block's dtype
        self.u.uniform_(generator=self.gen).ge_(self.p)
        z = self.u if self.z is self.u else self.z.copy_(self.u)
        return z.mul_(self.keep)[:, : (i1 - i0) * self.group, : j1 - j0]


def _dropout(p: float, seed: int | None, g, bq, bk, group, n_k, dtype, device) -> _Dropout | None:
    """The call's dropout masks, or None without dropout."""
    if p <= 0:
        return None
    return _Dropout(p, seed, g, bq, bk, group, n_k, dtype, device)


class _Visible:
    """Which keys each query row sees (attnbench's rules, as in variants/masks.py): causal j <= t_i with
    t_i = i + off (off = 0 top-left, N_k - N_q lower-right), a window j > t_i - W, key padding j < L_b, and
    in a packed batch (cu_seqlens) the keys of the row's own sequence only."""

    def __init__(
        self, n_q, n_k, causal, causal_align, window, key_lengths, kv_heads, device, cu_seqlens=None
    ) -> None:
        self.n_q, self.n_k, self.causal, self.window, self.kv_heads = n_q, n_k, causal, window, kv_heads
        self.bounds = None if cu_seqlens is None else [int(x) for x in cu_seqlens.tolist()]
        self.seq = None
        if self.bounds is not None:  # the sequence of each row: (N,)
            lengths = torch.tensor([b - a for a, b in zip(self.bounds, self.bounds[1:], strict=False)])
            self.seq = torch.repeat_interleave(torch.arange(len(lengths)), lengths).to(device)
        self.off = n_k - n_q if causal and causal_align == "lower-right" else 0
        self.pad_valid, self.max_len, self.min_len = None, n_k, n_k
        if key_lengths is not None:
            self.min_len = int(key_lengths.min())
            self.pad_valid = (
                torch.arange(n_k, device=device)[None, :] < key_lengths.to(device)[:, None]
            )  # (B, N_k)
            self.max_len = int(key_lengths.max())

    def keys(self, i0: int, i1: int) -> tuple[int, int]:
        """[start, end): the keys some query row in [i0, i1) may see; empty when start >= end."""
        end = min(self.n_k, self.max_len)
        if self.causal:
            end = min(end, i1 + self.off)  # t of the last row, plus one
        start = max(0, i0 + self.off - self.window + 1) if self.window else 0
        if self.bounds is not None:  # from the first row's sequence to the last row's
            start, end = max(start, self._start(i0)), min(end, self._end(i1 - 1))
        return start, max(start, end)

    def queries(self, j0: int, j1: int) -> tuple[int, int]:
        """[start, end): the query rows that may see some key in [j0, j1)."""
        start = max(0, j0 - self.off) if self.causal else 0  # t_i >= j0
        end = min(self.n_q, j1 - 1 - self.off + self.window) if self.window else self.n_q  # t_i - W < j1 - 1
        if self.bounds is not None:
            start, end = max(start, self._start(j0)), min(end, self._end(j1 - 1))
        return start, max(start, end)

    def _start(self, i: int) -> int:
        """The first row of row i's sequence (a packed batch)."""
        return self.bounds[bisect.bisect_right(self.bounds, i) - 1]

    def _end(self, i: int) -> int:
        """One past the last row of row i's sequence (a packed batch)."""
        return self.bounds[bisect.bisect_right(self.bounds, i)]

    def _crosses_sequences(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        return self.bounds is not None and not (
            self._start(i0) <= j0 and j1 <= self._end(i0) and i1 <= self._end(i0)
        )

    def masks(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        """Whether mask_block may hide some score of block (i0:i1, j0:j1)."""
        crosses_diagonal = self.causal and j1 - 1 > i0 + self.off
        crosses_window = self.window and j0 <= i1 - 1 + self.off - self.window
        crosses = self._crosses_sequences(i0, i1, j0, j1)
        return bool(crosses_diagonal or crosses_window or j1 > self.min_len or crosses)

    def mask_block(
        self, s: torch.Tensor, i0: int, i1: int, j0: int, j1: int, group: int, fill: float = _NEG_INF
    ) -> None:
        """Set the hidden entries of block (i0:i1, j0:j1) to `fill` in place: -inf for scores, 0 for weights.
        s: (g, rows * group, cols)."""
        crosses_diagonal = self.causal and j1 - 1 > i0 + self.off
        crosses_window = self.window and j0 <= i1 - 1 + self.off - self.window
        if crosses_diagonal or crosses_window:
            t = torch.arange(i0, i1, device=s.device)[:, None] + self.off  # (rows, 1)
            cols = torch.arange(j0, j1, device=s.device)[None, :]
            hide = cols > t if crosses_diagonal else torch.zeros(1, 1, dtype=torch.bool, device=s.device)
            if crosses_window:
                hide = hide | (cols <= t - self.window)
            s.view(s.shape[0], i1 - i0, group, j1 - j0).masked_fill_(hide[:, None, :], fill)
        if self._crosses_sequences(i0, i1, j0, j1):  # keys of another sequence than the row's
            other = self.seq[i0:i1, None] != self.seq[None, j0:j1]  # (rows, cols)
            s.view(s.shape[0], i1 - i0, group, j1 - j0).masked_fill_(other[:, None, :], fill)
        if self.pad_valid is not None:
            invalid = ~self.pad_valid[:, j0:j1]  # (B, cols)
            if bool(invalid.any()):
                invalid = invalid.repeat_interleave(self.kv_heads, dim=0)[:, None, :]  # (g, 1, cols)
                s.masked_fill_(invalid, fill)


def _fold(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(B, H, N, d) -> (B * H_kv, N, G, d), contiguous: a block of rows i0:i1 is then one (g, rows * G, d)
    view. A copy only when G > 1 (O(N d), next to the O(N^2 d) work)."""
    b, h, n, d = t.shape
    return t.reshape(b * kv_heads, h // kv_heads, n, d).transpose(1, 2).contiguous()


def _unfold(t: torch.Tensor, b: int, h: int) -> torch.Tensor:
    """(B * H_kv, N, G, d) -> (B, H, N, d): _fold's inverse."""
    g, n, group, d = t.shape
    return t.view(b, g // b, n, group, d).transpose(2, 3).reshape(b, h, n, d)


def _row_slopes(mod: str, b: int, h: int, h_kv: int, dtype, device) -> torch.Tensor | None:
    """(B * H_kv, G) ALiBi slopes of the folded rows (None unless mod is alibi): row (i, member) of k/v head
    kv belongs to query head kv * G + member."""
    if mod_kind(mod) != "alibi":
        return None
    return grouped_alibi_slopes(h, h_kv, device=device, dtype=dtype).repeat(b, 1)


def _shift_free(qs, k, v, n_k: int, dropout_p: float, stat_dtype) -> bool:
    """Whether exp2 of every unshifted base-2 score is a normal number of stat_dtype and the sums and outputs
    made of them stay finite, so that the online softmax can skip its running row max. The score of query
    row i and key j lies within +-|q_i * scale * log2(e)| |k_j| (Cauchy-Schwarz); l sums at most N_k
    weights; acc adds them times |v| <= max |v|; dropout scales by 1 / (1 - p). Softmax is shift-invariant,
    so the result is the same attention, with each weight at full relative precision (none is subnormal
    or flushed to 0: a row's l is 0 only when it sees no key). Two O(N d) norms; False for inf or NaN."""
    g, d_k = qs.shape[0], qs.shape[-1]
    q_norm = torch.linalg.vector_norm(qs.reshape(g, -1, d_k).float(), dim=-1).amax(dim=-1)  # (g,)
    k_norm = torch.linalg.vector_norm(k.reshape(g, -1, d_k).float(), dim=-1).amax(dim=-1)
    v_max = v.abs().amax().float() if v.numel() else torch.zeros((), device=v.device)
    score, v_max = torch.stack([(q_norm * k_norm).amax(), v_max]).tolist()  # one host sync, not two
    score = score * 1.01 + 1.0  # margin: the matmul's rounding, low precision too
    log2 = math.log2  # qs carries log2(e): scores are base-2 exponents
    info = torch.finfo(stat_dtype)  # 4: margin inside the largest finite value and the smallest normal one
    headroom = min(log2(info.max), -log2(info.tiny)) - 4.0
    headroom -= log2(n_k) + log2(max(v_max, 1.0)) - log2(1.0 - dropout_p)
    return score <= headroom  # False for NaN


def _rescale(s, m, l, acc, exp_):
    """One block's scores s (g, rows, rk) into unnormalised weights P = exp(s - m_new), in place, with l
    and acc rescaled from the old running max m to m_new; returns m_new. Rows that have seen nothing yet
    keep -inf as their max and shift by 0 (exp(-inf - 0) = 0)."""
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
    m_safe = m_new.masked_fill(m_new == _NEG_INF, 0.0)
    exp_(s.sub_(m_safe))
    alpha = exp_(m - m_safe)  # rescales what was accumulated under the old max
    l.mul_(alpha)
    acc.mul_(alpha)
    return m_new


def _store(out, lse, i0: int, i1: int, m, l, acc, base2: bool) -> None:
    """Query rows i0:i1's output (acc / l) and row logsumexp into out (g, N_q, G, d_v) and lse (g, N_q, G);
    rows that saw no key (padding, lower-right, window) get output 0, not 0 / 0, and lse +inf."""
    g, _, group, d_v = out.shape
    empty = l == 0
    out[:, i0:i1] = (acc / l.masked_fill(empty, 1.0)).view(g, i1 - i0, group, d_v)
    row_lse = m * _LN2 + torch.log(l) if base2 else m + torch.log(l)  # natural units either way
    lse[:, i0:i1] = row_lse.masked_fill(empty, float("inf")).view(g, i1 - i0, group)


def _forward(
    q, k, v, causal, key_lengths, scale, block_q, block_k, causal_align="top-left", window=0, mod=NONE,
    dropout_p=0.0, seed=None, cu_seqlens=None, step=None,
):  # fmt: skip
    """Returns out (B, H, N_q, d_v) and the row logsumexp (B*H_kv, N_q, G) in float32 (+inf for rows that
    see no key) of the undropped weights; with dropout_p > 0 the output is that of the weights dropped with
    the masks seeded by `seed` (see _Dropout). step(q_blk, kt_blk, v_blk, m, l, acc, shift_free) -> (m, l,
    acc), when given, does the whole update of a block no mask touches (chunked_compiled's compiled kernel),
    in base 2 (q_blk carries log2(e); P = exp2(S - m)), and without the max when shift_free. The running
    state (m, l, acc) stays local to the block loop, read top to bottom as FlashAttention is written."""
    b, h, n_q, d_k = q.shape
    h_kv, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    group, g = h // h_kv, b * h_kv
    # base 2: scores s * log2(e) and exp2, the same weights; exp2 costs half of exp on CPU (0.39 vs 0.76 ns an
    # element, fp32, AVX2); the score mods keep natural units
    base2 = mod == NONE
    qs = _fold(q * (scale * _LOG2E if base2 else scale), h_kv)  # (g, N_q, G, d_k), scaled once: O(N d)
    exp_ = torch.Tensor.exp2_ if base2 else torch.Tensor.exp_
    kt = k.reshape(g, n_k, d_k).transpose(1, 2)  # (g, d_k, N_k) view
    vf = v.reshape(g, n_k, d_v)  # (g, N_k, d_v)
    vis = _Visible(n_q, n_k, causal, causal_align, window, key_lengths, h_kv, q.device, cu_seqlens)
    bq, bk = min(block_q, n_q), min(block_k, n_k)
    buf = _Blocks(g, bq * group, bk, d_v, q.dtype, q.device)
    stat_dtype = buf.scores.dtype
    slopes = _row_slopes(mod, b, h, h_kv, stat_dtype, q.device)
    drop = _dropout(dropout_p, seed, g, bq, bk, group, n_k, stat_dtype, q.device)
    # shift-free: every score's exp is finite unshifted, so the running max (and its rescaling) is skipped
    # (float32 and float64 only: half-precision P, copied for its matmul, has too little range unshifted)
    shift_free = base2 and buf.low is None and _shift_free(qs, k, v, n_k, dropout_p, stat_dtype)

    def query_block(i0: int, i1: int, k_start: int, k_end: int, shift_free: bool):
        """The row max m (0 when shift-free), row sum l and unnormalised output acc of query rows i0:i1."""
        rows = (i1 - i0) * group
        # the running row max; shift-free, a constant 0 (exp(s - 0) cannot overflow, see _shift_free)
        m = torch.full((g, rows, 1), 0.0 if shift_free else _NEG_INF, dtype=stat_dtype, device=q.device)
        l = torch.zeros((g, rows, 1), dtype=stat_dtype, device=q.device)  # running row sum
        acc = buf.view(buf.acc, rows, d_v).zero_()  # running unnormalised output
        q_blk = qs[:, i0:i1].reshape(g, rows, d_k)  # a view: rows (i, group member)
        for j0 in range(k_start, k_end, bk):
            j1 = min(j0 + bk, k_end)
            rk = j1 - j0
            if step is not None and drop is None and mod == NONE and not vis.masks(i0, i1, j0, j1):
                m, l, acc = step(q_blk, kt[:, :, j0:j1], vf[:, j0:j1], m, l, acc, shift_free)
                continue
            s = buf.view(buf.scores, rows, rk)  # (g, rows, rk)
            if buf.low is None:
                torch.bmm(q_blk, kt[:, :, j0:j1], out=s)
            else:
                s.copy_(torch.bmm(q_blk, kt[:, :, j0:j1], out=buf.view(buf.low, rows, rk)))
            if mod != NONE:  # (g, R, G, C) view: absolute positions i0.., j0.. and each row's slope
                blk = s.view(g, i1 - i0, group, rk)
                apply_mod_block(blk, mod, rows=(i0, i1), cols=(j0, j1), offset=vis.off, slopes=slopes)
            if shift_free:
                # P, unnormalised, with the constant shift 0; hidden weights zeroed after exp, since exp of
                # -inf takes CPUs' slow path (2.7x the time of finite scores here)
                vis.mask_block(exp_(s), i0, i1, j0, j1, group, fill=0.0)
            else:
                vis.mask_block(s, i0, i1, j0, j1, group)
                m = _rescale(s, m, l, acc, exp_)  # s is now P, unnormalised
            l.add_(s.sum(dim=-1, keepdim=True))  # the normaliser: every weight, dropped or not
            if drop is not None:
                s.mul_(drop.block(i0, i1, j0, j1))  # only the accumulation sees the mask
            if buf.low is None:
                acc.baddbmm_(s, vf[:, j0:j1])
            else:
                p_low = buf.view(buf.low, rows, rk).copy_(s)
                acc.add_(torch.bmm(p_low, vf[:, j0:j1]))
        return m, l, acc

    out = torch.zeros(g, n_q, group, d_v, dtype=q.dtype, device=q.device)  # rows that see no key stay 0
    lse = torch.full((g, n_q, group), float("inf"), dtype=stat_dtype, device=q.device)
    for i0 in range(0, n_q, bq):
        i1 = min(i0 + bq, n_q)
        k_start, k_end = vis.keys(i0, i1)
        if k_start >= k_end:
            continue  # no row of this block sees a key
        if drop is not None:
            k_start -= k_start % bk  # onto the dropout grid: the keys before it are masked
        _store(out, lse, i0, i1, *query_block(i0, i1, k_start, k_end, shift_free), base2)
    return _unfold(out, b, h), lse


def _backward(
    q, k, v, out, d_out, lse, causal, key_lengths, scale, block_q, block_k, causal_align="top-left", window=0,
    mod=NONE, dropout_p=0.0, seed=None, cu_seqlens=None,
):  # fmt: skip
    """FlashAttention-2 style backward over key blocks (outer) and the query blocks that see them (inner);
    with dropout the forward's masks are regenerated from its seed."""
    b, h, n_q, d_k = q.shape
    h_kv, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    group, g = h // h_kv, b * h_kv
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    base2 = mod == NONE  # as in the forward: base-2 scores and exp2
    qs = _fold(q.to(acc_dtype) * (scale * _LOG2E if base2 else scale), h_kv)  # (g, N_q, G, d_k)
    exp_ = torch.Tensor.exp2_ if base2 else torch.Tensor.exp_
    kf = k.to(acc_dtype).reshape(g, n_k, d_k)
    vf = v.to(acc_dtype).reshape(g, n_k, d_v)
    do = _fold(d_out.to(acc_dtype), h_kv)  # (g, N_q, G, d_v)
    delta = (do * _fold(out.to(acc_dtype), h_kv)).sum(-1)  # (g, N_q, G) = rowsum(dO * O)
    lse = lse.to(acc_dtype) * (_LOG2E if base2 else 1.0)  # (g, N_q, G), in the scores' units
    vis = _Visible(n_q, n_k, causal, causal_align, window, key_lengths, h_kv, q.device, cu_seqlens)
    slopes = _row_slopes(mod, b, h, h_kv, acc_dtype, q.device)
    dq = torch.zeros(g, n_q, group, d_k, dtype=acc_dtype, device=q.device)
    dk = torch.zeros(g, n_k, d_k, dtype=acc_dtype, device=q.device)
    dv = torch.zeros(g, n_k, d_v, dtype=acc_dtype, device=q.device)
    bq, bk = min(block_q, n_q), min(block_k, n_k)
    drop = _dropout(dropout_p, seed, g, bq, bk, group, n_k, acc_dtype, q.device)
    for j0 in range(0, min(n_k, vis.max_len), bk):
        j1 = min(j0 + bk, n_k, vis.max_len)
        k_blk, v_blk = kf[:, j0:j1], vf[:, j0:j1]
        q_start, q_end = vis.queries(j0, j1)  # rows before or after these never see these keys
        if drop is not None:
            q_start -= q_start % bq  # onto the dropout grid: the rows before it are masked
        for i0 in range(q_start, q_end, bq):
            i1 = min(i0 + bq, q_end)
            rows = (i1 - i0) * group
            q_blk, do_blk = qs[:, i0:i1].reshape(g, rows, d_k), do[:, i0:i1].reshape(g, rows, d_v)
            s = torch.bmm(q_blk, k_blk.transpose(1, 2))  # (g, rows, rk)
            if mod != NONE:  # the forward's modded scores, recomputed the same way
                blk = s.view(g, i1 - i0, group, j1 - j0)
                apply_mod_block(blk, mod, rows=(i0, i1), cols=(j0, j1), offset=vis.off, slopes=slopes)
            dmod = softcap_grad(s, mod)  # taken before masking (finite); None: the mod's derivative is 1
            # softmax weights recomputed from the saved logsumexp (+inf for empty rows: weights 0); hidden
            # ones zeroed after exp (an overflow there is replaced too): exp never takes -inf's slow path
            p = exp_(s.sub_(lse[:, i0:i1].reshape(g, rows, 1)))
            vis.mask_block(p, i0, i1, j0, j1, group, fill=0.0)
            dp = torch.bmm(do_blk, v_blk.transpose(1, 2))
            if drop is None:
                dv[:, j0:j1].baddbmm_(p.transpose(1, 2), do_blk)
            else:
                z = drop.block(i0, i1, j0, j1)
                dv[:, j0:j1].baddbmm_((p * z).transpose(1, 2), do_blk)  # the dropped weights
                dp.mul_(z)  # dP of the undropped weights
            ds = p.mul_(dp.sub_(delta[:, i0:i1].reshape(g, rows, 1)))  # dS = P * (dP - D)
            if dmod is not None:
                ds.mul_(dmod)  # through softcap: d(modded)/d(scaled score)
            dq[:, i0:i1].view(g, rows, d_k).baddbmm_(ds, k_blk, alpha=scale)
            # q_blk already carries the scale (and log2(e) in base 2, taken back out)
            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_blk, alpha=_LN2 if base2 else 1.0)
    dq = _unfold(dq, b, h).to(q.dtype)
    return dq, dk.view(b, h_kv, n_k, d_k).to(q.dtype), dv.view(b, h_kv, n_k, d_v).to(q.dtype)


@functools.cache
def _function() -> type:
    """The autograd Function of chunked, made at its first use (a subclass of torch's: torch is imported
    then, not when the variant registers)."""

    class _ChunkedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, *args):
            # _forward's arguments as attention() passed them, then chunked_compiled's step (or None)
            *args, step = args
            out, lse = _forward(q, k, v, *args, step=step)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.args = tuple(args)
            return out

        @staticmethod
        def backward(ctx, d_out):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = _backward(q, k, v, out, d_out, lse, *ctx.args)
            return dq, dk, dv, *([None] * (len(ctx.args) + 1))  # none for the arguments and the step

    return _ChunkedAttention


@register(
    "chunked",
    description=f"online softmax over {BLOCK_Q}x{BLOCK_K} query/key blocks in plain PyTorch; O(N) memory",
    dtypes=("float32", "float16", "bfloat16", "float64"),
    memory="linear",
    gqa=True,
    lower_right=True,
    window=True,
    mods=("alibi", "softcap"),
    varlen=f"rows:{BLOCK_Q}",  # a query block: the keys from its first row's sequence to its last row's
)
def chunked(
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
    block_q=BLOCK_Q,
    block_k=BLOCK_K,
):
    """Exact attention in O(N) memory; block_q / block_k set the query and key block sizes. With
    dropout_p > 0 the weights are dropped block by block (training mode, kept ones scaled by 1/(1 - p))."""
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be positive, got block_q={block_q}, block_k={block_k}")
    if not 0 <= dropout_p < 1:
        raise ValueError(f"dropout_p must lie in [0, 1), got {dropout_p}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # one draw from torch's default generator per call: torch.manual_seed repeats the masks
    seed = int(torch.randint(0, _SEED_SPAN, ()).item()) if dropout_p > 0 else None
    args = (
        causal,
        key_lengths,
        scale,
        block_q,
        block_k,
        causal_align,
        window,
        mod,
        dropout_p,
        seed,
        cu_seqlens,
    )
    return attention(q, k, v, *args)


def attention(q, k, v, *args, step=None):
    """_forward's arguments -> out, through the autograd Function when gradients are needed (its backward
    is the eager one whatever `step` did in the forward)."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _function().apply(q, k, v, *args, step)
    return _forward(q, k, v, *args, step=step)[0]
