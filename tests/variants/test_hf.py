"""transformers' attention functions as variants (variants/hf.py), with the real installed transformers:
each passes the float64 gate through the harness, with no glue in the test, and a bug in a function handed
to transformers' own AttentionInterface is caught through the same adapter."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest
from conftest import run_cli
from fakes import FakeTimer

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import InputCache, measure_cell
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.variants import hf, registry
from attnbench.variants.problem import Problem

needs_transformers = pytest.mark.skipif(not hf.installed(), reason="transformers is not installed")

QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)
TOL = correctness.TOLERANCE["float32"]
# a model-like shape: grouped-query heads (4 query heads on 2 k/v heads), causal, some keys padded
CELLS = {
    "gqa-causal": {"causal": True},
    "gqa-causal-padded": {"causal": True, "padding": 0.25},
    "full": {},
    "lower-right": {"causal": True, "causal_align": "lower-right", "seq_k": 40},
    "window": {"causal": True, "window": 8},
    "decode": {"causal": True, "seq_len": 1, "seq_k": 24},
}


def cell(variant: str, **axes) -> CellSpec:
    base = CellSpec(variant, "cpu", "float32", 2, 4, 32, 16, 16, False, 0.0, "fwd", kv_heads=2)
    return dataclasses.replace(base, **axes)


def measure(spec: CellSpec) -> dict:
    return measure_cell(spec, QUICK, InputCache(), timer=FakeTimer(median_ms=1.0, seed=7, call=True))


@needs_transformers
def test_the_registry_s_functions_are_variants_and_the_missing_ones_say_why():
    names = variants.all_variants()
    assert {"hf_eager", "hf_sdpa", "hf_flex", "hf_fa2", "hf_fa3", "hf_fa4"} <= set(names)
    assert not any(names[n].cap.default for n in names if n.startswith("hf_"))  # opt-in: --variants hf_sdpa
    for fa, package in (("hf_fa2", "flash_attn"), ("hf_fa3", "flash_attn_interface")):
        if importlib.util.find_spec(package) is None:  # the CPU machines: the reason names the package
            assert package in names[fa].cap.available("cuda")
        assert names[fa].availability("cpu") is not None


@needs_transformers
@pytest.mark.parametrize("axes", list(CELLS.values()), ids=list(CELLS))
@pytest.mark.parametrize("name", ["hf_eager", "hf_sdpa"])
def test_eager_and_sdpa_pass_the_gate(name, axes):
    row = measure(cell(name, **axes))
    assert (row["status"], row["message"]) == ("ok", ""), row
    assert row["rel_err"] <= TOL and row["fresh_rel_err"] <= TOL


@needs_transformers
@pytest.mark.slow  # torch.compile: about 5 s a shape on 2 cores
def test_flex_passes_the_gate_and_refuses_padding_on_cpu():
    """Padded CPU cells are unsupported: transformers recompiles flex with dynamic shapes after the first
    shape, and torch's CPU code generator fails on a padded mask with symbolic sizes, so whether such a cell
    ran would depend on the cells its worker ran before."""
    row = measure(cell("hf_flex", **CELLS["gqa-causal"]))
    assert (row["status"], row["message"]) == ("ok", ""), row
    assert row["rel_err"] <= TOL and row["fresh_rel_err"] <= TOL
    padded = measure(cell("hf_flex", **CELLS["gqa-causal-padded"]))
    assert padded["status"] == "unsupported" and "padded mask" in padded["message"], padded


@needs_transformers
def test_flex_refuses_backward_on_cpu_with_flex_s_reason_before_any_call():
    """torch's flex_attention has no CPU backward: hf_flex says so at check time, in flex's words, so a
    backward cell is recorded unsupported with torch's reason; its forward is supported."""
    if variants.get("flex").availability("cpu") is not None:
        pytest.skip(variants.get("flex").availability("cpu"))
    p = Problem(
        device="cpu", batch=2, heads=4, kv_heads=2, seq_len=32, seq_k=32, d_k=16, d_v=16, pass_="fwdbwd"
    )
    reason = variants.get("hf_flex").check(p)
    assert reason == variants.get("flex").check(p)
    assert reason.startswith("torch refused flex_attention: FlexAttention does not support backward on CPU")
    assert variants.get("hf_flex").check(dataclasses.replace(p, pass_="fwd")) is None
    row = measure(cell("hf_flex", pass_="fwdbwd"))
    assert (row["status"], row["message"]) == ("unsupported", reason), row


@needs_transformers
def test_a_wrong_mask_sign_in_a_registered_attention_function_is_wrong():
    from transformers import AttentionInterface
    from transformers.models.llama.modeling_llama import repeat_kv

    def wrong_sign(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        """transformers' eager attention with one bug: the additive mask subtracted instead of added."""
        k = repeat_kv(key, module.num_key_value_groups)
        v = repeat_kv(value, module.num_key_value_groups)
        scores = query @ k.transpose(2, 3) * scaling
        if attention_mask is not None:
            scores = scores - attention_mask.clamp(min=-1e4)
        weights = scores.softmax(dim=-1)
        return (weights @ v).transpose(1, 2).contiguous(), weights

    AttentionInterface.register("eager_wrong_sign", wrong_sign)
    hf.register_interface("eager_wrong_sign", "hf_wrong_sign")
    try:  # the adapter hands a registered function the mask eager gets: additive, as a model would
        assert measure(cell("hf_wrong_sign"))["status"] == "ok"  # nothing masked: the bug cannot show
        row = measure(cell("hf_wrong_sign", causal=True, padding=0.25))
        assert row["status"] == "wrong", row
    finally:
        registry._REGISTRY.pop("hf_wrong_sign")


@needs_transformers
@pytest.mark.slow  # a real run: a worker that imports transformers, calibration
def test_the_hf_preset_answers_for_a_model_in_a_tiny_run(tmp_path):
    out = tmp_path / "hf"
    args = ("--preset", "hf", "--variants", "hf_eager,hf_sdpa", "--model", "llama3-8b", "--seq-len", "64")
    budget = ("--warmup-ms", "2", "--budget-ms", "10", "--min-ms", "2")
    run_cli("run", *args, *budget, "--out", str(out), "-q", check=True)
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert {(r["variant"], r["status"], r["heads"], r["kv_heads"], r["causal"]) for r in rows} == {
        ("hf_eager", "ok", 32, 8, True),
        ("hf_sdpa", "ok", 32, 8, True),
    }
    # scipy's OpenBLAS pool (transformers imports scipy) is the worker's: no cell is noted for it, and one
    # worker runs both cells and their probes
    assert not any("thread" in r["message"] for r in rows), rows
    assert (out / "worker.log").read_text().count(" starting") == 1


def test_without_transformers_the_variants_say_how_to_install_it(monkeypatch):
    monkeypatch.setattr(hf, "installed", lambda: False)
    for name in ("hf_eager", "hf_sdpa", "hf_flex"):
        reason = variants.get(name).availability("cpu")
        assert reason == "transformers is not installed (pip install 'attnbench[transformers]')"
