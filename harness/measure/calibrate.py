"""A short calibration at the start of a run: the device's matmul throughput and copy bandwidth.

These are the run's own ceilings (achieved TFLOP/s is reported against them), measured with the
same timers as the cells rather than taken from a datasheet. A ceiling is what the device reached on its
fastest call: noise (other tenants, a cold worker) only ever slows a call down, and a median taken
at a noisy moment put a 2-core VM's "peak" at 0.10 TFLOP/s, below the 0.16 that sdpa cells reached later
in the same run. The median is kept beside it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import torch

from attnbench.harness.measure import timing

# Square matmul sizes: large enough to reach the device's plateau, small enough to take well under a second.
MATMUL_N = MappingProxyType({"cpu": 2048, "cuda": 8192})
COPY_BYTES = MappingProxyType({"cpu": 256 << 20, "cuda": 2 << 30})


def _timer(device: str) -> timing.Timer:
    return timing.CudaTimer(flush_l2=False) if device == "cuda" else timing.CpuTimer()


# A calibration matmul shrinks for two reasons:
# - a dtype with no fast kernel (bfloat16 on a CPU without AVX-512 BF16 ran 2048^3 in 20 s; float16 on a
#   2-core EPYC VM 0.9 s at 1024): its size doubles from PROBE_CALLS_N, one real call at each size, while the
#   n^3 law from the last call keeps the next call (and its warm-up) under max(budget, SLOW_CALL_MS). A dtype
#   that cannot reach MATMUL_N so is slow, and is timed at the largest size measured whose min_samples calls
#   fit in the budget. Each doubling is asked of a real call, never of the law from 256 alone: a narrow
#   dtype's kernel is faster per FLOP at 2048 (bfloat16's call at 256 varied 7x on a 2-core VM, and the law
#   read 29 to 192 ms at 2048 where a call took 22 to 26), and a busy machine slows a small call most
#   (float32 at 256 read 16 ms under a test suite, 100x its quiet time; a rule that compared float16 with it
#   then took float16 for a fast dtype and made one call at 2048: 66 s);
# - a short budget: the budget's minimum samples at MATMUL_N would not fit in it. Never below FLOOR_N, which
#   reaches the same ceiling as 2048 where the budget decides (a 2-core VM read 0.128-0.136 TFLOP/s at 1024,
#   0.124-0.133 at 2048); a machine whose 2048 call is short keeps 2048. float32, the yardstick, keeps the
#   law from its call at 256, which holds for it (12.9 ms at 1024, 95-111 at 2048): its call at 2048 is the
#   costly one, and a float32 matmul has a fast kernel everywhere.
SLOW_CALL_MS = 1000.0
FLOOR_N = 1024
PROBE_CALLS_N = 256


def _best_ms(device: str, dtype: torch.dtype, n: int, calls: int = 3) -> float:
    """The fastest of `calls` n x n x n matmuls after one warm-up (the first at a size pays for its
    kernel's set-up), in ms."""
    a = torch.ones(n, n, device=device, dtype=dtype)
    torch.matmul(a, a)
    return min(_timer(device).time_calls(lambda: torch.matmul(a, a), calls))


def matmul_n(device: str, dtype: torch.dtype, budget_ms: float) -> int:
    """The matmul size the calibration times: MATMUL_N[device], smaller for a slow dtype (the largest size
    reached whose min_samples calls fit in the budget, at least 256) or a short budget (halved while
    min_samples calls would not fit, down to FLOOR_N). A GPU keeps the usual size: a call at 256 is
    launch-bound there, and the law read a 0.03 ms launch as 1 s at 8192 (an H200 calibrated bfloat16 at
    2048, 676 TFLOP/s against 782 at 8192)."""
    top = MATMUL_N[device]
    if device == "cuda":  # milliseconds in any dtype a GPU has; a call at 256 times the launch, not the work
        return top
    samples = timing.Budget.min_samples
    ms = {PROBE_CALLS_N: _best_ms(device, dtype, PROBE_CALLS_N)}
    n = PROBE_CALLS_N
    if dtype == torch.float32:  # the law holds for it
        ms.update({m: ms[n] * (m / n) ** 3 for m in (2 * n, 4 * n, top)})
        n = top
    while n < top and 2 * ms[n] * 8 <= max(budget_ms, SLOW_CALL_MS):  # the next size's warm-up and call
        ms[2 * n] = _best_ms(device, dtype, 2 * n, calls=1)
        n *= 2
    if n < top:  # slow: the largest size reached whose samples fit, if any does
        return max([m for m in ms if samples * ms[m] <= budget_ms] or [PROBE_CALLS_N])
    while n > FLOOR_N and samples * ms[n] > budget_ms:
        n //= 2
    return n


def matmul_tflops(
    device: str, dtype: torch.dtype, budget: timing.Budget, n: int | None = None
) -> tuple[float, float]:
    """(best, median) TFLOP/s of an n x n x n matmul on random data (2 n^3 FLOPs); n: MATMUL_N[device]."""
    n = n or MATMUL_N[device]
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(dtype)
    b = torch.randn(n, n, device=device, generator=g).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    m = timing.measure(lambda: torch.matmul(a, b, out=out), _timer(device), budget)
    flops = 2 * n**3
    return flops / (min(m.samples_ms) * 1e-3) / 1e12, flops / (m.median * 1e-3) / 1e12


def copy_gbps(device: str, budget: timing.Budget) -> float:
    """Best GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    nbytes = COPY_BYTES[device]
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    m = timing.measure(lambda: dst.copy_(src), _timer(device), budget)
    return 2 * nbytes / (min(m.samples_ms) * 1e-3) / 1e9


# The speed probe before every cell: a small float32 matmul, best of about PROBE_MS of calls. It is the
# machine's speed at that moment (another tenant, a throttled clock), compared later with the run's median.
PROBE_N = MappingProxyType({"cpu": 512, "cuda": 2048})
PROBE_BUDGET = timing.Budget(warmup_ms=5, budget_ms=30, min_samples=5, max_samples=200, min_ms=20)


def speed_probe(device: str) -> float:
    """TFLOP/s of the fastest of a few small float32 matmuls on `device`, right now."""
    n = PROBE_N[device]
    a = torch.ones(n, n, device=device)
    out = torch.empty(n, n, device=device)
    m = timing.measure(lambda: torch.matmul(a, a, out=out), _timer(device), PROBE_BUDGET)
    return 2 * n**3 / (min(m.samples_ms) * 1e-3) / 1e12


def calibrate(device: str, dtypes: list[str], budget_ms: float = 1000.0) -> dict[str, Any]:
    """{'matmul_tflops': {dtype: best TFLOP/s}, 'matmul_tflops_median': {...}, 'copy_gbps': best GB/s,
    'speed_probe_tflops': the speed probe (speed_probe) right after them,
    'budget_ms': the sampling ms of each (Settings.calibrate_ms, after a tenth of it as warm-up, at most
    100 ms)}. Fewer ms, fewer samples: a ceiling taken as the fastest call is then less sure. budget_ms 0
    measures nothing ({'budget_ms': 0.0}: a run without ceilings, whose cells have no share of them)."""
    if budget_ms == 0:
        return {"budget_ms": 0.0}
    budget = timing.Budget(warmup_ms=min(100.0, budget_ms / 10), budget_ms=budget_ms, min_ms=budget_ms)
    out: dict[str, Any] = {"matmul_tflops": {}, "matmul_tflops_median": {}, "matmul_n": MATMUL_N[device]}
    out["budget_ms"] = budget_ms
    for name in dtypes:
        try:
            n = matmul_n(device, getattr(torch, name), budget_ms)
            if n != MATMUL_N[device]:  # a slow dtype or a short budget: a smaller matmul
                out.setdefault("matmul_n_by_dtype", {})[name] = n
            best, median = matmul_tflops(device, getattr(torch, name), budget, n)
            out["matmul_tflops"][name], out["matmul_tflops_median"][name] = best, median
        except RuntimeError as exc:  # e.g. a dtype the device's BLAS lacks
            out["matmul_tflops"][name] = out["matmul_tflops_median"][name] = None
            out.setdefault("errors", []).append(f"matmul {name}: {exc}")
    out["copy_gbps"] = copy_gbps(device, budget)
    # the per-cell speed probe, taken now too: a row's own probe over this one says how much faster the
    # machine ran at that cell than while these ceilings were taken (results.suspect scales by it)
    out["speed_probe_tflops"] = speed_probe(device)
    return out
