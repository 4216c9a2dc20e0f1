"""The CLI a newcomer meets in the first hour (issue 26 items 4 and 5): quick to answer, output that fits the
terminal, a dry run and a cost warning before a long sweep, a plain sentence after a noisy one."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT, cli_env, on_a_pty, run_cli
from fakes import without_package

# ---- list, env and --help answer without what they do not need ----------------------------------------

# `python -m attnbench ARGS`, then the heavy modules it imported on the way, as JSON on the last line
_IMPORTED = """
import json, runpy, sys
sys.argv = ["attnbench", *sys.argv[1:]]
try:
    runpy.run_module("attnbench", run_name="__main__")
except SystemExit:
    pass
heavy = ("torch", "torch._dynamo", "pandas", "matplotlib", "scipy", "cpuinfo")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def _imported(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args], cwd=ROOT, env=cli_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args, allowed",
    [
        (("list",), {"torch"}),  # availability asks torch (CUDA, AVX2), never dynamo (3 s of 8, issue 26)
        (("env",), {"torch"}),  # the fingerprint records torch's build; cpuinfo's CPUID child took 1.1 s
        (("--help",), set()),
        (("run", "--help"), set()),
    ],
)
def test_quick_commands_import_only_what_they_need(args, allowed):
    """Timings are noisy on a shared machine, so what is pinned is the cause: the modules imported."""
    assert set(_imported(*args)) <= allowed


def test_check_plans_its_gates_without_torch():
    """`attnbench check`'s parent only plans and reads replies: its gates run in workers. It imported torch
    (1-3 s) to check its dtypes' names; a wrong name is still one line naming the known ones."""
    plan = (
        "import sys; from attnbench.harness.tools import check\n"
        "check.prepare(['naive'], ['cpu'], ['float32', 'bfloat16'], 16); print('torch' in sys.modules)\n"
        "try:\n    check.prepare(['naive'], ['cpu'], ['float99'], 16)\nexcept ValueError as e:\n    print(e)"
    )
    proc = subprocess.run([sys.executable, "-c", plan], cwd=ROOT, env=cli_env(), capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "False", "unknown dtype 'float99'; known: float32, float16, bfloat16, float64"
    ]  # fmt: skip


def test_a_gate_rows_gradient_errors_reach_a_parent_without_torch():
    """bench's parent reads its gate's rows from a worker (check.bench_gates): a row's gradient error, which
    names dq, dk and dv apart, is unpickled there without importing torch (it took 1-3 s of a bench)."""
    import pickle

    import torch

    from attnbench import variants
    from attnbench.harness.measure import correctness
    from attnbench.harness.measure.outcomes import erring

    q, k, v = (torch.randn(1, 1, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    err = correctness.check(variants.get("naive"), q, k, v, backward=True).grad_rel_err
    read = "import json, pickle, sys; row = pickle.loads(sys.stdin.buffer.read())\n"
    read += "print(json.dumps([row['grad_rel_err'].each, 'torch' in sys.modules]))"
    proc = subprocess.run([sys.executable, "-c", read], input=pickle.dumps({"grad_rel_err": err}), cwd=ROOT,
                          env=cli_env(), capture_output=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [err.each, False]
    assert erring(err, 0.0) == ", in dq, dk and dv"  # each one's error came with it


# ---- output that fits the terminal -----------------------------------------------------------------------

TINY = ("--variants", "naive,xformers", "--seq-len", "16,32", "--d-k", "8", "--heads", "1", "--batch", "1")


def _widest(text: str) -> int:
    return max(map(len, text.splitlines()), default=0)


@pytest.mark.parametrize("columns", [100, 72])
def test_list_check_and_run_fit_the_terminal(monkeypatch, tmp_path, columns):
    """Issue 26: `run` lines were 156 columns, `list` 150, whatever the terminal. COLUMNS is how a
    terminal's width reaches a command (and how rich and shutil read it)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.chdir(tmp_path)  # short paths: a path longer than the terminal is kept whole, to be copied
    without_package(monkeypatch, "xformers")  # its reason below the table: the short one, on any machine
    for args in (("list",), ("list", "--presets")):
        assert _widest(run_cli(*args, check=True).stdout) <= columns, args
    check = run_cli("check", "--variants", "naive,xformers", "--dtype", "f32", "--seq-len", "8")
    # xformers, named and gated on nothing here, is never 'passed' (check.ungated): exit status 1
    assert check.returncode == 1 and _widest(check.stdout) <= columns
    assert "xformers is not installed" in check.stdout  # said once, below the table, by number
    assert "nothing gated for xformers" in check.stdout
    run = run_cli("run", *TINY, "--out", "run", check=True)
    assert _widest(run.stderr) <= columns and " n32 d8 fwd " in run.stderr


def test_output_that_is_no_terminal_is_100_wide(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = run_cli("list", check=True).stdout
    assert 90 <= _widest(out) <= 100 and "what each variant is:" in out


@pytest.mark.slow  # three commands, each in a fresh interpreter
def test_a_terminal_of_zero_columns_is_one_of_unknown_width(tmp_path):
    """Issue 40: list, run --dry-run and run -q ended in a traceback there, and run stopped after its first
    cell with `invalid width 0`."""
    quick = ("--calibrate-ms", "0")  # no ceilings: the run's width, not its calibration, is tested
    for args in (("list",), ("run", *TINY, "--dry-run"), ("run", *TINY, *quick, "--out", "run")):
        code, out = on_a_pty(args, tmp_path)
        assert code == 0 and "Traceback" not in out and "invalid width" not in out, out[-2000:]
        if args == ("list",):  # a table at the default width (a terminal gets colours; run's bar redraws)
            assert _widest(re.sub(r"\x1b\[[0-9;]*m", "", out).replace("\r", "")) <= 100
    rows = [json.loads(line) for line in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows if r["variant"] == "naive"] == ["ok", "ok"]  # past the first cell


# ---- a dry run, a warning before a long sweep, a plain sentence after a noisy one ------------------------


def test_dry_run_counts_cells_skips_and_time_and_writes_nothing(tmp_path, monkeypatch):
    without_package(monkeypatch, "xformers")  # the reason the xformers cells are unsupported, on any machine
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, "--out", str(out), "--dry-run", check=True)
    lines = proc.stdout.splitlines()
    assert lines[0] == "4 cells: 2 to measure, 0 the memory guard would skip, 2 unsupported here"
    assert "  unsupported (2): xformers is not installed (pip install 'attnbench[xformers]')" in lines
    assert (
        any(line.startswith("estimated time: about ") for line in lines)
        and "assumes attention" in proc.stdout
    )
    assert not out.exists() and "starting a worker" not in proc.stderr
    # a machine with no memory free: the guard skips every supported cell, and says why
    from attnbench.harness.workers import worker

    monkeypatch.setattr(worker, "free_memory", lambda device: 1)
    tight = run_cli("run", *TINY, "--out", str(out), "--dry-run", check=True)
    assert "4 cells: 0 to measure, 2 the memory guard would skip" in tight.stdout
    assert "naive from N = 16; the predicted peak exceeds" in " ".join(tight.stdout.split())
    assert not out.exists()


def test_a_long_sweep_is_warned_about_and_runs_and_a_busy_one_says_so(tmp_path, monkeypatch):
    """The warning and the sentence are the CLI's; their thresholds are lowered here, so that a tiny
    sweep shows the wiring (the estimate and the busy rule have their own tests)."""
    from attnbench.harness.run import estimate
    from attnbench.results import drift

    monkeypatch.setattr(estimate, "LONG_S", 0.0)
    monkeypatch.setattr(drift, "BUSY_SHARE", 0.0)
    monkeypatch.setattr(drift, "BUSY_MIN", 0)
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, "--out", str(out), check=True)
    warning = [line for line in proc.stderr.splitlines() if "warning: this sweep should take" in line]
    assert len(warning) == 1 and "(2 cells); add --dry-run to see its plan" in warning[0]
    assert proc.stderr.index("should take") < proc.stderr.index("starting a worker")
    said = " ".join(proc.stderr.split())
    assert "the machine was busy during this run (" in said and "of 2 cells drifted or were noisy)" in said
    assert f"attnbench run --resume --redo-drift --out {out}`" in said
    again = run_cli("run", "--resume", "--out", str(out), "--dry-run", check=True)
    assert again.stdout.startswith("4 cells, 4 measured already: 0 to measure")


def test_more_threads_than_cores_is_warned_about_in_one_line_and_goes_on(tmp_path, capsys):
    """--threads 64 on 2 cores ran 20x slower without a word: one warning line on stderr, the run goes on
    (a dry run here); threads that fit, or torch's own choice, say nothing. attnbench.run says the same."""
    import os

    import attnbench

    cores = len(os.sched_getaffinity(0))
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, "--threads", str(cores + 1), "--out", str(out), "--dry-run", check=True)
    warned = [line for line in proc.stderr.splitlines() if "warning" in line]
    said = f"attnbench: warning: threads {cores + 1} is more than the {cores} CPU{'s' * (cores != 1)} this"
    assert len(warned) == 1 and warned[0].startswith(said), proc.stderr
    assert "cell may run many times slower" in warned[0] and proc.stdout.startswith("4 cells")
    pinned = run_cli("run", *TINY, "--threads", "2", "--cpu-affinity", "0", "--out", str(out), "--dry-run")
    assert "threads 2 is more than the 1 CPU the workers are pinned to" in pinned.stderr, pinned.stderr
    for fits in (str(cores), "0"):
        assert (
            "warning" not in run_cli("run", *TINY, "--threads", fits, "--out", str(out), "--dry-run").stderr
        )
    capsys.readouterr()
    attnbench.run(variants="naive", seq_len=16, heads=1, threads=cores + 1, out=out, dry_run=True)
    assert capsys.readouterr().err.startswith(f"attnbench: warning: threads {cores + 1} is more than")
    assert not out.exists()
