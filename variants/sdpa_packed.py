"""Two ways code built on torch SDPA runs a packed variable-length batch (variants.lengths), as
`sdpa_padded` and `sdpa_loop`:

- `sdpa_padded` pads every sequence to the longest into a (B, H, max L, d) batch, masks the padded keys,
  calls SDPA once and gathers the valid rows back: it executes B * max(L)^2 pairs however few are useful
  (varlen="padded"), causal or not: the causal (and window) mask goes to SDPA as an explicit mask beside
  the key-padding one, and SDPA computes every block of an explicit mask (only is_causal, which cannot be
  combined with attn_mask, lets it skip blocks). The pad and the gather (O(T d) copies, next to the
  O(B max(L)^2 d) attention) are inside its timed call, as in code that keeps packed activations and calls a
  padded kernel.
- `sdpa_loop` calls SDPA once per sequence on its slice: exactly the useful pairs (varlen="exact"), one
  kernel launch and one host read of the offsets per sequence. Causal, it passes is_causal, under which
  SDPA skips the key blocks past each query block; a window goes as an explicit mask, whose every block
  SDPA computes, so there it executes each sequence's whole L^2, more than "exact" counts.

Both let SDPA pick its backend; the (1, H, T, d) packed convention is in variants/lengths.py.
"""

from __future__ import annotations

from . import lazy
from .lengths import PACKED_ONLY
from .masks import causal_mask
from .registry import register

torch = lazy.module("torch", globals())
F = lazy.module("torch.nn.functional", globals(), "F")


def _packed_only(p) -> str | None:
    return None if p.packed else PACKED_ONLY


# not in default sweeps: they answer only packed cells. SDPA's fused kernels stream the scores (linear, as
# the sdpa variant); sdpa_padded's key mask is B x max(L)^2 booleans, which the memory guard counts
_AXES = dict(
    gqa=True, window=True, padding=False, dropout=False, default=False, supports=_packed_only, memory="linear"
)


def _gqa(q, k) -> dict:
    return {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}


def _positions(cu_seqlens: torch.Tensor, device):
    """(sequence of each packed row, its position in the sequence, the lengths), all on `device`."""
    cu = cu_seqlens.to(device=device, dtype=torch.int64)
    lengths = cu[1:] - cu[:-1]
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    return seq, torch.arange(int(cu[-1]), device=device) - cu[seq], lengths


def _pad(t: torch.Tensor, seq, pos, batch: int, longest: int) -> torch.Tensor:
    """(1, H, T, d) packed -> (B, H, max L, d), zeros after each sequence's end."""
    out = t.new_zeros(batch, t.shape[1], longest, t.shape[3])
    out[seq, :, pos] = t[0].transpose(0, 1)  # (T, H, d) rows into their (sequence, position)
    return out


@register(
    "sdpa_padded",
    description="a packed batch padded to its longest sequence, one SDPA call with a key-padding mask: "
    "pays for the padding",
    varlen="padded",
    **_AXES,
)
def sdpa_padded(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, window=0, cu_seqlens=None
):
    if cu_seqlens is None:
        raise ValueError("sdpa_padded runs packed batches only: it needs cu_seqlens")
    seq, pos, lengths = _positions(cu_seqlens, q.device)
    batch, longest = len(lengths), int(lengths.max())
    qp, kp, vp = (_pad(t, seq, pos, batch, longest) for t in (q, k, v))
    j = torch.arange(longest, device=q.device)
    mask = (j[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, L): the valid keys
    if causal:  # top-left in each sequence: its queries and keys start together
        mask = mask & causal_mask(longest, longest, q.device, window=window)
    out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale, **_gqa(q, k))
    return out[seq, :, pos].transpose(0, 1).unsqueeze(0)  # (B, H, L, d) -> (1, H, T, d)


@register(
    "sdpa_loop",
    description="a packed batch one sequence at a time, an SDPA call per sequence: only the useful pairs",
    varlen="exact",
    **_AXES,
)
def sdpa_loop(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, window=0, cu_seqlens=None
):
    if cu_seqlens is None:
        raise ValueError("sdpa_loop runs packed batches only: it needs cu_seqlens")
    bounds = cu_seqlens.tolist()
    outs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        qs, ks, vs = q[:, :, a:b], k[:, :, a:b], v[:, :, a:b]
        if window:
            mask = causal_mask(b - a, b - a, q.device, window=window)
            outs.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale, **_gqa(q, k)))
        else:
            outs.append(
                F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale, **_gqa(q, k))
            )
    return torch.cat(outs, dim=2)
