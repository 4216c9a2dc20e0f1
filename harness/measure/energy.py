"""Energy per call on CUDA: NVML's total energy counter read over a window of repeated calls, idle subtracted.

NVML keeps a counter of the board's energy in millijoules since the driver loaded
(nvmlDeviceGetTotalEnergyConsumption, Volta and later). The driver updates it every 20-100 ms, so a reading
says what the board used up to its last update, not up to the moment it is read. A window therefore starts
and ends on the counter's update edges: the counter is polled every POLL_S until it changes, and that
reading and its time bound the window. Between the edges the cell's timed callable is called again and again
for at least WINDOW_S (one update period is then at most a tenth of the window), and the device is
synchronised before the closing edge so that every call's work lies inside it.

The board draws power with no work too. The same edge-to-edge reading over WINDOW_S with no work gives the
idle draw, measured once per worker process and GPU (IDLE, keyed by the GPU's UUID) and subtracted:

    J per call above idle = ((E1 - E0) / 1000 - P_idle * (t1 - t0)) / calls
    TFLOP/s per W = FLOPs per call / J per call / 1e12   (TFLOP per joule)

Every NVML read goes through one source, a callable that returns the counter in mJ (NvmlCounter is the real
one; tests pass a fake), so that the edge alignment and the arithmetic are tested without a GPU. Where the
counter cannot be read (no nvidia-ml-py, no NVML, a GPU without the counter, a CPU cell) the columns stay
None and `energy_note` says why: energy is never a reason for a cell to fail.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnbench.harness.measure import telemetry

WINDOW_S = 1.0  # the least time a window holds (work, or idle); tests make it shorter
EDGE_WAIT_S = 0.25  # the longest wait for the counter to change (it updates every 20-100 ms)
POLL_S = 0.001  # how often the counter is read while waiting for it to change
# calls are enqueued in batches of about this much device time, each synchronised before the next: CUDA
# calls return before their work ends, and a loop that only watched the host's clock would queue work for
# many windows' worth (an H200 ran a 1 s window of 12.5 ms calls for 13.8 s before this)
BATCH_MS = 50.0

# the row columns this module fills (results.schema lists them)
COLUMNS = (
    "energy_j_per_call",
    "energy_power_w",
    "idle_power_w",
    "energy_calls",
    "energy_window_s",
    "tflops_per_w",
    "energy_ms",
    "energy_note",
)

IDLE: dict[str, float] = {}  # this process's idle draw (W) per GPU UUID, measured once per worker


class Unavailable(Exception):
    """The energy counter cannot be read; the message is the row's energy_note."""


@dataclass(frozen=True)
class Edge:
    """One update of the counter: its value (mJ) and when it was first seen (perf_counter, s)."""

    mj: int
    t_s: float


class NvmlCounter:
    """The total energy counter of one GPU through NVML, in mJ; Unavailable where NVML refuses it."""

    def __init__(self, pynvml, handle) -> None:
        self.nvml = pynvml
        self.handle = handle
        try:
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            self.key = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        except pynvml.NVMLError:
            self.key = f"handle-{id(handle)}"  # the handle lives as long as the process (telemetry._opened)

    def __call__(self) -> int:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except self.nvml.NVMLError as exc:  # NotSupported before Volta, NoPermission in some containers
            raise Unavailable(f"NVML energy counter not readable: {exc}") from None
        except AttributeError:  # an nvidia-ml-py older than the counter
            raise Unavailable("this nvidia-ml-py has no energy counter") from None


def next_edge(
    source: Callable[[], int],
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> Edge:
    """The counter's next update: read it, then poll every POLL_S until it changes (at most EDGE_WAIT_S)."""
    first = source()
    t_start = clock()
    while True:
        sleep(POLL_S)
        value, now = source(), clock()
        if value != first:
            return Edge(value, now)
        if now - t_start > EDGE_WAIT_S:
            raise Unavailable(f"the energy counter did not change within {EDGE_WAIT_S:g} s")


@dataclass(frozen=True)
class Window:
    """Two edges of the counter and the calls made between them."""

    start: Edge
    end: Edge
    calls: int

    @property
    def seconds(self) -> float:
        return self.end.t_s - self.start.t_s

    @property
    def joules(self) -> float:
        return (self.end.mj - self.start.mj) / 1000

    @property
    def watts(self) -> float:
        return self.joules / self.seconds


def window(
    source: Callable[[], int],
    call: Callable[[], object] | None,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    batch: int = 1,
) -> Window:
    """Edge to edge over at least WINDOW_S: `call` repeated in batches of `batch` calls, each batch
    synchronised (`sync`) before the clock is read, so that the window's length is the work's and not the
    host's enqueueing; or nothing (call None: idle)."""
    start = next_edge(source, clock, sleep)
    calls = 0
    if call is None:
        sleep(max(0.0, WINDOW_S - (clock() - start.t_s)))
    else:
        while clock() - start.t_s < WINDOW_S:
            for _ in range(batch):
                call()
            calls += batch
            sync()  # the batch's CUDA work ends before the clock is read, and before the closing edge
    return Window(start, next_edge(source, clock, sleep), calls)


def batch_of(per_call_ms: float | None) -> int:
    """Calls per synchronised batch: about BATCH_MS of device time at the cell's median, at least one."""
    if not per_call_ms or per_call_ms <= 0:
        return 1
    return max(1, math.ceil(BATCH_MS / per_call_ms))


def idle_power(
    source: Callable[[], int],
    key: str,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """The board's draw with no work (W), measured once per process and GPU `key`."""
    if key not in IDLE:
        IDLE[key] = window(source, None, clock=clock, sleep=sleep).watts
    return IDLE[key]


def measure(
    source: Callable[[], int],
    key: str,
    call: Callable[[], object],
    flops: int | None,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    per_call_ms: float | None = None,
) -> dict[str, Any]:
    """The energy columns of `call` (see COLUMNS) read through `source` for the GPU `key`; with the columns
    None and a note where the counter cannot be read. `clock` and `sleep` are time's, or a test's."""
    t0 = clock()
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    try:
        idle_w = idle_power(source, key, clock, sleep)
        w = window(source, call, sync, clock, sleep, batch_of(per_call_ms))
    except Unavailable as exc:
        out["energy_note"] = str(exc)
    else:
        j_per_call = (w.joules - idle_w * w.seconds) / w.calls
        out.update(
            energy_j_per_call=j_per_call,
            energy_power_w=round(w.watts, 2),
            idle_power_w=round(idle_w, 2),
            energy_calls=w.calls,
            energy_window_s=round(w.seconds, 4),
        )
        if j_per_call > 0 and flops:
            out["tflops_per_w"] = flops / j_per_call / 1e12
        elif j_per_call <= 0:  # a call too small to tell from the idle draw in one window
            out["energy_note"] = "no energy above the idle draw"
    out["energy_ms"] = round((clock() - t0) * 1e3, 3)
    return out


def fields(
    call: Callable[[], object], spec, flops: int | None, per_call_ms: float | None = None
) -> dict[str, Any]:
    """The energy columns of a cell's timed callable: a CUDA cell's window read through the NVML handle the
    telemetry sampler opened (telemetry.opened); None with a note on a CPU cell or without the counter."""
    if spec.device != "cuda":
        return {**dict.fromkeys(COLUMNS), "energy_note": "energy is read on CUDA cells only"}
    nvml = telemetry.opened(spec.device)
    if nvml is None:
        return {**dict.fromkeys(COLUMNS), "energy_note": "NVML is not available (nvidia-ml-py, driver)"}
    import torch

    source = NvmlCounter(*nvml)
    return measure(source, source.key, call, flops, sync=torch.cuda.synchronize, per_call_ms=per_call_ms)
