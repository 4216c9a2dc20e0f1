"""Test doubles of the harness's seams: a seeded fake timer (harness.measure.timing's Timer protocol), and an
optional package made absent or replaced by a stand-in whatever this machine has installed.

Import as `from fakes import FakeTimer` (tests/ is on sys.path, as for conftest and synthetic). The harness
takes it like any timer: `measure(fn, FakeTimer())`, `measure_cell(..., timer=FakeTimer())` (through
timing.injected, which records its `mode`, "fake", as the row's timing_mode).
"""

from __future__ import annotations

import importlib
import math
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class FakeTimer:
    """Seeded synthetic durations (log-normal around `median_ms`), for testing the sampling logic; with
    `call`, fn is called too, so that what the timed call does is checked."""

    mode = "fake"

    def __init__(
        self, median_ms: float = 1.0, rel_sigma: float = 0.02, seed: int = 0, call: bool = False
    ) -> None:
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


def tiny_cell(variant: str, *, n: int = 128, pass_: str = "fwd", causal: bool = False):
    """A small float32 CPU cell (B=1, H=2, d=16) of `variant`: what the plug-in tests measure."""
    from attnbench.harness.sweep.spec import CellSpec

    return CellSpec(variant, "cpu", "float32", 1, 2, n, 16, 16, causal, 0.0, pass_)


def calling_timer() -> FakeTimer:
    """A seeded fake timer that calls the cell: what the cell does is checked, its time is not."""
    return FakeTimer(median_ms=1.0, seed=7, call=True)


def _modules_of(name: str) -> list[str]:
    return [m for m in sys.modules if m == name or m.startswith(f"{name}.")]


@contextmanager
def stand_in_package(monkeypatch, root: Path, name: str) -> Iterator[None]:
    """`import NAME` finds the stand-in package under `root`, whatever is installed (PYTHONPATH included) or
    already imported by an earlier test in this process: NAME's modules leave sys.modules and `root` goes
    first on sys.path; on leaving, the stand-in's modules are dropped and monkeypatch puts the real ones
    back. Put back, never imported twice: the real xformers 0.0.35 refuses to register its torch operators a
    second time in a process ('Tried to register an operator ... multiple times')."""
    for module in _modules_of(name):
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.syspath_prepend(str(root))
    try:
        yield
    finally:
        for module in _modules_of(name):
            del sys.modules[module]
        importlib.invalidate_caches()


def without_package(monkeypatch, name: str) -> None:
    """NAME cannot be imported in this process for the rest of the test, installed or not: importlib's
    find_spec says None and `import NAME` raises ModuleNotFoundError (sys.modules[NAME] = None)."""
    monkeypatch.setitem(sys.modules, name, None)
