"""`attnbench check`: the float64 gate for every variant over causal x key padding, as plain records.

`prepare` refuses unknown variants, dtypes and devices (ValueError naming them) before any tensor is made;
`gate_all` yields one GateRow per (device, dtype, causal, padding, variant); `exit_status` is the verdict.
Rendering is the front end's: this module prints nothing.

The gated problems are the ones a run makes: key padding by the run's own rule
(harness.sweep.spec.padded_lengths, every batch element keeps at least one key). A batch element with no valid
key at all, which no run cell ever holds, is tried once more per variant apart (`no_key` rows, forward only):
it shows what a variant returns in rows that see no key, and never fails the check. Whatever a variant does
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


@dataclass(frozen=True)
class CheckPlan:
    """What `gate_all` runs, validated by `prepare`."""

    names: tuple[str, ...]
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    seq_len: int = 100


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


def prepare(
    names: Sequence[str] | None,
    devices: Sequence[str],
    dtypes: Sequence[str],
    seq_len: int = 100,
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
    variant once on the no-key problem (non-gating, forward only)."""
    import torch

    from attnbench import variants
    from attnbench.harness.sweep.spec import padded_lengths
    from attnbench.variants import torch_dtype

    n = plan.seq_len
    for device in plan.devices:
        g = torch.Generator(device=device).manual_seed(0)  # one stream per device: dtypes draw in turn
        for dtype in plan.dtypes:
            # q, k, v: (B, H, N, d), drawn in float32 and rounded to the dtype
            qkv = [
                torch.randn(BATCH, HEADS, n, HEAD_DIM, generator=g, device=device).to(torch_dtype(dtype))
                for _ in range(3)
            ]
            padded = torch.tensor(padded_lengths(n, BATCH, PADDING), device=device)  # (B,): [n // 2, 1] or so
            for causal, key_lengths in itertools.product((False, True), (None, padded)):
                for name in plan.names:
                    yield gate_one(variants.get(name), qkv, causal=causal, key_lengths=key_lengths)
            no_key = torch.tensor([n // 3, 0], device=device)  # batch element 1 sees no key: no run makes it
            for name in plan.names:
                yield gate_one(variants.get(name), qkv, causal=False, key_lengths=no_key, no_key=True)


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
    try:
        return _gate(variant, prob, qkv, key_lengths, row)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a plug-in's fault of any kind is its row, never the end of `check`
        from attnbench.harness.measure.failures import failure

        status, message = failure(exc, row["device"])  # UnsupportedError (refused at call time): unsupported
        return GateRow(**row, status="unsupported" if status == "unsupported" else "error", reason=message)


def _gate(variant, prob, qkv, key_lengths, row: dict) -> GateRow:
    """gate_one's work; what a variant raises here is gate_one's to record."""
    from attnbench.harness.measure import correctness

    reason = variant.check(prob)
    backward = prob.backward
    if reason and "backward" in reason:  # no backward: gate the forward alone
        backward, reason = False, variant.check(dataclasses.replace(prob, pass_="fwd"))
    if reason:
        return GateRow(**row, status="unsupported", reason=str(reason))
    r = correctness.check(variant, *qkv, causal=prob.causal, key_lengths=key_lengths, backward=backward)
    return GateRow(
        **row,
        status="pass" if r.ok else "FAIL",
        rel_err=r.rel_err,
        grad_rel_err=r.grad_rel_err,
        masked_rows=r.masked_rows,
        reason="" if r.ok else _fail_reason(r),
    )


def _fail_reason(r) -> str:
    """Why a gate result failed, in one line: the likely cause where the gate recognised one, which error
    passed which tolerance, and where a non-finite answer is NaN."""
    from attnbench.harness.measure.correctness import GRAD_TOLERANCE_FACTOR

    parts = [r.hint] if r.hint else []
    if not r.passed:
        parts.append(f"output rel_err {r.rel_err:.1e} > tolerance {r.tolerance:.0e}")
        parts += [r.where] if r.where else []
    if r.grad_passed is False:
        grad_tol = r.tolerance * GRAD_TOLERANCE_FACTOR
        parts.append(f"gradient rel_err {r.grad_rel_err:.1e} > tolerance {grad_tol:.0e}")
    return "; ".join(parts)  # a non-finite error reads "inf" or "nan"


def exit_status(rows: Iterable[GateRow]) -> int:
    """1 when a default variant FAILed or errored on a problem a run makes, else 0 (unsupported, demo-only
    variants and the no-key rows do not count)."""
    return 1 if any(r.status in ("FAIL", "error") and r.gating for r in rows) else 0
