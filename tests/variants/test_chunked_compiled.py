"""chunked_compiled: the float64 gate (forward, and gradients through chunked's eager backward), compiled
steps actually taken, and more problem shapes than dynamo's recompile limit staying compiled."""

from __future__ import annotations

import pytest
import tensors
import torch
from torch._dynamo.utils import counters

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.variants import Problem, chunked_compiled


def _inputs(b, h, h_kv, n, d, seed=0):
    return tensors.qkv(b=b, h=h, h_kv=h_kv, n_q=n, d_k=d, seed=seed)


def test_registered_off_the_default_sweeps_and_without_dropout():
    var = variants.get("chunked_compiled")
    assert not var.cap.default and var.cap.setup is not None
    reason = var.check(Problem(dropout=0.1))
    assert reason.startswith("chunked_compiled does not support dropout")
    assert var.check(Problem(causal=True, padding=0.25, pass_="fwdbwd", kv_heads=4)) is None


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gate_forward_and_backward_with_compiled_blocks(causal, monkeypatch):
    """n = 600 with 256 x 512 blocks: the unmasked blocks go through the compiled step (counted), the
    diagonal and last blocks through chunked's eager code; GQA (4 query heads on 2 k/v heads)."""
    var = variants.get("chunked_compiled")
    q, k, v = _inputs(2, 4, 2, 600, 16)
    step, calls = chunked_compiled.compiled_step(), []
    monkeypatch.setitem(chunked_compiled._compiled, "step", lambda *a: calls.append(a[0].shape) or step(*a))
    fn = var.bind(q, k, v, causal=causal, key_lengths=None)  # the setup hook compiles
    assert len(calls) == (1 if causal else 6)  # 3 x 2 blocks; causal: rows 512.. see keys 0..512 whole
    r = correctness.check(var, q, k, v, causal=causal, key_lengths=None, backward=True)
    assert r.ok, r.describe()
    with torch.no_grad():
        out = fn(q, k, v, causal=causal, key_lengths=torch.tensor([600, 450]))  # padding: eager blocks too
    assert correctness.gate(out, q, k, v, causal=causal, key_lengths=torch.tensor([600, 450])).passed


def test_large_scores_take_the_compiled_online_step(monkeypatch):
    """Scores past exp2's range unshifted (q x 300): the compiled step keeps the running max and passes."""
    var = variants.get("chunked_compiled")
    q, k, v = _inputs(1, 2, 2, 600, 16)
    q = q * 300
    step, flags = chunked_compiled.compiled_step(), []
    monkeypatch.setitem(chunked_compiled._compiled, "step", lambda *a: flags.append(a[-1]) or step(*a))
    with torch.no_grad():
        out = var.fn(q, k, v)
    assert flags and not any(flags)  # compiled blocks, none shift-free
    assert correctness.gate(out, q, k, v).passed


@pytest.mark.slow
def test_more_shapes_than_dynamos_limit_stay_compiled(monkeypatch, request):
    """More step shapes than dynamo allows per code object (its default is 8; lowered to 2 here, so that 3
    compilations show it rather than 9) are compiled once each, then run again with recompilation
    forbidden: the variant raised the limit, and none fell back to eager or needs a new graph."""
    assert chunked_compiled.RECOMPILE_LIMIT > 8  # past dynamo's default, which the variant raises it from
    # the config's own patch: monkeypatch's undo deletes a config module's attributes (flex then fails)
    low = torch._dynamo.config.patch(recompile_limit=2, accumulated_recompile_limit=2)
    low.__enter__()
    request.addfinalizer(lambda: low.__exit__(None, None, None))
    monkeypatch.delitem(chunked_compiled._compiled, "step", raising=False)  # made again, under the low limit
    var = variants.get("chunked_compiled")
    shapes = [(1, 2, 2, 40 + 8 * i, 8) for i in range(3)]  # each one block: one step shape per problem
    before = counters["stats"]["unique_graphs"]
    for shape in shapes:
        q, k, v = _inputs(*shape)
        var.bind(q, k, v, causal=False, key_lengths=None)
    assert counters["stats"]["unique_graphs"] - before >= 3
    assert torch._dynamo.config.recompile_limit >= chunked_compiled.RECOMPILE_LIMIT
    with torch.compiler.set_stance("fail_on_recompile"), torch.no_grad():
        for shape in shapes:
            q, k, v = _inputs(*shape)
            out = var.fn(q, k, v)
            assert correctness.gate(out, q, k, v).passed
