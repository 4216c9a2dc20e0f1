"""The machine fingerprint: CPU facts from py-cpuinfo and psutil, GPU telemetry from NVML (faked here)."""

from __future__ import annotations

import sys
import types

from attnbench.harness import fingerprint


class _NVMLError(Exception):
    pass


def _fake_pynvml(*, init_fails: bool = False) -> types.ModuleType:
    """The parts of nvidia-ml-py the fingerprint reads, with an H100's values; no reason bitmask call."""
    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    calls = []

    def init():
        if init_fails:
            raise _NVMLError("NVML Shared Library Not Found")
        calls.append("init")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    m.nvmlSystemGetDriverVersion = lambda: b"570.86.15"
    m.nvmlDeviceGetClockInfo = lambda h, kind: {1: 1755, 2: 2619}[kind]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetPowerManagementLimit = lambda h: 700000  # milliwatts
    m.nvmlDeviceGetTemperature = lambda h, kind: 41
    m.calls = calls
    return m


def test_nvml_values_are_written_as_nvidia_smi_writes_them(monkeypatch):
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = fingerprint.nvml_info(0)
    assert info == {"driver": "570.86.15", "sm_clock": "1755 MHz", "sm_clock_max": "1980 MHz",
                    "mem_clock": "2619 MHz", "power_limit": "700.00 W", "temperature": "41"}  # fmt: skip
    assert fake.calls == ["init", "shutdown"]  # a field the driver lacks is left out; NVML shut down

    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    assert fingerprint.nvml_info(0)["throttle_reasons"] == "0x0000000000000004"


def test_no_nvml_means_no_gpu_telemetry(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_fails=True))
    assert fingerprint.nvml_info(0) == {}


def test_cpu_facts_come_from_the_libraries():
    import os

    import psutil

    info = fingerprint.cpu_info()
    assert info["cpu_model"] and info["logical_cpus"] == os.cpu_count()
    assert info["physical_cores"] == psutil.cpu_count(logical=False)
    assert info["memory_bytes"] == psutil.virtual_memory().total
    assert fingerprint.attnbench_version()


def test_a_cpu_row_says_which_host_measured_it():
    import socket

    assert fingerprint.where_measured("cpu") == {
        "host": socket.gethostname(), "gpu_name": None, "gpu_uuid": None, "gpu_index": None
    }  # fmt: skip
