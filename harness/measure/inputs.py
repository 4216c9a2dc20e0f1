"""A cell's inputs and the callable it times: seeded inputs per shape, handed to a variant in its layout, the
float64 reference per shape (InputCache), the keywords a cell's variant is called with, and timed_call,
the forward or forward+backward call the timers repeat (harness.measure.cell measures with them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.contract import changed_inputs
from attnbench.harness.measure.varied import Varied
from attnbench.harness.sweep.spec import CellSpec
from attnbench.variants import in_layout, torch_dtype
from attnbench.variants.lengths import offsets
from attnbench.variants.problem import extra_options


def make_inputs(
    spec: CellSpec, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Seeded standard-normal q (B, H, N_q, d_k), k (B, H_kv, N_k, d_k), v (B, H_kv, N_k, d_v) and key lengths
    (B,); a packed batch's (variants.lengths) as one sequence of its T = B x N tokens, (1, H, T, d); a paged
    cell's k and v as pools of pages (P, page, H_kv, d) and its context lengths as key lengths."""
    device = torch.device(spec.device)
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = torch_dtype(spec.dtype)
    (b, n, n_k), h, h_kv = spec.dims, spec.heads, spec.kv_heads
    q = torch.randn(b, h, n, spec.d_k, generator=g, device=device, dtype=torch.float32).to(dtype)
    if spec.paged:  # the pool of pages (variants/paged.py), every slot filled: past a context, to be ignored
        contexts = spec.seq_lens()
        pages = sum(-(-c // spec.page_size) for c in contexts)
        shape = (pages, spec.page_size, h_kv)
        k = torch.randn(*shape, spec.d_k, generator=g, device=device, dtype=torch.float32).to(dtype)
        v = torch.randn(*shape, spec.d_v, generator=g, device=device, dtype=torch.float32).to(dtype)
        return q, k, v, torch.tensor(contexts, dtype=torch.int64, device=device)
    k = torch.randn(b, h_kv, n_k, spec.d_k, generator=g, device=device, dtype=torch.float32).to(dtype)
    v = torch.randn(b, h_kv, n_k, spec.d_v, generator=g, device=device, dtype=torch.float32).to(dtype)
    lengths = spec.key_lengths()
    kl = None if lengths is None else torch.tensor(lengths, dtype=torch.int64, device=device)
    return q, k, v, kl


def handed(inputs, layout: str = "bhnd", paged: bool = False):
    """What a variant is handed: new copies of (q, k, v, key_lengths), q, k and v in the memory layout it
    declares (Capability.layout; variants.in_layout: the same shapes and values). Made here, outside any
    timed call, so that the timed call pays no copy into the layout its kernel takes. A paged cell's k and v
    are pools of pages in their own layout (variants/paged.py): copied contiguous, whatever the variant's."""
    q, k, v, kl = inputs
    kv_layout = "bhnd" if paged else layout
    return (
        in_layout(q, layout),
        *(in_layout(t, kv_layout) for t in (k, v)),
        None if kl is None else kl.clone(),
    )


class InputCache:
    """The last shape's inputs and float64 reference, shared by the variants that run back to back on it.

    One pristine copy per shape is kept here and never handed out: every cell gets copies of it (in its
    variant's layout), so a variant that writes into its inputs cannot harm the cells after it, and
    `changed` compares the values a cell's variant was given against the pristine copy (exactly:
    torch.equal, whatever the layout; cheap next to a cell).
    """

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.pristine: tuple | None = None
        self.ref: torch.Tensor | None = None

    def get(self, spec: CellSpec, seed: int, layout: str = "bhnd"):
        """Fresh copies of this shape's pristine (q, k, v, key_lengths) in `layout` (see `handed`); the
        pristine inputs are made once per shape and seed."""
        key = (spec.shape_key, seed)
        if key != self.key:
            self.key, self.pristine, self.ref = None, None, None  # free the old shape before the new one
            self.pristine = make_inputs(spec, seed)
            self.key = key
        return handed(self.pristine, layout, spec.paged)

    def changed(self, given) -> tuple[str, ...]:
        """The names of the inputs in `given` (q, k, v, key_lengths as handed to a cell) that no longer
        equal the pristine copy: values, shape or dtype (a tensor a variant modified in place)."""
        return changed_inputs(given, self.pristine)

    def reference(self, spec: CellSpec, rows) -> torch.Tensor:
        """The float64 reference of this shape's pristine inputs on `rows` (computed once per shape)."""
        if self.ref is None:
            q, k, v, kl = self.pristine  # never the cell's copies: a variant may have written into those
            self.ref = correctness.reference(
                q, k, v, causal=spec.causal, key_lengths=kl, rows=rows, **gate_axes(spec)
            )
        return self.ref


def gate_axes(spec: CellSpec) -> dict[str, Any]:
    """The added axes' keywords of the float64 gate (correctness.reference, gate, grad_errors) for a cell."""
    axes = {"causal_align": spec.causal_align, "window": spec.window, "mod": spec.mod}
    return {**axes, "cu_seqlens": cu_seqlens(spec), "block_table": block_table(spec)}


def judged_as(spec: CellSpec) -> dict[str, Any]:
    """How a cell's variant is judged, which its every gate reads (correctness.judged_by: its quantisation
    recipe and its declared approximation)."""
    return correctness.judged_by(variants.get(spec.variant).cap)


def cu_seqlens(spec: CellSpec) -> torch.Tensor | None:
    """A packed cell's sequence offsets, (B + 1,) int32 on its device (variants.lengths), else None."""
    lengths = None if spec.paged else spec.seq_lens()
    return None if lengths is None else torch.tensor(offsets(lengths), dtype=torch.int32, device=spec.device)


def block_table(spec: CellSpec) -> torch.Tensor | None:
    """A paged cell's page table, (B, max_pages) int32 on its device (variants.lengths.page_table); else
    None."""
    table = spec.block_table()
    return None if table is None else torch.tensor(table, dtype=torch.int32, device=spec.device)


def call_options(spec: CellSpec, key_lengths) -> dict[str, Any]:
    """The keyword arguments a cell's variant is called with: causal and key_lengths, and the added axes
    only when not at their default (CellSpec.options; a packed cell's cu_seqlens, made here), so variants
    written before them keep working."""
    packed = extra_options(cu_seqlens=cu_seqlens(spec), block_table=block_table(spec))
    return {"causal": spec.causal, "key_lengths": key_lengths, **spec.options(), **packed}


def timed_call(fn, q, k, v, *, backward: bool, vary: int | None = None, **opts) -> Callable[[], None]:
    """The call a cell times: fn forward under no_grad, or forward + backward with gradients reset
    inside the call. Used by the harness, `attnbench profile` and the pytest-benchmark plugin alike;
    call.reset_grads() frees the last call's gradients (before a peak-memory measurement), call.inputs are
    the (q, k, v, key_lengths) the timed calls pass to fn (to check they stay unchanged, and to refill in
    place after timing: check_after), call.kwargs the keywords they pass with them, call.backward whether
    they run under autograd, and call.owned every tensor the harness made for them (the inputs, dO, the
    varied rows' signs): not the variant's memory (retained_bytes). vary: a seed, for a forward call
    without dropout whose query rows are varied between calls (harness.measure.varied; call.varied,
    call.between)."""
    varied = None
    if vary is not None and not backward and not opts.get("dropout_p"):
        varied = Varied(q, vary)
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

        call.inputs = (*leaves, opts.get("key_lengths"))  # type: ignore[attr-defined]
        call.owned = (*call.inputs, d_out)  # type: ignore[attr-defined]
    else:

        def reset_grads() -> None:
            pass

        def call() -> None:
            with torch.no_grad():
                out = fn(q, k, v, **opts)
            if varied is not None:
                varied.keep(out)

        if varied is not None:
            call.between = varied.between  # type: ignore[attr-defined]
        call.inputs = (q, k, v, opts.get("key_lengths"))  # type: ignore[attr-defined]
        call.owned = (*call.inputs, *(() if varied is None else (varied.signs,)))  # type: ignore[attr-defined]
    call.kwargs = opts  # type: ignore[attr-defined]
    call.varied = varied  # type: ignore[attr-defined]
    call.backward = backward  # type: ignore[attr-defined]
    call.reset_grads = reset_grads  # type: ignore[attr-defined]
    return call
