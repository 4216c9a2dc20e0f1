"""`attnbench check`: the float64 gate for every variant over causal x key padding, as plain records.

`prepare` refuses unknown variants, dtypes and devices (ValueError naming them) before any tensor is made;
`gate_all` yields one GateRow per (device, dtype, causal, padding, variant); `exit_status` is the verdict.
Rendering is the front end's: this module prints nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

DEVICES = ("cpu", "cuda")
# small enough for every variant on CPU; two batch rows, so that one can be fully padded
BATCH, HEADS, HEAD_DIM = 2, 4, 64


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
    status: str  # "pass", "FAIL" or "unsupported"
    rel_err: float | None = None  # None when unsupported
    grad_rel_err: float | None = None  # None when unsupported or the variant has no backward
    masked_rows: str = ""  # what it returned in rows that see no key (see harness.correctness)
    reason: str = ""  # why it is unsupported
    gating: bool = True  # a FAIL fails the check; False for demonstration-only (non-default) variants


def prepare(
    names: Sequence[str] | None,
    devices: Sequence[str],
    dtypes: Sequence[str],
    seq_len: int = 100,
    *,
    variant_files: Sequence[str] = (),
) -> CheckPlan:
    """Validate everything before any work; names None: every registered variant. ValueError (VariantError
    is one) naming the bad value."""
    if seq_len < 1:
        raise ValueError(f"--seq-len must be a positive integer, got {seq_len}")
    from attnbench import variants
    from attnbench.variants import torch_dtype

    for path in variant_files:
        variants.load_variant_file(path)
    names = list(variants.all_variants()) if names is None else list(names)
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
    padding, in that order; gradients too where the variant has a backward."""
    import torch

    from attnbench import variants
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
            # key padding (B,): batch 0 sees its first n // 3 keys, batch 1 none (rows that see no key)
            paddings = (None, torch.tensor([n // 3, 0], device=device))
            for causal, key_lengths in itertools.product((False, True), paddings):
                for name in plan.names:
                    yield gate_one(variants.get(name), qkv, causal=causal, key_lengths=key_lengths)


def gate_one(variant, qkv, *, causal: bool, key_lengths) -> GateRow:
    """One variant on q, k, v (B, H, N, d) against float64: unsupported (with the reason), pass or FAIL."""
    from attnbench import variants
    from attnbench.variants import UnsupportedError, dtype_name

    from . import correctness

    q = qkv[0]
    b, h, n, d = q.shape
    padded = key_lengths is not None
    row = dict(variant=variant.name, device=q.device.type, dtype=dtype_name(q.dtype), causal=causal,
               padding=padded, gating=variant.cap.default)  # fmt: skip
    prob = variants.Problem(device=row["device"], dtype=row["dtype"], batch=b, heads=h, seq_q=n, seq_k=n,
                            d_k=d, d_v=d, causal=causal, padding=padded, backward=True)  # fmt: skip
    reason = variant.check(prob)
    backward = True
    if reason and "backward" in reason:  # no backward: gate the forward alone
        backward, reason = False, variant.check(dataclasses.replace(prob, backward=False))
    if reason:
        return GateRow(**row, status="unsupported", reason=reason)
    try:
        r = correctness.check(variant, *qkv, causal=causal, key_lengths=key_lengths, backward=backward)
    except UnsupportedError as exc:  # the backend refused at call time
        return GateRow(**row, status="unsupported", reason=str(exc))
    return GateRow(
        **row,
        status="pass" if r.ok else "FAIL",
        rel_err=r.rel_err,
        grad_rel_err=r.grad_rel_err,
        masked_rows=r.masked_rows,
    )


def exit_status(rows: Iterable[GateRow]) -> int:
    """1 when a default variant failed the gate, else 0 (unsupported is not a failure)."""
    return 1 if any(r.status == "FAIL" and r.gating for r in rows) else 0
