"""benchmarks/false_alarm.py end to end in a tiny configuration (real runs, a real `attnbench interleave`,
this checkout's compare; the quick look judged again from the same runs), the JSON's structure, its table,
--rejudge, the plant in the workers, and its argument errors (one line, exit 2). What it measures is not
checked: on a tiny sweep it means nothing."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import load_benchmark, run_cli

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "false_alarm.py"
# the smallest runs that still take every path: N=64, budgets of a few ms
RUN_TINY = ["--budget-ms=6", "--warmup-ms=1", "--min-ms=1", "--calibrate-ms=0"]
TINY = ["--seq-len", "64", *(f"--run-arg={a}" for a in RUN_TINY)]
VERDICTS = {"faster", "slower", "same", "ambiguous"}
CELL = {"variant", "seq_len", "ratio", "ci", "p", "p_holm", "verdict", "regression", "why"}


@pytest.fixture(scope="module")
def fa():
    return load_benchmark("false_alarm")


def _script(*argv: str | Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, argv)], capture_output=True, text=True, timeout=timeout
    )


def _main(fa, *argv: str | Path) -> tuple[int, str, str]:
    """The script's main() in this process: (exit status, stdout, stderr). Its runs are real processes
    either way (each `attnbench run` and `attnbench interleave` a fresh interpreter); this saves only the
    script's own interpreter and imports. test_the_table_is_read_from_the_json starts the script itself."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = fa.main([str(a) for a in argv])
        except SystemExit as exc:  # a failed run: the script exits with its message
            print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def measured(fa, tmp_path_factory):
    """Two stories: 1 run of the kernels' A/B, and one group of 3 interleaved runs a side (a, b, planted);
    (folder, JSON, stdout). The quick look judges the same runs (test_rejudge_...)."""
    d = tmp_path_factory.mktemp("false-alarm")
    code, stdout, stderr = _main(fa, "--story", "kernels,environments", "--runs", "1", "--rounds", "3",
                                 "--groups", "1", "--group-runs", "3", *TINY, "--work", d / "work", "--out",
                                 d / "out.json")  # fmt: skip
    assert code == 0, stderr[-2000:]
    return d, json.loads((d / "out.json").read_text()), stdout


def _check_comparison(c: dict, level: str, paired: bool, blind: bool) -> None:
    assert (c["level"], c["paired"], c["blind"]) == (level, paired, blind)
    assert c["cells"] and c["failed"] == any(cell["regression"] for cell in c["cells"])
    for cell in c["cells"]:
        assert CELL <= set(cell)
        assert cell["seq_len"] == 64 and len(cell["ci"]) == 2 and cell["verdict"] in VERDICTS


def _check_pairs(block: dict, n: int, level: str, paired: bool, blind: bool) -> None:
    assert block["pairs"] == len(block["results"]) == n
    assert block["failed"] == sum(r["failed"] for r in block["results"])
    for pair in block["results"]:
        assert len(pair["ways"]) == 2 and pair["failed"] == any(w["failed"] for w in pair["ways"])
        a, b = pair["ways"]
        assert (a["a"], a["b"]) == (b["b"], b["a"])  # both ways round
        for way in pair["ways"]:
            _check_comparison(way, level, paired, blind)


def _check_power(block: dict, slowdown: float, n: int, level: str, paired: bool, blind: bool) -> None:
    assert block["slowdown"] == slowdown and block["comparisons"] == len(block["results"]) == n
    assert block["caught"] == sum(r["failed"] for r in block["results"])
    for c in block["results"]:
        _check_comparison(c, level, paired, blind)


@pytest.mark.slow
def test_the_kernels_and_environments_stories_end_to_end(measured):
    _, doc, _ = measured
    assert list(doc["stories"]) == ["kernels", "environments"]
    assert doc["gate"] == "--fail-above median:5%" and doc["machine"]["cpu"] and doc["commit"] != "unknown"
    assert doc["loadavg_before"] and doc["loadavg_after"] and doc["elapsed_s"] > 0

    k = doc["stories"]["kernels"]
    assert k["story"] == "two versions of a kernel" and k["runs"] == 1 and len(k["run_wall_s"]) == 1
    assert k["command"].startswith("attnbench run --variants naive,chunked,chunked_twin,chunked_planted ")
    assert "--rounds 3" in k["command"] and "--variant-b chunked_twin" in k["judged_by"][0]
    _check_pairs(k["false_alarms"], 1, "visit", True, False)
    assert {w["how"]["variant_b"] for p in k["false_alarms"]["results"] for w in p["ways"]} == {
        "chunked", "chunked_twin"
    }  # fmt: skip
    _check_power(k["planted"], 0.1, 1, "visit", True, False)

    e = doc["stories"]["environments"]
    assert e["command"].startswith("attnbench interleave --runs 3 --side a --side b ")
    assert "'planted=env ATTNBENCH_PLANT=0.1 attnbench' OUT -- --variants naive,chunked_env" in e["command"]
    _check_pairs(e["false_alarms"], 1, "run", True, False)
    _check_power(e["planted"], 0.1, 2, "run", True, False)
    c = e["with_control"]
    assert c["control"] == "naive"
    _check_pairs(c["false_alarms"], 1, "run", True, False)
    _check_power(c["planted"], 0.1, 2, "run", True, False)
    assert all(r["how"] == {"control_variant": "naive"} for r in c["planted"]["results"])
    walls = e["run_wall_s"]["g1"]
    assert len(walls["run_wall_s"]) == 9 and walls["wall_s"] >= sum(walls["run_wall_s"].values())


@pytest.mark.slow
def test_the_plant_reaches_the_workers(tmp_path, monkeypatch):
    """A run whose environment holds ATTNBENCH_PLANT=9 (as `env ATTNBENCH_PLANT=9 attnbench run` gives it,
    a planted side's command; here the command runs in this process, see conftest.run_cli, and its workers
    are real spawned processes that inherit the variable) measures chunked_env about 10x chunked in its
    worker processes, whatever the machine's load (the plant spins for 9 times as long as its own chunked
    call took; the two cells' chunked calls at N = 64 differ by up to 2x between cells, so the bound is
    3x); unset, chunked_env is chunked."""
    monkeypatch.setenv("ATTNBENCH_PLANT", "9")
    run_cli("run", "--variants", "chunked,chunked_env", "--variant-file", str(ROOT / "benchmarks" /
            "planted_slowdown.py"), "--seq-len", "64", "--threads", "1", "-q", "--out", str(tmp_path / "run"),
            *RUN_TINY, check=True)  # fmt: skip
    rows = {
        r["variant"]: r for r in map(json.loads, (tmp_path / "run" / "rows.jsonl").read_text().splitlines())
    }
    assert rows["chunked_env"]["time_ms_median"] > 3 * rows["chunked"]["time_ms_median"]


@pytest.mark.slow
def test_the_table_is_read_from_the_json(measured):
    d, _, stdout = measured
    done = _script("--table", d / "out.json", timeout=120)
    assert done.returncode == 0 and done.stdout == stdout  # the table a measurement ends with
    lines = done.stdout.strip().splitlines()
    assert lines[:2] == [
        "| story | command | false alarms | planted 10% caught |",
        "| --- | --- | --- | --- |",
    ]
    rows = [line.split(" | ") for line in lines[2:]]
    assert [r[0] for r in rows] == ["| two versions of a kernel", "| two environments"]
    assert rows[0][1].startswith("`attnbench run --variants naive,chunked,chunked_twin,chunked_planted ")
    assert rows[0][1].endswith("`attnbench compare RUN RUN --variant-a chunked --variant-b chunked_twin "
                               "--fail-above median:5%`")  # fmt: skip
    assert re.fullmatch(r"\d of 1", rows[0][2]) and re.fullmatch(r"\d of 1 \|", rows[0][3])  # --runs 1
    assert re.fullmatch(r"\d of 1 \(\d of 1 with --control naive\)", rows[1][2])
    assert re.fullmatch(r"\d of 2 \(\d of 2 with --control naive\) \|", rows[1][3])


@pytest.mark.slow
def test_rejudge_makes_no_run_and_the_quick_look_judges_the_groups(fa, measured):
    d, doc, _ = measured
    before = sorted(p.relative_to(d) for p in (d / "work").rglob("meta.json"))
    code, _, stderr = _main(fa, "--rejudge", "--story", "kernels,environments,quick", "--work", d / "work",
                            "--out", d / "again.json")  # fmt: skip
    assert code == 0, stderr[-2000:]
    again = json.loads((d / "again.json").read_text())
    assert sorted(p.relative_to(d) for p in (d / "work").rglob("meta.json")) == before
    assert list(again["stories"]) == ["kernels", "environments", "quick"]
    assert again["rejudged"]["runs"] == len(before) == 10
    # the same runs judged by the same compare: the same verdicts
    for name in ("kernels", "environments"):
        assert again["stories"][name]["false_alarms"] == doc["stories"][name]["false_alarms"]
        assert again["stories"][name]["run_wall_s"] == doc["stories"][name]["run_wall_s"]

    q = again["stories"]["quick"]
    assert q["command"].count("attnbench run ") == 2 and q["judged_by"][0].startswith("attnbench compare A B")
    _check_pairs(q["false_alarms"], 3, "visit", False, True)  # run i of a and of b: single runs, blind
    _check_power(q["planted"], 0.1, 6, "visit", False, True)
    _check_power(q["planted_2x"], 1.0, 0, "visit", False, True)  # made only with the quick look asked for
    row = fa.table_rows(again)[2]
    assert row[0] == "a quick look" and re.fullmatch(r"\d of 3", row[2]) and re.fullmatch(r"\d of 6", row[3])
    # without --story: the stories measured
    assert fa.main(["--rejudge", "--work", str(d / "work"), "--out", str(d / "measured.json")]) == 0
    assert list(json.loads((d / "measured.json").read_text())["stories"]) == ["kernels", "environments"]


def test_a_quick_look_makes_a_2x_side_in_its_first_group(fa):
    assert fa.group_sides(False, "ab") == ["a", "b", "planted=env ATTNBENCH_PLANT=0.1 ab"]
    assert fa.group_sides(True, "ab")[3] == "planted2x=env ATTNBENCH_PLANT=1 ab"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--story", "kernels,bogus"], "--story takes distinct names"),
        (["--story", "quick,quick"], "--story takes distinct names"),
        (["--story", ""], "--story takes distinct names"),
        (["--rounds", "2"], "--rounds must be at least 3"),
        (["--group-runs", "2"], "--group-runs must be at least 3"),
        (["--runs", "0"], "--runs must be at least 1"),
        (["--runs", "many"], "argument --runs: invalid int value"),
        (["--fail-above", "median:five"], "bad --fail-above"),
        (["--rejudge"], "--rejudge judges the runs kept in --work DIR"),
        (["--table", "x.json", "--runs", "3"], "give it alone (not --runs)"),
        (["--processes", "3"], "unrecognized arguments: --processes"),
        (["--set-size", "3"], "unrecognized arguments: --set-size"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(fa, capsys, argv, says):
    with pytest.raises(SystemExit) as exc:
        fa.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and says in err and err.count("\n") == 1 and err.startswith("false_alarm.py:")


def test_work_folders_are_checked_before_any_run(fa, capsys, tmp_path):
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "something").write_text("")
    for argv, says in (
        (["--work", tmp_path / "kept"], "is not empty"),
        (["--rejudge", "--work", tmp_path / "kept"], "holds false_alarm.json"),
    ):
        with pytest.raises(SystemExit) as exc:
            fa.main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and says in err and err.count("\n") == 1


def test_a_table_of_a_missing_file_is_one_line(fa, capsys, tmp_path):
    assert fa.main(["--table", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("false_alarm.py: error: --table") and err.count("\n") == 1
