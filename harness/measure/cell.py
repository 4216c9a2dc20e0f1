"""Measure one cell in steps, then one result row: prepare, time_call, peak, check_after -> measure_cell.

- prepare(spec, settings, cache) -> Prepared: copies of the shape's pristine seeded inputs in the memory
  layout the variant declares (`handed`), the variant's setup hook if it has one (setup_ms), one forward
  call (first_call_ms) held to the output contract (harness.measure.contract) and gated against float64
  (gradients too for fwdbwd), for a dropout cell the statistical dropout check
  (harness.measure.dropout_check), whether that modified the inputs, and the call to time;
- cell_timer(call, device, settings) -> timing.TimerChoice: perf_counter, CUDA events or a CUDA graph, and
  why (the row's timing_mode and timing_reason);
- time_call(call, settings, timer) -> timing.Measurement: the harness's sampling loop under the budgets
  (on CUDA inside harness.measure.telemetry's NVML sampling: clocks, power, temperature, `throttled`);
- peak(call, device) -> (bytes, method): peak memory of one more call, outside the timed runs (a forward
  cell without dropout measures it on check_after's refill call instead: peak_on_refill);
- check_after(ready, spec, settings, cache) -> AfterCheck: the timed calls left their inputs unchanged,
  and the timed callable's answer follows fresh inputs (another seed), not one it remembered.

measure_cell composes them for a cell's first visit, and times it again for a later one, as `attnbench
run`'s worker asks; the pytest-benchmark plugin uses prepare,
peak and check_after and lets pytest-benchmark time the call. Prepared.verdict(m, after) is the status:
`wrong` names every reason found. The steps let the variant's exceptions through: the
caller's cell boundary turns them into the row's status (harness.measure.failures). measure_cell runs inside a
worker process; only bugs in the harness itself escape it (and the parent records those as `error` too).
The row itself is built by harness.measure.rows; the texts of its verdicts are harness.measure.outcomes'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attnbench import variants
from attnbench.harness.measure import (
    contract,
    correctness,
    dropout_check,
    energy,
    memory,
    own_gradient,
    telemetry,
    timing,
)
from attnbench.harness.measure.failures import (
    arm_recompile_limit,
    disarm_recompile_limit,
    failure,
    stops_the_process,
)
from attnbench.harness.measure.inputs import (
    InputCache,
    call_options,
    cu_seqlens,
    gate_axes,
    handed,
    judged_as,
    make_inputs,
    timed_call,
)
from attnbench.harness.measure.outcomes import (
    NOT_FOLLOWING,
    REFILLED,
    RETAINED_METHOD,
    held,
    mutation,
    retains,
)
from attnbench.harness.measure.rows import executed_flops, finish, start_row
from attnbench.harness.measure.varied import Stale, secret_seed, varied_failure
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import median_rates, noisy_note, summarize
from attnbench.results.schema import GATE_FAILED
from attnbench.variants.handed import exercised

FRESH_ROWS = 64  # query rows of the fresh-input re-check: enough to catch a remembered answer, cheap
FRESH_SEED_OFFSET = 1  # the re-check's inputs: seed settings.seed + this, never the gated inputs' seed


def _ms(ms: float | None) -> float | None:
    """A row's milliseconds: rounded to the nanosecond, None kept."""
    return None if ms is None else round(ms, 6)


@dataclass(frozen=True)
class Prepared:
    """A cell ready to be timed: its call, built on inputs whose output was checked against float64."""

    call: Callable[[], None]  # timed_call: forward, or forward + backward; call.reset_grads() frees grads
    fn: Callable[..., Any]  # what is gated and timed: the variant's fn, or what its setup hook returned
    gate: correctness.GateResult  # the forward output against the float64 reference
    grad_rel_err: float | None  # None: a fwd cell, or one above settings.grad_check_elems (not checked)
    changed: tuple[str, ...] = ()  # inputs the gated call (or the gradient check) modified in place
    setup_ms: float | None = None  # the variant's setup hook, timed apart; None: it has none
    first_call_ms: float | None = None  # the gated forward call: lazy init, autotune, compile, plans
    dropout: dropout_check.DropoutResult | None = None  # a dropout cell's statistical check; None: p = 0
    layout: str = "bhnd"  # the memory layout q, k, v were handed in (the variant's Capability.layout)
    kernel: str | None = None  # what the variant's kernel hook says a call runs (kernel_of)
    inputs_ms: float | None = None  # the inputs copied from the cache in the variant's layout, validated
    gate_ms: float | None = None  # the gate and its float64 reference, the gradient and dropout checks
    grad_tol: float | None = None  # what grad_rel_err is held to (None: 4 x the gate's tolerance)
    grad_against: str = ""  # a declared approximation's gradients: own_gradient.OWN or EXACT

    @property
    def grad_ok(self) -> bool:
        return self.grad_rel_err is None or self.grad_rel_err <= self.grad_tolerance

    @property
    def grad_tolerance(self) -> float:
        return (
            self.grad_tol
            if self.grad_tol is not None
            else self.gate.tolerance * correctness.GRAD_TOLERANCE_FACTOR
        )

    def fields(self) -> dict[str, Any]:
        """The gate's columns of the result row."""
        return {
            "max_abs_err": self.gate.max_abs_err,
            "rel_err": self.gate.rel_err,
            "grad_rel_err": self.grad_rel_err,
            "masked_rows": self.gate.masked_rows,
            "rows_checked": self.gate.rows_checked,
            **judged_fields(self.gate),
            **(self.dropout.fields() if self.dropout is not None else {}),
        }

    def setup_fields(self) -> dict[str, Any]:
        """The columns of how a cell was set up apart from its timed calls: the layout of its inputs, what
        the setup hook and the first call cost."""
        return {
            "layout": self.layout,
            "kernel": self.kernel,
            "setup_ms": _ms(self.setup_ms),
            "first_call_ms": _ms(self.first_call_ms),
            "inputs_ms": _ms(self.inputs_ms),
            "gate_ms": _ms(self.gate_ms),
        }

    def verdict(
        self, m: timing.Measurement | None = None, after: AfterCheck | None = None
    ) -> tuple[str, str]:
        """(status, message): wrong with every reason found (inputs modified, the float64 gate, the answer
        on fresh inputs after timing, the dropout check), else ok, flagged when m is noisy. A wrong cell is
        still timed (and never ranked), so the verdict comes after the timing and `check_after`."""
        reasons = []
        changed = self.changed + (after.changed if after is not None else ())
        if changed:
            reasons.append(mutation(changed))
        if not self.gate.passed or not self.grad_ok:
            if not self.gate.passed:
                what = self.gate.describe()
            else:
                bound = own_gradient.bound_text(self.grad_tolerance, self.grad_against)
                which = own_gradient.erring(self.grad_rel_err, self.grad_tolerance)  # dq, dk or dv
                what = f"grad rel_err {self.grad_rel_err:.2e} > {bound}{which}"
            reasons.append(f"{GATE_FAILED}: {what}")
        elif after is not None:  # right once, wrong on other values: an answer remembered
            seed = after.seed
            if after.fresh is not None and not after.fresh.passed:  # ... for a shape, or for values
                reasons.append(fresh_failure(after.fresh, seed))
            if after.refill is not None and not after.refill.passed:  # ... for the tensor objects timed
                reasons.append(f"{NOT_FOLLOWING}: {REFILLED} (seed {seed}) {after.refill.describe()}")
        if self.dropout is not None and not self.dropout.passed:
            reasons.append(f"failed the dropout check: {self.dropout.describe()}")
        if reasons:
            return "wrong", "; ".join(reasons)
        return "ok", noisy_note(m.rel_iqr) if m is not None and m.noisy else ""


def judged_fields(gate: correctness.GateResult) -> dict[str, Any]:
    """How the gate judged the variant, as columns: a declared approximation's bound; a quantising
    variant's recipe, the rounding's own error and the output's SQNR against the original inputs
    (correctness.gate); none for an exact kernel that does not quantise."""
    # the rel_err the gate held it to: its declared bound, or its dtype's tolerance where that is larger
    out: dict[str, Any] = {"approximate": gate.tolerance} if gate.approximate else {}
    if gate.quant:
        out.update(quant_recipe=gate.quant, quant_rel_err=gate.quant_rel_err, sqnr_db=gate.sqnr_db)
    return out


def fresh_failure(fresh: correctness.GateResult, seed: int) -> str:
    return f"{NOT_FOLLOWING}: on fresh inputs (seed {seed}) {fresh.describe()}"


@dataclass(frozen=True)
class AfterCheck:
    """What is checked after the timed calls: the inputs they were given are unchanged, and the answer
    still follows the inputs, so that nothing remembered from the gated call is being timed: on fresh
    inputs of the same shape (another seed: an answer remembered for a shape), and on the very tensors the
    timed calls used, refilled in place with those fresh values (an answer remembered for the tensor
    objects: by id(), data_ptr(), in a setup hook's closure)."""

    changed: tuple[str, ...]  # inputs the timed calls modified in place
    # the bound callable's output on fresh inputs against float64; None: checked in the second visit
    fresh: correctness.GateResult | None
    seed: int
    refill: correctness.GateResult | None = None  # its output on the timed tensors refilled; None: no inputs
    peak: tuple[int, str] | None = None  # (bytes, method) of the refill call, where asked
    ms: float | None = None  # the checks' wall time (their calls, inputs and float64 reference)

    def fields(self) -> dict[str, Any]:
        return {
            "fresh_rel_err": None if self.fresh is None else self.fresh.rel_err,
            "refill_rel_err": None if self.refill is None else self.refill.rel_err,
            "checks_ms": _ms(self.ms),
        }


def kernel_of(variant: variants.Variant, q, k, v, opts: dict[str, Any], backward: bool) -> str | None:
    """The variant's kernel hook's answer for these inputs (the row's `kernel`), at most 200 characters;
    None without a hook. q, k, v are handed as the timed call has them: needing gradients in a forward +
    backward cell (views: nothing is copied). A hook that raises is named so: it describes the cell and
    never fails it."""
    if variant.cap.kernel is None:
        return None
    q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
    try:
        named = variant.cap.kernel(q, k, v, **opts)
    except Exception as exc:  # noqa: BLE001 - a describing hook's error is the column's text
        return f"unknown ({type(exc).__name__}: {exc})"[:200]
    return None if named is None else str(named)[:200]


def prepare(spec: CellSpec, settings: Settings, cache: InputCache | None = None) -> Prepared:
    """Inputs (copies of the cache's pristine copy, in the variant's layout), the variant's setup hook if
    it has one (timed apart), one validated forward call (timed: the first-call cost) gated against float64,
    gradients for fwdbwd (up to settings.grad_check_elems), both without dropout; for a dropout cell the
    dropout check; a check that none of it modified the inputs, and the call to time (with dropout_p). The
    caller has checked that the variant exists and supports the cell; whatever the variant raises here
    propagates (see harness.measure.failures)."""
    t_start = time.perf_counter()
    variant = variants.get(spec.variant)
    cache = cache or InputCache()
    inputs = cache.get(spec, settings.seed, variant.cap.layout)
    q, k, v, kl = inputs
    opts = call_options(spec, kl)
    variant.validate(q, k, v, dropout_p=spec.dropout, **opts)
    inputs_ms = (time.perf_counter() - t_start) * 1e3

    setup_ms = None
    if variant.cap.setup is not None:  # plans, block masks, compilation: kept out of the timed call
        fn, setup_ms = timing.timed_once(spec.device, variant.bind, q, k, v, **opts)
    else:
        fn = variant.fn
    arm_recompile_limit()

    # one validated forward call: refusals, OOMs and exceptions surface here; its output is gated exactly,
    # so without dropout (a dropout cell's random output is held to harness.measure.dropout_check's rules
    # below)
    with torch.no_grad():
        out, first_ms = timing.timed_once(spec.device, fn, q, k, v, dropout_p=0.0, scale=None, **opts)
    contract.check_output(out, q, v)  # before the gate reads it: a tuple or a float64 answer is named as such
    rows = correctness.sample_rows(
        spec.dims[1], settings.check_rows, seed=settings.seed, cu_seqlens=cu_seqlens(spec)
    )
    pq, pk, pv, pkl = cache.pristine  # the gate reads the values the variant was given, not what it left
    gate = correctness.gate(
        out, pq, pk, pv, causal=spec.causal, key_lengths=pkl, rows=rows, ref=cache.reference(spec, rows),
        **judged_as(spec), **gate_axes(spec),
    )  # fmt: skip
    del out  # free the output before the gradient check allocates its own
    grad_rel, grad_tol, grad_against = None, None, ""
    backward = spec.pass_ == "fwdbwd"
    changed = cache.changed(inputs)
    # a variant that writes into its inputs is wrong already; autograd would refuse its write into a leaf
    b, n_q, n_k = spec.dims
    scores = b * spec.heads * n_q * n_k
    if backward and not changed and scores <= settings.grad_check_elems:
        judged = correctness.judged_gradients(fn, q, k, v, gate=gate, dtypes=variant.cap.dtypes, **opts)
        grad_rel, grad_tol, grad_against = judged.rel_err, judged.tolerance, judged.against
        changed = cache.changed(inputs)
    dropped = None
    if spec.dropout > 0 and not changed:  # K + 2 more forward calls (see harness.measure.dropout_check)
        dropped = dropout_check.check(
            fn, q, k, v, p=spec.dropout, rows=rows, ref=cache.reference(spec, rows), seed=settings.seed,
            deterministic=variant.cap.dropout_deterministic, **opts,
        )  # fmt: skip
        changed = cache.changed(inputs)

    # the timed callable: the variant's own function (no registry wrapper), inputs already validated; with
    # dropout, every timed call draws its mask: that is part of the work measured
    call = timed_call(
        fn, q, k, v, backward=backward, vary=True, judged=judged_as(spec), dropout_p=spec.dropout, **opts
    )
    kernel = kernel_of(variant, q, k, v, opts, backward)
    took_ms = (time.perf_counter() - t_start) * 1e3
    return Prepared(
        call=call,
        fn=fn,
        gate=gate,
        grad_rel_err=grad_rel,
        grad_tol=grad_tol,
        grad_against=grad_against,
        changed=changed,
        setup_ms=setup_ms,
        first_call_ms=first_ms,
        dropout=dropped,
        layout=variant.cap.layout,
        kernel=kernel,
        inputs_ms=inputs_ms,
        gate_ms=took_ms - inputs_ms - (setup_ms or 0.0) - first_ms,
    )


def defers_fresh_check(spec: CellSpec, rounds: int) -> bool:
    """Whether a cell visited `rounds` times runs its fresh-input check (check_after) in its second visit,
    as that visit's warm-up call, instead of after its first visit's timed calls: a forward CPU cell
    without dropout, whose check call (the bound callable, the same shapes, no autograd) warms what its
    timed call needs, so that the visit pays no separate warm-up call (issue 25: later visits' warm-ups
    were a tenth of the main job). The refill check stays after the first visit's timed calls: it is
    what sees an answer remembered for the very tensors timed."""
    return rounds > 1 and spec.pass_ == "fwd" and spec.dropout == 0 and spec.device != "cuda"


def fresh_inputs(spec: CellSpec, settings: Settings):
    """(q, k, v, key_lengths), the query rows to check and their float64 reference, of the checks after
    timing: inputs of the same shape from seed settings.seed + FRESH_SEED_OFFSET, FRESH_ROWS rows drawn
    from a seed no variant can know (varied.secret_seed), so that none can compute those rows alone."""
    q, k, v, kl = make_inputs(spec, settings.seed + FRESH_SEED_OFFSET)
    n_rows = FRESH_ROWS if settings.check_rows is None else min(FRESH_ROWS, settings.check_rows)
    opts = {"causal": spec.causal, "key_lengths": kl, **gate_axes(spec)}
    rows = correctness.sample_rows(spec.dims[1], n_rows, seed=secret_seed(), cu_seqlens=opts["cu_seqlens"])
    return (q, k, v, kl), rows, correctness.reference(q, k, v, rows=rows, **opts), opts


def fresh_check(fn: Callable[..., Any], layout: str, spec: CellSpec, settings: Settings, made=None):
    """(gate, ms): the bound callable fn's answer on new tensors holding fresh inputs (fresh_inputs, in
    `layout`; made: what fresh_inputs returned already), without dropout, against float64; ms: that one
    call's wall time."""
    (q, k, v, kl), rows, ref, opts = made or fresh_inputs(spec, settings)
    given = handed((q, k, v, kl), layout, spec.paged)  # it may write into what it is given
    with torch.no_grad():  # without dropout, as the gate: the answer must follow the inputs exactly
        out, ms = timing.timed_once(
            spec.device, fn, *given[:3], dropout_p=0.0, scale=None, **call_options(spec, given[3])
        )
    contract.check_output(out, q, v)  # the timed callable may break the contract on other inputs
    return correctness.gate(out, q, k, v, rows=rows, ref=ref, **judged_as(spec), **opts), ms


def check_after(
    ready: Prepared,
    spec: CellSpec,
    settings: Settings,
    cache: InputCache,
    measure_peak: bool = False,
    fresh: bool = True,
) -> AfterCheck:
    """After the timed calls: did they modify their inputs, and does the timed callable's answer follow
    the inputs? Two more forward calls, each compared with float64 on FRESH_ROWS sampled query rows of
    fresh inputs of the same shape (seed settings.seed + FRESH_SEED_OFFSET): the timed tensors refilled in
    place with them (`refill_in_place`), then new tensors holding them (in the layout prepare handed;
    fresh=False: not here, the cell's second visit runs it, defers_fresh_check).
    measure_peak: the refill call's peak memory is measured too (AfterCheck.peak; see peak_on_refill)."""
    t0 = time.perf_counter()
    given = getattr(ready.call, "inputs", None)  # a timed_call's; any other callable: nothing to compare
    changed = () if given is None else cache.changed(given)  # before the refill below rewrites them
    refill = peaked = None
    made = fresh_inputs(spec, settings) if given is not None or fresh else None
    if given is not None:  # first, while whatever the variant remembered of the timed calls is untouched
        (q, k, v, kl), rows, ref, opts = made
        if measure_peak:
            held_out: list[torch.Tensor] = []
            peaked = memory.peak(lambda: held_out.append(refill_in_place(ready, (q, k, v, kl))), spec.device)
            out = held_out.pop()
        else:
            out = refill_in_place(ready, (q, k, v, kl))
        contract.check_output(out, q, v)
        refill = correctness.gate(out, q, k, v, rows=rows, ref=ref, **judged_as(spec), **opts)
        del out
    fresh_gate = fresh_check(ready.fn, ready.layout, spec, settings, made)[0] if fresh else None
    return AfterCheck(
        changed=changed,
        fresh=fresh_gate,
        seed=settings.seed + FRESH_SEED_OFFSET,
        refill=refill,
        peak=peaked,
        ms=(time.perf_counter() - t0) * 1e3,
    )


def refill_in_place(ready: Prepared, new) -> torch.Tensor:
    """The timed callable's output on the very tensors its timed calls used (ready.call.inputs: the same
    objects, storages and data_ptr()s, in the layout they were handed in), after copying the values of
    `new` (q, k, v, key_lengths) into them in place, called exactly as the timed calls call it
    (ready.call.kwargs, under autograd for fwdbwd) but without dropout, so that the gate can hold it to
    float64. An answer remembered for those tensor objects (keyed on id() or data_ptr(), kept by a setup
    hook that was handed them) is the old one, and fails the gate. copy_ bumps each tensor's _version, so a
    cache that honestly checks it (xformers' plan) sees new inputs. Run after cache.changed has read them:
    the inputs are the cell's own copies, and nothing compares them with the pristine ones after this."""
    call = ready.call
    with torch.no_grad():  # a fwdbwd cell's inputs are autograd leaves: written outside autograd
        for t, values in zip(call.inputs, new, strict=True):
            if t is not None:
                t.copy_(values)  # into t's own strides: a "bnhd" tensor keeps its layout
    q, k, v = call.inputs[:3]
    with torch.set_grad_enabled(call.backward):
        out = ready.fn(q, k, v, **{**call.kwargs, "dropout_p": 0.0})
    return out.detach() if isinstance(out, torch.Tensor) else out


CPU_REASON = "cpu"  # timing_reason of a CPU cell: perf_counter is the one CPU timer, whatever settings.timing


def cell_timer(call: Callable[[], object], device: str, settings: Settings) -> timing.TimerChoice:
    """The harness's timer for a cell's call, and what its row says of it: perf_counter on CPU; on CUDA,
    events or a CUDA graph of several calls as settings.timing says (auto: chosen for this call by
    timing.choose_timing), L2 flushed as settings say (timing.cuda_timer)."""
    if device != "cuda":
        return timing.TimerChoice(timing.CpuTimer(), timing.CpuTimer.mode, CPU_REASON)
    return timing.cuda_timer(call, settings.timing, flush_l2=settings.flush_l2)


def varied_check(call: Callable[[], object]) -> tuple[Stale | None, float]:
    """(whether the timed answers of a call whose inputs varied between calls followed them, None where
    nothing varied; the ms it took, counted in checks_ms), its q put back (harness.measure.varied)."""
    state = getattr(call, "varied", None)
    t0 = time.perf_counter()
    result = None if state is None else state.finish()
    return result, (time.perf_counter() - t0) * 1e3


def time_call(
    call: Callable[[], object],
    settings: Settings,
    timer: timing.Timer,
    warmed_ms: float = 0.0,
    share: int = 1,
) -> timing.Measurement:
    """The call timed by harness.measure.timing.measure under the warm-up and sampling budgets of settings;
    warmed_ms: the same call's time just before, counted toward the warm-up (timing.measure); share: one
    visit of a cell visited that many times takes 1/share of the budgets (Settings.budget).
    (Not named `time`: this module times with the `time` module too.)"""
    budget = settings.budget(share)
    # a CUDA graph timer's sample is the mean of its replay's calls: the budgets count calls, not samples
    budget = timing.replay_budget(budget, getattr(timer, "calls_per_sample", 1))
    return timing.measure(call, timer, budget, warmed_ms)


def warmed_ms(ready: Prepared, spec: CellSpec, chosen: timing.TimerChoice) -> float:
    """The ms of the gated first call that count toward the timed call's warm-up: all of it for a forward
    cell without dropout on CPU, whose first call is the very call timed (after compiling, planning, lazy
    init: the call has run once warm); 0 where the timed call differs from it (fwdbwd, dropout), or is
    timed on a CUDA timer (events or a CUDA graph, whose warm-up sets up what the first call did not)."""
    if spec.pass_ != "fwd" or spec.dropout > 0 or chosen.mode != timing.CpuTimer.mode:
        return 0.0
    return float(ready.first_call_ms or 0.0)


def peak_on_refill(ready: Prepared, spec: CellSpec) -> bool:
    """Whether a cell's peak memory is measured on check_after's refill call instead of one more call of
    its own: for a forward cell without dropout, whose refill call is the timed call exactly (the same
    tensors, keywords and grad mode; refill_in_place), so that the two would measure the same peak and
    the cell pays one call less (issue 25: a tenth of a slow cell's wall time). A fwdbwd cell's refill
    runs no backward, and a dropout cell's runs without its mask: their peak keeps its own call."""
    inputs = getattr(ready.call, "inputs", None)
    return spec.pass_ == "fwd" and spec.dropout == 0 and inputs is not None


def peak(call: Callable[[], object], device: str) -> tuple[int, str]:
    """(bytes, method): the peak memory of one call above what is live before it, outside the timed
    runs. A timed_call's gradients from its last call are freed first, so they are not counted as live."""
    reset = getattr(call, "reset_grads", None)
    if reset is not None:
        reset()
    return memory.peak(call, device)


def harness_tensors(cache: InputCache, ready: Prepared | None = None) -> tuple[object, ...]:
    """The tensors of a cell that are the harness's, not its variant's memory: the input cache's pristine
    inputs and float64 reference, and the timed call's inputs and dO (timed_call's call.owned)."""
    own = getattr(ready.call, "owned", ()) if ready is not None else ()
    return (*(cache.pristine or ()), cache.ref, *own)


def retained_bytes(
    ready: Prepared, spec: CellSpec, cache: InputCache, before: dict[int, Any], cuda_before: int = 0
) -> int:
    """Bytes the variant still holds after the cell's calls (outputs and gradients dropped): the tensors
    it made in this cell or an earlier one of this process (its numerics probe, its cells) and keeps alive,
    less the harness's own (memory.HOLDINGS; `before` is HOLDINGS.mark() from before the variant was bound
    or called in this cell). On CUDA, torch.cuda.memory_allocated's rise over the cell where that is more
    (`cuda_before`: memory.cuda_live_bytes then): it sees C++-held tensors too, though only the cell's."""
    ready.call.reset_grads()
    own = harness_tensors(cache, ready)
    memory.HOLDINGS.attribute(spec.variant, before, own)
    held = memory.HOLDINGS.held(spec.variant, spec.device, own)
    if spec.device == "cuda":
        held = max(held, memory.cuda_live_bytes(own) - cuda_before)
    return held


def measure_cell(
    spec: CellSpec,
    settings: Settings,
    cache: InputCache | None = None,
    timer: timing.Timer | None = None,
    visit: tuple[int, int] = (1, 1),
) -> dict[str, Any]:
    """One visit of a cell as a result row (see results.schema). visit: (i, R), the cell's i-th visit of
    the run's R (harness.run.plan), each sampling 1/R of the budgets; a row of several visits is their
    summary (results.visits.summary).

    The first visit measures the cell fully (`_first`): prepare (the gate), time_call, peak memory and
    check_after. A later one (`_again`) times it again on the same inputs after the setup hook and one
    untimed warm-up call; what the first established (the gate, the refill check, peak memory) is not
    done again, but where the first left it (defers_fresh_check) the second visit's warm-up call is the
    fresh-input check (`wrong` when it fails, after the visit is timed). Whatever the variant raises
    becomes the row's status (harness.measure.failures)."""
    t_start = time.perf_counter()
    row = start_row(spec)
    index, rounds = visit
    try:
        variant = variants.get(spec.variant)
    except variants.VariantError as exc:
        return finish(row, "error", str(exc))
    if index <= 1:
        reason = variant.check(spec.problem())
        if reason:
            return finish(row, "unsupported", reason)
    row["executed_flops"] = executed_flops(spec, variant.cap.varlen)
    cache = cache or InputCache()
    held_ready: list[Prepared] = []  # the first visit's Prepared, for failure() to read
    try:
        if index <= 1:
            status, message, m = _first(row, spec, settings, cache, timer, rounds, held_ready)
        else:
            status, message, m = _again(row, spec, settings, cache, timer, visit, variant)
        row.update(
            **summarize(m.samples_ms),
            samples_ms=[round(s, 6) for s in m.samples_ms],
            visit_medians_ms=[m.median],
            visit_samples=[len(m.samples_ms)],
            stop_reason=m.stop_reason,
            **median_rates(row, m.median),
            elapsed_s=round(time.perf_counter() - t_start, 3),
        )
        return finish(row, status, message)
    except BaseException as exc:  # the cell boundary: whatever the variant raised becomes this cell's row
        if stops_the_process(exc):
            raise
        declared = exercised(variant, spec.problem())  # a wrong declaration may be why
        return finish(row, *failure(exc, spec.device, held_ready[0] if held_ready else None, declared))
    finally:
        disarm_recompile_limit()


def _first(
    row: dict[str, Any],
    spec: CellSpec,
    settings: Settings,
    cache: InputCache,
    timer: timing.Timer | None,
    rounds: int,
    held_ready: list[Prepared],
) -> tuple[str, str, timing.Measurement]:
    """A cell's first visit: prepare, time_call, peak, check_after, retained bytes; the row's gate, timer,
    telemetry, check and memory columns filled in; (status, message, the measurement)."""
    # what is alive before the variant is first bound or called in this cell (retained_bytes)
    t_mark = time.perf_counter()
    before = memory.HOLDINGS.mark()
    cuda_before = memory.cuda_live_bytes(harness_tensors(cache)) if spec.device == "cuda" else 0
    marked_ms = (time.perf_counter() - t_mark) * 1e3  # in teardown_ms, with the count it is the base of
    ready = prepare(spec, settings, cache)
    held_ready.append(ready)
    row.update(ready.fields(), **ready.setup_fields())  # kept in the row if timing or memory fails below
    t_timing = time.perf_counter()
    chosen = timing.injected(timer) if timer is not None else cell_timer(ready.call, spec.device, settings)
    row.update(chosen.fields())
    try:
        with telemetry.sampling(spec.device) as sampled:  # SM clock, power, temperature: CUDA only
            m = time_call(ready.call, settings, chosen.timer, warmed_ms(ready, spec, chosen), rounds)
            row["event_cover"] = timing.event_cover(chosen.timer)  # CUDA: checked by events_mismatch
    finally:
        chosen.close()  # a CUDA graph's memory is given back before the peak is measured
        chosen = None  # and a CUDA timer's L2 flush buffer before the retained bytes are
    row["timing_ms"] = _ms((time.perf_counter() - t_timing) * 1e3)
    if spec.device == "cuda":
        row.update(telemetry.summarise(sampled.samples))
    if settings.energy and spec.device == "cuda":  # >= 1 s of the timed callable, outside its timing
        row.update(energy.fields(ready.call, spec, row["flops"], m.median))
    between, varied_ms = varied_check(ready.call)  # before anything else reads the inputs: q is put back
    on_refill = peak_on_refill(ready, spec)
    t_peak = time.perf_counter()
    if not on_refill:
        peak_bytes, method = peak(ready.call, spec.device)
    row["peak_ms"] = _ms((time.perf_counter() - t_peak) * 1e3)  # on the refill call: in checks_ms
    fresh = not defers_fresh_check(spec, rounds)
    after = check_after(ready, spec, settings, cache, measure_peak=on_refill, fresh=fresh)
    t_teardown = time.perf_counter()
    if on_refill:
        peak_bytes, method = after.peak or peak(ready.call, spec.device)
    retained = retained_bytes(ready, spec, cache, before, cuda_before)
    row["teardown_ms"] = _ms((time.perf_counter() - t_teardown) * 1e3 + marked_ms)
    status, message = ready.verdict(m, after)
    if between is not None and not between.passed and status == "ok":  # a wrong cell keeps its first reason
        status, message = "wrong", "; ".join(filter(None, (varied_failure(between), message)))
    if retains(retained, peak_bytes):  # the memory story counts it: held between calls, needed by each
        peak_bytes, method = peak_bytes + retained, f"{method} {RETAINED_METHOD}"
        message = "; ".join(filter(None, (message, held(retained))))
    row.update(**after.fields(), peak_mem_bytes=peak_bytes, retained_mem_bytes=retained, mem_method=method)
    row["checks_ms"] = _ms((row.get("checks_ms") or 0.0) + varied_ms)
    return status, message, m


def _again(
    row: dict[str, Any],
    spec: CellSpec,
    settings: Settings,
    cache: InputCache,
    timer: timing.Timer | None,
    visit: tuple[int, int],
    variant: Any,
) -> tuple[str, str, timing.Measurement]:
    """A later visit: the same inputs (inputs_ms), the setup hook again (setup_ms), one untimed warm-up call
    (first_call_ms) or, in the second visit of a cell that deferred it, the fresh-input check as that
    call (checks_ms, fresh_rel_err), then its share of the budget; (status, message, the measurement)."""
    index, rounds = visit
    t_inputs = time.perf_counter()  # made again where the worker's cache holds another shape's by now
    q, k, v, kl = cache.get(spec, settings.seed, variant.cap.layout)
    inputs_ms = (time.perf_counter() - t_inputs) * 1e3
    opts = call_options(spec, kl)
    setup_ms = None
    if variant.cap.setup is not None:
        fn, setup_ms = timing.timed_once(spec.device, variant.bind, q, k, v, **opts)
    else:
        fn = variant.fn
    arm_recompile_limit()
    backward = spec.pass_ == "fwdbwd"
    call = timed_call(
        fn, q, k, v, backward=backward, vary=True, judged=judged_as(spec), dropout_p=spec.dropout, **opts
    )
    fresh = checks_ms = first_ms = None
    if index == 2 and defers_fresh_check(spec, rounds):  # the check is the warm-up call
        t_check = time.perf_counter()
        fresh, warm_ms = fresh_check(fn, variant.cap.layout, spec, settings)
        checks_ms = (time.perf_counter() - t_check) * 1e3  # with its inputs and float64 reference
    else:
        _, first_ms = timing.timed_once(spec.device, call)
        warm_ms = first_ms
    t_timing = time.perf_counter()
    chosen = timing.injected(timer) if timer is not None else cell_timer(call, spec.device, settings)
    row.update(chosen.fields())
    # on CPU the warm-up call is the very call timed: it counts toward the visit's warm-up budget
    warmed = warm_ms if chosen.mode == timing.CpuTimer.mode else 0.0
    try:
        m = time_call(call, settings, chosen.timer, warmed, rounds)
        row["event_cover"] = timing.event_cover(chosen.timer)
    finally:
        chosen.close()
    row["timing_ms"] = _ms((time.perf_counter() - t_timing) * 1e3)
    between, varied_ms = varied_check(call)
    if between is not None:
        checks_ms = (checks_ms or 0.0) + varied_ms
    row.update(
        layout=variant.cap.layout,
        inputs_ms=_ms(inputs_ms),
        setup_ms=_ms(setup_ms),
        first_call_ms=_ms(first_ms),
        checks_ms=_ms(checks_ms),
        fresh_rel_err=None if fresh is None else fresh.rel_err,
    )
    if fresh is not None and not fresh.passed:  # timed, as a first visit's wrong cell is
        return "wrong", fresh_failure(fresh, settings.seed + FRESH_SEED_OFFSET), m
    if between is not None and not between.passed:
        return "wrong", varied_failure(between), m
    return "ok", "", m
