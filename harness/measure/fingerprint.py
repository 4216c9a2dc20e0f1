"""The machine's fingerprint: everything that can change a measurement, as one flat-ish dict."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path
from typing import Any

from attnbench.harness.measure import telemetry
from attnbench.harness.measure.allocator import worker_environ
from attnbench.results.identity import (  # noqa: F401 (the resume check reads them here)
    RESUME_KEYS,
    diff_text,
    identity_diff,
    recorded_identity,
)

REPO = Path(__file__).resolve().parents[2]  # harness/measure/fingerprint.py -> the checkout


def _pkg(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def torch_version() -> str | None:
    """torch.__version__ without importing torch: read from the torch/version.py that import would load.
    The installed distribution's metadata is not the same string everywhere (the GPU image's torch reports
    2.11.0 there and 2.11.0+cu130 as torch.__version__), so it is the fallback only."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = Path(folder, "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.MULTILINE)
        if found:
            return found.group(1)
    return _pkg("torch")


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
    try:
        return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None


def git_commit() -> str | None:
    """HEAD of the checkout attnbench runs from, with '-dirty' when it has uncommitted changes; for an
    installed attnbench (no checkout), the commit pip recorded when it installed it from a git repository
    (installed_commit); None where neither tells."""
    if not (REPO / ".git").exists():
        return installed_commit()
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


def installed_commit(dist: Any = None, here: str | Path = __file__) -> str | None:
    """The commit of the git repository pip installed attnbench from (its direct_url.json's
    vcs_info.commit_id: `pip install git+URL@REF`), None where pip recorded none (a folder or a wheel) or
    the installed distribution (`dist`, default attnbench's) does not hold the code running (`here`: this
    file)."""
    try:
        dist = distribution("attnbench") if dist is None else dist
        theirs = Path(dist.locate_file("attnbench/harness/measure/fingerprint.py")).resolve()
        if theirs != Path(here).resolve():  # another attnbench's metadata (a checkout run beside it)
            return None
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except (PackageNotFoundError, OSError, ValueError):
        return None
    commit = (info.get("vcs_info") or {}).get("commit_id") if isinstance(info, dict) else None
    return str(commit) if commit else None


# the folders of the code that runs, by the import names they install as (pyproject.toml's package-dir)
CODE_PACKAGES = (
    "attnbench",
    "attnbench.variants",
    "attnbench.harness",
    "attnbench.results",
    "attnbench.reports",
)


@functools.cache
def code_sha256() -> str | None:
    """The first 16 hex digits of the sha256 of the attnbench code this process runs: every .py and .toml
    file (the presets) of its packages, each by its path under its import name, so that a checkout and a
    `pip install` of it hash alike. What tells two installs apart where no commit is recorded (a
    `pip install` of a folder carries its version, which many commits share, and no commit)."""
    return code_digest(CODE_PACKAGES)


def code_digest(packages: Sequence[str]) -> str | None:
    """code_sha256 over the import packages `packages`: the first one's own files (the top package, whose
    subpackages are named after it), every file below each other one's folder; None where none is found."""
    import importlib.util

    files: dict[str, Path] = {}
    for i, name in enumerate(packages):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
            continue
        root = Path(spec.origin).parent  # not its __path__: a checkout's attnbench adds the checkout to it
        for path in root.rglob("*") if i else root.glob("*"):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts and path.is_file():
                files["/".join((*name.split("."), *path.relative_to(root).parts))] = path
    if not files:
        return None
    digest = hashlib.sha256()
    for key in sorted(files):
        digest.update(key.encode() + b"\0" + files[key].read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# CPU features that decide which kernels torch's CPU backends can use (vector width, bf16/fp16 matmul units)
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "asimd", "sve")


def _proc_cpuinfo(text: str | None = None) -> tuple[str, set[str]] | None:
    """(model, flags) from Linux's /proc/cpuinfo (or `text`), None where it does not name both (not Linux;
    ARM, whose /proc/cpuinfo has no model name). py-cpuinfo reads CPUID in a child Python, about 1.1 s
    of the 1.6 s `attnbench env` took beyond `import torch` (issue 26); the kernel's flags are the ones
    that decide what runs, and ISA_FLAGS are spelled as it spells them."""
    text = _read("/proc/cpuinfo") if text is None else text
    model = re.search(r"^model name\s*:\s*(.+)$", text or "", re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.*)$", text or "", re.MULTILINE)
    return (model.group(1).strip(), set(flags.group(1).split())) if model and flags else None


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform says (no py-cpuinfo child process)."""
    found = _proc_cpuinfo()
    return (found[0] if found else None) or platform.processor() or platform.machine()


def cpu_info(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """CPU model and features (/proc/cpuinfo, else py-cpuinfo), cores and memory (psutil), and the knobs
    that move timings: those of this process's environment, or of `environ`."""
    environ = os.environ if environ is None else environ
    import psutil

    found = _proc_cpuinfo()
    if found is None:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
        found = info.get("brand_raw"), set(info.get("flags") or ())
    model, flags = found
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cpu_isa": " ".join(f for f in ISA_FLAGS if f in flags) or None,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cpus": os.cpu_count(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "transparent_hugepages": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "THP_MEM_ALLOC_ENABLE": environ.get("THP_MEM_ALLOC_ENABLE"),
        "allocator_env": allocator_env(environ),
    }


# Environment that changes how fast fresh memory comes or how many threads run, so two runs can be told
# apart. Measured on a 2-core VM, naive attention at N=8192: 1.57 million page faults per call by default,
# about 5,000 with THP_MEM_ALLOC_ENABLE=1 (results/reference/page-faults-epyc-2core.json);
# glibc's MALLOC_* tunables moved it too, but not reliably at that size.
ALLOCATOR_ENV_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD", "OMP_", "MKL_", "KMP_", "PYTORCH_")


def allocator_env(environ: Mapping[str, str] | None = None) -> str:
    """The set environment variables that affect allocation or threading, as 'K=V K=V' ('none' if unset),
    of this process or of `environ`."""
    environ = os.environ if environ is None else environ
    found = [f"{k}={v}" for k, v in sorted(environ.items()) if k.startswith(ALLOCATOR_ENV_PREFIXES)]
    return " ".join(found) or "none"


def env_set_by_imports(files: Sequence[str | Path], changed: Mapping[str, Mapping[str, tuple]]) -> list[str]:
    """One line for each variant file whose import changed a variable allocator_env names (threads,
    allocation) or THP_MEM_ALLOC_ENABLE: every worker of the run starts with the changed environment, so
    every variant is measured under it. `changed`: variants.registry.ENV_CHANGED."""
    out = []
    for f in files:
        found = changed.get(str(Path(f).resolve())) or {}
        said = [
            (f"{k}={new}" if new is not None else f"{k} unset") + (f" (was {old})" if old is not None else "")
            for k, (old, new) in sorted(found.items())
            if k.startswith(ALLOCATOR_ENV_PREFIXES) or k == "THP_MEM_ALLOC_ENABLE"
        ]
        if said:
            out.append(
                f"importing variant file {f} set {', '.join(said)} in the environment every worker of this "
                "run starts with: every variant is measured so (meta.json records it); give it with --env "
                "where it is meant"
            )
    return out


def resume_identity(
    env: Mapping[str, str] | None = None, hosts: Sequence[str] | None = None
) -> dict[str, Any]:
    """RESUME_KEYS as this process would start a worker now: with the sweep's `env` and the allocator
    defaults (harness.measure.allocator) over os.environ (the worker's fingerprint, taken there, saw the
    same), on `hosts` (default: this one). Read without importing torch: torch_version() reads the
    `torch.__version__` a worker records."""
    environ = worker_environ(env)
    return {
        "hosts": sorted(hosts or [socket.gethostname()]),
        "torch": torch_version(),
        "git_commit": git_commit(),
        "code_sha256": code_sha256(),
        "allocator_env": allocator_env(environ),
        "THP_MEM_ALLOC_ENABLE": environ.get("THP_MEM_ALLOC_ENABLE"),
    }


def nvml_info(uuid: str) -> dict[str, Any]:
    """Driver, clocks, power limit, temperature and clock-event reasons through NVML (nvidia-ml-py), written
    as nvidia-smi writes them, of the GPU with torch's `uuid`: the one torch uses, whatever
    CUDA_VISIBLE_DEVICES renumbers (NVML's index 0 is the machine's first GPU by PCI bus, not torch's
    device 0). {} where NVML is missing (no driver, not NVIDIA) or does not know the UUID."""
    opened = telemetry.open_nvml(uuid)
    if opened is None:
        return {}
    pynvml, h = opened
    info: dict[str, Any] = {"nvml_uuid": telemetry.nvml_uuid(uuid)}
    try:
        reads = {
            "driver": lambda: pynvml.nvmlSystemGetDriverVersion(),
            "sm_clock": lambda: f"{pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)} MHz",
            "sm_clock_max": lambda: f"{pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)} MHz",
            "mem_clock": lambda: f"{pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)} MHz",
            "power_limit": lambda: f"{pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000:.2f} W",  # mW
            "temperature": lambda: str(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            "throttle_reasons": lambda: f"0x{pynvml.nvmlDeviceGetCurrentClocksEventReasons(h):016x}",
        }
        for key, read in reads.items():
            try:
                value = read()
            except (pynvml.NVMLError, AttributeError):  # a field this GPU or driver does not report
                continue
            info[key] = value.decode() if isinstance(value, bytes) else value
    except pynvml.NVMLError:
        pass
    finally:
        pynvml.nvmlShutdown()
    return info


def where_measured(device: str) -> dict[str, Any]:
    """The row columns that say where a cell ran: the host, and on CUDA the GPU's name, UUID and index (as
    torch numbers the visible devices), so that rows from several machines or GPUs of one run stay apart."""
    out: dict[str, Any] = {
        "host": socket.gethostname(),
        "gpu_name": None,
        "gpu_uuid": None,
        "gpu_index": None,
    }
    if device == "cuda":
        import torch

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        out.update(gpu_name=props.name, gpu_uuid=None if uuid is None else str(uuid), gpu_index=index)
    return out


def gpu_info() -> dict[str, Any] | None:
    """Properties of torch's CUDA device 0 (the first of CUDA_VISIBLE_DEVICES), or None without CUDA.
    Initialises CUDA in this process: called in a worker, never in the parent."""
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
    uuid = getattr(p, "uuid", None)
    info.update(nvml_info(str(uuid)) if uuid is not None else {})
    return info


def collect(*, with_gpu: bool = True, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint: software versions, CPU, memory, GPU and the settings that move timings (the
    environment's: this process's, or `environ`, such as the one a run's workers start with)."""
    import torch

    fp: dict[str, Any] = {
        "attnbench_version": attnbench_version(),
        "git_commit": git_commit(),
        "code_sha256": code_sha256(),
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),  # a str: torch's TorchVersion would make the parent unpickle torch
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "xformers": _pkg("xformers"),
        "numpy": _pkg("numpy"),
        "torch_threads": torch.get_num_threads(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
    }
    fp.update(cpu_info(environ))
    fp["gpu"] = gpu_info() if with_gpu else None
    return fp
