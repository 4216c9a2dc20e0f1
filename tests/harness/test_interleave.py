"""`attnbench interleave`: runs of two or more set-ups made interleaved (harness.run.interleave): the order,
the sides, what is refused before anything is written, and a real set of runs that compare pairs."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from attnbench.harness.run import interleave
from attnbench.reports.compare import compare_runs

TINY = ["--variants", "naive", "--seq-len", "32", "--heads", "1", "--d-k", "8", "--threads", "1",
        "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1", "--calibrate-ms", "20"]  # fmt: skip


def test_run_i_of_every_side_is_back_to_back_and_the_sides_alternate(tmp_path):
    plan = interleave.Plan(tmp_path, 3, (("a", ""), ("b", "env X=1 python -m attnbench")), ("--heads", "1"))
    assert plan.order() == [(1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b")]
    assert plan.run_dir(2, "b") == tmp_path / "b" / "run2"
    assert plan.command("b") == ["env", "X=1", "python", "-m", "attnbench"]
    assert plan.command("a")[1:] == ["-m", "attnbench"]  # this interpreter's attnbench
    assert json.loads(plan.to_json()) == {"runs": 3, "sides": [["a", ""], ["b", plan.sides[1][1]]],
                                          "args": ["--heads", "1"]}  # fmt: skip


@pytest.mark.parametrize(
    "sides, words",
    [
        (["a"], "--side needs two or more sides to interleave"),
        (["a", "a"], "--side names 'a' twice"),
        (["a", "b c"], "--side 'b c': a side is NAME or NAME=COMMAND"),
        (["a", "b="], "--side 'b=': the command after '=' is empty"),
    ],
)
def test_bad_sides_are_one_line(sides, words):
    with pytest.raises(ValueError, match=f"^{words}"):
        interleave.parse_sides(sides)


def test_what_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "set"
    cases = [
        (["--runs", "2", "--side", "a", "--side", "b", "--", *TINY], "--runs 2: compare judges"),
        (["--runs", "3", "--side", "a", "--side", "b", "--", "--out", "x"], "--out is the set's to give"),
        (["--side", "a", "--side", "b"], "--runs K: how many runs of each side"),
        (
            ["--runs", "3", "--side", "a", "--side", "b", "--", "--variants", "nope"],
            "side a: attnbench: error",
        ),
        (["--resume"], f"{str(out)!r} holds no interleaved runs"),
    ]
    for argv, words in cases:
        p = run_cli("interleave", str(out), *argv)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert words in p.stderr, (argv, p.stderr)
        assert not out.exists()


def test_a_real_set_is_made_resumed_and_paired_by_compare(tmp_path):
    out = tmp_path / "set"
    p = run_cli("interleave", str(out), "--runs", "3", "--side", "a", "--side", "b", "--", *TINY)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (out / "a").iterdir()) == ["run1", "run2", "run3"]
    made = sorted((json.loads((out / s / f"run{i}" / "meta.json").read_text())["created"], s, i)
                  for s in "ab" for i in (1, 2, 3))  # fmt: skip
    assert [(s, i) for _, s, i in made] == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3)]
    again = run_cli("interleave", str(out), "--resume")  # every run complete: nothing is made again
    assert again.returncode == 0 and "run 1 of 3" not in again.stderr, again.stderr
    cmp = compare_runs(out / "a", out / "b")
    assert cmp.judgement.level == "run" and cmp.judgement.paired
