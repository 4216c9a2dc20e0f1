"""The clock is checked from outside the worker: the parent times each cell's request and its timing loops
on its own clock, a worker whose timer clock disagrees has its row refused and is replaced, and what the
timers read is part of the snapshot that names an offender (harness.measure.outcomes.clock_mismatch,
harness.workers.torch_state)."""

from __future__ import annotations

import math
import time

import pytest
from conftest import DATA, run_cli
from fakes import tiny_cell

from attnbench.harness.measure import outcomes
from attnbench.harness.measure.outcomes import clock_fields, clock_mismatch, clock_readings
from attnbench.results import read_rows

CLOCKS = DATA / "clock_variants.py"


def test_marks_pair_into_the_timing_loops_and_the_request_comes_first():
    parent = [10.0, 10.2, 11.0, 11.1]  # two loops, as the parent's clock read each mark
    worker = [(1.0, 1.001), (1.2, 1.2015), (2.0, 2.002), (2.1, 2.1005)]  # the worker's, before and after
    readings = clock_readings(0.5, 0.52, parent, worker)
    assert readings[0] == ("this cell", 0.5, math.inf, 0.52)  # inside the parent's: no longer than it
    what, shortest, longest, parent_s = readings[1]
    assert what == "this cell's timing loops"
    assert shortest == pytest.approx(0.199 + 0.098) and longest == pytest.approx(0.2015 + 0.1005)
    assert parent_s == pytest.approx(0.3)
    assert clock_fields(readings) == {"clock_ratio": 1.0, "clock_bounds_ms": pytest.approx(5.0)}
    assert clock_readings(None, 0.5, parent[:3], worker[:3]) == []  # nothing reported, a loop cut short
    assert clock_fields([]) == {"clock_ratio": None, "clock_bounds_ms": None}


def _loop(shortest: float, longest: float, parent: float) -> list:
    return [("this cell's timing loops", shortest, longest, parent)]


@pytest.mark.parametrize(
    ("shortest", "longest", "parent", "flagged"),
    [
        (0.995, 1.005, 1.0, False),  # the round trips' width
        (0.180, 0.230, 0.2, False),  # a parent scheduled late: wide bounds, still inside
        (0.995, 1.005, 1.012, False),  # within 1 ms + 1%
        (0.795, 0.805, 1.0, True),  # slowed to 0.8x
        (0.155, 0.165, 0.2, True),
        (1.195, 1.205, 1.0, True),  # a clock that runs fast is no truer
        (0.012, 0.020, 0.016, False),
    ],
)
def test_the_parents_interval_lies_within_the_workers_bounds(shortest, longest, parent, flagged):
    said = clock_mismatch(_loop(shortest, longest, parent))
    assert bool(said) is flagged
    if flagged:
        assert said.startswith(f"{outcomes.CLOCK_TAMPERED} ") and said.endswith("worker replaced")
        assert "x the parent's during this cell's timing loops" in said


def test_a_request_the_worker_saw_longer_than_the_parent_is_a_fast_clock():
    assert clock_mismatch([("this cell", 0.9, math.inf, 1.0)]) is None  # the pipe's latency both ways
    assert clock_mismatch([("this cell", 1.2, math.inf, 1.0)]).startswith("the worker's clock ran at 1.20x")


class _Worker:
    """Stands in for harness.workers.isolation.Worker: answers every cell with a row whose clock ran slow."""

    instances: list[_Worker] = []
    said: tuple[str, str] = ("ok", "")  # the worker's own verdict on the row (its snapshot's)

    def __init__(self, config) -> None:
        self.threads, self.killed = 1, False
        _Worker.instances.append(self)

    def request(self, msg, timeout):
        if msg["op"] == "free_memory":
            return {"op": "free_memory", "value": 1 << 40}
        status, message = self.said
        row = {**msg["cell"], "status": status, "message": message, "threads": 1}
        worker = [(0.0, 0.001), (0.8, 0.801)]  # one timing loop: 0.8 s on the worker's clock ...
        return {"op": "row", "row": row, "clock_s": 1.05, "parent_s": 1.1, "parent_marks": [5.0, 6.0],
                "worker_marks": worker}  # ... 1 s on the parent's  # fmt: skip

    def kill(self) -> None:
        self.killed = True


def test_a_cell_whose_clock_ran_slow_is_an_error_and_its_worker_is_replaced(monkeypatch):
    from attnbench.harness.sweep.settings import Settings
    from attnbench.harness.workers import cellrunner

    monkeypatch.setattr(cellrunner, "Worker", _Worker)
    runner = cellrunner.CellRunner({}, Settings())
    spec = tiny_cell("naive", n=64)
    row = runner.run(spec)
    assert row["status"] == "error" and row["clock_ratio"] == pytest.approx(0.8, abs=0.01)
    assert row["message"].startswith("the worker's clock ran at 0.80x the parent's during this cell's timing")
    assert _Worker.instances[-1].killed and runner.worker is None  # the next cell gets a fresh worker


def test_a_replaced_clock_is_said_to_be_the_processs_not_torchs():
    """time.perf_counter is no torch state: the row says what each change is."""
    said = outcomes.state_changed(["time.perf_counter replaced", "num_threads 2 → 1"])
    assert said == "changed the process's clock: time.perf_counter replaced; changed torch's global state: " \
        "num_threads 2 → 1"  # fmt: skip
    timing = "attnbench.harness.measure.timing.time replaced"
    assert outcomes.state_changed([timing]) == f"changed attnbench's measuring code: {timing}"
    assert all(outcomes.left_behind(outcomes.state_changed([c])) for c in ("time.time replaced", timing))


def test_what_the_snapshot_named_comes_before_how_far_the_clock_ran_off(monkeypatch):
    """A clipped message (bench's answer keeps 200 characters) keeps the cause: time.perf_counter replaced."""
    from attnbench.harness.sweep.settings import Settings
    from attnbench.harness.workers import cellrunner

    said = outcomes.state_changed(["time.perf_counter replaced"])
    monkeypatch.setattr(cellrunner, "Worker", _Worker)
    monkeypatch.setattr(_Worker, "said", ("error", said))
    row = cellrunner.CellRunner({}, Settings()).run(tiny_cell("naive", n=64))
    assert row["status"] == "error"
    first, second = row["message"].split("; ", 1)
    assert first == "changed the process's clock: time.perf_counter replaced"
    assert second.startswith("the worker's clock ran at 0.80x") and second.endswith("worker replaced")
    assert _Worker.instances[-1].killed


# budgets long enough that a 0.8x clock is 40 ms short over a cell's timing loop, four times the slack
LONG = ("--seq-len", "64", "--heads", "2", "--threads", "1", "--budget-ms", "200", "--min-ms", "200",
        "--warmup-ms", "5", "--max-samples", "100000", "-q")  # fmt: skip


@pytest.mark.slow  # each offender's worker is replaced: four workers, and 200 ms of sampling a cell
def test_each_clock_tamperer_is_refused_and_its_neighbours_are_untouched(tmp_path):
    order = "clock_slowed,naive,clock_swapped_module,chunked,clock_sneaky,sdpa"
    run_cli("run", "--variant-file", str(CLOCKS), "--variants", order, *LONG, "--out", str(tmp_path / "run"),
            check=True)  # fmt: skip
    rows = {r["variant"]: r for r in read_rows(tmp_path / "run")}
    said = {
        "clock_slowed": "time.perf_counter replaced",  # the snapshot sees what it replaced
        "clock_swapped_module": "attnbench.harness.measure.timing.time replaced",
        # put back before the cell ended: only the parent's clock sees it, over the timing loop
        "clock_sneaky": "the worker's clock ran at 0.8",
    }
    for name, words in said.items():
        assert rows[name]["status"] == "error" and words in rows[name]["message"], rows[name]
    assert "timing loops" in rows["clock_sneaky"]["message"]
    assert 0.75 <= rows["clock_sneaky"]["clock_ratio"] <= 0.85
    for name in ("naive", "chunked", "sdpa"):  # each measured in a fresh worker, on the real clock
        row = rows[name]
        assert row["status"] == "ok" and "clock" not in row["message"] and "replaced" not in row["message"]
        assert row["clock_ratio"] == 1.0 and row["clock_bounds_ms"] < 100


class _FakeEvent:
    """A CUDA event on the host clock: record() reads perf_counter, elapsed_time the ms between two."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.t = None

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def test_a_replaced_cuda_event_elapsed_time_changes_no_timing_and_is_named(monkeypatch):
    """The GPU issue's item 7, on fakes: the CUDA timers read events through the class and methods pinned
    before any plug-in loads (timing.pin_cuda_events), so a plug-in's elapsed_time that reports a tenth
    changes nothing they measure, and the worker's torch-state snapshot names the replacement."""
    import torch

    from attnbench.harness.measure import timing
    from attnbench.harness.workers.torch_state import State

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(timing, "_EVENTS", None)
    state = State()
    clean = state.take()
    timing.pin_cuda_events()  # as a worker does before importing plug-ins
    honest = _FakeEvent.elapsed_time
    monkeypatch.setattr(_FakeEvent, "elapsed_time", lambda self, end: honest(self, end) / 10)  # the plug-in
    assert "torch.cuda.Event.elapsed_time replaced" in state.changes(clean)
    timer = timing.CudaTimer(device="cpu", flush_l2=False)
    samples = timer.time_calls(lambda: time.sleep(0.01), 3)
    assert all(s >= 9.5 for s in samples), samples  # 10 ms each, not a tenth of it


def test_work_the_timed_stream_does_not_wait_for_leaves_the_events_short_of_the_hosts_time(monkeypatch):
    """Issue 40, CUDA on fakes: a call that launches its work on a side stream, joined by nothing, returns
    at once, and its events time nothing; each loop ends by synchronising the device, which waits for the
    work, so the host's wall time holds it: the events cover a sliver of it, and the row is an error. An
    honest call's events cover the loop."""
    import torch

    from attnbench.harness.measure import timing
    from attnbench.harness.measure.outcomes import events_mismatch

    pending = [0.0]  # seconds of side-stream work the device still has

    def synchronize(device=None):  # the whole device: waits for every stream
        time.sleep(pending[0])
        pending[0] = 0.0

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(timing, "_EVENTS", None)

    def side_stream():
        pending[0] += 0.01

    covers = {}
    for name, fn in (("honest", lambda: time.sleep(0.01)), ("side stream", side_stream)):
        timer = timing.CudaTimer(device="cpu", flush_l2=False)
        timer.time_calls(fn, 5)
        timer.time_calls(fn, 5)
        covers[name] = timing.event_cover(timer)
    # a loaded machine may deschedule the host between its clock and the lead event: a few ms of 100
    assert covers["honest"] >= 0.9 and events_mismatch({"event_cover": covers["honest"]}) is None
    assert covers["side stream"] < 0.2, covers
    said = events_mismatch({"event_cover": covers["side stream"]})
    assert said.startswith("the CUDA events timed ") and "another stream" in said
    assert events_mismatch({"event_cover": None}) is None  # a CPU row
