"""torch.profiler over a few calls of a cell: a Chrome trace and the operators by self time.

Runs in the profiled child (after py-spy is done with it), so torch is imported only where it is used.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILES = {"trace": "trace.json", "top_ops_csv": "top_ops.csv"}


def record(
    call: Callable[[], None], iters: int, device: str, out: Path, sync: Callable[[], None]
) -> dict[str, Any]:
    """`iters` calls under torch.profiler, each a span in the trace; writes FILES in `out` and returns
    the `torch_profiler` part of profile.json. `sync` waits for the device, so the last call is inside."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        t0 = time.perf_counter()
        for _ in range(iters):
            with record_function("attnbench.call"):  # one span per call in the trace
                call()
        sync()
        dt = time.perf_counter() - t0
    prof.export_chrome_trace(str(out / FILES["trace"]))
    rows = top_ops(prof, device)
    with open(out / FILES["top_ops_csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["name"])
        w.writeheader()
        w.writerows(rows)
    return {
        "iterations": iters,
        "seconds": round(dt, 3),
        "ms_per_call": round(1e3 * dt / iters, 3),  # with the profiler's own overhead
        "activities": [str(x).split(".")[-1] for x in activities],
        "operators": len(rows),
    }


def top_ops(prof, device: str) -> list[dict[str, Any]]:
    """torch.profiler's operators, biggest self time first (self CUDA time on cuda), times in ms."""
    cuda = device == "cuda"
    rows = []
    for e in prof.key_averages():
        row = {
            "name": e.key,
            "calls": int(e.count),
            "self_cpu_ms": e.self_cpu_time_total / 1e3,  # the profiler counts microseconds
            "total_cpu_ms": e.cpu_time_total / 1e3,
            "self_cpu_mem_bytes": int(e.self_cpu_memory_usage),
        }
        if cuda:
            row["self_cuda_ms"] = getattr(e, "self_device_time_total", 0) / 1e3
            row["total_cuda_ms"] = getattr(e, "device_time_total", 0) / 1e3
        rows.append(row)
    key = "self_cuda_ms" if cuda else "self_cpu_ms"
    total = sum(r[key] for r in rows) or 1.0
    for r in rows:
        r[key.replace("_ms", "_pct")] = 100.0 * r[key] / total
    return sorted(rows, key=lambda r: -r[key])
