"""`attnbench check`: the float64 gate for every variant over causal x key padding, as plain records.

`prepare` refuses unknown variants, dtypes and devices (ValueError naming them) before any tensor is made;
`gate_all` yields one GateRow per (device, dtype, causal, padding, variant), then one per workload each
variant declares (GateRow.workload); `exit_status` is the verdict. Rendering is the front end's: this module
prints nothing.

The gated problems are the ones a run makes: key padding by the run's own rule
(harness.sweep.spec.padded_lengths, every batch element keeps at least one key). A batch element with no valid
key at all, which no run cell ever holds, is tried once more per variant apart (`no_key` rows, forward only):
it shows what a variant returns in rows that see no key, and never fails the check. Each workload a variant
declares in its capability (grouped k/v heads, lower-right causal, a window, each mod kind, a packed batch, a
paged cache) is one more problem, a cell of the run's own (harness.sweep.spec.CellSpec) with the inputs and
options a run makes for it (harness.measure.inputs): a kernel that declares what it gets wrong fails here
before a sweep reports it. Whatever a variant does
(raise anything, return something that is not a tensor) becomes a row with a one-line reason; nothing a
variant does ends `check`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

DEVICES = ("cpu", "cuda")
# small enough for every variant on CPU; two batch rows, padded unequally
BATCH, HEADS, HEAD_DIM = 2, 4, 64
# the padding fraction of the padded problems: the heaviest a run takes, so batch element 1 keeps one key
PADDING = 0.99
# N of the gated problems: no power of two, so that a kernel's bug at a block's edge shows
SEQ_LEN = 100


@dataclass(frozen=True)
class CheckPlan:
    """What `gate_all` runs, validated by `prepare`."""

    names: tuple[str, ...]
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    seq_len: int = SEQ_LEN


@dataclass(frozen=True)
class GateRow:
    """One variant on one (device, dtype, causal, padding) against the float64 reference."""

    variant: str
    device: str
    dtype: str
    causal: bool
    padding: bool
    status: str  # "pass", "FAIL", "error" (it raised, or returned no usable tensor) or "unsupported"
    rel_err: float | None = None  # None when unsupported or error
    grad_rel_err: float | None = None  # None when unsupported, error, or the variant has no backward
    masked_rows: str = ""  # what it returned in rows that see no key (see harness.measure.correctness)
    reason: str = ""  # why it is unsupported, FAILed or errored: one line
    gating: bool = True  # a FAIL or error fails the check; False for demo-only variants and no_key rows
    no_key: bool = False  # the extra problem with a batch element that sees no key (no run makes it)
    workload: str = ""  # the declared workload this problem checks (workload_cells), "" for causal x padding
    implied: bool = False  # a problem causal=True implies (TOP_LEFT), not a workload declared apart
    grad_against: str = ""  # a declared approximation's gradients: held to its own forward's ("own") or not


def prepare(
    names: Sequence[str] | None,
    devices: Sequence[str],
    dtypes: Sequence[str],
    seq_len: int = SEQ_LEN,
    *,
    variant_files: Sequence[str] = (),
) -> CheckPlan:
    """Validate everything before any work; names None: the variants of `variant_files`, or every registered
    variant when none is given. ValueError (VariantError is one) naming the bad value."""
    if seq_len < 1:
        raise ValueError(f"--seq-len must be a positive integer, got {seq_len}")
    from attnbench import variants
    from attnbench.variants import torch_dtype

    added = [name for path in variant_files for name in variants.load_variant_file(path)]
    if names is None:  # the files' own variants where files are given: the kernel being written
        names = added or list(variants.all_variants())
    names = list(names)
    variants.resolve(names)
    for d in dtypes:
        torch_dtype(d)
    for d in devices:
        if d not in DEVICES:
            raise ValueError(f"unknown device {d!r}; known: {', '.join(DEVICES)}")
        if d == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("device cuda was asked for, but torch sees no CUDA device on this machine")
            torch.cuda.init()  # `check` measures in this process: the variants' capability checks need CUDA
    return CheckPlan(tuple(names), tuple(devices), tuple(dtypes), seq_len)


def gate_all(plan: CheckPlan) -> Iterator[GateRow]:
    """Every variant on the same seeded inputs per (device, dtype), with and without causal masking and key
    padding (the run's rule), in that order, gradients too where the variant has a backward; then each
    variant once on the no-key problem (non-gating, forward only). Each device's workload rows come after
    all of its dtypes' rows: a check cut short (Ctrl-C, a time limit) has the gate of every dtype first."""
    import torch

    from attnbench import variants

    n = plan.seq_len
    for device in plan.devices:
        for qkv in _inputs(device, plan.dtypes, n):
            yield from _gate_masks(plan.names, qkv)
            no_key = torch.tensor([n // 3, 0], device=device)  # batch element 1 sees no key: no run makes it
            for name in plan.names:
                yield gate_one(variants.get(name), qkv, causal=False, key_lengths=no_key, no_key=True)
        yield from gate_workloads(plan.names, device, plan.dtypes, n)


def gate_masks(names: Sequence[str], device: str, dtypes: Sequence[str], n: int) -> Iterator[GateRow]:
    """gate_all's rows of causal x key padding alone, forward and backward, on its inputs: what
    attnbench.bench gates of a function at N = n beside its sweep (whose N are powers of two, and whose
    calls are forward only)."""
    for qkv in _inputs(device, dtypes, n):
        yield from _gate_masks(names, qkv)


def _inputs(device: str, dtypes: Sequence[str], n: int) -> Iterator[list]:
    """Per dtype, q, k, v (B, H, N, d), drawn in float32 and rounded to the dtype, from one seeded stream per
    device (dtypes draw in turn)."""
    import torch

    from attnbench.variants import torch_dtype

    g = torch.Generator(device=device).manual_seed(0)
    for dtype in dtypes:
        yield [
            torch.randn(BATCH, HEADS, n, HEAD_DIM, generator=g, device=device).to(torch_dtype(dtype))
            for _ in range(3)
        ]


def _gate_masks(names: Sequence[str], qkv: list) -> Iterator[GateRow]:
    """Each variant on qkv with and without causal masking and key padding (the run's rule)."""
    import torch

    from attnbench import variants
    from attnbench.harness.sweep.spec import padded_lengths

    n, device = qkv[0].shape[2], qkv[0].device
    padded = torch.tensor(padded_lengths(n, BATCH, PADDING), device=device)  # (B,): [n // 2, 1] or so
    for causal, key_lengths in itertools.product((False, True), (None, padded)):
        for name in names:
            yield gate_one(variants.get(name), qkv, causal=causal, key_lengths=key_lengths)


TOP_LEFT = "causal top-left"  # the label of causal=True's cell with N_q < N_k: implied, not declared apart


def implied(label: str) -> bool:
    """Whether a workload_cells label is the problem causal=True implies (TOP_LEFT), not a workload the
    variant declares apart."""
    return label.startswith(TOP_LEFT)


SOFTCAP, DECODE_QUERIES = "softcap:5", 4  # a cap that bends the scores of N(0, 1) inputs


def span(n: int) -> int:
    """The window and the page size of the workload cells at N = n (16 at the default 100): a window well
    short of N, and several pages a context."""
    return max(2, n // 6)


def workload_cells(variant, device: str, dtype: str, n: int) -> list[tuple[str, object]]:
    """(label, CellSpec) for each workload `variant` declares: the run's cells of them at N = n, causal
    where the workload is, forward+backward where a run may ask it (a paged cell is a decode step). A
    variant that runs packed batches or paged caches only has its grouped heads checked there."""
    from attnbench.harness.sweep.spec import CellSpec

    cap, base = variant.cap, CellSpec(variant.name, device, dtype, BATCH, HEADS, n, HEAD_DIM, HEAD_DIM, True,
                                      0.0, "fwdbwd")  # fmt: skip
    queries = max(1, min(DECODE_QUERIES, n // 2))  # never more than a context holds
    decode = dict(seq_len=queries, seq_k=n, page_size=span(n), causal_align="lower-right", pass_="fwd")
    packed = dataclasses.replace(base, lengths="uniform")
    homes = [("packed", "uniform lengths", _home(variant, packed))] if cap.varlen else []
    paged = _home(variant, dataclasses.replace(packed, **decode))
    homes += [("paged", f"pages of {span(n)}", paged)] if cap.paged else []
    plain = _takes(variant, base)  # else its packed or paged home holds its other workloads
    where, home = next(((w, c) for w, _, c in homes if not plain and _takes(variant, c)), ("", base))
    changes = [(f"{HEADS // 2} k/v heads for {HEADS}", {"kv_heads": HEADS // 2})] if cap.gqa else []
    # a pack is self-attention over whole sequences (a window, no mod), a paged cell a decode step (neither)
    short = {"seq_len": max(1, n // 4), "seq_k": n, "causal_align": "lower-right"}
    said = f"lower-right, N_q {short['seq_len']} of N_k {n}"
    changes += [(said, short)] if cap.lower_right and not where else []
    # causal=True is top-left with N_q < N_k too (a kernel whose causal is FlashAttention's lower-right one
    # passes every square cell and fails here); not where it declares its causal lower-right only
    rect = {"seq_len": short["seq_len"], "seq_k": n}
    top_left = (f"{TOP_LEFT}, N_q {short['seq_len']} of N_k {n}", rect)
    takes_it = cap.causal and not where and home.causal and _takes(variant, dataclasses.replace(home, **rect))
    changes += [top_left] if takes_it else []
    changes += [(f"window {span(n)}", {"window": span(n)})] if cap.window and where != "paged" else []
    mods = [mod for mod in ("alibi", SOFTCAP) if mod.partition(":")[0] in cap.mods and not where]
    changes += [(mod, {"mod": mod}) for mod in mods]
    cells = [(f"{where}, {said}" if where else said, dataclasses.replace(home, **c)) for said, c in changes]
    return cells + [(f"{word}, {said}", cell) for word, said, cell in homes]


def gate_workloads(names: Sequence[str], device: str, dtypes: Sequence[str], n: int) -> Iterator[GateRow]:
    """Per dtype, each workload each variant declares (workload_cells) at N = n, gated as gate_workload does;
    a variant that cannot run on device here has none (its causal x padding rows say why)."""
    from attnbench import variants

    runs_here = [name for name in names if unavailable(variants.get(name), device) is None]
    for dtype, name in itertools.product(dtypes, runs_here):
        for label, spec in workload_cells(variants.get(name), device, dtype, n):
            yield gate_workload(variants.get(name), spec, label)


def unavailable(variant, device: str) -> str | None:
    """Why variant cannot run on device in this process, None when it can (an availability hook that raises:
    what it raised; its fault shows in the variant's causal x padding rows too)."""
    try:
        return variant.availability(device)
    except Exception as exc:  # a plug-in's available hook
        return f"{type(exc).__name__}: {exc}"


def _home(variant, spec):
    """spec, a causal cell of a pack or a paged cache; its unmasked twin where variant takes that alone (a
    kernel without causal masking, or without its lower-right alignment), so that the workload it declares
    is gated rather than refused for a mask it never claimed."""
    unmasked = dataclasses.replace(spec, causal=False, causal_align="top-left")
    return spec if _takes(variant, spec) or not _takes(variant, unmasked) else unmasked


def _takes(variant, spec) -> bool:
    """Whether variant's capability takes spec's problem (a check that raises does not)."""
    try:
        return variant.check(spec.problem()) is None
    except Exception:  # a plug-in's supports hook: its fault shows in its rows
        return False


def gate_workload(variant, spec, label: str) -> GateRow:
    """One declared workload's problem (workload_cells), made as a run makes it, against float64."""
    from attnbench.harness.measure.inputs import gate_axes, make_inputs

    row = dict(variant=variant.name, device=spec.device, dtype=spec.dtype, causal=spec.causal, padding=False,
               gating=variant.cap.default, workload=label, implied=implied(label))  # fmt: skip
    return _recorded(row, lambda: _gate(variant, spec.problem(), make_inputs(spec, 0), row, gate_axes(spec)))


def gate_one(variant, qkv, *, causal: bool, key_lengths, no_key: bool = False) -> GateRow:
    """One variant on q, k, v (B, H, N, d) against float64: unsupported (with the reason), pass, FAIL (with
    the reason) or error (what it raised, in one line). no_key: the extra problem, forward only, not gated."""
    from attnbench import variants
    from attnbench.variants import dtype_name

    q = qkv[0]
    b, h, n, d = q.shape
    padded = key_lengths is not None
    row = dict(variant=variant.name, device=q.device.type, dtype=dtype_name(q.dtype), causal=causal,
               padding=padded, gating=variant.cap.default and not no_key, no_key=no_key)  # fmt: skip
    prob = variants.Problem(device=row["device"], dtype=row["dtype"], batch=b, heads=h, seq_len=n, seq_k=n,
                            d_k=d, d_v=d, causal=causal, padding=0.25 if padded else 0.0,
                            pass_="fwd" if no_key else "fwdbwd")  # fmt: skip
    return _recorded(row, lambda: _gate(variant, prob, (*qkv, key_lengths), row))


def _recorded(row: dict, gated) -> GateRow:
    """gated()'s GateRow, or what it raised as the row's status and one-line reason."""
    try:
        return gated()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a plug-in's fault of any kind is its row, never the end of `check`
        from attnbench.harness.measure.failures import failure

        status, message = failure(exc, row["device"])  # UnsupportedError (refused at call time): unsupported
        return GateRow(**row, status="unsupported" if status == "unsupported" else "error", reason=message)


def _gate(variant, prob, inputs, row: dict, axes: dict | None = None) -> GateRow:
    """The gate of one problem: inputs (q, k, v, key_lengths), axes the gate's keywords of the added axes
    (harness.measure.inputs.gate_axes). What a variant raises here is _recorded's."""
    from attnbench.harness.measure import correctness

    reason = variant.check(prob)
    backward = prob.backward
    if reason and "backward" in reason:  # no backward: gate the forward alone
        backward, reason = False, variant.check(dataclasses.replace(prob, pass_="fwd"))
    if reason:
        return GateRow(**row, status="unsupported", reason=str(reason))
    q, k, v, key_lengths = inputs
    r = correctness.check(
        variant, q, k, v, causal=prob.causal, key_lengths=key_lengths, backward=backward, **(axes or {})
    )
    return GateRow(
        **row,
        status="pass" if r.ok else "FAIL",
        rel_err=r.rel_err,
        grad_rel_err=r.grad_rel_err,
        grad_against=r.grad_against,
        masked_rows=r.masked_rows,
        reason=_fail_reason(r) if not r.ok else _held(r),
    )


def _held(r) -> str:
    """A passing row's note: a declared approximation's bound, which it passed instead of the dtype's."""
    return f"declared approximate: held to rel_err {r.approximate:g}" if r.approximate else ""


def _fail_reason(r) -> str:
    """Why a gate result failed, in one line: the likely cause where the gate recognised one, which error
    passed which tolerance, and where a non-finite answer is NaN."""
    parts = [r.hint] if r.hint else []
    if not r.passed:
        parts.append(f"output rel_err {r.rel_err:.1e} > tolerance {r.tolerance:.0e}")
        parts += [r.where] if r.where else []
    if r.grad_passed is False:
        from attnbench.harness.measure.own_gradient import bound_text

        bound = bound_text(r.grad_tolerance, r.grad_against)
        parts.append(f"gradient rel_err {r.grad_rel_err:.1e} > tolerance {bound}")
    return "; ".join(parts)  # a non-finite error reads "inf" or "nan"


def exit_status(rows: Iterable[GateRow]) -> int:
    """1 when a default variant FAILed or errored on a problem a run makes, else 0 (unsupported, demo-only
    variants and the no-key rows do not count)."""
    return 1 if any(r.status in ("FAIL", "error") and r.gating for r in rows) else 0
