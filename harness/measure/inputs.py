"""A cell's inputs and the callable it times: seeded inputs per shape, handed to a variant in its layout, the
float64 reference per shape (InputCache), the keywords a cell's variant is called with, and timed_call,
the forward or forward+backward call the timers repeat (harness.measure.cell measures with them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attnbench import variants
from attnbench.harness.measure import attention64, correctness
from attnbench.harness.measure.contract import changed_inputs
from attnbench.harness.measure.varied import ROW_BOUND, Varied
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


def timed_call(
    fn, q, k, v, *, backward: bool, vary: bool = False, judged: dict | None = None, **opts
) -> Callable[[], None]:
    """The call a cell times: fn forward under no_grad, or forward + backward with gradients reset
    inside the call. Used by the harness, `attnbench profile` and the pytest-benchmark plugin alike;
    call.reset_grads() frees the last call's gradients (before a peak-memory measurement), call.inputs are
    the (q, k, v, key_lengths) the timed calls pass to fn (to check they stay unchanged, and to refill in
    place after timing: check_after), call.kwargs the keywords they pass with them, call.backward whether
    they run under autograd, and call.owned every tensor the harness made for them (the inputs, dO, the
    varied query's sign vectors): not the variant's memory (retained_bytes). vary: whether q is varied
    between calls, in a call without dropout (harness.measure.varied; call.varied, call.between); judged:
    how the variant's answers are judged (correctness.judged_by), which the varied calls' rows are held to."""
    if backward:
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        with torch.no_grad():
            d_out = torch.randn_like(fn(q, k, v, **opts))
        varied = _varied(leaves[0], *leaves[1:], vary, True, opts, judged)

        def reset_grads() -> None:
            for t in leaves:
                t.grad = None

        def call() -> None:
            reset_grads()  # gradients reset between calls, inside the call: cheap and always done
            out = fn(*leaves, **opts)
            out.backward(d_out)
            if varied is not None:
                varied.keep(out)  # and reads q's gradient before the next call resets it

        call.inputs = (*leaves, opts.get("key_lengths"))  # type: ignore[attr-defined]
        owned: tuple = (*call.inputs, d_out)
    else:
        varied = _varied(q, k, v, vary, False, opts, judged)

        def reset_grads() -> None:
            pass

        def call() -> None:
            with torch.no_grad():
                out = fn(q, k, v, **opts)
            if varied is not None:
                varied.keep(out)

        call.inputs = (q, k, v, opts.get("key_lengths"))  # type: ignore[attr-defined]
        owned = call.inputs
    if varied is not None:
        call.between = varied.between  # type: ignore[attr-defined]
        owned = (*owned, *varied.owned)
    call.owned = owned  # type: ignore[attr-defined]
    call.kwargs = opts  # type: ignore[attr-defined]
    call.varied = varied  # type: ignore[attr-defined]
    call.backward = backward  # type: ignore[attr-defined]
    call.reset_grads = reset_grads  # type: ignore[attr-defined]
    return call


def _varied(q, k, v, vary: bool, backward: bool, opts: dict[str, Any], judged: dict | None) -> Varied | None:
    """q's variation between timed calls (harness.measure.varied), where asked and without dropout, told
    which query rows see no key (those may hold NaN or zeros) and which see two keys or more in every
    sequence (those compared: a row that sees one key has the same answer whatever its query), and how a
    timed answer's row is held to float64 (`_row_judge`)."""
    if not vary or opts.get("dropout_p"):
        return None
    n_q, n_k, kl = q.shape[2], k.shape[2], opts.get("key_lengths")
    rules = {name: opts[name] for name in ("causal_align", "window", "cu_seqlens") if name in opts}
    rules["causal"] = opts.get("causal", False)
    judge = _row_judge(q, k, v, opts, judged or {})
    if opts.get("block_table") is not None:  # a paged cell: every query sees its context's keys
        return Varied(q, None, list(range(n_q)), grads=backward, judge=judge)
    empty = correctness.empty_rows(n_q, kl, n_k=n_k, **rules)
    lo, hi = attention64.key_interval(torch.arange(n_q), n_q, n_k, **rules)
    hi = hi[None, :] if kl is None else torch.minimum(hi[None, :], kl.cpu()[:, None] - 1)  # (B or 1, N_q)
    rows = torch.nonzero((hi - lo[None, :] >= 1).all(0)).flatten().tolist()
    return Varied(q, empty, rows, grads=backward, judge=judge)


def _row_judge(q, k, v, opts: dict[str, Any], judged: dict) -> Callable | None:
    """judge(q, out, row): a device bool, whether row `row` of the answer `out` is off the float64
    reference of (q, k, v) under the cell's rules by more than ROW_BOUND (or 4x the gate's tolerance, for a
    declared approximation): an older answer, which differs by about its own size, is; rounding is not.
    Queued on q's device with no copy from the host (a copy from pageable memory would synchronise a CUDA
    device between calls). None for a quantising variant (judged against its rounded inputs), an
    approximation bound near 1, or a paged cell (whose reference reads its page table on the host)."""
    rules = {n: opts[n] for n in ("causal", "key_lengths", "causal_align", "window", "mod") if n in opts}
    rules["cu_seqlens"] = opts.get("cu_seqlens")
    bound = max(ROW_BOUND, 4 * float(judged.get("approximate") or 0.0))
    if judged.get("quant") or bound >= 1 or opts.get("block_table") is not None:
        return None
    index = torch.arange(q.shape[2], device=q.device)  # a row's index: a view of it, never a host copy

    def judge(q, out, row: int):
        with torch.no_grad():
            ref = correctness.reference(
                q.detach(), k.detach(), v.detach(), rows=index[row : row + 1], **rules
            )
            diff = torch.linalg.vector_norm(out[:, :, row : row + 1].to(torch.float64) - ref)
            return ~(diff <= bound * torch.linalg.vector_norm(ref))  # NaN: wrong

    judge.owned = (index,)  # type: ignore[attr-defined]
    return judge
