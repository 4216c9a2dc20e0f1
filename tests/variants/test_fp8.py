"""FP8 (issue: speed against accuracy): the recipes, the emulated variants against float64 with the kernel's
error and the rounding's apart, per head against per tensor, honest capabilities, and a real run whose
report draws the FP8 points."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pandas as pd
import pytest
import tensors
import torch
from conftest import run_cli

from attnbench import variants
from attnbench.harness.measure import cell, correctness
from attnbench.harness.measure.inputs import block_table, make_inputs
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import TOLERANCE, end_to_end_rel_err, quantised, sqnr_db
from attnbench.variants import Problem, fp8, in_layout, quant
from attnbench.variants.fp8 import HEAD, TENSOR
from attnbench.variants.lengths import PAGED_ONLY
from attnbench.variants.paged import paged_chunked
from attnbench.variants.registry import Capability, VariantError

QUICK = Settings(warmup_ms=1, budget_ms=5, min_ms=1)
EMULATED = {"fp8_emulated": "e4m3fn:tensor", "fp8_emulated_head": "e4m3fn:head"}
E4M3_MAX, E4M3_BITS, E4M3_MIN_NORMAL_EXP, E4M3_MIN_SUB_EXP = 448.0, 3, -6, -9  # float8_e4m3fn's format


def _rounded(x: torch.Tensor, per_head: bool) -> torch.Tensor:
    """x rounded to float8_e4m3fn with scale amax / 448 and read back, in float64: written here apart from
    variants.quant (which the variants and the gate share), from the format's definition, in the recipe's
    float32 (the quotient, and the scale that multiplies the stored value back)."""
    x32 = x.detach().to(torch.float32)
    amax = x32.abs().amax(dim=(2, 3), keepdim=True) if per_head else x32.abs().amax()
    scale = amax / E4M3_MAX
    return ((x32 / scale).to(torch.float8_e4m3fn).to(torch.float32) * scale).to(torch.float64)


def _attention64(q, k, v, causal=False):
    """float64 softmax(q k^T / sqrt(d)) v, with top-left causal masking: the reference written out."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = s.shape[-2:]
        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a.to(torch.float64) - b) / torch.linalg.vector_norm(b))


# ---- the recipes ---------------------------------------------------------------------------------------


def test_recipes_parse_and_unknown_ones_are_refused():
    assert quant.RECIPES == ("e4m3fn:tensor", "e4m3fn:head")
    assert quant.parse("e4m3fn:head") == ("e4m3fn", "head")
    assert quant.describe("e4m3fn:tensor") == "float8_e4m3fn, one scale per tensor (amax / 448)"
    for bad in ("e5m2:tensor", "e4m3fn", "e4m3fn:row"):
        with pytest.raises(ValueError, match="unknown quantisation recipe"):
            quant.parse(bad)
    with pytest.raises(VariantError, match="quant must be one of"):
        Capability(name="x", quant="int8:tensor")
    assert Capability(name="x", quant="e4m3fn:head", paged=True).quant == "e4m3fn:head"  # an FP8 KV cache
    assert variants.get("fp8_emulated").record()["quant"] == "e4m3fn:tensor"  # meta.json's record
    assert variants.get("sdpa").record()["quant"] == ""


@pytest.mark.parametrize("recipe", quant.RECIPES)
def test_dequantise_is_the_format_rounding_whatever_the_layout(recipe):
    q, _, _ = tensors.qkv(b=2, h=3, n_q=20, d_k=8)
    q = q * torch.tensor([1.0, 50.0, 0.02]).view(1, 3, 1, 1)
    per_head = recipe.endswith(":head")
    expected = _rounded(q, per_head)
    got = quant.dequantise(q, recipe)
    assert got.dtype == torch.float32 and torch.equal(got.to(torch.float64), expected)
    assert _rel(got, q.to(torch.float64)) < 2.0**-4  # each element within the format's 3 mantissa bits
    assert torch.equal(quant.dequantise(in_layout(q, "bnhd"), recipe), got)  # amax reads magnitudes only
    assert quant.scales(q, recipe).shape == ((2, 3, 1, 1) if per_head else (1, 1, 1, 1))
    stored, _ = quant.quantise(q, recipe)
    assert stored.dtype == torch.float8_e4m3fn and float(stored.float().abs().max()) == E4M3_MAX
    zeros = quant.dequantise(torch.zeros(1, 2, 3, 4), recipe)  # scale 1, never 0 / 0
    assert torch.equal(zeros, torch.zeros(1, 2, 3, 4))


def test_the_rounding_error_is_within_the_formats_bound():
    """Analytically: a value x / scale in the normal range (>= 2^-6) rounds to 3 mantissa bits, a relative
    error of at most 2^-4; below it (subnormals, steps of 2^-9) an absolute one of at most 2^-10 times the
    scale. The error's norm is within the norm of those bounds."""
    for x in tensors.qkv(b=2, h=4, n_q=64, d_k=32):
        scale = float(quant.scales(x, "e4m3fn:tensor"))
        x64 = x.to(torch.float64)
        normal = (x64 / scale).abs() >= 2.0**E4M3_MIN_NORMAL_EXP
        bound = torch.where(
            normal,
            x64.abs() * 2.0 ** -(E4M3_BITS + 1),
            torch.full_like(x64, scale * 2.0 ** (E4M3_MIN_SUB_EXP - 1)),
        )
        err = quant.dequantise(x, "e4m3fn:tensor").to(torch.float64) - x64
        assert bool((err.abs() <= bound * (1 + 1e-6)).all())
        assert float(torch.linalg.vector_norm(err)) <= float(torch.linalg.vector_norm(bound))


def test_sqnr_and_the_end_to_end_error_give_each_other():
    assert sqnr_db(1e-2) == pytest.approx(40.0) and sqnr_db(0.0) == math.inf and sqnr_db(math.inf) is None
    assert end_to_end_rel_err(1e-7, 40.0) == pytest.approx(1e-2)
    assert end_to_end_rel_err(1e-7, None) == 1e-7 and end_to_end_rel_err(1e-7, pd.NA) == 1e-7


def test_a_row_quantises_where_it_names_a_recipe():
    """results.formulas.quantised, which the notebook's table and bench's answer both ask: a missing recipe
    (None, NaN, pd.NA, as the loader leaves a row written before the column) or "" names none."""
    recipes = pd.Series(["e4m3fn:tensor", "", None, float("nan"), pd.NA, "e4m3fn:head"], dtype=object)
    assert quantised(recipes).tolist() == [True, False, False, False, False, True]


# ---- the emulated variants against float64 --------------------------------------------------------------


@pytest.mark.parametrize("name", EMULATED)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_emulated_fp8_passes_the_float32_gate_and_reports_the_rounding_apart(name, causal):
    q, k, v = tensors.qkv(b=2, h=4, n_q=48, d_k=32)
    r = correctness.check(variants.get(name), q, k, v, causal=causal)
    assert r.passed and r.rel_err <= TOLERANCE["float32"] and r.quant == EMULATED[name], r.describe()
    # the rounding's error and the output's SQNR, computed here in float64 from the format's definition
    per_head = EMULATED[name].endswith(":head")
    ref = _attention64(*(t.to(torch.float64) for t in (q, k, v)), causal=causal)
    rounded_ref = _attention64(*(_rounded(t, per_head) for t in (q, k, v)), causal=causal)
    out = variants.get(name)(q, k, v, causal=causal)
    assert r.quant_rel_err == pytest.approx(_rel(rounded_ref, ref), rel=1e-6)
    assert 1e-3 < r.quant_rel_err < 1e-1  # FP8's ~1e-2, far beyond float32's tolerance
    assert r.sqnr_db == pytest.approx(-20 * math.log10(_rel(out, ref)), abs=1e-6)
    # the output is no better than its rounded inputs allow: within a few dB of their own SQNR
    inputs_db = [-20 * math.log10(_rel(_rounded(t, per_head), t.to(torch.float64))) for t in (q, k, v)]
    assert min(inputs_db) - 10 < r.sqnr_db < max(inputs_db) + 10


@pytest.mark.parametrize("name", EMULATED)
def test_emulated_fp8_takes_padding_gqa_lower_right_and_a_window(name):
    q, k, v = tensors.qkv(b=2, h=4, h_kv=2, n_q=24, n_k=40, d_k=16)
    opts = dict(causal=True, key_lengths=torch.tensor([40, 31]), causal_align="lower-right", window=9)
    r = correctness.check(variants.get(name), q, k, v, **opts)
    assert r.passed and r.sqnr_db > 10, r.describe()


@pytest.mark.parametrize("name", EMULATED)
def test_emulated_fp8_in_bfloat16_passes_its_gate_and_returns_bfloat16(name):
    q, k, v = tensors.qkv(b=1, h=2, n_q=32, d_k=16, dtype="bfloat16")
    assert variants.get(name)(q, k, v).dtype == torch.bfloat16
    r = correctness.check(variants.get(name), q, k, v)
    assert r.passed and r.tolerance == TOLERANCE["bfloat16"], r.describe()


def test_per_head_scales_beat_one_per_tensor_on_heads_of_very_different_scales():
    """q * s and k / s leave every score as it was, but a per-tensor scale set by the largest head pushes
    the others into float8's subnormals; a scale per head keeps each at full precision."""
    q, k, v = tensors.qkv(b=1, h=4, n_q=64, d_k=32)
    s = (10 ** torch.tensor([0.0, 1.5, 3.0, 4.5])).view(1, 4, 1, 1)
    tensor, head = (correctness.check(variants.get(n), q * s, k / s, v) for n in EMULATED)
    assert tensor.passed and head.passed
    assert head.quant_rel_err < tensor.quant_rel_err / 2 and head.sqnr_db > tensor.sqnr_db + 3
    plain = correctness.check(variants.get("fp8_emulated_head"), q, k, v)  # per head: scale-invariant
    assert head.quant_rel_err == pytest.approx(plain.quant_rel_err, rel=0.25)


def test_a_kernel_that_rounds_otherwise_than_it_declares_fails_the_gate():
    """The gate reproduces the declared recipe, so a kernel that rounds per tensor while it declares per
    head errs by the difference and is wrong: its kernel error is not hidden in the rounding's."""
    declared_head = variants.Variant(
        fn=variants.get("fp8_emulated").fn, cap=Capability("liar", quant="e4m3fn:head")
    )
    q, k, v = tensors.qkv(b=1, h=4, n_q=32, d_k=16)
    q = q * torch.tensor([1.0, 3.0, 0.3, 10.0]).view(1, 4, 1, 1)
    r = correctness.check(declared_head, q, k, v)
    assert not r.passed and "e4m3fn:head-rounded inputs" in r.describe()


def test_capabilities_say_what_fp8_does_not_do():
    def problem(**kw):
        base = dict(device="cpu", dtype="float32", batch=1, heads=2, seq_len=8, seq_k=8, d_k=8, d_v=8)
        return Problem(**{**base, **kw})

    emulated = variants.get("fp8_emulated")
    assert emulated.check(problem()) is None and not emulated.cap.default
    assert "backward" in emulated.check(problem(pass_="fwdbwd"))
    assert "float64" in emulated.check(problem(dtype="float64"))
    assert "dropout" in emulated.check(problem(dropout=0.1))
    assert "paged K/V cache" in emulated.check(problem(seq_len=1, page_size=16, causal_align="lower-right"))
    for name in PAGED_EMULATED:  # an FP8 KV cache: paged cells only, forward only
        paged = variants.get(name)
        assert paged.check(problem()) == PAGED_ONLY and "backward" in paged.check(problem(pass_="fwdbwd"))
        assert paged.cap.quant == PAGED_EMULATED[name] and paged.cap.paged and not paged.cap.default
    sdpa8 = variants.get("fp8_sdpa")
    assert (
        sdpa8.availability("cpu")
        == "torch's FP8 SDPA runs FlashAttention-3's FP8 kernel: CUDA sm90 (Hopper) only"
    )
    assert sdpa8.cap.quant == "e4m3fn:head" and sdpa8.cap.dtypes == ("bfloat16",)
    assert not (sdpa8.cap.padding or sdpa8.cap.backward or sdpa8.cap.dropout or sdpa8.cap.gqa)


FAKE_FA3 = """
import torch
lib = torch.library.Library("flash_attn_3", "DEF")  # what torch's FA3 activation looks for; never called
lib.define("fwd(Tensor q) -> Tensor")
lib.define("bwd(Tensor q) -> Tensor")
"""
FA3_SCOPE = """
from torch.nn import attention
from attnbench.variants import fp8

seen = []
with fp8._fa3_active():
    seen.append(attention.current_flash_attention_impl())
try:
    with fp8._fa3_active():
        raise RuntimeError("the kernel failed")
except RuntimeError:
    pass
seen.append(attention.current_flash_attention_impl())
attention.activate_flash_attention_impl("FA3")  # active already (the user's): left as it was
with fp8._fa3_active():
    pass
seen.append(attention.current_flash_attention_impl())
print(seen)
"""


def test_fp8_sdpa_activates_fa3_for_its_call_only(tmp_path):
    """torch's FA3 activation (with a stand-in for FlashAttention-3's module, in a process of its own: it
    registers operators): active inside fp8_sdpa's scope, put back after it, even when the call raises, and
    left alone where it was active before."""
    import subprocess
    import sys

    (tmp_path / f"{fp8.FA3_MODULE}.py").write_text(FAKE_FA3)
    proc = subprocess.run(
        [sys.executable, "-c", FA3_SCOPE], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['FA3', None, 'FA3']"


# ---- an FP8 K/V cache in paged decode ------------------------------------------------------------------

PAGED_EMULATED = {"fp8_paged_emulated": "e4m3fn:tensor", "fp8_paged_emulated_head": "e4m3fn:head"}


def _paged_cell(variant: str, n_q: int = 2, page: int = 16) -> CellSpec:
    """3 sequences of contexts near 96 in pages of `page`, 4 query heads on 2 K/V heads, causal."""
    base = CellSpec(variant, "cpu", "float32", 3, 4, n_q, 16, 16, True, 0.0, "fwd")
    return dataclasses.replace(
        base, seq_k=96, kv_heads=2, lengths="uniform", page_size=page, causal_align="lower-right"
    )


def _paged_inputs(spec: CellSpec, kv_scales=(1.0, 1.0)):
    """The cell's q, pools, contexts and page table, each K/V head's pool slots times its scale."""
    q, k, v, contexts = make_inputs(spec, 0)
    s = torch.tensor(kv_scales).view(1, 1, 2, 1)  # (1, 1, H_kv, 1) over the pool (P, page, H_kv, d)
    return q, k * s, v * s, contexts, block_table(spec)


def _pool_rounded(pool: torch.Tensor, per_head: bool) -> torch.Tensor:
    """A pool (P, page, H_kv, d) rounded as an FP8 KV cache: one scale over the pool, or one per K/V head over
    every page and slot, amax / 448; written here from the format's definition, as _rounded."""
    x32 = pool.detach().to(torch.float32)
    amax = x32.abs().amax(dim=(0, 1, 3), keepdim=True) if per_head else x32.abs().amax()
    scale = amax / E4M3_MAX
    return ((x32 / scale).to(torch.float8_e4m3fn).to(torch.float32) * scale).to(torch.float64)


@pytest.mark.parametrize("recipe", quant.RECIPES)
def test_a_pool_of_pages_is_rounded_over_the_pool_or_per_kv_head(recipe):
    q, k, _, _, _ = _paged_inputs(_paged_cell("paged_chunked"), kv_scales=(1.0, 40.0))
    per_head = recipe.endswith(":head")
    assert quant.scales(k, recipe, pool=True).shape == ((1, 1, 2, 1) if per_head else (1, 1, 1, 1))
    assert torch.equal(quant.dequantise(k, recipe, pool=True).to(torch.float64), _pool_rounded(k, per_head))
    assert torch.equal(quant.dequantise(q, recipe), quant.dequantise(q, recipe, pool=False))  # q: as dense


@pytest.mark.parametrize("name", PAGED_EMULATED)
def test_fp8_paged_emulated_passes_the_gate_and_reports_the_kv_caches_rounding_apart(name):
    """The gate rounds q by the recipe and the pools as pools, and holds the kernel to the float64 reference
    of those: its kernel errs as float32 does, the rounding's error (~1e-2) and the SQNR stand apart."""
    spec = _paged_cell(name)
    q, k, v, contexts, table = _paged_inputs(spec)
    paged = dict(causal=True, causal_align="lower-right", key_lengths=contexts, block_table=table)
    r = correctness.check(variants.get(name), q, k, v, **paged)
    assert r.passed and r.rel_err <= TOLERANCE["float32"] and r.quant == PAGED_EMULATED[name], r.describe()
    per_head = PAGED_EMULATED[name].endswith(":head")
    rounded = (_rounded(q, per_head), *(_pool_rounded(t, per_head) for t in (k, v)))
    ref = correctness.reference(*(t.to(torch.float64) for t in (q, k, v)), **paged)
    rounded_ref = correctness.reference(*rounded, **paged)
    assert r.quant_rel_err == pytest.approx(_rel(rounded_ref, ref), rel=1e-6)
    assert 1e-3 < r.quant_rel_err < 1e-1
    out = variants.get(name)(q, k, v, **paged)
    assert r.sqnr_db == pytest.approx(-20 * math.log10(_rel(out, ref)), abs=1e-6)


@pytest.mark.parametrize(
    "rounds", ["per tensor", "per slot"], ids=["pool-per-tensor", "pool-as-dense-per-head"]
)
def test_a_paged_fp8_kernel_that_scales_its_pool_otherwise_than_it_declares_is_wrong(rounds):
    """Declared per head: a kernel that rounds the pool with one scale over it, or with the dense recipe's
    per-(B, H) scales read off a pool's (P, page) axes (a scale per slot), errs by the difference."""

    def liar(q, k, v, *, causal=False, key_lengths=None, block_table=None, scale=None, **_):
        pool = (lambda t: quant.dequantise(t, TENSOR, pool=True)) if rounds == "per tensor" else (
            lambda t: quant.dequantise(t, HEAD)
        )  # fmt: skip
        return paged_chunked(
            quant.dequantise(q, HEAD), pool(k), pool(v), causal=causal, key_lengths=key_lengths,
            block_table=block_table, scale=scale,
        ).to(q.dtype)  # fmt: skip

    cap = dataclasses.replace(variants.get("fp8_paged_emulated_head").cap, name="liar")
    spec = _paged_cell("fp8_paged_emulated_head")
    q, k, v, contexts, table = _paged_inputs(spec, kv_scales=(1.0, 40.0))
    paged = dict(causal=True, causal_align="lower-right", key_lengths=contexts, block_table=table)
    r = correctness.check(variants.Variant(fn=liar, cap=cap), q, k, v, **paged)
    assert not r.passed and "e4m3fn:head-rounded inputs" in r.describe()
    honest = correctness.check(variants.get("fp8_paged_emulated_head"), q, k, v, **paged)
    assert honest.passed, honest.describe()


def test_a_measured_paged_fp8_cell_records_its_recipe_and_the_rounding_apart():
    row = cell.measure_cell(_paged_cell("fp8_paged_emulated_head", n_q=1), QUICK)
    assert row["status"] == "ok", row["message"]
    assert row["quant_recipe"] == "e4m3fn:head" and row["rel_err"] <= TOLERANCE["float32"]
    assert 1e-3 < row["quant_rel_err"] < 1e-1
    assert row["sqnr_db"] == pytest.approx(-20 * math.log10(row["quant_rel_err"]), abs=0.01)
    assert row["fresh_rel_err"] <= TOLERANCE["float32"] and row["refill_rel_err"] <= TOLERANCE["float32"]
    assert row["kernel"] == "online softmax over the pages (float32 on an FP8-rounded K/V cache, emulated)"


# ---- rows -----------------------------------------------------------------------------------------------


def test_a_measured_cell_records_its_recipe_and_the_rounding_apart():
    spec = CellSpec("fp8_emulated_head", "cpu", "float32", 1, 2, 64, 16, 16, True, 0.25, "fwd")
    row = cell.measure_cell(spec, QUICK)
    assert row["status"] == "ok", row["message"]
    assert row["quant_recipe"] == "e4m3fn:head" and row["rel_err"] <= TOLERANCE["float32"]
    # the kernel's float32 error is nothing next to the rounding's: the SQNR is the rounding's alone
    assert 1e-3 < row["quant_rel_err"] < 1e-1
    assert row["sqnr_db"] == pytest.approx(-20 * math.log10(row["quant_rel_err"]), abs=0.01)
    assert row["kernel"] == "MATH (float32 on FP8-rounded inputs, emulated)"
    assert row["fresh_rel_err"] <= TOLERANCE["float32"] and row["refill_rel_err"] <= TOLERANCE["float32"]
    plain = cell.measure_cell(CellSpec("sdpa", "cpu", "float32", 1, 2, 64, 16, 16, True, 0.25, "fwd"), QUICK)
    assert all(plain.get(c) is None for c in ("quant_recipe", "quant_rel_err", "sqnr_db"))


@pytest.mark.slow  # a real run (worker, calibration, the numerics probe), then its report
def test_a_real_run_writes_the_columns_and_its_report_draws_fp8(tmp_path):
    out, rep = tmp_path / "run", tmp_path / "report"
    run_cli(
        "run", "--variants", "fp8_emulated,sdpa", "--seq-len", "64,128", "--heads", "2", "--d-k", "16",
        "--budget-ms", "5", "--warmup-ms", "1", "-q", "--out", str(out), check=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert {(r["variant"], r["seq_len"], r["status"]) for r in rows} == {
        (v, n, "ok") for v in ("fp8_emulated", "sdpa") for n in (64, 128)
    }
    for r in rows:
        fp8 = r["variant"] == "fp8_emulated"
        assert (r.get("quant_recipe") == "e4m3fn:tensor") if fp8 else r.get("quant_recipe") is None
        if fp8:
            assert r["sqnr_db"] == pytest.approx(-20 * math.log10(r["quant_rel_err"]), abs=0.01)
        else:
            assert r.get("sqnr_db") is None and r.get("quant_rel_err") is None
    meta = json.loads((out / "meta.json").read_text())
    assert meta["variant_capabilities"]["fp8_emulated"]["quant"] == "e4m3fn:tensor"
    run_cli("report", str(out), "--out", str(rep), check=True)
    (csv,) = rep.glob("speed-accuracy-*.csv")
    points = pd.read_csv(csv).set_index("variant")
    fp8 = points.loc["fp8_emulated"]
    assert fp8["quant_recipe"] == "e4m3fn:tensor" and fp8["e2e_rel_err"] > 1e3 * fp8["rel_err"]
    assert fp8["e2e_rel_err"] == pytest.approx(10 ** (-fp8["sqnr_db"] / 20))
    assert points.loc["sdpa", "e2e_rel_err"] == points.loc["sdpa", "rel_err"]
    md = (rep / "README.md").read_text().replace("\\_", "_")  # Markdown escapes the underscores
    assert "fp8_emulated rounds its inputs (e4m3fn:tensor): rel_err" in md
    assert "the most accurate variant that does not round, sdpa" in md and "SQNR dB" in md


def test_the_numerics_probe_shows_fps_end_to_end_error_beside_its_kernels():
    """An outside trial: the probe's rows for FP8 read 'fp8_emulated,cpu,float32,100.0,ok,3.96e-06', its
    kernel's error against its rounded inputs only, where large logits are what per-tensor scaling risks
    and method.md says the end-to-end error is shown wherever a rounding variant's error is. The probe
    records the recipe and the SQNR; its CSV, its figure, the report's table and the terminal's show the
    end-to-end error (results.formulas.end_to_end_rel_err) beside the kernel's."""
    from attnbench.harness.measure import numerics
    from attnbench.reports import plots, terminal
    from attnbench.reports.render import _probe_table
    from attnbench.results.formulas import record_e2e_rel_err

    probe = numerics.probe(["sdpa", "fp8_emulated"], ["cpu"], ["float32"])
    fp8_at = {r["q_scale"]: r for r in probe if r["variant"] == "fp8_emulated"}
    plain = [r for r in probe if r["variant"] == "sdpa"]
    assert all("sqnr_db" not in r and record_e2e_rel_err(r) is None for r in plain)
    for r in fp8_at.values():
        assert r["quant_recipe"] == "e4m3fn:tensor" and r["status"] == "ok"
        e2e = record_e2e_rel_err(r)
        assert e2e == pytest.approx(end_to_end_rel_err(r["rel_err"], r["sqnr_db"]))
        assert e2e > 1000 * r["rel_err"]  # the rounding's error dwarfs the kernel's
    assert record_e2e_rel_err(fp8_at[100.0]) > record_e2e_rel_err(fp8_at[1.0])  # large logits cost more
    fig, data = plots.numerics_figure(probe, "t")
    shown = data.set_index(["variant", "q_scale"])["e2e_rel_err"]
    assert shown[("fp8_emulated", 100.0)] == pytest.approx(record_e2e_rel_err(fp8_at[100.0]))
    assert pd.isna(shown[("sdpa", 100.0)])
    assert any(line.get_linestyle() == ":" for line in fig.axes[0].lines)
    wrong = {**fp8_at[100.0], "status": "wrong"}
    table = _probe_table([wrong])
    assert table.headers[5:7] == ("rel_err", "e2e rel_err")
    assert table.rows[0][6] == f"{record_e2e_rel_err(wrong):.2e}"
    assert "e2e rel_err" not in _probe_table([{**plain[0], "status": "wrong"}]).headers
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(terminal.probe_table(probe, 200))
    assert f"(e2e {record_e2e_rel_err(fp8_at[100.0]):.1e})" in console.export_text()
