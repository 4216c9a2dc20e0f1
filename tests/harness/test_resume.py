"""--resume on real run directories: refused on another set-up unless forced (and logged), and one
writer at a time when two resumes race (real subprocesses)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time

import pytest
from conftest import DATA, FAULTS, ROOT, cli_env, run_cli

from attnbench.harness.measure import fingerprint
from attnbench.results import read_rows

FIXTURE = DATA / "runs" / "cpu-small"
HOLD = DATA / "hold_variants.py"


def _files(path):
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _fixture_on_another_torch(tmp_path):
    """The committed fixture run (every cell done), as if made with another torch."""
    out = tmp_path / "run"
    shutil.copytree(FIXTURE, out)
    meta = json.loads((out / "meta.json").read_text())
    meta["fingerprint"]["torch"] = "1.0.0+other"
    meta["variant_files"] = [str(FAULTS)]  # where the fault variants live in this checkout
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return out


def test_resume_on_another_setup_is_refused_with_one_line_and_nothing_written(tmp_path):
    out = _fixture_on_another_torch(tmp_path)
    before = _files(out)
    p = run_cli("run", "--resume", "--out", str(out))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnbench: error: --resume of"), p.stderr
    assert f"torch 1.0.0+other -> {fingerprint.resume_identity()['torch']}" in lines[0]
    assert "--force-resume" in lines[0]
    assert _files(out) == before  # not even the lock file was touched


def test_resume_by_another_install_of_the_same_version_is_refused(tmp_path):
    """A `pip install` of a folder records no commit: the run's code sha256 tells the install that started it
    from the one resuming it (an upgrade of the same version number), and the resume is refused."""
    out = _fixture_on_another_torch(tmp_path)
    meta = json.loads((out / "meta.json").read_text())
    meta["fingerprint"].update(git_commit=None, code_sha256="0" * 16)
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    before = _files(out)
    p = run_cli("run", "--resume", "--out", str(out))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"code_sha256 {'0' * 16} -> {fingerprint.code_sha256()}" in p.stderr
    assert _files(out) == before


def test_force_resume_needs_resume(tmp_path):
    p = run_cli("run", "--force-resume", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "--force-resume finishes a run on another set-up" in p.stderr
    assert not (tmp_path / "r").exists()


def test_what_a_resume_compares():
    meta = {"fingerprint": {"hostname": "a", "torch": "2.12.0", "allocator_env": "none"}}
    recorded = fingerprint.recorded_identity(meta)
    assert recorded == {"hosts": ["a"], "torch": "2.12.0", "allocator_env": "none"}  # old: no git_commit
    now = {"hosts": ["a"], "torch": "2.13.0", "git_commit": "abc", "allocator_env": "MALLOC_ARENA_MAX=2",
           "THP_MEM_ALLOC_ENABLE": None}  # fmt: skip
    diff = fingerprint.identity_diff(recorded, now)
    assert diff == {"torch": ["2.12.0", "2.13.0"], "allocator_env": ["none", "MALLOC_ARENA_MAX=2"]}
    assert fingerprint.diff_text(diff) == "torch 2.12.0 -> 2.13.0, allocator_env none -> MALLOC_ARENA_MAX=2"
    many = {"devices": {"x": {"host": "n2"}, "y": {"host": "n1"}}, "fingerprint": {"hostname": "n1"}}
    assert fingerprint.recorded_identity(many)["hosts"] == ["n1", "n2"]  # the run's host set
    assert fingerprint.identity_diff({"git_commit": "abc"}, {"git_commit": None}) == {}  # cannot tell here
    thp = fingerprint.identity_diff({"THP_MEM_ALLOC_ENABLE": "1"}, {"THP_MEM_ALLOC_ENABLE": None})
    assert thp == {"THP_MEM_ALLOC_ENABLE": ["1", None]}  # unset now is a difference


@pytest.mark.slow
def test_force_resume_proceeds_and_logs_both_fingerprints(tmp_path):
    out = _fixture_on_another_torch(tmp_path)
    lines = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text("".join(lines[1:]))  # its first cell (naive) left to measure
    p = run_cli("run", "--resume", "--force-resume", "--out", str(out), "-q")
    assert p.returncode == 0, p.stderr
    assert len(read_rows(out)) == len(lines)  # the one cell left measured, no other again
    # the closing line counts this resume's cells, then the whole run's
    assert f"; the run's {len(lines)} cells: " in p.stderr, p.stderr
    # complete now: a resume, forced or not, says so and starts nothing (no second line in resumes.jsonl)
    again = run_cli("run", "--resume", "--force-resume", "--out", str(out))
    assert again.stderr == f"nothing to resume: {out} is complete ({len(lines)} cells)\n", again.stderr
    (log,) = [json.loads(line) for line in (out / "resumes.jsonl").read_text().splitlines()]
    assert log["forced"] is True and log["host"] == socket.gethostname()
    assert log["fingerprint_diff"]["torch"] == ["1.0.0+other", log["fingerprint"]["torch"]]
    assert json.loads((out / "meta.json").read_text())["fingerprint"]["torch"] == "1.0.0+other"  # kept


@pytest.mark.slow
def test_two_resumes_of_one_run_one_proceeds_the_other_is_refused(tmp_path):
    out, hold = tmp_path / "run", tmp_path / "hold"
    run_cli("run", "--variant-file", str(HOLD), "--variants", "naive,hold", "--seq-len", "16", "--heads", "1",
            "--warmup-ms", "1", "--budget-ms", "5", "--out", str(out), "-q", check=True)  # fmt: skip
    rows = (out / "rows.jsonl").read_text().splitlines()
    assert [json.loads(r)["variant"] for r in rows] == ["naive", "hold"]
    (out / "rows.jsonl").write_text(rows[0] + "\n")  # as if killed before the hold cell finished
    hold.touch()  # the first resume's hold cell waits until the test removes this file
    first = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "run", "--resume", "--out", str(out), "-q"],
        cwd=ROOT,
        env={**cli_env(), "ATTNBENCH_TEST_HOLD": str(hold)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while not (out / "writer.lock").read_text().startswith(f"pid {first.pid} "):
            assert first.poll() is None and time.time() < deadline, first.communicate()
            time.sleep(0.05)
        second = run_cli("run", "--resume", "--out", str(out))
        assert second.returncode == 2 and "Traceback" not in second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert f"is being written by pid {first.pid} on host {socket.gethostname()}" in line
    finally:
        hold.unlink()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    ids = [r["cell_id"] for r in read_rows(out)]
    assert len(ids) == len(set(ids)) == 2  # each cell exactly once
    resumes = (out / "resumes.jsonl").read_text().splitlines()
    assert len(resumes) == 1 and json.loads(resumes[0])["pid"] == first.pid  # the refused one logged nothing


def test_collect_of_a_complete_run_says_so_and_writes_nothing(carried_run, tmp_path):
    """`collect` of a finished local run: every cell has its row, its probe is written, no shard waits. It
    says so in one line and exits 0, without a worker (worker.log untouched) or a line in resumes.jsonl."""
    run = tmp_path / "run"
    shutil.copytree(carried_run, run)
    before = _files(run)
    proc = run_cli("collect", str(run), cwd=carried_run.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"nothing to collect: {run} is complete (4 cells)\n"
    assert proc.stdout == f"{run}\n"
    assert _files(run) == before and not (run / "resumes.jsonl").exists()
    # a cell without its row is collected as before: measured, and the resume logged
    rows = (run / "rows.jsonl").read_text().splitlines()
    (run / "rows.jsonl").write_text("\n".join(rows[:-1]) + "\n")
    again = run_cli("collect", str(run), "-q", cwd=carried_run.parent)
    assert again.returncode == 0 and "run complete" in again.stderr, again.stderr
    assert len(read_rows(run)) == 4 and (run / "resumes.jsonl").exists()
