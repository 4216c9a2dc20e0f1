"""The profiled child of `attnbench profile`, both ends: the process that loops one cell and then runs
torch.profiler on it, and the parent's handle that starts it and reads what it says.

It is a separate process so that py-spy samples only the cell, and so that the `USDT: ...
profiler_start/stop` lines torch.profiler prints on stderr can be filtered out of the user's terminal.
Messages to the parent are stdout lines starting with PROTOCOL; anything else a variant prints is passed
through. The child imports torch; the parent never does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.tools.profile_plan import Plan

MODULE = "attnbench.harness.tools.profiled_child"  # what the parent runs with `python -m`
PROTOCOL = "attnbench-profile:"  # prefix of the child's stdout lines meant for the parent
USDT = re.compile(r"^USDT:")  # torch.profiler's start/stop chatter on stderr
WARMUP_S = 0.3  # warm-up before sampling: first calls pay one-time costs (allocator, kernels, caches)


# ---- the parent's end -----------------------------------------------------------------------------------


class Child:
    """The profiled process: protocol lines on stdout, stderr forwarded without torch's USDT lines."""

    def __init__(self, plan: Plan, out: Path, loop: bool) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", MODULE, "--cell", json.dumps(plan.cell.to_dict())]
        cmd += ["--out", str(out), "--iters", str(plan.iters), "--threads", str(plan.threads)]
        cmd += ["--seed", str(plan.seed)] + (["--loop", str(plan.seconds + 120)] if loop else [])
        for path in plan.variant_files:
            cmd += ["--variant-file", path]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.out = out
        self.tail: list[str] = []
        self._err = threading.Thread(target=self._forward_stderr, daemon=True)
        self._err.start()

    def _forward_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if USDT.match(line):
                continue
            self.tail = (self.tail + [line.rstrip()])[-20:]
            sys.stderr.write(line)

    def read(self) -> tuple[str, Any]:
        """The next protocol message (name, data); ("exit", code) when the child is gone."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                name, _, data = line[len(PROTOCOL) :].strip().partition(" ")
                return name, json.loads(data) if data else None
            sys.stderr.write(line)  # a variant that prints
        code = self.proc.wait()
        self._err.join(timeout=5)
        return "exit", code

    def failure(self, code: int) -> str:
        last = next((line for line in reversed(self.tail) if line.strip()), "")
        return f"the profiled cell failed (exit status {code}): {last}".rstrip(": ")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# ---- the child: one cell, looped, then torch.profiler ----------------------------------------------------


def make_call(cell: CellSpec, seed: int) -> tuple[Callable[[], None], str]:
    """The cell's call as harness.measure.cell builds it, and "" or why its answer is wrong: the cell is
    prepared exactly as `attnbench run` prepares it (harness.measure.cell.prepare: inputs in the variant's
    layout, its setup hook, one call whose answer must keep the output contract and is gated against
    float64, the gradient and dropout checks), then the call is built on those inputs without the varied
    query (the profile loops the kernel, not the harness's check of it). What the variant raises, an output
    contract broken among it, propagates."""
    from attnbench.harness.measure.cell import prepare
    from attnbench.harness.measure.inputs import timed_call
    from attnbench.harness.sweep.settings import Settings

    ready = prepare(cell, Settings(seed=seed))
    status, message = ready.verdict()
    q, k, v, _ = ready.call.inputs  # (B, H, N_q, d_k), (B, H_kv, N_k, d_k), (B, H_kv, N_k, d_v)
    opts = dict(ready.call.kwargs)
    call = timed_call(ready.fn, q.detach(), k.detach(), v.detach(), backward=cell.pass_ == "fwdbwd", **opts)
    return call, (message if status == "wrong" else "")


def _send(name: str, data: Any = None) -> None:
    print(f"{PROTOCOL} {name} {json.dumps(data) if data is not None else ''}".rstrip(), flush=True)


def _allow_any_tracer() -> None:
    """prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): under Yama ptrace_scope=1 a non-root py-spy may then
    attach to this process although it is not its parent. A no-op where Yama is absent."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(
                0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF), 0, 0, 0
            )
        except (OSError, AttributeError):
            pass


# the phases of the child, as its failure names them
WARMUP, LOOP, PROFILER = "warm-up call", "loop under py-spy", "torch.profiler part"
LOG = "child.log"  # in the profile's folder: the traceback of what the variant raised, when it raised


def child_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="the profiled cell (internal)")
    ap.add_argument("--cell", required=True, help="CellSpec.to_dict() as JSON")
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loop", type=float, default=0.0, help="loop until SIGUSR1, at most this many seconds")
    ap.add_argument("--variant-file", action="append", default=[])
    a = ap.parse_args(argv)

    from attnbench.harness.workers.worker import _die_with_parent

    _die_with_parent()
    _allow_any_tracer()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import torch

    from attnbench import variants

    for path in a.variant_file:
        variants.load_variant_file(path)
    if a.threads:
        torch.set_num_threads(a.threads)
    cell = CellSpec.from_dict(json.loads(a.cell))
    phase = [WARMUP]
    try:
        _profiled(cell, a, phase)
    except Exception as exc:  # the cell boundary: what the variant raised is the profile's one line
        _failed(exc, cell, phase[0], Path(a.out))
        return 1
    return 0


def _profiled(cell: CellSpec, a: argparse.Namespace, phase: list[str]) -> None:
    """The warm-up (the cell prepared and gated, then called for WARMUP_S: its un-profiled time per call),
    the loop under py-spy when asked, then torch.profiler; `phase` says which is running."""
    import torch

    sync = torch.cuda.synchronize if cell.device == "cuda" else (lambda: None)
    call, wrong = make_call(cell, a.seed)
    t0, took = time.perf_counter(), []
    while len(took) < 2 or time.perf_counter() - t0 < WARMUP_S:
        t = time.perf_counter()
        call()
        sync()
        took.append(time.perf_counter() - t)
    # the un-profiled time per call: the median of the later half (the first calls pay one-time costs)
    n = len(took)
    plain_ms = round(1e3 * statistics.median(took[n // 2 :]), 3)
    _send("warmed", {"calls": n, "ms_per_call": plain_ms, "wrong": wrong})

    if a.loop > 0:
        phase[0] = LOOP
        stop = []
        signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
        _send("ready", {"pid": os.getpid(), "warmup_calls": n})
        t0, n = time.perf_counter(), 0
        while not stop and time.perf_counter() - t0 < a.loop:
            call()
            n += 1
        sync()
        dt = time.perf_counter() - t0
        _send("looped", {"calls": n, "seconds": round(dt, 3), "ms_per_call": round(1e3 * dt / max(n, 1), 3)})

    from attnbench.harness.measure.fingerprint import collect
    from attnbench.harness.tools import torch_trace

    phase[0] = PROFILER
    _send("started_profiler")
    recorded = torch_trace.record(call, a.iters, cell.device, Path(a.out), sync)
    _send("done", {"torch_profiler": recorded, "threads": torch.get_num_threads(), "fingerprint": collect()})


def _failed(exc: Exception, cell: CellSpec, phase: str, out: Path) -> None:
    """What the variant raised, as `attnbench run` words it in a row (harness.measure.failures.failure), sent
    to the parent with the phase it was raised in; its traceback in LOG, where it says more than the line
    (not for a refusal or a broken output contract, whose line is all there is)."""
    import traceback

    from attnbench.harness.measure.contract import OutputContractError
    from attnbench.harness.measure.failures import failure
    from attnbench.variants import UnsupportedError

    status, message = failure(exc, cell.device)
    log = ""
    if not isinstance(exc, UnsupportedError | OutputContractError):
        (out / LOG).write_text("".join(traceback.format_exception(exc)))
        log = LOG
    _send("failed", {"phase": phase, "status": status, "message": message, "log": log})


if __name__ == "__main__":
    sys.exit(child_main())
