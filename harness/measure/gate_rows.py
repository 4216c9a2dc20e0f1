"""`attnbench check`'s gate of one variant on one problem, as a plain GateRow: what the check's worker runs.

A problem (GateProblem) is plain data: the variant, device, dtype and N, and either a mask (causal, key
padding by the run's own rule, or the no-key problem) or a declared workload by its label (workload_cells).
`problems` lists a check's problems in the order `attnbench check` shows them; `gate_request` gates one,
on inputs drawn afresh from the check's seeded stream, so that a problem gives the same inputs in any
process. harness.tools.check asks a worker (harness.workers.worker's `gate` request) for each, or, in
tests, calls gate_request here.

The gated problems are the ones a run makes: key padding by the run's own rule
(harness.sweep.spec.padded_lengths, every batch element keeps at least one key). A batch element with no valid
key at all, which no run cell ever holds, is tried once more per variant apart (`no_key` rows, forward only):
it shows what a variant returns in rows that see no key, and never fails the check. Each workload a variant
declares in its capability (grouped k/v heads, lower-right causal, a window, each mod kind, a packed batch, a
paged cache) is one more problem, a cell of the run's own (harness.sweep.spec.CellSpec) with the inputs and
options a run makes for it (harness.measure.inputs): a kernel that declares what it gets wrong fails here
before a sweep reports it. Whatever a variant raises (SystemExit too) or returns becomes the row's status
and one-line reason; a crash or a hang is the worker's, which the parent makes the row (harness.tools.check).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

# small enough for every variant on CPU; two batch rows, padded unequally
BATCH, HEADS, HEAD_DIM = 2, 4, 64
# the sequences of a packed or paged problem: the varlen preset's batch, so that a pack has a first, a last
# and several middle sequences (a kernel that skips the middle ones fails), at N = 100 still 800 tokens
SEQUENCES = 8
# the padding fraction of the padded problems: the heaviest a run takes, so batch element 1 keeps one key
PADDING = 0.99
# the parts of a check: causal x padding, the no-key problem, the declared workloads
MASKS, NO_KEY, WORKLOADS = "masks", "no_key", "workloads"
# an N past full tiles of 64, 128 and 256 with a partial last one (300 = 256 + 44 = 2 * 128 + 44): a kernel
# that drops or misreads its partial last block answers wrong here, and right at every N its tile divides
TILE_N = 300


@dataclass(frozen=True)
class GateRow:
    """One variant on one (device, dtype, causal, padding) against the float64 reference."""

    variant: str
    device: str
    dtype: str
    causal: bool
    padding: bool
    # "pass", "FAIL", "error" (it raised, or returned no usable tensor), "unsupported", or where its worker
    # died or hung (harness.tools.check): "crashed", "timeout"
    status: str
    rel_err: float | None = None  # None when unsupported or error
    grad_rel_err: float | None = None  # None when unsupported, error, or the variant has no backward
    masked_rows: str = ""  # what it returned in rows that see no key (see harness.measure.correctness)
    reason: str = ""  # why it is unsupported, FAILed or errored: one line
    # a FAIL or error fails the check; False for the no_key rows, and for a variant not in default sweeps
    # that the user did not name (a check of every variant)
    gating: bool = True
    no_key: bool = False  # the extra problem with a batch element that sees no key (no run makes it)
    workload: str = ""  # the declared workload this problem checks (workload_cells), "" for causal x padding
    implied: bool = False  # a problem causal=True implies (TOP_LEFT), not a workload declared apart
    grad_against: str = ""  # a declared approximation's gradients: held to its own forward's ("own") or not
    n: int = 0  # the problem's N (a decode step's N_k); 0 where unknown (a row of an older worker)
    # a quantising variant's recipe (Capability.quant) and its output's SQNR in dB against float64 of the
    # inputs it was given (rel_err is against its rounded inputs'): its error end to end, as a run's row says
    quant: str = ""
    sqnr_db: float | None = None
    # which of a run's workloads its cell is one of (workload_kind: "dense", "window", "packed", "paged"),
    # read from the cell, never from its label's words; "dense" for causal x padding and the no-key problem
    kind: str = "dense"
    # at a low-precision dtype, the baseline variant (baseline_for) on the same inputs, forward, against the
    # same float64 reference: what the dtype itself costs, beside which rel_err is read (check.notes)
    baseline: str = ""
    baseline_rel_err: float | None = None  # None where no baseline was asked, or it does not take the problem
    # what check notes, never a failure (correctness.GateResult's): the output's strides where it is not
    # contiguous in the variant's layout; how far two calls on the same inputs differ (problem.repeat; None:
    # not compared, 0.0: alike)
    strides: str = ""
    calls_differ: float | None = None


@dataclass(frozen=True)
class GateProblem:
    """One problem of a check, as plain data (it travels to the worker as a dict): `dtypes` are the check's,
    whose seeded stream draws each dtype's inputs in turn; `counted`: whether a failure counts toward the
    check's exit status (GateRow.gating)."""

    variant: str
    device: str
    dtypes: tuple[str, ...]
    dtype: str
    n: int
    causal: bool = False
    padding: bool = False
    no_key: bool = False
    workload: str = ""
    kind: str = "dense"  # the workload's cell's (workload_kind), as its GateRow says
    counted: bool = True
    baseline: str = ""  # the variant whose forward error is measured beside this one's (baseline_for)
    repeat: bool = False  # whether two calls on the same inputs are compared here (repeated_at)

    def row(self, status: str, reason: str) -> GateRow:
        """This problem's row with `status` and `reason` and nothing measured (its worker died or hung)."""
        padding = self.padding or self.no_key  # the no-key problem's rows are padded, as gate_one makes them
        return GateRow(self.variant, self.device, self.dtype, self.causal, padding, status, reason=reason,
                       gating=self.counted and not self.no_key, no_key=self.no_key, workload=self.workload,
                       kind=self.kind, implied=implied(self.workload), n=self.n)  # fmt: skip


def problems(
    names: Sequence[str], devices: Sequence[str], dtypes: Sequence[str], ns: int | Sequence[int], *,
    counted: Callable[[str], bool], parts: Sequence[str] = (MASKS, NO_KEY, WORKLOADS), notes: bool = True,
) -> Iterator[GateProblem]:  # fmt: skip
    """A check's problems in its order: per device, per dtype, each variant with and without causal masking
    and key padding at each N of `ns` (one N, or several: a kernel's partial last block shows at an N its
    tile does not divide), then each variant on the no-key problem; then each device's workloads, per dtype
    and variant (a check cut short has the gate of every dtype first). The no-key problem and the workloads
    are gated at the first N only. A variant that cannot run on a device has no workload there (its causal x
    padding rows say why). counted(name): whether its failures count. notes: whether each problem also
    measures what check's notes read (the baseline's error beside it: baseline_for)."""
    from attnbench import variants

    dtypes, ns = tuple(dtypes), (ns,) if isinstance(ns, int) else tuple(ns)
    n = ns[0]

    def also(name: str, device: str, dtype: str) -> dict:
        return {"baseline": baseline_for(variants.get(name), device, dtype)} if notes else {}

    for device in devices:
        for dtype in dtypes:
            masks = itertools.product(ns, (False, True), (False, True)) if MASKS in parts else []
            for (each, causal, padding), name in itertools.product(masks, names):
                at = dict(device=device, dtypes=dtypes, dtype=dtype, n=each, **also(name, device, dtype))
                repeat = notes and repeated_at(variants.get(name), each == n, padding)
                yield GateProblem(
                    name, **at, causal=causal, padding=padding, counted=counted(name), repeat=repeat
                )
            at = dict(device=device, dtypes=dtypes, dtype=dtype, n=n)
            for name in names if NO_KEY in parts else []:
                yield GateProblem(name, **at, no_key=True, counted=counted(name))
        if WORKLOADS not in parts:
            continue
        runs_here = [name for name in names if unavailable(variants.get(name), device) is None]
        for dtype, name in itertools.product(dtypes, runs_here):
            for label, cell in workload_cells(variants.get(name), device, dtype, n):
                kind = workload_kind(cell)
                yield GateProblem(name, device, dtypes, dtype, n, workload=label, kind=kind,
                                  counted=counted(name), **also(name, device, dtype))  # fmt: skip


def repeated_at(variant, first_n: bool, padding: bool) -> bool:
    """Whether check compares two calls on the same inputs at a mask problem: at the first N without
    padding, causal and not (a kernel's masked and unmasked paths), for every variant but one that declares
    its dropout's randomness its own (dropout_deterministic=False). The gradient check's forward is the
    second call where the problem has one (correctness.again)."""
    cap = variant.cap
    return first_n and not padding and not (cap.dropout and not cap.dropout_deterministic)


def baseline_for(variant, device: str, dtype: str) -> str:
    """The variant whose forward error check measures beside `variant`'s on each problem of a low-precision
    `dtype` (a tolerance wider than float32's: float16, bfloat16), on the same inputs: the first of
    DEFAULT_BASELINES that runs on `device` (sdpa, the baseline bench races against and the report's
    speed-ups divide by). "" at float32 and float64 (an error near 1e-7 says nothing of accumulation), for
    the baseline itself, and for a variant that rounds its inputs first or is declared approximate (its error
    is its recipe's or its bound's by design)."""
    from attnbench import variants
    from attnbench.results.formulas import DEFAULT_BASELINES, TOLERANCE

    cap = variant.cap
    if not TOLERANCE.get(dtype, 0.0) > TOLERANCE["float32"] or cap.quant or cap.approximate:
        return ""
    for name in DEFAULT_BASELINES:
        if name == variant.name:  # its own rows are the baseline's
            return ""
        if name in variants.all_variants() and unavailable(variants.get(name), device) is None:
            return name
    return ""


def gate_request(problem: GateProblem) -> GateRow:
    """The gate of one problem, in this process, on the check's inputs for it."""
    import torch

    from attnbench import variants
    from attnbench.harness.sweep.spec import padded_lengths

    variant, p = variants.get(problem.variant), problem
    if p.workload:
        cells = dict(workload_cells(variant, p.device, p.dtype, p.n))
        gated = gate_workload(variant, cells[p.workload], p.workload, counted=p.counted, baseline=p.baseline)
        return dataclasses.replace(gated, n=p.n)
    qkv = _inputs(p.device, p.dtypes, p.dtype, p.n)
    key_lengths = None
    if p.no_key:  # batch element 1 sees no key: no run makes it
        key_lengths = torch.tensor([p.n // 3, 0], device=p.device)
    elif p.padding:  # (B,): [n // 2, 1] or so
        key_lengths = torch.tensor(padded_lengths(p.n, BATCH, PADDING), device=p.device)
    return gate_one(
        variant, qkv, causal=p.causal, key_lengths=key_lengths, no_key=p.no_key, counted=p.counted,
        baseline=p.baseline, repeat=p.repeat,
    )  # fmt: skip


def _inputs(device: str, dtypes: Sequence[str], dtype: str, n: int) -> list:
    """q, k, v (B, H, N, d) of `dtype`, drawn in float32 and rounded to it, from one seeded stream per device
    in which the check's dtypes draw in turn (the same values whichever process draws them)."""
    import torch

    from attnbench.variants import torch_dtype

    g = torch.Generator(device=device).manual_seed(0)
    for each in dtypes:
        qkv = [torch.randn(BATCH, HEADS, n, HEAD_DIM, generator=g, device=device) for _ in range(3)]
        if each == dtype:
            return [t.to(torch_dtype(dtype)) for t in qkv]
    raise ValueError(f"dtype {dtype!r} is not among the check's {list(dtypes)}")


TOP_LEFT = "causal top-left"  # the label of causal=True's cell with N_q < N_k: implied, not declared apart


def implied(label: str) -> bool:
    """Whether a workload_cells label is the problem causal=True implies (TOP_LEFT), not a workload the
    variant declares apart."""
    return label.startswith(TOP_LEFT)


SOFTCAP, DECODE_QUERIES = "softcap:5", 4  # a cap that bends the scores of N(0, 1) inputs
DECODE_STEP = "paged decode step"  # the label's start of a paged cache's cells of one query (_decode_steps)


def workload_kind(spec) -> str:
    """Which of a run's workloads a problem's cell (a CellSpec) is one of, as a sweep tells its cells apart:
    'paged' (a paged cache: page_size), 'packed' (a pack: lengths), 'window' (a dense cell with a window),
    else 'dense' (its other workloads: grouped heads, lower-right, a mod, causal top-left; and the causal x
    padding problems). A pack's or a paged cache's cells are its whatever else they change (grouped heads
    in a pack, a decode step of a paged cache): one wrong cell of a pack or a cache makes each suspect."""
    if spec.page_size:
        return "paged"
    if spec.lengths != "none":
        return "packed"
    return "window" if spec.window else "dense"


def span(n: int) -> int:
    """The window and the page size of the workload cells at N = n (16 at the default 100): a window well
    short of N, and several pages a context."""
    return max(2, n // 6)


def workload_cells(variant, device: str, dtype: str, n: int) -> list[tuple[str, object]]:
    """(label, CellSpec) for each workload `variant` declares: the run's cells of them at N = n, causal
    where the workload is, forward+backward where a run may ask it (a paged cell is a decode step). A
    variant that runs packed batches or paged caches only has its grouped heads checked there. A pack or a
    paged cache holds SEQUENCES sequences, a first, a last and the ones between."""
    from attnbench.harness.sweep.spec import CellSpec

    cap, base = variant.cap, CellSpec(variant.name, device, dtype, BATCH, HEADS, n, HEAD_DIM, HEAD_DIM, True,
                                      0.0, "fwdbwd")  # fmt: skip
    queries = max(1, min(DECODE_QUERIES, n // 2))  # never more than a context holds
    decode = dict(seq_len=queries, seq_k=n, page_size=span(n), causal_align="lower-right", pass_="fwd")
    packed = dataclasses.replace(base, batch=SEQUENCES, lengths="uniform")
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
    # a home with fewer queries than keys (a paged decode step) names its causal alignment: a kernel masking
    # the other way fails each of its cells, which must not read as the grouped heads' fault
    at = ", ".join(w for w in (where, _aligned(home)) if w)
    cells = [(f"{at}, {said}" if at else said, dataclasses.replace(home, **c)) for said, c in changes]
    return (
        cells
        + [(", ".join(w for w in (word, _aligned(cell), said) if w), cell) for word, said, cell in homes]
        + (_decode_steps(variant, paged) if cap.paged else [])
    )


def _decode_steps(variant, paged) -> list[tuple[str, object]]:
    """The paged cache's decode step, N_q 1, as every paged run measures it (the paged preset's cells, and
    bench's): causal lower-right and without a causal mask (bench's paged sweep has both), each where
    variant takes it. A kernel's one-query fast path (no mask at all, so the last page's slots past the
    context read) is wrong here and right at N_q 4, whose causal mask hides those slots."""
    if paged.seq_len == 1:  # the home is a decode step already (a context of one or two keys)
        return []
    step = dataclasses.replace(paged, seq_len=1)
    masked = dataclasses.replace(step, causal=True, causal_align="lower-right")
    unmasked = dataclasses.replace(step, causal=False, causal_align="top-left")
    said = f"{DECODE_STEP}, N_q 1 of N_k {paged.seq_k}"
    return [
        (", ".join(w for w in (said, _aligned(cell), f"pages of {cell.page_size}") if w), cell)
        for cell in (masked, unmasked)
        if _takes(variant, cell)
    ]


def _aligned(spec) -> str:
    """'causal lower-right' for a causal cell with fewer queries than keys (where the alignment matters),
    else ''."""
    n_k = spec.seq_k or spec.seq_len
    return f"causal {spec.causal_align}" if spec.causal and n_k != spec.seq_len else ""


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


def gate_workload(variant, spec, label: str, *, counted: bool = True, baseline: str = "") -> GateRow:
    """One declared workload's problem (workload_cells), made as a run makes it, against float64; baseline:
    the variant measured beside it (baseline_for), "" for none."""
    from attnbench.harness.measure.inputs import gate_axes, make_inputs
    from attnbench.variants.handed import exercised

    row = dict(variant=variant.name, device=spec.device, dtype=spec.dtype, causal=spec.causal, padding=False,
               gating=counted, workload=label, kind=workload_kind(spec), implied=implied(label))  # fmt: skip
    declared = exercised(variant, spec.problem())  # said where it raises: a wrong declaration may be why
    inputs, axes = make_inputs(spec, 0), gate_axes(spec)
    return _recorded(row, lambda: _gate(variant, spec.problem(), inputs, row, axes, baseline), declared)


def gate_one(
    variant, qkv, *, causal: bool, key_lengths, no_key: bool = False, counted: bool = True,
    baseline: str = "", repeat: bool = False,
) -> GateRow:  # fmt: skip
    """One variant on q, k, v (B, H, N, d) against float64: unsupported (with the reason), pass, FAIL (with
    the reason) or error (what it raised, in one line). no_key: the extra problem, forward only, not gated;
    baseline: the variant measured beside it (baseline_for), "" for none; repeat: two calls compared."""
    from attnbench import variants
    from attnbench.variants import dtype_name
    from attnbench.variants.handed import exercised

    q = qkv[0]
    b, h, n, d = q.shape
    padded = key_lengths is not None
    row = dict(variant=variant.name, device=q.device.type, dtype=dtype_name(q.dtype), causal=causal,
               padding=padded, gating=counted and not no_key, no_key=no_key, n=n)  # fmt: skip
    prob = variants.Problem(device=row["device"], dtype=row["dtype"], batch=b, heads=h, seq_len=n, seq_k=n,
                            d_k=d, d_v=d, causal=causal, padding=0.25 if padded else 0.0,
                            pass_="fwd" if no_key else "fwdbwd")  # fmt: skip
    gated = partial(_gate, variant, prob, (*qkv, key_lengths), row, baseline=baseline, repeat=repeat)
    return _recorded(row, gated, exercised(variant, prob))  # where it raises: a paged=True kernel run here


def _recorded(row: dict, gated, declared: str = "") -> GateRow:
    """gated()'s GateRow, or what it raised as the row's status and one-line reason (with the declarations
    the problem exercised: failures.failure): anything but a KeyboardInterrupt, SystemExit too, as a run's
    cell boundary takes it (harness.measure.cell)."""
    try:
        return gated()
    except BaseException as exc:  # a plug-in's fault of any kind is its row, never the end of the check
        from attnbench.harness.measure.failures import failure, stops_the_process

        if stops_the_process(exc):
            raise

        # UnsupportedError (refused at call time): unsupported
        status, message = failure(exc, row["device"], declared=declared)
        return GateRow(**row, status="unsupported" if status == "unsupported" else "error", reason=message)


def _gate(
    variant, prob, inputs, row: dict, axes: dict | None = None, baseline: str = "", repeat: bool = False
) -> GateRow:
    """The gate of one problem: inputs (q, k, v, key_lengths), axes the gate's keywords of the added axes
    (harness.measure.inputs.gate_axes); baseline: the variant whose forward error is measured beside (its
    float64 reference computed once, for both); repeat: two calls on the same inputs compared. What a
    variant raises here is _recorded's."""
    from attnbench.harness.measure import correctness
    from attnbench.harness.measure.attention64 import reference

    reason = variant.check(prob)
    backward = prob.backward
    if reason and "backward" in reason:  # no backward: gate the forward alone
        backward, reason = False, variant.check(dataclasses.replace(prob, pass_="fwd"))
    if reason:
        return GateRow(**row, status="unsupported", reason=str(reason))
    q, k, v, key_lengths = inputs
    rules = {"causal": prob.causal, "key_lengths": key_lengths, **(axes or {})}
    ref = reference(q, k, v, **rules) if baseline else None  # before the variant: it may write its inputs
    r = correctness.check(variant, q, k, v, backward=backward, ref=ref, repeat=repeat, **rules)
    beside = _baseline_error(baseline, prob, (q, k, v), rules, ref) if baseline and not r.changed else None
    return GateRow(
        **row,
        status="pass" if r.ok else "FAIL",
        rel_err=r.rel_err,
        grad_rel_err=r.grad_rel_err,
        grad_against=r.grad_against,
        masked_rows=r.masked_rows,
        reason=fail_reason(r) if not r.ok else _held(r),
        quant=r.quant,
        sqnr_db=r.sqnr_db,
        baseline=baseline if beside is not None else "",
        baseline_rel_err=beside,
        strides=r.strides,
        calls_differ=r.calls_differ,
    )


def _baseline_error(name: str, prob, qkv, rules: dict, ref) -> float | None:
    """The forward rel_err of variant `name` on the problem's inputs, against its float64 reference `ref`;
    None where it does not take the problem (sdpa takes no pack or paged cache) or fails to answer: the
    baseline's fault is never the gated variant's row."""
    from attnbench import variants
    from attnbench.harness.measure import correctness

    base = variants.get(name)
    try:
        if base.check(dataclasses.replace(prob, pass_="fwd")) is not None:
            return None
        return correctness.check(base, *qkv, ref=ref, **rules).rel_err
    except Exception:  # a baseline that raises here has no error to show beside
        return None


def _held(r) -> str:
    """A passing row's note: a declared approximation's bound, which it passed instead of the dtype's."""
    return f"declared approximate: held to rel_err {r.approximate:g}" if r.approximate else ""


def fail_reason(r) -> str:
    """Why a gate result failed, in one line, as a run's row says it: the inputs it modified in place, the
    likely cause where the gate recognised one, a non-finite output and its rows, or which error passed
    which tolerance."""
    from attnbench.harness.measure.outcomes import mutation
    from attnbench.results.formulas import tolerance_text

    parts = [mutation(r.changed)] if r.changed else []
    parts += [r.hint] if r.hint else []
    if not r.passed and math.isinf(r.rel_err):  # NaN or inf somewhere (correctness._errors)
        parts.append("non-finite output (NaN or inf)")
        parts += [r.where] if r.where else []
    elif not r.passed:
        parts.append(f"output rel_err {r.rel_err:.1e} > tolerance {tolerance_text(r.tolerance)}")
        parts += [r.where] if r.where else []
    if r.grad_passed is False:
        from attnbench.harness.measure.own_gradient import bound_text, erring

        bound = bound_text(r.grad_tolerance, r.grad_against) + erring(r.grad_rel_err, r.grad_tolerance)
        parts.append(f"gradient rel_err {r.grad_rel_err:.1e} > tolerance {bound}")
    return "; ".join(parts)
