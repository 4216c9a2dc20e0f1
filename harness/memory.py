"""Peak memory of one call, in bytes above what was live before it, measured outside the timed runs.

CUDA: reset the allocator's peak counter, run, read torch.cuda.max_memory_allocated.
CPU: torch 2.x keeps no CPU allocator statistics, so the call runs under the profiler with
profile_memory=True and the allocator's [memory] events (+bytes on allocation, -bytes on free) are
summed in time order; the running maximum is the exact peak of torch-allocated memory. The profiler is
torch.autograd.profiler.profile(use_kineto=True), the same Kineto events as torch.profiler.profile without
the latter's first start in a process importing torch._inductor and dynamo (torch 2.13's prepare_trace
asks hasattr(torch, "_inductor"), which imports it): 1.2 s a worker on the 2-core reference VM. Measured on a
2-core EPYC: naive attention B=1 H=8 N=2048 d=64 fp32 gives exactly 272,629,760 B (two N x N score
tensors plus the output). Memory that is not allocated through torch (a C library's own malloc) is
not seen; the kernel's high-water mark (VmHWM) would see it but includes every other allocation.
"""

from __future__ import annotations

from collections.abc import Callable

CPU_METHOD = "torch.profiler memory events"
CUDA_METHOD = "torch.cuda.max_memory_allocated"


def peak_cpu(fn: Callable[[], object]) -> int:
    """Bytes: the highest torch CPU allocation level reached during fn(), relative to its start."""
    import torch
    from torch.autograd.profiler import profile

    with profile(use_kineto=True, profile_memory=True, record_shapes=False) as prof:
        fn()
    events = [e for e in prof.kineto_results.events() if e.name() == "[memory]"]
    cpu = torch._C._autograd.DeviceType.CPU if hasattr(torch._C._autograd, "DeviceType") else None
    level = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        if cpu is not None and e.device_type() != cpu:
            continue
        level += e.nbytes()
        peak = max(peak, level)
    return int(peak)


def peak_cuda(fn: Callable[[], object], device=None) -> int:
    """Bytes: torch.cuda.max_memory_allocated during fn() minus what was allocated before it."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - base)


def peak(fn: Callable[[], object], device: str) -> tuple[int, str]:
    """(peak bytes, method) for the given device type."""
    if device == "cuda":
        return peak_cuda(fn), CUDA_METHOD
    return peak_cpu(fn), CPU_METHOD
