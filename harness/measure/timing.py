"""Timing: one timer per device behind one seam, an adaptive sampling loop, and immutable measurements.

CPU: time.perf_counter around each call (the work is synchronous).
CUDA, two modes (settings.timing; the row records which, and why: TimerChoice):
- events: a pair of CUDA events around each call, no synchronisation between calls, the L2 cache flushed
  between calls outside the timed window (as triton.testing.do_bench), one synchronisation at the end;
- graph: several calls captured into one CUDA graph, its replays timed with events (CudaGraphTimer), for
  launch-bound calls, whose events time the host's kernel launches more than the device's work.
auto picks one per cell (choose_timing, from launch_probe); a call that cannot be captured falls back to
events (graph_fallback). Tests inject a seeded fake timer (tests/fakes.py) through `injected`.

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
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from attnbench.harness.measure.outcomes import CAPTURE_FAILED
from attnbench.harness.sweep.settings import Budget
from attnbench.results.formulas import NOISY_REL_IQR, quartiles, rel_iqr


class Timer(Protocol):
    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        """Call fn n times; return each call's duration in milliseconds."""
        ...


class CpuTimer:
    """perf_counter around each call; fn.between(), where fn has one, before each, outside the window
    (harness.measure.varied: the inputs changed between calls)."""

    mode = "perf_counter"  # what a row's timing_mode says of a cell timed by this timer

    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        out = []
        between = getattr(fn, "between", None)
        for _ in range(n):
            if between is not None:
                between()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


# Set by a worker process (harness.workers.worker): called as each timing loop (measure) starts and ends, it
# sends the parent a mark and reads the timer's clock before it and after the parent's answer, so that the
# parent's own clock is bounded by them (harness.measure.outcomes.clock_readings). None elsewhere.
window_mark: Callable[[], None] | None = None


def timer_clock() -> float:
    """Seconds on the clock CpuTimer reads, looked up as it looks it up (this module's `time`, then its
    perf_counter): what a worker reports of each cell's request, for the parent to hold against its own
    clock (harness.measure.outcomes.clock_mismatch). A variant that slows that clock, or swaps this module's
    `time` for another, slows this reading with the samples."""
    return time.perf_counter()


# CUDA's event class and its record and elapsed_time methods as torch made them (pin_cuda_events)
_EVENTS: tuple[type, Callable[..., Any], Callable[..., Any]] | None = None


def pin_cuda_events() -> tuple[type, Callable[..., Any], Callable[..., Any]]:
    """(torch.cuda.Event, its record, its elapsed_time) as they are now, kept for every CUDA timer of this
    process. A worker pins them before it imports any plug-in, so that a plug-in that replaces the class or
    its methods (an elapsed_time that reports less, or more for a neighbour) changes no timing; the
    worker's torch-state snapshot names what it replaced (harness.workers.torch_state). Elsewhere they are
    pinned at the first CUDA timing."""
    global _EVENTS
    if _EVENTS is None:
        import torch

        event = torch.cuda.Event
        _EVENTS = (event, event.record, event.elapsed_time)
    return _EVENTS


def cuda_event():
    """A timing CUDA event of the pinned class (pin_cuda_events)."""
    return pin_cuda_events()[0](enable_timing=True)


def record(event) -> None:
    pin_cuda_events()[1](event)


def elapsed_ms(start, end) -> float:
    """Milliseconds between two recorded events, read by the pinned elapsed_time."""
    return pin_cuda_events()[2](start, end)


def l2_flush_buffer(device):
    """An int32 buffer of twice the device's L2 cache: zeroing it evicts everything L2 held."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    return torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)


class CudaTimer:
    """CUDA events around each call; L2 flushed between calls, outside the events."""

    mode = "events"

    def __init__(self, device=None, flush_l2: bool = True) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cuda") if device is None else torch.device(device)
        self.flush = l2_flush_buffer(self.device) if flush_l2 else None
        self.spans: list[tuple[float, float]] = []  # (events' span, host's wall) ms of each loop: event_cover

    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        starts = [cuda_event() for _ in range(n)]
        ends = [cuda_event() for _ in range(n)]
        between = getattr(fn, "between", None)  # as CpuTimer: before the start event
        t0, lead = open_loop(self)
        for i in range(n):
            if between is not None:
                between()
            if self.flush is not None:
                self.flush.zero_()
            record(starts[i])
            fn()
            record(ends[i])
        close_loop(self, t0, lead, ends[-1])
        return [elapsed_ms(s, e) for s, e in zip(starts, ends, strict=True)]


# Events on the timed stream checked against the host's clock. Each loop starts on an idle device (every
# stream synchronised) and ends by synchronising every stream again, so an honest loop's events span its
# host wall time, less the host's own latency (launching the first record, returning from the sync: under
# EVENT_SLACK_MS a loop). Work the timed stream does not wait for (launched on a side stream and joined by
# nothing) runs past the last event and holds up the sync: the events cover a part of the wall time only.
EVENT_SLACK_MS = 0.2


def open_loop(timer) -> tuple[float, Any]:
    """A timing loop's start: every stream of the device synchronised, the host's clock read, a lead event
    recorded (close_loop)."""
    timer.torch.cuda.synchronize(timer.device)
    t0 = timer_clock()
    lead = cuda_event()
    record(lead)
    return t0, lead


def close_loop(timer, t0: float, lead, last) -> None:
    """A timing loop's end: every stream synchronised (the device, not the timed stream alone), then the
    events' span from the lead to the loop's `last` event and the host's wall time appended to
    timer.spans."""
    timer.torch.cuda.synchronize(timer.device)
    wall_ms = (timer_clock() - t0) * 1e3
    timer.spans.append((elapsed_ms(lead, last), wall_ms))


def event_cover(timer) -> float | None:
    """The share of the host's wall time of a CUDA timer's loops that the events on its timed stream span,
    EVENT_SLACK_MS a loop allowed, at most 1: about 1 for an honest call (harness.measure.outcomes.
    events_mismatch); None for a timer without events."""
    spans = getattr(timer, "spans", None)
    if not spans:
        return None
    span, wall = sum(s for s, _ in spans), sum(w for _, w in spans)
    return round(min(1.0, (span + EVENT_SLACK_MS * len(spans)) / wall), 4) if wall > 0 else None


# ---- CUDA graphs: the timer, the auto rule, and the choice a row records ------------------------------

GIVEN = "given"  # timing_reason of a mode the settings named
# auto: graph when the host's enqueue time of a call is at least this fraction of its device time
LAUNCH_BOUND = 0.5
GRAPH_TARGET_MS = 1.0  # a replay holds calls enough for about this much of the call's device time ...
GRAPH_MAX_CALLS = 100  # ... but never more calls than this
GRAPH_WARMUP_CALLS = 3  # calls on a side stream before capture, as torch's CUDA-graph docs require


def choose_timing(
    requested: str, host_ms: float | None = None, device_ms: float | None = None, syncs: str | None = None
) -> tuple[str, str]:
    """(mode, reason) for a CUDA cell: the mode settings.timing names ("events", "graph": reason "given"),
    or for "auto" the rule, from host_sync's finding (`syncs`: what synchronised, or None) and launch_probe's
    host enqueue time and event time of one call.

    A call that synchronises with the host (.item(), .tolist(), a data-dependent shape) cannot be captured
    into a CUDA graph, and its host time includes its device time, so it would look launch-bound: auto
    times it with events and says why, rather than trying a capture that must fail (and cost the worker).

    The rule: graph when host_ms >= LAUNCH_BOUND x device_ms (launch-bound), else events. Events time a
    call from a mark before its first kernel to one after its last; when the host needs as long to enqueue
    the kernels as the device to run them, the device idles between launches and the events time the
    launches. A device-bound call keeps the launch queue ahead of the device (the timed loop never
    synchronises), and its events time the kernels alone. The factor 0.5 leaves a margin for the host's
    jitter: a call the host enqueues in half its device time is safely device-bound."""
    if requested in ("events", "graph"):
        return requested, GIVEN
    if requested != "auto":
        raise ValueError(f"timing must be one of auto, events, graph, got {requested!r}")
    if syncs:
        return "events", f"auto: the call synchronises with the host ({syncs}): no CUDA graph can hold it"
    if host_ms is None or device_ms is None:
        raise ValueError("timing auto needs the host and device ms of a call (launch_probe)")
    numbers = f"host {host_ms:.3f} ms {{}} {LAUNCH_BOUND:g}x device {device_ms:.3f} ms"
    if host_ms >= LAUNCH_BOUND * device_ms:
        return "graph", f"auto: launch-bound ({numbers.format('>=')})"
    return "events", f"auto: device-bound ({numbers.format('<')})"


def graph_fallback(reason: str, exc: BaseException) -> tuple[str, str]:
    """("events", reason) for a cell whose call could not be captured into a CUDA graph (it synchronises,
    calls .item(), copies from pageable host memory, ...): the first error of the chain (torch raises a
    second one when it ends the broken capture), after auto's reason when auto chose graph."""
    root, seen = exc, {id(exc)}
    while True:
        earlier = root.__cause__ or root.__context__
        if earlier is None or id(earlier) in seen:
            break
        root = earlier
        seen.add(id(root))
    text = " ".join(str(root).split())
    text = text[:300] + ("..." if len(text) > 300 else "")
    failed = f"{CAPTURE_FAILED}: {type(root).__name__}: {text}"  # the worker exits after it (exit_reason)
    return "events", failed if reason == GIVEN else f"{reason}; {failed}"


def calls_per_replay(
    device_ms: float, target_ms: float = GRAPH_TARGET_MS, most: int = GRAPH_MAX_CALLS
) -> int:
    """Calls captured into one graph: enough for target_ms of the call's device time (its event time, from
    launch_probe), at least 1, at most `most`; a replay that short would time the graph's own launch."""
    if not device_ms > 0:
        return most
    return max(1, min(most, math.ceil(target_ms / device_ms)))


def graph_samples(both_ms: list[float], flush_ms: list[float] | None, calls: int) -> list[float]:
    """Per-call ms of paired replays: (both - flush) / calls, where `both` replays calls x [flush, call] and
    `flush` calls x [flush] (None: L2 is not flushed, both replays the calls alone)."""
    if flush_ms is None:
        return [b / calls for b in both_ms]
    return [(b - f) / calls for b, f in zip(both_ms, flush_ms, strict=True)]


class CudaGraphTimer:
    """Replays of one CUDA graph of `calls` calls of fn, timed with CUDA events; a sample is a replay's time
    over `calls`: the device time of the calls with no launch overhead between them.

    Built on the cell's call (fn), captured once: GRAPH_WARMUP_CALLS calls on a side stream (torch's docs:
    lazy initialisation, workspace and autotuning happen outside the capture), a fwd+bwd call's gradients
    reset to None, then torch.cuda.graph. Whatever the capture raises propagates (cuda_timer falls back to
    events); the stream current before it is restored either way (torch leaves the capture stream current
    when ending a failed capture raises).

    L2 stays cold as the events mode keeps it: one graph holds `calls` x [flush.zero_(), fn()] and a second
    `calls` x [flush.zero_()], replayed in pairs, and a sample is (T_both - T_flush) / calls. Rotating
    inputs instead was rejected: the launch-bound cells this mode is for have inputs far smaller than L2
    (B=1, H=8, N=256, d=64 in bf16: 768 KiB of q, k, v against 50 MiB on an H100), so dozens of copies would
    be needed (and as many leaf sets and gradients for fwd+bwd), and rotation leaves the outputs, scratch and
    workspace a call reuses warm. The subtraction pairs each flush-only replay with the replay that follows
    it, so drift cancels; its noise is a few microseconds over `calls`. With flush_l2=False there is one
    graph of the calls alone, and a sample is its time over `calls`.
    """

    mode = "graph"

    def __init__(self, fn: Callable[[], object], calls: int, device=None, flush_l2: bool = True) -> None:
        import torch

        if calls < 1:
            raise ValueError(f"calls per replay must be at least 1, got {calls}")
        self.torch = torch
        self.device = torch.device("cuda") if device is None else torch.device(device)
        self.fn = fn
        self.calls = calls
        self.calls_per_sample = calls  # what measure's budgets count (replay_budget)
        self.flush = l2_flush_buffer(self.device) if flush_l2 else None
        self.spans: list[tuple[float, float]] = []  # as CudaTimer's: event_cover
        self.both, self.flush_only = self._capture()

    def _capture(self):
        torch = self.torch
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        try:
            side.wait_stream(current)  # the inputs were made on the current stream
            with torch.cuda.stream(side):
                for _ in range(GRAPH_WARMUP_CALLS):
                    self.fn()
            current.wait_stream(side)
            reset = getattr(self.fn, "reset_grads", None)
            if reset is not None:
                reset()  # the captured backward allocates its gradients in the graph's memory pool
            both = torch.cuda.CUDAGraph()
            with torch.cuda.graph(both, stream=side):
                for _ in range(self.calls):
                    if self.flush is not None:
                        self.flush.zero_()
                    self.fn()
            flush_only = None
            if self.flush is not None:
                flush_only = torch.cuda.CUDAGraph()
                with torch.cuda.graph(flush_only, stream=side):
                    for _ in range(self.calls):
                        self.flush.zero_()
        finally:
            torch.cuda.set_stream(current)
        return both, flush_only

    def time_calls(self, fn: Callable[[], object], n: int) -> list[float]:
        if fn is not self.fn:
            raise ValueError("a CudaGraphTimer times the call it captured, not another")
        marks = [[cuda_event() for _ in range(3)] for _ in range(n)]
        t0, lead = open_loop(self)
        if self.flush_only is not None:
            self.flush_only.replay()  # a lead: the first pair must not start on an idle device
        for start, mid, end in marks:
            record(start)
            if self.flush_only is not None:
                self.flush_only.replay()
            record(mid)
            self.both.replay()
            record(end)
        close_loop(self, t0, lead, marks[-1][2])
        both = [elapsed_ms(mid, end) for _, mid, end in marks]
        flush = None if self.flush_only is None else [elapsed_ms(s, m) for s, m, _ in marks]
        return graph_samples(both, flush, self.calls)

    def close(self) -> None:
        """Free the graphs (and their memory pool, which a fwd+bwd call's gradients point into)."""
        reset = getattr(self.fn, "reset_grads", None)
        if reset is not None:
            reset()
        self.both = self.flush_only = self.flush = None


SYNC_ERROR = "synchronizing CUDA operation"  # torch's words in sync debug mode "error"


def host_sync(fn: Callable[[], object]) -> str | None:
    """What made one call of fn synchronise the host with the device, or None: the call runs under torch's
    sync debug mode "error", which raises at a synchronising CUDA operation (a .item(), a .tolist(), a
    nonzero: torch.cuda.set_sync_debug_mode). Any other exception propagates; the mode is put back."""
    import torch

    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as exc:
        if SYNC_ERROR not in str(exc):
            raise
        text = " ".join(str(exc).split())
        return text[:200] + ("..." if len(text) > 200 else "")
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return None


def launch_probe(fn: Callable[[], object], events: CudaTimer, n: int = 3) -> tuple[float, float]:
    """(host ms, device ms) of fn, medians of n calls of a warm fn (cuda_timer called it first): the host's
    enqueue time
    (perf_counter around the call, without synchronising inside the window) and the call's event time, of
    the same calls. Each starts on an idle device with an empty launch queue and L2 flushed as `events`
    flushes it, so the host time is the enqueue alone and a launch-bound call's device idles between
    launches, as in the timed loop. A call that synchronises shows a host time as long as its device time."""
    torch = events.torch
    host, device = [], []
    for _ in range(n):
        if events.flush is not None:
            events.flush.zero_()
        torch.cuda.synchronize(events.device)
        start, end = cuda_event(), cuda_event()
        record(start)
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        record(end)
        torch.cuda.synchronize(events.device)
        host.append((t1 - t0) * 1e3)
        device.append(elapsed_ms(start, end))
    return statistics.median(host), statistics.median(device)


@dataclass
class TimerChoice:
    """The timer a cell is timed with, and what its row says of it (timing_mode, timing_reason,
    graph_calls_per_replay). close() frees what the timer holds (a CUDA graph) once the cell is timed."""

    timer: Timer
    mode: str  # "perf_counter", "events" or "graph" (an injected timer: its own `mode`)
    reason: str  # "cpu", "given", "auto: ...", "... graph capture failed: ..."
    calls_per_replay: int | None = None  # graph mode: calls captured in one replay

    def fields(self) -> dict[str, object]:
        return {
            "timing_mode": self.mode,
            "timing_reason": self.reason,
            "graph_calls_per_replay": self.calls_per_replay,
        }

    def close(self) -> None:
        close = getattr(self.timer, "close", None)
        if close is not None:
            close()


def injected(timer: Timer) -> TimerChoice:
    """A timer handed in by the caller (any Timer: a test's seeded fake, say): its own `mode`, if it says
    one."""
    return TimerChoice(timer, getattr(timer, "mode", "injected"), "injected timer")


def cuda_timer(
    fn: Callable[[], object], requested: str = "auto", flush_l2: bool = True, device=None
) -> TimerChoice:
    """The timer for a CUDA cell's call as settings.timing asks: events; or graph (given, or auto's choice by
    choose_timing from host_sync and launch_probe), captured with calls_per_replay calls, falling back to
    events with the reason when the capture raises. Runs fn a few times (the probes, the graph's warm-up)."""
    events = CudaTimer(device, flush_l2)
    if requested == "events":
        return TimerChoice(events, "events", GIVEN)
    # one call first, the probes' warm-up: what compiles lazily (flex's backward compiles at its first
    # forward+backward call, after the gate's forward) must not compile under the sync check, whose debug
    # mode would take the compiler's own syncs for the call's (and abort the compile, to be paid again)
    fn()
    syncs = host_sync(fn) if requested == "auto" else None  # "graph" given: tried, and the row says so
    if syncs:
        return TimerChoice(events, *choose_timing(requested, syncs=syncs))
    host_ms, device_ms = launch_probe(fn, events)
    mode, reason = choose_timing(requested, host_ms, device_ms)
    if mode == "events":
        return TimerChoice(events, mode, reason)
    del events  # its L2 flush buffer: the graph timer makes its own
    calls = calls_per_replay(device_ms)
    try:
        graph = CudaGraphTimer(fn, calls, device, flush_l2)
    except Exception as exc:  # any capture failure: recorded in the row, and the cell timed with events
        mode, reason = graph_fallback(reason, exc)
        return TimerChoice(CudaTimer(device, flush_l2), mode, reason)
    return TimerChoice(graph, "graph", reason, calls)


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


def replay_budget(budget: Budget, calls: int) -> Budget:
    """The budget for a timer each of whose samples is the mean of `calls` calls (a CUDA graph replay).
    Budgets count the calls sampled: each sample counts `calls` times, so the ms budgets and max_samples are
    divided by `calls` (never under min_samples), and a graph-timed cell samples as many calls, in about
    the wall time, as an events-timed one (not `calls` times more)."""
    if calls <= 1:
        return budget
    return replace(
        budget,
        warmup_ms=budget.warmup_ms / calls,
        budget_ms=budget.budget_ms / calls,
        min_ms=budget.min_ms / calls,
        max_samples=max(budget.min_samples, math.ceil(budget.max_samples / calls)),
    )


def timed_once(device: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """(fn's result, ms) of one call; on CUDA synchronised on both sides, so the device time is in it."""
    sync = None
    if device == "cuda":
        import torch

        sync = torch.cuda.synchronize
        sync()
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    if sync is not None:
        sync()
    return out, (time.perf_counter() - t0) * 1e3


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


def measure(
    fn: Callable[[], object], timer: Timer, budget: Budget | None = None, warmed_ms: float = 0.0
) -> Measurement:
    """Warm up for budget.warmup_ms (at least one call), then sample until stable or out of budget.

    warmed_ms: how long the same call already ran just before, outside this loop (a forward cell's gated
    first call, harness.measure.cell.prepare); it counts toward the warm-up, so that a call at least warmup_ms
    long is not run once more untimed only to warm what its first call warmed already (issue 25: that
    extra call was a tenth of a slow cell's wall time). Without it, at least one warm-up call is made.

    Stops once n >= min_samples, IQR/median <= target_rel_iqr and min_ms were sampled, or once the
    samples sum past budget_ms (never with fewer than min_samples), or at max_samples. Time is
    counted from the samples themselves, so a fake timer drives the loop deterministically. The
    garbage collector is disabled for the whole loop and put back as it was found, even on error.
    """
    budget = budget if budget is not None else Budget()
    was_enabled = gc.isenabled()
    if GC_DISABLED:
        gc.collect()  # start from a clean heap, so that nothing is left over for a collection to find
        gc.disable()
    mark = window_mark
    try:
        if mark is not None:
            mark()
        return _sample(fn, timer, budget, warmed_ms)
    finally:
        if mark is not None:
            mark()
        if was_enabled:
            gc.enable()


def _sample(fn: Callable[[], object], timer: Timer, budget: Budget, warmed_ms: float = 0.0) -> Measurement:
    warm: list[float] = [] if warmed_ms > 0 and warmed_ms >= budget.warmup_ms else timer.time_calls(fn, 1)
    while warm and warmed_ms + sum(warm) < budget.warmup_ms and len(warm) < budget.max_samples:
        warm += timer.time_calls(fn, max(1, min(len(warm), 64)))
    samples: list[float] = []
    reason = "max_samples"
    while len(samples) < budget.max_samples:
        # a call's time from the warm-up, else from the samples so far (the first call, which may have
        # compiled, says nothing of it): until there are any, min_samples calls are the first batch
        seen = warm or samples
        estimate = max(sorted(seen)[len(seen) // 2], 1e-6) if seen else math.inf
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
