"""FP8 on CUDA (skipped without a GPU): the emulated recipes on the device, and torch's quantized SDPA on
FlashAttention-3's FP8 kernel where it runs (sm90 with a FlashAttention-3 build), gated on its kernel
against the rounded inputs with the rounding's error apart, FA3 put back after every call."""

from __future__ import annotations

import time

import pytest
import torch

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import TOLERANCE
from attnbench.variants import fp8

pytestmark = pytest.mark.cuda


def _qkv(dtype: str, b=2, h=4, n=256, d=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, device="cuda").to(getattr(torch, dtype)) for _ in range(3)]


def _fp8_sdpa_or_skip():
    torch.cuda.init()  # the capability check reads the GPU only where CUDA is initialised
    var = variants.get("fp8_sdpa")
    reason = var.availability("cuda")
    if reason:
        pytest.skip(reason)
    return var


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["fp8_emulated", "fp8_emulated_head"])
def test_emulated_fp8_on_cuda_passes_its_gate_as_on_the_cpu(name, dtype):
    q, k, v = _qkv(dtype)
    r = correctness.check(variants.get(name), q, k, v, causal=True)
    assert r.passed and r.tolerance == TOLERANCE[dtype], r.describe()
    on_cpu = correctness.check(variants.get(name), *(t.cpu() for t in (q, k, v)), causal=True)
    assert r.quant_rel_err == pytest.approx(on_cpu.quant_rel_err, rel=1e-6)  # the same rounding


def test_fp8_sdpa_is_unavailable_off_hopper_with_a_reason():
    torch.cuda.init()
    major, minor = torch.cuda.get_device_capability()
    reason = variants.get("fp8_sdpa").availability("cuda")
    if major != 9:
        assert reason, "fp8_sdpa must say why it cannot run off sm90"
    print(f"sm{major}{minor}: fp8_sdpa availability: {reason or 'available'}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp8_sdpa_is_gated_on_its_kernel_with_the_rounding_apart(causal):
    var = _fp8_sdpa_or_skip()
    q, k, v = _qkv("bfloat16")
    before = torch.nn.attention.current_flash_attention_impl()
    r = correctness.check(var, q, k, v, causal=causal)
    assert torch.nn.attention.current_flash_attention_impl() == before  # FA3 put back after the call
    # the same recipe as the emulated per-head variant: the same rounded inputs, the same rounding error
    emulated = correctness.check(variants.get("fp8_emulated_head"), q, k, v, causal=causal)
    assert r.quant == "e4m3fn:head" and r.quant_rel_err == pytest.approx(emulated.quant_rel_err, rel=1e-9)
    # no better than exact arithmetic on the same rounded inputs, beyond chance (1 dB)
    assert r.sqnr_db is not None and r.sqnr_db < emulated.sqnr_db + 1, r.describe()
    print(
        f"fp8_sdpa kernel rel_err {r.rel_err:.2e}, SQNR {r.sqnr_db:.1f} dB (emulated {emulated.sqnr_db:.1f})"
    )
    # FA3 rounds the softmax weights to FP8 too: that is kernel error, judged at bfloat16's tolerance
    assert r.passed, r.describe()


def test_fp8_sdpa_rows_record_the_recipe_and_the_kernel():
    _fp8_sdpa_or_skip()
    spec = CellSpec("fp8_sdpa", "cuda", "bfloat16", 1, 8, 1024, 128, 128, True, 0.0, "fwd")
    row = measure_cell(spec, Settings(budget_ms=50, warmup_ms=10, min_ms=5))
    assert row["status"] in ("ok", "wrong"), row["message"]
    assert row["quant_recipe"] == "e4m3fn:head" and row["kernel"] == "FLASH_ATTENTION quantized (FA3 FP8)"
    assert row["quant_rel_err"] > 0 and row["sqnr_db"] is not None and row["tflops"] > 0
    assert torch.nn.attention.current_flash_attention_impl() is None  # nothing left active for later cells


def test_fa3_activation_around_each_call_costs_little_next_to_the_call():
    """torch has no scoped FA3 activation: fp8_sdpa registers and removes it around every call (timed with
    it). Measured here, so that a GPU session sees what that adds to a mid-sized call."""
    var = _fp8_sdpa_or_skip()
    q, k, v = _qkv("bfloat16", b=1, h=16, n=4096)
    var(q, k, v)  # warm
    torch.cuda.synchronize()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        with fp8._fa3_active():
            pass
    toggle_ms = (time.perf_counter() - t0) / reps * 1e3
    t0 = time.perf_counter()
    for _ in range(reps):
        var(q, k, v)
    torch.cuda.synchronize()
    call_ms = (time.perf_counter() - t0) / reps * 1e3
    print(f"FA3 activate + restore {toggle_ms:.3f} ms; fp8_sdpa (B=1, H=16, N=4096, d=128) {call_ms:.3f} ms")
    assert toggle_ms < 0.25 * call_ms, (toggle_ms, call_ms)
