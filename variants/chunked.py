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
the full softmax's weights. Each block's mask is drawn from its own generator, seeded from one number
drawn from torch's default generator per call plus the block's index, so the backward regenerates it
(any loop order) instead of storing it: dV_j += (P * Z)^T dO_i, dP = (dO_i V_j^T) * Z, and D = rowsum(dO *
O) with the dropped O is rowsum(P * dP) as the formula needs.

On CPU, allocation and page faults dominate small kernels, so every block buffer is allocated once
per call and reused (`out=` matmuls, in-place exp). Causal key blocks entirely above the diagonal
are skipped, not masked; key blocks entirely past every batch's valid length are skipped too.
"""

from __future__ import annotations

import torch

from .registry import register

BLOCK_Q = 256  # query rows per block
BLOCK_K = 512  # keys per block
_NEG_INF = float("-inf")
_SEED_SPAN = 1 << 62  # per-call dropout seeds are drawn below this; block seeds add the block's index


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
    """The dropout mask of every (query block, key block) of one call, regenerated on demand: block
    (bi, bj) is drawn at its full (G, bq, bk) size from a generator seeded with seed + its index and
    then cut to the block's rows and keys, so the forward and the backward see the same values."""

    def __init__(self, p: float, seed: int, g: int, bq: int, bk: int, n_kblocks: int, dtype, device) -> None:
        self.p, self.seed, self.n_kblocks = p, seed, n_kblocks
        self.keep = 1.0 / (1.0 - p)
        self.buf = torch.empty(g, bq, bk, dtype=dtype, device=device)
        self.gen = torch.Generator(device=device)

    def block(self, i0: int, i1: int, j0: int, j1: int, bq: int, bk: int) -> torch.Tensor:
        """Z = M / (1 - p) of rows i0:i1 and keys j0:j1, (G, rows, cols); valid until the next call."""
        self.gen.manual_seed(self.seed + (i0 // bq) * self.n_kblocks + j0 // bk)
        # keep where u >= p, u ~ U[0, 1): Bernoulli(1 - p), scaled by 1/(1 - p) in the same buffer
        self.buf.uniform_(generator=self.gen).ge_(self.p).mul_(self.keep)
        return self.buf[:, : i1 - i0, : j1 - j0]


def _dropout(p: float, seed: int | None, g, bq, bk, n_k, dtype, device) -> _Dropout | None:
    if p <= 0:
        return None
    return _Dropout(p, seed, g, bq, bk, -(-n_k // bk), dtype, device)


def _key_end(i1: int, n_k: int, causal: bool, max_len: int) -> int:
    """Keys past this index cannot be seen by query rows < i1 (top-left causal) or by any batch (padding)."""
    end = min(n_k, i1) if causal else n_k
    return min(end, max_len)


def _mask_block(s, i0, i1, j0, j1, causal, pad_valid, heads):
    """Set masked scores of block (i0:i1, j0:j1) to -inf in place. s: (G, rows, cols)."""
    if causal and j1 - 1 > i0:  # the block crosses the diagonal
        rows = torch.arange(i0, i1, device=s.device)[:, None]
        cols = torch.arange(j0, j1, device=s.device)[None, :]
        s.masked_fill_(cols > rows, _NEG_INF)
    if pad_valid is not None:
        invalid = ~pad_valid[:, j0:j1]  # (B, cols)
        if bool(invalid.any()):
            invalid = invalid.repeat_interleave(heads, dim=0)[:, None, :]  # (G, 1, cols)
            s.masked_fill_(invalid, _NEG_INF)


def _forward(q, k, v, causal, key_lengths, scale, block_q, block_k, dropout_p=0.0, seed=None):
    """Returns out (B, H, N_q, d_v) and the row logsumexp (G, N_q) in float32 (+inf for empty rows)
    of the undropped weights; with dropout_p > 0 the output is that of the weights dropped with the
    masks seeded by `seed` (see _Dropout)."""
    b, h, n_q, d_k = q.shape
    n_k, d_v = k.shape[2], v.shape[3]
    g = b * h
    qs = (q * scale).reshape(g, n_q, d_k)  # (G, N_q, d_k), pre-scaled once: O(N d) instead of O(N^2)
    kt = k.reshape(g, n_k, d_k).transpose(1, 2)  # (G, d_k, N_k) view
    vf = v.reshape(g, n_k, d_v)  # (G, N_k, d_v)
    pad_valid, max_len = None, n_k
    if key_lengths is not None:
        pad_valid = (
            torch.arange(n_k, device=q.device)[None, :] < key_lengths.to(q.device)[:, None]
        )  # (B, N_k)
        max_len = int(key_lengths.max())
    bq, bk = min(block_q, n_q), min(block_k, n_k)
    buf = _Blocks(g, bq, bk, d_v, q.dtype, q.device)
    stat_dtype = buf.scores.dtype
    drop = _dropout(dropout_p, seed, g, bq, bk, n_k, stat_dtype, q.device)
    out = torch.empty(g, n_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(g, n_q, dtype=stat_dtype, device=q.device)
    for i0 in range(0, n_q, bq):
        i1 = min(i0 + bq, n_q)
        rq = i1 - i0
        m = torch.full((g, rq, 1), _NEG_INF, dtype=stat_dtype, device=q.device)  # running row max
        l = torch.zeros((g, rq, 1), dtype=stat_dtype, device=q.device)  # running row sum
        acc = buf.view(buf.acc, rq, d_v).zero_()  # running unnormalised output
        q_blk = qs[:, i0:i1]
        for j0 in range(0, _key_end(i1, n_k, causal, max_len), bk):
            j1 = min(j0 + bk, _key_end(i1, n_k, causal, max_len))
            rk = j1 - j0
            s = buf.view(buf.scores, rq, rk)  # (G, rq, rk)
            if buf.low is None:
                torch.bmm(q_blk, kt[:, :, j0:j1], out=s)
            else:
                s.copy_(torch.bmm(q_blk, kt[:, :, j0:j1], out=buf.view(buf.low, rq, rk)))
            _mask_block(s, i0, i1, j0, j1, causal, pad_valid, h)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_safe = m_new.masked_fill(
                m_new == _NEG_INF, 0.0
            )  # rows with nothing seen yet: exp(-inf - 0) = 0
            s.sub_(m_safe).exp_()  # s is now P, unnormalised
            alpha = (m - m_safe).exp_()  # rescales what was accumulated under the old max
            l.mul_(alpha).add_(s.sum(dim=-1, keepdim=True))  # the normaliser: every weight, dropped or not
            if drop is not None:
                s.mul_(drop.block(i0, i1, j0, j1, bq, bk))  # only the accumulation sees the mask
            acc.mul_(alpha)
            if buf.low is None:
                acc.baddbmm_(s, vf[:, j0:j1])
            else:
                p_low = buf.view(buf.low, rq, rk).copy_(s)
                acc.add_(torch.bmm(p_low, vf[:, j0:j1]))
            m = m_new
        empty = l == 0  # rows that saw no key (empty key padding): output 0, not 0 / 0
        out[:, i0:i1] = acc / l.masked_fill(empty, 1.0)
        lse[:, i0:i1] = (m + torch.log(l)).masked_fill(empty, float("inf")).squeeze(-1)
    return out.view(b, h, n_q, d_v), lse


def _backward(
    q, k, v, out, d_out, lse, causal, key_lengths, scale, block_q, block_k, dropout_p=0.0, seed=None
):
    """FlashAttention-2 style backward over key blocks (outer) and query blocks (inner); with dropout the
    forward's masks are regenerated from its seed."""
    b, h, n_q, d_k = q.shape
    n_k, d_v = k.shape[2], v.shape[3]
    g = b * h
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    qs = (q.to(acc_dtype) * scale).reshape(g, n_q, d_k)
    kf = k.to(acc_dtype).reshape(g, n_k, d_k)
    vf = v.to(acc_dtype).reshape(g, n_k, d_v)
    do = d_out.to(acc_dtype).reshape(g, n_q, d_v)
    delta = (do * out.to(acc_dtype).reshape(g, n_q, d_v)).sum(
        -1, keepdim=True
    )  # (G, N_q, 1) = rowsum(dO * O)
    lse = lse.to(acc_dtype)[..., None]  # (G, N_q, 1)
    pad_valid, max_len = None, n_k
    if key_lengths is not None:
        pad_valid = torch.arange(n_k, device=q.device)[None, :] < key_lengths.to(q.device)[:, None]
        max_len = int(key_lengths.max())
    dq = torch.zeros(g, n_q, d_k, dtype=acc_dtype, device=q.device)
    dk = torch.zeros(g, n_k, d_k, dtype=acc_dtype, device=q.device)
    dv = torch.zeros(g, n_k, d_v, dtype=acc_dtype, device=q.device)
    bq, bk = min(block_q, n_q), min(block_k, n_k)
    drop = _dropout(dropout_p, seed, g, bq, bk, n_k, acc_dtype, q.device)
    for j0 in range(0, min(n_k, max_len), bk):
        j1 = min(j0 + bk, n_k, max_len)
        k_blk, v_blk = kf[:, j0:j1], vf[:, j0:j1]
        first_row = (j0 // bq) * bq if causal else 0  # causal: rows above j0 never see these keys
        for i0 in range(first_row, n_q, bq):
            i1 = min(i0 + bq, n_q)
            s = torch.bmm(qs[:, i0:i1], k_blk.transpose(1, 2))  # (G, rq, rk)
            _mask_block(s, i0, i1, j0, j1, causal, pad_valid, h)
            p = s.sub_(lse[:, i0:i1]).exp_()  # softmax weights recomputed from the saved logsumexp
            dp = torch.bmm(do[:, i0:i1], v_blk.transpose(1, 2))
            if drop is None:
                dv[:, j0:j1].baddbmm_(p.transpose(1, 2), do[:, i0:i1])
            else:
                z = drop.block(i0, i1, j0, j1, bq, bk)
                dv[:, j0:j1].baddbmm_((p * z).transpose(1, 2), do[:, i0:i1])  # the dropped weights
                dp.mul_(z)  # dP of the undropped weights
            ds = p.mul_(dp.sub_(delta[:, i0:i1]))  # dS = P * (dP - D)
            dq[:, i0:i1].baddbmm_(ds, k_blk, alpha=scale)
            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), qs[:, i0:i1])  # qs already carries the scale
    shape = lambda t, d: t.view(b, h, -1, d).to(q.dtype)  # noqa: E731
    return shape(dq, d_k), shape(dk, d_k), shape(dv, d_v)


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, key_lengths, scale, block_q, block_k, dropout_p, seed):
        out, lse = _forward(q, k, v, causal, key_lengths, scale, block_q, block_k, dropout_p, seed)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, key_lengths, scale, block_q, block_k, dropout_p, seed)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, d_out, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None


@register(
    "chunked",
    description=f"online softmax over {BLOCK_Q}x{BLOCK_K} query/key blocks in plain PyTorch; O(N) memory",
    dtypes=("float32", "float16", "bfloat16", "float64"),
    memory="linear",
)
def chunked(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, block_q=BLOCK_Q, block_k=BLOCK_K
):
    """Exact attention in O(N) memory; block_q / block_k set the query and key block sizes. With
    dropout_p > 0 the weights are dropped block by block (training mode, kept ones scaled by 1/(1 - p))."""
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be positive, got block_q={block_q}, block_k={block_k}")
    if not 0 <= dropout_p < 1:
        raise ValueError(f"dropout_p must lie in [0, 1), got {dropout_p}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # one draw from torch's default generator per call: torch.manual_seed makes the masks reproducible
    seed = int(torch.randint(0, _SEED_SPAN, ()).item()) if dropout_p > 0 else None
    args = (causal, key_lengths, scale, block_q, block_k, dropout_p, seed)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _ChunkedAttention.apply(q, k, v, *args)
    return _forward(q, k, v, *args)[0]
