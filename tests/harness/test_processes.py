"""--processes K: each cell measured in K worker processes, one after another, written as one row."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_cli

from attnbench.harness.measure.rows import merge_processes
from attnbench.harness.workers.cellrunner import process_config
from attnbench.results.formulas import summarize
from attnbench.results.store import read_rows


def _row(samples, status="ok", message="", **extra):
    row = {"cell_id": "c", "variant": "naive", "status": status, "message": message, "flops": 4_000_000}
    if status == "ok":
        row.update(samples_ms=list(samples), **summarize(samples), peak_mem_bytes=100, elapsed_s=1.0)
    return {**row, **extra}


def test_merge_pools_samples_and_keeps_each_process_median():
    rows = [_row([1.0, 1.1, 1.2]), _row([2.0, 2.1, 2.2], peak_mem_bytes=300), _row([3.0, 3.3, 3.6])]
    merged = merge_processes(rows)
    assert merged["process_medians_ms"] == pytest.approx([1.1, 2.1, 3.3])
    assert merged["samples_ms"] == [1.0, 1.1, 1.2, 2.0, 2.1, 2.2, 3.0, 3.3, 3.6]
    assert merged["n_samples"] == 9 and merged["time_ms_median"] == pytest.approx(2.1)
    assert merged["time_ms_p25"] == pytest.approx(1.2) and merged["time_ms_p75"] == pytest.approx(3.0)
    assert merged["noisy"] is True  # the spread between processes shows in the pooled IQR
    assert merged["tflops"] == pytest.approx(4_000_000 / 2.1e-3 / 1e12)
    assert merged["peak_mem_bytes"] == 300 and merged["elapsed_s"] == pytest.approx(3.0)
    one = merge_processes([_row([1.0, 2.0, 3.0])])
    assert one["process_medians_ms"] == [2.0] and one["n_samples"] == 3


def test_merge_is_the_first_failure():
    ok, wrong, crashed = _row([1.0]), _row([], "wrong", "rel_err 0.3"), _row([], "crashed", "signal 9")
    assert merge_processes([ok, wrong, crashed]) == {
        **wrong,
        "message": "in worker process 2 of 3: rel_err 0.3",
    }
    first = _row([], "error", "boom")
    assert merge_processes([first]) is first and first["message"] == "boom"
    with pytest.raises(ValueError, match="at least one row"):
        merge_processes([])


def test_each_process_has_its_own_log():
    config = {"threads": 1, "log_path": "/r/worker-cuda0.log"}
    assert process_config(config, 0) is config
    assert process_config(config, 2)["log_path"] == "/r/worker-cuda0-p3.log"


def test_run_with_two_processes_writes_one_row_per_cell(tmp_path):
    out = tmp_path / "r"
    p = run_cli(
        "run", "--variants", "naive", "--seq-len", "16,32", "--heads", "1", "--d-k", "8", "--processes", "2",
        "--threads", "1", "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1", "--out", str(out), "-q",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = read_rows(out)
    assert len(rows) == 2 and len({r["cell_id"] for r in rows}) == 2
    for row in rows:
        assert row["status"] == "ok", row["message"]
        medians = row["process_medians_ms"]
        assert len(medians) == 2 and all(m > 0 for m in medians)
        assert row["n_samples"] == len(row["samples_ms"]) >= 10  # at least min_samples from each
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sweep"]["settings"]["processes"] == 2
    pids = [
        set(re.findall(r"attnbench worker (\d+) starting", (out / log).read_text()))
        for log in ("worker.log", "worker-p2.log")
    ]
    assert all(pids) and not pids[0] & pids[1]  # two distinct worker processes


@pytest.mark.parametrize("executor", ["ray", "slurm"])
def test_processes_elsewhere_than_local_is_refused_in_one_line(tmp_path, executor):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--processes", "3", "--executor", executor,
                "--out", str(out))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"attnbench: error: --processes 3 measures each cell in several worker processes of this machine: "
        f"--executor local only, not {executor}"
    ]
    assert not out.exists()


def test_processes_must_be_positive(tmp_path):
    p = run_cli(
        "run", "--variants", "naive", "--seq-len", "16", "--processes", "0", "--out", str(tmp_path / "r")
    )
    assert p.returncode == 2 and "processes must be a positive number, got 0" in p.stderr
