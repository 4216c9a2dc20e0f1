"""The correctness gate: a variant's output (and gradients) against a float64 reference on the same inputs.

Semantics the reference fixes, and every variant is held to:
- scale defaults to 1/sqrt(d_k);
- grouped-query attention: k and v may have H_kv heads, H_kv dividing q's H; query head h uses k/v head
  h // (H / H_kv) (the reference repeats the k/v heads explicitly, in float64);
- causal: query i sees keys j <= t_i, with t_i = i (top-left, torch SDPA's is_causal, the default) or
  t_i = i + N_k - N_q (causal_align="lower-right": torch's causal_lower_right, FlashAttention >= 2.1);
- a sliding window W > 0 (with causal) additionally hides keys j <= t_i - W: W keys up to the diagonal;
- key padding: key j of batch b is visible when j < key_lengths[b];
- a score modification (mod: 'alibi', 'softcap:C'; variants.mods fixes its rules) applies to the scaled
  scores before any mask, and with ALiBi at the query's position t_i (lower-right: i + N_k - N_q);
- a query row that sees no key at all (key_lengths[b] == 0; with lower-right and N_q > N_k the first
  N_q - N_k rows; with a window, rows whose W keys all lie beyond N_k or the padding) has output 0, not
  NaN. Those rows are left out of the error and reported separately as `masked_rows`: what the variant
  actually returned there ("zeros", "nan" or "other"; "n/a" when the inputs have no such row).

A variant that rounds its inputs to a narrow format first (Capability.quant: a recipe of variants.quant, as
FP8's "e4m3fn:tensor") is judged on what its kernel computed from: rel_err and the tolerance against the
float64 reference of the inputs rounded by its recipe (the kernel's error), while the rounding's own error is
reported apart and never gated: quant_rel_err, the reference of the rounded inputs against the reference of
the original ones, and sqnr_db, the output against the original inputs' reference as a signal-to-noise
ratio, 10 log10(||ref||^2 / ||out - ref||^2) = -20 log10 of that end-to-end rel_err (results.formulas).
In a paged cell (block_table) the recipe rounds q as a tensor and the K/V pools as pools (variants.quant's
pool=True: one scale over a pool, or one per K/V head over it), as an FP8 KV cache holds them.

Error metric: rel_err = ||out - ref||_F / ||ref||_F over the compared rows (robust to the scale of the
output, unlike an elementwise relative error near zero), plus max_abs_err. A variant passes when
rel_err <= TOLERANCE[dtype] and every compared value is finite; a variant declared approximate
(Capability.approximate: random features, low rank, sparsity) passes within its declared bound where that is
larger, so that a remembered or stale answer still fails it. The tolerances are set from what
each precision can achieve on this computation, with headroom for accumulation order:
float32 arithmetic lands near 1e-7 (TF32 matmuls near 3e-4 would fail, on purpose); float16 keeps 11
significant bits (unit roundoff 4.9e-4); bfloat16 keeps 8 (unit roundoff 3.9e-3), and P is rounded
to it before P @ V in fused kernels. A mod keeps these: softcap only shrinks the scores (|C tanh(s/C)| <= |s|,
slope <= 1), and ALiBi's bias, rounded in the dtype, errs most at long distances, where it has already
pushed the weights towards zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial, wraps

import torch

from attnbench.harness.measure import attention64, contract, located, lowered, misread, own_gradient
from attnbench.harness.measure.attention64 import context, empty_rows, reference, visible
from attnbench.harness.measure.contract import changed_inputs, check_graph, check_output
from attnbench.harness.measure.own_gradient import leaf_grads
from attnbench.results.causes import READS_BNHD
from attnbench.results.formulas import GRAD_TOLERANCE_FACTOR, TOLERANCE, sqnr_db, tolerance_text  # shared
from attnbench.variants.mods import NONE
from attnbench.variants.problem import extra_options
from attnbench.variants.quant import dequantise


@dataclass(frozen=True)
class GateResult:
    """How far a variant's output is from the float64 reference, and whether that passes."""

    max_abs_err: float
    rel_err: float
    tolerance: float
    passed: bool
    masked_rows: str  # what the variant returned in rows that see no key: zeros / nan / other / n/a
    rows_checked: int
    grad_rel_err: float | None = None  # max over dq, dk, dv; None when gradients were not checked
    grad_passed: bool | None = None
    # where a failing answer errs: a pack's or a paged cache's worst sequence ("worst: sequence 3 of 8 ..."),
    # or the query rows of a non-finite answer ("at query row 0 only")
    where: str = ""
    hint: str = ""  # a failing gate's likely cause, when one is recognised (likely_cause)
    # a quantising variant's recipe (Capability.quant; "" for the others): rel_err is then against the rounded
    # inputs' reference, quant_rel_err that reference against the original inputs', sqnr_db the output's
    quant: str = ""
    quant_rel_err: float | None = None
    sqnr_db: float | None = None
    approximate: float = 0.0  # a declared approximation's bound (Capability.approximate): the tolerance here
    grad_tolerance: float | None = None  # what grad_rel_err was held to (None: gradients not checked)
    grad_against: str = ""  # an approximation's: own_gradient.OWN or EXACT ("": float64 attention's)
    # the inputs (outcomes.INPUT_NAMES) the variant modified in place (check): wrong whatever its answer
    changed: tuple[str, ...] = ()
    # what a pass does not say, noted by `attnbench check` (contract.strided, contract.calls_differ): the
    # output's strides where it is not contiguous in the variant's layout; how far two calls on the same
    # inputs differ (0.0: alike; None: not compared)
    strides: str = ""
    calls_differ: float | None = None

    @property
    def ok(self) -> bool:
        return self.passed and self.grad_passed is not False and not self.changed

    def describe(self) -> str:
        if math.isinf(self.rel_err):
            return "; ".join(filter(None, [self.hint, "non-finite output (NaN or inf)", self.where]))
        bound = f"tol {tolerance_text(self.tolerance)}" + (", declared approximate" * bool(self.approximate))
        text = f"rel_err {self.rel_err:.2e} ({bound}), max_abs_err {self.max_abs_err:.2e}"
        if self.quant:
            rounding = f"rounding alone: rel_err {self.quant_rel_err:.2e}"
            text += f" against the {self.quant}-rounded inputs ({rounding})"
        if self.grad_rel_err is not None:
            text += f", grad rel_err {self.grad_rel_err:.2e}"
        text = f"{text}; {self.where}" if self.where else text
        return f"{self.hint}; {text}" if self.hint else text  # the cause first: a line cut short keeps it


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max_abs_err, rel_err); both inf when out has a non-finite value."""
    out64 = out.detach().to(torch.float64)
    if not bool(torch.isfinite(out64).all()):
        return math.inf, math.inf
    diff = out64 - ref
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    denom = float(torch.linalg.vector_norm(ref))
    rel = float(torch.linalg.vector_norm(diff)) / denom if denom > 0 else max_abs
    return max_abs, rel


def _masked_behaviour(out: torch.Tensor, empty: torch.Tensor | None, rows) -> str:
    if empty is None:
        return "n/a"
    sel = empty if rows is None else empty[:, :, rows.to(empty.device)]
    sel = sel.expand(out.shape[0], out.shape[1], -1, out.shape[3])
    if not bool(sel.any()):
        return "n/a"
    got = out if rows is None else out[:, :, rows.to(out.device)]  # the sampled rows, as sel is
    vals = got.detach()[sel.to(got.device)]
    if bool(torch.isnan(vals).any()):
        return "nan"
    return "zeros" if bool((vals == 0).all()) else "other"


def sample_rows(n_q: int, max_rows: int | None, *, seed: int = 0, cu_seqlens=None) -> torch.Tensor | None:
    """None (all rows) when n_q <= max_rows, else a fixed random sample that keeps the first and last rows;
    in a packed batch (cu_seqlens) the first and last rows of every sequence."""
    if max_rows is None or n_q <= max_rows:
        return None
    ends = [0, n_q - 1]
    if cu_seqlens is not None:
        cu = cu_seqlens.cpu().tolist()
        ends = sorted({r for a, b in zip(cu, cu[1:], strict=False) if b > a for r in (a, b - 1)})
    g = torch.Generator().manual_seed(seed)
    kept = torch.ones(n_q, dtype=torch.bool)
    kept[ends] = False
    middle = torch.nonzero(kept).flatten()
    middle = middle[torch.randperm(len(middle), generator=g)[: max(0, max_rows - len(ends))]]
    return torch.cat([torch.tensor(ends), middle]).sort().values


def _small_on_one_thread(fn):
    """gate(out, q, k, v, ...) on one thread where its problem is small (attention64.one_thread_below): it
    reads an answer already computed and calls no variant."""

    @wraps(fn)
    def on_threads(out, q, k, v, *args, **kwargs):
        small = attention64.scores(q, k, kwargs.get("block_table"))
        with attention64.one_thread_below(q.device, small):
            return fn(out, q, k, v, *args, **kwargs)

    return on_threads


@_small_on_one_thread
def gate(
    out: torch.Tensor,
    q,
    k,
    v,
    *,
    causal=False,
    key_lengths=None,
    scale=None,
    rows: torch.Tensor | None = None,
    ref: torch.Tensor | None = None,
    causal_align: str = "top-left",
    window: int = 0,
    mod: str = NONE,
    cu_seqlens=None,
    block_table=None,
    quant: str = "",
    approximate: float = 0.0,
) -> GateResult:
    """Compare an output already computed by a variant with the float64 reference (forward only).

    ref: the reference of the original inputs on these rows, when the caller already has it. quant: the
    variant's recipe (Capability.quant): the kernel is then judged against the reference of the inputs it
    rounded, and the rounding's error is reported apart (see the module docstring). approximate: a
    declared approximation's bound (Capability.approximate), the tolerance where it is larger than the
    dtype's. In a packed batch
    (cu_seqlens) or a paged cache (block_table) a failing gate names the sequence that errs most
    (GateResult.where).
    """
    dtype = str(q.dtype).removeprefix("torch.")
    tol = max(TOLERANCE.get(dtype, TOLERANCE["float32"]), approximate)
    rules = dict(causal=causal, causal_align=causal_align, window=window)
    rules.update(cu_seqlens=cu_seqlens, block_table=block_table)
    if ref is None:
        ref = reference(q, k, v, key_lengths=key_lengths, scale=scale, rows=rows, mod=mod, **rules)
    refs = [ref]  # the kernel's reference first: the original inputs', or the rounded inputs' then theirs
    if quant:
        rounded = rounded_inputs(q, k, v, quant, paged=block_table is not None)
        refs.insert(0, reference(*rounded, key_lengths=key_lengths, scale=scale, rows=rows, mod=mod, **rules))
    sampled = got = out if rows is None else out[:, :, rows.to(out.device)]  # sampled: before rows leave
    whole = refs[0]  # the kernel's reference on the rows checked, (B, H, R, d), before rows leave
    empty = empty_rows(q.shape[2], key_lengths, n_k=k.shape[2], **rules)
    hidden = None if empty is None else empty if rows is None else empty[:, :, rows.to(empty.device)]
    masked = _masked_behaviour(out, empty, rows)
    if empty is not None:
        keep = (~hidden).expand(got.shape[0], got.shape[1], -1, got.shape[3]).to(got.device)
        got, refs = got[keep], [r[keep.to(r.device)] for r in refs]
    max_abs, rel = _errors(got, refs[0])
    # a pack's or a paged cache's sequences each against their own reference: one sequence wrong among long
    # right ones fails, and a failure names its worst
    seqs = located.sequences(sampled, whole, rows, cu_seqlens, hidden) if cu_seqlens is not None else []
    seqs = located.contexts(sampled, whole, key_lengths) if block_table is not None else seqs
    worst = located.worst(seqs)
    rel = max(rel, worst.rel_err) if worst else rel
    # rows left unwritten fail however little they weigh (an approximation may leave a row without keys)
    bad = located.unwritten(sampled, whole, hidden) if not approximate else torch.zeros(0, dtype=torch.bool)
    failed = not rel <= tol or bool(bad.any())
    where = hint = ""
    if not quant and failed:  # a rounding recipe's answer is judged on other inputs: no reading
        hint = _cause(sampled, q, k, v, (tol, rel, approximate), whole, hidden, scale=scale, rows=rows,
                      key_lengths=key_lengths, mod=mod, **rules)  # fmt: skip
    if worst and failed:
        where = f"worst: {worst.describe()}"
    elif failed:  # the rows that err where no known mistake explains them
        where = located.nonfinite_rows(sampled, rows)
        if not where and not hint:
            where = located.wrong_rows(sampled, whole, rows, tol, empty)
    hint = hint or located.unwritten_text(bad, rows, cu_seqlens)
    return GateResult(
        max_abs_err=max_abs,
        rel_err=rel,
        tolerance=tol,
        passed=not failed,
        masked_rows=masked,
        rows_checked=int(q.shape[2]) if rows is None else len(rows),  # the sample, empty rows among them
        where=where,
        hint=hint,
        approximate=approximate,
        **(_rounding(got, *refs, quant) if quant else {}),
    )


def rounded_inputs(q, k, v, quant: str, paged: bool = False) -> tuple[torch.Tensor, ...]:
    """q, k, v rounded by a variant's recipe and read back in float32: what it computed on. A paged cache's k
    and v pools (paged) rounded as pools (one scale over a pool, or one per K/V head over it:
    variants.quant), as an FP8 KV cache holds them."""
    return dequantise(q, quant), *(dequantise(t, quant, pool=paged) for t in (k, v))


def _cause(got, q, k, v, judged: tuple, whole, hidden, **rules) -> str:
    """likely_cause of a failing answer (judged: its tolerance, rel_err and declared approximation); where
    it finds none, a lower precision's (lowered.hint): an error about its rounding, or a known mistake to
    within its tolerance (not for a declared approximation, which errs by design)."""
    tol, rel, approximate = judged
    cause = partial(likely_cause, got, q, k, v, **rules)
    said = cause(tol=tol)
    if said or approximate:
        return said
    return lowered.hint(str(q.dtype).removeprefix("torch."), rel, cause, reference, whole, hidden)


HINT_ROWS = 32  # the query rows (first and last among them) each reading of a failing answer is checked on


def likely_cause(
    got: torch.Tensor, q, k, v, *, tol: float, scale=None, rows=None, causal=False, key_lengths=None,
    causal_align: str = "top-left", window: int = 0, mod: str = NONE, cu_seqlens=None, block_table=None,
) -> str:  # fmt: skip
    """Why a failing answer failed, when it is exactly attention under a common mistake: the inputs read as
    (B, N, H, d) (flash-attn's and xformers' layout), the k/v heads tiled, a mask, window, score mod or
    packed batch's boundaries ignored, the causal mask aligned the other way, the window or the key padding
    mask one key wider, a paged cache read past its lengths (to each last page's end, or one slot past each
    context, its queries one on) or short of them (to each last full page, its queries there), or around its
    page table (in pool order, or each sequence's pages sorted or contiguous from its first), the scale left
    out or ignored; then misread's: the causal diagonal hidden or the next key shown, the softmax taken over
    the queries, a mask inverted, a bool mask added to the scores, an additive one subtracted, a causal mask
    reversed, a paged cache's last, partial pages left out or read one slot past each context.
    got: the variant's output on `rows` (every row when None), before any row is left out. The first reading
    that explains it gives the sentence, else "". The rules are the cell's, as the gate has them."""
    rules = dict(causal=causal, key_lengths=key_lengths, scale=scale, causal_align=causal_align, mod=mod)
    rules.update(window=window, cu_seqlens=cu_seqlens, block_table=block_table)
    ids = torch.arange(q.shape[2]) if rows is None else rows.cpu()
    if len(ids) > HINT_ROWS:  # a reading that explains the answer explains it on any rows: fewer references
        pick = torch.linspace(0, len(ids) - 1, HINT_ROWS).round().long().unique()
        got, rows = got[:, :, pick.to(got.device)], ids[pick]
    for text, (q2, k2, v2), changed, back in _readings(q, k, v, **rules):
        alt_rules = {**rules, **changed}
        if back is None:
            alt = reference(q2, k2, v2, rows=rows, **alt_rules)
        else:  # another layout: its rows are not q's; every row, then the sampled ones
            alt = back(reference(q2, k2, v2, **alt_rules))
            alt = alt if rows is None else alt[:, :, rows.to(alt.device)]
        masks = {a: alt_rules[a] for a in ("causal", "causal_align", "window", "cu_seqlens", "block_table")}
        empty = empty_rows(q.shape[2], alt_rules["key_lengths"], n_k=k2.shape[2], **masks)
        if _explains(got, alt, empty, rows, tol):
            return text
    rows = ids if rows is None else rows  # every row, fewer than HINT_ROWS
    masks = {a: rules[a] for a in ("causal", "causal_align", "window", "cu_seqlens")}
    seen = visible(rows, q.shape[2], k.shape[2], key_lengths=key_lengths, **masks)
    for text, alt, empty in misread.readings(q, k, v, rows=rows, seen=seen, **rules):
        if _explains(got, alt, empty, None, tol):
            return text
    return ""


def _readings(q, k, v, **rules):
    """(sentence, the inputs as the mistake reads them, the rules it changes, its output back to (B, H, N,
    d), or None when it is) for each mistake that can happen in this cell."""
    if rules["block_table"] is not None:
        yield from _paged_readings(q, k, v, **rules)
    else:
        yield from _layout_readings(q, k, v, **rules)
        yield from _mask_readings(q, k, v, **rules)
    if rules["mod"] != NONE:
        yield f"it ignored the score mod {rules['mod']}", (q, k, v), {"mod": NONE}, None
    if rules["scale"] is None:
        said = "it left out the scale: softmax(q kᵀ), not softmax(q kᵀ / sqrt(d_k))"
        yield said, (q, k, v), {"scale": 1.0}, None
    else:
        yield f"it ignored scale={rules['scale']:g} and used 1/sqrt(d_k)", (q, k, v), {"scale": None}, None


def _layout_readings(q, k, v, *, causal, key_lengths, window, cu_seqlens, **_):
    """The inputs read in another layout: (B, N, H, d), or the k/v heads tiled."""
    plain = not (causal or window) and key_lengths is None and cu_seqlens is None
    if plain and q.shape[2] == k.shape[2] and q.shape[1] == k.shape[1]:
        bnhd = tuple(t.transpose(1, 2) for t in (q, k, v))
        said = f'{READS_BNHD}: declare takes="bnhd"'  # its other failures point here (results.causes)
        yield said, bnhd, {}, (lambda t: t.transpose(1, 2))
    yield from _tiled_heads(q, k, v, dim=1)


def _tiled_heads(q, k, v, *, dim: int):
    """The k/v heads (k's and v's dimension dim) tiled: query head h reads k/v head h % H_kv where it reads
    h // (H / H_kv)."""
    group = q.shape[1] // k.shape[dim]
    if group > 1:
        times = [group if i == dim else 1 for i in range(k.dim())]
        tiled = (k.repeat(*times), v.repeat(*times))
        said = "it tiled the k/v heads (repeat) where query head h reads k/v head h // (H / H_kv)"
        yield said + " (repeat_interleave)", (q, *tiled), {}, None


def _mask_readings(q, k, v, *, causal, key_lengths, causal_align, window, cu_seqlens, **_):
    """A mask, window or packed batch's boundaries ignored, a causal mask aligned the other way, or a window
    or padding one key wider (a causal diagonal one off: misread's)."""
    same, n_q, n_k = (q, k, v), q.shape[2], k.shape[2]
    if cu_seqlens is not None:
        said = "it ignored the packed batch's boundaries (cu_seqlens): queries saw other sequences' keys"
        yield said, same, {"cu_seqlens": None}, None
    if window:
        yield f"it ignored window={window}: each query saw every key up to its own", same, {"window": 0}, None
        said = f"its window holds {window + 1} keys, its own and {window} before it, where window={window}"
        yield said + " counts its own key among them", same, {"window": window + 1}, None
    if causal:
        said = "it ignored causal=True: its answer is attention over every key"
        yield said, same, {"causal": False, "window": 0}, None
        other = "lower-right" if causal_align == "top-left" else "top-left"
        if n_q != n_k:
            said = f"its causal mask is aligned {other} where the cell asks {causal_align}"
            if other == "lower-right":  # FlashAttention's causal: its declaration (variants.adapt)
                said += ' (if its causal=True is always lower-right, declare causal="lower-right")'
            yield said, same, {"causal_align": other}, None
    if key_lengths is not None:
        yield "it ignored key_lengths=: the padded keys took part", same, {"key_lengths": None}, None
        if not torch.equal(wider := torch.clamp(key_lengths + 1, max=n_k), key_lengths):  # `j > key_lengths`
            said = "its key padding mask shows one key past each length: key j is seen where j <= "
            yield said + "key_lengths[b], not j < key_lengths[b]", same, {"key_lengths": wider}, None


def _paged_readings(q, k, v, *, key_lengths, block_table, causal, **_):
    """A paged cache (k, v: pools of pages, (P, page, H_kv, d)) read past each context's length (to its last
    page's end, or one slot past it) or short of it (to its last full page, a context shorter than its
    queries read whole), in pool order or in its pages' own order instead of through its page table, with
    its k/v heads tiled, or without the causal mask among its query tokens."""
    same, page = (q, k, v), k.shape[1]
    full = -(-key_lengths // page) * page
    if bool((full != key_lengths).any()):
        said = "it read every slot of each sequence's last page: the context lengths (key_lengths=) ignored"
        yield said, same, {"key_lengths": full}, None
    past = torch.minimum(key_lengths + 1, full)  # `j <= L`: one slot more, where the last page has it
    if causal and q.shape[2] > 1 and not torch.equal(past, full):  # its queries one on: misread's stay
        said = "it read one slot past each context in its last, partial page: L + 1 keys where L is meant (j "
        said += "<= L, not j < L), as if each context were one key longer"
        yield said, same, {"key_lengths": past}, None
    if causal and q.shape[2] > 1:  # misread's left-out last page with its queries moved to the last full one
        floor = key_lengths // page * page
        ended = torch.where(floor >= q.shape[2], floor, key_lengths)  # one shorter than its queries: whole
        if not torch.equal(ended, key_lengths):
            said = "it read only the full pages of each sequence: the last, partial page left out (floor(L / "
            said += "page_size) pages where ceil is meant), as if each context ended at its last full page"
            yield said, same, {"key_lengths": ended}, None
    for said, table in _pool_orders(full // page, block_table, pool=k.shape[0]):
        yield said, same, {"block_table": table}, None
    yield from _tiled_heads(q, k, v, dim=2)  # a pool's heads: (P, page, H_kv, d)
    if causal and q.shape[2] > 1:
        yield "it ignored causal=True among the query tokens", same, {"causal": False}, None
    if causal:  # query i saw its context's keys 0..i: each context gathered, masked top-left
        gathered = tuple(_gathered(t, key_lengths, block_table) for t in (k, v))
        said = "its causal mask is aligned top-left where the cell asks lower-right"
        said += " (its queries end the context)"
        yield said, (q, *gathered), {"block_table": None, "causal_align": "top-left"}, None


def _pool_orders(pages: torch.Tensor, block_table: torch.Tensor, *, pool: int):
    """(sentence, page table) for each common way of reading a paged cache around its page table, where it
    differs from block_table: in pool order, block_table ignored and staying in the pool of `pool` pages
    (each sequence's pages following the previous one's, each from pool page 0, or each from page b x the
    table's width: the pool read as a (B, max_pages) grid); or block_table's order ignored, each sequence's
    own pages read in ascending pool order (its row sorted), or its pages taken as contiguous from its first
    (block_table[b, 0] + 0..n-1, a page past the pool's end read as its last, as a clamped index reads it).
    pages: (B,) each sequence's pages."""
    n, width = pages.tolist(), block_table.shape[1]
    after = torch.tensor([0, *n]).cumsum(0).tolist()
    starts = {
        "each sequence's pages one after another in the pool": after[:-1],
        "every sequence's pages from pool page 0 (pages 0..n-1 for each)": [0] * len(n),
        f"sequence b's pages from pool page b x {width} (the pool as {width} pages a sequence)": [
            b * width for b in range(len(n))
        ],
    }
    tried = [block_table]  # a layout that is the table, or an earlier layout (one sequence), is not tried
    for order, first in starts.items():
        table = torch.zeros_like(block_table)
        for b, (start, count) in enumerate(zip(first, n, strict=True)):
            table[b, :count] = torch.arange(start, start + count)
        inside = max(s + c for s, c in zip(first, n, strict=True)) <= pool
        if inside and not any(torch.equal(table, t) for t in tried):
            tried.append(table)
            yield f"it read {order}, not through block_table", table
    ordered, onward = block_table.clone(), block_table.clone()
    for b, count in enumerate(n):
        ordered[b, :count] = block_table[b, :count].sort().values
        onward[b, :count] = block_table[b, 0] + torch.arange(count, device=onward.device)
    onward.clamp_(max=pool - 1)  # a page past the pool read as its last, as a clamped index reads it
    for table, said in (
        (ordered, "each sequence's own pages in ascending pool order (its row of block_table sorted)"),
        (onward, "each sequence's pages as contiguous from its first (block_table[b, 0] + 0..n-1)"),
    ):  # fmt: skip
        if not any(torch.equal(table, t) for t in tried):
            tried.append(table)
            yield f"it read {said}, not in block_table's order", table


def _gathered(pool: torch.Tensor, key_lengths, block_table) -> torch.Tensor:
    """Each sequence's keys (or values) of a pool of pages (P, page, H_kv, d), read in table order up to its
    context length and zero-padded to the longest: (B, H_kv, max L, d), with key_lengths its mask."""
    out = pool.new_zeros(len(key_lengths), pool.shape[2], int(key_lengths.max()), pool.shape[3])
    for b, length in enumerate(key_lengths.tolist()):
        out[b, :, :length] = context(pool, block_table, b, length)
    return out


def _explains(got: torch.Tensor, alt: torch.Tensor, empty, rows, tol: float) -> bool:
    """Whether a reading's reference `alt` explains the answer: equal within tol on every row the reading
    gives a key, and no non-finite value elsewhere (a row it leaves without keys may hold anything)."""
    seen = torch.ones(got.shape[:3] + (1,), dtype=torch.bool)
    if empty is not None:
        seen = ~(empty if rows is None else empty[:, :, rows.cpu()]).expand(got.shape[0], got.shape[1], -1, 1)
    seen = seen.to(got.device)
    finite = torch.isfinite(got).all(-1, keepdim=True)
    if bool((seen & ~finite).any()) or not bool(seen.any()):
        return False
    pick = seen.expand_as(got)
    return _errors(got[pick], alt[pick.to(alt.device)])[1] <= tol


def _rounding(got: torch.Tensor, rounded_ref: torch.Tensor, ref: torch.Tensor, quant: str) -> dict:
    """A quantising variant's GateResult fields: its recipe, the rounded inputs' reference against the
    original inputs' (quant_rel_err), and the output against the original inputs' as SQNR in dB."""
    return {
        "quant": quant,
        "quant_rel_err": _errors(rounded_ref, ref)[1],
        "sqnr_db": sqnr_db(_errors(got, ref)[1]),
    }


def grad_errors(
    variant, q, k, v, *, causal=False, key_lengths=None, scale=None, seed: int = 0,
    causal_align: str = "top-left", window: int = 0, mod: str = NONE, cu_seqlens=None, block_table=None,
    outputs: list | None = None,
) -> float:  # fmt: skip
    """Max over (dq, dk, dv) of rel_err against float64 autograd of the reference, for a random dO, with
    each one's (own_gradient.Gradients). outputs: a list the forward's output is added to (a copy), where the
    caller compares it with another call's (check's repeat).

    Both sides get their gradients as a training loop does, out.backward(dO) into fresh leaves' .grad
    (`_backward`), not torch.autograd.grad: reentrant activation checkpointing
    (torch.utils.checkpoint with use_reentrant=True) refuses .grad(), and a gate must accept every
    implementation autograd accepts."""
    if block_table is not None:
        raise ValueError("a paged decode step has no backward to check (forward only)")
    g = torch.Generator(device="cpu").manual_seed(seed)
    small = attention64.scores(q, k)
    with attention64.one_thread_below(q.device, small):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]  # clone keeps the layout
    extra = extra_options(causal_align=causal_align, window=window, mod=mod, cu_seqlens=cu_seqlens)
    out = check_output(variant(*leaves, causal=causal, key_lengths=key_lengths, scale=scale, **extra), q, v)
    check_graph(out)
    if outputs is not None:
        outputs.append(out.detach().clone())
    d_out = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.device)
    grads = leaf_grads(out, leaves, d_out.to(out.dtype))
    with attention64.one_thread_below(q.device, small):  # the reference's forward and backward
        ref_leaves = [t.detach().to(torch.float64).requires_grad_(True) for t in (q, k, v)]
        ref = attention64.differentiable(
            *ref_leaves, causal=causal, key_lengths=key_lengths, scale=scale, causal_align=causal_align,
            window=window, mod=mod, cu_seqlens=cu_seqlens,
        )  # fmt: skip
        ref_grads = leaf_grads(ref, ref_leaves, d_out)
        errs = [_errors(gv, gr)[1] for gv, gr in zip(grads, ref_grads, strict=True)]
    return own_gradient.Gradients(dict(zip(("dq", "dk", "dv"), errs, strict=True)))  # a float: the worst


def judged_by(cap) -> dict:
    """The gate's keywords a variant's capability sets, which its every gate reads: its quantisation recipe
    (Capability.quant: "" for none) and its declared approximation (Capability.approximate: 0 for an exact
    kernel); neither for a plain callable (cap None)."""
    return {"quant": getattr(cap, "quant", ""), "approximate": getattr(cap, "approximate", 0.0)}


def check(
    variant,
    q,
    k,
    v,
    *,
    causal=False,
    key_lengths=None,
    scale=None,
    backward=False,
    max_rows: int | None = None,
    causal_align: str = "top-left",
    window: int = 0,
    mod: str = NONE,
    cu_seqlens=None,
    block_table=None,
    ref=None,
    repeat: bool = False,
) -> GateResult:
    """Run `variant` on (q, k, v) and gate it; with backward=True also gate dq, dk, dv. causal_align,
    window, mod, cu_seqlens and block_table reach the variant only when not at their default
    (variants.extra_options); a registered Variant that quantises is gated by its recipe (gate's quant), one
    declared approximate at its bound. ref: the float64 reference of these inputs on every query row
    (`reference`), where the caller gates several variants on the same inputs. repeat: also compare two
    calls on the same inputs (GateResult.calls_differ, `again`)."""
    rules = dict(causal=causal, key_lengths=key_lengths, scale=scale)
    axes = dict(
        causal_align=causal_align, window=window, mod=mod, cu_seqlens=cu_seqlens, block_table=block_table
    )
    cap = getattr(variant, "cap", None)
    small = attention64.scores(q, k, block_table)
    with attention64.one_thread_below(q.device, small):  # the harness's copies, not the variant's call
        pristine = [t.clone() for t in (q, k, v)]  # the gate reads these, not what the variant left in them
    call = partial(variant, q, k, v, **rules, **extra_options(**axes))
    with torch.no_grad():
        out = check_output(call(), q, v)
    first = out.detach().clone() if repeat else None  # before a later call can write over a buffer it reuses
    rows = sample_rows(q.shape[2], max_rows, cu_seqlens=cu_seqlens)
    if ref is not None and rows is not None:
        ref = ref[:, :, rows.to(ref.device)]
    result = gate(out, *pristine, rows=rows, ref=ref, **judged_by(cap), **rules, **axes)
    strides = contract.strided(out, getattr(cap, "layout", "bhnd"))  # said, never refused
    result = GateResult(**{**result.__dict__, "strides": strides})
    with attention64.one_thread_below(q.device, small):
        changed = changed_inputs((q, k, v), pristine)
    if changed:  # wrong already, as a run's cell is (outcomes.mutation); autograd would refuse its write
        return GateResult(**{**result.__dict__, "changed": changed})
    seen = [] if repeat else None  # the gradient check's forward: a second call already made
    if backward:
        judged = judged_gradients(
            variant, q, k, v, gate=result, dtypes=getattr(cap, "dtypes", ()), outputs=seen, **rules, **axes
        )
        grad = {"grad_rel_err": judged.rel_err, "grad_passed": judged.passed, "grad_against": judged.against}
        result = GateResult(**{**result.__dict__, **grad, "grad_tolerance": judged.tolerance})
    if repeat:
        result = GateResult(**{**result.__dict__, "calls_differ": again(first, seen, call, q, v)})
    return result


def again(first: torch.Tensor, seen: list, call, q, v) -> float | None:
    """How far a second call on the same inputs lands from `first` (contract.calls_differ). The gradient
    check's forward (`seen`, where it ran) is that call, and costs nothing more where it agrees; where it
    disagrees, or there was none, one more call under no_grad decides, so that a kernel whose forward takes
    another path when its inputs need grad is not taken for one that varies. None where that call raises."""
    if seen and contract.calls_differ(first, seen[0]) == 0.0:
        return 0.0
    try:
        with torch.no_grad():
            return contract.calls_differ(first, check_output(call(), q, v))
    except Exception:  # the first call's answer is gated; a second that fails decides nothing here
        return None


def judged_gradients(
    variant, q, k, v, *, gate: GateResult, dtypes: tuple[str, ...], outputs: list | None = None, **opts
) -> own_gradient.Judged:
    """The gradient check of the variant `gate` judged: against float64 attention's gradients, by
    GRAD_TOLERANCE_FACTOR x the gate's tolerance; for a kernel declared approximate, against its own
    forward's derivative where that resolves (own_gradient.judge). opts: the calling convention's keywords
    and the added axes, as grad_errors takes them; outputs: grad_errors'."""
    exact = lambda: grad_errors(variant, q, k, v, outputs=outputs, **opts)  # noqa: E731
    if not gate.approximate:
        return own_gradient.Judged(exact(), gate.tolerance * GRAD_TOLERANCE_FACTOR, "")
    return own_gradient.judge(variant, q, k, v, tolerance=gate.tolerance, dtypes=dtypes, exact=exact, **opts)
