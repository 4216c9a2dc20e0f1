"""The dropout check: with dropout p > 0 a variant's output is random, so it is held to statistical rules.

Training-mode dropout of the attention weights keeps each weight P_ij independently with probability 1 - p
and scales the kept ones by 1/(1 - p) ("inverted" dropout, as torch.nn.functional.dropout and SDPA do):
out_ic = sum_j P_ij M_ij V_jc / (1 - p), M_ij ~ Bernoulli(1 - p). It is unbiased, E[out] = P V (the float64
reference without dropout), with Var[out_ic] = p/(1 - p) * sum_j P_ij^2 V_jc^2 (attention64.second_moment).
Every rule below follows from that, and every call goes through the variant's public calling convention
(`dropout_p=p`, `torch.manual_seed` before the call):

1. The mask, seen weight by weight (one call, seed s). Inputs: q = 0, the cell's k and key lengths, and
   one-hot values: column c of v is 1 at one key j_c (keys spread evenly over N_k) and 0 elsewhere. Every
   visible weight is then 1/(visible keys) and output (i, c) is exactly that weight after dropout: 0 where
   it was dropped, P_ic/(1 - p) where kept (P from the float64 reference of these inputs, so every mask
   rule of the reference applies). Rules, over the visible (row, column) pairs of the checked rows:
   - the fraction zeroed is p within Bernstein's bound at false-failure probability ALPHA (1e-6);
   - every kept weight is P/(1 - p) within the dtype's gate tolerance (plus one subnormal step): a missing
     1/(1 - p) fails as soon as p exceeds that tolerance (1e-4 float32, 5e-3 float16, 2.5e-2 bfloat16),
     and so does renormalising the kept weights to sum to one;
   - drops are independent across heads, query rows and keys: in disjoint neighbouring pairs both are
     dropped at the rate p^2, within Bernstein's bound (a mask shared by every head gives p).
2. Determinism (where the capability promises it, `dropout_deterministic`): the same seed again gives the
   same output, bit for bit.
3. The expectation, on the cell's own inputs (K = RUNS calls, seeds s + 1 .. s + K), on the gated rows:
   - |mean of the K outputs - ref| (Frobenius, as the gate) <= MEAN_Z * sqrt(sum Var / K) + the dtype's
     tolerance * |ref|: the mean's error within MEAN_Z times its expected size, plus what rounding may add.
     Its expected size is exact (E|mean - ref|^2 = sum Var / K for any correct dropout), but its tail
     is not Gaussian when few weights are dropped in all (a handful of drop events), so the rule applies
     only when the K calls are expected to drop (or keep) at least MIN_DROPS of the exposed weights. In
     4,000 simulated honest runs per shape and p (float64, K = 8, p from 0.01 to 0.99, B*H*N from 4 to
     256; tests/harness/test_dropout.py runs a smaller version) the largest ratio under that condition was 3.2
     (p = 0.99; at most 2.7 for p <= 0.9); MEAN_Z = 5 leaves room for that and for rounding;
   - the K calls do not all return the same output (a mask that ignores the seed), judged only where an
     honest variant would return K equal outputs with probability below ALPHA: ((1-p)^K + p^K)^n < ALPHA.
The gradients of a fwd+bwd dropout cell are checked exactly at p = 0 (the float64 gate), not with dropout.

The cell's other rules (causal alignment, window, score modification) hold in every call and every float64
reference here: dropout acts on the weights of the modified, masked scores. A mod makes the probe's visible
weights unequal (ALiBi) and lets some underflow in the dtype, so rule 1 judges a weight against its row's
largest (it is `seen` above tol x that, and kept within tol x that): with equal weights, as without a mod,
that is the rule as stated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnbench.harness.measure import attention64, correctness
from attnbench.harness.measure.contract import check_output
from attnbench.results.formulas import tolerance_text
from attnbench.variants.mods import NONE
from attnbench.variants.problem import extra_options

RUNS = 8  # K: calls averaged by the expectation rule
MEAN_Z = 5.0  # the mean may be this many times its expected error from float64
MIN_DROPS = 50  # the mean rule needs K * min(p, 1 - p) * (weights seen) at least this
ALPHA = 1e-6  # false-failure probability of each Bernstein bound (the fraction and independence rules)


def bernstein(n: int, variance: float, alpha: float = ALPHA) -> float:
    """t such that the mean of n independent [0, 1] draws of this variance is further than t from its
    expectation with probability at most alpha (Bernstein: 2 exp(-n t^2 / (2 variance + 2 t / 3)))."""
    if n <= 0:
        return math.inf
    log = math.log(2 / alpha)
    return (log / 3 + math.sqrt(log * log / 9 + 2 * n * variance * log)) / n


@dataclass(frozen=True)
class DropoutResult:
    """What the dropout check measured, and why it failed (no reasons: passed)."""

    p: float
    drop_frac: float  # fraction of the exposed visible weights the variant zeroed
    weights_seen: int
    mean_z: float  # |mean of K - ref| over its expected size sqrt(sum Var / K): about 1 when honest
    deterministic: bool | None  # None: not checked (the variant does not promise it)
    reasons: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        return "; ".join(self.reasons)

    def fields(self) -> dict[str, Any]:
        """The dropout check's columns of the result row."""
        return {"drop_frac": self.drop_frac, "drop_mean_z": self.mean_z}


def _call(fn: Callable[..., Any], seed: int, q, k, v, *, p: float, **rules: Any) -> torch.Tensor:
    torch.manual_seed(seed)  # CPU and every CUDA generator: what torch's dropout and SDPA's kernels draw from
    causal, key_lengths = rules.pop("causal"), rules.pop("key_lengths")
    with torch.no_grad():  # the added axes only when not at their default, as the harness calls it
        out = fn(
            q, k, v, causal=causal, key_lengths=key_lengths, dropout_p=p, scale=None, **extra_options(**rules)
        )
    return check_output(out, q, v)  # with dropout on, the contract still holds


def _rows(t: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """The checked query rows of an output, in float64."""
    t = t.detach() if rows is None else t.detach()[:, :, rows.to(t.device)]
    return t.to(torch.float64)


def _one_hot_values(k: torch.Tensor, d_v: int) -> torch.Tensor:
    """(B, H, N_k, d_v) values with column c = 1 at key c * (N_k // d_v) (keys spread over N_k), else 0."""
    b, h, n_k, _ = k.shape
    v = torch.zeros(b, h, n_k, d_v, dtype=k.dtype, device=k.device)
    cols = min(d_v, n_k)
    keys = torch.arange(cols, device=k.device) * (n_k // cols)
    v[:, :, keys, torch.arange(cols, device=k.device)] = 1
    return v


def _mask_rules(
    out: torch.Tensor, weights: torch.Tensor, p: float, dtype, modded: bool = False
) -> tuple[float, int, list[str]]:
    """(fraction zeroed, weights seen, reasons) from the one-hot call's output and the weights it exposes,
    both (B, H, rows, d_v) float64; weights > 0 marks a visible weight."""
    row_max = weights.amax(dim=-1, keepdim=True)  # the largest exposed weight of each query row
    tol = correctness.TOLERANCE.get(str(dtype).removeprefix("torch."), correctness.TOLERANCE["float32"])
    seen = weights > tol * row_max  # smaller ones may round to 0 in the dtype: neither dropped nor kept
    if modded:  # ALiBi rows far from their keys: weights below the dtype's normal range are not judged
        seen &= row_max >= torch.finfo(dtype).tiny
    n = int(seen.sum())
    if not bool(torch.isfinite(out[seen]).all()):
        return math.nan, n, ["non-finite output (NaN or inf) with dropout"]
    dropped = (out == 0) & seen
    frac = float(dropped.sum()) / n if n else math.nan
    reasons = []
    t = bernstein(n, p * (1 - p))
    if n and abs(frac - p) > t:
        hint = " (is dropout_p ignored?)" if frac == 0 else ""
        reasons.append(f"zeroed {frac:.1%} of {n} attention weights, expected p = {p:g} (± {t:.1%}){hint}")
    kept = seen & ~dropped
    if bool(kept.any()):
        want = weights[kept] / (1 - p)
        got = out[kept]
        info = torch.finfo(dtype)
        # tol x the row's largest weight: tol x want when a row's weights are equal (no mod)
        allowed = tol * row_max.expand_as(weights)[kept] / (1 - p)
        bad = (got - want).abs() > allowed + info.tiny * info.eps  # one subnormal step: tiny weights
        if bool(bad.any()):
            scale = float((got / weights[kept]).median())
            worst = float(((got - want).abs() / want).max())
            reasons.append(
                f"kept weights are scaled by {scale:.4g}, expected 1/(1 - p) = {1 / (1 - p):.4g} "
                f"(worst relative error {worst:.1e} > tol {tolerance_text(tol)})"
            )
    if reasons:  # independence means nothing when the fraction is wrong already
        return frac, n, reasons
    g = dropped.flatten(0, 1)  # (B*H, rows, d_v): every (batch, head) draws its own mask
    vis = seen.flatten(0, 1)
    for axis, name in ((0, "heads"), (1, "query rows"), (2, "keys")):
        m = g.shape[axis] // 2 * 2
        if m < 2:
            continue
        a, b = g.narrow(axis, 0, m), vis.narrow(axis, 0, m)
        shape = list(a.shape)
        shape[axis : axis + 1] = [m // 2, 2]  # disjoint neighbouring pairs (0, 1), (2, 3), ...: independent
        both_seen = b.reshape(shape).all(axis + 1)
        both_dropped = a.reshape(shape).all(axis + 1) & both_seen
        pairs = int(both_seen.sum())
        if not pairs:
            continue
        joint = float(both_dropped.sum()) / pairs
        t = bernstein(pairs, p * p * (1 - p * p))
        if abs(joint - p * p) > t:
            reasons.append(
                f"drops are not independent across {name}: both of a pair dropped in {joint:.1%} of {pairs} "
                f"pairs, expected p² = {p * p:.1%} (± {t:.1%})"
            )
    return frac, n, reasons


def check(
    fn: Callable[..., Any],
    q,
    k,
    v,
    *,
    p: float,
    causal: bool = False,
    key_lengths=None,
    causal_align: str = "top-left",
    window: int = 0,
    mod: str = NONE,
    rows: torch.Tensor | None = None,
    ref: torch.Tensor | None = None,
    deterministic: bool = True,
    seed: int = 0,
    runs: int = RUNS,
) -> DropoutResult:
    """Run `fn` (a variant's callable) with dropout_p = p and hold it to the rules of this module.

    q, k, v, key_lengths: the cell's inputs (never modified here; the variant gets them as they are, so a
    variant that writes into them is seen by the caller's own check); rows: the gated query rows (None:
    all); ref: the float64 reference of these inputs on those rows, when the caller has it.
    """
    if not 0 < p < 1:
        raise ValueError(f"the dropout check needs 0 < p < 1, got {p!r}")
    opts = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window, mod=mod)
    tol = correctness.TOLERANCE.get(str(q.dtype).removeprefix("torch."), correctness.TOLERANCE["float32"])
    frac, seen, same_seed, reasons = _mask_and_seed(
        fn, q, k, v, p=p, rows=rows, seed=seed, deterministic=deterministic, opts=opts
    )
    mean_z, later, finite = _expectation(
        fn, q, k, v, p=p, rows=rows, ref=ref, seed=seed, runs=runs, seen=seen, tol=tol, opts=opts
    )
    reasons += later
    if not finite:
        return DropoutResult(p, frac, seen, math.inf, same_seed, tuple(dict.fromkeys(reasons)))
    return DropoutResult(p, frac, seen, mean_z, same_seed, tuple(reasons))


def _mask_and_seed(
    fn: Callable[..., Any], q, k, v, *, p: float, rows, seed: int, deterministic: bool, opts: dict[str, Any]
) -> tuple[float, int, bool | None, list[str]]:
    """Rules 1 and 2: (fraction zeroed, weights seen, same output for the same seed (None: not checked),
    reasons). The mask weight by weight: q = 0, one-hot values (1 call); then the same seed again."""
    q0 = torch.zeros_like(q)
    k1 = k.detach().clone()
    v1 = _one_hot_values(k1, v.shape[-1])
    weights = correctness.reference(q0, k1, v1, rows=rows, **opts)  # P of the exposed keys, float64
    probe = _call(fn, seed, q0, k1, v1, p=p, **opts)
    frac, seen, reasons = _mask_rules(_rows(probe, rows), weights, p, q.dtype, modded=opts["mod"] != NONE)
    same_seed = None
    if deterministic:
        again = _call(fn, seed, q0, k1, v1, p=p, **opts)
        same_seed = bool(torch.equal(again, probe))
        if not same_seed:
            reasons.append(
                "the same torch.manual_seed gave a different output (a variant whose dropout does not "
                "follow torch's generators declares dropout_deterministic=False)"
            )
    return frac, seen, same_seed, reasons


def _expectation(
    fn: Callable[..., Any],
    q,
    k,
    v,
    *,
    p: float,
    rows,
    ref,
    seed: int,
    runs: int,
    seen: int,
    tol: float,
    opts: dict[str, Any],
) -> tuple[float, list[str], bool]:
    """Rule 3, on the cell's own inputs (`runs` calls, seeds seed + 1 ..): (mean_z, reasons, whether every
    output was finite; the first that is not ends the rule)."""
    if ref is None:
        ref = correctness.reference(q, k, v, rows=rows, **opts)
    var = attention64.second_moment(q, k, v, rows=rows, **opts) * (p / (1 - p))  # (B, H, rows, d_v)
    keep = torch.ones_like(ref, dtype=torch.bool)
    # rows that see no key: 0, the gate's business
    empty = correctness.empty_rows(
        q.shape[2], opts["key_lengths"], n_k=k.shape[2], causal=opts["causal"],
        causal_align=opts["causal_align"], window=opts["window"],
    )  # fmt: skip
    if empty is not None:
        empty = empty if rows is None else empty[:, :, rows.to(empty.device)]
        keep = (~empty).expand_as(ref).to(ref.device)
    ref_k, sigma = ref[keep], math.sqrt(float(var[keep].sum()))
    total = torch.zeros_like(ref_k)
    first, identical = None, True
    for i in range(runs):
        out = _rows(_call(fn, seed + 1 + i, q, k, v, p=p, **opts), rows).to(ref.device)[keep]
        if not bool(torch.isfinite(out).all()):
            return math.inf, ["non-finite output (NaN or inf) with dropout"], False
        total += out
        if first is None:
            first = out
        elif identical and not torch.equal(out, first):
            identical = False
    reasons = []
    rounding = tol * float(torch.linalg.vector_norm(ref_k))  # what rounding alone may add, as in the gate
    err = float(torch.linalg.vector_norm(total / runs - ref_k))
    expected = sigma / math.sqrt(runs)
    mean_z = err / expected if expected > 0 else (0.0 if err <= rounding else math.inf)
    if runs * min(p, 1 - p) * seen >= MIN_DROPS and err > MEAN_Z * expected + rounding:
        reasons.append(
            f"the mean of {runs} calls is {err:.2e} from float64, allowed {MEAN_Z * expected + rounding:.2e} "
            f"({MEAN_Z:g} x its expected error {expected:.2e} + the dtype's tolerance)"
        )
    if identical and runs > 1 and seen * math.log((1 - p) ** runs + p**runs) < math.log(ALPHA):
        reasons.append(
            f"{runs} calls with different seeds returned the same output (it draws no new mask per call)"
        )
    return mean_z, reasons, True
