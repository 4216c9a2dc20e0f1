"""Issue 11's workload axes: grouped-query k/v heads, keys apart from queries (decode), lower-right causal
alignment and sliding windows, from the flags to the reference, the variants, FLOPs, bytes and the rows."""

from __future__ import annotations

import functools
import json
import math
import statistics

import pytest
import torch
from conftest import run_cli

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.guard import predict_peak_bytes
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep, cell_given
from attnbench.results.axes import CELL_AXES, cell_id
from attnbench.results.formulas import attention_flops, flops_formula, gbps, kv_bytes
from attnbench.variants import Capability, Problem, Variant
from attnbench.variants.lengths import PACKED_ONLY, PAGED_ONLY

OLD_ID = "naive|cpu|float32|b2|h4|n128|dk64|dv32|causal|pad0.25|fwdbwd"


# ---- identity and sweeps ----------------------------------------------------------------------------


def test_an_old_cell_keeps_its_id_byte_for_byte():
    old_row = {"variant": "naive", "device": "cpu", "dtype": "float32", "batch": 2, "heads": 4,
               "seq_len": 128, "d_k": 64, "d_v": 32, "causal": True, "padding": 0.25,
               "pass": "fwdbwd"}  # fmt: skip
    cell = CellSpec.from_dict(old_row)  # a row written before the axes existed
    assert (cell.kv_heads, cell.seq_k, cell.causal_align, cell.window) == (4, 128, "top-left", 0)
    assert cell.cell_id == OLD_ID
    old = dict(
        zip(CELL_AXES, ("naive", "cpu", "float32", 2, 4, 128, 64, 32, True, 0.25, "fwdbwd"), strict=False)
    )
    assert cell_id(old) == OLD_ID  # a row written before the later axes: they are at their defaults
    explicit = CellSpec(
        "naive", "cpu", "float32", 2, 4, 128, 64, 32, True, 0.25, "fwdbwd", kv_heads=4, seq_k=128
    )
    assert explicit == cell and explicit.cell_id == OLD_ID  # the defaults spelled out say nothing either
    assert CellSpec.from_dict(cell.to_dict()) == cell


def test_new_axes_in_the_id_in_the_agreed_order():
    cell = CellSpec("chunked", "cpu", "float32", 1, 8, 1, 64, 64, True, 0.0, "fwd", kv_heads=2, seq_k=4096,
                    causal_align="lower-right", window=512)  # fmt: skip
    assert cell.cell_id == "chunked|cpu|float32|b1|h8|n1|dk64|dv64|causal-lr|pad0|fwd|kv2|nk4096|w512"
    assert CellSpec.from_dict(json.loads(json.dumps(cell.to_dict()))) == cell
    others = [
        CellSpec("chunked", "cpu", "float32", 1, 8, 1, 64, 64, True, 0.0, "fwd", **kw)
        for kw in ({}, {"kv_heads": 4}, {"seq_k": 8}, {"causal_align": "lower-right"}, {"window": 4})
    ]
    assert len({c.cell_id for c in others}) == len({c.shape_key for c in others}) == len(others)
    # a series grows seq_len and seq_k: neither is in the group key, the other new axes are
    assert len({c.group_key for c in others}) == 4


def test_flags_parse_into_cells():
    sweep = build_sweep({"heads": "8", "kv_heads": "8,2,1", "seq_len": "1", "seq_k": "256..1024",
                             "causal": "no,lower-right", "variants": "naive"})  # fmt: skip
    assert sweep.kv_heads == (8, 2, 1) and sweep.seq_k == (256, 512, 1024)
    assert sweep.causal == (False, "lower-right") and sweep.window == (0,)
    cells = sweep.cells(["naive"])
    assert len(cells) == 3 * 2 * 3
    assert [c.seq_k for c in cells[:3]] == [256, 512, 1024]  # a series ascends in seq_k (skip-ahead)
    assert {(c.causal, c.causal_align) for c in cells} == {(False, "top-left"), (True, "lower-right")}
    windowed = build_sweep({"causal": "yes", "window": "0,16..32"})
    assert windowed.window == (0, 16, 32) and windowed.causal == (True,)
    assert build_sweep({"causal": "both"}).causal == (False, True)  # yes stays top-left
    assert SweepSpec.from_dict(json.loads(json.dumps(sweep.to_dict()))) == sweep  # as meta.json keeps it


def test_toml_takes_the_new_axes(tmp_path):
    f = tmp_path / "decode.toml"
    f.write_text('[sweep]\nheads = [8]\nkv_heads = [2]\nseq_len = [1]\nseq_k = "64..128"\n'
                 'causal = "lower-right"\nwindow = 16\n')  # fmt: skip
    s = build_sweep(config=str(f))
    assert (s.kv_heads, s.seq_k, s.causal, s.window) == ((2,), (64, 128), ("lower-right",), (16,))


def test_cell_given_round_trip_the_new_axes():
    cell = CellSpec("chunked", "cpu", "float32", 2, 4, 3, 16, 16, True, 0.0, "fwd", kv_heads=1, seq_k=37,
                    causal_align="lower-right", window=5)  # fmt: skip
    texts, left = cell_given(cell, Settings())
    assert left == [] and build_sweep(texts).cells(["chunked"]) == [cell]


@pytest.mark.parametrize(
    "texts,message",
    [
        ({"heads": "8", "kv_heads": "3"}, "--kv-heads 3 does not divide --heads 8"),
        ({"heads": "8,6", "kv_heads": "4"}, "--kv-heads 4 does not divide --heads 6"),
        ({"kv_heads": "0"}, "kv-heads must be positive integers"),
        ({"seq_k": "0"}, "seq-k must be positive integers"),
        ({"window": "16"}, "--window 16 needs causal masking"),
        ({"window": "16", "causal": "both"}, "--window 16 needs causal masking"),
        ({"window": "-1", "causal": "yes"}, "window must be 0 (none) or a positive number of keys, got '-1'"),
        ({"window": "wide", "causal": "yes"}, "got 'wide'"),
        ({"causal": "sideways"}, "causal must be one of no, yes, both, lower-right"),
    ],
)
def test_bad_values_are_named(texts, message):
    with pytest.raises(ValueError) as exc:
        build_sweep(texts)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# ---- the float64 reference against brute force ------------------------------------------------------


def _brute(q, k, v, *, causal=False, key_lengths=None, causal_align="top-left", window=0):
    """Attention one query row at a time from the index rules (AXES.md), in Python loops."""
    b, h, n_q, d_k = q.shape
    h_kv, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    out = torch.zeros(b, h, n_q, d_v, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // h_kv)
            for i in range(n_q):
                t = i + (n_k - n_q if causal_align == "lower-right" else 0)
                keys = [j for j in range(n_k) if (not causal or j <= t) and (not window or j > t - window)
                        and (key_lengths is None or j < int(key_lengths[bi]))]  # fmt: skip
                if keys:
                    s = torch.stack([q[bi, hi, i] @ k[bi, kv, j] for j in keys]) * d_k**-0.5
                    p = torch.softmax(s, dim=0)
                    out[bi, hi, i] = sum(p[n] * v[bi, kv, j] for n, j in enumerate(keys))
    return out


def _qkv(b=2, h=4, h_kv=2, n_q=5, n_k=9, d_k=8, d_v=6, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, n_q, d_k, generator=g).to(dtype),
        torch.randn(b, h_kv, n_k, d_k, generator=g).to(dtype),
        torch.randn(b, h_kv, n_k, d_v, generator=g).to(dtype),
    )


AXIS_CASES = [
    dict(),
    dict(causal=True),
    dict(causal=True, causal_align="lower-right"),
    dict(causal=True, window=3),
    dict(causal=True, causal_align="lower-right", window=2),
    dict(causal=True, causal_align="lower-right", window=1, key_lengths=torch.tensor([0, 4])),
]


@pytest.mark.parametrize("n_q,n_k", [(5, 9), (9, 5), (6, 6)])
@pytest.mark.parametrize("h_kv", [4, 2, 1])
@pytest.mark.parametrize("case", range(len(AXIS_CASES)))
def test_reference_matches_brute_force(n_q, n_k, h_kv, case):
    opts = AXIS_CASES[case]
    q, k, v = _qkv(h_kv=h_kv, n_q=n_q, n_k=n_k)
    ref = correctness.reference(q, k, v, **opts)
    assert torch.allclose(ref, _brute(q, k, v, **opts), atol=1e-12, rtol=0)
    rows = torch.tensor([0, n_q - 1])
    assert torch.equal(correctness.reference(q, k, v, rows=rows, **opts), ref[:, :, rows])


def test_rows_that_see_no_key_are_zeros_and_reported():
    """Lower-right with N_q > N_k: the first N_q - N_k rows see no key; a window can empty rows too."""
    q, k, v = _qkv(n_q=9, n_k=5)
    ref = correctness.reference(q, k, v, causal=True, causal_align="lower-right")
    assert bool((ref[:, :, :4] == 0).all()) and bool((ref[:, :, 4:] != 0).all())
    empty = correctness.empty_rows(9, None, n_k=5, causal=True, causal_align="lower-right")
    assert empty[0, 0, :, 0].tolist() == [True] * 4 + [False] * 5
    # top-left, N_q > N_k, window 2: rows 6.. have their two keys beyond N_k = 5
    empty = correctness.empty_rows(9, None, n_k=5, causal=True, window=2)
    assert empty[0, 0, :, 0].tolist() == [False] * 6 + [True] * 3


# ---- every built-in variant against the float64 gate ------------------------------------------------

# flex compiles a kernel per case (tens of seconds here) and torch 2.13's CPU kernel gave wrong rows at some
# key lengths that are not multiples of 16 (variants/flex.py): tests/variants/test_flex.py covers these axes
# for it. hf_flex is transformers' call of the same kernel and is left out for the same reasons, and two more:
# its CPU backward is refused as flex's is (the capability depends on the device, which this test's
# backward=cap.backward does not model), and transformers compiles flex_attention with automatic dynamic
# shapes, so a padded case after a case of another shape hits torch 2.13's CPU template bug under symbolic
# sizes ("'cur_qSplitSize8' was not declared", variants/flex.py). tests/variants/test_hf.py covers it.
COMPILED_FLEX = ("flex", "hf_flex")
CPU_VARIANTS = [
    n
    for n, v in variants.all_variants().items()
    if v.availability("cpu") is None and v.source == "builtin" and n not in COMPILED_FLEX
]
GATE_CASES = {  # name -> (heads, kv_heads, N_q, N_k, options)
    "gqa-causal": (4, 2, 33, 33, dict(causal=True)),
    "mqa-padding": (4, 1, 33, 33, dict(causal=False, key_lengths=torch.tensor([33, 10]))),
    "mha-full": (4, 4, 33, 33, dict(causal=False)),
    "decode-lower-right": (4, 2, 3, 37, dict(causal=True, causal_align="lower-right")),
    "decode-lower-right-window": (4, 1, 3, 37, dict(causal=True, causal_align="lower-right", window=8)),
    "prefill-window": (4, 2, 37, 37, dict(causal=True, window=5)),
    "more-queries-lower-right": (4, 4, 37, 3, dict(causal=True, causal_align="lower-right")),
    "top-left-window-padding": (4, 2, 37, 20, dict(causal=True, window=6, key_lengths=torch.tensor([20, 9]))),
    # packed batches (variants.lengths): one (1, H, T, d) pack of sequences 5, 1, 12 and 19 long
    "packed-gqa": (4, 2, 37, 37, dict(causal=False, cu_seqlens=torch.tensor([0, 5, 6, 18, 37]))),
    "packed-causal-window": (
        4,
        4,
        37,
        37,
        dict(causal=True, window=4, cu_seqlens=torch.tensor([0, 5, 6, 18, 37])),
    ),
}


def _problem(q, k, v, opts, backward):
    return Problem(
        device="cpu", dtype=variants.dtype_name(q.dtype), batch=q.shape[0], heads=q.shape[1],
        seq_len=q.shape[2], seq_k=k.shape[2], d_k=q.shape[3], d_v=v.shape[3],
        causal=opts.get("causal", False),
        padding=0.25 if opts.get("key_lengths") is not None else 0.0, pass_="fwdbwd" if backward else "fwd",
        kv_heads=k.shape[1],
        causal_align=opts.get("causal_align", "top-left"), window=opts.get("window", 0),
        lengths="packed" if opts.get("cu_seqlens") is not None else "none",
    )  # fmt: skip


@pytest.mark.parametrize("case", list(GATE_CASES))
@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_every_builtin_variant_passes_the_gate_or_says_why_not(name, case):
    h, h_kv, n_q, n_k, opts = GATE_CASES[case]
    packed = opts.get("cu_seqlens") is not None
    q, k, v = _qkv(
        b=1 if packed else 2, h=h, h_kv=h_kv, n_q=n_q, n_k=n_k, d_k=16, d_v=16, dtype=torch.float32
    )
    var = variants.get(name)
    reason = var.check(_problem(q, k, v, opts, backward=var.cap.backward))
    cap = var.cap
    declared = (cap.gqa or h_kv == h) and (cap.lower_right or opts.get("causal_align") is None)
    declared = declared and (cap.window or not opts.get("window")) and (cap.varlen or not packed)
    declared = declared and (cap.padding or opts.get("key_lengths") is None)
    if not declared:  # a variant is never handed what it did not declare: a readable reason instead
        assert reason and name in reason
        return
    if reason in (PACKED_ONLY, PAGED_ONLY) and not packed:  # a pack or nothing; a paged cache or nothing
        return
    assert reason is None, reason
    # unstable_softmax (default=False, the numerics demo) returns NaN in rows that see no key, by design:
    # the gate leaves those rows out of the forward error, but their NaN reaches every gradient
    backward = cap.backward and (
        cap.default or correctness.empty_rows(n_q, None, n_k=n_k, **_rules(opts)) is None
    )
    r = correctness.check(var, q, k, v, backward=backward, **opts)
    assert r.ok, r.describe()


def _rules(opts):
    return {a: opts[a] for a in ("causal", "causal_align", "window", "cu_seqlens") if a in opts}


@pytest.mark.parametrize("window", [0, 3, 8])
@pytest.mark.parametrize("causal_align", ["top-left", "lower-right"])
def test_chunked_with_small_blocks_skips_and_masks_exactly(causal_align, window):
    """Blocks smaller than the window and the lengths: key blocks skipped, crossing blocks masked, both
    directions of the backward's block ranges exercised; GQA with padding on top."""
    fn = functools.partial(variants.get("chunked").fn, block_q=4, block_k=5)
    for n_q, n_k in ((3, 37), (37, 37), (30, 11)):
        q, k, v = _qkv(h=4, h_kv=2, n_q=n_q, n_k=n_k)
        opts = dict(causal=True, causal_align=causal_align, window=window, key_lengths=torch.tensor([n_k, 7]))
        r = correctness.check(fn, q, k, v, backward=True, **opts)
        assert r.ok, (n_q, n_k, r.describe())


def test_gqa_variants_do_not_repeat_k_and_v():
    """naive with 1 k/v head allocates exactly what it does with 8: the scores, the weights and the output;
    a repeat of K/V to 8 heads would add 2 * 7 k/v-sized tensors."""
    from attnbench.harness.measure.memory import peak_cpu

    naive = variants.get("naive").fn
    q = torch.randn(1, 8, 64, 64)
    peaks = {}
    for h_kv in (8, 1):
        k, v = torch.randn(1, h_kv, 4096, 64), torch.randn(1, h_kv, 4096, 64)
        with torch.no_grad():
            peaks[h_kv] = peak_cpu(lambda k=k, v=v: naive(q, k, v))
    assert peaks[1] == peaks[8] == 2 * 8 * 64 * 4096 * 4 + 8 * 64 * 64 * 4


# ---- capability reasons -----------------------------------------------------------------------------


def test_a_variant_that_declares_none_of_the_axes_is_told_why():
    old = Variant(fn=lambda q, k, v, **kw: q, cap=Capability(name="old_style"))
    base = dict(heads=8, seq_len=1, seq_k=64, causal=True)
    assert "grouped-query attention (2 k/v heads for 8 query heads)" in old.check(Problem(**base, kv_heads=2))
    assert "lower-right causal alignment" in old.check(Problem(**base, causal_align="lower-right"))
    assert "sliding window (window 16)" in old.check(Problem(**base, window=16))
    assert old.check(Problem(**base)) is None  # N_q != N_k was always part of the calling convention
    record = variants.get("chunked").record()
    assert record["gqa"] and record["lower_right"] and record["window"]
    assert not any(variants.get("sdpa_cudnn").record()[f] for f in ("gqa", "lower_right", "window"))


# ---- FLOPs, bytes, the guard, skip-ahead --------------------------------------------------------------


@pytest.mark.parametrize("n_q,n_k", [(1, 9), (5, 9), (9, 5), (8, 8)])
@pytest.mark.parametrize("case", range(len(AXIS_CASES)))
def test_flops_count_the_pairs_the_reference_attends(n_q, n_k, case):
    """2 (d_k + d_v) per kept (query, key) pair per query head: counted from the reference's own weights
    (v = identity), GQA included (4 query heads on 2 k/v heads: H = 4 heads of pairs)."""
    opts = {"causal": False, **AXIS_CASES[case]}
    lengths = opts.pop("key_lengths", None)
    b = 2
    q, k = torch.zeros(b, 4, n_q, 4, dtype=torch.float64), torch.zeros(b, 2, n_k, 4, dtype=torch.float64)
    eye = torch.eye(n_k, dtype=torch.float64).expand(b, 2, n_k, n_k)
    weights = correctness.reference(q, k, eye, key_lengths=lengths, **opts)  # (B, H, N_q, N_k)
    kept = int((weights > 0).sum())
    kl = None if lengths is None else lengths.tolist()
    assert attention_flops(b, 4, n_q, n_k, 4, n_k, key_lengths=kl, **opts) == 2 * (4 + n_k) * kept


def test_flops_closed_form_at_scale_and_its_text():
    # a window of W keys: N*W - W(W-1)/2 pairs (the first W-1 rows see fewer), linear in N
    n, w = 16384, 512
    pairs = n * w - w * (w - 1) // 2
    assert attention_flops(1, 1, n, n, 64, 64, causal=True, window=w) == 2 * 128 * pairs
    # decode: one query, lower-right, sees every key; top-left it would see one
    assert attention_flops(1, 1, 1, 4096, 64, 64, causal=True, causal_align="lower-right") == 2 * 128 * 4096
    assert attention_flops(1, 1, 1, 4096, 64, 64, causal=True) == 2 * 128
    assert flops_formula(causal=True, padded=False) == "causal pairs"  # unchanged for old cells
    assert flops_formula(causal=True, padded=True, causal_align="lower-right", window=512) == (
        "lower-right causal pairs of valid keys, window 512"
    )
    with pytest.raises(ValueError, match="window"):
        attention_flops(1, 1, 4, 4, 8, 8, causal=False, window=2)


def test_kv_bytes_and_bandwidth():
    assert kv_bytes(2, 8, 4096, 128, 128, "bfloat16") == 2 * 8 * 4096 * 256 * 2
    assert kv_bytes(1, 8, 4096, 64, 64, "float32") * 4 == kv_bytes(1, 32, 4096, 64, 64, "float32")
    assert gbps(2e9, 1000.0) == pytest.approx(2.0)
    assert math.isnan(gbps(None, 1.0)) and math.isnan(gbps(1e9, 0.0))


def test_guard_predicts_with_n_q_by_n_k_scores_and_h_kv_heads():
    square = CellSpec("naive", "cpu", "float32", 1, 32, 65536, 128, 128, True, 0.0, "fwd")
    decode = CellSpec("naive", "cpu", "float32", 1, 32, 1, 128, 128, True, 0.0, "fwd", seq_k=65536,
                      causal_align="lower-right")  # fmt: skip
    # the decode cell's own work is tiny; what remains is k and v (and the gate's float64 copies of them)
    assert predict_peak_bytes(decode, "quadratic") * 100 < predict_peak_bytes(square, "quadratic")
    gqa = CellSpec("chunked", "cpu", "float32", 1, 32, 1, 128, 128, True, 0.0, "fwd", kv_heads=8, seq_k=65536)
    mha = CellSpec("chunked", "cpu", "float32", 1, 32, 1, 128, 128, True, 0.0, "fwd", seq_k=65536)
    assert predict_peak_bytes(gqa, "linear") < predict_peak_bytes(mha, "linear")
    # the prediction still covers the measured peak of a GQA decode call (inputs and reference included)
    from attnbench.harness.measure.memory import peak_cpu

    cell = CellSpec("naive", "cpu", "float32", 1, 8, 4, 64, 64, True, 0.0, "fwd", kv_heads=2, seq_k=2048)
    q, k, v = torch.randn(1, 8, 4, 64), torch.randn(1, 2, 2048, 64), torch.randn(1, 2, 2048, 64)
    with torch.no_grad():
        measured = peak_cpu(lambda: variants.get("naive").fn(q, k, v, causal=True))
    assert predict_peak_bytes(cell, "quadratic") > measured > 0


def test_skip_ahead_follows_seq_k_in_a_decode_series():
    from attnbench.harness.workers.cellrunner import SkipAhead

    def cell(n_q, n_k, **kw):
        return CellSpec("naive", "cpu", "float32", 1, 8, n_q, 64, 64, True, 0.0, "fwd", seq_k=n_k, **kw)

    skip = SkipAhead()
    skip.note(cell(1, 8192), {"status": "oom"})
    assert "ran out of memory at seq_len 1, seq_k 8192" in skip.reason(cell(1, 16384))
    assert skip.reason(cell(4, 16384)) is not None  # longer in both
    assert skip.reason(cell(1, 4096)) is None and skip.reason(cell(1, 8192)) is None
    assert skip.reason(cell(1, 16384, kv_heads=2)) is None  # another series
    skip.note(cell(2048, 2048), {"status": "timeout"})
    assert "timed out at seq_len 2048 with" in skip.reason(cell(4096, 4096))


def test_max_call_ms_skips_a_series_predicted_past_it_by_its_score_count():
    from attnbench.harness.workers.cellrunner import SkipAhead

    def cell(n_q, n_k=None, variant="chunked"):
        return CellSpec(
            variant, "cuda", "bfloat16", 1, 16, n_q, 128, 128, False, 0.0, "fwd", seq_k=n_k or n_q
        )

    skip = SkipAhead(max_call_ms=200)
    skip.note(cell(4096), {"status": "ok", "time_ms_median": 7.3})
    skip.note(cell(8192), {"status": "ok", "time_ms_median": 28.6})
    assert skip.reason(cell(16384)) is None  # 28.6 x 4 = 114 ms: under 200
    skip.note(cell(16384), {"status": "ok", "time_ms_median": 113.0})
    reason = skip.reason(cell(32768))  # from the longest ok cell: 113 x 4
    assert reason == (
        "skipped: chunked would take about 452 ms a call here (113.0 ms at seq_len 16384: its median, scaled "
        "x4.00 by the FLOPs counted), over --max-call-ms 200"
    )
    assert skip.reason(cell(32768, variant="sdpa")) is None  # another series: nothing known yet
    assert skip.reason(cell(2048)) is None  # shorter than every ok cell
    skip.note(cell(1, 8192), {"status": "ok", "time_ms_median": 60.0})  # decode: N_q = 1
    assert "at seq_len 1, seq_k 8192" in skip.reason(cell(1, 32768))  # 60 x 4 = 240
    off = SkipAhead([{**cell(16384).to_dict(), "status": "ok", "time_ms_median": 113.0}])  # max_call_ms 0
    assert off.reason(cell(32768)) is None


def test_max_call_ms_predicts_from_a_cells_fastest_call_not_one_slow_moment():
    """On 2 cores at load 6 a cell of two calls took 447.8 and 2.6 ms: its 225 ms median would skip the next N
    at --max-call-ms 300 (901 ms predicted). The guard extrapolates from the fastest call, and the skip line
    says so. The speed probe corrects nothing: a sleep-bound call of 41 ms whose probe, descheduled once, read
    0.06 of the run's fastest is still predicted from its 41 ms."""
    from attnbench.harness.workers.cellrunner import SkipAhead

    def cell(n, causal=False):
        return CellSpec("flash_v1", "cpu", "float32", 1, 2, n, 64, 64, causal, 0.0, "fwd")

    def row(samples, probe, **kw):
        return {"status": "ok", "time_ms_median": statistics.median(samples), "samples_ms": samples,
                "speed_tflops": probe, "host": "vm", "device": "cpu", **kw}  # fmt: skip

    skip = SkipAhead(max_call_ms=300)
    skip.note(cell(128), row([0.81, 0.59, 80.9, 0.65, 0.55, 135.8], 0.198404))
    skip.note(cell(256), row([447.789279, 2.553821], 0.022343))
    assert skip.reason(cell(512)) is None  # 2.55 ms x 4, not 225.2 x 4
    assert SkipAhead(max_call_ms=5).reason(cell(512)) is None  # nothing noted: nothing known
    tight = SkipAhead(max_call_ms=5)
    tight.note(cell(256), row([447.789279, 2.553821], 0.022343))
    assert tight.reason(cell(512)) == (
        "skipped: flash_v1 would take about 10 ms a call here (2.6 ms at seq_len 256: the fastest of its 2 "
        "calls, scaled x4.00 by the FLOPs counted), over --max-call-ms 5"
    )
    sleepy = SkipAhead([{**cell(64).to_dict(), **row([15.5, 27.6], 0.177828)}], max_call_ms=150)
    sleepy.note(cell(128), row([46.305381, 55.8], 0.011187))  # its probe at 0.06 of the run's fastest
    assert "about 185 ms a call here (46.3 ms at seq_len 128: the fastest of its 2 calls" in sleepy.reason(
        cell(256)
    )
    median_only = SkipAhead([{**cell(128).to_dict(), "status": "ok", "time_ms_median": 60.0}], max_call_ms=9)
    assert "(60.0 ms at seq_len 128: its median, scaled" in median_only.reason(cell(256))


def test_max_call_ms_scales_a_window_series_by_its_counted_work_not_the_score_count():
    """Trial T (M1): with window 64 a causal call attends 6,176 pairs at N 128 and 14,368 at N 256 (x2.33,
    not the score count's x4), so 327.7 ms at N 128 predicts about 762 ms at N 256: under 1,000 ms, the cell
    runs. Where the prediction is over, the line says what it scaled by, and that the time it scaled was
    read off a noisy, drifted cell of a busy machine."""
    from attnbench.harness.workers.cellrunner import SkipAhead
    from attnbench.results.formulas import attended_pairs

    def cell(n, window=64, pass_="fwdbwd", variant="chunked"):
        return CellSpec(variant, "cpu", "float32", 1, 2, n, 64, 64, True, 0.0, pass_, window=window)

    def row(samples, probe=0.2, noisy=False):
        return {"status": "ok", "time_ms_median": statistics.median(samples), "samples_ms": samples,
                "speed_tflops": probe, "noisy": noisy, "host": "vm", "device": "cpu"}  # fmt: skip

    pairs = [attended_pairs(n, n, causal=True, window=64) for n in (128, 256)]
    assert pairs == [6176, 14368]
    skip = SkipAhead(max_call_ms=1000)
    skip.note(cell(128), row([327.7, 400.0]))
    assert skip.reason(cell(256)) is None  # 327.7 x 2.33 = 762 ms, not 327.7 x 4 = 1,311 ms
    assert skip.reason(cell(256, pass_="fwd")) is None  # another series
    tight = SkipAhead(max_call_ms=700)
    for n in (16, 32, 64):  # the machine's usual speed: three quiet cells of another series
        tight.note(cell(n, variant="sdpa"), row([1.0, 1.1]))
    tight.note(cell(128), row([327.7, 400.0], probe=0.1, noisy=True))  # half the usual speed, and noisy
    assert tight.reason(cell(256)) == (
        "skipped: chunked would take about 762 ms a call here (327.7 ms at seq_len 128: the fastest of its "
        "2 calls, scaled x2.33 by the FLOPs counted), over --max-call-ms 700; read off a drifted and noisy "
        "cell"
    )
    for n in (16, 32):  # two more noisy cells: 3 of 6 ok cells drifted or noisy, a busy machine
        tight.note(cell(n, variant="flex"), row([1.0, 9.0], noisy=True))
    assert tight.reason(cell(256)).endswith("700; read off a drifted and noisy cell, on a busy machine")
    plain = SkipAhead(max_call_ms=300)  # no window: causal pairs grow as the score count does, about x4
    plain.note(cell(128, window=0), row([100.0, 120.0]))
    assert plain.reason(cell(256, window=0)) == (
        "skipped: chunked would take about 398 ms a call here (100.0 ms at seq_len 128: the fastest of its 2 "
        "calls, scaled x3.98 by the FLOPs counted), over --max-call-ms 300"
    )


def test_a_decode_cell_is_bound_by_memory_on_the_roofline():
    """reports.calibration.bound prices K/V with H_kv heads and N_k keys: a decode step reads 512 MiB of K/V
    for 1 GFLOP, memory-bound, where the same row read with N_k = N_q = 1 would look compute-bound."""
    from attnbench.reports.calibration import bound

    meta = {"calibration": {"cpu": {"matmul_tflops": {"float32": 0.1}, "copy_gbps": 10.0}}}
    row = {"variant": "chunked", "device": "cpu", "dtype": "float32", "batch": 1, "heads": 32, "seq_len": 1,
           "d_k": 128, "d_v": 128, "kv_heads": 8, "seq_k": 65536}  # fmt: skip
    row["flops"] = attention_flops(1, 32, 1, 65536, 128, 128, causal=True, causal_align="lower-right")
    assert bound(row, meta) == "memory"
    assert bound({k: v for k, v in row.items() if k not in ("kv_heads", "seq_k")}, meta) == "compute"


# ---- rows: one cell in process, old runs loading ------------------------------------------------------


def test_a_measured_cell_carries_the_new_columns():
    from attnbench.harness.measure.cell import measure_cell

    cell = CellSpec("chunked", "cpu", "float32", 2, 4, 3, 16, 16, True, 0.0, "fwd", kv_heads=2, seq_k=37,
                    causal_align="lower-right", window=8)  # fmt: skip
    row = measure_cell(cell, Settings(warmup_ms=1, budget_ms=5, min_ms=0.1))
    assert row["status"] == "ok", row["message"]
    assert (row["kv_heads"], row["seq_k"], row["causal_align"], row["window"]) == (2, 37, "lower-right", 8)
    assert row["kv_bytes"] == 2 * 2 * 37 * 32 * 4 and row["kv_gbps"] > 0
    assert (
        row["flops"] == 2 * 2 * 4 * (3 * 8) * 32
        and row["flops_formula"] == "lower-right causal pairs, window 8"
    )
    assert row["cell_id"].endswith("|causal-lr|pad0|fwd|kv2|nk37|w8")


def test_old_runs_load_with_the_defaults(tmp_path):
    from attnbench.results import RunWriter, load

    w = RunWriter(tmp_path / "old")
    w.write_meta({"run_id": "old", "sweep": {"devices": ["cpu"]}})
    old = {"cell_id": "c", "variant": "naive", "device": "cpu", "dtype": "float16", "batch": 2, "heads": 4,
           "seq_len": 64, "d_k": 8, "d_v": 16, "causal": True, "padding": 0.0, "pass": "fwd", "status": "ok",
           "time_ms_median": 0.5}  # fmt: skip
    w.append(old)
    w.append({**old, "cell_id": "d", "kv_heads": 1, "seq_k": 128, "causal_align": "lower-right", "window": 4,
              "kv_bytes": 999, "kv_gbps": 1.0, "tokens_per_s": 7.0})  # fmt: skip
    w.append({**old, "cell_id": "e", "status": "unsupported", "time_ms_median": None})
    w.close()
    df = load(tmp_path / "old").set_index("cell_id")
    c = df.loc["c"]
    assert (c["kv_heads"], c["seq_k"], c["causal_align"], c["window"]) == (4, 64, "top-left", 0)
    assert df.loc["c", "kv_bytes"] == 2 * 4 * 64 * 24 * 2
    assert df.loc["c", "kv_gbps"] == pytest.approx(2 * 4 * 64 * 24 * 2 / 0.5e-3 / 1e9)
    assert (df.loc["d", "kv_heads"], df.loc["d", "seq_k"], df.loc["d", "kv_bytes"]) == (1, 128, 999)
    # tokens_per_s, "in every cell" (results-schema.md), follows from B x N_q and the median as kv_gbps does;
    # a rate a row recorded is its own, and a cell without a time has none
    assert df.loc["c", "tokens_per_s"] == pytest.approx(2 * 64 / 0.5e-3)
    assert (df.loc["d", "kv_gbps"], df.loc["d", "tokens_per_s"]) == (1.0, 7.0)
    assert df.loc[["e"], ["kv_gbps", "tokens_per_s"]].isna().all(axis=None)


# ---- the CLI ------------------------------------------------------------------------------------------

BAD_FLAGS = [  # the rest of the bad values are refused by the same build_sweep: test_bad_values_are_named
    (["--heads", "8", "--kv-heads", "3"], "--kv-heads 3 does not divide --heads 8"),
    (["--window", "16"], "--window 16 needs causal masking"),
    (["--causal", "sideways"], "causal must be one of no, yes, both, lower-right"),
]


@pytest.mark.parametrize("args,message", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_axis_flags_are_one_line_exit_2_nothing_written(tmp_path, args, message):
    out = tmp_path / "run"
    p = run_cli("run", "--preset", "quick", *args, "--out", str(out), cwd=tmp_path)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("attnbench: error:"), p.stderr
    assert message in lines[0]
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_a_window_as_wide_as_the_keys_is_said_to_be_causal_without_one():
    """Trial T (L2): `--seq-len 128,256 --causal yes --window 512` ran cells labelled w512 that are the plain
    causal cells. One line per such window names the N it covers (N_k where the keys grow apart from the
    queries); a narrower window, and the cells' ids, are as they were."""
    from attnbench.harness.sweep.spec import wide_windows

    def cell(n, window, seq_k=None):
        return CellSpec("naive", "cpu", "float32", 1, 2, n, 16, 16, True, 0.0, "fwd", seq_k=seq_k or n,
                        window=window)  # fmt: skip

    cells = [cell(n, w) for n in (128, 256, 1024) for w in (0, 64, 512)]
    assert wide_windows(cells) == [
        "note: window 512 ≥ N at N = 128, 256: those cells are the same as causal without a window"
    ]
    assert cell(128, 512).cell_id.endswith("|w512")
    assert wide_windows([cell(n, 64) for n in (128, 256)]) == []
    decode = [cell(1, 4096, seq_k=n) for n in (1024, 4096, 8192)]
    assert wide_windows(decode) == [
        "note: window 4,096 ≥ N_k at N_k = 1,024, 4,096: those cells are the same as causal without a window"
    ]


def test_a_dry_run_and_a_run_say_a_window_as_wide_as_the_keys_at_the_start(tmp_path):
    args = ["--variants", "naive", "--seq-len", "16,32", "--causal", "yes", "--window", "24", "--heads", "1",
            "--budget-ms", "2", "--warmup-ms", "1"]  # fmt: skip
    line = "window 24 ≥ N at N = 16: those cells are the same as causal without a window"
    dry = run_cli("run", *args, "--dry-run", "--out", str(tmp_path / "dry"))
    assert dry.returncode == 0 and line in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    ran = run_cli("run", *args, "--out", str(tmp_path / "r"))
    assert ran.returncode == 0, ran.stderr
    said = ran.stdout + ran.stderr
    assert line in said and said.index(line) < said.index("starting a worker process"), said
    ids = {json.loads(r)["cell_id"] for r in (tmp_path / "r" / "rows.jsonl").read_text().splitlines()}
    assert any("|n16|" in i and i.endswith("|w24") for i in ids), ids  # its id as it was


OLD_STYLE_VARIANT = """
import torch
import attnbench


@attnbench.register("old_style", description="written before grouped k/v heads and windows")
def old_style(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
"""


@pytest.mark.slow  # a real run: worker, calibration and the numerics probe (about 20 s quiet, more when busy)
def test_cli_run_of_the_new_axes(tmp_path):
    plugin = tmp_path / "old_style.py"
    plugin.write_text(OLD_STYLE_VARIANT)
    out = tmp_path / "r"
    run_cli(
        "run", "--variants", "naive,chunked,sdpa,sdpa_efficient,old_style", "--variant-file", str(plugin),
        "--batch", "2", "--heads", "4", "--kv-heads", "2", "--seq-len", "8", "--seq-k", "64", "--d-k", "16",
        "--causal", "lower-right", "--window", "16", "--budget-ms", "5", "--warmup-ms", "1",
        "--out", str(out), check=True,
    )  # fmt: skip
    rows = {
        r["variant"]: r
        for r in json.loads(run_cli("export", str(out), "--format", "json", check=True).stdout)
    }
    for name in ("naive", "chunked", "sdpa"):
        r = rows[name]
        assert r["status"] == "ok", r["message"]
        assert (r["kv_heads"], r["seq_k"], r["causal_align"], r["window"]) == (2, 64, "lower-right", 16)
        assert r["kv_bytes"] == 2 * 2 * 64 * 32 * 4 and r["kv_gbps"] > 0
        assert r["flops"] == 2 * 2 * 4 * (8 * 16) * 32  # every query sees its 16 keys
        assert r["cell_id"] == f"{name}|cpu|float32|b2|h4|n8|dk16|dv16|causal-lr|pad0|fwd|kv2|nk64|w16"
    assert rows["sdpa_efficient"]["status"] == "unsupported" and "CUDA" in rows["sdpa_efficient"]["message"]
    assert rows["old_style"]["status"] == "unsupported"
    assert "does not support grouped-query attention" in rows["old_style"]["message"]
    csv_header = run_cli("export", str(out), "--format", "csv", check=True).stdout.splitlines()[0].split(",")
    assert {"kv_heads", "seq_k", "causal_align", "window", "kv_bytes", "kv_gbps"} <= set(csv_header)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sweep"]["causal"] == ["lower-right"] and meta["sweep"]["kv_heads"] == [2]
    assert meta["variant_capabilities"]["chunked"]["window"] is True
