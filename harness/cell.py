"""Measure one cell in three steps, then one result row: prepare, time_call, peak -> measure_cell.

- prepare(spec, settings, cache) -> Prepared: seeded inputs, one forward call gated against float64
  (gradients too for fwdbwd), and the call to time;
- time_call(call, settings, timer) -> timing.Measurement: the harness's sampling loop under the budgets;
- peak(call, device) -> (bytes, method): peak memory of one more call, outside the timed runs.

measure_cell composes them, as `attnbench run`'s worker does; the pytest-benchmark plugin uses prepare
and peak and lets pytest-benchmark time the call. The steps let the variant's exceptions through: the
caller's cell boundary turns them into the row's status (`failure`). measure_cell runs inside a worker
process; only bugs in the harness itself escape it (and the parent records those as `error` too).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch

from attnbench import variants
from attnbench.results.formulas import attention_flops, flops_formula, summarize, tflops
from attnbench.variants import UnsupportedError, torch_dtype

from . import correctness, memory, timing
from .spec import CellSpec, Settings


def make_inputs(
    spec: CellSpec, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Seeded standard-normal q (B, H, N, d_k), k (B, H, N, d_k), v (B, H, N, d_v) and key lengths (B,)."""
    device = torch.device(spec.device)
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = torch_dtype(spec.dtype)
    b, h, n = spec.batch, spec.heads, spec.seq_len
    q = torch.randn(b, h, n, spec.d_k, generator=g, device=device, dtype=torch.float32).to(dtype)
    k = torch.randn(b, h, n, spec.d_k, generator=g, device=device, dtype=torch.float32).to(dtype)
    v = torch.randn(b, h, n, spec.d_v, generator=g, device=device, dtype=torch.float32).to(dtype)
    lengths = spec.key_lengths()
    kl = None if lengths is None else torch.tensor(lengths, dtype=torch.int64, device=device)
    return q, k, v, kl


class InputCache:
    """The last shape's inputs and float64 reference, shared by the variants that run back to back on it."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.inputs: tuple | None = None
        self.ref: torch.Tensor | None = None

    def get(self, spec: CellSpec, seed: int):
        key = (spec.shape_key, seed)
        if key != self.key:
            self.key, self.inputs, self.ref = None, None, None  # free the old shape before allocating the new
            self.inputs = make_inputs(spec, seed)
            self.key = key
        return self.inputs

    def reference(self, spec: CellSpec, rows) -> torch.Tensor:
        if self.ref is None:
            q, k, v, kl = self.inputs
            self.ref = correctness.reference(q, k, v, causal=spec.causal, key_lengths=kl, rows=rows)
        return self.ref


def timed_call(fn, q, k, v, *, backward: bool, **opts) -> Callable[[], None]:
    """The call a cell times: fn forward under no_grad, or forward + backward with gradients reset
    inside the call. Used by the harness, `attnbench profile` and the pytest-benchmark plugin alike;
    call.reset_grads() frees the last call's gradients (before a peak-memory measurement)."""
    if backward:
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        with torch.no_grad():
            d_out = torch.randn_like(fn(q, k, v, **opts))

        def reset_grads() -> None:
            for t in leaves:
                t.grad = None

        def call() -> None:
            reset_grads()  # gradients reset between calls, inside the call: cheap and always done
            fn(*leaves, **opts).backward(d_out)

    else:

        def reset_grads() -> None:
            pass

        def call() -> None:
            with torch.no_grad():
                fn(q, k, v, **opts)

    call.reset_grads = reset_grads  # type: ignore[attr-defined]
    return call


@dataclass(frozen=True)
class Prepared:
    """A cell ready to be timed: its call, built on inputs whose output was checked against float64."""

    call: Callable[[], None]  # timed_call: forward, or forward + backward; call.reset_grads() frees grads
    gate: correctness.GateResult  # the forward output against the float64 reference
    grad_rel_err: float | None  # None: a fwd cell, or one above settings.grad_check_elems (not checked)

    @property
    def grad_ok(self) -> bool:
        return self.grad_rel_err is None or self.grad_rel_err <= self.grad_tolerance

    @property
    def grad_tolerance(self) -> float:
        return self.gate.tolerance * correctness.GRAD_TOLERANCE_FACTOR

    def fields(self) -> dict[str, Any]:
        """The gate's columns of the result row."""
        return {
            "max_abs_err": self.gate.max_abs_err,
            "rel_err": self.gate.rel_err,
            "grad_rel_err": self.grad_rel_err,
            "masked_rows": self.gate.masked_rows,
            "rows_checked": self.gate.rows_checked,
        }

    def verdict(self, m: timing.Measurement | None = None) -> tuple[str, str]:
        """(status, message): wrong with what failed the gate, else ok, flagged when m is noisy.
        A wrong cell is still timed (and never ranked), so the verdict comes after the timing."""
        if not self.gate.passed or not self.grad_ok:
            if math.isinf(self.gate.rel_err):
                what = "non-finite output (NaN or inf)"
            elif not self.gate.passed:
                what = self.gate.describe()
            else:
                what = f"grad rel_err {self.grad_rel_err:.2e} > {self.grad_tolerance:.0e}"
            return "wrong", f"failed the float64 gate: {what}"
        return "ok", f"noisy: IQR/median {m.rel_iqr:.0%}" if m is not None and m.noisy else ""


def prepare(spec: CellSpec, settings: Settings, cache: InputCache | None = None) -> Prepared:
    """Inputs (from the cache), one validated forward call gated against float64 (gradients too for
    fwdbwd, up to settings.grad_check_elems), and the call to time. The caller has checked that the
    variant exists and supports the cell; whatever the variant raises here propagates (see `failure`)."""
    variant = variants.get(spec.variant)
    cache = cache or InputCache()
    q, k, v, kl = cache.get(spec, settings.seed)
    opts = {"causal": spec.causal, "key_lengths": kl}

    # one validated forward call: refusals, OOMs and exceptions surface here; its output is gated
    with torch.no_grad():
        out = variant(q, k, v, **opts)
    rows = correctness.sample_rows(spec.seq_len, settings.check_rows, seed=settings.seed)
    gate = correctness.gate(out, q, k, v, rows=rows, ref=cache.reference(spec, rows), **opts)
    del out  # free the output before the gradient check allocates its own
    grad_rel = None
    backward = spec.pass_ == "fwdbwd"
    if backward and spec.batch * spec.heads * spec.seq_len**2 <= settings.grad_check_elems:
        grad_rel = correctness.grad_errors(variant.fn, q, k, v, **opts)

    # the timed callable: the variant's own function (no registry wrapper), inputs already validated
    call = timed_call(variant.fn, q, k, v, backward=backward, **opts)
    return Prepared(call=call, gate=gate, grad_rel_err=grad_rel)


def device_timer(device: str, settings: Settings) -> timing.Timer:
    """The harness's timer for a device: CUDA events (L2 flushed as settings say) or perf_counter."""
    return timing.CudaTimer(flush_l2=settings.flush_l2) if device == "cuda" else timing.CpuTimer()


def time_call(call: Callable[[], object], settings: Settings, timer: timing.Timer) -> timing.Measurement:
    """The call timed by harness.timing.measure under the warm-up and sampling budgets of settings.
    (Not named `time`: this module times with the `time` module too.)"""
    budget = timing.Budget(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(timing.Budget)})
    return timing.measure(call, timer, budget)


def peak(call: Callable[[], object], device: str) -> tuple[int, str]:
    """(bytes, method): the peak memory of one call above what is live before it, outside the timed
    runs. A timed_call's gradients from its last call are freed first, so they are not counted as live."""
    reset = getattr(call, "reset_grads", None)
    if reset is not None:
        reset()
    return memory.peak(call, device)


def base_row(spec: CellSpec) -> dict[str, Any]:
    row = spec.to_dict()
    row["cell_id"] = spec.cell_id
    return row


def start_row(spec: CellSpec) -> dict[str, Any]:
    """The row's fields known before anything runs: the spec, cell_id, torch's thread count and FLOPs."""
    row = base_row(spec)
    row["threads"] = torch.get_num_threads()
    lengths = spec.key_lengths()
    row["flops"] = attention_flops(
        spec.batch,
        spec.heads,
        spec.seq_len,
        spec.seq_len,
        spec.d_k,
        spec.d_v,
        causal=spec.causal,
        pass_=spec.pass_,
        key_lengths=lengths,
    )
    row["flops_formula"] = flops_formula(causal=spec.causal, padded=lengths is not None)
    return row


def finish(row: dict[str, Any], status: str, message: str = "", **fields: Any) -> dict[str, Any]:
    row.update(fields)
    row["status"] = status
    row["message"] = message
    row["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def failure(exc: BaseException, device: str) -> tuple[str, str]:
    """(status, message) for what the variant raised in prepare, time_call or peak: unsupported, oom or
    error. The caller re-raises KeyboardInterrupt first: a person stopping the run is not a cell's fault."""
    if isinstance(exc, UnsupportedError):
        return "unsupported", str(exc)
    if device == "cuda":
        torch.cuda.empty_cache()
    if is_oom(exc):
        return "oom", _one_line(exc)
    return "error", f"{type(exc).__name__}: {_one_line(exc)}"


def _one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def measure_cell(
    spec: CellSpec, settings: Settings, cache: InputCache | None = None, timer: timing.Timer | None = None
) -> dict[str, Any]:
    """The full measurement of one cell as a result row (see results.schema): prepare, time_call, peak."""
    t_start = time.perf_counter()
    row = start_row(spec)
    try:
        variant = variants.get(spec.variant)
    except variants.VariantError as exc:
        return finish(row, "error", str(exc))
    reason = variant.check(spec.problem())
    if reason:
        return finish(row, "unsupported", reason)
    try:
        ready = prepare(spec, settings, cache)
        row.update(ready.fields())  # kept in the row if timing or memory fails below
        m = time_call(ready.call, settings, timer or device_timer(spec.device, settings))
        peak_bytes, method = peak(ready.call, spec.device)
        row.update(
            **summarize(m.samples_ms),
            samples_ms=[round(s, 6) for s in m.samples_ms],
            stop_reason=m.stop_reason,
            peak_mem_bytes=peak_bytes,
            mem_method=method,
            tflops=tflops(row["flops"], m.median),
            elapsed_s=round(time.perf_counter() - t_start, 3),
        )
        return finish(row, *ready.verdict(m))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the cell boundary: whatever the variant raised becomes this cell's row
        return finish(row, *failure(exc, spec.device))
