"""compare on run sets (results.runset): each side several runs of the same code, judged at the run level
(results.judge), so that what moves from one run to the next is not taken for a regression, while a real
slowdown beyond it still is; sets made interleaved pair run i with run i."""

from __future__ import annotations

import json

import pytest
import synthetic
from conftest import run_cli
from synthetic import rows_in_rounds

from attnbench.reports.compare import compare_runs, verdict_rule
from attnbench.reports.compare_page import text_report
from attnbench.results import RunDirError, runset
from attnbench.results.thresholds import parse_threshold

GATE = parse_threshold("median:5%")
SEQ = (256, 512, 1024)
# each run of the same code: sdpa against naive off by its own few per cent (what moves between runs on
# the reference VM, benchmarks/false_alarm.py); the visits inside each run tight around it (±1%)
OFFSETS_A = (1.04, 0.96, 1.02, 0.98, 1.00)
OFFSETS_B = (0.97, 1.03, 1.01, 0.99, 1.045)


def _run(path, offset: float, seed: int, slower: float = 1.0, speed: float = 1.0):
    times = {"naive": 1.0, "sdpa": 0.4 * offset * slower}
    rows = rows_in_rounds(times, seed, rounds=6, swing=0.01, speed=speed, seq=SEQ)
    return synthetic.write_run(path, rows, run_id=f"{path.parent.name}-{path.name}")


def _set(path, offsets, seed: int, **kw):
    for i, off in enumerate(offsets):
        _run(path / f"run{i + 1}", off, seed + i, **kw)
    return path


def test_single_runs_cry_wolf_where_run_sets_do_not(tmp_path):
    """Two single runs of identical code, 8% apart by what moves between runs: each run's own visits are
    tight, so relative to naive the gate fails; five runs a side, judged by the spread between them, it
    does not (the run level), and every ratio lies in its interval."""
    single = compare_runs(
        _run(tmp_path / "one" / "a", 0.96, 1),
        _run(tmp_path / "one" / "b", 1.04, 2),
        threshold=GATE,
        control_variant="naive",
    )
    assert sorted(single.regressions["variant"]) == ["sdpa"] * 3

    a = _set(tmp_path / "a", OFFSETS_A, 10, speed=1.0)
    b = _set(tmp_path / "b", OFFSETS_B, 20, speed=1.2)  # and a machine 20% slower through all of B
    cmp = compare_runs(a, b, threshold=GATE, control_variant="naive")
    assert cmp.regressions.empty
    sdpa = cmp.cells[cmp.cells["variant"] == "sdpa"]
    assert (sdpa["basis"] == "run").all() and (sdpa["n_a"] == 5).all() and (sdpa["n_b"] == 5).all()
    assert ((sdpa["ratio_ci_low"] <= sdpa["ratio"]) & (sdpa["ratio"] <= sdpa["ratio_ci_high"])).all()
    assert sdpa["ratio"].to_numpy() == pytest.approx(1.0, abs=0.03)
    assert "5 runs (a-run1 .. a-run5)" in cmp.label_a
    assert "Judged at the run level: the replicates are each run's median" in verdict_rule(cmp)
    assert "BLIND" not in verdict_rule(cmp)
    # as measured, the slower machine is every cell's regression, its runs' spread notwithstanding
    measured = compare_runs(a, b, threshold=GATE)
    assert len(measured.regressions) == 6 and "which a --control takes out" in verdict_rule(measured)


def test_a_blind_comparison_of_run_sets_of_two_says_what_it_compared(tmp_path):
    """Two run sets of two runs each (too few to judge by runs) read 'A and B are different runs, one a
    side'; the rule says what each side held, and two single runs still read as before."""
    a, b = _set(tmp_path / "a", OFFSETS_A[:2], 10), _set(tmp_path / "b", OFFSETS_B[:2], 20)
    rule = verdict_rule(compare_runs(a, b, threshold=GATE))
    assert "BLIND to the spread between runs" in rule and "different runs, one a side" not in rule
    assert "A is a run set of 2 runs and B a run set of 2 runs, too few to judge by runs (3 a side)" in rule
    one = verdict_rule(compare_runs(a / "run1", b / "run1", threshold=GATE))
    assert "A and B are different runs, one a side, with nothing paired" in one


def test_a_planted_slowdown_beyond_the_runs_spread_is_caught(tmp_path):
    a = _set(tmp_path / "a", OFFSETS_A, 10)
    b = _set(tmp_path / "b", OFFSETS_B, 20, slower=1.10)
    cmp = compare_runs(a, b, threshold=GATE, control_variant="naive")
    assert sorted(cmp.regressions["variant"]) == ["sdpa"] * 3
    assert (cmp.regressions["ratio"] > 1.07).all() and (cmp.regressions["basis"] == "run").all()
    assert "REGRESSION" in text_report(cmp)


def test_a_cell_broken_in_one_run_of_a_set_is_broken(tmp_path):
    a = _set(tmp_path / "a", OFFSETS_A[:3], 10)
    b = _set(tmp_path / "b", OFFSETS_B[:3], 20)
    rows = [
        dict(r, status="error", message="boom", time_ms_median=None, samples_ms=None)
        if r["variant"] == "sdpa" and r["seq_len"] == 512
        else r
        for r in rows_in_rounds({"naive": 1.0, "sdpa": 0.4}, 5, rounds=6, swing=0.01, seq=SEQ)
    ]
    synthetic.write_run(b / "run4", rows, run_id="b-run4")
    cmp = compare_runs(a, b, threshold=GATE)
    broken = cmp.cells[(cmp.cells["variant"] == "sdpa") & (cmp.cells["seq_len"] == 512)].iloc[0]
    assert broken["status_b"] == "error" and bool(broken["regression"])
    ok = cmp.cells[(cmp.cells["variant"] == "sdpa") & (cmp.cells["seq_len"] == 256)].iloc[0]
    assert ok["basis"] == "run" and ok["n_b"] == 4


def test_what_is_not_a_run_set_is_refused_in_one_line(tmp_path):
    a = _set(tmp_path / "a", OFFSETS_A[:3], 10)
    single = a / "run1"
    assert runset.members(single) is None and [p.name for p in runset.members(a)] == ["run1", "run2", "run3"]
    (tmp_path / "lonely" / "x").mkdir(parents=True)
    _run(tmp_path / "lonely" / "run1", 1.0, 3)
    (tmp_path / "notes.txt").write_text("a file")
    other = _set(tmp_path / "other", OFFSETS_B[:3], 20)
    for path, message in [
        (tmp_path / "nowhere", "does not exist"),
        (tmp_path / "notes.txt", "notes.txt' is a file, not a run directory"),
        (tmp_path / "lonely", "not a run (1 run in its subdirectories)"),
        (tmp_path / "lonely" / "x", "not a run (no meta.json and no runs in its subdirectories)"),
    ]:
        with pytest.raises(RunDirError, match=message.replace("(", r"\(").replace(")", r"\)")):
            runset.members(path)
    for kw, message in [
        ({"run_b": single}, "RUN_A is a run set (3 runs) and the other a single run"),
        ({"run_b": other, "normalize": "calibration"}, "--normalize rescales one run by its calibration"),
        ({"run_b": a, "variant_a": "naive", "variant_b": "sdpa"}, "--variant-a/--variant-b in one run set"),
        ({"run_b": tmp_path / "." / "a"}, "the same run is given twice"),
    ]:
        args = {"run_b": a, **kw}
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            compare_runs(a, args.pop("run_b"), **args)


def test_cli_compare_run_sets(tmp_path):
    a = _set(tmp_path / "a", OFFSETS_A, 10)
    b = _set(tmp_path / "b", OFFSETS_B, 20, slower=1.10)
    gate = ["--fail-above", "median:5%", "--control", "naive"]
    caught = run_cli("compare", str(a), str(b), *gate, "--out", str(tmp_path / "o1"))
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert "5 runs (a-run1 .. a-run5)" in caught.stdout and "REGRESSION sdpa" in caught.stdout
    same = _set(tmp_path / "a2", OFFSETS_B, 30)
    quiet = run_cli("compare", str(a), str(same), *gate, "--out", str(tmp_path / "o2"))
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    bad = run_cli("compare", str(a), str(b / "run1"), "--out", str(tmp_path / "o3"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "a single run" in bad.stderr
    assert not (tmp_path / "o3").exists()


def _made_at(run, second: int):
    meta = json.loads((run / "meta.json").read_text())
    meta["created"] = f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}+00:00"
    (run / "meta.json").write_text(json.dumps(meta))


# what drifts over minutes on the reference VM: sdpa against naive, shared by runs made back to back
DRIFT = (1.06, 0.94, 1.03, 0.97, 1.0)


def _interleaved(tmp_path, slower: float = 1.0, order=("a", "b")):
    """Two sets made interleaved: slot i's run of each back to back, both at slot i's drift."""
    sets = {side: tmp_path / side for side in order}
    for i, drift in enumerate(DRIFT):
        for k, side in enumerate(order):
            run = _run(sets[side] / f"run{i + 1}", drift, 100 * i + k, slower=slower if side == "b" else 1.0)
            _made_at(run, 20 * i + k)
    return sets["a"], sets["b"]


def test_interleaved_sets_are_paired_run_by_run(tmp_path):
    """The drift over minutes (±6% here) is in both sets alike: unpaired, it is spread that hides a 10%
    slowdown; paired run by run (the sets alternate in time: detected from the runs' start times), the
    slowdown is caught and identical code is not flagged."""
    a, b = _interleaved(tmp_path / "plant", slower=1.10)
    cmp = compare_runs(a, b, threshold=GATE, control_variant="naive")
    assert "runs paired" in cmp.match
    sdpa = cmp.cells[cmp.cells["variant"] == "sdpa"]
    assert (sdpa["basis"] == "run paired").all()
    assert sorted(cmp.regressions["variant"]) == ["sdpa"] * 3
    assert "Paired: run i of B with run i of A" in verdict_rule(cmp)

    a, b = _interleaved(tmp_path / "twin")
    assert compare_runs(a, b, threshold=GATE, control_variant="naive").regressions.empty
    a, b = _interleaved(tmp_path / "twin-b-first", order=("b", "a"))  # B's run first in each slot
    assert "runs paired" in compare_runs(a, b).match

    # the same runs, one set made after the other: not paired, and the drift widens every interval
    a, b = _interleaved(tmp_path / "apart", slower=1.10)
    for i in range(len(DRIFT)):
        _made_at(b / f"run{i + 1}", 1000 + i)
    apart = compare_runs(a, b, threshold=GATE, control_variant="naive")
    assert "runs paired" not in apart.match
    unpaired = apart.cells[apart.cells["variant"] == "sdpa"]
    assert (unpaired["basis"] == "run").all()
    width = (unpaired["ratio_ci_high"] - unpaired["ratio_ci_low"]).to_numpy()
    assert (width > 3 * (sdpa["ratio_ci_high"] - sdpa["ratio_ci_low"]).to_numpy()).all()


def test_a_command_that_takes_runs_names_a_run_set_for_what_it_is(tmp_path):
    a = _set(tmp_path / "a", OFFSETS_A[:3], 10)
    for cmd in (["report", str(a), "--out", str(tmp_path / "r")], ["export", str(a)]):
        done = run_cli(*cmd)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "is a run set (3 runs: run1, run2, run3), not a run" in done.stderr
    assert not (tmp_path / "r").exists()


def test_a_cell_missing_from_a_run_is_paired_only_over_the_runs_both_have(tmp_path):
    """Interleaved sets whose sdpa N=256 cell is missing in A's run 3 and B's run 4: that cell's runs pair by
    their place in the sets (runs 1, 2 and 5), never run 4 of A with run 5 of B; the others pair all five."""
    a, b = _interleaved(tmp_path)
    for run in (a / "run3", b / "run4"):
        rows = [x for x in (run / "rows.jsonl").read_text().splitlines() if x.strip()]
        kept = [
            x
            for x in rows
            if not ('"variant":"sdpa"' in x.replace(" ", "") and '"seq_len":256,' in x.replace(" ", ""))
        ]
        assert len(kept) == len(rows) - 1
        (run / "rows.jsonl").write_text("\n".join(kept) + "\n")
    cells = compare_runs(a, b, control_variant="naive").cells.set_index(["variant", "seq_len"])
    assert cells.loc[("sdpa", 256), "basis"] == "run paired" and cells.loc[("sdpa", 256), "n_a"] == 3
    assert cells.loc[("sdpa", 512), "basis"] == "run paired" and cells.loc[("sdpa", 512), "n_a"] == 5
    assert cells.loc[("sdpa", 256), "ratio"] == pytest.approx(1.0, abs=0.02)
