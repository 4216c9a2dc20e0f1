"""A kernel declared approximate has its backward held to its own forward's derivative (central
differences along random directions), since an approximation's gradients need not approach exact
attention's; where its forward is not smooth at that scale (it rounds its inputs), to exact attention's
gradients by a bound below 1, so that a backward of zeros fails either way."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnbench
from attnbench.harness.measure import correctness, own_gradient


def _qkv(n: int = 24):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, n, 16, generator=g) for _ in range(3)]


def tempered(q, k, v):
    """Attention at 0.9 of the scale: an approximation (rel_err about 0.05) with an honest backward."""
    return F.scaled_dot_product_attention(q * 0.9, k, v)


class Scaled(torch.autograd.Function):
    """The tempered forward with a hand-written backward that returns `factor` x the true gradients."""

    factor = 0.0

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return tempered(q, k, v)

    @staticmethod
    def backward(ctx, d_out):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
            grads = torch.autograd.grad(tempered(*leaves), leaves, d_out)
        return tuple(Scaled.factor * g for g in grads)


def scaled_backward(q, k, v):
    return Scaled.apply(q, k, v)


def rounded(q, k, v):
    """Attention on q, k, v rounded to bfloat16: piecewise constant, its backward straight through."""
    return F.scaled_dot_product_attention(*(t.to(torch.bfloat16).to(t.dtype) for t in (q, k, v)))


def test_an_honest_approximation_passes_against_its_own_derivative():
    r = correctness.check(attnbench.variant(tempered, approximate=0.2), *_qkv(), backward=True)
    assert r.ok and r.grad_against == own_gradient.OWN and r.grad_tolerance == own_gradient.TOLERANCE
    assert r.grad_rel_err < 1e-3, r.grad_rel_err


@pytest.mark.parametrize("factor", [0.0, 0.5])
def test_a_backward_that_is_not_its_forwards_derivative_fails(factor, monkeypatch):
    """Zeros passed before (4 x 0.5 >= 1), and so did half the gradient."""
    monkeypatch.setattr(Scaled, "factor", factor)
    r = correctness.check(attnbench.variant(scaled_backward, approximate=0.5), *_qkv(), backward=True)
    assert r.passed and r.grad_passed is False and r.grad_against == own_gradient.OWN
    assert r.grad_rel_err == pytest.approx(1 - factor, abs=0.02)


def test_a_rounding_forward_is_held_to_exact_gradients_below_one():
    q, k, v = _qkv()
    r = correctness.check(attnbench.variant(rounded, approximate=0.02), q, k, v, backward=True)
    assert r.ok and r.grad_against == own_gradient.EXACT and r.grad_tolerance == pytest.approx(0.08)
    assert own_gradient.exact_bound(0.9) == pytest.approx(0.95)  # 4 x 0.9 would pass zeros

    def rounded_zero_grads(q, k, v):
        return rounded(q, k, v).detach() + 0 * (q.sum() + k.sum() + v.sum())

    r = correctness.check(attnbench.variant(rounded_zero_grads, approximate=0.9), q, k, v, backward=True)
    assert r.passed and r.grad_passed is False and r.grad_rel_err == pytest.approx(1.0)


def test_an_exact_kernel_is_still_held_to_float64_attentions_gradients():
    r = correctness.check(attnbench.variant(tempered), *_qkv(), backward=True)
    assert not r.passed and r.grad_against == "" and r.grad_tolerance == pytest.approx(4e-4)
