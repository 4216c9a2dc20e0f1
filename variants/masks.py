"""Boolean attention masks shared by the variants that materialise the scores (True = attend)."""

from __future__ import annotations

import torch


def causal_mask(n_q: int, n_k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(N_q, N_k) lower-triangular mask, top-left aligned: query i sees keys j <= i.

    The same convention as torch SDPA's `is_causal=True` (and xformers' LowerTriangularMask);
    FlashAttention 2 aligns bottom-right when N_q != N_k.
    """
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()


def key_padding_mask(key_lengths: torch.Tensor, n_k: int) -> torch.Tensor:
    """(B, 1, 1, N_k) mask: key j of batch b is valid when j < key_lengths[b]."""
    j = torch.arange(n_k, device=key_lengths.device)
    return (j[None, :] < key_lengths[:, None])[:, None, None, :]


def attention_mask(
    n_q: int, n_k: int, *, causal: bool, key_lengths: torch.Tensor | None, device
) -> torch.Tensor | None:
    """The combined mask, broadcastable to (B, H, N_q, N_k), or None when nothing is masked."""
    mask = causal_mask(n_q, n_k, device) if causal else None
    if key_lengths is not None:
        pad = key_padding_mask(key_lengths.to(device), n_k)
        mask = pad if mask is None else (pad & mask)
    return mask


def fully_masked_rows(n_q: int, *, causal: bool, key_lengths: torch.Tensor | None) -> torch.Tensor | None:
    """(B, 1, N_q, 1) True where a query row sees no key at all, or None when no row can be.

    With top-left causal masking query i always sees key 0, so only an empty key padding
    (key_lengths[b] == 0) leaves rows with nothing to attend to.
    """
    if key_lengths is None or int(key_lengths.min()) > 0:
        return None
    empty = key_lengths == 0  # (B,)
    return empty[:, None, None, None].expand(-1, 1, n_q, 1)
