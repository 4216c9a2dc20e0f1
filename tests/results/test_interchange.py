"""`attnbench export --format hud|bencher`: a run's ok cells as the PyTorch HUD's benchmark records and as
Bencher's metric format, read back and checked against the run's own rows (results/interchange.py)."""

from __future__ import annotations

import io
import json
import shutil
from csv import DictReader

import pytest
from conftest import ROOT, run_cli

from attnbench.results import load

RUN = ROOT / "results" / "reference" / "paged-epyc-2core"


@pytest.fixture(scope="module")
def rows():
    return load(RUN)


def test_bencher_has_one_benchmark_per_ok_cell_with_latency_in_nanoseconds(rows):
    out = run_cli("export", str(RUN), "--format", "bencher", check=True).stdout
    bmf = json.loads(out)
    ok = rows[rows["status"] == "ok"]
    assert set(bmf) == set(ok["cell_id"])
    for _, r in ok.iterrows():
        latency = bmf[r["cell_id"]]["latency"]
        assert latency["value"] == pytest.approx(r["time_ms_median"] * 1e6, rel=1e-5)
        assert latency["lower_value"] <= latency["value"] <= latency["upper_value"]
        assert bmf[r["cell_id"]]["tflops"]["value"] == pytest.approx(r["tflops"], rel=1e-5)
        assert all(set(m) <= {"value", "lower_value", "upper_value"} for m in bmf[r["cell_id"]].values())
        for name in ("latency", "tflops"):  # no float noise from the unit's scaling (268692.99999999994)
            values = bmf[r["cell_id"]][name].values()
            assert all(len(f"{v:.15g}".replace(".", "").strip("0")) <= 6 for v in values), (name, values)


def test_hud_records_carry_the_benchmark_model_metric_and_runner(rows):
    records = json.loads(run_cli("export", str(RUN), "--format", "hud", check=True).stdout)
    ok = rows[rows["status"] == "ok"]
    times = [r for r in records if r["metric"]["name"] == "time_ms_median"]
    assert len(times) == len(ok)
    for rec in times:
        row = ok[ok["cell_id"] == rec["benchmark"]["extra_info"]["cell_id"]].iloc[0]
        assert rec["benchmark"]["name"] == "attnbench" and rec["benchmark"]["mode"] == "inference"
        assert rec["model"] == {"name": row["variant"], "type": "attention", "origins": ["attnbench"]}
        expected = list(row["visit_medians_ms"]) or [row["time_ms_median"]]
        assert rec["metric"]["benchmark_values"] == pytest.approx(expected, rel=1e-6)
        assert rec["runners"][0]["type"] == "cpu" and rec["runners"][0]["extra_info"]["torch"]
    assert {r["metric"]["name"] for r in records} >= {"time_ms_median", "tflops", "peak_mem_bytes", "kv_gbps"}


def test_each_cell_is_its_own_hud_series(rows):
    """benchmark.name was always "attnbench" and model.name the variant, so a variant's cells at every N and
    shape shared one (benchmark, model, metric, mode, dtype) key, the shape only in benchmark.extra_info
    (trial S, L3): a HUD view that does not split on it averages N = 256 with N = 1024. The cell's input shape
    is in metric.extra_info.input_shape, where tritonbench's converter to the HUD's table puts it, so that
    each record of a run has a key of its own."""
    records = json.loads(run_cli("export", str(RUN), "--format", "hud", check=True).stdout)
    ok = rows[rows["status"] == "ok"]
    keys = [
        (r["benchmark"]["name"], r["model"]["name"], r["metric"]["name"], r["benchmark"]["mode"],
         r["benchmark"]["dtype"], r["metric"]["extra_info"]["input_shape"])
        for r in records
    ]  # fmt: skip
    assert len(set(keys)) == len(records) and sum(k[2] == "time_ms_median" for k in keys) == len(ok)
    for rec in records:
        cell = rec["benchmark"]["extra_info"]["cell_id"]
        variant, shape = cell.split("|", 1)
        assert rec["model"]["name"] == variant and rec["metric"]["extra_info"] == {"input_shape": shape}
    assert len({r["model"]["name"] for r in records}) < len(ok)  # the variant alone keys no cell


def test_a_version_the_run_did_not_record_is_left_out_of_the_hud_runner(tmp_path):
    """A meta.json without fingerprint.torch (an old or edited run) exported "torch": "", a known-empty
    version to the HUD; a value not recorded is left out of the runner's extra_info."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    del meta["fingerprint"]["torch"]
    meta["fingerprint"]["git_commit"] = None
    meta["fingerprint"].pop("code_sha256", None)
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "written.json").unlink(missing_ok=True)  # the edit is ours, not a forgery
    records = json.loads(run_cli("export", str(run), "--format", "hud", check=True).stdout)
    assert records and all(r["runners"][0]["extra_info"] == {} for r in records)
    # a pip install of a folder records no commit but its code's sha256: what tells two installs apart
    meta["fingerprint"]["code_sha256"] = "0123456789abcdef"
    (run / "meta.json").write_text(json.dumps(meta))
    records = json.loads(run_cli("export", str(run), "--format", "hud", check=True).stdout)
    assert all(r["runners"][0]["extra_info"] == {"code_sha256": "0123456789abcdef"} for r in records)


def test_hud_records_are_of_the_types_the_huds_table_declares(rows):
    """oss_ci_benchmark_v3's schema.sql declares benchmark.extra_info and runners[].extra_info as
    Map(String, String) and a runner's name, type, cpu_info and gpu_info as String: the export wrote JSON
    bools, ints and floats there, and a null gpu_info on CPU."""
    records = json.loads(run_cli("export", str(RUN), "--format", "hud", check=True).stdout)
    for rec in records:
        for info in (rec["benchmark"]["extra_info"], rec["runners"][0]["extra_info"]):
            assert all(isinstance(v, str) for v in info.values()), info
        runner = rec["runners"][0]
        assert all(isinstance(runner[k], str) for k in ("name", "type", "cpu_info", "gpu_info")), runner
        assert runner["gpu_info"] == "" and isinstance(rec["benchmark"]["dtype"], str)
        assert all(isinstance(v, (int, float)) for v in rec["metric"]["benchmark_values"])
    extra = records[0]["benchmark"]["extra_info"]
    assert extra["batch"] == "8" and extra["causal"] in ("true", "false") and extra["padding"] == "0.0"


def test_a_bencher_report_of_two_runs_is_refused_in_one_line(tmp_path):
    other = tmp_path / "copy"
    shutil.copytree(RUN, other)
    meta = json.loads((other / "meta.json").read_text())
    meta["run_id"] = "another"
    (other / "meta.json").write_text(json.dumps(meta))
    rows_file = other / "rows.jsonl"
    rows_file.write_text(
        rows_file.read_text().replace(
            json.dumps(json.loads(rows_file.read_text().splitlines()[0])["run_id"]), '"another"'
        )
    )
    proc = run_cli("export", str(RUN), str(other), "--format", "bencher")
    assert (
        proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "one run at a time" in proc.stderr
    )


def test_a_hud_record_of_an_approximation_carries_its_bound(rows):
    """A cell of a variant declared approximate says so in its extra_info; an exact one does not."""
    from attnbench.results import interchange

    ok = rows[rows["status"] == "ok"].head(2).copy()
    ok["approximate"] = [0.9, None]
    records = json.loads(interchange.hud(ok, {}))
    held = {
        r["benchmark"]["extra_info"]["cell_id"]: r["benchmark"]["extra_info"].get("approximate")
        for r in records
    }
    assert held == {ok["cell_id"].iloc[0]: "0.9", ok["cell_id"].iloc[1]: None}


def _edited(tmp_path, edit):
    """A copy of RUN with each row of rows.jsonl passed through edit(i, row)."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    rows_file = run / "rows.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    rows_file.write_text("".join(json.dumps(edit(i, r)) + "\n" for i, r in enumerate(rows)))
    return run


def test_a_drifted_or_noisy_cell_is_exported_with_its_flags(tmp_path):
    """The machine at 8% of its speed for one cell, another cell noisy: both formats say so, per cell, as
    the loaded rows flag every cell; Bencher keeps the cell_id as the benchmark's name (its series)."""

    def edit(i, row):
        if i == 0:
            row["speed_tflops"] = 0.08 * row["speed_tflops"]
        if i == 1:
            row["noisy"] = True
        return row

    run = _edited(tmp_path, edit)
    rows = load(run)
    drifted, noisy = rows["cell_id"].iloc[0], rows["cell_id"].iloc[1]
    records = json.loads(run_cli("export", str(run), "--format", "hud", check=True).stdout)
    extra = {r["benchmark"]["extra_info"]["cell_id"]: r["benchmark"]["extra_info"] for r in records}
    assert extra[drifted]["drift"] == "true"
    assert float(extra[drifted]["speed_factor"]) == pytest.approx(0.08, rel=0.1)
    assert extra[noisy]["noisy"] == "true" and extra[noisy]["drift"] == "false"
    bmf = json.loads(run_cli("export", str(run), "--format", "bencher", check=True).stdout)
    assert bmf[drifted]["drift"] == {"value": 1.0} and bmf[drifted]["speed-factor"]["value"] < 0.1
    assert bmf[noisy]["noisy"] == {"value": 1.0} and bmf[noisy]["drift"] == {"value": 0.0}
    for _, r in rows.iterrows():  # every cell as flagged when loaded, and clean ones said clean
        for flag in ("drift", "noisy", "suspect"):
            assert extra[r["cell_id"]][flag] == json.dumps(bool(r[flag])), (r["cell_id"], flag)
            assert bmf[r["cell_id"]][flag] == {"value": float(bool(r[flag]))}, (r["cell_id"], flag)
    assert not rows["drift"].iloc[2:].all() and not rows["noisy"].iloc[2:].all()


def test_a_run_without_speed_probes_is_not_said_undrifted(tmp_path):
    """A run made before the speed probe (no speed_tflops) was never judged for drift: its rows load with
    drift NA, not False, and no export says "drift": false or 0 of it (the flag a run does not record is
    left out); a CSV cell is empty. It read False everywhere."""

    def edit(i, row):
        row.pop("speed_tflops", None)
        return row

    run = _edited(tmp_path, edit)
    rows = load(run)
    assert rows["speed_factor"].isna().all() and rows["drift"].isna().all()
    records = json.loads(run_cli("export", str(run), "--format", "hud", check=True).stdout)
    assert records and not any("drift" in r["benchmark"]["extra_info"] for r in records)
    assert all("noisy" in r["benchmark"]["extra_info"] for r in records)  # the flags it records stay
    bmf = json.loads(run_cli("export", str(run), "--format", "bencher", check=True).stdout)
    assert bmf and not any("drift" in m or "speed-factor" in m for m in bmf.values())
    csv = run_cli("export", str(run), "--format", "csv", check=True).stdout
    assert {r["drift"] for r in DictReader(io.StringIO(csv))} == {""}


@pytest.mark.parametrize("fmt", ["hud", "bencher"])
def test_a_run_with_no_ok_cell_has_nothing_to_export(tmp_path, fmt):
    run = _edited(tmp_path, lambda i, row: {**row, "status": "wrong"})
    proc = run_cli("export", str(run), "--format", fmt)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1 and "nothing to export" in proc.stderr and "18 wrong" in proc.stderr
