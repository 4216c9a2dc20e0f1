"""`attnbench run --repeat K`: the sweep run K times into DIR/run1 .. runK (harness.run.run_set), a run set
that compare loads (results.runset); a set stopped part-way is finished by `--resume --out DIR`; bad input is
one line and nothing written."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from attnbench.harness.run.run_set import SET_FILE
from attnbench.reports.compare import compare_runs
from attnbench.results import runset

TINY = ["--variants", "naive,chunked", "--seq-len", "32", "--heads", "1", "--d-k", "16", "--budget-ms", "5"]
TINY += ["--warmup-ms", "1", "--min-ms", "1", "-q"]


def test_a_run_set_is_made_resumed_and_compared(tmp_path):
    out = tmp_path / "set"
    made = run_cli("run", *TINY, "--repeat", "2", "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert "run 2 of 2" in made.stderr and "run set complete" in made.stderr
    assert [p.name for p in runset.members(out)] == ["run1", "run2"]
    record = json.loads((out / SET_FILE).read_text())
    assert record["repeat"] == 2 and record["sweep"]["seq_len"] == [32]
    first_id = json.loads((out / "run1" / "meta.json").read_text())["run_id"]

    # a set stopped before its second run began: the resume keeps the first and makes the second
    for f in (out / "run2").iterdir():
        f.unlink()
    (out / "run2").rmdir()
    resumed = run_cli("run", "--resume", "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "run1" / "meta.json").read_text())["run_id"] == first_id
    rows = [json.loads(x) for x in (out / "run2" / "rows.jsonl").read_text().splitlines()]
    assert sorted(r["variant"] for r in rows) == ["chunked", "naive"]

    cmp = compare_runs(out, out)
    assert set(cmp.cells["status_a"]) == {"ok"} and "2 runs" in cmp.label_a


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--repeat", "1", "--out", "{d}/s"], "--repeat 1: a run set needs 2 or more runs"),
        (["--repeat", "3"], "--repeat 3 needs --out DIR"),
        (["--repeat", "3", "--out", "{d}/full"], "already exists and is not empty"),
        (["--repeat", "3", "--out", "{d}/s", "--resume"], "drop --repeat"),
        (["--repeat", "3", "--out", "{d}/s", "--redo-drift"], "give them with --resume"),
        (["--repeat", "3", "--out", "{d}/s", "--variant-file", "{d}/nope.py"], "does not exist"),
    ],
)
def test_bad_input_for_a_run_set_is_one_line_and_nothing_written(tmp_path, extra, message):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    done = run_cli("run", *TINY, *[a.format(d=tmp_path) for a in extra])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "s").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["full"]


def test_a_resume_of_a_folder_that_is_no_run_set_says_so(tmp_path):
    (tmp_path / "s").mkdir()
    done = run_cli("run", "--resume", "--out", str(tmp_path / "s"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1


def test_the_python_api_makes_a_run_set_too(tmp_path):
    import attnbench

    tiny = dict(variants="naive", seq_len="32", heads=1, d_k=16, budget_ms=5, warmup_ms=1, min_ms=1)
    runs = attnbench.run(**tiny, repeat=2, out=tmp_path / "set", calibrate_ms=20)
    assert [r.path.name for r in runs] == ["run1", "run2"] and all(r.counts == {"ok": 1} for r in runs)
    assert attnbench.run(out=tmp_path / "set", resume=True)[1].resumed == 1  # finished: nothing to add
    for kw, message in [
        ({"repeat": 1, "out": tmp_path / "x"}, "repeat=1: a run set needs 2 or more runs"),
        ({"repeat": 2}, "repeat=2 needs out="),
        ({"repeat": 2, "out": tmp_path / "x", "rerun": tmp_path / "set" / "run1"}, "not with repeat="),
    ]:
        with pytest.raises(ValueError, match=message):
            attnbench.run(**tiny, **kw)
    assert not (tmp_path / "x").exists()


def test_a_dry_run_of_a_run_set_forecasts_the_whole_set_and_writes_nothing(tmp_path):
    done = run_cli("run", *TINY, "--repeat", "3", "--out", str(tmp_path / "s"), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "a run set of 3 such runs, one after another: about" in done.stdout
    assert "dry run: nothing was measured or written" in done.stdout
    assert not (tmp_path / "s").exists()
