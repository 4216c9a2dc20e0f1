"""chunked's shift-free blocks: when the Cauchy-Schwarz bound on the scores keeps every unshifted exp2 a
normal, finite number, the running row max is skipped. Both paths must give the float64 reference's answer
on every mask, and the bound must refuse what it cannot guarantee."""

from __future__ import annotations

import math

import pytest
import tensors
import torch

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.variants import chunked as chunked_module

chunked = variants.get("chunked").fn


_qkv = tensors.qkv


def _shift_free(q, k, v, dropout_p=0.0, stat_dtype=torch.float32):
    d = q.shape[-1]
    qs = (q * d**-0.5 / math.log(2.0)).reshape(q.shape[0] * k.shape[1], -1, d)
    return chunked_module._shift_free(qs, k, v, k.shape[2], dropout_p, stat_dtype)


def test_the_bound_accepts_ordinary_inputs_and_refuses_what_it_cannot_guarantee():
    q, k, v = _qkv()
    assert _shift_free(q, k, v)
    assert not _shift_free(q * 1000, k, v)  # scores past exp2's range: the running max is needed
    assert _shift_free(q * 40, k, v, stat_dtype=torch.float64)  # float64 has the range float32 lacks
    assert not _shift_free(q * 40, k, v)
    assert not _shift_free(q, k, v * 1e37)  # acc would overflow though every weight fits
    for bad in (float("nan"), float("inf")):
        q_bad = q.clone()
        q_bad[0, 0, 0, 0] = bad
        assert not _shift_free(q_bad, k, v)


AXES = {
    "full": dict(),
    "causal": dict(causal=True),
    "lower-right-empty-rows": dict(n_q=48, n_k=40, causal=True, causal_align="lower-right"),
    "window": dict(causal=True, window=7),
    "padding-with-an-empty-batch": dict(key_lengths=torch.tensor([0, 23])),
    "gqa": dict(h_kv=2, causal=True),
}


@pytest.mark.parametrize("axes", AXES.values(), ids=AXES.keys())
def test_both_paths_match_the_reference_forward_and_backward(axes, monkeypatch):
    axes = dict(axes)
    shape = {key: axes.pop(key) for key in ("n_q", "n_k", "h_kv") if key in axes}
    q, k, v = _qkv(**shape)
    assert _shift_free(q, k, v)  # the default inputs take the shift-free path

    def small_blocks(q, k, v, **kw):
        return chunked(q, k, v, block_q=8, block_k=16, **kw)

    outs = {}
    for path in ("shift-free", "online"):
        if path == "online":
            monkeypatch.setattr(chunked_module, "_shift_free", lambda *a: False)
        with torch.no_grad():
            outs[path] = small_blocks(q, k, v, **axes)
        report = correctness.gate(outs[path], q, k, v, **axes)
        assert report.passed, f"{path}: {report.describe()}"
        assert correctness.grad_errors(small_blocks, q, k, v, **axes) < 1e-5, path
    torch.testing.assert_close(outs["shift-free"], outs["online"], rtol=1e-5, atol=1e-6)


def test_tiny_unshifted_weights_keep_full_precision():
    """Every score near -80 (weights ~e^-80 ~ 1e-35 unshifted, normal floats): the output still matches
    float64 to float32 rounding, which a flush to zero or a subnormal would break."""
    n_k = 8
    q = torch.full((1, 1, 2, 1), 80.0)
    k = -torch.linspace(0.9, 1.0, n_k).view(1, 1, n_k, 1)  # scores -80 .. -72 with d = 1 (scale 1)
    v = torch.randn(1, 1, n_k, 3, generator=torch.Generator().manual_seed(1))
    assert _shift_free(q, k, v)
    with torch.no_grad():
        out = chunked(q, k, v)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2), dim=-1) @ v.double()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)


def test_large_scores_take_the_online_path_and_stay_finite():
    q, k, v = _qkv(n_q=16, n_k=24)
    q = q * 500  # softmax close to one-hot; unshifted exp2 would overflow
    assert not _shift_free(q, k, v)
    with torch.no_grad():
        out = chunked(q, k, v, causal=True)
    report = correctness.gate(out, q, k, v, causal=True)
    assert report.passed, report.describe()
