"""The machine's fingerprint: everything that can change a measurement, as one flat-ish dict."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _pkg(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def attnbench_version() -> str | None:
    """The installed distribution's version, else the checkout's pyproject version."""
    found = _pkg("attnbench")
    if found:
        return found
    text = _read(str(REPO / "pyproject.toml")) or ""
    for line in text.splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def git_commit() -> str | None:
    """HEAD of the checkout attnbench runs from, with '-dirty' when it has uncommitted changes."""
    if not (REPO / ".git").exists():
        return None
    try:
        res = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--verify", "-q", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if res.returncode != 0:
            return None
        head = res.stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def cpu_info() -> dict[str, Any]:
    text = _read("/proc/cpuinfo") or ""
    model, cores, phys = None, set(), None
    for line in text.splitlines():
        key, _, val = (part.strip() for part in line.partition(":"))
        if key == "model name" and model is None:
            model = val
        elif key == "physical id":
            phys = val
        elif key == "core id":
            cores.add((phys, val))
    mem_total = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_total = int(line.split()[1]) * 1024
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "physical_cores": len(cores) or None,
        "logical_cpus": os.cpu_count(),
        "memory_bytes": mem_total,
        "transparent_hugepages": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "allocator_env": allocator_env(),
    }


# Environment that changes how fast fresh memory comes or how many threads run, so two runs can be told
# apart. Measured on a 2-core VM, naive attention at N=8192: 1.57 million page faults and 5.5 s per call
# by default, about 5,000 faults and 1.45 s with THP_MEM_ALLOC_ENABLE=1 (see harness/presets/cpu.toml);
# glibc's MALLOC_* tunables moved it too, but not reliably at that size.
ALLOCATOR_ENV_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD", "OMP_", "MKL_", "KMP_", "PYTORCH_")


def allocator_env() -> str:
    """The set environment variables that affect allocation or threading, as 'K=V K=V' ('none' if unset)."""
    found = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(ALLOCATOR_ENV_PREFIXES)]
    return " ".join(found) or "none"


SMI_FIELDS = {  # fingerprint key -> nvidia-smi query names to try (drivers renamed some)
    "driver": ("driver_version",),
    "sm_clock": ("clocks.sm",),
    "sm_clock_max": ("clocks.max.sm",),
    "mem_clock": ("clocks.mem",),
    "power_limit": ("power.limit",),
    "temperature": ("temperature.gpu",),
    "throttle_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
}


def _smi_query(field: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", "0", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and text and "not a valid field" not in text.lower() else None


def _nvidia_smi() -> dict[str, Any]:
    """Driver, clocks and throttle reasons of GPU 0 from nvidia-smi, or {} where it is missing."""
    info: dict[str, Any] = {}
    for key, names in SMI_FIELDS.items():
        for name in names:
            val = _smi_query(name)
            if val is not None:
                info[key] = val
                break
        if key == "driver" and "driver" not in info:
            return {}  # no nvidia-smi: skip the other queries
    return info


def gpu_info() -> dict[str, Any] | None:
    """Properties of CUDA device 0, or None without CUDA. Initialises CUDA in this process."""
    import torch

    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(0)
    info = {
        "name": p.name,
        "count": torch.cuda.device_count(),
        "memory_bytes": int(p.total_memory),
        "sm_count": p.multi_processor_count,
        "capability": f"{p.major}.{p.minor}",
        "l2_cache_bytes": getattr(p, "L2_cache_size", None),
    }
    info.update(_nvidia_smi())
    return info


def collect(*, with_gpu: bool = True) -> dict[str, Any]:
    """The fingerprint: software versions, CPU, memory, GPU and the settings that move timings."""
    import torch

    fp: dict[str, Any] = {
        "attnbench_version": attnbench_version(),
        "git_commit": git_commit(),
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "xformers": _pkg("xformers"),
        "numpy": _pkg("numpy"),
        "torch_threads": torch.get_num_threads(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
    }
    fp.update(cpu_info())
    fp["gpu"] = gpu_info() if with_gpu else None
    return fp
