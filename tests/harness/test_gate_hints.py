"""A failing float64 gate says the likely cause when the answer is exactly attention under a common mistake
(correctness.likely_cause), and where a non-finite answer is NaN; a right answer, and a wrong one of no
known kind, get no such sentence."""

import math

import pytest
import torch

from attnbench.harness.measure import correctness

B, H, N, D = 2, 3, 40, 16


def qkv(n_q=N, n_k=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n_q, D, generator=g)
    k, v = (torch.randn(B, H, n_k, D, generator=g) for _ in range(2))
    return q, k, v


def attention(q, k, v, *, scale=None, mask=None):
    """Plain float32 attention; mask: True where a key is hidden."""
    s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if mask is not None:
        s = s.masked_fill(mask, -math.inf)
    return torch.softmax(s, dim=-1) @ v


def no_scale(q, k, v):
    return attention(q, k, v, scale=1.0)


def over_heads(q, k, v):  # a (B, N, H, d) function handed (B, H, N, d)
    return attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)


def diagonal_hidden(q, k, v):
    return attention(q, k, v, mask=torch.ones(N, N, dtype=torch.bool).triu(0))


def next_key_shown(q, k, v, key_lengths=None):
    mask = torch.ones(N, N, dtype=torch.bool).triu(2)
    if key_lengths is not None:  # (B, 1, 1, N): the padded keys hidden too
        mask = mask | (torch.arange(N)[None, :] >= key_lengths[:, None])[:, None, None, :]
    return attention(q, k, v, mask=mask)


HIDDEN = (
    "its causal mask hides each query's own key: query i saw keys 0..i-1 where it sees 0..i (it masked "
    "triu(0), where triu(1) is meant)"
)
SHOWN = (
    "its causal mask shows each query the next key too: query i saw keys 0..i+1 where it sees 0..i (it "
    "masked triu(2), where triu(1) is meant)"
)


def lower_right(q, k, v):
    n_q, n_k = q.shape[2], k.shape[2]
    return attention(q, k, v, mask=torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q + 1))


def over_queries(q, k, v, causal=False):  # softmax(dim=-2): each key's column sums to 1, not each query's row
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-2) @ v


LENGTHS = torch.tensor([N, 25])
OVER_QUERIES = "it took the softmax over the queries (dim=-2), not over the keys (dim=-1)"


def handed(kind, q, k, causal=False, key_lengths=None):
    """The mask a variant declared mask=kind is handed (variants.adapt)."""
    from attnbench.variants.adapt import make_mask

    return make_mask(q, k, kind=kind, causal=causal, key_lengths=key_lengths)


def adds_bool(q, k, v, **rules):  # declared mask="bool", but it adds its mask to the scores
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return torch.softmax(s + handed("bool", q, k, **rules), dim=-1) @ v


def subtracts(q, k, v, **rules):  # declared mask="additive", and subtracts it
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return torch.softmax(s - handed("additive", q, k, **rules), dim=-1) @ v


def reads_as_bool(q, k, v, **rules):  # declared mask="additive", read as bool (True = attend)
    return attention(q, k, v, mask=~handed("additive", q, k, **rules).bool())


def reversed_causal(q, k, v, key_lengths=None):  # tril(-1) masked where triu(1) is: j < i hidden
    mask = torch.ones(N, N, dtype=torch.bool).tril(-1)
    if key_lengths is not None:
        mask = mask | (torch.arange(N)[None, :] >= key_lengths[:, None])[:, None, None, :]
    return attention(q, k, v, mask=mask)


BOOL_ADDED = 'it adds the mask to the scores: declare mask="additive"'
SUBTRACTED = "it subtracts the mask from the scores: an additive mask is added"
INVERTED = "its mask is inverted: each query saw only the keys it should not"
REVERSED = "its causal mask is reversed: each query saw its own key and those after it, not those before it"
BOTH = {"causal": True, "key_lengths": LENGTHS}


@pytest.mark.parametrize(
    "mistake, rules, said",
    [
        (no_scale, {}, "it left out the scale: softmax(q kᵀ), not softmax(q kᵀ / sqrt(d_k))"),
        (attention, {"scale": 0.5}, "it ignored scale=0.5 and used 1/sqrt(d_k)"),
        (over_heads, {}, 'it computed attention over (B, N, H, d) inputs: declare takes="bnhd"'),
        (attention, {"causal": True}, "it ignored causal=True: its answer is attention over every key"),
        (attention, {"key_lengths": LENGTHS}, "it ignored key_lengths=: the padded keys took part"),
        (diagonal_hidden, {"causal": True}, HIDDEN),
        (next_key_shown, {"causal": True}, SHOWN),
        (lambda q, k, v: next_key_shown(q, k, v, LENGTHS), {"causal": True, "key_lengths": LENGTHS}, SHOWN),
        (over_queries, {}, OVER_QUERIES),
        (lambda q, k, v: over_queries(q, k, v, causal=True), {"causal": True}, OVER_QUERIES),
        (lambda q, k, v: adds_bool(q, k, v, causal=True), {"causal": True}, BOOL_ADDED),
        (lambda q, k, v: adds_bool(q, k, v, **BOTH), BOTH, BOOL_ADDED),
        (lambda q, k, v: subtracts(q, k, v, key_lengths=LENGTHS), {"key_lengths": LENGTHS}, SUBTRACTED),
        (lambda q, k, v: subtracts(q, k, v, **BOTH), BOTH, SUBTRACTED),
        (lambda q, k, v: reads_as_bool(q, k, v, causal=True), {"causal": True}, INVERTED),
        (lambda q, k, v: reads_as_bool(q, k, v, **BOTH), BOTH, INVERTED),
        (reversed_causal, {"causal": True}, REVERSED),
        (lambda q, k, v: reversed_causal(q, k, v, LENGTHS), BOTH, REVERSED),
    ],
    ids=[
        "no-scale",
        "scale-ignored",
        "bnhd",
        "causal-ignored",
        "padding-ignored",
        "diagonal-hidden",
        "next-key-shown",
        "next-key-shown-padded",
        "softmax-over-queries",
        "causal-softmax-over-queries",
        "bool-mask-added",
        "bool-mask-added-padded",
        "additive-mask-subtracted",
        "additive-mask-subtracted-causal",
        "additive-mask-read-as-bool",
        "additive-mask-read-as-bool-padded",
        "causal-mask-reversed",
        "causal-mask-reversed-padded",
    ],  # fmt: skip
)
@pytest.mark.parametrize("max_rows", [None, 8], ids=["every-row", "sampled-rows"])
def test_a_common_mistake_is_named_first(mistake, rules, said, max_rows):
    q, k, v = qkv()
    rows = correctness.sample_rows(N, max_rows)
    result = correctness.gate(mistake(q, k, v), q, k, v, rows=rows, **rules)
    assert not result.passed
    assert result.describe().startswith(said), result.describe()


def test_a_causal_mask_aligned_the_other_way_is_named_when_queries_and_keys_differ():
    q, k, v = qkv(n_q=12, n_k=N)
    result = correctness.gate(lower_right(q, k, v), q, k, v, causal=True)
    said = result.describe()
    assert said.startswith("its causal mask is aligned lower-right where the cell asks top-left"), said
    assert '(if its causal=True is always lower-right, declare causal="lower-right")' in said


def test_grouped_heads_tiled_instead_of_interleaved_are_named():
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(1, 8, N, D, generator=g), *(torch.randn(1, 2, N, D, generator=g) for _ in range(2))
    tiled = attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1))
    result = correctness.gate(tiled, q, k, v)
    assert result.describe().startswith("it tiled the k/v heads (repeat) where query head h reads k/v head h")
    right = attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
    assert correctness.gate(right, q, k, v).passed


def test_the_diagonal_hidden_says_where_its_answer_is_nan():
    """The first query sees no key once its own is hidden: NaN there, and the row is named."""
    q, k, v = qkv()
    result = correctness.gate(diagonal_hidden(q, k, v), q, k, v, causal=True)
    assert math.isinf(result.rel_err)
    text = result.describe()
    assert text.startswith("its causal mask hides each query's own key"), text
    assert text.endswith("non-finite output (NaN or inf); at query row 0 only"), text


def test_nan_rows_are_counted_and_the_first_named():
    q, k, v = qkv()
    out = attention(q, k, v)
    out[1, 2, [5, 9, 30]] = math.nan
    text = correctness.gate(out, q, k, v).describe()
    assert text == "non-finite output (NaN or inf); at 3 of 40 query rows checked, the first row 5", text


def test_right_answers_and_unknown_mistakes_get_no_cause():
    q, k, v = qkv()
    assert correctness.gate(attention(q, k, v), q, k, v).hint == ""
    wrong = attention(q, k, v) + 0.1 * torch.randn(B, H, N, D, generator=torch.Generator().manual_seed(1))
    windowed, alibi = {"causal": True, "window": 6}, {"causal": True, "mod": "alibi"}
    for rules in ({}, {"causal": True}, {"key_lengths": LENGTHS}, {"scale": 0.5}, windowed, alibi):
        result = correctness.gate(wrong, q, k, v, **rules)
        assert not result.passed and result.hint == "", (rules, result.describe())


@pytest.mark.parametrize(
    "rules", [{"causal": True}, {"key_lengths": LENGTHS}, BOTH], ids=["causal", "padded", "both"]
)
def test_a_right_answer_under_a_mask_is_never_read_as_a_mask_mistake(rules):
    """The mask readings (misread) are attention under another mask: a right answer, bool mask or additive,
    is explained by none of them, whatever the tolerance it is read to."""
    q, k, v = qkv()
    for kind in ("bool", "additive"):
        mask = handed(kind, q, k, **rules)
        right = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        for tol in (1e-4, 1e-2):
            assert correctness.likely_cause(right, q, k, v, tol=tol, **rules) == "", (kind, tol)


def test_a_long_answer_is_read_on_a_few_of_its_rows(monkeypatch):
    """Each reading's float64 reference is computed on at most HINT_ROWS rows, the first and last among
    them, however many the gate checked."""
    seen = []
    real = correctness.reference
    monkeypatch.setattr(
        correctness, "reference", lambda *a, rows=None, **kw: seen.append(rows) or real(*a, rows=rows, **kw)
    )
    q, k, v = qkv()
    result = correctness.gate(no_scale(q, k, v), q, k, v, causal=False)
    assert result.hint.startswith("it left out the scale")
    assert seen[0] is None  # the gate's own reference: every row
    layout, hinted = [r for r in seen[1:] if r is None], [r for r in seen[1:] if r is not None]
    assert len(layout) == 1  # the (B, N, H, d) reading: its "rows" are heads, every one of them
    assert hinted and all(len(r) == correctness.HINT_ROWS and r[0] == 0 and r[-1] == N - 1 for r in hinted)


def windowed(q, k, v, *, window):
    """Causal attention over the `window` keys up to each query's own."""
    i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
    return attention(q, k, v, mask=(j > i) | (j <= i - window))


def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)


@pytest.mark.parametrize(
    "mistake, rules, said",
    [
        (lambda q, k, v: windowed(q, k, v, window=N), {"window": 6}, "it ignored window=6: each query saw"),
        (
            lambda q, k, v: windowed(q, k, v, window=7),
            {"window": 6},
            "its window holds 7 keys, its own and 6",
        ),
        (
            lambda q, k, v: attention(q, k, v, mask=causal_mask(N)),
            {"mod": "alibi"},
            "it ignored the score mod",
        ),
        (
            lambda q, k, v: attention(q, k, v, mask=causal_mask(N)),
            {"mod": "softcap:2"},
            "it ignored the score",
        ),
    ],
    ids=["window-ignored", "window-one-wider", "alibi-ignored", "softcap-ignored"],
)
def test_a_window_or_mod_mistake_is_named(mistake, rules, said):
    q, k, v = qkv()
    result = correctness.gate(
        mistake(q, k, v), q, k, v, causal=True, rows=correctness.sample_rows(N, 12), **rules
    )
    assert not result.passed and result.describe().startswith(said), result.describe()


def test_a_key_padding_mask_one_key_past_each_length_is_named_as_the_windows_is():
    """`j <= key_lengths` where `j < key_lengths` is meant: each padded sequence sees its first padded key
    too, and the gate named no cause (so bench's answer offered approximate=R for a masking bug); named now,
    causal or not, and never for a batch whose sequences are all unpadded."""
    q, k, v = qkv()
    j = torch.arange(N)

    def one_past(lengths, causal=False):
        hidden = (j[None, :] > lengths[:, None])[:, None, None, :]  # (B, 1, 1, N_k): j <= length seen
        return attention(q, k, v, mask=hidden | causal_mask(N) if causal else hidden)

    said = "its key padding mask shows one key past each length: key j is seen where j <= key_lengths[b], not"
    for causal in (False, True):
        result = correctness.gate(one_past(LENGTHS, causal), q, k, v, causal=causal, key_lengths=LENGTHS)
        assert not result.passed and result.describe().startswith(said), result.describe()
    whole = torch.tensor([N, N])  # no padded key to see: the reading is not tried, and the answer is right
    assert correctness.gate(one_past(whole), q, k, v, key_lengths=whole).passed


def test_a_packed_batch_whose_boundaries_were_ignored_is_named():
    q, k, v = (t[:1] for t in qkv())
    cu = torch.tensor([0, 7, 8, 25, N])
    across = attention(q, k, v, mask=causal_mask(N))  # causal over the whole pack
    result = correctness.gate(across, q, k, v, causal=True, cu_seqlens=cu)
    text = result.describe()
    assert (
        text.startswith("it ignored the packed batch's boundaries (cu_seqlens)") and "worst: sequence" in text
    )


PAGE, CONTEXTS = 8, torch.tensor([29, 12, 40])


def table_of(order: torch.Tensor) -> torch.Tensor:
    """The page table that hands each sequence the next pages of `order`, as many as its context needs."""
    counts = (-(-CONTEXTS // PAGE)).tolist()
    table = torch.zeros(len(counts), max(counts), dtype=torch.long)
    for b, (start, n) in enumerate(zip(torch.tensor([0, *counts]).cumsum(0).tolist(), counts, strict=False)):
        table[b, :n] = order[start : start + n]
    return table


def paged(n_q=2, seed=3, heads=H, kv_heads=H):
    """Two query tokens per sequence, and a pool of exactly the pages the contexts need, scattered."""
    g = torch.Generator().manual_seed(seed)
    pages = int((-(-CONTEXTS // PAGE)).sum())
    table = table_of(torch.randperm(pages, generator=g))
    q = torch.randn(len(CONTEXTS), heads, n_q, D, generator=g)
    k, v = (torch.randn(pages, PAGE, kv_heads, D, generator=g) for _ in range(2))
    return q, k, v, table


def decode(q, k, v, table, contexts, *, causal=True):
    """Each sequence's keys gathered page by page through table, its queries at the context's end."""
    outs = []
    for b, length in enumerate(contexts.tolist()):
        ids = table[b, : -(-length // PAGE)]
        kb, vb = (t[ids].flatten(0, 1)[:length].transpose(0, 1)[None] for t in (k, v))
        n_q = q.shape[2]
        hide = torch.ones(n_q, length, dtype=torch.bool).triu(length - n_q + 1) if causal else None
        outs.append(attention(q[b : b + 1], kb, vb, mask=hide))
    return torch.cat(outs)


@pytest.mark.parametrize(
    "mistake, said",
    [
        (lambda q, k, v, table: decode(q, k, v, table, -(-CONTEXTS // PAGE) * PAGE), "it read every slot of"),
        (lambda q, k, v, table: decode(q, k, v, table_of(torch.arange(len(k))), CONTEXTS),
         "it read each sequence's pages one after another in the pool"),
        (lambda q, k, v, table: decode(q, k, v, table, CONTEXTS, causal=False), "it ignored causal=True"),
    ],
    ids=["last-page-whole", "pool-order", "causal-ignored"],
)  # fmt: skip
def test_a_paged_cache_read_wrongly_is_named(mistake, said):
    q, k, v, table = paged()
    right = correctness.gate(decode(q, k, v, table, CONTEXTS), q, k, v, causal=True, key_lengths=CONTEXTS,
                             block_table=table, causal_align="lower-right")  # fmt: skip
    assert right.passed, right.describe()
    result = correctness.gate(mistake(q, k, v, table), q, k, v, causal=True, key_lengths=CONTEXTS,
                              block_table=table, causal_align="lower-right")  # fmt: skip
    assert not result.passed and result.describe().startswith(said), result.describe()


def test_a_paged_cache_whose_heads_were_tiled_is_named():
    q, k, v, table = paged(heads=4, kv_heads=2)
    rules = dict(causal=True, key_lengths=CONTEXTS, block_table=table, causal_align="lower-right")
    grouped = (t.repeat_interleave(2, dim=2) for t in (k, v))
    assert correctness.gate(decode(q, *grouped, table, CONTEXTS), q, k, v, **rules).passed
    tiled = decode(q, k.repeat(1, 1, 2, 1), v.repeat(1, 1, 2, 1), table, CONTEXTS)
    result = correctness.gate(tiled, q, k, v, **rules)
    assert result.describe().startswith("it tiled the k/v heads (repeat)"), result.describe()


def scattered(pool_pages: int, seed=5):
    """paged()'s cache in a pool of `pool_pages` pages (more than the contexts need), the table a random
    choice of them."""
    g = torch.Generator().manual_seed(seed)
    table = table_of(torch.randperm(pool_pages, generator=g))
    q = torch.randn(len(CONTEXTS), H, 2, D, generator=g)
    k, v = (torch.randn(pool_pages, PAGE, H, D, generator=g) for _ in range(2))
    return q, k, v, table


def first_pages(firsts):
    """The page table a kernel reads without block_table: sequence b's pages firsts[b], firsts[b] + 1, ..."""
    counts = (-(-CONTEXTS // PAGE)).tolist()
    table = torch.zeros(len(counts), max(counts), dtype=torch.long)
    for b, (first, n) in enumerate(zip(firsts, counts, strict=True)):
        table[b, :n] = torch.arange(first, first + n)
    return table


def full_pages_only(q, k, v, table):
    """floor(L / page) pages where ceil is meant: each context's last, partial page left out, its queries
    still at the context's end (a context shorter than a page would see no key)."""
    outs, n_q = [], q.shape[2]
    for b, length in enumerate(CONTEXTS.tolist()):
        ids = table[b, : -(-length // PAGE)]
        kb, vb = (t[ids].flatten(0, 1)[:length].transpose(0, 1)[None] for t in (k, v))
        i, j = torch.arange(n_q)[:, None], torch.arange(length)[None, :]
        hide = (j > length - n_q + i) | (j >= length // PAGE * PAGE)
        outs.append(attention(q[b : b + 1], kb, vb, mask=hide))
    return torch.cat(outs)


PAGED_RULES = dict(causal=True, key_lengths=CONTEXTS, causal_align="lower-right")
WIDTH = int((-(-CONTEXTS // PAGE)).max())  # the table's width: each sequence's most pages


@pytest.mark.parametrize(
    "firsts, said",
    [
        ([0, 0, 0], "it read every sequence's pages from pool page 0 (pages 0..n-1 for each), not through"),
        ([0, WIDTH, 2 * WIDTH], f"it read sequence b's pages from pool page b x {WIDTH} (the pool as"),
        ([0, 4, 6], "it read each sequence's pages one after another in the pool, not through block_table"),
    ],
    ids=["each-from-page-0", "a-row-of-the-pool-each", "one-after-another"],
)  # fmt: skip
def test_a_paged_cache_read_in_pool_order_is_named_whichever_order(firsts, said):
    """The commonest way to forget the page table, pages 0..n-1 for every sequence (arange(n_pages)), was
    a bare rel_err: only the pages of each sequence following the previous one's were named."""
    q, k, v, table = scattered(3 * WIDTH)
    got = decode(q, k, v, first_pages(firsts), CONTEXTS)
    result = correctness.gate(got, q, k, v, block_table=table, **PAGED_RULES)
    assert not result.passed and result.describe().startswith(said), result.describe()


def test_a_paged_cache_without_its_last_partial_page_is_named_and_its_worst_sequence_too():
    """floor(L / page) pages where ceil is meant was 'it left query rows unwritten' where a context was
    shorter than a page, else a bare rel_err; and a paged failure named no sequence, as a pack's does."""
    q, k, v, table = paged()
    result = correctness.gate(full_pages_only(q, k, v, table), q, k, v, block_table=table, **PAGED_RULES)
    text = result.describe()
    assert not result.passed and text.startswith("it read only the full pages of each sequence: the last,")
    # sequence 2's context of 12 loses 4 of its keys, sequence 1's of 29 loses 5, sequence 3's none
    errs = [correctness.gate(o[None], q[b : b + 1], k, v, block_table=table[b : b + 1], causal=True,
                             key_lengths=CONTEXTS[b : b + 1], causal_align="lower-right").rel_err
            for b, o in enumerate(full_pages_only(q, k, v, table))]  # fmt: skip
    worst = max(range(3), key=lambda b: errs[b])
    named = f"worst: sequence {worst + 1} of 3 (context of {int(CONTEXTS[worst])} tokens): rel_err"
    assert named in text, text
    assert errs[2] < 1e-6 < errs[worst] and result.rel_err == pytest.approx(errs[worst]), errs


def table_reordered(table, pool: int, *, how: str):
    """The page table a kernel reads that ignores block_table's order: each sequence's own pages sorted
    (how="sorted": read in physical order), or else its pages taken as contiguous from its first (a page
    past the pool's end read as its last, as a clamped index reads it)."""
    out = table.clone()
    for b, n in enumerate((-(-CONTEXTS // PAGE)).tolist()):
        first = int(table[b, 0])
        onward = torch.arange(first, first + n).clamp(max=pool - 1)
        out[b, :n] = table[b, :n].sort().values if how == "sorted" else onward
    return out


def one_slot_past(q, k, v, table, *, causal=True):
    """`j <= L` where `j < L` is meant: L + 1 keys of a context whose last page has a slot past it, that
    slot (whatever the pool holds there) seen by every query, the queries still at the end of L."""
    outs, n_q = [], q.shape[2]
    for b, length in enumerate(CONTEXTS.tolist()):
        n = length + 1 if length % PAGE else length
        ids = table[b, : -(-n // PAGE)]
        kb, vb = (t[ids].flatten(0, 1)[:n].transpose(0, 1)[None] for t in (k, v))
        i, j = torch.arange(n_q)[:, None], torch.arange(n)[None, :]
        hide = (j > length - n_q + i) & (j != length) if causal else None
        outs.append(attention(q[b : b + 1], kb, vb, mask=hide))
    return torch.cat(outs)


ONE_PAST = "it read one slot past each context in its last, partial page: L + 1 keys where L is meant (j <="


@pytest.mark.parametrize(
    "mistake, said",
    [
        (lambda q, k, v, t: decode(q, k, v, table_reordered(t, len(k), how="sorted"), CONTEXTS),
         "it read each sequence's own pages in ascending pool order (its row of block_table sorted), not in"),
        (lambda q, k, v, t: decode(q, k, v, table_reordered(t, len(k), how="onward"), CONTEXTS),
         "it read each sequence's pages as contiguous from its first (block_table[b, 0] + 0..n-1), not in"),
        (one_slot_past, ONE_PAST + " L, not j < L), the slot past the context seen by every query"),
        (lambda q, k, v, t: decode(q, k, v, t, torch.minimum(CONTEXTS + 1, -(-CONTEXTS // PAGE) * PAGE)),
         ONE_PAST + " L, not j < L), as if each context were one key longer"),
        (lambda q, k, v, t: decode(q, k, v, t, CONTEXTS // PAGE * PAGE),
         "it read only the full pages of each sequence: the last, partial page left out (floor(L / "
         "page_size) pages where ceil is meant), as if each context ended at its last full page"),
    ],
    ids=["pages-sorted", "pages-contiguous-from-the-first", "one-slot-past", "one-slot-past-queries-later",
         "full-pages-only-queries-there"],
)  # fmt: skip
def test_a_paged_cache_read_around_its_table_order_or_one_slot_past_is_named_with_its_sequence(mistake, said):
    """Pages read in physical order (each sequence's sorted) or as contiguous from each sequence's first,
    and a partly filled last page read one slot past its context (`<=` for `<`), were a bare rel_err with
    the worst sequence: caught, their cause unsaid; so was the last partial page left out by a kernel whose
    queries move to the last full page with it (floor(L / page) taken as the context's length)."""
    q, k, v, table = paged()
    assert not torch.equal(table_reordered(table, len(k), how="sorted"), table)  # a shuffled table to sort
    result = correctness.gate(mistake(q, k, v, table), q, k, v, block_table=table, **PAGED_RULES)
    text = result.describe()
    assert not result.passed and text.startswith(said) and "worst: sequence" in text, text


def test_a_one_slot_past_read_is_named_alike_in_a_decode_step_and_without_a_causal_mask():
    """A decode step's one query, and a cell without a causal mask, see every key: L + 1 keys is one reading
    whichever way the queries are placed, named in the same words as a causal cell of several queries."""
    q, k, v, table = paged(n_q=1)
    said = ONE_PAST + " L, not j < L), the slot past the context seen by every query"
    for causal in (True, False):
        rules = {**PAGED_RULES, "causal": causal}
        got = one_slot_past(q, k, v, table, causal=causal)
        result = correctness.gate(got, q, k, v, block_table=table, **rules)
        assert not result.passed and result.describe().startswith(said), result.describe()


def test_a_paged_table_order_and_the_slot_past_are_not_named_where_they_do_not_explain_the_answer():
    """A right paged answer passes unnamed; each sequence's pages shuffled among themselves (neither sorted
    nor contiguous) is named as no table order; and a context that fills its last page has no slot past it
    (one slot past is then the right answer)."""
    q, k, v, table = paged()
    right = correctness.gate(decode(q, k, v, table, CONTEXTS), q, k, v, block_table=table, **PAGED_RULES)
    assert right.passed and not right.hint, right.describe()
    shuffled = table.clone()
    for b, n in enumerate((-(-CONTEXTS // PAGE)).tolist()):
        shuffled[b, :n] = table[b, :n].roll(1)  # its own pages, in another order than sorted or the table's
    assert all(not torch.equal(shuffled, table_reordered(table, len(k), how=h)) for h in ("sorted", "onward"))
    wrong = correctness.gate(decode(q, k, v, shuffled, CONTEXTS), q, k, v, block_table=table, **PAGED_RULES)
    assert not wrong.passed and not wrong.hint and "worst: sequence" in wrong.where, wrong.describe()
    full = torch.tensor([32, 16, 40])  # every last page full
    rules = {**PAGED_RULES, "key_lengths": full}
    assert correctness.gate(decode(q, k, v, table, full), q, k, v, block_table=table, **rules).passed


def test_a_right_paged_answer_and_an_unrelated_mistake_are_not_named_a_misread_table():
    """The pool orders and the full pages are tried only where they explain the answer: a right one passes
    unnamed, a scale left out is named as that, and a table of other scattered pages (no pool order) is
    named as none of them."""
    q, k, v, table = scattered(3 * WIDTH)
    right = correctness.gate(decode(q, k, v, table, CONTEXTS), q, k, v, block_table=table, **PAGED_RULES)
    assert right.passed and not right.hint and not right.where, right.describe()
    outs = []  # each context's queries at its end, the scale left out
    for b, length in enumerate(CONTEXTS.tolist()):
        ids = table[b, : -(-length // PAGE)]
        kb, vb = (t[ids].flatten(0, 1)[:length].transpose(0, 1)[None] for t in (k, v))
        hide = torch.ones(2, length, dtype=torch.bool).triu(length - 1)
        outs.append(attention(q[b : b + 1], kb, vb, mask=hide, scale=1.0))
    unscaled = correctness.gate(torch.cat(outs), q, k, v, block_table=table, **PAGED_RULES)
    assert unscaled.hint.startswith("it left out the scale"), unscaled.describe()
    other = scattered(3 * WIDTH, seed=6)[3]  # other pages than the table's, in no pool order
    wrong = correctness.gate(decode(q, k, v, other, CONTEXTS), q, k, v, block_table=table, **PAGED_RULES)
    assert not wrong.passed and not wrong.hint and "worst: sequence" in wrong.where, wrong.describe()


def _tail_unwritten(q, k, v, block=32):
    """A kernel that assumes N is a multiple of its block: the rows past the last full one stay zero."""
    out = torch.zeros_like(q)
    n = q.shape[2] // block * block
    out[:, :, :n] = attention(q[:, :, :n], k, v)
    return out


@pytest.mark.parametrize(
    ("answer", "rows", "said"),
    [
        (_tail_unwritten, None, "at query rows 32 to 39 (8 of 40 checked)"),
        (lambda q, k, v: _tail_unwritten(q, k, v, block=39), None, "at query row 39 only"),
        (_tail_unwritten, torch.tensor([0, 5, 33, 39]), "at query rows 33 to 39 (2 of 4 checked)"),
        (
            lambda q, k, v: attention(q, k, v) * torch.tensor([1.0, 2.0] * (N // 2))[:, None],
            None,
            "at 20 of 40 query rows checked, the first row 1",
        ),  # fmt: skip
        (no_scale, None, None),  # every row wrong: nothing to point at (the hint says why)
    ],
)
def test_a_wrong_answer_says_which_query_rows_err(answer, rows, said):
    q, k, v = qkv()
    result = correctness.gate(answer(q, k, v), q, k, v, rows=rows)
    assert not result.passed
    if said is None:
        assert result.where == "" and result.hint.startswith("it left out the scale"), result.describe()
    else:
        assert result.where == said and result.describe().endswith(said), result.describe()


def diagonal_off(q, k, v, *, by, window=0, lower_right=False, key_lengths=None, mod=None):
    """Causal attention with the mask one key off its diagonal t_i (i, or i + N_k - N_q lower-right): by -1
    hides each query's own key (triu(0) where triu(1) is meant), by +1 shows it the next key too (triu(2));
    a window's far edge where the cell's is (j <= t_i - W hidden)."""
    n_q, n_k = q.shape[2], k.shape[2]
    t = torch.arange(n_q)[:, None] + (n_k - n_q if lower_right else 0)
    j = torch.arange(n_k)[None, :]
    hidden = (j > t + by) | ((j <= t - window) if window else torch.zeros_like(j, dtype=torch.bool))
    if key_lengths is not None:
        hidden = hidden | (j >= key_lengths[:, None, None, None])
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if mod == "alibi":
        from attnbench.variants.mods import apply_mod

        s = apply_mod(s, mod, causal=True, causal_align="lower-right" if lower_right else "top-left")
    return torch.softmax(s.masked_fill(hidden, -math.inf), dim=-1).nan_to_num(0.0) @ v


@pytest.mark.parametrize(
    "n_q, rules, said",
    [
        (N // 4, {}, "keys 0..i-1 where it sees 0..i (it masked triu(0), where triu(1) is meant)"),
        (N, {"window": 6}, "keys i-5..i-1 where it sees i-5..i (it masked triu(0), where triu(1) is meant)"),
        (N // 4, {"causal_align": "lower-right"}, "keys 0..i+29 where it sees 0..i+30 (it masked triu(30), "
                                                  "where triu(31) is meant)"),
        (N, {"key_lengths": LENGTHS}, "keys 0..i-1 where it sees 0..i"),
        (N, {"mod": "alibi"}, "keys 0..i-1 where it sees 0..i"),
    ],
    ids=["top-left-fewer-queries", "window", "lower-right", "padded", "alibi"],
)  # fmt: skip
def test_a_causal_diagonal_one_key_off_is_named_in_every_causal_cell(n_q, rules, said):
    """Trial: a kernel masking j >= i was named in the square causal cells, and only 'it left query rows
    unwritten' in the top-left N_q < N_k and window cells (its row 0 sees no key there): the readings of the
    diagonal one key off are tried wherever the cell is causal, in the cell's own words."""
    q, k, v = qkv(n_q=n_q)
    lower = rules.get("causal_align") == "lower-right"
    kw = dict(window=rules.get("window", 0), lower_right=lower, key_lengths=rules.get("key_lengths"))
    hidden = diagonal_off(q, k, v, by=-1, mod=rules.get("mod"), **kw)
    result = correctness.gate(hidden, q, k, v, causal=True, rows=correctness.sample_rows(n_q, 12), **rules)
    assert result.hint.startswith(f"its causal mask hides each query's own key: query i saw {said}"), (
        result.describe()
    )
    shown = diagonal_off(q, k, v, by=1, mod=rules.get("mod"), **kw)
    result = correctness.gate(shown, q, k, v, causal=True, **rules)
    assert result.hint.startswith("its causal mask shows each query the next key too: "), result.describe()
    right = diagonal_off(q, k, v, by=0, mod=rules.get("mod"), **kw)
    assert correctness.gate(right, q, k, v, causal=True, **rules).passed
