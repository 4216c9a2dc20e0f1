"""Declared shapes (variants.adapt): code written for a model ((B, N, H, d), a tuple return, an additive or
boolean mask) registers with one line and passes, or fails, the float64 gate through the real harness."""

from __future__ import annotations

import dataclasses

import pytest
import tensors
import torch
from conftest import DATA, load_plugin, run_cli
from fakes import FakeTimer

from attnbench import register, variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import InputCache, measure_cell
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.variants import registry

QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)
TOL = correctness.TOLERANCE["float32"]
AXES = {
    "plain": {},
    "causal-padded": {"causal": True, "padding": 0.25},
    "padded": {"padding": 0.25},  # key padding alone: attention_mask's (B, 1, 1, N_k), broadcast to N_q rows
    "lower-right": {"causal": True, "causal_align": "lower-right", "seq_k": 48},
    "window": {"causal": True, "window": 8},
}


@pytest.fixture(scope="module")
def plugin():
    return load_plugin(DATA / "declared_variants.py")


def cell(variant: str, **axes) -> CellSpec:
    return dataclasses.replace(CellSpec(variant, "cpu", "float32", 2, 3, 32, 8, 8, False, 0.0, "fwd"), **axes)


@pytest.mark.parametrize("axes", list(AXES.values()), ids=list(AXES))
@pytest.mark.parametrize("name", ["declared_model", "declared_sdpa_bool"])
def test_declared_variants_pass_the_gate_through_the_harness(plugin, name, axes):
    row = measure_cell(
        cell(name, **axes), QUICK, InputCache(), timer=FakeTimer(median_ms=1.0, seed=7, call=True)
    )
    assert (row["status"], row["message"]) == ("ok", ""), row
    assert row["rel_err"] <= TOL and row["fresh_rel_err"] <= TOL
    assert row["layout"] == ("bnhd" if name == "declared_model" else "bhnd")


def test_the_mask_is_made_once_per_cell_and_additive_in_the_inputs_dtype(plugin):
    plugin.CALLS.clear()
    timer = FakeTimer(median_ms=1.0, seed=7, call=True)
    row = measure_cell(cell("declared_model", causal=True, padding=0.25), QUICK, InputCache(), timer=timer)
    assert row["status"] == "ok" and row["setup_ms"] >= 0
    assert {m for _, m in plugin.CALLS} == {(torch.float32, (2, 1, 32, 32))}
    assert len(plugin.CALLS) >= timer.calls + 2


def test_a_wrong_mask_sign_is_caught(plugin):
    row = measure_cell(
        cell("declared_wrong_sign", causal=True), QUICK, InputCache(), timer=FakeTimer(median_ms=1.0)
    )
    assert row["status"] == "wrong", row
    # its subtracted mask is clamped to -1e4: the hidden keys win by their scores, as an inverted mask's do
    said = "failed the float64 gate: its mask is inverted: each query saw only the keys it should not"
    assert row["message"].startswith(said) and "neither subtracted" in row["message"], row["message"]
    q, k, v = tensors.qkv(b=2, h=3, n_q=20, d_k=8)
    assert not correctness.check(variants.get("declared_wrong_sign"), q, k, v, causal=True).passed
    assert correctness.check(variants.get("declared_model"), q, k, v, causal=True).passed


def test_a_function_that_adds_its_mask_declared_bool_is_told_to_declare_it_additive():
    """A function that adds its mask to the scores, declared mask="bool", fails the gate: a bool mask added
    counts True as 1 and hides nothing; the gate names the declaration that makes it right."""

    def adds(q, k, v, attn_mask=None):
        s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        return (s if attn_mask is None else s + attn_mask).softmax(-1) @ v

    q, k, v = tensors.qkv(b=2, h=3, n_q=20, d_k=8)
    lengths = torch.tensor([20, 13])
    for rules in ({"causal": True}, {"key_lengths": lengths}):
        told = correctness.check(registry.made(adds, "adds", {"mask": "bool"}, "test"), q, k, v, **rules)
        assert told.hint.startswith('it adds the mask to the scores: declare mask="additive"'), (
            told.describe()
        )
        assert correctness.check(
            registry.made(adds, "adds", {"mask": "additive"}, "test"), q, k, v, **rules
        ).ok


def test_a_tuple_not_returned_is_named(plugin):
    register("declared_not_tuple", takes="bnhd", returns="first", mask="additive")(
        lambda q, k, v, attn_mask=None, dropout_p=0.0, scale=None: q
    )
    q, k, v = tensors.qkv(b=1, h=2, n_q=4, d_k=8)
    with pytest.raises(TypeError, match="declared_not_tuple is declared returns='first' but returned Tensor"):
        variants.get("declared_not_tuple")(q, k, v)
    registry._REGISTRY.pop("declared_not_tuple")


@pytest.mark.parametrize(
    "decl,message",
    [
        ({"takes": "bshd"}, "variant bad_decl: takes must be one of ('bhnd', 'bnhd'), not 'bshd'"),
        (
            {"mask": "float"},
            "variant bad_decl: mask must be one of ('flags', 'bool', 'additive', 'keys'), not 'float'",
        ),
        ({"mask": "bool", "mask_arg": "attn mask"}, "variant bad_decl: mask_arg must be a keyword name"),
        (
            {"mask": "bool"},
            "variant 'bad_decl' declares a mask, handed as attn_mask=, but takes no attn_mask=: declare"
            " mask_arg= with its mask's name",
        ),
    ],
)
def test_a_bad_declaration_is_refused_at_registration_in_one_line(tmp_path, decl, message):
    bad = tmp_path / "bad_decl.py"
    bad.write_text(f"from attnbench import register\nregister('bad_decl', **{decl!r})(lambda q, k, v: q)\n")
    p = run_cli("list", "--variant-file", str(bad))
    assert p.returncode == 2 and p.stderr.strip().startswith(f"attnbench: error: {message}"), p.stderr


def test_attnbench_variant_takes_the_declarations_register_takes():
    """attnbench.variant(fn, takes=, returns=, mask=) adapts a model-style callable as @register does."""
    import attnbench

    def model_attn(q, k, v, attn_mask=None, dropout_p=0.0, scale=None):  # (B, N, H, d), additive mask
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        s = qt @ kt.transpose(-2, -1) * (scale or q.shape[-1] ** -0.5)
        if attn_mask is not None:
            s = s + attn_mask
        return (s.softmax(-1) @ vt).transpose(1, 2), None

    made = attnbench.variant(
        model_attn,
        name="inline_model",
        takes="bnhd",
        returns="first",
        mask="additive",
        causal=True,
        padding=True,
    )
    assert made.cap.layout == "bnhd"
    q, k, v = tensors.qkv(b=2, h=3, n_q=20, d_k=8)
    assert correctness.check(made, q, k, v, causal=True).passed
    with pytest.raises(ValueError, match="mask must be one of"):
        attnbench.variant(model_attn, name="inline_bad", mask="float")


def test_a_declared_mask_refuses_a_function_that_takes_it_under_another_name():
    """The Annotated Transformer's attention takes mask=: declared mask="bool" alone, it would be handed
    attn_mask= in every masked cell; it is refused at once with the name that fits."""
    import attnbench

    def annotated(query, key, value, mask=None, dropout=None):
        return query, None

    with pytest.raises(ValueError) as err:
        attnbench.variant(annotated, mask="bool", returns="first")
    assert str(err.value) == (
        "attnbench.variant: variant 'annotated' declares a mask, handed as attn_mask=, but takes no"
        ' attn_mask=: declare mask_arg="mask"'
    )
    assert attnbench.variant(annotated, mask="bool", mask_arg="mask", returns="first").cap.causal


def flash_causal(q, k, v, causal=False):
    """FlashAttention's causal (>= 2.1) and most decode kernels': aligned to the last key when N_q != N_k."""
    mask = None
    if causal:
        shift = k.shape[2] - q.shape[2]
        mask = torch.arange(k.shape[2])[None, :] <= torch.arange(q.shape[2])[:, None] + shift
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_function_whose_causal_is_lower_right_declares_it_so():
    """causal="lower-right": gated right in lower-right cells (handed causal=True, no causal_align=) and in
    square ones; a top-left cell with N_q != N_k is unsupported with the reason, not wrong."""
    register("flash_causal", causal="lower-right")(flash_causal)
    try:
        made = variants.get("flash_causal")
        assert made.cap.causal and made.cap.lower_right
        timer = FakeTimer(median_ms=1.0, seed=7, call=True)
        for axes in ({"causal": True, "causal_align": "lower-right", "seq_k": 48}, {"causal": True}, {}):
            row = measure_cell(cell("flash_causal", **axes), QUICK, InputCache(), timer=timer)
            assert (row["status"], row["message"]) == ("ok", ""), (axes, row)
        row = measure_cell(cell("flash_causal", causal=True, seq_k=48), QUICK, InputCache(), timer=timer)
        assert row["status"] == "unsupported", row
        assert row["message"].startswith(
            'its causal=True is aligned lower-right (declared causal="lower-right")'
        )
    finally:
        registry._REGISTRY.pop("flash_causal")


@pytest.mark.parametrize(
    "decl,message",
    [
        ({"causal": "top-right"}, "causal must be True, False or 'lower-right', not 'top-right'"),
        ({"causal": "lower-right", "mask": "bool"}, "a declared mask carries the alignment itself"),
        ({"causal": "lower-right", "lower_right": False}, "lower_right=False says not"),
    ],
)
def test_a_causal_alignment_declared_wrongly_is_refused(decl, message):
    import attnbench

    with pytest.raises(ValueError, match=message):
        attnbench.variant(lambda q, k, v, causal=False, attn_mask=None: q, name="bad_causal", **decl)
