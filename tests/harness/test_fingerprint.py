"""The machine fingerprint: CPU facts from py-cpuinfo and psutil, GPU telemetry from NVML (faked here)."""

from __future__ import annotations

import sys
import types

import pytest

from attnbench.harness.measure import fingerprint


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
    gpus = {"GPU-5e3d0c4a-0000-0000-0000-000000000001"}  # the one GPU this fake NVML knows

    def by_uuid(uuid):
        calls.append(f"uuid {uuid}")
        if uuid not in gpus:
            raise _NVMLError("Not Found")
        return ("gpu", uuid)

    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlSystemGetDriverVersion = lambda: b"570.86.15"
    m.nvmlDeviceGetClockInfo = lambda h, kind: {1: 1755, 2: 2619}[kind]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetPowerManagementLimit = lambda h: 700000  # milliwatts
    m.nvmlDeviceGetTemperature = lambda h, kind: 41
    m.calls = calls
    return m


TORCH_UUID = "5e3d0c4a-0000-0000-0000-000000000001"  # torch's spelling: no GPU- prefix


def test_nvml_values_are_written_as_nvidia_smi_writes_them(monkeypatch):
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = fingerprint.nvml_info(TORCH_UUID)
    assert info == {"nvml_uuid": "GPU-" + TORCH_UUID, "driver": "570.86.15", "sm_clock": "1755 MHz",
                    "sm_clock_max": "1980 MHz", "mem_clock": "2619 MHz", "power_limit": "700.00 W",
                    "temperature": "41"}  # fmt: skip
    # the GPU is asked for by torch's UUID, not by NVML's index 0; a field the driver lacks is left out
    assert fake.calls == ["init", f"uuid GPU-{TORCH_UUID}", "shutdown"]

    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    assert fingerprint.nvml_info(TORCH_UUID)["throttle_reasons"] == "0x0000000000000004"


def test_a_gpu_nvml_does_not_know_gives_no_telemetry_and_nvml_is_shut_down(monkeypatch):
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert fingerprint.nvml_info("GPU-ffffffff-0000-0000-0000-000000000009") == {}
    assert fake.calls == ["init", "uuid GPU-ffffffff-0000-0000-0000-000000000009", "shutdown"]


def test_no_nvml_means_no_gpu_telemetry(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_fails=True))
    assert fingerprint.nvml_info(TORCH_UUID) == {}


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


def test_the_resume_check_reads_torch_version_as_a_worker_records_it(tmp_path, monkeypatch):
    """The parent reads torch.__version__ from torch/version.py without importing torch. The distribution's
    metadata is not that string everywhere: on the GPU image it said 2.11.0 for a torch whose __version__ is
    2.11.0+cu130, and every resume there was refused as 'another set-up'."""
    import importlib.machinery
    import importlib.util

    import torch

    assert fingerprint.torch_version() == torch.__version__
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "version.py").write_text(
        "__all__ = ['__version__']\n__version__ = '2.11.0+cu130'\ncuda = '13.0'\n"
    )
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(fake)]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: spec if name == "torch" else real_find_spec(name, *a)
    )
    monkeypatch.setattr(fingerprint, "_pkg", lambda name: "2.11.0")
    assert fingerprint.torch_version() == "2.11.0+cu130"
    assert fingerprint.resume_identity()["torch"] == "2.11.0+cu130"


def test_cpu_model_and_isa_from_proc_cpuinfo_without_the_cpuid_child():
    """Linux's /proc/cpuinfo answers in microseconds where py-cpuinfo's CPUID child took 1.1 s of `attnbench
    env` (issue 26); where it names no model (ARM, other systems) py-cpuinfo still answers."""
    text = "processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu avx2 fma avx512f avx512_bf16 amx_tile"
    model, flags = fingerprint._proc_cpuinfo(text)
    assert model == "AMD EPYC 9654" and {"avx2", "avx512_bf16", "amx_tile"} <= flags
    assert fingerprint._proc_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\n") is None
    assert fingerprint._proc_cpuinfo("") is None


def test_a_checkout_records_its_commit():
    """The commit is read from the checkout that holds harness/ (a resume compares it): never None there."""
    from attnbench.harness.measure.fingerprint import REPO, git_commit

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert (REPO / "harness" / "measure" / "fingerprint.py").is_file()
    assert git_commit() is not None
