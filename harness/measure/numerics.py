"""The numerics probe and a sample of attention weights, stored with each run for the reports.

Probe: q is scaled by 1, 10 and 100 (logits grow by the same factor) and every variant, including
the unstable softmax twin, is gated against float64 in each dtype. Without the max subtraction,
exp overflows once a logit passes ~11 (float16) or ~88 (float32, bfloat16) and the output turns NaN.
Each variant is handed its own copy of the inputs, so one that writes into them changes no later
variant's (it is `wrong` itself, as a cell is); the float64 reference is computed once per input, from
the inputs as made, and judges every variant.

Tiles: a run's variants are gated at N = TILE_N (300) too, forward, under the sweep's masks: a kernel whose
tiles of 64, 128 or 256 keys leave a partial last one there answers right at every power of two, the N most
sweeps take, and its cells there cannot show that it drops or misreads that tile.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import torch

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.attention64 import one_thread_below, scores
from attnbench.harness.measure.failures import failure, stops_the_process
from attnbench.harness.measure.gate_rows import TILE_N, fail_reason
from attnbench.variants import UnsupportedError, torch_dtype

PROBE_SCALES = (1.0, 10.0, 100.0)
PROBE_SHAPE = MappingProxyType(dict(batch=1, heads=2, seq_len=128, d=64))


def probe(names: list[str], devices: list[str], dtypes: list[str], seed: int = 0) -> list[dict[str, Any]]:
    """One record per (variant, device, dtype, scale): rel_err against float64 (inf when non-finite)."""
    out = []
    b, h, n, d = (PROBE_SHAPE[k] for k in ("batch", "heads", "seq_len", "d"))
    for device in devices:
        g = torch.Generator(device=device).manual_seed(seed)
        base = [torch.randn(b, h, n, d, generator=g, device=device) for _ in range(3)]
        for dtype in dtypes:
            for scale in PROBE_SCALES:
                inputs = [t.to(torch_dtype(dtype)) for t in (base[0] * scale, base[1], base[2])]
                ref = correctness.reference(*inputs)
                problem = variants.Problem(device=device, dtype=dtype, d_k=d, d_v=d)
                for name in names:
                    rec = {"variant": name, "device": device, "dtype": dtype, "q_scale": scale}
                    out.append(_gated(name, rec, problem, inputs, ref))
    return out


def tiles(
    names: list[str], devices: list[str], dtypes: list[str], causal: list[bool], seed: int = 0
) -> list[dict[str, Any]]:
    """One record per (variant, device, dtype, causal) at N = TILE_N, the probe's shape otherwise, q
    unscaled: whether a kernel whose last tile is partial there answers as it does at N its tile divides
    (a sweep's N are often all multiples of 128). Its failures say why in one line, as a cell's row."""
    out = []
    b, h, d = (PROBE_SHAPE[k] for k in ("batch", "heads", "d"))
    for device in devices:
        g = torch.Generator(device=device).manual_seed(seed)
        base = [torch.randn(b, h, TILE_N, d, generator=g, device=device) for _ in range(3)]
        for dtype, masked in ((dtype, masked) for dtype in dtypes for masked in causal):
            inputs = [t.to(torch_dtype(dtype)) for t in base]
            ref = correctness.reference(*inputs, causal=masked)
            shape = dict(batch=b, heads=h, seq_len=TILE_N, seq_k=TILE_N, d_k=d, d_v=d, causal=masked)
            problem = variants.Problem(device=device, dtype=dtype, **shape)
            for name in names:
                rec = {"variant": name, "device": device, "dtype": dtype, "seq_len": TILE_N, "causal": masked}
                out.append(_gated(name, rec, problem, inputs, ref, causal=masked))
    return out


def _gated(name: str, rec: dict, problem, inputs: list, ref, **rules) -> dict[str, Any]:
    """`rec` with the gate of variant `name` on its own copy of `inputs` (a write into them harms no later
    variant) against `ref`: ok, wrong (with why, where the gate says), unsupported or error."""
    with one_thread_below(inputs[0].device, scores(*inputs[:2])):  # the copies: the variant's call is check's
        q, k, v = (t.clone() for t in inputs)
    variant = variants.get(name)
    try:  # a plug-in's capability check may raise too: recorded like its call
        reason = variant.check(problem)
        if reason:
            return {**rec, "status": "unsupported", "message": str(reason)}
        result = correctness.check(variant, q, k, v, ref=ref, **rules)
    except UnsupportedError as exc:
        return {**rec, "status": "unsupported", "message": str(exc)}
    except BaseException as exc:  # one line, as a cell's (SystemExit too); the probe goes on
        if stops_the_process(exc):
            raise
        return {**rec, "status": "error", "message": failure(exc, problem.device)[1]}
    why = fail_reason(result) if not result.ok else ""
    # a quantising variant's rel_err is its kernel's, against its rounded inputs: its recipe, the rounding's
    # own error and the output's SQNR against the inputs as made come with it, as a cell's row has them, so
    # that the reports show the end-to-end error beside it (results.formulas.end_to_end_rel_err)
    rounded = {"quant_recipe": result.quant, "quant_rel_err": result.quant_rel_err, "sqnr_db": result.sqnr_db}
    return {
        **rec,
        "status": "ok" if result.ok else "wrong",
        **({"message": why} if why else {}),
        "rel_err": result.rel_err,
        "max_abs_err": result.max_abs_err,
        "finite": not math.isinf(result.rel_err),
        "tolerance": result.tolerance,
        **(rounded if result.quant else {}),
    }


def example_weights(seq_len: int = 24, valid: int = 18, seed: int = 0) -> dict[str, Any]:
    """Attention weights of naive attention on a small causal + key-padded example (one head)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, seq_len, 16, generator=g) for _ in range(3))
    naive = variants.get("naive").fn
    _, w = naive(q, k, v, causal=True, key_lengths=torch.tensor([valid]), return_weights=True)
    return {"seq_len": seq_len, "valid_keys": valid, "causal": True, "weights": w[0, 0].tolist()}
