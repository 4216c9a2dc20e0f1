"""The worker process: measures cells sent by the parent over a pipe, one at a time.

It imports torch once (after pinning its CPUs) and is reused while healthy; this module's top imports only
torch-free modules, since the parent imports it too (harness.isolation starts worker_main). Its stdout and
stderr go to the run's worker.log (variants that print cannot corrupt the protocol), faulthandler dumps a
traceback there on a fatal signal, it ignores Ctrl-C (the parent decides), and on Linux it dies with its
parent.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import traceback
from typing import Any

from .outcomes import exit_reason, is_poisoned_row
from .rows import base_row, finish


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): a killed parent must not leave a worker computing on."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
        except OSError:
            pass


def _redirect_output(log_path: str | None) -> None:
    if not log_path:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def free_memory(device: str) -> int:
    """Bytes this process could still allocate on `device`."""
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    import psutil  # pragma: no cover  (non-Linux)

    return int(psutil.virtual_memory().available)


def worker_main(conn, config: dict[str, Any]) -> None:
    """Serve requests until 'stop' or until the parent goes away."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _redirect_output(config.get("log_path"))
    faulthandler.enable(all_threads=True)
    print(f"attnbench worker {os.getpid()} starting", flush=True)
    if config.get("cpu_affinity"):
        # before torch is imported: its OpenMP pool sizes itself from the CPUs this process may use
        os.sched_setaffinity(0, config["cpu_affinity"])

    import torch

    from attnbench import variants

    from .calibrate import calibrate, speed_probe
    from .cell import InputCache, measure_cell
    from .failures import failure, is_poisoned
    from .fingerprint import collect, where_measured
    from .spec import CellSpec, Settings
    from .timing import freeze_imports

    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    for path in config.get("variant_files", []):
        variants.load_variant_file(path)
    frozen = freeze_imports()  # measure's collection before each cell then skips the imports' ~170k objects
    modules_frozen = len(sys.modules)
    cache = InputCache()
    where: dict[str, dict] = {}  # device -> where_measured(device), found once per worker
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    conn.send({"op": "ready", "pid": os.getpid(), "threads": torch.get_num_threads(), "cpu_affinity": cpus,
               "gc_frozen": frozen})  # fmt: skip
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        op = msg.get("op")
        try:
            if op == "stop":
                conn.send({"op": "stopped"})
                return
            if op == "cell":
                spec = CellSpec.from_dict(msg["cell"])
                print(f"cell {spec.cell_id}", flush=True)
                try:
                    speed = speed_probe(spec.device)  # the machine's speed just before this cell
                    row = measure_cell(spec, Settings(**msg["settings"]), cache)
                    row["speed_tflops"] = round(speed, 6)
                    if is_poisoned_row(row):  # where_measured would meet the same CUDA error: what is known
                        row.update(where.get(spec.device, {}))
                    else:
                        row.update(where.setdefault(spec.device, where_measured(spec.device)))
                except Exception as exc:  # a harness bug must still become this cell's row
                    traceback.print_exc()
                    if is_poisoned(exc):  # the harness's own CUDA call met a context the cell broke
                        row = finish(base_row(spec), *failure(exc, spec.device))
                    else:
                        row = finish(base_row(spec), "error", f"harness error: {type(exc).__name__}: {exc}")
                why = exit_reason(row)
                if why:
                    # a poisoned context (every later CUDA call would fail) or a failed graph capture (the
                    # allocator may be left mid-capture): send the row, say so, and exit; the parent's
                    # CellRunner starts a fresh worker for the next cell
                    print(f"attnbench worker {os.getpid()} exiting: {why}", flush=True)
                    conn.send({"op": "row", "row": row, "exiting": why})
                    return
                conn.send({"op": "row", "row": row})
                if len(sys.modules) != modules_frozen:
                    # the cell imported modules (torch.compile brings dynamo and inductor: ~290k objects):
                    # freeze them too, between cells, when only the worker's caches are alive beside them
                    freeze_imports()
                    modules_frozen = len(sys.modules)
            elif op == "calibrate":
                value = calibrate(msg["device"], msg["dtypes"], msg.get("budget_ms", 1000.0))
                conn.send({"op": "calibration", "value": value})
            elif op == "numerics":
                from .numerics import probe

                conn.send({"op": "numerics", "value": probe(msg["variants"], msg["devices"], msg["dtypes"])})
            elif op == "example_weights":
                from .numerics import example_weights

                conn.send({"op": "example_weights", "value": example_weights()})
            elif op == "where":
                found = where.setdefault(msg["device"], where_measured(msg["device"]))
                conn.send({"op": "where", "value": found})
            elif op == "fingerprint":
                conn.send({"op": "fingerprint", "value": collect()})
            elif op == "free_memory":
                conn.send({"op": "free_memory", "value": free_memory(msg["device"])})
            else:
                conn.send({"op": "error", "message": f"unknown op {op!r}"})
        except (BrokenPipeError, EOFError):
            return
