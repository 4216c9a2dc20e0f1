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

import gc
import os
import sys
import weakref
from collections.abc import Callable, Iterable
from contextlib import contextmanager

CPU_METHOD = "torch.profiler memory events"
CUDA_METHOD = "torch.cuda.max_memory_allocated"


def peak_cpu(fn: Callable[[], object]) -> int:
    """Bytes: the highest torch CPU allocation level reached during fn(), relative to its start."""
    import torch
    from torch.autograd.profiler import profile

    prof = profile(use_kineto=True, profile_memory=True, record_shapes=False)
    with _fd2_silenced():
        prof.__enter__()
    try:
        fn()  # what the variant writes to stderr stays
    finally:
        with _fd2_silenced():
            prof.__exit__(None, None, None)
    events = [e for e in prof.kineto_results.events() if e.name() == "[memory]"]
    cpu = torch._C._autograd.DeviceType.CPU if hasattr(torch._C._autograd, "DeviceType") else None
    level = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        if cpu is not None and e.device_type() != cpu:
            continue
        level += e.nbytes()
        peak = max(peak, level)
    return int(peak)


@contextmanager
def _fd2_silenced():
    """Kineto writes 'USDT:... profiler_start' and '... profiler_stop' to file descriptor 2 as the profiler
    starts and stops (torch 2.13; KINETO_LOG_LEVEL does not filter them): two lines a cell in every
    worker.log and in a failing pytest cell's captured stderr, saying nothing to the user. Only the start
    and the stop are silenced, never the measured call."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


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


# ---- memory a variant keeps between calls ---------------------------------------------------------------
#
# The peak above is taken on one call above what is live before it, so a workspace a variant made on an
# earlier call and keeps (a module-level cache, a closure, a function attribute, a setup hook's state) is
# live before and never in it. HOLDINGS finds such memory and whose it is: the torch tensors alive after a
# variant ran (its numerics probe, each of its cells) that were not alive before it are that variant's, and
# are followed by weak reference for as long as they live, so that every later cell of the variant counts
# them, not only the one whose call made them (in a run, the numerics probe makes the first calls).
#
# The tensors are found through gc.get_objects(), after a full collection: torch.Tensor objects are tracked
# by the collector, wherever Python keeps them (another module's namespace included); their storages are
# summed once each (views share one). CPU has no other way: torch keeps no CPU allocator statistics, and the
# profiler's memory events only see what happens while it runs (the timed calls cannot run under it). On
# CUDA the same is done, and torch.cuda.memory_allocated's rise over the cell is taken where it says more
# (harness.measure.cell.retained_bytes): it also sees tensors C++ holds without a Python object. Not found on
# CPU: memory a C or C++ library holds without a Python tensor, as in the peak. In a worker, whose imports are
# frozen (timing.freeze_imports), the collector lists only objects made since: about 0.5 ms a look, a
# collection included; in a process that never froze (tests, the pytest plugin) it lists every object: tens
# of ms. Frozen tensors are not listed, but those already followed stay followed: a weak reference does not
# care about the collector's generations.


def storages(tensors: Iterable[object], device: str) -> dict[int, int]:
    """{data_ptr: nbytes} of the distinct storages of `tensors` (torch.Tensor or None) on `device`."""
    import torch

    out: dict[int, int] = {}
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, wrapper subclasses
            continue
        if s.device.type == device:
            out[s.data_ptr()] = s.nbytes()
    return out


def live_tensors() -> list[object]:
    """Every torch tensor alive now that the collector lists, after a full collection (an output or a
    gradient kept alive only by a reference cycle is not alive)."""
    import torch

    gc.collect()
    tensor = torch.Tensor
    # type(o), never isinstance(o, ...): isinstance reads o.__class__, which some module proxies warn on
    return [o for o in gc.get_objects() if issubclass(type(o), tensor)]


class Holdings:
    """The tensors each variant made and still keeps, by weak reference, in this process."""

    def __init__(self) -> None:
        self.kept: dict[str, list[weakref.ref]] = {}

    def mark(self) -> dict[int, weakref.ref]:
        """The tensors alive now, before a variant runs: {id: weak reference} (the reference tells a tensor
        still alive from a new one that reuses a dead one's id)."""
        return {id(t): weakref.ref(t) for t in live_tensors()}

    def attribute(self, variant: str, before: dict[int, weakref.ref], harness: Iterable[object] = ()) -> None:
        """Make the tensors alive now that were not at `before` (Holdings.mark) `variant`'s, except those
        on the storages of `harness` (the harness's own: inputs, their pristine copy, the reference, dO)."""
        own = {p for dev in ("cpu", "cuda") for p in storages(harness, dev)}
        kept = self.kept.setdefault(variant, [])
        for t in live_tensors():
            r = before.get(id(t))
            if r is not None and r() is t:
                continue
            if not own or not (storages((t,), t.device.type).keys() & own):
                kept.append(weakref.ref(t))

    def held(self, variant: str, device: str, harness: Iterable[object] = ()) -> int:
        """Bytes on `device` of the distinct storages of `variant`'s tensors still alive, less the
        harness's."""
        kept = [r for r in self.kept.get(variant, ()) if r() is not None]
        self.kept[variant] = kept
        own = storages(harness, device)
        found = storages((r() for r in kept), device)
        return sum(b for ptr, b in found.items() if ptr not in own)


HOLDINGS = Holdings()  # this process's: the worker's probe and cells, or a test's measure_cell calls


def cuda_live_bytes(harness: Iterable[object] = ()) -> int:
    """torch.cuda.memory_allocated after a full collection, less the storages of `harness` and torch's own
    cuBLAS workspaces. torch allocates a workspace (32 MiB on Hopper) per cuBLAS handle and stream on the
    first matrix product of each thread, the backward's included, and keeps it: on an H200 every variant
    built on matmul was said to hold 32-96 MiB between calls (and naive's fp32 peak read 12% over its
    analytic size). They are freed before reading, as torch's own CUDA leak check does; the next product
    allocates them again, outside any peak (which is read on a call after the warm-up)."""
    import torch

    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    return int(torch.cuda.memory_allocated() - sum(storages(harness, "cuda").values()))
