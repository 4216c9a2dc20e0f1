"""The output contract: what a variant must return before the harness reads its answer.

A variant returns one plain torch.Tensor (never a subclass, whose dispatch could compute the answer only when
the harness reads it, outside the timed window) of its inputs' dtype and device, shaped (B, H, N_q, d_v): q's
batch, heads and query length, v's value width (with grouped-query attention k and v have fewer heads; the
output has q's).
Every place that receives a variant's output (harness.measure.cell's gated call and fresh-input call,
harness.measure.correctness's gate and gradient check, the dropout check) calls `check_output` first, so a
float64 answer to float32 inputs is never gated as if it were float32, and a tuple or a transposed tensor is
named as such instead of failing later with whatever a tensor method says about it. OutputContractError is
turned into an `error` row with its message as it is (harness.measure.failures). Where its gradients are
checked, the output must also be in its inputs' graph (`check_graph`): one detached, or an answer kept from an
earlier call, is named as such instead of by autograd's words. Nor may a variant write into its inputs
(`changed_inputs`).

Two things a variant may do are said, never refused (`attnbench check` notes them): return an output that is
not contiguous in its declared layout (`strided`: the next op may copy it), and answer two calls on the same
inputs differently (`calls_differ`: a kernel that is not deterministic).
"""

from __future__ import annotations

import math
from typing import Any

import torch

PREFIX = "output contract: "


class OutputContractError(Exception):
    """A variant returned something other than the tensor the contract asks for; the message says what it
    returned and what was expected, in one line."""


def expected_shape(q: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """(B, H, N_q, d_v) for inputs q (B, H, N_q, d_k) and v (B, H_kv, N_k, d_v)."""
    b, h, n_q, _ = q.shape
    return (b, h, n_q, v.shape[-1])


def check_output(out: Any, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """out itself when it is a plain torch.Tensor (no subclass) of q's dtype and device shaped (B, H, N_q,
    d_v); else
    OutputContractError, e.g. "output contract: returned float64 (1, 8, 256, 64) on cpu; expected float32"."""
    shape, dtype, device = expected_shape(q, v), _name(q.dtype), q.device
    if not isinstance(out, torch.Tensor):
        what = "None" if out is None else _article(type(out).__name__)
        first = out[0] if isinstance(out, (tuple, list)) and out else None
        way = '; declare returns="first" to take its first element' if isinstance(first, torch.Tensor) else ""
        raise OutputContractError(
            f"{PREFIX}returned {what}; expected a {_shape(shape)} {dtype} tensor on {device}{way}"
        )
    if type(out) is not torch.Tensor:  # a subclass can compute when read, outside the timed window
        raise OutputContractError(
            f"{PREFIX}returned {_article(type(out).__name__)}, a torch.Tensor subclass; expected a plain "
            "torch.Tensor (a subclass can run its work when its answer is read, outside the timed window)"
        )
    got = (_name(out.dtype), tuple(out.shape), out.device)
    if got == (dtype, shape, device):
        return out
    # only what differs is expected: the got part already says the rest
    wanted = [
        dtype if got[0] != dtype else "",
        _shape(shape) if got[1] != shape else "",
        f"on {device}" if got[2] != device else "",
    ]
    raise OutputContractError(
        f"{PREFIX}returned {got[0]} {_shape(got[1])} on {got[2]}; expected {' '.join(w for w in wanted if w)}"
        f"{_way_back(got[1], shape)}"
    )


def changed_inputs(given, pristine) -> tuple[str, ...]:
    """The names (outcomes.INPUT_NAMES, in order) of the inputs `given` whose values, shape or dtype no longer
    equal their `pristine` copies (None: not handed): what a variant modified in place, which it must not."""
    from attnbench.harness.measure.outcomes import INPUT_NAMES

    return tuple(
        name for name, t, p in zip(INPUT_NAMES, given, pristine, strict=False)
        if p is not None and not (t.shape == p.shape and t.dtype == p.dtype and torch.equal(t.detach(), p))
    )  # fmt: skip


def strided(out: torch.Tensor, layout: str = "bhnd") -> str:
    """Empty where out (B, H, N_q, d_v) is contiguous, or contiguous in the memory layout its variant declares
    (Capability.layout "bnhd": (B, N, H, d) memory, its adapter's free transpose); else its strides, with the
    memory order they make where it is a dense permutation: 'strides (25600, 64, 256, 1) for (2, 4, 100, 64),
    (B, N, H, d) memory'."""
    if out.is_contiguous() or (layout == "bnhd" and out.dim() == 4 and out.transpose(1, 2).is_contiguous()):
        return ""
    said = f"strides {tuple(out.stride())} for {_shape(out.shape)}"
    order = sorted(range(out.dim()), key=lambda i: -out.stride(i))  # outermost first
    if out.dim() == 4 and out.permute(order).is_contiguous():
        said += f", ({', '.join('BHNd'[i] for i in order)}) memory"
    return said


def calls_differ(first: torch.Tensor, again: torch.Tensor) -> float:
    """How far apart two outputs of one variant on the same inputs are: 0.0 where they are equal value for
    value (NaN where the other is NaN), else ||again - first|| / ||first|| over float64 (inf where the two
    differ in shape or dtype, or one is NaN or inf where the other is not)."""
    if first.shape != again.shape or first.dtype != again.dtype:
        return math.inf
    a, b = first.detach().to(torch.float64), again.detach().to(torch.float64).to(first.device)
    if torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)):
        return 0.0
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        return math.inf
    diff, norm = float(torch.linalg.vector_norm(b - a)), float(torch.linalg.vector_norm(a))
    return diff / norm if norm > 0 else diff


NO_GRAPH = (
    f"{PREFIX}its output has no grad_fn: it is cut from the inputs' graph (detached, computed under no_grad, "
    "or an answer kept from an earlier call); declare backward=False if it has no backward"
)


def check_graph(out: torch.Tensor) -> torch.Tensor:
    """out itself when autograd can take its gradient back to the inputs it was computed from (called on an
    output of inputs that require grad); else OutputContractError (NO_GRAPH), in place of autograd's "element
    0 of tensors does not require grad and does not have a grad_fn"."""
    if not out.requires_grad:
        raise OutputContractError(NO_GRAPH)
    return out


def _way_back(got: tuple[int, ...], shape: tuple[int, ...]) -> str:
    """How a wrapper turns a familiar other shape of the answer into (B, H, N_q, d_v): heads merged into the
    last dimension (B, N_q, H * d_v), as a model's attention returns it, or (B, N_q, H, d_v); else ""."""
    b, h, n, d = shape
    if h == n:  # the two readings cannot be told apart
        return ""
    if got == (b, n, h * d):
        return f" (its heads merged, (B, N, H * d_v)): return out.unflatten(-1, ({h}, {d})).transpose(1, 2)"
    if got == (b, n, h, d):
        return ' ((B, N, H, d_v)): return out.transpose(1, 2), or declare takes="bnhd" if it takes q, k, v so'
    return ""


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape(shape: tuple[int, ...]) -> str:
    """(1, 8, 256, 64), with a one-dimensional shape written (5,) as Python writes it."""
    return str(tuple(int(s) for s in shape))


def _article(word: str) -> str:
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
