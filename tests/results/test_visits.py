"""A cell's row from its visits (results.visits.summary): every rate of the median call from the pooled
median, and the phase columns adding up to elapsed_s as each visit's do."""

from __future__ import annotations

import math

import pytest

from attnbench.results.formulas import gbps, rate, summarize, tflops
from attnbench.results.schema import PHASE_COLUMNS
from attnbench.results.visits import summary


def _visit(time_ms: float, phases: dict[str, float]) -> dict:
    """One visit's row as harness.measure.cell writes it: its rates of its own median, its phases adding up
    to its elapsed_s."""
    samples = [time_ms * f for f in (0.9, 1.0, 1.1)]
    amounts = {
        "flops": 4e9,
        "executed_flops": 6e9,
        "kv_bytes": 3e6,
        "io_bytes": 5e6,
        "batch": 4,
        "seq_len": 64,
    }
    return {
        "cell_id": "c", "status": "ok", "message": "", **amounts, "samples_ms": samples, **summarize(samples),
        "tflops": tflops(4e9, time_ms), "executed_tflops": tflops(6e9, time_ms),
        "kv_gbps": gbps(3e6, time_ms), "io_gbps": gbps(5e6, time_ms), "tokens_per_s": rate(4 * 64, time_ms),
        **phases, "elapsed_s": round(sum(phases.values()) / 1e3, 3),
    }  # fmt: skip


FIRST = {"inputs_ms": 12.0, "first_call_ms": 30.0, "gate_ms": 80.0, "timing_ms": 200.0, "peak_ms": 9.0,
         "checks_ms": 40.0, "teardown_ms": 25.0}  # fmt: skip
# a later visit: its inputs made again (the worker's cache held another shape's), a warm-up call, its timing
LATER = {"inputs_ms": 60.0, "first_call_ms": 20.0, "timing_ms": 150.0, "checks_ms": 5.0}


def test_every_rate_is_of_the_pooled_median_not_the_first_visits():
    """tokens_per_s (and io_gbps, executed_tflops) were the first visit's: 165,734 tokens/s beside a median
    of 65.66 ms, which is 7,798."""
    row = summary([_visit(3.0, FIRST), _visit(60.0, LATER), _visit(70.0, LATER)])
    median = row["time_ms_median"]
    assert median > 50
    expected = {"tflops": tflops(4e9, median), "executed_tflops": tflops(6e9, median),
                "kv_gbps": gbps(3e6, median), "io_gbps": gbps(5e6, median),
                "tokens_per_s": rate(256, median)}  # fmt: skip
    for col, value in expected.items():
        assert math.isclose(row[col], value), (col, row[col], value)


def test_the_phases_of_a_cell_of_several_visits_add_up_to_its_wall_time():
    """The schema's promise (inputs, setup, first call, gate, timing, energy, peak, checks, teardown and
    rewarm add up to elapsed_s) held for each visit and not for the cell: a later visit's inputs were lost."""
    rows = [_visit(3.0, FIRST), _visit(4.0, LATER), _visit(5.0, LATER)]
    row = summary(rows)
    phases = sum(row.get(col) or 0.0 for col in PHASE_COLUMNS)
    assert row["elapsed_s"] == pytest.approx(sum(r["elapsed_s"] for r in rows))
    assert phases == pytest.approx(row["elapsed_s"] * 1e3, abs=1.5)  # each visit's elapsed_s is rounded to ms
    assert row["first_call_ms"] == 30.0 and row["rewarm_ms"] == 40.0  # the later visits' warm-ups
    assert row["inputs_ms"] == 132.0 and row["timing_ms"] == 500.0
