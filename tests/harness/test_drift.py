"""Machine drift within a run: every cell carries the speed probe taken just before it; cells measured
more than 10% off the run's median speed are flagged `drift` and marked in the report."""

from __future__ import annotations

import json
import shutil
import socket
import warnings

import pytest
import synthetic
from conftest import run_cli

from attnbench import results
from attnbench.harness.measure import fingerprint
from attnbench.harness.measure.calibrate import speed_probe
from attnbench.reports.render import prepare, render
from attnbench.results import drift


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
    assert df["drift"].isna().all() and df["speed_factor"].isna().all()  # not judged: NA, not False
    # compare and the report's trust line count them by the one rule: 2 of 2 ok rows unprobed
    assert drift.unprobed(results.scalar_records(df)) == (2, 2)
    probed = [dict(r, speed_factor=1.0) for r in results.scalar_records(df)]
    assert drift.unprobed(probed + [dict(probed[0], status="error", speed_factor=None)]) == (0, 2)


def test_every_measured_row_of_a_real_run_carries_its_probe(carried_run):
    out = carried_run  # conftest's: a real run of four cells
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["speed_tflops"] > 0 for r in rows)
    assert {r["host"] for r in rows} == {socket.gethostname()} and {r["gpu_uuid"] for r in rows} == {None}
    df = results.load(out)
    assert df["speed_factor"].notna().all()


@pytest.mark.slow
def test_resume_redo_drift_measures_the_drifted_cells_again(tmp_path, carried_run):
    out = tmp_path / "run"
    shutil.copytree(carried_run, out)  # a real run of four cells, finished (conftest's: copied, not changed)
    meta = json.loads((out / "meta.json").read_text())
    # the checkout may have changed since the session began: not this test's subject
    meta["fingerprint"].update(git_commit=fingerprint.git_commit(), code_sha256=fingerprint.code_sha256())
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    lines = (out / "rows.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for r, speed in zip(rows, (0.2, 0.1, 0.2, 0.2), strict=True):  # as if another tenant halved the machine
        r["speed_tflops"] = speed  # while cell 2 ran (the real probes of a busy VM wander on their own)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the edit stands in for a busy machine, not a forgery: the run as one made before written.json
    (out / "written.json").unlink()
    assert results.load(out)["drift"].tolist() == [False, True, False, False]
    p = run_cli("run", "--resume", "--redo-drift", "--out", str(out), "-q", check=True)
    assert "1 ok" in p.stderr and "something other than attnbench" not in p.stderr
    again = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(again) == 5 and again[-1]["cell_id"] == rows[1]["cell_id"]  # appended, nothing rewritten
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second row that --redo-drift made is no repeat to warn about
        df = results.load(out)
    assert df["cell_id"].tolist() == [r["cell_id"] for r in rows]  # the new row replaces the old, in place
    assert df.iloc[1]["finished_at"] == again[-1]["finished_at"]


def test_redo_drift_needs_resume(tmp_path):
    p = run_cli("run", "--redo-drift", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "--resume" in p.stderr and not (tmp_path / "r").exists()
