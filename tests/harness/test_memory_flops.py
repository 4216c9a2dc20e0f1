"""Peak memory against analytic sizes, and the FLOP convention."""

from __future__ import annotations

import pytest
import torch

from attnbench import variants
from attnbench.harness.measure.guard import predict_peak_bytes
from attnbench.harness.measure.memory import peak_cpu
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import attention_flops, tflops


def test_naive_peak_is_two_score_tensors_plus_output():
    b, h, n, d = 1, 8, 512, 64
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    naive = variants.get("naive").fn
    with torch.no_grad():
        got = peak_cpu(lambda: naive(q, k, v))
    scores, out = b * h * n * n * 4, b * h * n * d * 4
    assert got == 2 * scores + out


def test_chunked_peak_is_linear_and_far_below_naive():
    b, h, d = 1, 8, 64
    peaks = {}
    for n in (1024, 2048):
        q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
        with torch.no_grad():
            fns = [variants.get(name).fn for name in ("chunked", "naive")]
            peaks[n] = tuple(peak_cpu(lambda f=f, q=q, k=k, v=v: f(q, k, v)) for f in fns)
    assert peaks[2048][1] / peaks[1024][1] == pytest.approx(4.0, rel=0.05)  # quadratic
    assert peaks[2048][0] / peaks[1024][0] < 1.6  # linear plus a fixed block buffer
    assert peaks[2048][0] * 15 < peaks[2048][1]


def test_guard_prediction_is_above_the_measured_peaks():
    """The guard's prediction (inputs and the float64 reference included) covers what a call measures."""
    n = 512
    q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
    for name, memory_class in (("naive", "quadratic"), ("chunked", "linear")):
        fn = variants.get(name).fn
        with torch.no_grad():
            measured = peak_cpu(lambda fn=fn: fn(q, k, v))
        cell = CellSpec(name, "cpu", "float32", 1, 8, n, 64, 64, False, 0.0, "fwd")
        assert predict_peak_bytes(cell, memory_class) > measured > 0
    big = CellSpec("chunked", "cpu", "float32", 1, 8, 16384, 64, 64, False, 0.0, "fwd")
    assert predict_peak_bytes(big, "linear") * 20 < predict_peak_bytes(big, "quadratic")


def test_flops_convention():
    # 4 * B * H * N^2 * d for d_k = d_v = d (FlashAttention's benchmarks)
    assert attention_flops(2, 8, 1024, 1024, 64, 64, causal=False) == 4 * 2 * 8 * 1024 * 1024 * 64
    full = attention_flops(1, 1, 100, 100, 32, 32, causal=False)
    # causal counts the pairs attended, 100 * 101 / 2 of them (the diagonal too), not half of 100 * 100
    assert attention_flops(1, 1, 100, 100, 32, 32, causal=True) == 2 * (32 + 32) * 5050
    assert attention_flops(1, 1, 100, 100, 32, 32, causal=False, pass_="fwdbwd") == int(3.5 * full)
    assert attention_flops(1, 1, 100, 100, 32, 32, causal=False, pass_="bwd") == int(2.5 * full)
    assert attention_flops(1, 1, 10, 20, 8, 16, causal=False) == 2 * 10 * 20 * (8 + 16)
    assert tflops(10**12, 1000.0) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        attention_flops(1, 1, 1, 1, 1, 1, causal=False, pass_="sideways")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q,n_k,lengths", [(7, 7, None), (5, 9, [9, 3]), (9, 5, [0, 5, 2]), (64, 64, [40])])
def test_flops_count_exactly_the_pairs_the_reference_mask_lets_through(causal, n_q, n_k, lengths):
    """FLOPs = 2 (d_k + d_v) per (query, key) pair that the float64 reference's own mask keeps."""
    from attnbench.harness.measure.correctness import reference

    batch = len(lengths) if lengths else 1
    q, k = (
        torch.zeros(batch, 1, n_q, 4, dtype=torch.float64),
        torch.zeros(batch, 1, n_k, 4, dtype=torch.float64),
    )
    eye = torch.eye(n_k, dtype=torch.float64).expand(batch, 1, n_k, n_k)  # v = identity: out = weights
    kl = torch.tensor(lengths) if lengths else None
    weights = reference(q, k, eye, causal=causal, key_lengths=kl)  # (B, 1, N_q, N_k); uniform over kept keys
    kept = int((weights > 0).sum())
    flops = attention_flops(batch, 1, n_q, n_k, 4, n_k, causal=causal, key_lengths=lengths)
    assert flops == 2 * (4 + n_k) * kept


def test_the_cpu_peak_keeps_the_calls_stderr_and_drops_the_profilers_own_lines(capfd):
    """Kineto's 'USDT: ... profiler_start/stop' lines are not the user's: only they go; what the measured
    call writes stays, and file descriptor 2 is put back."""
    import os

    def call():
        os.write(2, b"the call's own line\n")
        return torch.zeros(1024)

    assert peak_cpu(call) >= 4096
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "the call's own line\nafter\n"


def test_the_free_memory_a_cpu_cell_is_guarded_by_closes_what_it_reads():
    """/proc/meminfo was left open for the collector: under `python -X dev` every guarded cell printed a
    ResourceWarning on the run's stderr and in its worker.log."""
    import gc
    import warnings

    from attnbench.harness.workers.worker import free_memory

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert free_memory("cpu") > 0
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
