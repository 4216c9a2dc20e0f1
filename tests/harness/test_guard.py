"""The memory guard predicts a cell's peak from its own series' measured peaks where it has them.

Trial U: the formula (3 score tensors for every quadratic variant) predicted 24.5 GiB for naive,
stable_softmax and sdpa_math alike at N = 16384 and skipped all three, though naive's measured 9.0 GiB at
N = 12288 grows to 16 GiB there, under the 20.1 GiB the guard allowed.
"""

from __future__ import annotations

import torch

import attnbench
from attnbench import variants
from attnbench.harness.measure.guard import MeasuredPeaks, fits, predict, predict_peak_bytes
from attnbench.harness.measure.memory import peak_cpu
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import bytes_text
from attnbench.results.store import read_rows

H, D = 2, 32


def cell(name: str, n: int) -> CellSpec:
    return CellSpec(name, "cpu", "float32", 1, H, n, D, D, False, 0.0, "fwd")


def measured_peak(name: str, n: int) -> int:
    """A forward call's real peak, as a run's worker measures it (harness.measure.memory)."""
    q, k, v = (torch.randn(1, H, n, D) for _ in range(3))
    fn = variants.get(name).fn
    with torch.no_grad():
        return peak_cpu(lambda: fn(q, k, v))


def test_prediction_grows_each_variants_own_measured_peaks():
    """From real peaks at N = 256 and 512: naive's prediction at 1024 covers its real peak there and sits
    below the formula's, and naive and stable_softmax (one memory class) are predicted apart."""
    got = {}
    for name in ("naive", "stable_softmax"):
        peaks = MeasuredPeaks(
            [
                {**cell(name, n).to_dict(), "status": "ok", "peak_mem_bytes": measured_peak(name, n)}
                for n in (256, 512)
            ]
        )
        got[name] = predict(cell(name, 1024), "quadratic", measured=peaks.of(cell(name, 1024)))
        assert got[name].bytes >= measured_peak(name, 1024)
        assert "measured at seq_len 512, x4.00 as the quadratic formula grows" in got[name].basis
    formula = predict_peak_bytes(cell("naive", 1024), "quadratic")
    assert got["naive"].bytes < formula
    assert got["naive"].bytes < got["stable_softmax"].bytes
    # nothing measured shorter (a longer cell's peak is no evidence): the formula, which says so
    longer = MeasuredPeaks([{**cell("naive", 2048).to_dict(), "status": "ok", "peak_mem_bytes": 1 << 20}])
    alone = predict(cell("naive", 1024), "quadratic", measured=longer.of(cell("naive", 1024)))
    assert alone.bytes == formula and alone.basis.startswith("the quadratic formula: no shorter cell")


def test_peaks_that_grow_faster_than_the_formula_are_grown_at_their_own_rate():
    """A 'linear' variant whose peak doubled per doubling of N while the formula's growing bytes did too is
    grown x2 per x2; one whose peak quadrupled is grown at that rate, and the line says so."""
    spec = cell("chunked", 1024)  # its formula's growing bytes (its inputs) double per doubling of N
    x2 = {(256, 256): 1 << 20, (512, 512): 2 << 20}
    x4 = {(256, 256): 1 << 20, (512, 512): 4 << 20}
    plain, fast = (predict(spec, "linear", measured=m) for m in (x2, x4))
    assert "x2.00 as the linear formula grows" in plain.basis
    assert fast.bytes - plain.bytes == (16 << 20) - (4 << 20)  # 4 MiB x4, not x2; the inputs alike
    assert "x4.00 as its peaks grew, faster than the formula from seq_len 256 on" in fast.basis
    # a peak that is not an ok cell's is no evidence
    bad = MeasuredPeaks([{**spec.to_dict(), "seq_len": 512, "status": "wrong", "peak_mem_bytes": 1 << 40}])
    assert bad.of(spec) == {}


def test_a_runs_skip_line_says_the_measured_peak_it_grew(tmp_path):
    """A real run: naive and stable_softmax measured at N = 64 to 256, and at N = 2048 skipped by a guard
    set to about 16 MiB of this machine's free memory. Each skip predicts from its own variant's peak at
    256, by the run's own code path (LocalExecutor -> SkipAhead -> CellRunner's guard), below the formula's
    and above the real peak at 2048."""
    from attnbench.harness.workers.worker import free_memory

    fraction = (16 << 20) / free_memory("cpu")
    out = tmp_path / "run"
    attnbench.run(
        variants="naive,stable_softmax", seq_len=[64, 128, 256, 2048], heads=H, d_k=D, budget_ms=5,
        warmup_ms=1, min_ms=1, calibrate_ms=0, memory_guard=fraction, out=out, progress=False,
    )  # fmt: skip
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(out)}
    predicted = {}
    for name in ("naive", "stable_softmax"):
        assert all(rows[name, n]["status"] == "ok" for n in (64, 128, 256))
        skipped = rows[name, 2048]
        assert skipped["status"] == "skipped", skipped
        assert (
            f"(its {bytes_text(rows[name, 256]['peak_mem_bytes'])} measured at seq_len 256, x64.00"
            in skipped["message"]
        )
        predicted[name] = skipped["predicted_peak_bytes"]
        assert measured_peak(name, 2048) <= predicted[name]
    assert predicted["naive"] < predict_peak_bytes(cell("naive", 2048), "quadratic")
    assert predicted["naive"] < predicted["stable_softmax"]
    assert fits(predict(cell("naive", 2048), "quadratic"), 1 << 20, 0.9).endswith(
        "(the quadratic formula: no shorter cell of its series measured) exceeds 90% of the 1 MiB available"
    )
