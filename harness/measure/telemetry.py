"""GPU telemetry during a cell's timed calls: SM clock, power and temperature sampled through NVML.

A GPU that heats up, hits its power limit or is capped by another tenant lowers its SM clock, and every
time taken then says as much about the clock as about the kernel. While a CUDA cell is timed, a thread in
the worker reads NVML (nvidia-ml-py; never nvidia-smi subprocesses) every INTERVAL_S: the SM clock, the
board's power draw, the temperature and the clock-event reasons (power cap, thermal, ...). The row keeps
the clock's min and max, the power readings' mean and max (`timed_power_w_mean`, `timed_power_w_max`: the
timed calls' window, not --energy's window after it, whose mean is `energy_power_w`), the hottest reading,
the reasons seen, and `throttled`:
the SM clock fell more than THROTTLE_DROP below the highest clock read before it (a rise, the clock
ramping up from idle, is not a drop). Reports list throttled cells and ring them on the plots.

The GPU is found by the UUID torch gives the device it uses, so that the readings are those of that GPU
whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say (NVML numbers GPUs by PCI bus, CUDA by speed, and
neither knows about the other's renumbering).

A power reading is nvmlDeviceGetPowerUsage's: on Ampere (but GA100) and later GPUs NVML gives the board's
power averaged over the second before the reading, so a timing loop shorter than a second reads partly the
draw before it (the gate, the warm-up), and its max can sit below the mean of --energy's window of >= 1 s
of calls back to back (trial U: sdpa_cudnn at N = 16384 on an H200, 583 W over 10 readings, 686 W).

The sampling thread holds the GIL only between NVML calls (ctypes releases it inside them): at INTERVAL_S =
20 ms that is about 50 short wake-ups a second beside the timed loop. Without NVML (no driver, not an
NVIDIA GPU, nvidia-ml-py missing) the columns stay empty and nothing is flagged.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

INTERVAL_S = 0.02
THROTTLE_DROP = 0.10  # a cell whose SM clock fell more than this below its earlier high is `throttled`

# the row columns this module fills (results.schema lists them); None where nothing was read
COLUMNS = (
    "sm_clock_min_mhz",
    "sm_clock_max_mhz",
    "sm_clock_drop",
    "timed_power_w_mean",
    "timed_power_w_max",
    "temp_c_max",
    "clock_event_reasons",
    "telemetry_samples",
    "throttled",
)


@dataclass(frozen=True)
class Sample:
    t_s: float  # perf_counter
    sm_mhz: int | None
    power_w: float | None
    temp_c: int | None
    reasons: int | None  # NVML clock-event reasons bitmask (nvmlClocksEventReason*)


def nvml_uuid(torch_uuid: str) -> str:
    """NVML's spelling of a GPU UUID from torch's (get_device_properties().uuid: no 'GPU-' prefix)."""
    text = str(torch_uuid).strip()
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def largest_drop(clocks: list[int]) -> float:
    """The largest fall of the clock below the highest value read before it, as a fraction of that high
    (0.0 for a steady or rising clock, or fewer than two readings)."""
    high, drop = 0, 0.0
    for c in clocks:
        if high > 0:
            drop = max(drop, (high - c) / high)
        high = max(high, c)
    return drop


def summarise(samples: list[Sample]) -> dict[str, Any]:
    """The row's telemetry columns from a cell's samples (see COLUMNS); all None without samples."""
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    out["telemetry_samples"] = len(samples)
    if not samples:
        out["telemetry_samples"] = None
        return out
    clocks = [s.sm_mhz for s in samples if s.sm_mhz is not None]
    power = [s.power_w for s in samples if s.power_w is not None]
    temps = [s.temp_c for s in samples if s.temp_c is not None]
    reasons = [s.reasons for s in samples if s.reasons is not None]
    if clocks:
        drop = largest_drop(clocks)
        out.update(
            sm_clock_min_mhz=min(clocks),
            sm_clock_max_mhz=max(clocks),
            sm_clock_drop=round(drop, 4),
            throttled=drop > THROTTLE_DROP,
        )
    if power:
        out.update(
            timed_power_w_mean=round(sum(power) / len(power), 2), timed_power_w_max=round(max(power), 2)
        )
    if temps:
        out["temp_c_max"] = max(temps)
    if reasons:
        mask = 0
        for r in reasons:
            mask |= r
        out["clock_event_reasons"] = f"0x{mask:x}"
    return out


class Sampler:
    """Reads one GPU's telemetry every `interval_s` on a thread, between start() and stop() (or as a
    context manager). `source` is a callable returning one Sample; NvmlSource is the real one."""

    def __init__(self, source, interval_s: float = INTERVAL_S) -> None:
        self.source = source
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self.samples.append(self.source())  # one reading at the start, however short the cell
        self._thread = threading.Thread(target=self._run, name="attnbench-telemetry", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(self.source())

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(self.source())  # and one at the end
        return self.samples

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NvmlSource:
    """One NVML reading of the GPU with this UUID. Fields a GPU or driver does not report stay None."""

    def __init__(self, pynvml, handle) -> None:
        self.nvml = pynvml
        self.handle = handle

    def _read(self, fn, *args):
        try:
            return fn(self.handle, *args)
        except self.nvml.NVMLError:
            return None

    def __call__(self) -> Sample:
        n = self.nvml
        power_mw = self._read(n.nvmlDeviceGetPowerUsage)
        return Sample(
            t_s=time.perf_counter(),
            sm_mhz=self._read(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
            power_w=None if power_mw is None else power_mw / 1000,
            temp_c=self._read(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
            reasons=self._read(n.nvmlDeviceGetCurrentClocksEventReasons),
        )


class _NoSampler:
    samples: list[Sample] = []

    def __enter__(self) -> _NoSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def open_nvml(uuid: str):
    """(pynvml, handle) of the GPU with torch's `uuid`, NVML initialised; None where NVML cannot be used.
    The caller shuts NVML down (pynvml.nvmlShutdown) when done."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid))
    except pynvml.NVMLError:
        pynvml.nvmlShutdown()
        return None


def torch_gpu_uuid() -> str | None:
    """The UUID of the CUDA device torch uses in this process (initialises CUDA)."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    return None if uuid is None else str(uuid)


_opened: dict[str, tuple | None] = {}  # this process's NVML handle per device, opened on first use


def opened(device: str) -> tuple | None:
    """(pynvml, handle) of the GPU torch uses for a CUDA cell, opened on first use; None for a CPU cell or
    where NVML cannot be used. NVML stays initialised for the process's life once a CUDA cell asked for it
    (a worker measures many cells on one GPU); the SM clock sampler and harness.measure.energy share it."""
    if device != "cuda":
        return None
    if device not in _opened:
        uuid = torch_gpu_uuid()
        _opened[device] = None if uuid is None else open_nvml(uuid)
    return _opened[device]


def sampling(device: str):
    """A Sampler to wrap a cell's timed calls in: NVML readings of the GPU torch uses for a CUDA cell,
    nothing for a CPU cell or where NVML cannot be used (`opened`)."""
    nvml = opened(device)
    return _NoSampler() if nvml is None else Sampler(NvmlSource(*nvml))
