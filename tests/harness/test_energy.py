"""Energy per call (harness.measure.energy) against a fake board: an energy counter that advances by the power
drawn and is updated only every 50 ms, as NVML's is; the counter refused; the setting through every front end;
and the report's figure and sentence. tests/harness/test_cuda.py reads a real counter."""

from __future__ import annotations

import math
import time
import types

import pytest
import synthetic

import attnbench
from attnbench import results
from attnbench.cli import build_parser
from attnbench.cli_run import sweep_from_args
from attnbench.harness.measure import energy, telemetry
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.sweep.sweeps import build_sweep
from attnbench.reports.render import prepare, render
from tests.conftest import as_a_fresh_process

IDLE_W, BUSY_W, PERIOD_S = 70.0, 400.0, 0.05


class Clock:
    """Simulated time: sleeping moves it on, nothing else does (exact and instant, whatever the load)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Board:
    """A GPU board: IDLE_W with no work, BUSY_W while `work` runs; its counter (mJ) is what the board used up
    to its last update, every PERIOD_S. On time's clock, or a simulated one."""

    def __init__(self, clock=time.perf_counter, sleep=time.sleep) -> None:
        self.clock, self.sleep = clock, sleep
        self.t0 = clock()
        self.busy: list[tuple[float, float]] = []

    def work(self, seconds: float) -> None:
        start = self.clock()
        self.sleep(seconds)
        self.busy.append((start, self.clock()))

    def updated(self, t: float) -> float:
        """The counter's last update at or before t."""
        return self.t0 + math.floor((t - self.t0) / PERIOD_S + 1e-9) * PERIOD_S

    def joules(self, t: float) -> float:
        busy = sum(max(0.0, min(b, t) - a) for a, b in self.busy)
        return IDLE_W * (t - self.t0) + (BUSY_W - IDLE_W) * busy

    def __call__(self) -> int:
        return int(self.joules(self.updated(self.clock())) * 1000)


@pytest.fixture(autouse=True)
def fresh_idle(monkeypatch):
    monkeypatch.setattr(energy, "IDLE", {})


def test_joules_per_call_above_idle_from_an_edge_aligned_window():
    """Simulated time: the 1 s windows, the 50 ms updates and the 1 ms polls exactly as on a GPU."""
    clock = Clock()
    board = Board(clock, clock.sleep)
    row = energy.measure(
        board, "GPU-fake", lambda: board.work(0.004), flops=2 * 10**12, clock=clock, sleep=clock.sleep
    )
    assert row["energy_j_per_call"] == pytest.approx((BUSY_W - IDLE_W) * 0.004, rel=0.005)
    assert row["idle_power_w"] == pytest.approx(IDLE_W, rel=0.005)
    assert row["energy_power_w"] == pytest.approx(BUSY_W, rel=0.05)  # busy but for the closing edge's wait
    assert row["energy_calls"] == len(board.busy) in (250, 251) and 1.0 <= row["energy_window_s"] < 1.06
    assert row["tflops_per_w"] == pytest.approx(2 / row["energy_j_per_call"]) and row["energy_note"] is None
    assert 2000 <= row["energy_ms"] < 2300  # the idle and the work windows, each with its edge waits
    # the idle draw is measured once per GPU
    again = energy.measure(board, "GPU-fake", lambda: board.work(0.004), None, clock=clock, sleep=clock.sleep)
    assert again["idle_power_w"] == row["idle_power_w"] and again["energy_ms"] < 1150
    assert again["tflops_per_w"] is None and again["energy_j_per_call"] > 0


def test_a_window_starts_and_ends_where_the_counter_changes():
    clock = Clock()
    board = Board(clock, clock.sleep)
    clock.sleep(0.0123)  # between two updates
    w = energy.window(board, lambda: board.work(0.01), clock=clock, sleep=clock.sleep)
    for edge in (w.start, w.end):  # seen within one poll of an update
        assert 0 <= edge.t_s - board.updated(edge.t_s) < energy.POLL_S * 1.5, edge
        assert edge.mj == int(board.joules(board.updated(edge.t_s)) * 1000)
    assert w.seconds >= 1.0 and w.calls in (100, 101)  # 1 s of 10 ms calls, to float rounding


def test_real_sleeps_on_time_s_clock(monkeypatch):
    """time's own clock and sleep, with a window of 0.2 s: the same answer within what a loaded machine's
    late polls allow."""
    monkeypatch.setattr(energy, "WINDOW_S", 0.2)
    board = Board()
    row = energy.measure(board, "GPU-fake", lambda: board.work(0.004), flops=10**12)
    busy_s = (
        sum(b - a for a, b in board.busy) / row["energy_calls"]
    )  # each call's own sleep, overshoot and all
    assert row["energy_j_per_call"] == pytest.approx((BUSY_W - IDLE_W) * busy_s, rel=0.1)
    assert row["idle_power_w"] == pytest.approx(IDLE_W, rel=0.1) and row["energy_window_s"] >= 0.2


def test_a_counter_that_never_changes_is_a_note():
    row = energy.measure(lambda: 1234, "GPU-stuck", lambda: None, flops=1)
    assert row["energy_note"] == "the energy counter did not change within 0.25 s"
    assert all(row[c] is None for c in energy.COLUMNS if c not in ("energy_note", "energy_ms"))


class _NVMLError(Exception):
    pass


def _pynvml(counter):
    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError
    m.nvmlDeviceGetUUID = lambda h: b"GPU-fake"
    m.nvmlDeviceGetTotalEnergyConsumption = counter
    return m


def test_an_unsupported_counter_leaves_the_columns_empty_with_a_note(monkeypatch):
    def not_supported(handle):
        raise _NVMLError("Not Supported")

    monkeypatch.setitem(telemetry._opened, "cuda", (_pynvml(not_supported), "handle"))
    row = energy.fields(lambda: None, types.SimpleNamespace(device="cuda"), flops=10)
    assert row["energy_note"] == "NVML energy counter not readable: Not Supported"
    assert (
        row["energy_j_per_call"] is None and row["tflops_per_w"] is None and set(row) == set(energy.COLUMNS)
    )


def test_without_nvml_or_on_a_cpu_cell_the_columns_are_empty_with_a_note(monkeypatch):
    monkeypatch.setitem(telemetry._opened, "cuda", None)
    row = energy.fields(lambda: None, types.SimpleNamespace(device="cuda"), flops=10)
    assert row["energy_note"].startswith("NVML is not available") and row["energy_j_per_call"] is None
    cpu = energy.fields(lambda: None, types.SimpleNamespace(device="cpu"), flops=10)
    assert cpu["energy_note"] == "energy is read on CUDA cells only" and cpu["energy_calls"] is None


def test_the_nvml_counter_is_read_through_the_handle_and_keyed_by_uuid():
    counter = energy.NvmlCounter(_pynvml(lambda h: 5000 if h == "handle" else 0), "handle")
    assert counter() == 5000 and counter.key == "GPU-fake"


def test_no_window_is_run_unless_a_cuda_cell_asks_for_it(monkeypatch):
    asked = []
    monkeypatch.setattr(energy, "fields", lambda *a: asked.append(a) or {})
    spec = CellSpec("naive", "cpu", "float32", 1, 2, 64, 16, 16, False, 0.0, "fwd")
    for on in (False, True):  # off by default; on, a CPU cell still has no board to read
        row = measure_cell(spec, Settings(budget_ms=5, warmup_ms=1, min_ms=1, energy=on))
        assert row["status"] == "ok", row["message"]
        assert not any(c in row for c in energy.COLUMNS)
    assert asked == [] and Settings().energy is False


def test_the_setting_from_the_cli_the_api_and_a_sweep_file(tmp_path):
    parser = build_parser()
    for argv, on in ((["--energy"], True), (["--energy", "no"], False), ([], False)):
        args = parser.parse_args(["run", "--preset", "quick", *argv])
        assert sweep_from_args(args).settings.energy is on
    assert build_sweep({"energy": True}).settings.energy is True
    (tmp_path / "sweep.toml").write_text("[sweep]\nvariants = ['naive']\n[settings]\nenergy = true\n")
    assert build_sweep(config=tmp_path / "sweep.toml").settings.energy is True
    with as_a_fresh_process(tmp_path):
        attnbench.run(variants="naive", seq_len=64, heads=1, energy=True, out=tmp_path / "dry", dry_run=True)
        with pytest.raises(ValueError) as caught:
            attnbench.run(variants="naive", seq_len=64, heads=1, energy="maybe", out=tmp_path / "never")
    assert str(caught.value) == "energy must be yes or no, got 'maybe'"
    assert not (tmp_path / "never").exists()


def _cuda_rows(with_energy: bool):
    rows = []
    for variant, j0 in (("sdpa", 0.02), ("naive", 0.08)):
        for n in (1024, 2048, 4096):
            j = j0 * (n / 1024) ** 2
            flops = int(4 * 8 * n * n * 64)
            extra = (
                dict(
                    energy_j_per_call=j,
                    energy_power_w=300.0,
                    idle_power_w=70.0,
                    energy_calls=100,
                    energy_window_s=1.05,
                    tflops_per_w=flops / j / 1e12,
                    energy_ms=2100.0,
                )  # fmt: skip
                if with_energy
                else {}
            )
            rows.append(
                synthetic.cell(
                    variant, n, device="cuda", dtype="bfloat16", time_ms=0.1 * (n / 1024) ** 2, **extra
                )
            )
    return rows


def test_a_run_with_energy_has_its_figure_and_sentence_and_one_without_renders_as_before(
    tmp_path, tmp_path_factory
):
    run = synthetic.write_run(tmp_path / "energy", _cuda_rows(True))
    df = results.load(run)
    assert df["energy_j_per_call"].notna().all() and str(df["energy_calls"].dtype) == "Int64"
    report = render(prepare([run]), tmp_path / "report")
    md = report.readme.read_text()
    assert "Energy per call" in md and any(f.stem.startswith("energy-") for f in report.figures)
    assert "most TFLOP per joule at N = 4,096 is sdpa" in md and "idle draw of 70 W" in md
    # in a folder whose path does not name this test (the report's Runs table names the run's folder)
    plain = synthetic.write_run(tmp_path_factory.mktemp("plain") / "run", _cuda_rows(False)[:2])
    md = render(prepare([plain]), plain.parent / "report").readme.read_text()
    assert "nergy" not in md and "joule" not in md


def test_the_window_synchronises_each_batch_so_queued_work_cannot_outrun_it():
    """CUDA calls return before their work ends: the window enqueues batches of about BATCH_MS of device time
    (from the cell's median) and synchronises each, so its length is the work's (an H200 ran a 1 s window of
    12.5 ms calls for 13.8 s when only the host's clock was watched)."""
    queued: list[float] = []
    clock = [0.0]

    def call():  # enqueues 10 ms of device work and returns at once
        queued.append(0.01)

    def sync():  # the device works through the queue
        clock[0] += sum(queued)
        queued.clear()

    counter = {"mj": 0}

    def source():  # a counter that moves every 50 ms of the clock
        return int(clock[0] / 0.05)

    def sleep(s):
        clock[0] += max(s, 0.001)

    assert energy.batch_of(10.0) == 5 and energy.batch_of(400.0) == 1 and energy.batch_of(None) == 1
    w = energy.window(source, call, sync, clock=lambda: clock[0], sleep=sleep, batch=energy.batch_of(10.0))
    assert energy.WINDOW_S <= w.seconds <= energy.WINDOW_S + 0.2  # not the queue's length
    assert w.calls * 0.01 == pytest.approx(w.seconds, abs=0.2)
    assert counter == {"mj": 0}
