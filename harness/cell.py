"""Measure one cell: capability check, inputs, correctness gate, timing, peak memory -> one result row.

Runs inside a worker process. Every failure of the variant becomes the row's status; only bugs in
the harness itself escape (and the parent records those as `error` too).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import torch

from attnbench import variants
from attnbench.variants import UnsupportedError, torch_dtype

from . import correctness, memory, timing
from .flops import attention_flops, tflops
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


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def base_row(spec: CellSpec) -> dict[str, Any]:
    row = spec.to_dict()
    row["cell_id"] = spec.cell_id
    return row


def finish(row: dict[str, Any], status: str, message: str = "", **fields: Any) -> dict[str, Any]:
    row.update(fields)
    row["status"] = status
    row["message"] = message
    row["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


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


def _timer(device: str, settings: Settings) -> timing.Timer:
    return timing.CudaTimer(flush_l2=settings.flush_l2) if device == "cuda" else timing.CpuTimer()


def measure_cell(
    spec: CellSpec, settings: Settings, cache: InputCache | None = None, timer: timing.Timer | None = None
) -> dict[str, Any]:
    """The full measurement of one cell as a result row (see results.schema)."""
    t_start = time.perf_counter()
    row = base_row(spec)
    row["threads"] = torch.get_num_threads()
    flops = attention_flops(
        spec.batch,
        spec.heads,
        spec.seq_len,
        spec.seq_len,
        spec.d_k,
        spec.d_v,
        causal=spec.causal,
        pass_=spec.pass_,
    )
    row["flops"] = flops
    try:
        variant = variants.get(spec.variant)
    except variants.VariantError as exc:
        return finish(row, "error", str(exc))
    reason = variant.check(spec.problem())
    if reason:
        return finish(row, "unsupported", reason)
    cache = cache or InputCache()
    try:
        return _measure(spec, settings, variant, cache, timer, row, flops, t_start)
    except UnsupportedError as exc:
        return finish(row, "unsupported", str(exc))
    except BaseException as exc:  # the cell boundary: whatever the variant raised becomes this cell's row
        if isinstance(exc, KeyboardInterrupt):
            raise
        if spec.device == "cuda":
            torch.cuda.empty_cache()
        if is_oom(exc):
            return finish(row, "oom", _one_line(exc))
        return finish(row, "error", f"{type(exc).__name__}: {_one_line(exc)}")


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


def _one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def _measure(spec, settings, variant, cache, timer, row, flops, t_start):
    q, k, v, kl = cache.get(spec, settings.seed)
    opts = {"causal": spec.causal, "key_lengths": kl}

    # 1. one validated forward call: refusals, OOMs and exceptions surface here; its output is gated
    with torch.no_grad():
        out = variant(q, k, v, **opts)
    rows = correctness.sample_rows(spec.seq_len, settings.check_rows, seed=settings.seed)
    gate = correctness.gate(out, q, k, v, rows=rows, ref=cache.reference(spec, rows), **opts)
    del out
    grad_rel = None
    backward = spec.pass_ == "fwdbwd"
    if backward and spec.batch * spec.heads * spec.seq_len**2 <= settings.grad_check_elems:
        grad_rel = correctness.grad_errors(variant.fn, q, k, v, **opts)
    grad_ok = grad_rel is None or grad_rel <= gate.tolerance * correctness.GRAD_TOLERANCE_FACTOR
    row.update(
        max_abs_err=gate.max_abs_err,
        rel_err=gate.rel_err,
        grad_rel_err=grad_rel,
        masked_rows=gate.masked_rows,
        rows_checked=gate.rows_checked,
    )

    # 2. the timed callable: the variant's own function, inputs already validated
    call = timed_call(variant.fn, q, k, v, backward=backward, **opts)
    budget = timing.Budget(
        warmup_ms=settings.warmup_ms,
        budget_ms=settings.budget_ms,
        min_samples=settings.min_samples,
        max_samples=settings.max_samples,
        target_rel_iqr=settings.target_rel_iqr,
        min_ms=settings.min_ms,
    )
    m = timing.measure(call, timer or _timer(spec.device, settings), budget)

    # 3. peak memory, outside the timed runs (gradients of the last timed call freed first)
    call.reset_grads()
    peak_bytes, method = memory.peak(call, spec.device)

    row.update(
        time_ms_median=m.median,
        time_ms_p25=m.p25,
        time_ms_p75=m.p75,
        rel_iqr=m.rel_iqr,
        noisy=m.noisy,
        n_samples=m.n,
        samples_ms=[round(s, 6) for s in m.samples_ms],
        stop_reason=m.stop_reason,
        peak_mem_bytes=peak_bytes,
        mem_method=method,
        tflops=tflops(flops, m.median),
        elapsed_s=round(time.perf_counter() - t_start, 3),
    )
    if not gate.passed or not grad_ok:
        if math.isinf(gate.rel_err):
            what = "non-finite output (NaN or inf)"
        elif not gate.passed:
            what = gate.describe()
        else:
            what = f"grad rel_err {grad_rel:.2e} > {gate.tolerance * correctness.GRAD_TOLERANCE_FACTOR:.0e}"
        return finish(row, "wrong", f"failed the float64 gate: {what}")
    return finish(row, "ok", f"noisy: IQR/median {m.rel_iqr:.0%}" if m.noisy else "")
