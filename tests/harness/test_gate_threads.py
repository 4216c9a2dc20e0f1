"""The gate's own work on a small CPU problem (the float64 reference, forward and backward, its copies and
comparisons) runs on one thread, the variant's calls on the threads the run asked for, and the thread count is
put back; a large problem's reference keeps the threads (attention64.one_thread_below)."""

import pytest
import torch

import attnbench
from attnbench.harness.measure import attention64, correctness, numerics


@pytest.fixture
def two_threads():
    """torch on two threads for the test's length (a one-core machine's default would be one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def reference_threads(monkeypatch):
    """The thread count each float64 softmax of the reference (attention64.weights) ran on."""
    seen: list[int] = []
    weights = attention64.weights

    def counted(s, seen_keys):
        seen.append(torch.get_num_threads())
        return weights(s, seen_keys)

    monkeypatch.setattr(attention64, "weights", counted)
    return seen


class _Counted(torch.autograd.Function):
    """softmax attention whose forward and backward note the thread count they ran on."""

    calls: list[tuple[str, int]] = []

    @staticmethod
    def forward(ctx, q, k, v):
        _Counted.calls.append(("forward", torch.get_num_threads()))
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            out = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) * q.shape[-1] ** -0.5, -1) @ leaves[2]
        ctx.saved = (leaves, out)
        return out.detach()

    @staticmethod
    def backward(ctx, d_out):
        _Counted.calls.append(("backward", torch.get_num_threads()))
        leaves, out = ctx.saved
        return torch.autograd.grad(out, leaves, d_out)


def counted(q, k, v):
    return _Counted.apply(q, k, v)


def test_a_small_gate_runs_its_own_work_on_one_thread_and_the_variant_on_the_runs(
    two_threads, reference_threads
):
    _Counted.calls.clear()
    q, k, v = (torch.randn(1, 2, 100, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    result = correctness.check(attnbench.variant(counted), q, k, v, backward=True)
    assert result.passed and result.grad_passed, result
    assert _Counted.calls == [("forward", 2), ("forward", 2), ("backward", 2)]  # the variant: the run's
    assert reference_threads and set(reference_threads) == {1}  # the reference, forward and backward
    assert torch.get_num_threads() == 2  # put back


def test_the_numerics_probe_gates_on_the_runs_threads_and_its_reference_on_one(
    two_threads, reference_threads
):
    from conftest import as_a_fresh_process

    from attnbench import variants

    seen = []

    def noted(q, k, v, *, scale=None):
        seen.append(torch.get_num_threads())
        return variants.get("naive").fn(q, k, v, scale=scale)

    with as_a_fresh_process(None):  # the registry put back after
        variants.register("threads_noted", description="naive, noting its threads")(noted)
        records = numerics.probe(["threads_noted"], ["cpu"], ["float32"])
    assert [r["status"] for r in records] == ["ok"] * 3, records
    assert seen == [2, 2, 2] and set(reference_threads) == {1}
    assert torch.get_num_threads() == 2


def test_a_large_reference_keeps_the_threads(two_threads, reference_threads):
    q = torch.randn(1, 1, 512, 8)  # 512 x 512 scores: not small
    attention64.reference(q, q, q)
    assert set(reference_threads) == {2}
