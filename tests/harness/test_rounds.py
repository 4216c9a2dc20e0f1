"""--rounds R: every cell visited R times, round-robin over the whole sweep, merged into one row."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
from conftest import DATA, run_cli

from attnbench.harness.measure.rows import merge_rounds
from attnbench.harness.run.executors.base import Plan
from attnbench.harness.run.executors.rounds import run_rounds
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers.cellrunner import SkipAhead
from attnbench.reports import fit
from attnbench.results import store
from attnbench.results.formulas import summarize


def _spec(variant: str, n: int) -> CellSpec:
    return CellSpec(variant, "cpu", "float32", 1, 1, n, 8, 8, False, 0.0, "fwd")


class FakeVisits:
    """Stands in for the executor's Processes: records each visit asked for, answers a row whose samples
    say which visit made them; `fail` maps (cell_id, visit) to a status."""

    def __init__(self, fail: dict | None = None) -> None:
        self.asked: list[tuple[str, int]] = []
        self.fail = fail or {}

    def run(self, spec: CellSpec, visit: tuple[int, int]) -> dict:
        index, _ = visit
        self.asked.append((spec.cell_id, index))
        row = {"cell_id": spec.cell_id, "variant": spec.variant, "seq_len": spec.seq_len, "flops": 1e6}
        status = self.fail.get((spec.cell_id, index), "ok")
        if status != "ok":
            return {**row, "status": status, "message": "boom"}
        samples = [float(index), index + 0.5]
        return {**row, "status": "ok", "message": "", "samples_ms": samples, **summarize(samples),
                "first_call_ms": 10.0 * index, "elapsed_s": 1.0}  # fmt: skip


def _plan(tmp_path, cells, done=()) -> Plan:
    sweep = SimpleNamespace(settings=Settings(rounds=3))
    return Plan(sweep=sweep, cells=cells, config={}, run_dir=tmp_path, done=list(done))


def test_rounds_visit_the_whole_sweep_round_robin_and_merge_each_cell(tmp_path):
    cells = [_spec(v, n) for n in (16, 32) for v in ("naive", "sdpa")]
    fake, written = FakeVisits(), []
    run_rounds(_plan(tmp_path, cells), fake, SkipAhead(), written.append)
    ids = [c.cell_id for c in cells]
    # round 2 in the reverse order: a drift within a round favours neither end of the sweep
    assert fake.asked == [(cid, i) for i, order in ((1, ids), (2, ids[::-1]), (3, ids)) for cid in order]
    assert [r["cell_id"] for r in written] == ids  # each row once its third visit ends
    for row in written:
        assert row["samples_ms"] == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5] and row["n_samples"] == 6
        assert row["round_medians_ms"] == [1.25, 2.25, 3.25] and row["round_samples"] == [2, 2, 2]
        assert "process_medians_ms" not in row  # kept for worker processes (compare's judge)
        assert row["first_call_ms"] == 10.0 and row["rewarm_ms"] == 50.0  # visits 2 and 3's warm-ups
        assert row["elapsed_s"] == 3.0
    # the first two visits of each cell are kept until its row is written
    assert {cid: len(v) for cid, v in store.read_visits(tmp_path).items()} == dict.fromkeys(ids, 2)


def test_a_failed_visit_ends_its_cell(tmp_path):
    a, b = _spec("naive", 16), _spec("sdpa", 16)
    fake, written = FakeVisits({(a.cell_id, 1): "wrong", (b.cell_id, 2): "crashed"}), []
    run_rounds(_plan(tmp_path, [a, b]), fake, SkipAhead(), written.append)
    assert fake.asked == [(a.cell_id, 1), (b.cell_id, 1), (b.cell_id, 2)]
    assert [(r["cell_id"], r["status"]) for r in written] == [(a.cell_id, "wrong"), (b.cell_id, "crashed")]
    assert written[0]["message"] == "boom" and written[1]["message"] == "in round 2 of 3: boom"


def test_resume_measures_only_the_visits_missing(tmp_path):
    a, b = _spec("naive", 16), _spec("sdpa", 16)
    first = FakeVisits()
    log = store.VisitLog(tmp_path)
    log.append(a.cell_id, 1, first.run(a, (1, 3)))
    log.append(a.cell_id, 2, first.run(a, (2, 3)))
    log.append(b.cell_id, 1, first.run(b, (1, 3)))
    log.close()
    with (tmp_path / store.VISITS).open("ab") as fh:
        fh.write(b'{"cell_id": "torn')  # an interruption mid-write
    fake, written = FakeVisits(), []
    with pytest.warns(store.RowWarning):
        run_rounds(_plan(tmp_path, [a, b]), fake, SkipAhead(), written.append)
    assert fake.asked == [(b.cell_id, 2), (a.cell_id, 3), (b.cell_id, 3)]
    assert [r["round_medians_ms"] for r in written] == [[1.25, 2.25, 3.25]] * 2


def test_a_real_run_in_rounds(tmp_path):
    out = tmp_path / "r"
    p = run_cli(
        "run", "--variants", "naive,sdpa", "--seq-len", "16,32", "--heads", "1", "--d-k", "8",
        "--rounds", "3", "--threads", "1", "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1",
        "--out", str(out), "-q",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = store.read_rows(out)
    order = re.findall(r"^cell (\S+)$", (out / "worker.log").read_text(), re.M)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == 4 and order == ids + ids[::-1] + ids  # round-robin, alternating, rows in order
    for row in rows:
        assert row["status"] == "ok", row["message"]
        assert len(row["round_medians_ms"]) == 3 and all(m > 0 for m in row["round_medians_ms"])
        assert row["n_samples"] == len(row["samples_ms"]) >= 6  # ceil(5 / 3) from each visit
        assert row["rewarm_ms"] > 0 and row["peak_mem_bytes"] > 0 and row["rel_err"] is not None


@pytest.mark.parametrize("executor", ["ray", "slurm"])
def test_rounds_elsewhere_than_local_are_refused_in_one_line(tmp_path, executor):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--rounds", "3", "--executor", executor,
                "--out", str(out))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"attnbench: error: --rounds 3 visits the whole sweep in rounds on one worker: "
        f"--executor local only, not {executor}"
    ]
    assert not out.exists()


def test_more_processes_than_rounds_are_refused(tmp_path):
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--rounds", "2", "--processes", "3",
                "--out", str(tmp_path / "r"))  # fmt: skip
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "--processes 3 with --rounds 2: each visit is made in one process" in p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_rounds_in_processes_make_each_visit_in_its_own_process(tmp_path):
    """--rounds 3 --processes 3: visit i of every cell in worker process i, so that the visit medians
    compare judges by span processes (allocation, page placement) as well as the run's drift."""
    out = tmp_path / "r"
    p = run_cli(
        "run", "--variants", "naive,sdpa", "--seq-len", "16,32", "--heads", "1", "--d-k", "8",
        "--rounds", "3", "--processes", "3", "--threads", "1", "--warmup-ms", "1", "--budget-ms", "3",
        "--min-ms", "1", "--out", str(out), "-q",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = store.read_rows(out)
    ids = [r["cell_id"] for r in rows]
    logs = [out / "worker.log", out / "worker-p2.log", out / "worker-p3.log"]
    for log, order in zip(logs, (ids, ids[::-1], ids), strict=True):  # one visit of every cell each, in
        assert re.findall(r"^cell (\S+)$", log.read_text(), re.M) == order  # the sweep's order, alternating
    for row in rows:
        assert row["status"] == "ok", row["message"]
        assert len(row["round_medians_ms"]) == 3 and row["fresh_rel_err"] is not None


def test_merge_rounds_is_merge_processes_rule():
    rows = [FakeVisits().run(_spec("naive", 16), (i, 3)) for i in (1, 2, 3)]
    merged = merge_rounds(rows)
    assert merged["round_medians_ms"] == [1.25, 2.25, 3.25] and merged["time_ms_median"] == 2.25


def test_the_fit_takes_a_cell_spread_from_its_visit_medians():
    medians = [10.0, 11.0, 12.5]
    logs = [math.log(m) for m in medians]
    mean = sum(logs) / 3
    sem = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2 / 3)
    # three visits or more: the standard error of the mean log visit median, whatever the samples' IQR or
    # the speed probes say (the visits span the run: they hold its drift)
    assert fit.cell_log_se(0.001, 100, 0.5, None, medians) == pytest.approx(sem)
    assert fit.cell_log_se(0.001, 100, 1.0, None, [10.0, 10.0, 10.0]) == fit.SE_FLOOR
    # fewer than three: the existing rule
    for few in (None, [], [10.0, 12.0]):
        assert fit.cell_log_se(0.001, 100, 0.5, None, few) == fit.cell_log_se(0.001, 100, 0.5)


@pytest.mark.slow
def test_in_rounds_the_fresh_input_check_is_the_second_visits_warm_up(tmp_path):
    """A forward CPU cell's fresh-input check runs as its second visit's warm-up call (checks_ms, no
    first_call_ms there), and still catches a callable that ignores the tensors it is called with; the
    refill check stays after the first visit's timed calls."""
    out = tmp_path / "r"
    p = run_cli(
        "run", "--variant-file", str(DATA / "memo_variants.py"), "--variants", "naive,bound_setup,memo_id",
        "--seq-len", "32", "--heads", "1", "--d-k", "8", "--rounds", "3", "--threads", "1",
        "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1", "--out", str(out), "-q",
    )  # fmt: skip
    assert p.returncode == 0 and "(1 ok, 2 wrong)" in p.stderr, p.stderr
    rows = {r["variant"]: r for r in store.read_rows(out)}
    visits = store.read_visits(out)
    naive = rows["naive"]
    assert naive["status"] == "ok", naive["message"]
    first, second = visits[naive["cell_id"]][:2]
    assert first["fresh_rel_err"] is None and first["refill_rel_err"] is not None and first["checks_ms"] > 0
    assert second["first_call_ms"] is None and second["checks_ms"] > 0 and second["fresh_rel_err"] is not None
    assert naive["fresh_rel_err"] == second["fresh_rel_err"]
    assert naive["checks_ms"] == pytest.approx(first["checks_ms"] + second["checks_ms"], abs=1e-5)
    assert naive["rewarm_ms"] > 0  # the third visit's warm-up call
    bound = rows["bound_setup"]  # right on the timed tensors refilled, wrong on others: caught in visit 2
    assert bound["status"] == "wrong" and bound["message"].startswith(
        "in round 2 of 3: answer does not follow"
    )
    assert bound["refill_rel_err"] is not None and bound["rel_err"] is not None  # the first visit's, kept
    assert len(bound["samples_ms"]) > 0  # timed, as a wrong cell is
    memo = rows["memo_id"]  # remembered per tensor object: caught by the refill, in the first visit
    assert memo["status"] == "wrong" and "refilled" in memo["message"]
