"""The plan of a run's visits (harness.run.plan): rounds over the whole sweep in alternating order, settle
rounds, a failed visit ending its cell, resume from visits.jsonl; and the same in real runs."""

from __future__ import annotations

import math
import re

import pytest
from conftest import DATA, run_cli

from attnbench.harness.run import plan
from attnbench.harness.run.plan import SETTLE_RATIO, VisitPlan, unsettled
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.reports import fit
from attnbench.results import store, visits
from attnbench.results.formulas import summarize
from attnbench.results.judge import separated


def _spec(variant: str, n: int = 16) -> CellSpec:
    return CellSpec(variant, "cpu", "float32", 1, 1, n, 8, 8, False, 0.0, "fwd")


class Fake:
    """Stands in for the worker: records each visit asked for (cell_id or letter, index), answers a row
    whose samples are `times(variant, index)` (default: the index itself); `fail` maps (key, index) to a
    status."""

    def __init__(self, times=None, fail: dict | None = None, key=lambda spec: spec.cell_id) -> None:
        self.asked: list[tuple[str, int]] = []
        self.times = times or (lambda variant, index: float(index))
        self.fail, self.key = fail or {}, key

    def __call__(self, spec: CellSpec, options: dict, worker: int = 0) -> dict:
        index, _ = options["visit"]
        self.asked.append((self.key(spec), index))
        self.workers = getattr(self, "workers", []) + [worker]
        row = {"cell_id": spec.cell_id, "variant": spec.variant, "seq_len": spec.seq_len, "flops": 1e6}
        status = self.fail.get((self.key(spec), index), "ok")
        if status != "ok":
            return {**row, "status": status, "message": "boom"}
        t = self.times(spec.variant, index)
        samples = [t, t + 0.5]
        return {**row, "status": "ok", "message": "", "samples_ms": samples, **summarize(samples),
                "first_call_ms": 10.0 * index, "elapsed_s": 1.0}  # fmt: skip


def _carry(cells, fake, rounds=3, settle=0, made=None, journal=None, workers=1) -> list[dict]:
    written: list[dict] = []
    VisitPlan(cells, rounds, settle, made, journal, workers).carry_out(fake, written.append)
    return written


def test_visits_rotate_over_the_workers():
    cells = [_spec(v) for v in ("naive", "sdpa")]
    fake = Fake()
    _carry(cells, fake, rounds=4, workers=2)
    assert fake.workers == [0, 0, 1, 1, 0, 0, 1, 1]  # visit i of every cell in worker (i - 1) mod 2
    with pytest.raises(ValueError, match="^--workers 3 with --rounds 2: visit i of a cell is made in worker"):
        plan.check(Settings(rounds=2, workers=3), "local", ordered=True)


def test_rounds_visit_the_whole_sweep_round_robin_and_summarise_each_cell():
    cells = [_spec(v, n) for n in (16, 32) for v in ("naive", "sdpa")]
    fake, logged = Fake(), []
    written = _carry(cells, fake, journal=lambda cid, i, row: logged.append((cid, i)))
    ids = [c.cell_id for c in cells]
    # round 2 in the reverse order: a drift within a round favours neither end of the sweep
    assert fake.asked == [(cid, i) for i, order in ((1, ids), (2, ids[::-1]), (3, ids)) for cid in order]
    assert logged == fake.asked  # every visit journalled the same way, the last too
    assert [r["cell_id"] for r in written] == ids  # each row once its third visit ends
    for row in written:
        assert row["samples_ms"] == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5] and row["n_samples"] == 6
        assert row["visit_medians_ms"] == [1.25, 2.25, 3.25] and row["visit_samples"] == [2, 2, 2]
        assert row["first_call_ms"] == 10.0 and row["rewarm_ms"] == 50.0  # visits 2 and 3's warm-ups
        assert row["elapsed_s"] == 3.0


def test_one_round_is_the_cells_in_order_each_its_own_summary():
    cells = [_spec(v) for v in ("naive", "sdpa")]
    fake = Fake()
    written = _carry(cells, fake, rounds=1)
    assert fake.asked == [(c.cell_id, 1) for c in cells]
    assert [r["visit_medians_ms"] for r in written] == [[1.25], [1.25]]


def test_a_failed_visit_ends_its_cell_and_a_precheck_row_ends_it_unmeasured():
    a, b, c = _spec("naive"), _spec("sdpa"), _spec("chunked")
    fake = Fake(fail={(a.cell_id, 1): "wrong", (b.cell_id, 2): "crashed"})
    written: list[dict] = []
    skipped = {"cell_id": c.cell_id, "status": "unsupported", "message": "no"}
    VisitPlan([a, b, c], 3).carry_out(fake, written.append, lambda s: skipped if s == c else None)
    assert fake.asked == [(a.cell_id, 1), (b.cell_id, 1), (b.cell_id, 2)]
    assert [(r["cell_id"], r["status"]) for r in written] == [
        (a.cell_id, "wrong"), (c.cell_id, "unsupported"), (b.cell_id, "crashed")
    ]  # fmt: skip
    assert written[0]["message"] == "boom" and written[2]["message"] == "in visit 2 of 3: boom"


def test_each_round_but_the_last_says_it_ended_with_the_time_left():
    """In rounds a cell's line waits for its last visit, so for two thirds of a `--rounds 3` run only
    `unsupported` lines appeared: as each round but the last ends, the plan says so, before any row of
    its cells, with the visits left at this session's time per visit."""
    a, b, c, d = (_spec(v) for v in ("naive", "sdpa", "chunked", "flex"))
    events: list = []
    times = iter([0.0, 30.0, 60.0])  # the start, then the end of rounds 1 and 2: 10 s a visit
    skipped = {"cell_id": d.cell_id, "status": "unsupported", "message": "no"}
    order = VisitPlan([a, b, c, d], 3, say=events.append, clock=lambda: next(times))
    order.carry_out(Fake(), lambda row: events.append(row["status"]), lambda s: skipped if s == d else None)
    assert events == [
        "unsupported",
        "visit 1 of 3 done: 3 cells, ~60 s left",  # 3 cells x 2 visits left x 10 s
        "visit 2 of 3 done: 3 cells, ~30 s left",
        "ok", "ok", "ok",
    ]  # fmt: skip
    quiet: list = []
    VisitPlan([a, b], 1, say=quiet.append).carry_out(Fake(), lambda row: None)
    assert quiet == []  # one round: each cell's line is the sign of life


def test_resume_makes_only_the_visits_missing(tmp_path):
    a, b, c = _spec("naive"), _spec("sdpa"), _spec("chunked")
    first = Fake()
    log = visits.VisitLog(tmp_path)
    log.append(a.cell_id, 1, first(a, {"visit": (1, 3)}))
    log.append(a.cell_id, 2, first(a, {"visit": (2, 3)}))
    log.append(b.cell_id, 1, first(b, {"visit": (1, 3)}))
    log.append(c.cell_id, 1, {**first(c, {"visit": (1, 3)}), "status": "oom", "message": "big"})
    log.close()
    with (tmp_path / visits.VISITS).open("ab") as fh:
        fh.write(b'{"cell_id": "torn')  # an interruption mid-write
    fake = Fake()
    with pytest.warns(store.RowWarning):
        order = plan.for_run(tmp_path, [a, b, c], Settings(rounds=3), written=set())
    written: list[dict] = []
    order.carry_out(fake, written.append)
    order.close()
    assert fake.asked == [(b.cell_id, 2), (a.cell_id, 3), (b.cell_id, 3)]  # c ended in its first visit
    assert [r["cell_id"] for r in written] == [c.cell_id, a.cell_id, b.cell_id]
    assert written[0]["status"] == "oom"
    assert [r["visit_medians_ms"] for r in written[1:]] == [[1.25, 2.25, 3.25]] * 2
    assert len(visits.read_visits(tmp_path)[b.cell_id]) == 3  # this session's visits journalled too


# ---- settle rounds ----------------------------------------------------------------------------------

NAMES = {"a": "naive", "b": "sdpa", "c": "stable_softmax", "d": "chunked", "e": "sdpa_math"}
LETTER = {v: k for k, v in NAMES.items()}
# per variant, its time in each visit; "b" is 1.3x "a" but for visit 2, where a disturbance reversed the
# two (it ran b's visit fast, or a's slow): with three or four rounds the ranking (the visits paired by
# round, results.judge.separated) ties them, with five it tells them apart
TIMES = {
    "a": lambda i: 1.0,
    "b": lambda i: 0.95 if i == 2 else 1.3,
    "c": lambda i: 5.0,  # far behind both in every visit
    "d": lambda i: 0.85 if i == 2 else 1.03,  # 3% behind a, reversed once: too close to settle
    "e": lambda i: 1.06 if i == 2 else 1.3,  # near a in visit 2 only: one more visit separates them
}


def _level(letter: str, index: int) -> dict:
    t = TIMES[letter](index)
    samples = [t, t * 1.01]
    return {"cell_id": _spec(NAMES[letter]).cell_id, "status": "ok", "samples_ms": samples,
            **summarize(samples)}  # fmt: skip


def _row(letter, indices):
    """The summary of TIMES[letter]'s variant over these visit indices."""
    return visits.summary([_level(letter, i) for i in indices])


def test_a_pair_reversed_in_one_of_three_rounds_is_unsettled_and_a_far_or_close_one_is_not():
    a, b, c, d = (_row(v, (1, 2, 3)) for v in "abcd")
    assert b["time_ms_median"] / a["time_ms_median"] >= SETTLE_RATIO and not separated(a, b)
    assert separated(a, c) and separated(b, c)
    assert unsettled([a, b, c, d]) == {a["cell_id"], b["cell_id"]}  # d: 3% behind, left as measured
    assert unsettled([a, b, c], among={a["cell_id"], c["cell_id"]}) == set()  # b not among them
    assert separated(_row("a", (1, 2, 3, 4, 5)), _row("b", (1, 2, 3, 4, 5)))  # two more visits outvote it
    assert unsettled([a, {**c, "status": "wrong"}]) == set()


def _settle_fake(fail=None) -> Fake:
    fake = Fake(fail=fail, key=lambda s: LETTER[s.variant])

    def call(spec, options, worker=0):
        index, _ = options["visit"]
        fake.asked.append((LETTER[spec.variant], index))
        status = fake.fail.get((LETTER[spec.variant], index), "ok")
        if status != "ok":
            return {"cell_id": spec.cell_id, "variant": spec.variant, "status": status, "message": "boom"}
        return {**_level(LETTER[spec.variant], index), "variant": spec.variant, "message": ""}

    call.asked = fake.asked
    return call


def test_settle_rounds_visit_only_the_unsettled_pair_again_and_hand_out_the_rest_at_once():
    fake = _settle_fake()
    written = _carry([_spec(NAMES[v]) for v in "abc"], fake, settle=2)
    rounds = [(v, i) for i, order in ((1, "abc"), (2, "cba"), (3, "abc")) for v in order]
    # the settle rounds go on alternating: visit 4 in the reverse order, visit 5 forward
    assert fake.asked == rounds + [("b", 4), ("a", 4), ("a", 5), ("b", 5)]
    # c's row as soon as its shape is decided (after round 3), a's and b's after their last visit
    assert [LETTER[r["variant"]] for r in written] == ["c", "a", "b"]
    by = {LETTER[r["variant"]]: r for r in written}
    assert by["c"]["visit_samples"] == [2, 2, 2] and by["a"]["visit_samples"] == [2] * 5
    assert separated(by["a"], by["b"])  # the ranking now tells them apart


def test_settle_rounds_stop_once_the_pair_is_told_apart_or_after_s():
    fake = _settle_fake()
    written = _carry([_spec(NAMES[v]) for v in "ab"], fake, settle=1)
    assert fake.asked[6:] == [("b", 4), ("a", 4)]  # one settle round at most
    assert [len(r["visit_medians_ms"]) for r in written] == [4, 4]
    fake = _settle_fake()  # a pair told apart by its first settle visit is not visited a second time
    written = _carry([_spec(NAMES[v]) for v in "ae"], fake, settle=2)
    assert fake.asked[6:] == [("e", 4), ("a", 4)]
    assert separated(*written) and not separated(_row("a", (1, 2, 3)), _row("e", (1, 2, 3)))
    fake = _settle_fake()  # without settle rounds, nothing is visited again
    written = _carry([_spec(NAMES[v]) for v in "ab"], fake, settle=0)
    assert len(fake.asked) == 6 and [len(r["visit_medians_ms"]) for r in written] == [3, 3]


def test_a_failed_settle_visit_ends_its_cell_and_the_other_goes_on():
    fake = _settle_fake({("b", 4): "crashed"})
    written = _carry([_spec(NAMES[v]) for v in "ab"], fake, settle=2)
    assert fake.asked[6:] == [("b", 4), ("a", 4)]  # b ended: a has no pair left to settle
    assert [(LETTER[r["variant"]], r["status"]) for r in written] == [("b", "crashed"), ("a", "ok")]
    assert written[0]["message"] == "in visit 4 of 4: boom"
    assert len(written[1]["visit_medians_ms"]) == 4


def test_resume_in_a_settle_round_makes_only_the_visits_missing():
    a, b = _spec(NAMES["a"]), _spec(NAMES["b"])
    made = {a.cell_id: [_level("a", i) for i in range(1, 5)], b.cell_id: [_level("b", i) for i in (1, 2, 3)]}
    fake = _settle_fake()
    written = _carry([a, b], fake, settle=2, made=made)
    assert fake.asked == [("b", 4), ("a", 5), ("b", 5)]
    assert [len(r["visit_medians_ms"]) for r in written] == [5, 5]


def test_plans_the_executor_cannot_carry_out_are_refused():
    plan.check(Settings(rounds=3, settle_rounds=2), "local", ordered=True)
    with pytest.raises(ValueError, match=r"^--settle-rounds 2 visits again after the rounds: needs --rounds"):
        plan.check(Settings(settle_rounds=2), "local", ordered=True)
    with pytest.raises(ValueError, match=r"^--rounds 3 visits the whole sweep in one order on one worker"):
        plan.check(Settings(rounds=3), "ray", ordered=False)


# ---- real runs --------------------------------------------------------------------------------------


def test_a_real_run_in_rounds(tmp_path):
    out = tmp_path / "r"
    p = run_cli(
        "run", "--variants", "naive,sdpa", "--seq-len", "16,32", "--heads", "1", "--d-k", "8",
        "--rounds", "3", "--threads", "1", "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1",
        "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    # a sign of life as each round but the last ends, in the piped output, before any cell's own line
    said = [line for line in p.stderr.splitlines() if re.match(r"(visit \d of 3 done|ok )", line)]
    assert [line[:22] for line in said[:2]] == ["visit 1 of 3 done: 4 c", "visit 2 of 3 done: 4 c"], said
    assert re.fullmatch(r"visit 1 of 3 done: 4 cells, ~\d+ s left", said[0]) and len(said) == 6, said
    rows = store.read_rows(out)
    order = re.findall(r"^cell (\S+)$", (out / "worker.log").read_text(), re.M)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == 4 and order == ids + ids[::-1] + ids  # round-robin, alternating, rows in order
    for row in rows:
        assert row["status"] == "ok", row["message"]
        assert len(row["visit_medians_ms"]) == 3 and all(m > 0 for m in row["visit_medians_ms"])
        assert row["n_samples"] == len(row["samples_ms"]) >= 6  # ceil(5 / 3) from each visit
        assert row["rewarm_ms"] > 0 and row["peak_mem_bytes"] > 0 and row["rel_err"] is not None
    assert {cid: len(v) for cid, v in visits.read_visits(out).items()} == dict.fromkeys(ids, 3)


def test_a_real_run_makes_its_visits_in_turn_in_two_worker_processes(tmp_path):
    out = tmp_path / "r"
    p = run_cli(
        "run", "--variants", "naive", "--seq-len", "16", "--heads", "1", "--d-k", "8", "--rounds", "3",
        "--workers", "2", "--threads", "1", "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1",
        "--out", str(out), "-q",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    (row,) = store.read_rows(out)
    assert row["status"] == "ok" and len(row["visit_medians_ms"]) == 3, row["message"]
    first, second = (
        re.findall(r"^cell ", (out / log).read_text(), re.M) for log in ("worker.log", "worker-w2.log")
    )
    assert (len(first), len(second)) == (2, 1)  # visits 1 and 3 in the run's worker, visit 2 in the second


@pytest.mark.parametrize("executor", ["ray", "slurm"])
def test_rounds_elsewhere_than_local_are_refused_in_one_line(tmp_path, executor):
    out = tmp_path / "r"
    where = ["--slurm-local"] if executor == "slurm" else []  # so that Slurm's own absence is not the error
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--rounds", "3", "--executor", executor,
                *where, "--out", str(out))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"attnbench: error: --rounds 3 visits the whole sweep in one order on one worker: not with "
        f"--executor {executor}, which measures cells in parallel"
    ]
    assert not out.exists()


def test_settle_rounds_without_rounds_are_refused_in_one_line(tmp_path):
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--settle-rounds", "2",
                "--out", str(tmp_path / "r"))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "attnbench: error: --settle-rounds 2 visits again after the rounds: needs --rounds 2 or more "
        "(e.g. --rounds 3)"
    ]
    assert not (tmp_path / "r").exists()


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
    made = visits.read_visits(out)
    naive = rows["naive"]
    assert naive["status"] == "ok", naive["message"]
    first, second = made[naive["cell_id"]][:2]
    assert first["fresh_rel_err"] is None and first["refill_rel_err"] is not None and first["checks_ms"] > 0
    assert second["first_call_ms"] is None and second["checks_ms"] > 0 and second["fresh_rel_err"] is not None
    assert naive["fresh_rel_err"] == second["fresh_rel_err"]
    # every visit's checks summed (each visit's ends with the check of its varied inputs)
    total = sum(v["checks_ms"] for v in made[naive["cell_id"]])
    assert naive["checks_ms"] == pytest.approx(total, abs=1e-5)
    assert naive["rewarm_ms"] > 0  # the third visit's warm-up call
    bound = rows["bound_setup"]  # right on the timed tensors refilled, wrong on others: caught in visit 2
    assert bound["status"] == "wrong" and bound["message"].startswith(
        "in visit 2 of 3: answer does not follow"
    )
    assert bound["refill_rel_err"] is not None and bound["rel_err"] is not None  # the first visit's, kept
    assert len(bound["samples_ms"]) > 0  # timed, as a wrong cell is
    memo = rows["memo_id"]  # remembered per tensor object: caught by the refill, in the first visit
    assert memo["status"] == "wrong" and "refilled" in memo["message"]


def test_more_workers_than_rounds_are_refused_with_both_ways_out(tmp_path):
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--workers", "100000", "--out",
                str(tmp_path / "r"))  # fmt: skip
    assert p.returncode == 2 and p.stderr.strip().endswith(
        "so at most 1 worker can be used: give --workers 1, or --rounds 100000 for every worker to make a "
        "visit"
    )
    assert not (tmp_path / "r").exists()


def test_a_rows_noisy_note_is_its_pooled_samples_spread():
    """plug_new's visits at 31.3, 0.37 and 0.31 ms: the row is noisy (pooled IQR/median) but carried the
    first visit's message; plug_old's first visit said 'noisy: IQR/median 34%' under a row of 536%. The
    row's note is the pooled samples', as its rel_iqr and noisy flag are."""

    def visit(times, message=""):
        return {"cell_id": "c", "status": "ok", "message": message, "samples_ms": times, **summarize(times)}

    calm_first = [visit([31.3, 31.4, 31.2]), visit([0.37, 0.36, 0.38]), visit([0.31, 0.30, 0.32])]
    row = visits.summary(calm_first)
    assert row["noisy"] and row["message"] == f"noisy: IQR/median {row['rel_iqr']:.0%}", row["message"]
    noisy_first = [visit([1.0, 1.4, 0.9], "noisy: IQR/median 34%"), visit([1.0, 1.0, 1.01])]
    assert not visits.summary(noisy_first)["noisy"] and visits.summary(noisy_first)["message"] == ""
