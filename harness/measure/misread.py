"""Known mistakes whose answer the reference's rules cannot say (correctness.likely_cause tries them after the
ones they can): the softmax over the queries, a mask read inverted, a bool mask added to the scores, an
additive mask subtracted from them, a causal mask of the wrong sense. Each is float64 attention under the
mistake, on the rows a failing answer is read on, with the rows it leaves without a key.

The masks are those a declared mask (variants.adapt) is made from: a bool mask True where a key is seen (as
SDPA's), an additive one 0 there and the lowest value of q's dtype where a key is hidden."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from attnbench.variants.mods import NONE

OVER_QUERIES_LIMIT = 1 << 24  # scores the softmax-over-queries reading holds (128 MiB in float64)

OVER_QUERIES = "it took the softmax over the queries (dim=-2), not over the keys (dim=-1)"
INVERTED = (
    "its mask is inverted: each query saw only the keys it should not (a bool mask is True where a key is "
    "seen, as SDPA's, not where it is hidden, as nn.MultiheadAttention's; an additive one, 0 where seen, is "
    "added to the scores, neither subtracted nor read as bool)"
)
BOOL_ADDED = (
    'it adds the mask to the scores: declare mask="additive" (a bool mask added counts True as 1 and hides '
    "nothing)"
)
SUBTRACTED = (
    "it subtracts the mask from the scores: an additive mask is added (0 where a key is seen, the lowest "
    "value where it is hidden)"
)
REVERSED = (
    "its causal mask is reversed: each query saw its own key and those after it, not those before it (it "
    "masked tril(-1), where triu(1) is meant)"
)


def readings(q, k, v, *, rows: torch.Tensor, seen: torch.Tensor, scale, **rules) -> Iterator[tuple]:
    """(sentence, float64 attention under the mistake on `rows`, (B, H, R, d_v), the rows it leaves without a
    key, (B or 1, 1, R, 1) or None) for each mistake here that can happen in this cell. rows: the query rows
    read (1-D); seen: (B or 1, 1, R, N_k) the keys each of them sees by the cell's rules
    (correctness.visible); rules: the cell's, as correctness.likely_cause has them."""
    masks = rules["mod"] == NONE and rules["cu_seqlens"] is None and rules["block_table"] is None
    if masks and not bool(seen.all()):  # a mask, handed or made, hides a key of these rows
        yield INVERTED, _attend(q, k, v, rows, scale, seen=~seen), _empty(~seen)
        yield BOOL_ADDED, _attend(q, k, v, rows, scale, bias=seen.to(torch.float64)), None
        hidden = -torch.finfo(q.dtype).min if q.dtype.is_floating_point else torch.inf
        bias = (~seen).to(torch.float64) * hidden  # - (0 where seen, the lowest value where hidden)
        yield SUBTRACTED, _attend(q, k, v, rows, scale, bias=bias), None
    if masks and rules["causal"] and not rules["window"]:
        n_q, n_k = q.shape[2], k.shape[2]
        diagonal = rows.to(q.device) + (n_k - n_q if rules["causal_align"] == "lower-right" else 0)
        after = torch.arange(n_k, device=q.device)[None, :] >= diagonal[:, None]  # (R, N_k): j >= t_i
        if rules["key_lengths"] is not None:  # the padded keys hidden as the cell hides them
            after = (
                after
                & (torch.arange(n_k, device=q.device) < rules["key_lengths"].to(q.device)[:, None])[
                    :, None, None, :
                ]
            )
        after = after if after.dim() == 4 else after[None, None]
        yield REVERSED, _attend(q, k, v, rows, scale, seen=after), _empty(after)
    alt = over_queries(q, k, v, rows=rows, scale=scale, **rules)
    if alt is not None:
        yield OVER_QUERIES, alt, None


def _empty(seen: torch.Tensor) -> torch.Tensor | None:
    """The rows of a visibility (B or 1, 1, R, N_k) that see no key, (B or 1, 1, R, 1), or None."""
    empty = ~seen.any(-1, keepdim=True)
    return empty.cpu() if bool(empty.any()) else None


def _attend(q, k, v, rows: torch.Tensor, scale, *, seen=None, bias=None) -> torch.Tensor:
    """float64 softmax(q kᵀ scale + bias) v on `rows`, the keys `seen` hides left out; a row that sees no key
    is 0. k/v heads repeated to q's."""
    q64, k64, v64 = (t.detach().to(torch.float64) for t in (q[:, :, rows.to(q.device)], k, v))
    group = q64.shape[1] // k64.shape[1]
    k64, v64 = k64.repeat_interleave(group, dim=1), v64.repeat_interleave(group, dim=1)
    s = q64 @ k64.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    s = s if bias is None else s + bias.to(s.device)
    s = s if seen is None else s.masked_fill(~seen.to(s.device), -torch.inf)
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    total = p.sum(-1, keepdim=True)
    return p / torch.where(total == 0, torch.ones_like(total), total) @ v64


def over_queries(
    q, k, v, *, rows, scale, causal, causal_align, key_lengths, window, mod, cu_seqlens, block_table, **_
):
    """Attention with its softmax over the queries (each key's column) where the keys' is meant, float64, on
    `rows`: in a cell without key padding, a window, a mod or a pack (causal or not), whose scores fit in
    OVER_QUERIES_LIMIT; else None (every row's score is in each column's softmax, so it is computed whole)."""
    plain = not window and key_lengths is None and cu_seqlens is None and block_table is None
    b, h, n_q, d_k = q.shape
    n_k = k.shape[2]
    if not plain or mod != NONE or b * h * n_q * n_k > OVER_QUERIES_LIMIT:
        return None
    q64, k64, v64 = (t.detach().to(torch.float64) for t in (q, k, v))
    group = h // k64.shape[1]
    k64, v64 = k64.repeat_interleave(group, dim=1), v64.repeat_interleave(group, dim=1)
    scores = q64 @ k64.transpose(-2, -1) * (d_k**-0.5 if scale is None else scale)
    if causal:  # key j is seen from query i + offset on (0 top-left, N_k - N_q lower-right)
        offset = n_k - n_q if causal_align == "lower-right" else 0
        i, j = torch.arange(n_q, device=q.device)[:, None], torch.arange(n_k, device=q.device)
        scores = scores.masked_fill(j > i + offset, -torch.inf)
    out = scores.softmax(dim=-2).nan_to_num(0.0) @ v64  # a key no query sees: its column is no weight
    return out if rows is None else out[:, :, rows.to(out.device)]
