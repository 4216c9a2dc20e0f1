"""--settle-rounds S: after the rounds, the pairs of one shape 1.1x or more apart that the ranking's rank test
cannot yet tell apart are visited again, at most S times (harness.run.settle,
harness.run.executors.rounds)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import run_cli

from attnbench.harness.run.executors.base import Plan
from attnbench.harness.run.executors.rounds import run_rounds
from attnbench.harness.run.settle import SETTLE_RATIO, unsettled
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers.cellrunner import SkipAhead
from attnbench.results import store
from attnbench.results.formulas import summarize
from attnbench.results.ranks import rank_p, separated

NAMES = {
    "a": "naive",
    "b": "sdpa",
    "c": "stable_softmax",
    "d": "chunked",
    "e": "sdpa_math",
}  # registered: precheck passes
LETTER = {v: k for k, v in NAMES.items()}


def _spec(letter: str, n: int = 16) -> CellSpec:
    return CellSpec(NAMES[letter], "cpu", "float32", 1, 1, n, 8, 8, False, 0.0, "fwd")


# per variant, its two samples in each visit; "b" is 1.3x "a" but for visit 2, where a disturbance
# reversed the two (it ran b's visit fast, or a's slow): with three rounds the rank test ties them
TIMES = {
    "a": lambda i: 1.0,
    "b": lambda i: 0.9 if i == 2 else 1.3,
    "c": lambda i: 5.0,  # far behind both in every visit
    "d": lambda i: 0.85 if i == 2 else 1.03,  # 3% behind a, reversed once: too close to settle
    "e": lambda i: 1.0 if i == 2 else 1.3,  # level with a in visit 2 only: one more visit separates them
}


class FakeVisits:
    """Stands in for the executor's Processes: records each visit asked for and answers TIMES' samples."""

    def __init__(self, fail: dict | None = None) -> None:
        self.asked: list[tuple[str, int]] = []
        self.fail = fail or {}

    def run(self, spec: CellSpec, visit: tuple[int, int]) -> dict:
        index, _ = visit
        self.asked.append((LETTER[spec.variant], index))
        row = {"cell_id": spec.cell_id, "variant": spec.variant, "seq_len": spec.seq_len, "flops": 1e6}
        status = self.fail.get((LETTER[spec.variant], index), "ok")
        if status != "ok":
            return {**row, "status": status, "message": "boom"}
        t = TIMES[LETTER[spec.variant]](index)
        samples = [t, t * 1.01]
        return {**row, "status": "ok", "message": "", "samples_ms": samples, **summarize(samples),
                "first_call_ms": 1.0, "elapsed_s": 1.0}  # fmt: skip


def _plan(tmp_path, cells, settle, done=()) -> Plan:
    sweep = SimpleNamespace(settings=Settings(rounds=3, settle_rounds=settle))
    return Plan(sweep=sweep, cells=cells, config={}, run_dir=tmp_path, done=list(done))


def _row(letter, visits):
    """A merged row of TIMES[letter]'s variant over these visit indices."""
    from attnbench.harness.measure.rows import merge_rounds

    fake = FakeVisits()
    return merge_rounds([fake.run(_spec(letter), (i, 3)) for i in visits])


def test_a_pair_reversed_in_one_of_three_rounds_is_unsettled_and_a_far_or_close_one_is_not():
    a, b, c, d = (_row(v, (1, 2, 3)) for v in "abcd")
    assert b["time_ms_median"] / a["time_ms_median"] >= SETTLE_RATIO and not separated(a, b)
    assert separated(a, c) and separated(b, c)
    assert unsettled([a, b, c, d]) == {a["cell_id"], b["cell_id"]}  # d: 3% behind, left as measured
    assert unsettled([a, b, c], among={a["cell_id"], c["cell_id"]}) == set()  # b not among them
    # two more visits outvote the disturbed one (van Elteren: four rounds to one)
    assert separated(_row("a", (1, 2, 3, 4, 5)), _row("b", (1, 2, 3, 4, 5)))
    failed = {**c, "status": "wrong"}
    assert unsettled([a, failed]) == set()


def test_settle_rounds_visit_only_the_unsettled_pair_again_and_write_the_rest_at_once(tmp_path):
    cells = [_spec(v) for v in "abc"]
    fake, written = FakeVisits(), []
    run_rounds(_plan(tmp_path, cells, settle=2), fake, SkipAhead(), written.append)
    rounds = [(v, i) for i, order in ((1, "abc"), (2, "cba"), (3, "abc")) for v in order]
    # the settle rounds go on alternating: visit 4 in the reverse order, visit 5 forward
    assert fake.asked == rounds + [("b", 4), ("a", 4), ("a", 5), ("b", 5)]
    # c's row as soon as its shape is decided (after round 3), a's and b's after their last visit
    assert [LETTER[r["variant"]] for r in written] == ["c", "a", "b"]
    by = {LETTER[r["variant"]]: r for r in written}
    assert len(by["c"]["round_medians_ms"]) == 3 and by["c"]["round_samples"] == [2, 2, 2]
    assert by["a"]["round_samples"] == by["b"]["round_samples"] == [2] * 5
    assert separated(by["a"], by["b"])  # the ranking now tells them apart
    # rank_p compares c with a over the visits both made: the three rounds
    assert rank_p(by["a"], by["c"]) == pytest.approx(rank_p(_row("a", (1, 2, 3)), by["c"]))


def test_settle_rounds_stop_once_the_pair_is_told_apart_or_after_s(tmp_path):
    cells = [_spec(v) for v in "ab"]
    fake, written = FakeVisits(), []
    run_rounds(_plan(tmp_path, cells, settle=1), fake, SkipAhead(), written.append)
    assert fake.asked[6:] == [("b", 4), ("a", 4)]  # one settle round at most
    assert [len(r["round_medians_ms"]) for r in written] == [4, 4]
    # a pair told apart by its first settle visit is not visited a second time
    fake, written = FakeVisits(), []
    (tmp_path / "apart").mkdir()
    run_rounds(
        _plan(tmp_path / "apart", [_spec("a"), _spec("e")], settle=2), fake, SkipAhead(), written.append
    )
    assert fake.asked[6:] == [("e", 4), ("a", 4)]
    assert separated(*written) and not separated(_row("a", (1, 2, 3)), _row("e", (1, 2, 3)))
    # without settle rounds, nothing is visited again
    fake, written = FakeVisits(), []
    (tmp_path / "none").mkdir()
    run_rounds(_plan(tmp_path / "none", cells, settle=0), fake, SkipAhead(), written.append)
    assert len(fake.asked) == 6 and [len(r["round_medians_ms"]) for r in written] == [3, 3]


def test_a_failed_settle_visit_ends_its_cell_and_the_other_goes_on(tmp_path):
    cells = [_spec(v) for v in "ab"]
    fake, written = FakeVisits({("b", 4): "crashed"}), []
    run_rounds(_plan(tmp_path, cells, settle=2), fake, SkipAhead(), written.append)
    assert fake.asked[6:] == [("b", 4), ("a", 4)]  # b ended: a has no pair left to settle
    assert [(LETTER[r["variant"]], r["status"]) for r in written] == [("b", "crashed"), ("a", "ok")]
    assert written[0]["message"] == "in round 4 of 4: boom"
    assert len(written[1]["round_medians_ms"]) == 4


def test_resume_in_a_settle_round_makes_only_the_visits_missing(tmp_path):
    a, b, c = (_spec(v) for v in "abc")
    first = FakeVisits()
    log = store.VisitLog(tmp_path)
    for spec, made in ((a, 4), (b, 3)):  # interrupted after a's first settle visit; c's row written
        for i in range(1, made + 1):
            log.append(spec.cell_id, i, first.run(spec, (i, 3)))
    log.close()
    done = [{"cell_id": c.cell_id, "status": "ok"}]
    fake, written = FakeVisits(), []
    run_rounds(_plan(tmp_path, [a, b], settle=2, done=done), fake, SkipAhead(), written.append)
    assert fake.asked == [("b", 4), ("a", 5), ("b", 5)]
    assert [len(r["round_medians_ms"]) for r in written] == [5, 5]


def test_settle_rounds_without_rounds_are_refused_in_one_line(tmp_path):
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--settle-rounds", "2",
                "--out", str(tmp_path / "r"))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "attnbench: error: --settle-rounds 2 visits again after the rounds: needs --rounds 2 or more "
        "(e.g. --rounds 3)"
    ]
    assert not (tmp_path / "r").exists()
