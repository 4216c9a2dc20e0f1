"""Boolean attention masks shared by the variants that materialise the scores (True = attend).

Which keys query i sees (the float64 reference in harness/measure/correctness.py fixes the same rules):
  causal       j <= t_i, with t_i = i (top-left, torch's is_causal) or i + N_k - N_q (lower-right)
  window W     additionally j > t_i - W: the W keys up to and including the diagonal (needs causal)
  key padding  j < key_lengths[b]
  packed       i and j in the same sequence of a packed batch (cu_seqlens: variants.lengths)
"""

from __future__ import annotations

from . import lazy

torch = lazy.module("torch", globals())


def diagonal_offset(n_q: int, n_k: int, causal_align: str = "top-left") -> int:
    """t_i - i: 0 for top-left causal, N_k - N_q for lower-right (the last query sees the last key)."""
    return n_k - n_q if causal_align == "lower-right" else 0


def causal_mask(
    n_q: int,
    n_k: int,
    device: torch.device | str = "cpu",
    *,
    causal_align: str = "top-left",
    window: int = 0,
) -> torch.Tensor:
    """(N_q, N_k) mask: query i sees keys j <= t_i, and j > t_i - W with a window W > 0.

    Top-left is torch SDPA's `is_causal=True` (and xformers' LowerTriangularMask); lower-right is torch's
    `causal_lower_right` and FlashAttention >= 2.1's causal when N_q != N_k.
    """
    limit = torch.arange(n_q, device=device)[:, None] + diagonal_offset(n_q, n_k, causal_align)  # t_i
    j = torch.arange(n_k, device=device)[None, :]
    mask = j <= limit
    if window > 0:
        mask &= j > limit - window
    return mask


def key_padding_mask(key_lengths: torch.Tensor, n_k: int) -> torch.Tensor:
    """(B, 1, 1, N_k) mask: key j of batch b is valid when j < key_lengths[b]."""
    j = torch.arange(n_k, device=key_lengths.device)
    return (j[None, :] < key_lengths[:, None])[:, None, None, :]


def sequence_mask(cu_seqlens: torch.Tensor, device) -> torch.Tensor:
    """(T, T) block-diagonal mask of a packed batch: query i sees key j when both lie in one sequence."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(device)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    return seq[:, None] == seq[None, :]


def attention_mask(
    n_q: int,
    n_k: int,
    *,
    causal: bool,
    key_lengths: torch.Tensor | None,
    device,
    causal_align: str = "top-left",
    window: int = 0,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The combined mask, broadcastable to (B, H, N_q, N_k), or None when nothing is masked."""
    mask = causal_mask(n_q, n_k, device, causal_align=causal_align, window=window) if causal else None
    if cu_seqlens is not None:
        packed = sequence_mask(cu_seqlens, device)
        mask = packed if mask is None else (packed & mask)
    if key_lengths is not None:
        pad = key_padding_mask(key_lengths.to(device), n_k)
        mask = pad if mask is None else (pad & mask)
    return mask


def fully_masked_rows(
    n_q: int,
    *,
    causal: bool,
    key_lengths: torch.Tensor | None,
    n_k: int | None = None,
    causal_align: str = "top-left",
    window: int = 0,
) -> torch.Tensor | None:
    """(B or 1, 1, N_q, 1) True where a query row sees no key at all, or None when no row can be.

    With top-left causal masking and no window query i always sees key 0, so only an empty key padding
    (key_lengths[b] == 0) leaves rows with nothing to attend to; lower-right with N_q > N_k leaves the
    first N_q - N_k rows empty, and a window can leave rows empty too (all its keys beyond N_k or padding).
    Computed from each row's key interval [lo, hi], O(B * N_q).
    """
    lr = causal and causal_align == "lower-right"
    if not lr and not window:
        if key_lengths is None or int(key_lengths.min()) > 0:
            return None
        empty = key_lengths == 0  # (B,)
        return empty[:, None, None, None].expand(-1, 1, n_q, 1)
    n_k = n_q if n_k is None else n_k
    device = key_lengths.device if key_lengths is not None else "cpu"
    t = torch.arange(n_q, device=device) + (diagonal_offset(n_q, n_k, causal_align) if causal else 0)
    hi = torch.clamp(t, max=n_k - 1) if causal else torch.full_like(t, n_k - 1)
    lo = torch.clamp(t - window + 1, min=0) if window else torch.zeros_like(t)
    hi = hi[None, :]  # (1, N_q)
    if key_lengths is not None:
        hi = torch.minimum(hi, key_lengths.to(device)[:, None] - 1)  # (B, N_q)
    empty = lo[None, :] > hi
    if not bool(empty.any()):
        return None
    return empty[:, None, :, None]
