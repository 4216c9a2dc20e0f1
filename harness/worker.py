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
import importlib
import os
import signal
import sys
import traceback
from typing import Any

from .outcomes import exit_reason, is_poisoned_row
from .rows import base_row, finish
from .settings import Settings

# what the requests use beside harness.cell, imported with torch before freeze_imports so that the
from .spec import CellSpec

# collector never scans it again (the methods below import from these modules, found in sys.modules)
MEASURING = ("calibrate", "fingerprint")


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
    _start(config)
    server = _Server(config)  # imports torch
    conn.send(server.hello())
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if msg.get("op") == "stop":
                conn.send({"op": "stopped"})
                return
            if msg.get("op") != "cell":
                conn.send(server.answer(msg))
                continue
            row = server.cell(CellSpec.from_dict(msg["cell"]), msg["settings"])
            why = exit_reason(row)
            if why:
                # a poisoned context (every later CUDA call would fail) or a failed graph capture (the
                # allocator may be left mid-capture): send the row, say so, and exit; the parent's
                # CellRunner starts a fresh worker for the next cell
                print(f"attnbench worker {os.getpid()} exiting: {why}", flush=True)
                conn.send({"op": "row", "row": row, "exiting": why})
                return
            conn.send({"op": "row", "row": row})
            server.refreeze()
        except (BrokenPipeError, EOFError):
            return


def _start(config: dict[str, Any]) -> None:
    """The process's own set-up, before torch is imported: tied to its parent, deaf to Ctrl-C, output to
    the log, tracebacks on fatal signals, pinned to its CPUs."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _redirect_output(config.get("log_path"))
    faulthandler.enable(all_threads=True)
    print(f"attnbench worker {os.getpid()} starting", flush=True)
    if config.get("cpu_affinity"):
        # before torch is imported: its OpenMP pool sizes itself from the CPUs this process may use
        os.sched_setaffinity(0, config["cpu_affinity"])


class _Server:
    """What the worker keeps between requests: torch set up, the variant files loaded, the last shape's
    inputs (cell.InputCache), where each device is (found once), and how many modules are frozen."""

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        from attnbench import variants

        from .cell import InputCache
        from .timing import freeze_imports

        for name in MEASURING:
            importlib.import_module(f"{__package__}.{name}")
        if config.get("threads"):
            torch.set_num_threads(int(config["threads"]))
        for path in config.get("variant_files", []):
            variants.load_variant_file(path)
        # measure's collection before each cell then skips the imports' ~170k objects
        self.frozen = freeze_imports()
        self.modules_frozen = len(sys.modules)
        self.threads = torch.get_num_threads()
        self.cache = InputCache()
        self.where: dict[str, dict] = {}  # device -> where_measured(device), found once per worker

    def hello(self) -> dict[str, Any]:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return {"op": "ready", "pid": os.getpid(), "threads": self.threads, "cpu_affinity": cpus,
                "gc_frozen": self.frozen}  # fmt: skip

    def where_measured(self, device: str) -> dict[str, Any]:
        from .fingerprint import where_measured

        return self.where.setdefault(device, where_measured(device))

    def cell(self, spec: CellSpec, settings: dict[str, Any]) -> dict[str, Any]:
        """The cell's row, whatever happens: measured, or a harness error as the row's status."""
        from .calibrate import speed_probe
        from .cell import measure_cell
        from .failures import failure, is_poisoned

        print(f"cell {spec.cell_id}", flush=True)
        try:
            speed = speed_probe(spec.device)  # the machine's speed just before this cell
            row = measure_cell(spec, Settings(**settings), self.cache)
            row["speed_tflops"] = round(speed, 6)
            if is_poisoned_row(row):  # where_measured would meet the same CUDA error: what is known
                row.update(self.where.get(spec.device, {}))
            else:
                row.update(self.where_measured(spec.device))
            return row
        except Exception as exc:  # a harness bug must still become this cell's row
            traceback.print_exc()
            if is_poisoned(exc):  # the harness's own CUDA call met a context the cell broke
                return finish(base_row(spec), *failure(exc, spec.device))
            return finish(base_row(spec), "error", f"harness error: {type(exc).__name__}: {exc}")

    def refreeze(self) -> None:
        """After a cell that imported modules (torch.compile brings dynamo and inductor: ~290k objects):
        freeze them too, between cells, when only the worker's caches are alive beside them."""
        from .timing import freeze_imports

        if len(sys.modules) != self.modules_frozen:
            freeze_imports()
            self.modules_frozen = len(sys.modules)

    def answer(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The reply to a request that is not a cell (nor stop)."""
        op = msg.get("op")
        if op == "calibrate":
            from .calibrate import calibrate

            return {
                "op": "calibration",
                "value": calibrate(msg["device"], msg["dtypes"], msg.get("budget_ms", 1000.0)),
            }
        if op == "numerics":
            from .numerics import probe

            return {"op": "numerics", "value": probe(msg["variants"], msg["devices"], msg["dtypes"])}
        if op == "example_weights":
            from .numerics import example_weights

            return {"op": "example_weights", "value": example_weights()}
        if op == "where":
            return {"op": "where", "value": self.where_measured(msg["device"])}
        if op == "fingerprint":
            from .fingerprint import collect

            return {"op": "fingerprint", "value": collect()}
        if op == "free_memory":
            return {"op": "free_memory", "value": free_memory(msg["device"])}
        return {"op": "error", "message": f"unknown op {op!r}"}
