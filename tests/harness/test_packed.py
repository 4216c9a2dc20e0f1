"""Packed variable-length batches (the lengths axis, variants/lengths.py): the seeded patterns, the flags'
bad input, the float64 gate per sequence (a sequence left unwritten is named), the useful and executed
work a row carries, and a real run through the CLI to its report's varlen panel."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from conftest import DATA, load_plugin, run_cli

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results import load
from attnbench.results.formulas import executed_pairs, packed_pairs, padding_split
from attnbench.variants.lengths import PATTERNS, draw_lengths, offsets, pattern_cap

QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)


def cell(variant: str, lengths: str = "uniform", *, batch: int = 4, n: int = 48, causal: bool = True):
    return dataclasses.replace(
        CellSpec(variant, "cpu", "float32", batch, 2, n, 16, 16, causal, 0.0, "fwd"), lengths=lengths
    )


@pytest.mark.parametrize("pattern", [*PATTERNS, "longtail:100"])
@pytest.mark.parametrize(("batch", "mean"), [(1, 64), (8, 96), (16, 33)])
def test_each_pattern_holds_the_tokens_in_its_bounds_and_is_seeded(pattern, batch, mean):
    lengths = draw_lengths(pattern, batch, mean)
    cap = pattern_cap(pattern, mean)
    assert len(lengths) == batch and sum(lengths) == batch * mean
    assert min(lengths) >= 1 and max(lengths) <= cap
    assert draw_lengths(pattern, batch, mean) == lengths  # the same cell, the same lengths, everywhere


def test_the_patterns_differ_as_named():
    spread = {p: max(draw_lengths(p, 16, 256)) / 256 for p in PATTERNS}
    assert spread["constant"] == 1.0
    assert spread["longtail"] > spread["uniform"] > 1.0 and spread["bimodal"] > 2.0


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--lengths", "zipf"], "--lengths must be none or one of constant"),
        (["--lengths", "uniform,long-tail"], "got 'long-tail' (did you mean 'longtail'?)"),  # README's prose
        (["--lengths", "uniform:100", "--batch", "4", "--seq-len", "256"], "cannot hold the 1024 tokens"),
        (["--lengths", "uniform", "--padding", "0.25"], "does not go with --padding"),
        (["--lengths", "bimodal", "--seq-k", "512"], "does not go with --seq-k"),
        (["--lengths", "uniform:0"], "MAX, the longest sequence, a positive integer"),
    ],
)
def test_bad_lengths_are_one_line_and_exit_2_with_nothing_written(tmp_path, flags, says):
    out = tmp_path / "run"
    proc = run_cli("run", "--variants", "naive", *flags, "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


def test_the_reference_sees_each_sequence_alone_and_samples_every_sequences_ends():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 8, generator=g, dtype=torch.float64) for _ in range(3))
    cu = torch.tensor([0, 7, 8, 25, 40])
    packed = correctness.reference(q, k, v, causal=True, cu_seqlens=cu)
    for a, b in zip(cu.tolist(), cu.tolist()[1:], strict=False):
        alone = correctness.reference(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], causal=True)
        assert torch.allclose(packed[:, :, a:b], alone, atol=1e-12)
    rows = correctness.sample_rows(40, 12, cu_seqlens=cu).tolist()
    assert {0, 6, 7, 8, 24, 25, 39} <= set(rows) and len(rows) == 12


@pytest.fixture(scope="module")
def plugin():
    return load_plugin(DATA / "packed_variants.py")


def test_a_sequence_left_unwritten_is_wrong_and_named(plugin):
    row = measure_cell(cell("leaves_a_sequence_unwritten", "uniform"), QUICK)
    lengths = row["seq_lens"]
    a = offsets(lengths)[2]
    assert row["status"] == "wrong"
    assert (
        f"sequence 3 of 4 (rows {a}..{a + lengths[2] - 1}, {lengths[2]} tokens): non-finite" in row["message"]
    )


def test_attending_across_sequences_is_wrong(plugin):
    row = measure_cell(cell("attends_across_sequences", "longtail"), QUICK)
    assert row["status"] == "wrong" and "worst: sequence" in row["message"]
    assert "gate: it ignored the packed batch's boundaries (cu_seqlens)" in row["message"], row["message"]


def _pack(lengths: list[int], *, heads: int = 2, d: int = 16, dtype=torch.bfloat16):
    """q, k, v (1, H, T, d) of dtype, the pack's cu_seqlens, and its float64 reference rounded to dtype (a
    right answer in dtype)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, sum(lengths), d, generator=g).to(dtype) for _ in range(3))
    cu = torch.tensor(offsets(lengths), dtype=torch.int32)
    return q, k, v, cu


@pytest.mark.parametrize("causal", [False, True])
def test_each_sequence_is_judged_alone_and_the_worst_is_the_gates(causal):
    """One sequence 6% off among seven right ones is 2% over the whole pack, under bfloat16's 2.5e-2: the
    gate's rel_err is its worst sequence's, named (from 1: the third is 'sequence 3 of 8')."""
    lengths = [64] * 8
    q, k, v, cu = _pack(lengths)
    right = correctness.reference(q, k, v, causal=causal, cu_seqlens=cu)
    assert correctness.gate(right.to(q.dtype), q, k, v, causal=causal, cu_seqlens=cu).passed
    off = right.clone()
    off[:, :, 128:192] *= 1.06  # the third sequence
    result = correctness.gate(off.to(q.dtype), q, k, v, causal=causal, cu_seqlens=cu)
    assert not result.passed and result.rel_err == pytest.approx(0.06, rel=0.1), result.describe()
    said = "worst: sequence 3 of 8 (rows 128..191, 64 tokens): rel_err 6"
    assert result.where.startswith(said), result.where


@pytest.mark.parametrize(("lengths", "causal"), [([32] * 7 + [2048], False), ([96] * 8, True)])
def test_a_row_left_unwritten_fails_the_gate_and_names_its_sequence(lengths, causal):
    """The pack's last row zeroed errs under bfloat16's tolerance even within its own sequence (one row of
    2048 alike rows is 2.2%; a causal last row weighs little): it fails as unwritten, naming the sequence."""
    q, k, v, cu = _pack(lengths)
    out = correctness.reference(q, k, v, causal=causal, cu_seqlens=cu).to(q.dtype)
    out[:, :, -1] = 0
    result = correctness.gate(out, q, k, v, causal=causal, cu_seqlens=cu)
    last, a = sum(lengths) - 1, sum(lengths) - lengths[-1]
    said = f"it left query row {last} unwritten (zeros where the answer is not), in sequence 8 of 8 (rows {a}"
    assert not result.passed and result.describe().startswith(said), result.describe()


def test_a_last_row_left_unwritten_is_a_plain_gate_failure_in_a_run(plugin):
    """docs' my_varlen with its last row zeroed, in bfloat16: the first (gated) call fails the float64 gate,
    naming the sequence; not first caught on fresh inputs as an answer that does not follow them."""
    spec = dataclasses.replace(cell("zeroes_its_last_row", "uniform", batch=8, n=256), dtype="bfloat16")
    row = measure_cell(spec, QUICK)
    last, first = sum(row["seq_lens"]) - 1, sum(row["seq_lens"][:-1])
    assert row["status"] == "wrong" and row["message"].startswith(
        f"failed the float64 gate: it left query row {last} unwritten (zeros where the answer is not), "
        f"in sequence 8 of 8 (rows {first}..{last})"
    ), row["message"]
    assert "does not follow" not in row["message"]


@pytest.mark.parametrize("causal", [False, True])
def test_rows_count_useful_work_from_the_real_lengths_and_the_work_each_kernel_executes(causal):
    """flops counts each sequence's pairs alone; executed_flops what the variant's declared work computes:
    the padded kernel's whole B * max(L)^2 rectangle, causal or not (sdpa_padded hands SDPA the causal mask
    as an explicit one, whose every block it computes), the loop's exactly the useful, naive's the whole
    pack's T x T (causal too: it computes every score)."""
    rows = {
        v: measure_cell(cell(v, "longtail", causal=causal), QUICK)
        for v in ("sdpa_padded", "sdpa_loop", "naive")
    }
    lengths = rows["naive"]["seq_lens"]
    per_pair = 2 * 2 * (16 + 16)  # 2 FLOPs x H x (d_k + d_v)
    useful = packed_pairs(lengths, causal=causal) * per_pair
    for name, row in rows.items():
        assert row["status"] == "ok", (name, row["message"])
        assert row["flops"] == useful and row["seq_lens"] == lengths
    assert rows["sdpa_padded"]["executed_flops"] == len(lengths) * max(lengths) ** 2 * per_pair
    # executed / useful: B max(L)^2 / sum L_i^2, over sum L_i(L_i + 1)/2 when causal (the padding tax of issue
    # 39, B pairs(max L) / sum pairs(L_i), times the pairs the explicit causal mask hides: padding_split)
    tax = len(lengths) * max(lengths) ** 2 / sum(n * (n + 1) // 2 if causal else n * n for n in lengths)
    assert rows["sdpa_padded"]["executed_flops"] / useful == pytest.approx(tax, rel=1e-12)
    assert rows["sdpa_loop"]["executed_flops"] == useful
    # naive computes the whole T x T scores before its mask hides any: T^2 pairs, causal or not
    assert rows["naive"]["executed_flops"] == sum(lengths) ** 2 * per_pair
    assert rows["naive"]["tokens_per_s"] == pytest.approx(
        sum(lengths) / (rows["naive"]["time_ms_median"] / 1e3)
    )


@pytest.mark.parametrize("causal", [False, True])
def test_the_padding_tax_is_the_padded_shapes_pairs_of_the_same_causality_and_the_rest_is_apart(causal):
    """Issue 39's padding tax: B pairs(max L) / sum pairs(L_i), causal for causal cells. A padded kernel's
    executed / useful is that times what its explicit mask hides (2 max L / (max L + 1) causal); a kernel
    that pads nothing has no padding tax, its executed / useful all 'the rest'."""
    lengths = draw_lengths("longtail", 8, 100)
    pairs = (lambda n: n * (n + 1) // 2) if causal else (lambda n: n * n)
    tax, rest = padding_split(lengths, work="padded", causal=causal)
    assert tax == pytest.approx(len(lengths) * pairs(max(lengths)) / sum(map(pairs, lengths)))
    assert rest == pytest.approx(max(lengths) ** 2 / pairs(max(lengths)))
    assert padding_split([64] * 4, work="padded", causal=causal)[0] == 1  # nothing padded
    useful = packed_pairs(lengths, causal=causal)
    for work in ("masked", "exact", "tiles:16", "rows:16"):
        assert padding_split(lengths, work=work, causal=causal) == pytest.approx(
            (1, executed_pairs(lengths, causal=causal, work=work) / useful)
        ), work


def test_tile_and_row_block_work_cover_the_useful_pairs_and_at_most_the_pack():
    lengths = draw_lengths("bimodal", 8, 100)
    useful, whole = packed_pairs(lengths, causal=False), sum(lengths) ** 2
    for work in ("tiles:16", "tiles:128", "rows:16", "rows:256"):
        assert useful <= executed_pairs(lengths, causal=False, work=work) <= whole, work
    assert executed_pairs(lengths, causal=False, work="tiles:1") == useful  # one pair a tile: exact


def test_causal_work_counts_what_each_kind_of_kernel_computes():
    """A dense kernel under a block-diagonal mask (masked) computes all T^2 scores whatever the causal mask
    hides, and a padded one its whole B x max(L)^2 rectangle under its explicit mask; exact is credited with
    the causal half a causal flag lets a kernel skip to; row blocks stop at their last row."""
    lengths = draw_lengths("bimodal", 8, 100)
    t = sum(lengths)
    assert executed_pairs(lengths, causal=True, work="masked") == t * t
    assert executed_pairs(lengths, causal=True, work="masked") == executed_pairs(
        lengths, causal=False, work="masked"
    )
    longest = max(lengths)
    for window in (0, 7):
        assert executed_pairs(lengths, causal=True, work="padded", window=window) == len(lengths) * longest**2
    useful = packed_pairs(lengths, causal=True)
    assert executed_pairs(lengths, causal=True, work="exact") == useful
    for work in ("tiles:16", "rows:16"):
        causal = executed_pairs(lengths, causal=True, work=work)
        assert useful <= causal < executed_pairs(lengths, causal=False, work=work), work


def test_chunked_with_small_blocks_over_a_pack_is_exact_forward_and_backward():
    """Blocks that straddle sequences (masked) and blocks of other sequences (skipped), both ways."""
    import functools

    from attnbench import variants

    fn = functools.partial(variants.get("chunked").fn, block_q=4, block_k=5)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 37, 8, generator=g) for _ in range(3))
    for causal, window in ((False, 0), (True, 0), (True, 3)):
        cu = torch.tensor([0, 5, 6, 18, 37])
        r = correctness.check(
            fn, q, k[:, :2], v[:, :2], backward=True, causal=causal, window=window, cu_seqlens=cu
        )
        assert r.ok, (causal, window, r.describe())


def test_a_packed_run_stores_its_lengths_and_its_report_shows_the_padding_tax(tmp_path):
    out = tmp_path / "run"
    proc = run_cli(
        "run", "--variants", "sdpa_padded,sdpa_loop,naive,chunked", "--lengths", "constant,longtail",
        "--batch", "4", "--heads", "2", "--seq-len", "32,64", "--d-k", "16", "--causal", "yes",
        "--warmup-ms", "2", "--budget-ms", "10", "--min-ms", "2", "--out", str(out), "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    df = load(out)
    assert set(df["status"]) == {"ok"} and set(df["lengths"]) == {"constant", "longtail"}
    stored = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert all(r["seq_lens"] == draw_lengths(r["lengths"], 4, r["seq_len"]) for r in stored)
    constant = df[(df["lengths"] == "constant") & (df["variant"] == "sdpa_padded")]
    # equal lengths: no padding to pay for, but the explicit causal mask's hidden half is computed
    n = constant["seq_len"].astype(int)
    assert (constant["executed_flops"] * (n + 1) == constant["flops"] * 2 * n).all()
    report = tmp_path / "report"
    assert run_cli("report", str(out), "--out", str(report)).returncode == 0
    page = (report / "README.md").read_text()
    assert (report / "varlen-cpu-float32-fwd.png").exists() and "packed variable-length batches" in page
    assert "executes" in page and "useful work" in page


@pytest.mark.parametrize("variant", ["sdpa_padded", "sdpa_loop", "naive"])
def test_the_guard_predicts_a_packed_cell_from_the_work_its_variant_holds_at_once(variant):
    """A packed cell's scores are what its variant's varlen work holds at once: the T x T pack under a mask
    (naive), B x max(L)^2 padded, the longest sequence's max(L)^2 alone. On an H200 the T x T rule skipped
    sdpa_padded and sdpa_loop at B=16, N=4,096 for 389 GiB. The prediction still covers the measured peak."""
    from attnbench.harness.measure.guard import predict_peak_bytes, score_elements
    from attnbench.harness.measure.memory import peak_cpu

    spec = cell(variant, "longtail", batch=8, n=64, causal=False)
    lengths, work = spec.seq_lens(), variants.get(variant).cap.varlen
    expected = {"masked": sum(lengths) ** 2, "padded": 8 * max(lengths) ** 2, "exact": max(lengths) ** 2}
    assert score_elements(spec, work) == expected[work]
    assert score_elements(dataclasses.replace(spec, lengths="none")) == 8 * 64 * 64  # a batch, not a pack
    q, k, v = (torch.randn(1, 2, sum(lengths), 16) for _ in range(3))
    cu = torch.tensor(offsets(lengths), dtype=torch.int32)
    with torch.no_grad():
        measured = peak_cpu(lambda: variants.get(variant).fn(q, k, v, cu_seqlens=cu))
    assert predict_peak_bytes(spec, variants.get(variant).cap.memory, QUICK, work) > measured > 0


def test_a_padded_pack_is_predicted_as_its_padded_copies_and_key_mask_not_its_heads_scores():
    """SDPA's fused kernels take sdpa_padded's key mask and stream the scores: on an H200 its peaks were
    0.3-5 GiB, while a prediction of H score tensors (298 GiB at B=16, mean 4,096, longtail, bf16) skipped
    cells that fit. It holds its padded q, k, v and output (B x max(L) rows) and a B x max(L)^2 mask."""
    from attnbench.harness.measure.guard import predict_peak_bytes

    spec = dataclasses.replace(
        CellSpec("sdpa_padded", "cuda", "bfloat16", 16, 16, 4096, 128, 128, True, 0.0, "fwd"),
        lengths="longtail",
    )
    lengths = spec.seq_lens()
    b, longest = len(lengths), max(lengths)
    cap = variants.get("sdpa_padded").cap
    assert cap.memory == "linear" and cap.varlen == "padded"
    predicted = predict_peak_bytes(spec, cap.memory, QUICK, cap.varlen)
    padded_io = 2 * b * 16 * longest * 256 * 2  # q and output, k and v: B x max(L) rows of d_k + d_v, bf16
    assert predicted > 2 * padded_io + b * longest**2  # its forward's copies and its key mask
    assert predicted < predict_peak_bytes(spec, "quadratic", QUICK, cap.varlen) / 10
    exact = predict_peak_bytes(dataclasses.replace(spec, variant="sdpa_loop"), "linear", QUICK, "exact")
    assert exact < predicted  # the loop holds no padding


def test_loading_counts_executed_work_from_the_rows_own_lengths(tmp_path):
    """The reference run's rows stored sdpa_padded's causal count as B * pairs(max L); loading counts each
    packed row again from its seq_lens and its variant's declared work in meta.json: the whole rectangle
    (about 2x the useful work on constant lengths, 10x on the long-tail pack of mean 256), and
    executed_tflops with it. A run whose meta.json does not name the variant's work keeps the stored
    number."""
    run = DATA.parents[1] / "results/reference/varlen-epyc-2core"
    df = load(run)
    padded = df[(df["variant"] == "sdpa_padded") & (df["status"] == "ok")]
    assert len(padded) == 8
    for _, r in padded.iterrows():
        lengths, per_pair = list(r["seq_lens"]), 2 * int(r["heads"]) * (int(r["d_k"]) + int(r["d_v"]))
        assert r["executed_flops"] == len(lengths) * max(lengths) ** 2 * per_pair
        assert r["executed_tflops"] == pytest.approx(r["executed_flops"] / r["time_ms_median"] / 1e9)
    by_cell = padded.set_index(["lengths", "seq_len"])
    tax = by_cell["executed_flops"] / by_cell["flops"]
    assert tax["constant", 256] == pytest.approx(2 * 256 / 257)
    assert tax["longtail", 256] == pytest.approx(9.96, abs=0.01)
    meta = json.loads((run / "meta.json").read_text())
    del meta["variant_capabilities"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "rows.jsonl").write_text((run / "rows.jsonl").read_text())
    stored = {r["cell_id"]: r["executed_flops"] for r in map(json.loads, (run / "rows.jsonl").open())}
    kept = load(tmp_path).set_index("cell_id")["executed_flops"]
    assert all(kept[c] == e for c, e in stored.items() if e is not None)


def _tiles_one_by_one(lengths, tile, *, causal, window):
    """The tile count by its definition: every tile of the T x T matrix, visible where one sequence holds a
    row i and a key j of it with j <= i under causal masking and j > i - window with a window."""
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    total, pairs = bounds[-1], 0
    for a in range(0, total, tile):
        for c in range(0, total, tile):
            a2, c2 = min(a + tile, total), min(c + tile, total)
            seen = any(
                s <= i < e and s <= j < e and (not causal or j <= i) and (not window or j > i - window)
                for s, e in zip(bounds, bounds[1:], strict=False)
                for i in range(a, a2)
                for j in range(c, c2)
            )
            pairs += (a2 - a) * (c2 - c) if seen else 0
    return pairs


@pytest.mark.parametrize("seed", range(6))
def test_tile_work_is_the_tiles_that_hold_a_visible_pair(seed):
    """tiles:N counts, row of tiles by row, the key tiles each sequence's interval of keys touches: the same
    as looking in every tile for a visible pair (zero-length sequences, windows and causal masking too)."""
    import random

    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, 3, 5, 9, 17, 30]) for _ in range(rng.randint(1, 6))] + [rng.randint(1, 40)]
    for tile in (1, 4, 7, 16):
        for causal in (False, True):
            for window in (0, 1, 3, 10):
                want = _tiles_one_by_one(lengths, tile, causal=causal, window=window)
                got = executed_pairs(lengths, causal=causal, work=f"tiles:{tile}", window=window)
                assert got == want, (lengths, tile, causal, window)
