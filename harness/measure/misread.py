"""Known mistakes whose answer the reference's rules cannot say (correctness.likely_cause tries them after the
ones they can): a causal mask one key off its diagonal (each query's own key hidden, or the next key shown,
in any causal cell: square, N_q < N_k, lower-right, a window), the softmax over the queries, a mask read
inverted, a bool mask added to the scores, an additive mask subtracted from them, a causal mask of the wrong
sense, a paged cache read up to its last full page only or one slot past each context (its queries still
at each context's end). Each is float64 attention under the mistake, on the rows a failing answer is read
on, with the rows it leaves without a key: the reference's float64 attention and its visibility rule
(attention64), handed the keys the mistake sees.

The masks are those a declared mask (variants.adapt) is made from: a bool mask True where a key is seen (as
SDPA's), an additive one 0 there and the lowest value of q's dtype where a key is hidden."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from attnbench.harness.measure.attention64 import attend, context, heads_repeated, visible
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
    if rules["block_table"] is not None:  # a paged cache: k, v pools of pages, none of the masks below
        yield from _last_page_misread(q, k, v, rows=rows, scale=scale, **rules)
        return
    if rules["causal"] and rules["cu_seqlens"] is None:
        yield from _diagonal_off_by_one(q, k, v, rows=rows, seen=seen, scale=scale, **rules)
    masks = rules["mod"] == NONE and rules["cu_seqlens"] is None and rules["block_table"] is None
    if masks and not bool(seen.all()):  # a mask, handed or made, hides a key of these rows
        yield INVERTED, attend(q, k, v, rows=rows, scale=scale, seen=~seen), _empty(~seen)
        yield BOOL_ADDED, attend(q, k, v, rows=rows, scale=scale, bias=seen.to(torch.float64)), None
        hidden = -torch.finfo(q.dtype).min if q.dtype.is_floating_point else torch.inf
        bias = (~seen).to(torch.float64) * hidden  # - (0 where seen, the lowest value where hidden)
        yield SUBTRACTED, attend(q, k, v, rows=rows, scale=scale, bias=bias), None
    if masks and rules["causal"] and not rules["window"]:
        n_q, n_k, ids = q.shape[2], k.shape[2], rows.to(q.device)
        # j >= t_i: the keys row i - 1's causal mask hides (j > t_i - 1), of those the padding leaves
        before = visible(ids - 1, n_q, n_k, causal=True, causal_align=rules["causal_align"])
        after = ~before & visible(ids, n_q, n_k, key_lengths=rules["key_lengths"])  # (B or 1, 1, R, N_k)
        yield REVERSED, attend(q, k, v, rows=rows, scale=scale, seen=after), _empty(after)
    alt = over_queries(q, k, v, rows=rows, scale=scale, **rules)
    if alt is not None:
        yield OVER_QUERIES, alt, None


def _diagonal_off_by_one(
    q, k, v, *, rows, seen, scale, causal_align, window, key_lengths, mod, **_
) -> Iterator[tuple]:  # fmt: skip
    """A causal mask one key off: each query's own key t_i hidden (it masked triu(0) where triu(1) is meant:
    scores.masked_fill(ones.triu(d), -inf) hides key j from query i where j - i >= d), or the next key t_i + 1
    shown too (triu(2)), where the padding lets it; a window's far edge kept. Said in the cell's own terms:
    t_i is i top-left, i + N_k - N_q lower-right, and a window's first key t_i - W + 1."""
    n_q, n_k, ids = q.shape[2], k.shape[2], rows.to(q.device)
    shift = n_k - n_q if causal_align == "lower-right" else 0  # t_i - i
    j = torch.arange(n_k, device=q.device)[None, :]
    t = (ids + shift)[:, None]  # (R, 1): each row's diagonal key
    padded = visible(ids, n_q, n_k, key_lengths=key_lengths)  # the keys its padding lets a row see
    at = lambda d: f"i{d:+d}" if d else "i"  # noqa: E731  (i, i-1, i+30)
    first = f"{at(shift - window + 1)}.." if window else "0.."  # the first key a row sees by the rules
    mods = dict(rows=rows, scale=scale, mod=mod, causal_align=causal_align)
    own_hidden = seen & (j != t)[None, None]
    next_shown = seen | ((j == t + 1)[None, None] & padded)
    for by, sees, what in ((-1, own_hidden, "hides each query's own key"),
                           (1, next_shown, "shows each query the next key too")):  # fmt: skip
        said = f"its causal mask {what}: query i saw keys {first}{at(shift + by)} where it sees "
        said += f"{first}{at(shift)} (it masked triu({shift + 1 + by}), where triu({shift + 1}) is meant)"
        yield said, attend(q, k, v, seen=sees, **mods), _empty(sees)


def _last_page_misread(q, k, v, *, rows, scale, key_lengths, block_table, causal, **_) -> Iterator[tuple]:
    """A paged cache's last, partly filled page misread, its queries still at each context's end (positions
    L_b - N_q + i), so neither is a reading of other key lengths: read up to its last full page only
    (floor(L_b / page) pages where ceil is meant: a context shorter than a page reads none), or one slot past
    the context (L_b + 1 keys, j <= L_b where j < L_b is meant; a full last page has no slot past it), that
    slot, whatever the pool holds there, seen by every query. Float64 attention over each context, gathered
    through block_table, with the keys the mistake leaves out hidden or the one it adds shown."""
    page, n_q = k.shape[1], q.shape[2]
    lengths = key_lengths.to(torch.int64).cpu()
    floor, past = lengths // page * page, torch.minimum(lengths + 1, -(-lengths // page) * page)
    if torch.equal(floor, lengths):  # every context fills its pages: nothing left out, no slot past it
        return
    longest = int(past.max())
    gathered = []  # (B, H_kv, max L + 1, d) each, zero past what a context's pages hold
    for pool in (k, v):
        out = pool.new_zeros(len(lengths), pool.shape[2], longest, pool.shape[3])
        for b, length in enumerate(past.tolist()):
            out[b, :, :length] = context(pool, block_table, b, length)
        gathered.append(out)
    j = torch.arange(longest)[None, None, None, :]  # (1, 1, 1, max L + 1)
    own = j < lengths[:, None, None, None]  # (B, 1, 1, max L + 1): the context's keys
    if causal:  # lower-right within each context: query i sees j <= L_b - N_q + i
        own = own & (j <= (lengths - n_q)[:, None, None, None] + rows.cpu()[None, None, :, None])
    own = own.expand(-1, -1, len(rows), -1)  # (B, 1, R, max L + 1)
    full_only = own & (j < floor[:, None, None, None])
    said = "it read only the full pages of each sequence: the last, partial page left out (floor(L / "
    alt = attend(q, *gathered, rows=rows, scale=scale, seen=full_only)
    yield said + "page_size) pages where ceil is meant)", alt, _empty(full_only)
    one_past = own | ((j == lengths[:, None, None, None]) & (j < past[:, None, None, None]))
    said = "it read one slot past each context in its last, partial page: L + 1 keys where L is meant (j <= "
    said += "L, not j < L), the slot past the context seen by every query"
    yield said, attend(q, *gathered, rows=rows, scale=scale, seen=one_past), _empty(one_past)


def _empty(seen: torch.Tensor) -> torch.Tensor | None:
    """The rows of a visibility (B or 1, 1, R, N_k) that see no key, (B or 1, 1, R, 1), or None."""
    empty = ~seen.any(-1, keepdim=True)
    return empty.cpu() if bool(empty.any()) else None


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
    k64, v64 = heads_repeated(h, k64, v64)
    scores = q64 @ k64.transpose(-2, -1) * (d_k**-0.5 if scale is None else scale)
    if causal:  # the keys the cell's causal mask hides, by the reference's rule
        seen = visible(torch.arange(n_q, device=q.device), n_q, n_k, causal=True, causal_align=causal_align)
        scores = scores.masked_fill(~seen, -torch.inf)
    out = scores.softmax(dim=-2).nan_to_num(0.0) @ v64  # a key no query sees: its column is no weight
    return out if rows is None else out[:, :, rows.to(out.device)]
