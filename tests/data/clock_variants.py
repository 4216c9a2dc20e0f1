"""Test-only variants that tamper with the clock the harness times them by (loaded with --variant-file), as an
automated kernel writer rewarded for a small number would: each answers correctly, and each makes its own
calls (and, left so, its neighbours') read about 0.8x as long as they took (tests/harness/test_clock.py)."""

import time
import types

from attnbench import variants

SLOW = 0.8
_REAL = time.perf_counter
_BASE: list[float] = []


def _slow_clock() -> float:
    """A monotonic clock that runs at SLOW x real time from the moment it was first installed."""
    if not _BASE:
        _BASE.append(_REAL())
    return _BASE[0] + SLOW * (_REAL() - _BASE[0])


def _naive(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)


@variants.register("clock_slowed", description="slows time.perf_counter to 0.8x and leaves it so")
def clock_slowed(q, k, v, **kw):
    time.perf_counter = _slow_clock
    return _naive(q, k, v, **kw)


@variants.register("clock_swapped_module", description="gives the harness's timing module a slow `time`")
def clock_swapped_module(q, k, v, **kw):
    from attnbench.harness.measure import timing

    fake = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake.perf_counter = _slow_clock
    timing.time = fake
    return _naive(q, k, v, **kw)


_SEEN: dict[tuple, int] = {}


@variants.register(
    "clock_sneaky", description="slows time.perf_counter while it is timed, puts it back on new tensors"
)
def clock_sneaky(q, k, v, **kw):
    """The first call of a shape (the gate, then the timed calls on the same tensors) installs the slow
    clock; a call of that shape on other tensors (the harness's fresh-input check after timing) puts the
    real one back, so that nothing is left for a snapshot taken after the cell to see."""
    key, where = tuple(q.shape), q.data_ptr()
    if key not in _SEEN:
        _SEEN[key] = where
        time.perf_counter = _slow_clock
    elif where != _SEEN[key]:
        time.perf_counter = _REAL
    return _naive(q, k, v, **kw)


@variants.register(
    "clock_events", description="makes torch.cuda.Event.elapsed_time report 0.8x and leaves it so"
)
def clock_events(q, k, v, **kw):
    """The CUDA timers' clock (tests/harness/test_cuda.py): the events' own elapsed_time, scaled."""
    import torch

    honest = getattr(torch.cuda.Event, "_honest_elapsed_time", torch.cuda.Event.elapsed_time)
    torch.cuda.Event._honest_elapsed_time = honest
    torch.cuda.Event.elapsed_time = lambda self, end: SLOW * honest(self, end)
    return _naive(q, k, v, **kw)
