"""benchmarks/harness_check.py's verdict logic on seeded per-round times: met, missed, noisy, and no
'all targets met' when nothing was compared (the timing itself is a benchmark, not run here)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "harness_check.py"


@pytest.fixture(scope="module")
def hc():
    return load_benchmark("harness_check")


def _rounds(ratio: float, spread: float, n: int = 9, seed: int = 0) -> tuple[list[float], list[float]]:
    """n rounds of (ours, theirs): theirs drifts ±50% between rounds (a busy machine), ours follows it
    times `ratio` with its own ±spread; the per-round ratio cancels the drift."""
    rng = random.Random(seed)
    theirs = [10.0 * (1 + rng.uniform(-0.5, 0.5)) for _ in range(n)]
    ours = [t * ratio * (1 + rng.uniform(-spread, spread)) for t in theirs]
    return ours, theirs


def test_paired_ratio_cancels_drift_and_meets(hc):
    rec = hc.timer_verdict(*_rounds(1.0, 0.01))
    assert rec["state"] == "met" and rec["met"] is True
    lo, hi = rec["ratio_ci95"]
    assert 0.97 <= lo <= rec["ratio_median"] <= hi <= 1.03


def test_tight_but_biased_ci_is_a_miss(hc):
    rec = hc.timer_verdict(*_rounds(1.08, 0.01))
    assert rec["state"] == "missed" and rec["met"] is False and rec["ratio_ci95"][0] > 1.03


def test_wide_ci_is_noisy_not_a_verdict(hc):
    rec = hc.timer_verdict(*_rounds(1.0, 0.2))
    assert rec["state"] == "noisy" and rec["met"] is None
    lines, status = hc.summary([{"check": "t", **rec}])
    assert status == 1 and lines[0].startswith("WARNING: noisy machine")
    assert not any("all targets met" in line for line in lines)


def test_summary_needs_a_comparison(hc):
    # e.g. --device cuda where every variant is unsupported: records without 'met'
    lines, status = hc.summary([{"check": "xformers", "status": "unsupported"}])
    assert status == 1 and lines == ["no comparison was made: nothing verified"]
    lines, status = hc.summary([{"check": "a", "met": True}, {"check": "b", "met": True}])
    assert status == 0 and lines == ["all targets met (2 checks)"]
    lines, status = hc.summary([{"check": "a", "met": True}, {"check": "b", "met": False}])
    assert status == 1 and lines == ["some targets missed (1 of 2 checks)"]


def test_paired_rounds_alternate_order(hc):
    calls = []
    ours, theirs = hc.paired_rounds(lambda: calls.append("o") or 1.0, lambda: calls.append("t") or 2.0, 4)
    assert "".join(calls) == "otto" * 2 and ours == [1.0] * 4 and theirs == [2.0] * 4


@pytest.mark.slow  # a subprocess that imports torch
def test_too_few_rounds_is_refused_before_any_work():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "3"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "harness_check: error: --rounds 3: need at least 9"


def test_flex_is_judged_against_the_best_sdpa_backend_of_the_same_pass(hc):
    results = [
        {"check": "sdpa_flash bf16 d128 N8192 fwd", "harness_tflops": 350.0},
        {"check": "sdpa_cudnn bf16 d128 N8192 fwd", "harness_tflops": 600.0},
        {"check": "flex bf16 d128 N8192 fwd", "harness_tflops": 480.0},
        {"check": "sdpa_cudnn bf16 d128 N8192 fwdbwd", "harness_tflops": 540.0},
        {"check": "flex bf16 d128 N8192 fwdbwd", "status": "unsupported"},
    ]
    rec = hc.flex_against_sdpa(results, "fwd")
    assert rec["best_sdpa_tflops"] == 600.0 and rec["ratio"] == 0.8 and rec["met"] is False
    assert "sdpa_cudnn" in rec["check"]
    assert hc.flex_against_sdpa(results, "fwdbwd") == {}  # flex not timed there: no verdict


def test_memory_check_is_met_within_two_percent(hc):
    assert hc.memory_check("m", 34_079_744, 34_078_720)["met"] is True
    rec = hc.memory_check("m", 300_000_000, 272_629_760)
    assert rec["met"] is False and rec["difference"] == "+10.039%"


def test_median_ci_is_the_order_statistics(hc):
    # 9 values: the distribution-free 95% CI of the median is the 2nd and 8th order statistics
    assert hc.median_ci(list(range(1, 10))) == (2.0, 8.0)
    assert all(x != x for x in hc.median_ci([1, 2, 3, 4, 5]))  # 5 values cannot reach 95%: NaN
