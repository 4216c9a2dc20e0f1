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


# a package laid out as attnbench is: its top folder, and a subpackage folder that a checkout keeps beside it
# (found through the top package's __path__) and an install keeps inside it
_TOP = """import os
_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isdir(os.path.join(_root, "kern69")):
    __path__.append(_root)
"""


def _code_of(site, monkeypatch, edit: str = "") -> str | None:
    """code_digest of the package `fakebench69` (and fakebench69.kern69) as imported from `site`."""
    import importlib

    for name in [m for m in sys.modules if m.startswith("fakebench69")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        return fingerprint.code_digest(("fakebench69", "fakebench69.kern69"))
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m.startswith("fakebench69")]:
            del sys.modules[name]


def _write(files: dict) -> None:
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_code_sha256_is_the_same_for_a_checkout_and_its_install_and_moves_with_any_edit(
    tmp_path, monkeypatch
):
    """A `pip install` of a folder records its version and no commit: the sha256 of the code's files, by
    their import paths, tells two installs apart, and names a checkout and its install alike (a checkout's
    other files, tests and tools beside its packages, are not the code)."""
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    kernel = "def attend(q, k, v):\n    return v\n"
    _write({checkout / "fakebench69" / "__init__.py": _TOP, checkout / "kern69" / "__init__.py": "",
            checkout / "kern69" / "deep" / "k.py": kernel,
            checkout / "kern69" / "presets" / "p.toml": "a = 1\n",
            checkout / "noxfile.py": "x = 1\n", checkout / "tests" / "test_x.py": "x = 2\n"})  # fmt: skip
    _write({site / "fakebench69" / "__init__.py": _TOP, site / "fakebench69" / "kern69" / "__init__.py": "",
            site / "fakebench69" / "kern69" / "deep" / "k.py": kernel,
            site / "fakebench69" / "kern69" / "presets" / "p.toml": "a = 1\n"})  # fmt: skip
    before = _code_of(checkout, monkeypatch)
    assert before is not None and len(before) == 16
    assert _code_of(site, monkeypatch) == before
    (checkout / "tests" / "test_x.py").write_text("x = 3\n")  # not the code
    assert _code_of(checkout, monkeypatch) == before
    (site / "fakebench69" / "kern69" / "deep" / "k.py").write_text(kernel.replace("v\n", "v * 1\n"))
    assert _code_of(site, monkeypatch) != before  # an edited kernel of the same version
    (checkout / "kern69" / "presets" / "p.toml").write_text("a = 2\n")
    assert _code_of(checkout, monkeypatch) != before  # a preset is code too: it says what a run measures
    assert fingerprint.code_digest(("no_such_package_69",)) is None


def test_an_install_from_a_git_url_records_the_commit_pip_recorded(tmp_path, monkeypatch):
    """`pip install git+URL@REF` writes the commit into direct_url.json: the fingerprint's git_commit where no
    checkout is there to ask; a folder's install (dir_info) or another install's metadata gives none."""
    import json
    from importlib.metadata import PathDistribution

    info = tmp_path / "site" / "attnbench-0.2.0.dist-info"
    here = tmp_path / "site" / "attnbench" / "harness" / "measure" / "fingerprint.py"
    _write({info / "METADATA": "Metadata-Version: 2.1\nName: attnbench\nVersion: 0.2.0\n", here: ""})
    commit = "8907a81" + "0" * 33
    url = {"url": "https://example.org/attnbench.git", "vcs_info": {"vcs": "git", "commit_id": commit}}
    (info / "direct_url.json").write_text(json.dumps(url))
    dist = PathDistribution(info)
    assert fingerprint.installed_commit(dist, here) == commit
    assert fingerprint.installed_commit(dist, tmp_path / "elsewhere.py") is None  # not the code running
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///tmp/trial", "dir_info": {}}))
    assert fingerprint.installed_commit(dist, here) is None
    (info / "direct_url.json").unlink()
    assert fingerprint.installed_commit(dist, here) is None  # installed from a wheel
    monkeypatch.setattr(fingerprint, "REPO", tmp_path / "site" / "attnbench")  # no .git: an install
    monkeypatch.setattr(fingerprint, "installed_commit", lambda: commit)
    assert fingerprint.git_commit() == commit


def test_a_resume_compares_the_code_sha256():
    """Two installs without a commit (None on both sides) differ by their code's sha256: a resume refuses."""
    now = fingerprint.resume_identity()
    assert now["code_sha256"] == fingerprint.code_sha256() is not None
    meta = {"fingerprint": {"hostname": "a", "git_commit": None, "code_sha256": "0" * 16}}
    recorded = fingerprint.recorded_identity(meta)
    diff = fingerprint.identity_diff(recorded, {**now, "hosts": ["a"], "git_commit": None})
    assert diff == {"code_sha256": ["0" * 16, now["code_sha256"]]}
    assert (
        fingerprint.identity_diff({"hosts": ["a"]}, {**now, "hosts": ["a"]}) == {}
    )  # an older run: not recorded
