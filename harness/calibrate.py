"""A short calibration at the start of a run: the device's matmul throughput and copy bandwidth.

These are the run's own ceilings (achieved TFLOP/s is reported against them), measured with the
same timers as the cells rather than taken from a datasheet.
"""

from __future__ import annotations

from typing import Any

import torch

from . import timing

# Square matmul sizes: large enough to reach the device's plateau, small enough to take well under a second.
MATMUL_N = {"cpu": 2048, "cuda": 8192}
COPY_BYTES = {"cpu": 256 << 20, "cuda": 2 << 30}


def _timer(device: str) -> timing.Timer:
    return timing.CudaTimer(flush_l2=False) if device == "cuda" else timing.CpuTimer()


def matmul_tflops(device: str, dtype: torch.dtype, budget: timing.Budget) -> float:
    """Median TFLOP/s of an n x n x n matmul on random data (2 n^3 FLOPs)."""
    n = MATMUL_N[device]
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(dtype)
    b = torch.randn(n, n, device=device, generator=g).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    m = timing.measure(lambda: torch.matmul(a, b, out=out), _timer(device), budget)
    return 2 * n**3 / (m.median * 1e-3) / 1e12


def copy_gbps(device: str, budget: timing.Budget) -> float:
    """Median GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    nbytes = COPY_BYTES[device]
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    m = timing.measure(lambda: dst.copy_(src), _timer(device), budget)
    return 2 * nbytes / (m.median * 1e-3) / 1e9


def calibrate(device: str, dtypes: list[str]) -> dict[str, Any]:
    """{'matmul_tflops': {dtype: TFLOP/s}, 'copy_gbps': GB/s} for one device."""
    budget = timing.Budget(warmup_ms=50, budget_ms=400, min_ms=50)
    out: dict[str, Any] = {"matmul_tflops": {}, "matmul_n": MATMUL_N[device]}
    for name in dtypes:
        try:
            out["matmul_tflops"][name] = matmul_tflops(device, getattr(torch, name), budget)
        except RuntimeError as exc:  # e.g. a dtype the device's BLAS lacks
            out["matmul_tflops"][name] = None
            out.setdefault("errors", []).append(f"matmul {name}: {exc}")
    out["copy_gbps"] = copy_gbps(device, budget)
    return out
