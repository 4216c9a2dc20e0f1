"""--executor slurm against a real Slurm (sbatch, scancel, squeue): a run, one array task cancelled mid-sweep,
then `attnbench collect` finishing it with nothing lost or doubled.

Runs where a Slurm controller answers (`.ci/slurm-up.sh` brings up a single-node one in CI and sets
ATTNBENCH_SLURM_PARTITION; where that variable is set, a Slurm that does not answer fails the test instead
of skipping it). The LocalExecutor tests in test_slurm.py cover the rest of the path without Slurm.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, TEST_CALIBRATE_MS, cli_env, ctrl_c_reaches_it, run_cli, wait_while_running

from attnbench.cli_common import EXIT_INCOMPLETE
from attnbench.results.store import read_rows

pytest.importorskip("submitit")

SLOW = DATA / "slow_variants.py"
TINY = ["--heads", "1", "--d-k", "16", "--budget-ms", "5", "--warmup-ms", "2", "--min-samples", "5"]
TINY += ["--max-samples", "5", "--threads", "1", "--calibrate-ms", TEST_CALIBRATE_MS]  # as run_cli does
REQUIRED = os.environ.get("ATTNBENCH_SLURM_PARTITION")


def _partition() -> str:
    """The partition to submit to: ATTNBENCH_SLURM_PARTITION, else the default of a Slurm that answers."""
    answer = None
    if shutil.which("sinfo") and shutil.which("sbatch"):
        p = subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True, timeout=30)
        up = [line.split() for line in p.stdout.splitlines() if line.split()[1:2] != ["down"]]
        if p.returncode == 0 and up:
            default = [part for part, _ in up if part.endswith("*")]
            answer = (default or [up[0][0]])[0].rstrip("*")
    if REQUIRED:
        assert answer, "ATTNBENCH_SLURM_PARTITION is set but no Slurm controller answers sinfo"
        return REQUIRED
    if not answer:
        pytest.skip("no Slurm controller answers here (.ci/slurm-up.sh starts a single-node one)")
    return answer


PREFLIGHT = {
    "bad-partition": (
        ["--slurm-partition", "nosuch"],
        "--slurm-partition nosuch: sbatch refuses it (sbatch: ",
    ),
    "bad-opt": (["--slurm-opt", "foo=bar"], "--slurm-opt foo=bar: sbatch refuses it (sbatch: unrecognized"),
    "gpus-for-cpu": (["--slurm-gpus-per-node", "8"], "--slurm-gpus-per-node 8 gives GPUs to cuda cells"),
}


@pytest.mark.parametrize("name", list(PREFLIGHT))
def test_options_sbatch_refuses_are_one_line_before_anything_is_written(tmp_path, name):
    """`sbatch --test-only` on the script submitit would submit: before calibration, meta.json or shards."""
    partition = _partition()
    given, said = PREFLIGHT[name]
    given = given if "--slurm-partition" in given else ["--slurm-partition", partition, *given]
    out = tmp_path / "r"
    p = run_cli(
        "run", "--executor", "slurm", *given, "--variants", "naive", "--seq-len", "16", "--out", str(out)
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"attnbench: error: {said}"), p.stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_cancelled_array_task_then_collect_loses_nothing_and_doubles_nothing(tmp_path):
    partition = _partition()
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "run", "--executor", "slurm", "--slurm-partition", partition,
         "--slurm-time", "20", "--slurm-tasks", "2", "--variant-file", str(SLOW), "--variants", "slow_naive",
         "--seq-len", "16..64", "--causal", "both", *TINY, "--out", str(out), "-q"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    sub = out / "shards" / "submission-1.json"
    wait_while_running(sub.is_file, proc, "the submission")
    record = json.loads(sub.read_text())
    assert record["backend"] == "slurm" and len(record["tasks"]) == 2
    victim_task = record["tasks"][0]
    victim = out / "shards" / f"{victim_task['chunks'][0]}.jsonl"
    wait_while_running(lambda: victim.is_file() and victim.read_text().count("\n") >= 1, proc, "a first row")
    subprocess.run(["scancel", victim_task["job_id"]], check=True, timeout=30)  # Slurm stops it mid-sweep
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == EXIT_INCOMPLETE, stderr  # a CI job does not pass an incomplete run
    missing = 6 - len(read_rows(out))
    said = f"run incomplete: {out} ({6 - missing} ok, {missing} not measured: attnbench collect {out})"
    assert said in stderr and "run complete" not in stderr, stderr
    assert stdout.strip() == str(out)
    # no accounting here: sacct is never asked (it said so at every poll, and submitit warned twice)
    assert "sacct" not in stderr and "accounting storage is disabled" not in stderr, stderr
    scripts = list((out / "shards" / "submitit").glob("*_submission.sh"))
    assert scripts and all("#SBATCH --exclusive" in s.read_text() for s in scripts)  # a CPU task per node
    assert f"array task {victim_task['job_id']}" in stderr and "ended before its cells were done" in stderr
    kept = [json.loads(line) for line in victim.read_text().splitlines() if line.endswith("}")]
    assert 1 <= len(kept) < 3  # the cancelled task kept its finished rows and left cells undone
    assert len(read_rows(out)) < 6

    # a second array for the missing cells, its collector stopped by Ctrl-C once it is submitted: the tasks
    # go on on Slurm, and the line says so, with the job id to scancel and the command that gathers them
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "collect", str(out), "-q"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    sub2 = out / "shards" / "submission-2.json"
    wait_while_running(sub2.is_file, proc, "the second submission")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    job = json.loads(sub2.read_text())["tasks"][0]["job_id"].split("_")[0]
    assert (
        f"; the array tasks of Slurm job {job} are still queued or running (to stop them: scancel {job}); "
        f"finish with: attnbench collect {out}" in stderr
    ), stderr
    assert "came back twice" not in stderr, stderr  # the rows the driver collected are not duplicates

    # gathered by collect (in this process: tests/harness/test_slurm.py's collect is the real process)
    p = run_cli("collect", str(out), check=True)
    rows = read_rows(out)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 2 * 3, p.stderr  # 0 lost, 0 duplicates
    assert "came back twice" not in p.stderr and "run complete" in p.stderr, p.stderr
    assert all(r["status"] == "ok" for r in rows), [(r["cell_id"], r["message"]) for r in rows]
    by_id = {r["cell_id"]: r for r in rows}
    for row in kept:  # the cancelled task's finished rows are kept, not measured again
        assert by_id[row["cell_id"]]["finished_at"] == row["finished_at"]
    again = json.loads(sub2.read_text())
    assert again["backend"] == "slurm" and again["options"]["partition"] == partition
    meta = json.loads((out / "meta.json").read_text())
    assert meta["executor"] == "slurm" and len(meta["devices"]) == 1  # one node, described once


def test_a_collect_stopped_while_it_waits_names_the_slurm_jobs_it_leaves(tmp_path):
    """Ctrl-C while `collect` waits for array tasks still queued: the tasks go on (a later collect gathers
    them), and the executor knows their array job, for the interrupted line's `scancel`."""
    from attnbench.harness.run.executors.slurm import SlurmExecutor, _array_ids

    assert _array_ids(["4242_0", "4242_[1-3%4]", "77", "4242_5"]) == ["4242", "77"]
    partition = _partition()
    # an array of one task, held: queued until cancelled
    sbatch = ["sbatch", "--hold", "--array=0", "--parsable", "-p", partition, "--wrap", "true"]
    sbatch += ["-o", str(tmp_path / "held-%a.out")]
    held = subprocess.run(sbatch, capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    held = held.split(";")[0]
    try:
        shards = tmp_path / "shards"
        shards.mkdir()
        record = {"submission": 1, "backend": "slurm", "host": socket.gethostname(),
                  "folder": str(shards / "submitit"), "options": {},
                  "tasks": [{"job_id": f"{held}_0", "chunks": ["s1-0000"]}]}  # fmt: skip
        (shards / "submission-1.json").write_text(json.dumps(record))
        said = []

        def ctrl_c(text):  # the Ctrl-C comes while it waits
            said.append(text)
            raise KeyboardInterrupt

        executor = SlurmExecutor()
        with pytest.raises(KeyboardInterrupt):
            executor.resume(tmp_path, {}, lambda row: None, lambda record: None, ctrl_c)
        assert said == [f"waiting for 1 array task(s) still running: {held}_0"]
        assert executor.running == [held]
    finally:
        subprocess.run(["scancel", held], timeout=30)
