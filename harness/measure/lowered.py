"""A failing answer that errs by a lower precision's rounding: a float32 cell a kernel computed in bfloat16
and cast back errs by bfloat16's rounding, said so instead of a bare rel_err; and a known mistake (ignored
key_lengths=) whose answer is that mistake's only to within a lower precision's tolerance, named with it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

# the precisions a kernel may compute a cell of each dtype in, finer first
LOWER = {
    "float64": ("float32", "float16", "bfloat16"),
    "float32": ("float16", "bfloat16"),
    "float16": ("bfloat16",),
}
# an error within this factor of what rounding the inputs and the output to a precision errs by is "about" its
# rounding (a kernel's own accumulation adds a little; a kernel 1% off is three times bfloat16's, and no more)
FACTOR = 2.0


def hint(
    dtype: str,
    rel_err: float,
    cause: partial,
    reference: Callable[..., torch.Tensor],
    against: torch.Tensor,
    hidden: torch.Tensor | None,
) -> str:
    """Why an answer of a `dtype` cell failed with `rel_err` against `against` (float64, (B, H, R, d): the
    rows checked; hidden: those of them no key sees, or None), where a lower precision explains it; "" where
    none does. cause: correctness.likely_cause with the answer, the inputs and the cell's rules bound, called
    with tol=; reference: correctness.reference. For each lower precision, finer first: rounding q, k, v and
    the answer to it errs by about rel_err (within FACTOR either way), or a known mistake explains the answer
    to within FACTOR times that rounding."""
    q, k, v = cause.args[1:4]
    for low in LOWER.get(dtype, ()):
        size = _rounding(low, (q, k, v), reference, cause.keywords, against, hidden)
        named = "float16's or TF32's" if low == "float16" and q.is_cuda else f"{low}'s"
        if size / FACTOR <= rel_err <= size * FACTOR:
            return (
                f"its error is about {named} rounding (the inputs and the output rounded to {low} err by "
                f"{size:.1e} here): does it compute in a lower precision?"
            )
        said = cause(tol=size * FACTOR) if rel_err > size * FACTOR and size > 0 else ""
        if said:
            return f"{said}, to within about {named} rounding: does it compute in a lower precision?"
    return ""


def _rounding(low: str, qkv, reference, rules: dict, against: torch.Tensor, hidden) -> float:
    """rel_err of attention on q, k, v rounded to `low`, its answer rounded to `low` too, against `against`
    on the rows some key sees."""
    cast = getattr(torch, low)
    out = reference(*(t.to(cast) for t in qkv), **rules).to(cast).to(torch.float64)
    ref = against.to(out.device)
    if hidden is not None:
        keep = (~hidden).expand(out.shape[0], out.shape[1], -1, out.shape[3]).to(out.device)
        out, ref = out[keep], ref[keep]
    denom = float(torch.linalg.vector_norm(ref))
    return float(torch.linalg.vector_norm(out - ref)) / denom if denom > 0 else 0.0
