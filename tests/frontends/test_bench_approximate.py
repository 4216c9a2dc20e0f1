"""A kernel that approximates attention by design (random features, low rank, sparsity): declared
approximate=R, it is held to rel_err R against float64 in every gate, measured as ok and named approximate;
undeclared, it is wrong, and bench's answer says how to declare it; a remembered answer still fails."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import attnbench
from attnbench.results.store import read_rows
from attnbench.variants import Problem, VariantError
from attnbench.variants.registry import Capability
from tests.conftest import as_a_fresh_process, run_cli

QUICK = dict(heads=1, seq_len="64", dtype="float32", causal="no", padding=0.0)
FAST = dict(budget_ms=3, warmup_ms=1, min_ms=1, calibrate_ms=0)


def rounded(q, k, v):
    """Attention on q, k, v rounded to bfloat16 first: rel_err about 3e-3 in float32, over its 1e-4."""
    q, k, v = (t.to(torch.bfloat16).to(t.dtype) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v)


def test_declared_it_is_ok_within_its_bound_and_named_approximate(tmp_path):
    fn = attnbench.variant(rounded, approximate=0.02)
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "a", **QUICK, **FAST)
    mine = [r for r in read_rows(tmp_path / "a") if r["variant"] == "rounded"]
    assert {r["status"] for r in mine} == {"ok"} and {r["approximate"] for r in mine} == {0.02}
    assert all(1e-4 < r["rel_err"] < 0.02 for r in mine), [r["rel_err"] for r in mine]
    lines = str(bench).splitlines()
    assert lines[1].startswith("within its declared approximation (rel_err <= 0.02) in 1 of 1 cell"), lines
    assert any(line.startswith("float32: ") and "than sdpa" in line for line in lines), lines
    assert not bench.answer.wrong


def test_undeclared_it_is_wrong_and_the_answer_says_how_to_declare_it(tmp_path):
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(rounded, out=tmp_path / "w", **QUICK, **FAST)
    lines = str(bench).splitlines()
    wrong = "WRONG float32 (no mask; at N = 64): failed the float64 gate: its error is about bfloat16's"
    assert lines[1].startswith(wrong), lines  # q, k and v rounded to bfloat16 first: lowered.py names it
    assert lines[2].startswith("if it approximates attention by design, declare approximate=R"), lines
    assert bench.answer.wrong


def test_a_remembered_answer_fails_its_bound_on_fresh_inputs(tmp_path):
    """Within its bound on the inputs it was first given, and their answer again for any other inputs."""
    kept = {}

    def remembers(q, k, v):
        if q.shape not in kept:
            kept[q.shape] = rounded(q, k, v)
        return kept[q.shape].clone()

    fn = attnbench.variant(remembers, approximate=0.5)
    with as_a_fresh_process(tmp_path):
        attnbench.bench(fn, out=tmp_path / "r", **QUICK, **FAST)
    (row,) = [r for r in read_rows(tmp_path / "r") if r["variant"] == "remembers"]
    assert row["status"] == "wrong" and "does not follow the inputs" in row["message"], row["message"]
    assert "declared approximate" in row["message"]


@pytest.mark.parametrize("bound", [True, 1, 1.5, -0.1, "0.5"])
def test_a_bound_that_is_not_a_rel_err_is_refused(bound):
    with pytest.raises(VariantError, match="approximate is the rel_err against float64 it is held to"):
        Capability("mine", approximate=bound)


def test_an_approximations_dropout_is_not_checked():
    """The dropout check reads exact attention weights through the output: an approximation's cells with
    dropout are unsupported, with the reason."""
    from attnbench.variants.registry import Variant

    approx = Variant(lambda q, k, v, **kw: q, Capability("mine", approximate=0.1))
    reason = approx.check(Problem(device="cpu", dtype="float32", d_k=8, d_v=8, dropout=0.1))
    assert reason == "mine is approximate: its dropout cannot be checked against float64"


APPROX_FILE = """
import torch
import torch.nn.functional as F
from attnbench import register


@register("rounded", approximate=0.02, dropout=False)
def rounded(q, k, v):
    q, k, v = (t.to(torch.bfloat16).to(t.dtype) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v)
"""


def test_list_and_check_say_what_it_is_held_to(tmp_path):
    """`attnbench list` shows the bound among what it supports; `attnbench check` passes it at that bound
    and says so beside the pass, exit 0."""
    path = tmp_path / "approx.py"
    path.write_text(APPROX_FILE)
    listed = run_cli("list", "--variant-file", str(path), "--json")
    (mine,) = [r for r in json.loads(listed.stdout) if r["name"] == "rounded"]
    assert mine["supports"] == "backward,approx<=0.02"
    checked = run_cli("check", "--variant-file", str(path), "--variants", "rounded", "--dtype", "float32")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "declared approximate: held to rel_err 0.02" in checked.stdout


def test_a_bound_below_the_dtypes_tolerance_leaves_that_tolerance(tmp_path):
    """approximate=0.005 in bfloat16, whose tolerance is 0.025: its cells are held to 0.025, and the row
    says so, so that no line claims a bound its cells' errors pass."""
    fn = attnbench.variant(rounded, approximate=0.005)
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "b", **{**QUICK, "dtype": "float32,bfloat16"}, **FAST)
    held = {r["dtype"]: r["approximate"] for r in read_rows(tmp_path / "b") if r["variant"] == "rounded"}
    assert held == {"float32": 0.005, "bfloat16": 0.025}
    assert str(bench).splitlines()[1].startswith("within its declared approximation (rel_err <= 0.025)")


def test_a_run_holds_its_backward_to_its_own_forwards_derivative(tmp_path):
    """A forward+backward cell of an approximation whose backward returns zeros: wrong, saying against
    what (4 x its bound of 0.5 passed zeros before); the same forward with autograd's backward is ok."""

    class Zeros(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            return F.scaled_dot_product_attention(q * 0.9, k, v)

        @staticmethod
        def backward(ctx, d_out):
            return None, None, None

    def zero_grads(q, k, v):
        return Zeros.apply(q, k, v)

    def tempered(q, k, v):
        return F.scaled_dot_product_attention(q * 0.9, k, v)

    fns = [attnbench.variant(f, approximate=0.5) for f in (zero_grads, tempered)]
    with as_a_fresh_process(tmp_path):
        attnbench.run(variants=fns, out=tmp_path / "r", pass_="fwdbwd", **QUICK, **FAST)
    rows = {r["variant"]: r for r in read_rows(tmp_path / "r")}
    assert rows["zero_grads"]["status"] == "wrong" and rows["zero_grads"]["grad_rel_err"] == 1.0
    assert "> 0.01 against central differences of its own forward" in rows["zero_grads"]["message"]
    assert rows["tempered"]["status"] == "ok" and rows["tempered"]["grad_rel_err"] < 1e-3


def one_past(q, k, v, *, key_lengths=None):
    """Key padding one key off: key j seen where j <= key_lengths[b], not j < key_lengths[b]."""
    mask = None
    if key_lengths is not None:
        j = torch.arange(k.shape[-2], device=k.device)
        mask = (j[None, :] <= key_lengths[:, None])[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_padding_mask_one_key_past_is_named_and_not_offered_as_an_approximation(tmp_path):
    """Its padded cells err finitely (rel_err < 1) with no cause the gate knew, so the answer suggested
    declaring approximate=R, 'its cells are then measured as ok': the mistake is named instead, as the
    window's one key too many is, and no approximation is offered for it."""
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(one_past, out=tmp_path / "p", **{**QUICK, "padding": "0,0.25"}, **FAST)
    lines = str(bench).splitlines()
    wrong = (
        "WRONG float32 (padded keys; at N = 64): failed the float64 gate: its key padding mask shows one key "
    )
    assert any(line.startswith(wrong) for line in lines), lines
    assert not any("approximate=R" in line for line in lines), lines
    assert bench.answer.wrong
