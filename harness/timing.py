"""Timing: one timer per device behind one seam, an adaptive sampling loop, and immutable measurements.

CPU: time.perf_counter around each call (the work is synchronous).
CUDA: a pair of CUDA events around each call, no synchronisation between calls, the L2 cache flushed
between calls outside the timed window (as triton.testing.do_bench), one synchronisation at the end.
Tests inject a seeded fake timer.

Python's garbage collector is off while a cell is warmed up and sampled (as pyperf does): a collection
landing inside one call would add its pause to that sample only, a spread that belongs to the
interpreter, not to the attention function. Memory is still freed by reference counting; only cycles
wait until the loop ends. A measuring process freezes what its imports made (freeze_imports), so that
the collection before each loop scans only what came after: torch's import leaves ~170,000 objects and
torch.compile's ~290,000 more, 160-175 ms a collection on the 2-core reference VM, paid twice a cell (the
speed probe and the cell). The worker freezes again after a cell that imported modules.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from attnbench.results.formulas import NOISY_REL_IQR, quartiles, rel_iqr


class Timer(Protocol):
    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        """Call fn n times; return each call's duration in milliseconds."""
        ...


class CpuTimer:
    """perf_counter around each call."""

    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


class CudaTimer:
    """CUDA events around each call; L2 flushed between calls, outside the events."""

    def __init__(self, device=None, flush_l2: bool = True) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cuda") if device is None else torch.device(device)
        self.flush = None
        if flush_l2:
            l2 = getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0) or 64 << 20
            self.flush = torch.empty(
                2 * l2 // 4, dtype=torch.int32, device=self.device
            )  # 2x L2, evicts it all

    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            if self.flush is not None:
                self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


class FakeTimer:
    """Seeded synthetic durations (log-normal around `median_ms`), for testing the sampling logic."""

    def __init__(
        self, median_ms: float = 1.0, rel_sigma: float = 0.02, seed: int = 0, call: bool = False
    ) -> None:
        import random

        self.rng = random.Random(seed)
        self.median_ms = median_ms
        self.sigma = rel_sigma
        self.call = call
        self.calls = 0

    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        self.calls += n
        if self.call:
            for _ in range(n):
                fn()
        return [self.median_ms * math.exp(self.rng.gauss(0.0, self.sigma)) for _ in range(n)]


@dataclass(frozen=True)
class Measurement:
    """Raw per-call samples in ms; statistics are derived, never stored separately."""

    samples_ms: tuple[float, ...]
    warmup_calls: int = 0
    stop_reason: str = ""
    _quartiles: tuple[float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_quartiles", quartiles(self.samples_ms))

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    @property
    def median(self) -> float:
        return self._quartiles[1]

    @property
    def p25(self) -> float:
        return self._quartiles[0]

    @property
    def p75(self) -> float:
        return self._quartiles[2]

    @property
    def rel_iqr(self) -> float:
        return rel_iqr(*self._quartiles)

    @property
    def noisy(self) -> bool:
        return self.rel_iqr > NOISY_REL_IQR


@dataclass(frozen=True)
class Budget:
    """How long to sample: warm-up and measurement budgets in ms, adaptive stop on a stable IQR."""

    warmup_ms: float = 50.0
    budget_ms: float = 1000.0
    min_samples: int = 5
    max_samples: int = 500
    target_rel_iqr: float = 0.05
    min_ms: float = (
        100.0  # an early (stable) stop still needs this much sampled time: cheap calls get more samples
    )

    def __post_init__(self) -> None:
        if self.warmup_ms < 0 or self.budget_ms <= 0:
            raise ValueError(
                f"timing budgets must be positive, got warmup {self.warmup_ms}, budget {self.budget_ms}"
            )
        if not 1 <= self.min_samples <= self.max_samples:
            raise ValueError(
                f"need 1 <= min_samples ({self.min_samples}) <= max_samples ({self.max_samples})"
            )
        if self.min_samples < 5:
            raise ValueError(f"min_samples must be at least 5, got {self.min_samples}")


# Recorded in every run's meta.json: samples are taken with the cyclic garbage collector switched off.
GC_DISABLED = True


def freeze_imports() -> int:
    """Collect once, then move every object alive into the collector's permanent generation (gc.freeze), so
    that later collections, measure's included, scan only objects made after this call. For a measuring
    process, once, after its imports: what it freezes is module state that lives as long as the process
    anyway (a frozen object that became cyclic garbage would never be collected). Objects made later, a
    cell's tensors, closures and compiled artefacts among them, are collected as before. Returns how many
    objects are frozen (recorded in meta.json as gc_frozen_objects)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def measure(fn: Callable[[], object], timer: Timer, budget: Budget = Budget()) -> Measurement:
    """Warm up for budget.warmup_ms (at least one call), then sample until stable or out of budget.

    Stops once n >= min_samples, IQR/median <= target_rel_iqr and min_ms were sampled, or once the
    samples sum past budget_ms (never with fewer than min_samples), or at max_samples. Time is
    counted from the samples themselves, so a fake timer drives the loop deterministically. The
    garbage collector is disabled for the whole loop and put back as it was found, even on error.
    """
    was_enabled = gc.isenabled()
    if GC_DISABLED:
        gc.collect()  # start from a clean heap, so that nothing is left over for a collection to find
        gc.disable()
    try:
        return _sample(fn, timer, budget)
    finally:
        if was_enabled:
            gc.enable()


def _sample(fn: Callable[[], object], timer: Timer, budget: Budget) -> Measurement:
    warm = timer.time_calls(fn, 1)
    while sum(warm) < budget.warmup_ms and len(warm) < budget.max_samples:
        warm += timer.time_calls(fn, max(1, min(len(warm), 64)))
    estimate = max(sorted(warm)[len(warm) // 2], 1e-6)
    samples: list[float] = []
    reason = "max_samples"
    while len(samples) < budget.max_samples:
        need = budget.min_samples - len(samples)
        # batches of ~5% of the budget between stability checks, so slow cells check after every call
        batch = max(need, 1, min(int(0.05 * budget.budget_ms / estimate), 50))
        samples += timer.time_calls(fn, min(batch, budget.max_samples - len(samples)))
        if len(samples) < budget.min_samples:
            continue
        m = Measurement(tuple(samples))
        if m.rel_iqr <= budget.target_rel_iqr and sum(samples) >= min(budget.min_ms, budget.budget_ms):
            reason = "stable"
            break
        if sum(samples) >= budget.budget_ms:
            reason = "budget"
            break
    return Measurement(tuple(samples), warmup_calls=len(warm), stop_reason=reason)
