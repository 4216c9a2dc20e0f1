"""The formulas every layer shares, in one place: statistics of raw timing samples,
FLOPs and TFLOP/s, the correctness gate's tolerances, and how bytes, dtypes and messages are written for
people (and how wide a line may be).

The harness computes result rows with them, the pytest-benchmark importer rebuilds rows with them, and
reports read what they produced; nothing else derives these numbers.
"""

from __future__ import annotations

import bisect
import math
import numbers
import os
import shlex
import statistics
import sys
import textwrap
import unicodedata
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from .schema import NOISY_REL_IQR

SHORT_DTYPE = MappingProxyType({"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"})


def where_key(host: str | None, device: str, gpu_uuid: str | None = None) -> str:
    """Which device of which machine measured a row: 'host:cpu', or 'host:cuda:GPU-uuid' on CUDA.

    Rows (their host, device and gpu_uuid columns) and the per-device calibrations of a run (meta.json
    `devices`, keyed by this) meet on it, so that cells measured on different GPUs or hosts are never
    averaged together and each is priced against its own device's calibration."""
    if device == "cuda":
        return f"{host or '?'}:cuda:{gpu_uuid or '?'}"
    return f"{host or '?'}:{device}"


# ---- timing statistics ----------------------------------------------------------------------------


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(p25, median, p75) with linear interpolation between order statistics (numpy's default method)."""
    if not samples:
        return math.nan, math.nan, math.nan
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    p25, median, p75 = statistics.quantiles(samples, n=4, method="inclusive")
    return p25, median, p75


def rel_iqr(p25: float, median: float, p75: float) -> float:
    """IQR / median: the spread the `noisy` flag and the adaptive sampling stop look at."""
    return (p75 - p25) / median if median > 0 else math.inf


NOISY_NOTE = "noisy: IQR/median"  # how an ok row's message says its spread is over NOISY_REL_IQR


def noisy_note(spread: float) -> str:
    """An ok row's message for its spread (IQR/median over every sample it keeps): 'noisy: IQR/median 34%'
    where it is flagged noisy, else ''."""
    return f"{NOISY_NOTE} {iqr_percent(spread)}" if spread > NOISY_REL_IQR else ""


def iqr_percent(spread: float) -> str:
    """A spread (IQR/median) in percent, as the noisy rule (NOISY_REL_IQR) reads it: whole percent ('34%'),
    or with the decimals, up to two, that keep it off the rule's 10% where it is not exactly that ('10.7%' of
    a noisy cell, '9.6%' of a quiet one), so that a cell flagged noisy never reads 'IQR 10%' (trial U: the
    README's '±5% noisy' was half an IQR of 10.7% beside the rule's word)."""
    pct, limit = spread * 100, NOISY_REL_IQR * 100
    decimals = 0
    while decimals < 2 and pct != limit and round(pct, decimals) == limit:
        decimals += 1
    return f"{pct:.{decimals}f}%"


def summarize(samples_ms: Sequence[float]) -> dict[str, float | int | bool]:
    """The timing columns of a result row, derived from its raw per-call samples (ms)."""
    p25, median, p75 = quartiles(samples_ms)
    spread = rel_iqr(p25, median, p75)
    return {
        "time_ms_median": median,
        "time_ms_p25": p25,
        "time_ms_p75": p75,
        "rel_iqr": spread,
        "noisy": spread > NOISY_REL_IQR,
        "n_samples": len(samples_ms),
    }


# ---- FLOPs ----------------------------------------------------------------------------------------
# Counted from the (query, key) pairs a call actually attends, exactly: every pair costs one d_k dot product
# (Q K^T) and one d_v multiply-add row (P V), 2*(d_k + d_v) FLOPs, as in FlashAttention's benchmarks
# (Dao-AILab/flash-attention, benchmarks/benchmark_flash_attention.py) and triton's fused-attention tutorial:
#   dense    pairs = N_q * N_k                          (forward = 4*B*H*N^2*d when d_k = d_v = d)
#   causal   query i sees keys j <= t_i, t_i = i (top-left) or i + N_k - N_q (lower-right, FlashAttention
#            >= 2.1 and torch's causal_lower_right): pairs = sum_i min(t_i + 1, N_k) clipped at 0
#            (N(N+1)/2 for N_q = N_k, not N^2/2)
#   window   W: additionally j > t_i - W (W keys up to and including the diagonal)
#   padding  batch element b sees its first L_b keys:    min(..., L_b) per query
#   grouped-query heads (H_kv < H) change nothing: each of the H query heads attends its pairs
#   backward = 2.5 x forward (five matmuls of the forward's size instead of two); fwd+bwd = 3.5 x forward
# Softmax, scaling, masking, dropout and score modifications are not counted: a dropout cell is credited with
# the same FLOPs as the cell without it (drawing the mask and scaling the kept weights are elementwise work,
# as softmax is), and so is an alibi or softcap cell (a bias add, a tanh: elementwise on the scores).
# Every variant is credited with the same work for a cell, so TFLOP/s compare like with like, and a kernel
# that skips masked work is not credited with work it skipped.

PASS_FACTOR = MappingProxyType({"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5})
CAUSAL_ALIGNS = ("top-left", "lower-right")


def _clamped_sum(u0: int, u1: int, hi: int) -> int:
    """sum of min(max(u, 0), hi) over the integers u0 <= u <= u1 (0 when the range is empty)."""
    if u1 < u0 or hi <= 0:
        return 0
    a, b = max(u0, 1), min(u1, hi - 1)  # the rising part, 0 < u < hi: an arithmetic series
    total = (a + b) * (b - a + 1) // 2 if b >= a else 0
    c = max(u0, hi)  # the flat part, u >= hi
    return total + (hi * (u1 - c + 1) if u1 >= c else 0)


def attended_pairs(
    seq_q: int,
    seq_k: int,
    *,
    causal: bool,
    key_length: int | None = None,
    causal_align: str = "top-left",
    window: int = 0,
) -> int:
    """(query, key) pairs one head of one batch element attends, exactly (see the rules above); L =
    key_length is the element's valid key count (None: all). O(1): no loop over queries."""
    if causal_align not in CAUSAL_ALIGNS:
        raise ValueError(f"unknown causal alignment {causal_align!r}; known: {', '.join(CAUSAL_ALIGNS)}")
    if window < 0 or (window and not causal):
        raise ValueError(f"a window must be 0 or a positive key count with causal masking, got {window!r}")
    limit = seq_k if key_length is None else max(0, min(seq_k, key_length))
    if not causal:
        return seq_q * limit
    off = seq_k - seq_q if causal_align == "lower-right" else 0
    # query i (t = i + off) sees keys 0 <= j < limit with j <= t, and j > t - W with a window:
    # clamp(t + 1, 0, limit) - clamp(t - W + 1, 0, limit), summed over t = off .. off + N_q - 1
    seen = _clamped_sum(off + 1, off + seq_q, limit)
    if window:
        seen -= _clamped_sum(off - window + 1, off + seq_q - window, limit)
    return seen


def attention_flops(
    batch: int,
    heads: int,
    seq_q: int,
    seq_k: int,
    d_k: int,
    d_v: int,
    *,
    causal: bool,
    pass_: str = "fwd",
    key_lengths: Sequence[int] | None = None,
    causal_align: str = "top-left",
    window: int = 0,
) -> int:
    """FLOPs of one call: 2 * (d_k + d_v) per attended pair of each of the `heads` query heads, times the
    pass factor (see above). The number of key/value heads does not enter."""
    if pass_ not in PASS_FACTOR:
        raise ValueError(f"unknown pass {pass_!r}; known: {', '.join(PASS_FACTOR)}")
    lengths = [None] * batch if key_lengths is None else list(key_lengths)
    if len(lengths) != batch:
        raise ValueError(f"key_lengths has {len(lengths)} entries for batch {batch}")
    pairs = sum(
        attended_pairs(seq_q, seq_k, causal=causal, key_length=n, causal_align=causal_align, window=window)
        for n in lengths
    )
    return int(2 * heads * pairs * (d_k + d_v) * PASS_FACTOR[pass_])


# ---- packed variable-length batches (useful and executed work) ------------------------------------------
# A packed batch (harness: --lengths) holds sequences of lengths L_b one after another; query i sees only
# keys of its own sequence. The useful pairs are those, per sequence (the `flops` column counts them, as
# for every cell). What a kernel executes depends on how it handles the pack (its capability's `varlen`):
#   padded    every sequence padded to the longest, every score of the B x max(L) x max(L) rectangle
#             computed: B * max(L)^2, causal or not (the causal and window masks reach the kernel as an
#             explicit mask beside the key-padding one, as sdpa_padded hands SDPA, and a kernel computes
#             every block of an explicit mask: torch's CPU flash kernel adds it block by block, CUDA's
#             memory-efficient kernel as a bias; only a causal flag lets a kernel skip blocks)
#   masked    one dense T x T score matrix under a block-diagonal mask: T^2, causal or not (a dense kernel,
#             naive's and stable_softmax's, computes every score before the mask hides it)
#   exact     each sequence alone: the useful pairs
#   tiles:N   whole N x N tiles of the T x T matrix that hold at least one visible pair (a block-sparse
#             kernel: FlexAttention's block mask)
#   rows:N    blocks of N query rows, each computing every key from its first row's sequence start to its
#             last row's sequence end (up to its last row with causal masking): a chunked loop over the pack
# exact credits a causal cell with pairs(L) = L(L+1)/2 per sequence, what a kernel that skips the masked
# blocks under a causal flag computes (FlashAttention's causal flag, varlen_attn's window_size; torch's CPU
# SDPA under is_causal, as sdpa_loop calls it, skips the key blocks past each query block's last row, so it
# computes that half to within its blocks; its windowed cells hand SDPA an explicit window mask and compute
# each sequence's whole L^2, more than exact counts), and tiles and rows count the blocks the kernel visits.
# executed / useful is the padding tax times what a kernel computes beyond it (padding_split): the padding tax
# (issue 39) is the padded shape's pairs over the real ones, of the same causality: B * max(L)^2 / sum L_i^2,
# B * pairs(max L) / sum pairs(L_i) for causal cells; padded's causal cells pay it and their explicit mask's
# hidden half besides (max(L)^2 / pairs(max L), about 2); masked, tiles, rows and exact pad nothing.


def packed_pairs(lengths: Sequence[int], *, causal: bool, window: int = 0) -> int:
    """The (query, key) pairs one head attends in a packed batch of `lengths`: each sequence alone."""
    return sum(attended_pairs(n, n, causal=causal, window=window) for n in lengths)


def padding_split(lengths: Sequence[int], *, work: str, causal: bool, window: int = 0) -> tuple[float, float]:
    """(the padding tax, the rest) of a kernel whose `varlen` is `work` on a packed batch of `lengths`, whose
    product is executed / useful pairs: a padded kernel's tax is B copies of the longest sequence's pairs over
    the real sequences' pairs, of the same causality and window, its rest what its explicit mask hides of the
    rectangle it computes (about 2 for causal cells, 1 without a mask); every other kernel pads nothing (tax
    1), its rest the whole pack's, tiles' or row blocks' pairs beyond the useful ones."""
    lengths = list(lengths)
    useful = packed_pairs(lengths, causal=causal, window=window)
    executed = executed_pairs(lengths, causal=causal, work=work, window=window)
    tax = 1.0
    if work.partition(":")[0] == "padded":
        tax = packed_pairs([max(lengths)] * len(lengths), causal=causal, window=window) / useful
    return tax, executed / useful / tax


def executed_pairs(lengths: Sequence[int], *, causal: bool, work: str, window: int = 0) -> int:
    """The pairs one head computes in a packed batch of `lengths` by a kernel whose `varlen` is `work`
    (see above)."""
    lengths = list(lengths)
    kind, _, size = work.partition(":")
    if kind == "exact":
        return packed_pairs(lengths, causal=causal, window=window)
    if kind == "padded":  # the whole rectangle: an explicit mask hides pairs, it never skips them
        return len(lengths) * max(lengths) ** 2
    if kind == "masked":  # every score of the dense T x T matrix, whatever the mask then hides
        return sum(lengths) ** 2
    if kind == "tiles" and size.isdigit() and int(size) > 0:
        return _tile_pairs(lengths, int(size), causal=causal, window=window)
    if kind == "rows" and size.isdigit() and int(size) > 0:
        return _row_block_pairs(lengths, int(size), causal=causal, window=window)
    raise ValueError(f"unknown varlen work {work!r}; known: padded, masked, exact, tiles:N, rows:N")


def executed_flops(
    lengths: Sequence[int],
    *,
    work: str,
    heads: int,
    d_k: int,
    d_v: int,
    causal: bool,
    window: int = 0,
    pass_: str = "fwd",
) -> int:
    """The FLOPs a kernel whose `varlen` is `work` executes for a packed batch of `lengths`: 2 * (d_k + d_v)
    per executed pair of each query head, times the pass factor. The harness stores it in a row and the
    loader counts it again from the row's own lengths (results.load)."""
    pairs = executed_pairs(lengths, causal=causal, work=work, window=window)
    return int(2 * heads * pairs * (d_k + d_v) * PASS_FACTOR[pass_])


def _row_block_pairs(lengths: list[int], block: int, *, causal: bool, window: int) -> int:
    """Pairs of blocks of `block` query rows, each over the keys its rows' sequences span."""
    bounds, total = [0], sum(lengths)
    for n in lengths:
        bounds.append(bounds[-1] + n)
    pairs = 0
    for a in range(0, total, block):
        a2 = min(a + block, total)
        start = bounds[bisect.bisect_right(bounds, a) - 1]
        end = bounds[bisect.bisect_right(bounds, a2 - 1)]
        if causal:
            end = min(end, a2)
        if window:
            start = max(start, a - window + 1)
        pairs += (a2 - a) * max(0, end - start)
    return pairs


def _tile_pairs(lengths: list[int], tile: int, *, causal: bool, window: int) -> int:
    """Pairs of the N x N tiles (clipped at T) of the T x T matrix that hold a visible pair: for each row of
    tiles, each sequence with rows there sees one interval of keys (from its start, or its rows' first less
    the window, to its end, or its rows' last under causal masking); the key tiles those intervals touch are
    the visible ones. Linear in tiles and sequences (a test checks it against the tile-by-tile count)."""
    bounds, total = [0], sum(lengths)
    for n in lengths:
        bounds.append(bounds[-1] + n)
    pairs, first = 0, 0  # first: the first sequence that may hold rows of this row of tiles
    for a in range(0, total, tile):
        a2 = min(a + tile, total)
        while bounds[first + 1] <= a:
            first += 1
        covered = []  # the key tiles [p, q] the row's sequences see, in order
        for s in range(first, len(lengths)):
            start, end = bounds[s], bounds[s + 1]
            if start >= a2:
                break
            r0, r1 = max(a, start), min(a2, end) - 1  # the sequence's rows in this row of tiles
            if r0 > r1:
                continue
            lo = max(start, r0 - window + 1) if window else start
            hi = min(end - 1, r1) if causal else end - 1
            if lo > hi:
                continue
            p, q = lo // tile, hi // tile
            if covered and p <= covered[-1][1] + 1:
                covered[-1][1] = max(covered[-1][1], q)
            else:
                covered.append([p, q])
        pairs += (a2 - a) * sum(min((q + 1) * tile, total) - p * tile for p, q in covered)
    return pairs


def flops_formula(*, causal: bool, padded: bool, causal_align: str = "top-left", window: int = 0) -> str:
    """Which pairs a row's `flops` counted (the `flops_formula` column): 'dense', 'causal pairs',
    'lower-right causal pairs of valid keys, window 512', ..."""
    text = {(False, False): "dense", (True, False): "causal pairs", (False, True): "valid keys",
            (True, True): "causal pairs of valid keys"}[(causal, padded)]  # fmt: skip
    if causal and causal_align == "lower-right":
        text = "lower-right " + text
    return f"{text}, window {window}" if window > 0 else text


# ---- the correctness gate's tolerances -----------------------------------------------------------

# The most rel_err against float64 (||out - ref||_F / ||ref||_F) a cell of each dtype may have and pass; why
# these values: harness/measure/correctness.py, which gates with them. Here so that reports read the same
# numbers (the speed-against-accuracy panel draws them) without importing the harness.
# read-only (as every table here): the gate of every cell reads it, and no variant may loosen it
TOLERANCE = MappingProxyType({"float64": 1e-10, "float32": 1e-4, "float16": 5e-3, "bfloat16": 2.5e-2})
GRAD_TOLERANCE_FACTOR = 4.0  # gradients go through two more matmuls and the softmax Jacobian

# The variant others are read against where none is named: the first of these that ran (the report's speed-up
# map) or that runs on the device (`check`'s low-precision error beside each pass). sdpa is what most code
# calls, so a row reads "faster, slower or less accurate than the default"; naive's own odd cells (a
# page-faulting N) made every other row dip over it
DEFAULT_BASELINES = ("sdpa", "naive")


def tolerance(dtype: str) -> float:
    """The gate's rel_err tolerance for a dtype's name ('float16'); float32's for a dtype it does not know."""
    return TOLERANCE.get(str(dtype).removeprefix("torch."), TOLERANCE["float32"])


def tolerance_text(tol: float) -> str:
    """A tolerance as a message prints it, exactly and in the fewest digits: '1e-04', '2.5e-02' (never
    bfloat16's 2.5e-02 rounded to '3e-02')."""
    return next((t for t in (f"{tol:.{p}e}" for p in range(16)) if float(t) == tol), f"{tol!r}")


# A quantising variant (FP8) is gated against the reference of its rounded inputs; how far its answer is from
# the original inputs' reference, end to end, is kept as a signal-to-quantisation-noise ratio: the reference's
# power over the error's, in dB. With rel_err = ||out - ref||_F / ||ref||_F it is -20 log10(rel_err), so each
# gives the other (1e-2 is 40 dB; every 6.02 dB is one bit).


def sqnr_db(rel_err: float) -> float | None:
    """10 log10(||ref||^2 / ||out - ref||^2) of an answer off its reference by rel_err: inf for an exact
    answer, None for a non-finite one (no ratio to give)."""
    if rel_err is None or not math.isfinite(rel_err):
        return None
    return math.inf if rel_err == 0 else -20.0 * math.log10(rel_err)


def end_to_end_rel_err(rel_err: float | None, sqnr: float | None) -> float | None:
    """A row's error against float64 of the inputs it was given: rel_err, or, for a quantising variant
    (whose rel_err is against its rounded inputs), the one its sqnr_db says, 10^(-sqnr_db / 20)."""
    try:
        db = float(sqnr)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # None, or pandas' NA of a row without it
        return rel_err
    return rel_err if math.isnan(db) else 10.0 ** (-db / 20.0)


def record_e2e_rel_err(record: Mapping[str, Any]) -> float | None:
    """A numerics-probe record's end-to-end error (end_to_end_rel_err of its sqnr_db) where it is a
    quantising variant's (it names its quant_recipe), whose rel_err is its kernel's against its rounded
    inputs; None for any other record (its rel_err is end to end already) or one without the SQNR."""
    if not record.get("quant_recipe") or record.get("sqnr_db") is None:
        return None
    return end_to_end_rel_err(record.get("rel_err"), record.get("sqnr_db"))


def quantised(recipes):
    """Which rows of a quant_recipe column name a quantisation recipe (a variant that rounds its inputs:
    FP8), a bool Series: a missing recipe or "" names none."""
    return recipes.fillna("").astype(str).str.len() > 0


# ---- bytes and bandwidth --------------------------------------------------------------------------
# A decode step (few queries, many keys) is bound by reading K and V, not by FLOPs: it is judged by the
# bandwidth at which it reads them against the calibrated copy bandwidth (harness.measure.calibrate).

DTYPE_BYTES = MappingProxyType({"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2})


def kv_bytes(batch: int, kv_heads: int, seq_k: int, d_k: int, d_v: int, dtype: str) -> int:
    """Bytes of K and V, each read once: B * H_kv * N_k * (d_k + d_v) * itemsize (the `kv_bytes` column).
    Grouped-query heads read each K/V head once for all the query heads that share it."""
    return batch * kv_heads * seq_k * (d_k + d_v) * DTYPE_BYTES.get(dtype, 4)


def scores_bytes(batch: int, heads: int, n_q: int, n_k: int, dtype: str) -> int:
    """Bytes of one score matrix, (B, H, N_q, N_k) in the dtype: what a kernel that builds the scores holds
    at least once, against which bench's answer reads a peak (a plain kernel holds a few of them; one that
    builds a (B, H, N, N, d) temporary, d_k times more)."""
    return batch * heads * n_q * n_k * DTYPE_BYTES.get(dtype, 4)


def decode_bytes(
    heads: int, kv_heads: int, n_q: int, contexts: Sequence[int], d_k: int, d_v: int, dtype: str, table: int
) -> int:
    """Bytes a paged decode call must move at least (the `io_bytes` column): each context's K and V once at
    H_kv heads, the queries read and the output written at H heads, and the page table's `table` int32
    entries."""
    item = DTYPE_BYTES.get(dtype, 4)
    kv = kv_bytes(1, kv_heads, sum(contexts), d_k, d_v, dtype)
    return kv + len(contexts) * heads * n_q * (d_k + d_v) * item + 4 * table


def gbps(nbytes: float | None, time_ms: float) -> float:
    """GB/s (10^9 bytes per second) for `nbytes` moved in `time_ms` milliseconds (NaN when either is
    missing): the `kv_gbps` column is kv_bytes / median time."""
    if nbytes is None or not time_ms or time_ms <= 0:
        return math.nan
    return nbytes / (time_ms * 1e-3) / 1e9


def rate(count: float | None, time_ms: float) -> float:
    """`count` per second, done in `time_ms` milliseconds (NaN when either is missing): tokens_per_s."""
    if count is None or not time_ms or time_ms <= 0:
        return math.nan
    return count / (time_ms * 1e-3)


def tflops(flops: float | None, time_ms: float) -> float:
    """Achieved TFLOP/s for `flops` done in `time_ms` milliseconds (NaN when either is missing)."""
    if flops is None or not time_ms or time_ms <= 0:
        return math.nan
    return flops / (time_ms * 1e-3) / 1e12


def median_rates(row: dict[str, Any], median_ms: float) -> dict[str, float]:
    """Every rate of a cell's median call (docs/results-schema.md) from the row's amounts: useful and executed
    TFLOP/s, query tokens per second (B x N_q; a pack's T), K/V and paged-decode GB/s. A visit's row
    (harness.measure.cell) and a cell's merged visits (results.visits) both take theirs from here."""
    batch, seq_len = row.get("batch"), row.get("seq_len")
    tokens = batch * seq_len if isinstance(batch, int) and isinstance(seq_len, int) else None
    return {
        "tflops": tflops(row.get("flops"), median_ms),
        "executed_tflops": tflops(row.get("executed_flops"), median_ms),
        "tokens_per_s": rate(tokens, median_ms),
        "kv_gbps": gbps(row.get("kv_bytes"), median_ms),
        "io_gbps": gbps(row.get("io_bytes"), median_ms),
    }


def is_decode(n_q: Any, n_k: Any) -> Any:
    """Whether a cell is a decode step: N_q queries (seq_len) against N_k != N_q keys (seq_k; a paged cell's
    one query against its context). The one rule for every place that asks it: a cell's two lengths give a
    bool; a table's columns (n_k a pandas Series, n_q a Series on its index or a number) give a bool Series,
    the rows of the report's decode panel (reports.panels.decode.decode_rows). A length not known (None,
    NaN, pandas' NA: a row from before seq_k) is no decode step."""
    if hasattr(n_k, "ne"):  # pandas, element-wise: NA != x is NA, NaN != x is True; neither is a decode step
        known = n_k.notna() & (n_q.notna() if hasattr(n_q, "notna") else _length_known(n_q))
        return n_k.ne(n_q).fillna(False).astype(bool) & known
    return _length_known(n_q) and _length_known(n_k) and bool(n_k != n_q)


def _length_known(n: Any) -> bool:
    """Whether `n` is a length (a number, not None, NaN or pandas' NA)."""
    return isinstance(n, numbers.Real) and not isinstance(n, bool) and math.isfinite(n)


def speed(row: dict[str, Any]) -> tuple[float, str]:
    """(value, unit) of the rate a cell's median is read by: a decode step reads its K/V cache for a few
    queries, so its K/V GB/s (kv_gbps: what the report's decode panel shows; its TFLOP/s rounds to 0);
    any other cell's TFLOP/s. NaN where the row has no such rate."""
    decode = is_decode(row.get("seq_len"), row.get("seq_k"))
    column, unit = ("kv_gbps", "K/V GB/s") if decode else ("tflops", "TFLOP/s")
    value = row.get(column)
    return (float(value) if isinstance(value, (int, float)) else math.nan), unit


# ---- text for people ------------------------------------------------------------------------------


def ratio_number(ratio: float, spread: float = 0.0) -> str:
    """A ratio of two median times with the digits their spread supports: `spread` is the ratio's relative
    spread, the two medians' half-IQRs over themselves added (rel_iqr / 2 each: half the IQR a cell's line
    shows). Two decimals at most ('1.16'); fewer where the spread reaches them, to the place of the spread's
    first digit, and never fewer than the ratio's first digit: 344.99 at ±1463% is '300', 13.16 at ±20% is
    '13', 1.16 at ±4% stays '1.16'. 'n/a' for no ratio; a spread not known (NaN) keeps two decimals."""
    if not math.isfinite(ratio) or ratio <= 0:
        return "n/a"
    err = ratio * spread
    decimals = 2 if not (math.isfinite(err) and err > 0) else min(2, -math.floor(math.log10(err)))
    decimals = max(decimals, -math.floor(math.log10(ratio)))  # the ratio's first digit always stands
    return f"{ratio:.{decimals}f}" if decimals >= 0 else f"{round(ratio, decimals):.0f}"


def ratio_spread(*rel_iqrs: Any) -> float:
    """The relative spread of a ratio of medians whose rows have these rel_iqr: their half-IQRs added (NaN
    where one is not known)."""
    values = [
        float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else math.nan for r in rel_iqrs
    ]
    return sum(v / 2 for v in values)


def ci_spread(ratio: float, low: float, high: float) -> float:
    """The relative spread of a judged ratio (results.judge.Judged: B/A of geometric means) from its
    confidence interval [low, high]: the interval's half-width over the ratio, what ratio_number reads of
    compare's and bench's ratios, whose cells' spread the CI already holds (NaN where there is none)."""
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (ratio, low, high)) or ratio <= 0:
        return math.nan
    return (high - low) / 2 / ratio


def ratio_change(ratio: float, spread: float = math.nan) -> tuple[str, str]:
    """A B/A ratio of times as pyperf says it, (number, word): ('2.05', 'slower'), ('1.52', 'faster') (its
    A/B), ('1.00', '') where it reads 1.00 either way; ('n/a', '') for no ratio. The number in the digits
    `spread` supports (ratio_number; NaN: two decimals), but never so few that it reads 1 beside a word
    that gives it a direction: 1.46 at ±120% is '1.5' (one digit would say '1x slower')."""
    if not math.isfinite(ratio) or ratio <= 0:
        return "n/a", ""
    if f"{ratio:.2f}" == "1.00" and f"{1 / ratio:.2f}" == "1.00":
        return "1.00", ""
    r = ratio if ratio > 1 else 1 / ratio
    shown = ratio_number(r, spread)
    for decimals in (1, 2):
        if float(shown) != 1:
            break
        shown = f"{r:.{decimals}f}"
    return shown, "slower" if ratio > 1 else "faster"


def bytes_text(b: float | None) -> str:
    """Binary units, three significant digits: 512 KiB, 1.5 GiB, -2 KiB; '-' for None."""
    if b is None:
        return "-"
    sign, b = ("-" if b < 0 else ""), abs(b)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{sign}{b / size:.3g} {unit}"
    return f"{sign}{b:.3g} B"


# Text that goes to no terminal (a pipe, a file, a test's capture) is laid out this wide: what fits a
# 100-column terminal reads well in a log or an editor too (issue 26: lines were 150 to 225 columns).
DEFAULT_COLUMNS = 100
# Below this width the terminal's output takes its compact form (fewer columns, shorter padding).
COMPACT_BELOW = 100


def terminal_columns(stream=None) -> int:
    """How wide a line written to `stream` (default stdout) may be: $COLUMNS where it is set (as shutil
    and rich read it; also how a test asks for a width), else the width of the terminal `stream` is,
    else DEFAULT_COLUMNS. A terminal that reports 0 columns (a pty nobody gave a window size: `script`,
    `docker exec -t`, some CI runners) is one of unknown width."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or DEFAULT_COLUMNS
    except (AttributeError, ValueError, OSError):  # closed, not a file, or a StringIO
        pass
    return DEFAULT_COLUMNS


def sentence_columns(stream=None) -> int | None:
    """How wide a sentence (a note, a hint with a command in it) may be written to `stream`: the terminal's
    width where it is a terminal or $COLUMNS is set, else None: one line, whole, for a log or a pipe to
    grep and a command in it to copy (tables keep terminal_columns' 100 there)."""
    stream = sys.stdout if stream is None else stream
    is_tty = getattr(stream, "isatty", None)
    if os.environ.get("COLUMNS", "").strip().isdigit() or (is_tty is not None and is_tty()):
        return terminal_columns(stream)
    return None


def wrap_text(text: str, width: int | None, indent: str = "", first: str = "") -> list[str]:
    """`text` as lines of at most `width` columns (None: one line), `first` before the first and `indent`
    before the others; a word longer than the width (a path, a URL) is kept whole, to be copied."""
    if width is None:
        return [first + text]
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=indent, break_long_words=False,
        break_on_hyphens=False,
    ) or [first]  # fmt: skip


def short_dtype(name: str) -> str:
    """f32, f16, bf16, f64 for the dtype names; any other name as it is."""
    return SHORT_DTYPE.get(name, name)


def printable(text: object) -> str:
    """`text` safe to show a person: every control, format (bidi overrides such as U+202E, zero-width
    characters), separator and unassigned character, which a terminal would obey (ESC starts a colour or
    cursor sequence, CR overwrites the line) or a browser would use to reorder what is read, is written as
    its escape (\\x1b, \\u202e), as Python's repr would; ordinary spaces, tabs and newlines stay. For what is
    shown only (terminal, Markdown, HTML): stored rows keep a variant's message as it was."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(
        c if c.isprintable() or c in "\t\n" or unicodedata.category(c) == "Zs" else _escape(c) for c in s
    )


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def counted(n: int, noun: str) -> str:
    """'1 step', '2 steps'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def command(*words: Any) -> str:
    """A command line to paste, each word quoted as a POSIX shell reads it (a path with a space, a $ or a
    quote in it): every command attnbench prints for its user to run is said through it."""
    return shlex.join(str(word) for word in words)
