"""Machine drift within a run: every cell carries the speed probe taken just before it; cells measured
more than 10% off the run's median speed are flagged `drift` and marked in the report."""

from __future__ import annotations

import json

import pytest
import synthetic
from conftest import run_cli

from attnbench import results
from attnbench.harness.calibrate import speed_probe
from attnbench.reports.render import prepare, render


def test_the_probe_measures_a_matmul():
    assert speed_probe("cpu") > 0


def _run(tmp_path, speeds):
    rows = [
        synthetic.cell("naive", 256 * 2**i, time_ms=1.0 * 4**i, speed_tflops=s) for i, s in enumerate(speeds)
    ]
    return synthetic.write_run(tmp_path / "run", rows)


def test_a_cell_measured_off_the_runs_usual_speed_is_flagged(tmp_path):
    df = results.load(_run(tmp_path, [0.20, 0.21, 0.19, 0.20, 0.15, 0.23]))
    assert df["speed_factor"].tolist() == pytest.approx([1.0, 1.05, 0.95, 1.0, 0.75, 1.15])
    assert df["drift"].tolist() == [False, False, False, False, True, True]
    md = render(prepare([_run(tmp_path / "r", [0.2, 0.2, 0.1])]), tmp_path / "report").readme.read_text()
    assert "Cells measured while the machine drifted" in md and "0.50×" in md


def test_rows_without_a_probe_are_not_flagged(tmp_path):
    rows = [synthetic.cell("naive", n, time_ms=1.0) for n in (256, 512)]
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    assert not df["drift"].any() and df["speed_factor"].isna().all()


@pytest.mark.slow
def test_every_measured_row_of_a_real_run_carries_its_probe(tmp_path):
    out = tmp_path / "run"
    run_cli("run", "--variants", "naive,chunked", "--seq-len", "32,64", "--heads", "2", "--warmup-ms", "1",
            "--budget-ms", "5", "--out", str(out), "-q", check=True)  # fmt: skip
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["speed_tflops"] > 0 for r in rows)
    df = results.load(out)
    assert df["speed_factor"].notna().all()
