"""GPU telemetry during timing (harness.measure.telemetry): the throttle rule, the sampling thread, NVML
readings (a fake nvidia-ml-py here: no GPU on CPU machines; tests/harness/test_cuda.py reads a real one), and
the report."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest
import synthetic

from attnbench import results
from attnbench.harness.measure import telemetry
from attnbench.harness.measure.telemetry import Sample, largest_drop, summarise
from attnbench.reports.render import prepare, render


def _samples(clocks, power=None):
    power = power or [300.0] * len(clocks)
    return [Sample(t_s=i * 0.02, sm_mhz=c, power_w=p, temp_c=50 + i, reasons=0) for i, (c, p) in
            enumerate(zip(clocks, power, strict=True))]  # fmt: skip


def test_a_fall_below_the_earlier_high_is_a_drop_a_ramp_up_is_not():
    assert largest_drop([345, 1200, 1980, 1980]) == 0.0  # the clock rising from idle
    assert largest_drop([1980, 1980, 1755, 1980]) == pytest.approx(225 / 1980)
    assert largest_drop([1500, 1980, 1600]) == pytest.approx(380 / 1980)  # from the high, not the first
    assert largest_drop([1980]) == 0.0 and largest_drop([]) == 0.0


def test_a_cell_whose_clock_fell_more_than_10_percent_is_throttled():
    steady = summarise(_samples([1980, 1965, 1980, 1950]))  # 1.5%: boost clocks wander a little
    assert steady["throttled"] is False and steady["sm_clock_min_mhz"] == 1950
    fell = summarise(_samples([1980, 1980, 1590, 1600], power=[690.0, 700.0, 700.0, 650.0]))
    assert fell["throttled"] is True and fell["sm_clock_drop"] == pytest.approx(0.197, abs=1e-3)
    assert (fell["sm_clock_min_mhz"], fell["sm_clock_max_mhz"]) == (1590, 1980)
    assert (fell["timed_power_w_mean"], fell["timed_power_w_max"], fell["temp_c_max"]) == (685.0, 700.0, 53)
    assert fell["telemetry_samples"] == 4 and set(fell) == set(telemetry.COLUMNS)


def test_no_readings_flag_nothing():
    assert summarise([]) == dict.fromkeys(telemetry.COLUMNS)
    blind = summarise([Sample(0.0, None, None, None, None)] * 3)  # a GPU that reports none of the fields
    assert blind["throttled"] is None and blind["telemetry_samples"] == 3
    reasons = summarise([Sample(0.0, 1980, None, None, 0x4), Sample(0.1, 1980, None, None, 0x1)])
    assert reasons["clock_event_reasons"] == "0x5"  # every reason seen during the cell


def test_the_sampler_reads_at_both_ends_and_every_interval_between():
    reads = []

    def source():
        reads.append(threading.current_thread().name)
        return Sample(time.perf_counter(), 1980, 300.0, 50, 0)

    with telemetry.Sampler(source, interval_s=0.01) as s:
        time.sleep(0.2)
    n = len(s.samples)
    assert reads[0] == reads[-1] == threading.current_thread().name  # first and last in the caller
    assert "attnbench-telemetry" in reads and 5 <= n <= 25, n
    time.sleep(0.05)
    assert len(s.samples) == n  # the thread stopped with the cell


class _NVMLError(Exception):
    pass


def _fake_pynvml(calls):
    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU = 1, 0
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetHandleByUUID = lambda u: calls.append(u) or ("gpu", u)
    m.nvmlDeviceGetClockInfo = lambda h, kind: 1755
    m.nvmlDeviceGetPowerUsage = lambda h: 512_345  # milliwatts

    def no_temperature(h, kind):
        raise _NVMLError("Not Supported")

    m.nvmlDeviceGetTemperature = no_temperature
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    return m


def test_an_nvml_reading_in_row_units_with_unreported_fields_empty(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(calls))
    pynvml, handle = telemetry.open_nvml("5e3d0c4a-0000-0000-0000-000000000001")
    assert calls == ["init", "GPU-5e3d0c4a-0000-0000-0000-000000000001"]  # by torch's UUID, NVML's spelling
    s = telemetry.NvmlSource(pynvml, handle)()
    assert (s.sm_mhz, s.power_w, s.temp_c, s.reasons) == (1755, 512.345, None, 0x4)


def test_a_cpu_cell_never_touches_nvml(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(calls))
    with telemetry.sampling("cpu") as s:
        pass
    assert s.samples == [] and calls == []


def test_nvml_uuid_spelling():
    assert telemetry.nvml_uuid("5e3d0c4a-aa") == "GPU-5e3d0c4a-aa"
    assert telemetry.nvml_uuid("GPU-5e3d0c4a-aa") == "GPU-5e3d0c4a-aa"
    assert telemetry.nvml_uuid("MIG-1234") == "MIG-1234"


def test_throttled_cells_load_and_are_listed_in_the_report(tmp_path):
    fell = summarise(_samples([1980, 1980, 1500, 1520], power=[700.0] * 4))
    steady = summarise(_samples([1980, 1980, 1975, 1980]))
    rows = [
        synthetic.cell("sdpa", 1024, device="cuda", dtype="bfloat16", time_ms=1.0, **steady),
        synthetic.cell("sdpa", 2048, device="cuda", dtype="bfloat16", time_ms=4.0, **fell),
    ]
    run = synthetic.write_run(tmp_path / "run", rows)
    df = results.load(run)
    assert df["throttled"].tolist() == [False, True] and df["sm_clock_min_mhz"].tolist() == [1975, 1500]
    md = render(prepare([run]), tmp_path / "report").readme.read_text()
    assert "Cells timed while the GPU's clock fell" in md and "1500–1980 MHz" in md and "24%" in md


def test_runs_without_telemetry_load_with_empty_columns(tmp_path):
    run = synthetic.write_run(tmp_path / "run", [synthetic.cell("naive", 256, time_ms=1.0)])
    df = results.load(run)
    assert df["throttled"].isna().all() and df["sm_clock_max_mhz"].isna().all()
    md = render(prepare([run]), tmp_path / "report").readme.read_text()
    assert "GPU's clock fell" not in md
