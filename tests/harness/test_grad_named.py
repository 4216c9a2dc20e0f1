"""A failing gradient check names the gradients that err (trial L: a custom backward that forgot the scale
in dq said "gradient rel_err 7.0e+00", not which of dq, dk and dv was wrong)."""

import pickle

import torch

from attnbench.harness.measure import correctness
from attnbench.harness.measure.gate_rows import fail_reason
from attnbench.harness.measure.own_gradient import Gradients, erring


class NoScaleInDq(torch.autograd.Function):
    """Attention whose hand-written backward leaves the scale out of dq alone (dk and dv are right)."""

    @staticmethod
    def forward(ctx, q, k, v):
        scale = q.shape[-1] ** -0.5
        p = torch.softmax(q @ k.transpose(-2, -1) * scale, -1)
        ctx.save_for_backward(q, k, v, p)
        return p @ v

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, p = ctx.saved_tensors
        scale = q.shape[-1] ** -0.5
        dp = d_out @ v.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))  # d(scores), scores = q k^T * scale
        return ds @ k, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ d_out  # dq: no * scale


def no_scale_in_dq(q, k, v, **_):
    return NoScaleInDq.apply(q, k, v)


def test_a_gradient_check_names_the_gradient_that_errs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 24, 16, generator=g) for _ in range(3))
    result = correctness.check(no_scale_in_dq, q, k, v, backward=True)
    assert result.passed and result.grad_passed is False  # the forward is right
    each = result.grad_rel_err.each
    assert each["dq"] > 1 and each["dk"] < 1e-5 and each["dv"] < 1e-5, each
    reason = fail_reason(result)
    assert reason.startswith("gradient rel_err ") and ", in dq (dk " in reason, reason
    assert reason.endswith(" within it)") and " and dv " in reason, reason
    assert pickle.loads(pickle.dumps(result.grad_rel_err)).each == each  # it crosses from a worker whole


def test_several_gradients_that_err_are_all_named():
    both = Gradients({"dq": 0.5, "dk": 2.0, "dv": 1e-7})
    assert both == 2.0 and erring(both, 4e-4) == ", in dq and dk (dv 1.0e-07 within it)"
    assert erring(Gradients({"dq": 1.0, "dk": 1.0, "dv": 1.0}), 4e-4) == ", in dq, dk and dv"
    assert erring(0.5, 4e-4) == ""  # a plain number (an approximation's own check): nothing to name


def test_a_run_cell_names_the_gradient_that_errs(monkeypatch):
    from attnbench import variants
    from attnbench.harness.measure.cell import measure_cell
    from attnbench.harness.sweep.settings import Settings
    from attnbench.harness.sweep.spec import CellSpec
    from attnbench.variants import registry

    registry._load_builtins()  # a copy made before they load would be empty later
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    variants.register("no_scale_in_dq", causal=False, padding=False, dropout=False)(no_scale_in_dq)
    spec = CellSpec("no_scale_in_dq", "cpu", "float32", 1, 2, 32, 16, 16, False, 0.0, "fwdbwd")
    row = measure_cell(spec, Settings(warmup_ms=5, budget_ms=20, min_ms=5))
    assert row["status"] == "wrong", row
    assert ", in dq (dk " in row["message"] and " within it)" in row["message"], row["message"]
