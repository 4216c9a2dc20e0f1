"""--executor slurm through submitit's LocalExecutor (real subprocess array tasks; no Slurm needed): shards,
a killed task's finished rows kept, `attnbench collect` merging with nothing lost or doubled, one writer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, TEST_CALIBRATE_MS, cli_env, run_cli, wait_while_running

from attnbench.harness.run.executors.slurm import _minutes, chunk_cells, parse_opts, run_task, split
from attnbench.harness.sweep.sweeps import build_sweep
from attnbench.results.store import RunWriter, read_rows

pytest.importorskip("submitit")

SLOW = DATA / "slow_variants.py"
TINY = ["--heads", "1", "--d-k", "16", "--budget-ms", "5", "--warmup-ms", "2", "--min-samples", "5"]
TINY += ["--max-samples", "5", "--threads", "1", "--calibrate-ms", TEST_CALIBRATE_MS]  # as run_cli does


def test_split_keeps_each_series_in_one_chunk():
    sweep = build_sweep({"variants": "naive,chunked", "seq_len": "16..128", "causal": "both"})
    cells = sweep.cells(["naive", "chunked"])
    chunks = split(cells, 3)
    assert len(chunks) == 3
    assert sorted(c.cell_id for ch in chunks for c in ch) == sorted(c.cell_id for c in cells)
    for ch in chunks:  # OOM/timeout skip-ahead needs a whole series in one task, in seq_len order
        for c in ch:
            same = [d.seq_len for d in cells if d.group_key == c.group_key]
            assert [d.seq_len for d in ch if d.group_key == c.group_key] == same
    assert len(split(cells, 100)) == 4  # never more chunks than series


def test_slurm_local_measures_cpu_cells_in_one_chunk_and_splits_cuda_ones():
    sweep = build_sweep({"variants": "naive,chunked", "seq_len": "16..64", "devices": "cpu,cuda"})
    cells = sweep.cells(["naive", "chunked"])
    cpu = [c.cell_id for c in cells if c.device == "cpu"]
    local = chunk_cells(cells, 4, local=True)
    assert [c.cell_id for c in local[0]] == cpu  # one process, one after another, in plan order
    assert all(c.device == "cuda" for chunk in local[1:] for c in chunk) and len(local) == 3
    assert len(chunk_cells(cells, 4, local=False)) == 4  # on Slurm's nodes, cpu series spread as before


@pytest.mark.slow
def test_slurm_local_runs_cpu_cells_one_at_a_time(tmp_path):
    out = tmp_path / "r"
    args = ["--executor", "slurm", "--slurm-local", "--slurm-tasks", "2", "--variants", "naive,chunked"]
    run_cli("run", *args, "--seq-len", "16,32", *TINY, "--out", str(out), "-q", check=True, timeout=600)
    (task,) = json.loads((out / "shards" / "submission-1.json").read_text())["tasks"]  # one, though 2 asked
    assert len(task["chunks"]) == 1
    rows = read_rows(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)


def test_slurm_flag_text():
    assert _minutes("90") == 90 and _minutes("1:30:00") == 90 and _minutes("1-00:00:01") == 24 * 60 + 1
    assert parse_opts(["account=proj", "qos=high"]) == {"account": "proj", "qos": "high"}
    with pytest.raises(ValueError, match="--slurm-opt takes KEY=VALUE"):
        parse_opts(["account"])


BAD = [
    (["--slurm-partition", "gpu"], "--slurm-partition is an option of --executor slurm"),
    (["--executor", "slurm", "--slurm-opt", "noequals"], "--slurm-opt takes KEY=VALUE"),
    (["--executor", "slurm", "--slurm-time", "soon"], "--slurm-time takes minutes or [D-]HH:MM:SS"),
    (["--executor", "slurm", "--slurm-tasks", "0"], "--slurm-tasks must be 1 or more"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_slurm_flags_are_one_line_exit_2(tmp_path, args, message):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", *args, "--out", str(out))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, p.stderr
    assert not out.exists()


def test_no_sbatch_is_refused_before_anything_is_written(tmp_path):
    env_path = os.environ.get("PATH", "")
    if any(os.access(os.path.join(d, "sbatch"), os.X_OK) for d in env_path.split(os.pathsep)):
        pytest.skip("this machine has Slurm")
    p = run_cli("run", "--variants", "naive", "--executor", "slurm", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "no sbatch on PATH" in p.stderr and "--slurm-local" in p.stderr
    assert not (tmp_path / "r").exists()


def test_a_task_that_cannot_see_the_run_directory_says_so(tmp_path):
    (tmp_path / "shards").mkdir()
    with pytest.raises(RuntimeError, match="on a filesystem the nodes share"):
        run_task(
            {"run_dir": str(tmp_path), "submission": 1, "token": "t"}
            | {"group": [], "config": {}, "seeds": []}
        )


def test_a_second_collector_is_refused(tmp_path):
    out = tmp_path / "r"
    sweep = build_sweep({"variants": "naive", "seq_len": "16"})
    writer = RunWriter(out)
    writer.write_meta({"run_id": "x", "sweep": sweep.to_dict(), "variants": ["naive"], "executor": "slurm"})
    (out / "shards").mkdir()
    submission = {"backend": "local", "host": "h", "options": {"local": True}, "tasks": []}
    (out / "shards" / "submission-1.json").write_text(json.dumps(submission))
    try:  # this test holds the lock, as a running collector would
        p = run_cli("collect", str(out))
    finally:
        writer.close()
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert f"is being written by pid {os.getpid()}" in p.stderr
    assert not (out / "rows.jsonl").exists()


def _shard_rows(out):
    rows = []
    for path in sorted((out / "shards").glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return rows


@pytest.mark.slow
def test_killed_task_and_driver_then_collect_loses_nothing_and_doubles_nothing(tmp_path):
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "run", "--executor", "slurm", "--slurm-local", "--slurm-tasks",
         "2", "--variant-file", str(SLOW), "--variants", "slow_naive", "--seq-len", "16..64", "--causal",
         "both", *TINY, "--out", str(out), "-q"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    sub = out / "shards" / "submission-1.json"
    wait_while_running(sub.is_file, proc, "the submission")
    tasks = json.loads(sub.read_text())["tasks"]
    victim = out / "shards" / f"{tasks[0]['chunks'][0]}.jsonl"
    wait_while_running(lambda: victim.is_file() and victim.read_text().count("\n") >= 1, proc, "a first row")
    task = json.loads((out / "shards" / f"{tasks[0]['chunks'][0]}.task.json").read_text())
    os.kill(task["pid"], signal.SIGKILL)  # an array task killed mid-sweep
    proc.kill()  # and its driver gone too: no cleanup at all
    proc.wait()
    kept = [json.loads(line) for line in victim.read_text().splitlines() if line.endswith("}")]
    assert 1 <= len(kept) < 3  # the killed task kept its finished rows, and left cells undone

    # runs what is missing; a real process: `collect`'s one (see test_packaging.py)
    p = run_cli("collect", str(out), check=True, timeout=600, process=True)
    rows = read_rows(out)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 2 * 3, p.stderr  # 0 lost, 0 duplicates
    by_id = {r["cell_id"]: r for r in rows}
    for row in kept:  # the killed task's rows are the ones kept, not measured again
        assert by_id[row["cell_id"]]["finished_at"] == row["finished_at"]
        assert by_id[row["cell_id"]]["samples_ms"] == row["samples_ms"]
    assert all(r["status"] == "ok" for r in rows)
    assert (out / "shards" / "submission-2.json").is_file()  # the missing cells went to new array tasks
    # what a submission leaves: its record, each shard's device record, a .done file per finished shard,
    # and rows.jsonl rows that are the shard rows untouched but for the run id (one test for both: every
    # local array task starts a worker, tens of seconds on 2 cores)
    sub1 = json.loads(sub.read_text())
    # one task, though 2 were asked: --slurm-local measures cpu cells one at a time; the second submission's
    # task finished what the killed one left
    assert sub1["backend"] == "local" and len(sub1["tasks"]) == 1
    survivor = json.loads((out / "shards" / "submission-2.json").read_text())["tasks"][0]["chunks"][0]
    assert (out / "shards" / f"{survivor}.done").is_file()
    assert (out / "shards" / f"{survivor}.device.json").is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["executor"] == "slurm" and len(meta["devices"]) == 1  # one host, described once
    for row in _shard_rows(out):
        assert by_id[row["cell_id"]] == {**row, "run_id": meta["run_id"]}

    # a cell that comes back twice: the first finished row is kept and the command says so
    twice = {**kept[0], "finished_at": "2999-01-01T00:00:00+00:00"}
    (out / "shards" / "s9-0000.jsonl").write_text(json.dumps(twice) + "\n")
    p = run_cli("collect", str(out), check=True, timeout=300)
    assert f"cell {twice['cell_id']} came back twice: kept the first finished row" in p.stderr
    assert p.stderr.count("came back twice") == 1, p.stderr  # the rows already collected are no duplicates
    assert read_rows(out) == rows


def test_cpu_cells_get_a_node_each_and_cuda_cells_their_gpus():
    """On Slurm, cpu cells are an array of their own whose tasks each hold a whole node (sbatch
    --exclusive): two CPU tasks on one node corrupt each other's times. cuda cells run one process per GPU
    of their task, asking for the GPUs, and share nodes."""
    from attnbench.harness.run.executors.slurm import SlurmExecutor

    sweep = build_sweep({"variants": "naive,chunked", "seq_len": "16..64", "devices": "cpu,cuda"})
    cells = sweep.cells(["naive", "chunked"])
    ex = SlurmExecutor(partition="ci", gpus_per_node=2, time="10")
    (cpu_params, cpu_procs, cpu_chunks), (gpu_params, gpu_procs, gpu_chunks) = ex._arrays(cells)
    assert cpu_params["exclusive"] is True and "gpus_per_node" not in cpu_params and cpu_procs == 1
    assert cpu_params["ntasks_per_node"] == 1 and cpu_params["partition"] == "ci"
    assert all(c.device == "cpu" for chunk in cpu_chunks for c in chunk) and len(cpu_chunks) == 2
    assert "exclusive" not in gpu_params and gpu_params["gpus_per_node"] == 2 and gpu_procs == 2
    assert all(c.device == "cuda" for chunk in gpu_chunks for c in chunk)
    from submitit.slurm.slurm import _make_sbatch_string

    assert "#SBATCH --exclusive" in _make_sbatch_string(command="x", folder="/tmp/f", **cpu_params)


def test_a_refused_submission_is_one_line_naming_the_option(tmp_path, monkeypatch):
    import submitit

    from attnbench.harness.run.executors.slurm import SlurmExecutor

    said = "sbatch: error: invalid partition specified: gpu\nsbatch: error: Batch job submission failed"

    def refused(self, fn, args):
        raise submitit.core.utils.FailedJobError(said)

    monkeypatch.setattr(submitit.SlurmExecutor, "map_array", refused)
    ex = SlurmExecutor(partition="gpu")
    with pytest.raises(ValueError) as caught:
        ex._submit(tmp_path, ex._params(cpu=True), [{}])
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert message.startswith("--slurm-partition gpu: sbatch refuses it (sbatch: error: invalid partition")


def test_a_cluster_without_accounting_is_never_asked_through_sacct(monkeypatch):
    """sacct there prints 'Slurm accounting storage is disabled' at every poll (and submitit warns
    'Bypassing sacct error' twice): a job is over once squeue no longer lists it."""
    from attnbench.harness.run.executors import slurm

    class Job:
        job_id = "7_0"

        class paths:
            class result_pickle:
                @staticmethod
                def exists():
                    return False

        def done(self):
            raise AssertionError("sacct asked")

        state = property(done)

    monkeypatch.setattr(slurm, "_accounting", lambda: False)
    monkeypatch.setattr(slurm, "_unlisted", lambda job_id: job_id == "7_0")
    assert slurm._ended(Job())


def test_a_task_describes_a_host_the_run_has_not_and_only_that(tmp_path):
    """A task on another node than the driver's calibrates its device (shards/<chunk>.device.json, then
    meta.json `devices`); one on a host the run has described already (the driver's own) writes []."""
    from attnbench.harness.run.executors.slurm import _describe

    class Runner:
        def request(self, msg, timeout):
            return {"value": {"host": "node7"}}

        def describe(self, device, dtypes):
            return {"host": "node7", "device": device, "calibration": {"float32": 1.0}}

    _describe(Runner(), ["cpu"], ["float32"], {"devices": {"login:cpu": {}}}, tmp_path / "s1-0000")
    (record,) = json.loads((tmp_path / "s1-0000.device.json").read_text())
    assert record["host"] == "node7" and record["calibration"]
    _describe(Runner(), ["cpu"], ["float32"], {"devices": {"node7:cpu": {}}}, tmp_path / "s1-0001")
    assert json.loads((tmp_path / "s1-0001.device.json").read_text()) == []


def test_a_resume_reuses_the_executor_options_the_run_was_started_with(tmp_path):
    """meta.json keeps the executor's options as given; a resume with the same executor and none of them
    given (`attnbench collect` of a run that never submitted, `run --resume --executor slurm`) uses them,
    those given again replacing theirs, instead of submitting with Slurm's defaults."""
    from attnbench.harness.run.request import RunRequest
    from attnbench.harness.run.runner import _checked

    out = tmp_path / "r"
    run_cli("run", "--variants", "naive", "--seq-len", "16", *TINY, "--devices", "cpu", "--out", str(out),
            "-q", check=True)  # fmt: skip
    meta = json.loads((out / "meta.json").read_text())
    assert meta["executor_options"] == {"devices": "cpu"}
    meta["executor"] = "slurm"  # as a Slurm run whose driver stopped before it submitted
    meta["executor_options"] = {"slurm_local": True, "slurm_time": "30", "slurm_opt": ["account=a"]}
    (out / "meta.json").write_text(json.dumps(meta))
    _, chosen, _ = _checked(RunRequest(out=out, resume=True, executor="slurm"))
    assert (
        chosen.options["local"] and chosen.options["time"] == "30" and chosen.options["opts"] == ["account=a"]
    )
    given = {"slurm_time": "45"}
    _, chosen, _ = _checked(RunRequest(out=out, resume=True, executor="slurm", executor_options=given))
    assert chosen.options["local"] and chosen.options["time"] == "45"
    _, chosen, _ = _checked(RunRequest(out=out, resume=True, executor="local"))  # another executor: its own
    assert chosen.devices is None
