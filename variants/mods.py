"""Score modifications (the `mod` axis): what happens to a scaled score before masking and softmax.

The float64 reference in harness/measure/correctness.py fixes the same rules; a variant that declares a kind
in its capability's `mods` is handed `mod=<text>` (only when the cell's mod is not "none") and must follow
them.

  none        s
  alibi       s + m_h * (j - t_i): ALiBi (Press et al. 2022, "Train Short, Test Long"), a linear penalty
              on the distance from query i's position t_i to key j. t_i = i + N_k - N_q with lower-right
              causal alignment (the query sits at the end of the keys, as in a decode step), else t_i = i.
              m_h = 2^(-8 (h + 1) / H) for query head h of H: the paper's geometric slopes, used as they
              are for every H (the paper interpolates when H is not a power of two; we do not).
              Grouped k/v heads change nothing: the slope belongs to the query head.
  softcap:C   C * tanh(s / C): logit soft-capping (Gemma 2), C > 0.

s is the scaled score q.k * scale; the mod applies before masks (masked scores stay -inf) and dropout.
"""

from __future__ import annotations

import math

MOD_KINDS = ("alibi", "softcap")
NONE = "none"


def parse_mod(text: str) -> str:
    """'none', 'alibi' or 'softcap:C' (C a positive number) -> the canonical text ('softcap:30.0' ->
    'softcap:30'); ValueError naming what is wrong."""
    word = str(text).strip().lower()
    if word in (NONE, "alibi"):
        return word
    kind, colon, value = word.partition(":")
    if kind == "softcap":
        try:
            cap = float(value) if colon else float("nan")
        except ValueError:
            cap = float("nan")
        if not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"softcap needs a positive cap, as softcap:30, got {text!r}")
        return f"softcap:{cap:g}"
    raise ValueError(f"mod must be none, alibi or softcap:C (C > 0), got {text!r}")


def mod_kind(mod: str) -> str:
    """'softcap:30' -> 'softcap'; 'alibi' -> 'alibi'; 'none' -> 'none'."""
    return mod.partition(":")[0]


def softcap_value(mod: str) -> float:
    """C of 'softcap:C'."""
    kind, _, value = mod.partition(":")
    if kind != "softcap":
        raise ValueError(f"{mod!r} is not a softcap mod")
    return float(value)


def alibi_slope(head: int, heads: int) -> float:
    """m_h = 2^(-8 (h + 1) / H) for query head h (0-based) of H."""
    return 2.0 ** (-8.0 * (head + 1) / heads)


def alibi_slopes(heads: int, *, device="cpu", dtype=None):
    """(H,) tensor of m_h, h = 0..H-1."""
    import torch

    h = torch.arange(1, heads + 1, device=device, dtype=torch.float64)
    out = torch.exp2(-8.0 * h / heads)
    return out if dtype is None else out.to(dtype)


def position_offset(n_q: int, n_k: int, *, causal: bool, causal_align: str) -> int:
    """t_i - i for ALiBi: N_k - N_q with lower-right causal alignment, else 0 (the masks' own offset)."""
    return n_k - n_q if causal and causal_align == "lower-right" else 0


def apply_mod(scores, mod: str, *, causal: bool = False, causal_align: str = "top-left", rows=None, n_q=None):
    """scores (B, H, N_q, N_k), already scaled -> the modified scores (a new tensor; 'none' returns scores).

    The whole-matrix form, for variants that materialise the scores and for the float64 reference. A
    reference that computes some query rows only passes them: rows (the 1-D query indices that scores'
    third dim holds) and n_q (the problem's query count, for the lower-right offset).
    """
    kind = mod_kind(mod)
    if kind == NONE:
        return scores
    if kind == "softcap":
        cap = softcap_value(mod)
        return cap * (scores / cap).tanh()
    if kind == "alibi":
        import torch

        h, n_k = scores.shape[-3], scores.shape[-1]
        n_q = scores.shape[-2] if n_q is None else n_q
        off = position_offset(n_q, n_k, causal=causal, causal_align=causal_align)
        ids = torch.arange(scores.shape[-2], device=scores.device) if rows is None else rows.to(scores.device)
        i = ids.to(scores.dtype)[:, None] + off
        j = torch.arange(n_k, device=scores.device, dtype=scores.dtype)[None, :]
        slopes = alibi_slopes(h, device=scores.device, dtype=scores.dtype)[:, None, None]  # (H, 1, 1)
        return scores + slopes * (j - i)  # (.., H, N_q, N_k)
    raise ValueError(f"unknown mod {mod!r}")


def grouped_alibi_slopes(heads: int, kv_heads: int, *, device="cpu", dtype=None):
    """(H_kv, G) slopes for grouped-query variants that fold the G = H / H_kv query heads of a k/v head into
    its rows: entry (kv, member) is m_h of query head h = kv * G + member (the slope is the query head's)."""
    return alibi_slopes(heads, device=device, dtype=dtype).view(kv_heads, heads // kv_heads)


def apply_mod_block(s, mod: str, *, rows: tuple[int, int], cols: tuple[int, int], offset: int, slopes=None):
    """apply_mod on one block of folded scores, in place: s (g, R, G, C) holds the scaled scores of query
    positions rows[0]..rows[1]-1 (R), each with its G group members, against keys cols[0]..cols[1]-1 (C);
    offset is position_offset; slopes (g, G) the alibi slope of each (batch x k/v head, member). Returns s.

    The blockwise form, for variants that never hold the whole (N_q, N_k) scores (chunked)."""
    kind = mod_kind(mod)
    if kind == "softcap":
        cap = softcap_value(mod)
        return s.div_(cap).tanh_().mul_(cap)
    if kind == "alibi":
        import torch

        i = torch.arange(rows[0], rows[1], device=s.device, dtype=s.dtype)[:, None] + offset  # t_i
        j = torch.arange(cols[0], cols[1], device=s.device, dtype=s.dtype)[None, :]
        # s += m * (j - t_i), broadcast without a block-sized temporary: (g, 1, G, 1) x (1, R, 1, C)
        return s.addcmul_(slopes[:, None, :, None], (j - i)[None, :, None, :])
    if kind != NONE:
        raise ValueError(f"unknown mod {mod!r}")
    return s


def softcap_grad(modded, mod: str):
    """d(modded score) / d(scaled score) for a softcap mod, from the modded scores: 1 - tanh^2 =
    1 - (modded / C)^2 (a new tensor); None for mods whose derivative is 1 (none, alibi: a constant bias)."""
    if mod_kind(mod) != "softcap":
        return None
    cap = softcap_value(mod)
    return 1 - (modded / cap).square()
