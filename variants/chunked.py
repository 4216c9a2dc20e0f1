"""Memory-efficient attention in plain PyTorch: query and key blocks with an online softmax.

Forward (Rabe & Staats 2021, "Self-attention does not need O(n^2) memory"; Dao et al. 2022,
FlashAttention, Algorithm 1): for each query block keep a running row max m, a running sum l and an
unnormalised output acc; for each key block S = Q_i K_j^T * scale, m' = max(m, rowmax S),
P = exp(S - m'), l = l * exp(m - m') + rowsum P, acc = acc * exp(m - m') + P V_j; finally out = acc / l.
Only (B*H, block_q, block_k) scores exist at any time, so peak memory is linear in N.

Backward (FlashAttention 2, Dao 2023, Algorithm 2) recomputes P per block from the saved
logsumexp L = m + log l instead of storing it: dV_j += P^T dO_i, dP = dO_i V_j^T,
dS = P * (dP - D_i) with D = rowsum(dO * O), dQ_i += dS K_j * scale, dK_j += dS^T Q_i * scale.

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


def _forward(q, k, v, causal, key_lengths, scale, block_q, block_k):
    """Returns out (B, H, N_q, d_v) and the row logsumexp (G, N_q) in float32 (+inf for empty rows)."""
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
            l.mul_(alpha).add_(s.sum(dim=-1, keepdim=True))
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


def _backward(q, k, v, out, d_out, lse, causal, key_lengths, scale, block_q, block_k):
    """FlashAttention-2 style backward over key blocks (outer) and query blocks (inner)."""
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
    for j0 in range(0, min(n_k, max_len), bk):
        j1 = min(j0 + bk, n_k, max_len)
        k_blk, v_blk = kf[:, j0:j1], vf[:, j0:j1]
        first_row = (j0 // bq) * bq if causal else 0  # causal: rows above j0 never see these keys
        for i0 in range(first_row, n_q, bq):
            i1 = min(i0 + bq, n_q)
            s = torch.bmm(qs[:, i0:i1], k_blk.transpose(1, 2))  # (G, rq, rk)
            _mask_block(s, i0, i1, j0, j1, causal, pad_valid, h)
            p = s.sub_(lse[:, i0:i1]).exp_()  # softmax weights recomputed from the saved logsumexp
            dv[:, j0:j1].baddbmm_(p.transpose(1, 2), do[:, i0:i1])
            dp = torch.bmm(do[:, i0:i1], v_blk.transpose(1, 2))
            ds = p.mul_(dp.sub_(delta[:, i0:i1]))  # dS = P * (dP - D)
            dq[:, i0:i1].baddbmm_(ds, k_blk, alpha=scale)
            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), qs[:, i0:i1])  # qs already carries the scale
    shape = lambda t, d: t.view(b, h, -1, d).to(q.dtype)  # noqa: E731
    return shape(dq, d_k), shape(dk, d_k), shape(dv, d_v)


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, key_lengths, scale, block_q, block_k):
        out, lse = _forward(q, k, v, causal, key_lengths, scale, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, key_lengths, scale, block_q, block_k)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, d_out, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None


@register(
    "chunked",
    description=f"online softmax over {BLOCK_Q}x{BLOCK_K} query/key blocks in plain PyTorch; O(N) memory",
    dtypes=("float32", "float16", "bfloat16", "float64"),
    dropout=False,
    memory="linear",
)
def chunked(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, block_q=BLOCK_Q, block_k=BLOCK_K
):
    """Exact attention in O(N) memory; block_q / block_k set the query and key block sizes."""
    if dropout_p > 0:
        raise ValueError("chunked does not implement dropout")
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be positive, got block_q={block_q}, block_k={block_k}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _ChunkedAttention.apply(q, k, v, causal, key_lengths, scale, block_q, block_k)
    return _forward(q, k, v, causal, key_lengths, scale, block_q, block_k)[0]
