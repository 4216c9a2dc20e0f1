"""Packed variable-length batches (the `lengths` axis): B sequences of different lengths, one after another
in one (1, H, T, d) tensor, as serving and training stacks pack them. In a paged cell (the page_size axis,
variants/paged.py) the same patterns draw the sequences' context lengths, averaging --seq-k, and
page_table lays their pages out.

A cell's `batch` is B, its `seq_len` N the mean length: every pattern holds the total T = B * N fixed, so
the times of one (B, N) compare across patterns (FlashAttention-4's varlen benchmark does the same).

  none        not packed: B sequences of one length N in a (B, H, N, d) batch (every cell before this axis)
  constant    packed, every sequence N long
  uniform     lengths drawn from U(0, 2N], then scaled to T
  bimodal     each sequence long (weight 2.5) with probability 1/4, else short (0.5), jittered by 10%, then
              scaled to T with the others: a pack holds a quarter long ones on average, not in each draw
  longtail    log-normal (sigma 1.5) lengths: most short, a few long
  NAME:MAX    any pattern with its longest sequence at most MAX tokens (default 4 N, and N for constant)

The draw is seeded by the pattern, B and N, so a cell's lengths are the same on every machine and every
run; its row stores them (`seq_lens`). Each length is at least 1 and at most MAX, and they sum to T exactly.

A variant that takes packed batches (its capability's `varlen`) is handed q (1, H, T, d_k), k and v
(1, H_kv, T, d) and `cu_seqlens`, the (B + 1,) int32 offsets of the sequences (FlashAttention's and
torch's varlen convention: sequence b holds rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1). Query row i sees
the keys of its own sequence only (with causal masking, those up to its own position). It returns
(1, H, T, d_v).
"""

from __future__ import annotations

import difflib
import random

NONE = "none"
# the refusals of a variant that runs packed batches only, or paged caches only
PACKED_ONLY = "runs packed variable-length batches only (--lengths PATTERN)"
PAGED_ONLY = "reads paged K/V caches only (--page-size P)"
PATTERNS = ("constant", "uniform", "bimodal", "longtail")
CAP_FACTOR = 4  # the default longest sequence, in mean lengths


def parse_lengths(text: str) -> str:
    """'none', a pattern, or 'pattern:MAX' (MAX a positive integer) -> its canonical text; ValueError naming
    what is wrong."""
    word = str(text).strip().lower()
    if word == NONE:
        return word
    kind, colon, cap = word.partition(":")
    if kind not in PATTERNS:
        near = difflib.get_close_matches(kind, [NONE, *PATTERNS], n=1, cutoff=0.6)  # long-tail: longtail
        hint = f" (did you mean {near[0] + colon + cap!r}?)" if near else ""
        raise ValueError(f"lengths must be none or one of {', '.join(PATTERNS)} (as uniform or uniform:MAX), "
                         f"got {text!r}{hint}")  # fmt: skip
    if not colon:
        return kind
    if not cap.isdigit() or int(cap) < 1:
        raise ValueError(
            f"lengths {kind}:MAX needs MAX, the longest sequence, a positive integer, got {text!r}"
        )
    return f"{kind}:{int(cap)}"


def pattern_cap(pattern: str, mean: int) -> int:
    """The longest sequence `pattern` allows at mean length `mean`."""
    kind, _, cap = pattern.partition(":")
    if cap:
        return int(cap)
    return mean if kind == "constant" else CAP_FACTOR * mean


def check_holds(pattern: str, batch: int, mean: int) -> None:
    """ValueError when `pattern`'s longest sequence cannot hold batch * mean tokens in `batch` sequences."""
    cap = pattern_cap(pattern, mean)
    if cap * batch < batch * mean:
        raise ValueError(
            f"{pattern}: {batch} sequences of at most {cap} tokens cannot hold the {batch * mean} tokens "
            f"of batch {batch} x mean length {mean}"
        )


def draw_lengths(pattern: str, batch: int, mean: int, least: int = 1) -> list[int]:
    """The `batch` sequence lengths of `pattern` at mean length `mean`: seeded by the three, at least `least`
    (a paged cell's query tokens) and at most the pattern's cap each, summing to batch * mean."""
    pattern = parse_lengths(pattern)
    if pattern == NONE:
        raise ValueError("lengths none is not packed: it has no sequence lengths")
    check_holds(pattern, batch, mean)
    kind = pattern.partition(":")[0]
    rng = random.Random(f"{kind}|{batch}|{mean}")
    weights = [_weight(kind, rng) for _ in range(batch)]
    return _fit(weights, batch * mean, pattern_cap(pattern, mean), least)


def _weight(kind: str, rng: random.Random) -> float:
    if kind == "constant":
        return 1.0
    if kind == "uniform":
        return 1.0 - rng.random()  # (0, 1]
    if kind == "bimodal":
        return (2.5 if rng.random() < 0.25 else 0.5) * rng.uniform(0.9, 1.1)
    return rng.lognormvariate(0.0, 1.5)  # longtail


def _fit(weights: list[float], total: int, cap: int, least: int = 1) -> list[int]:
    """Integers proportional to `weights`, each in [least, cap], summing to `total` (water-filling: the ones
    that hit a bound are fixed there and the rest scaled again)."""
    n = len(weights)
    fixed: dict[int, float] = {}
    while True:
        free = [i for i in range(n) if i not in fixed]
        left = total - sum(fixed.values())
        scale = left / sum(weights[i] for i in free)
        over = {i: float(cap) for i in free if weights[i] * scale > cap}
        under = {i: float(least) for i in free if weights[i] * scale < least}
        if not over and not under:
            break
        fixed.update(over or under)  # the cap first: freeing room can only lift the others
    exact = [fixed.get(i, weights[i] * scale) for i in range(n)]
    out = [int(x) for x in exact]
    short = total - sum(out)
    by_remainder = sorted(range(n), key=lambda i: exact[i] - out[i], reverse=True)
    for i in by_remainder:
        if short == 0:
            break
        if out[i] < cap:
            out[i] += 1
            short -= 1
    return out


def offsets(lengths: list[int]) -> list[int]:
    """cu_seqlens: [0, L_0, L_0 + L_1, ..., T]."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def page_table(lengths: list[int], page_size: int) -> list[list[int]]:
    """A paged cache's page table (variants/paged.py): sequence b's ceil(L_b / page_size) pages, drawn from a
    pool of exactly the pages all sequences need, in an order shuffled by a generator seeded by the lengths
    and the page size (a cache that has served many requests: no sequence's pages lie together). Rows are
    padded with page 0 to the longest."""
    counts = [-(-n // page_size) for n in lengths]
    pool = list(range(sum(counts)))
    random.Random(f"pages|{page_size}|{lengths}").shuffle(pool)
    rows, start = [], 0
    for c in counts:
        rows.append(pool[start : start + c] + [0] * (max(counts) - c))
        start += c
    return rows
