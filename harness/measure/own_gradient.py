"""The backward of a kernel declared approximate (Capability.approximate), checked against its own forward.

An approximation's gradients need not approach exact attention's: Performer's, against float64 autograd of
softmax attention, err by 1.04-1.13 (more than zeros would) while its forward errs by 0.8. Held to exact
attention's gradients by 4 x its bound, a backward of zeros passed any bound from 0.25 up. So its backward is
held to the derivative of its own forward instead, as torch.autograd.gradcheck holds one, along random
directions:

  L(q, k, v) = sum(out * dO) for a random dO; for each of q, k and v, along DIRECTIONS random directions u,
  autograd's <dL/dx, u> against the central difference (L(x + h u) - L(x - h u)) / 2h of its forward,
  relative to the larger of the two; per input the closest direction counts (a kernel that selects keys,
  top-k say, may flip a selection under one direction), and the error is the worst input's. A direction
  along which the differences at h and 2 h disagree by more than STEPPED is a step, not a slope: it does
  not count.

The check runs in float32 (float64 in a float64 cell), the cell's inputs cast, where the kernel runs float32:
a bfloat16 central difference cannot resolve 1e-2. Where the forward is not smooth at the difference's
scale (along no direction tried: a kernel that rounds its inputs is piecewise constant, and its backward
passes the rounding straight through), or runs neither dtype, its gradients are held to exact
attention's instead, by 4 x its bound capped at (1 + bound) / 2: below 1, so that zeros never pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

import torch

from attnbench.harness.measure.contract import check_output
from attnbench.harness.measure.outcomes import Gradients, erring  # noqa: F401  (torch-free: a reply's)
from attnbench.results.formulas import GRAD_TOLERANCE_FACTOR, tolerance_text
from attnbench.variants.problem import extra_options

DIRECTIONS = 3  # per input: the closest counts
# the differences at h and 2 h of a smooth forward agree within its roundoff (1e-4) and the kinks crossed
# (Performer's feature map takes a maximum: a few 1e-2); a rounding forward's disagree by O(1)
STEPPED = 0.1
STEP = MappingProxyType(
    {torch.float32: 1e-3, torch.float64: 1e-6}
)  # h against inputs of unit scale: roundoff ~1e-4 at most
TOLERANCE = 1e-2  # a wrong backward errs by O(1); float32's central differences by under 1e-3
OWN, EXACT = "own", "exact"  # what an approximation's gradients were held to (GateResult.grad_against)
AGAINST = MappingProxyType({
    OWN: "against central differences of its own forward (declared approximate)",
    EXACT: "against float64 attention's gradients (declared approximate; its forward is not smooth enough "
    "for central differences)",
})  # fmt: skip


def bound_text(tolerance: float, against: str) -> str:
    """What a failing gradient check was held to, as its message says it: '4e-04' for float64 attention's
    gradients; '0.01 against central differences of its own forward (...)' for an approximation's."""
    return f"{tolerance:.2g} {AGAINST[against]}" if against else tolerance_text(tolerance)


@dataclass(frozen=True)
class Judged:
    """An approximation's gradient check: its error, what it is held to, and against what (OWN or EXACT)."""

    rel_err: float
    tolerance: float
    against: str

    @property
    def passed(self) -> bool:
        return self.rel_err <= self.tolerance


def leaf_grads(out: torch.Tensor, leaves: list[torch.Tensor], d_out: torch.Tensor) -> list[torch.Tensor]:
    """The leaves' gradients after out.backward(d_out), as a training loop takes them (every gradient check
    reads them so). A leaf the output does not depend on gets none from autograd, which is a zero gradient:
    the check then compares zeros with the reference's."""
    out.backward(d_out)
    return [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves]


def judge(
    variant, q, k, v, *, tolerance: float, dtypes: tuple[str, ...], exact: Callable[[], float], seed: int = 0,
    **opts,
) -> Judged:  # fmt: skip
    """variant's backward held to its own forward's derivative where that resolves, else (exact(): its
    gradients' rel_err against float64 attention's, correctness.grad_errors) by exact_bound(tolerance) (the
    module docstring); tolerance: its gate's, the larger of its declared bound and its dtype's. opts: the
    calling convention's keywords and the added axes."""
    dtype = dtype_for(q.dtype, dtypes)
    err = None
    if dtype is not None:
        try:  # a callable prepared for its cell's dtype (a setup hook's) may refuse another
            err = error(variant, q, k, v, dtype=dtype, seed=seed, **opts)
        except Exception:
            if dtype == q.dtype:
                raise
    if err is not None:
        return Judged(err, TOLERANCE, OWN)
    return Judged(exact(), exact_bound(tolerance), EXACT)


def exact_bound(tolerance: float) -> float:
    """What an approximation's gradients are held to against exact attention's: 4 x its gate's tolerance,
    below 1 (an answer of zeros has rel_err 1)."""
    return min(tolerance * GRAD_TOLERANCE_FACTOR, (1 + tolerance) / 2)


def dtype_for(dtype: torch.dtype, dtypes: tuple[str, ...]) -> torch.dtype | None:
    """The dtype the check runs in for a cell of `dtype`, of a kernel that runs `dtypes`: the cell's own
    where it is float64 or float32, else float32 where the kernel runs it, else None (not checked)."""
    if dtype in STEP:
        return dtype
    return torch.float32 if "float32" in dtypes else None


def error(variant, q, k, v, *, dtype: torch.dtype, causal=False, key_lengths=None, scale=None, seed: int = 0,
          **axes) -> float | None:  # fmt: skip
    """The worst input's relative error of variant's backward against central differences of its forward
    (the module docstring), on q, k, v cast to dtype; None where its forward is not smooth at the
    differences' scale. axes: the cell's added axes (causal_align, window, mod, cu_seqlens)."""
    extra = extra_options(**axes)
    inputs = [t.detach().to(dtype) for t in (q, k, v)]

    def forward(a, b, c):
        return check_output(
            variant(a, b, c, causal=causal, key_lengths=key_lengths, scale=scale, **extra), a, c
        )

    leaves = [t.clone().requires_grad_(True) for t in inputs]
    out = forward(*leaves)
    g = torch.Generator(device="cpu").manual_seed(seed)
    d_out = torch.randn(out.shape, generator=g, dtype=torch.float64).to(device=out.device, dtype=dtype)
    grads = [t.detach().double() for t in leaf_grads(out, leaves, d_out)]
    del out, leaves

    def difference(i: int, u: torch.Tensor, h: float) -> float:
        up, down = list(inputs), list(inputs)
        up[i], down[i] = inputs[i] + h * u, inputs[i] - h * u
        with torch.no_grad():
            ups, downs = (float((forward(*xs).double() * d_out.double()).sum()) for xs in (up, down))
        return (ups - downs) / (2 * h)

    h, worst = STEP[dtype], 0.0
    for i, grad in enumerate(grads):
        closest = float("inf")  # over the directions along which the forward is smooth
        for _ in range(DIRECTIONS):
            u = torch.randn(grad.shape, generator=g, dtype=torch.float64)
            u = u.to(device=inputs[i].device, dtype=dtype)
            numeric, wider = difference(i, u, h), difference(i, u, 2 * h)
            if abs(numeric - wider) > STEPPED * max(abs(numeric), abs(wider), 1e-30):
                continue  # steps, not a slope, along u
            analytic = float((grad * u.double()).sum())
            closest = min(closest, abs(analytic - numeric) / (max(abs(analytic), abs(numeric)) or 1.0))
        if closest == float("inf"):
            return None  # smooth along no direction tried: a rounding forward
        worst = max(worst, closest)
    return worst
