"""What a variant raised, as a row's (status, message): unsupported, oom, a poisoned CUDA context, error.

Runs where the exception was raised: in the worker (harness.measure.cell.measure_cell's cell boundary,
harness.workers.worker) and in the pytest-benchmark plugin. The texts the parent reads back are in
harness.measure.outcomes.
"""

from __future__ import annotations

import re
import signal
import sys
from typing import Protocol

import torch

from attnbench.harness.measure.contract import OutputContractError
from attnbench.harness.measure.outcomes import POISONED_PREFIX, mutation
from attnbench.variants import UnsupportedError


class Ready(Protocol):
    """What `failure` reads of a prepared cell (harness.measure.cell.Prepared): the inputs it found
    modified."""

    changed: tuple[str, ...]


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


# What CUDA says when a kernel fault (not an allocation) has made the process's context unusable: every
# later CUDA call in the process fails the same way, so the worker must exit and be replaced.
_POISONED = (
    "device-side assert",
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "an illegal address",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "CUDNN_STATUS_EXECUTION_FAILED",
    "CUDA error",
)


def is_poisoned(exc: BaseException) -> bool:
    """Whether exc is a CUDA error after which this process's CUDA context is unusable (a device-side
    assert, an illegal address, ...): torch.AcceleratorError, or a RuntimeError saying so. Never an OOM,
    from which the context recovers."""
    if is_oom(exc):
        return False
    accel = getattr(torch, "AcceleratorError", None)
    if accel is not None and isinstance(exc, accel):
        return True
    return isinstance(exc, RuntimeError) and any(mark in str(exc) for mark in _POISONED)


def stops_the_process(exc: BaseException) -> bool:
    """Whether what a cell raised stops the process instead of being its row: a KeyboardInterrupt where this
    process takes Ctrl-C (a person stopping what is measured in it: the pytest plugin's cells, a test's). A
    worker ignores Ctrl-C (harness.workers.worker), so a KeyboardInterrupt there is the variant's own raise:
    its cell's `error`, as a SystemExit is; it used to end the worker, `crashed`, and the worker was
    replaced for nothing."""
    return isinstance(exc, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


def failure(
    exc: BaseException, device: str, ready: Ready | None = None, declared: str = ""
) -> tuple[str, str]:
    """(status, message) for what the variant raised in prepare, time_call or peak: unsupported, oom or
    error (an output that breaks harness.measure.contract's rule: an error with that rule's words alone);
    `wrong` when prepare had already found that it modifies its inputs (the error follows from that, as
    autograd refusing an in-place write into a leaf in a fwdbwd call); `crashed` for a CUDA error that
    poisoned the context (is_poisoned: the worker that sends such a row exits, and the next cell gets a new
    one). declared: the user's declarations the cell exercised (variants.handed.exercised), said after an
    error or a crash, which a wrong declaration (gqa=True on a kernel that repeats no k/v head) may be.
    The caller re-raises what stops the process first (stops_the_process): a person stopping the run is not
    a cell's fault."""
    if isinstance(exc, UnsupportedError):
        return "unsupported", str(exc)
    if type(exc).__name__ == "FailOnRecompileLimitHit":
        return "error", _recompile_limit(exc)
    where = getattr(exc, "attnbench_where", "")  # raised in the setup hook (variants.Variant.bind)
    declared = f"; {declared}" if declared else ""
    if is_poisoned(exc):  # before empty_cache, which would fail the same way
        return "crashed", POISONED_PREFIX + _said(where, f"{type(exc).__name__}: {_one_line(exc)}") + declared
    if device == "cuda":
        torch.cuda.empty_cache()
    if is_oom(exc):
        return "oom", _said(where, _one_line(exc))
    message = _one_line(exc)
    if not isinstance(exc, OutputContractError):  # the contract's words say what was returned and expected
        message = _said(where, f"{type(exc).__name__}: {message}")
    if ready is not None and ready.changed:
        return "wrong", f"{mutation(ready.changed)}; then {message}"
    return "error", message + declared


def _said(where: str, message: str) -> str:
    return f"{where} raised {message}" if where else message


def _one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text[:limit] + ("..." if len(text) > limit else "")


_ARMED: list[bool] = []  # [True] while a cell runs with the setting arm_recompile_limit turned on


def arm_recompile_limit() -> None:
    """Past dynamo's recompile limit (8 compiled versions of a function by default) a torch.compile'd
    function runs eager, silently, and would be timed as if compiled. Once this process has torch.compile
    loaded, reaching the limit raises instead, and the cell's row says which limit (`failure`). Called
    before each cell's first call, after its setup hook (which may be what compiles); measure_cell puts
    the setting back after the cell (disarm_recompile_limit), as the pytest plugin's process had it."""
    config = getattr(sys.modules.get("torch._dynamo"), "config", None)
    if config is not None and getattr(config, "fail_on_recompile_limit_hit", True) is False:
        config.fail_on_recompile_limit_hit = True
        _ARMED[:] = [True]


def disarm_recompile_limit() -> None:
    """The setting as it was before the cell (off), where arm_recompile_limit turned it on."""
    if _ARMED:
        sys.modules["torch._dynamo"].config.fail_on_recompile_limit_hit = False
        _ARMED.clear()


def _recompile_limit(exc: BaseException) -> str:
    found = re.search(r"Limit type: (\w+)", str(exc.__cause__ or ""))
    limit = found.group(1) if found else "recompile_limit"
    value = getattr(sys.modules["torch._dynamo"].config, limit, "?")
    return (
        f"torch.compile reached its {limit} ({value}) on a function this cell calls: past it dynamo runs "
        f"the function eager, which would be timed as if compiled; raise torch._dynamo.config.{limit} in the "
        "variant's setup, or compile it with dynamic=True"
    )
