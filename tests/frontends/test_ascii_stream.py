"""A command's output on a stream whose encoding cannot hold all it says (PYTHONIOENCODING=ascii, LANG=C in
a CI job): what it cannot hold is written as an escape, and the command's exit status stays its verdict."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import DATA, TEST_CALIBRATE_MS, cli_env
from synthetic import part_of

SMALL = DATA / "runs" / "cpu-small"


def ascii_cli(*args: str, cwd) -> subprocess.CompletedProcess:
    """`python -m attnbench ARGS` as a real process whose stdout and stderr are ASCII-only."""
    env = {**cli_env(), "PYTHONIOENCODING": "ascii"}
    return subprocess.run(
        [sys.executable, "-m", "attnbench", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_compare_on_an_ascii_stream_prints_its_rule_with_an_escape(tmp_path):
    proc = ascii_cli(
        "compare", str(SMALL), str(SMALL), "--variant-a", "naive", "--variant-b", "stable_softmax",
        "--fail-above", "median:5%", "--out", "c2", cwd=tmp_path,
    )  # fmt: skip
    # stable_softmax is 1.2-1.9x slower than naive in that run's one visit a cell: within the visit-to-visit
    # spread, so the gate passes (status 0), said in the last line
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1].startswith("--fail-above median:5%: ")
    assert "\\u2026" in proc.stdout  # the … of a cut cell: a character past ASCII, written as its escape
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "c2" / "README.md").exists()


def test_report_on_an_ascii_stream_writes_the_whole_report(tmp_path):
    # two variants of one group: what it says is the same sentences as a larger run's, at half the cost
    run = part_of(SMALL, tmp_path / "run")
    proc = ascii_cli("report", str(run), "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "rep" / "report.html").exists()


def test_bench_on_an_ascii_stream_ends_on_its_closing_line(tmp_path):
    proc = ascii_cli(
        "bench", "naive", "--seq-len", "32", "--heads", "2", "--dtype", "fp32",
        "--calibrate-ms", TEST_CALIBRATE_MS, "--out", "b", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1].startswith("run: b \\xb7 ")


def test_an_internal_error_is_not_a_verdicts_exit_status(monkeypatch, capsys):
    """Status 1 is check's, bench's and compare's verdict (a wrong kernel, a regression): an exception no
    command expected exits 70 with its traceback, so that a CI gate does not take attnbench's bug for one."""
    from attnbench import cli, cli_read

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_read, "cmd_export", broken)
    assert cli.main(["export", os.fspath(SMALL)]) == 70
    err = capsys.readouterr().err
    assert "RuntimeError: a bug" in err
    assert "attnbench: internal error (exit status 70)" in err
