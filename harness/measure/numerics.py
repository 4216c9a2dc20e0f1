"""The numerics probe and a sample of attention weights, stored with each run for the reports.

Probe: q is scaled by 1, 10 and 100 (logits grow by the same factor) and every variant, including
the unstable softmax twin, is gated against float64 in each dtype. Without the max subtraction,
exp overflows once a logit passes ~11 (float16) or ~88 (float32, bfloat16) and the output turns NaN.
Each variant is handed its own copy of the inputs, so one that writes into them changes no later
variant's (it is `wrong` itself, as a cell is); the float64 reference is computed once per input, from
the inputs as made, and judges every variant.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import torch

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.failures import failure
from attnbench.harness.measure.outcomes import mutation
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
                for name in names:
                    q, k, v = (t.clone() for t in inputs)  # its own: a write into them harms no later variant
                    variant = variants.get(name)
                    rec = {"variant": name, "device": device, "dtype": dtype, "q_scale": scale}
                    try:  # a plug-in's capability check may raise too: recorded like its call
                        reason = variant.check(variants.Problem(device=device, dtype=dtype, d_k=d, d_v=d))
                        if reason:
                            out.append({**rec, "status": "unsupported", "message": str(reason)})
                            continue
                        result = correctness.check(variant, q, k, v, ref=ref)
                    except UnsupportedError as exc:
                        out.append({**rec, "status": "unsupported", "message": str(exc)})
                        continue
                    except KeyboardInterrupt:
                        raise
                    except BaseException as exc:  # one line, as a cell's (SystemExit too); the probe goes on
                        out.append({**rec, "status": "error", "message": failure(exc, device)[1]})
                        continue
                    finite = not math.isinf(result.rel_err)
                    out.append(
                        {
                            **rec,
                            "status": "ok" if result.ok else "wrong",
                            **({"message": mutation(result.changed)} if result.changed else {}),
                            "rel_err": result.rel_err,
                            "max_abs_err": result.max_abs_err,
                            "finite": finite,
                            "tolerance": result.tolerance,
                        }
                    )
    return out


def example_weights(seq_len: int = 24, valid: int = 18, seed: int = 0) -> dict[str, Any]:
    """Attention weights of naive attention on a small causal + key-padded example (one head)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, seq_len, 16, generator=g) for _ in range(3))
    naive = variants.get("naive").fn
    _, w = naive(q, k, v, causal=True, key_lengths=torch.tensor([valid]), return_weights=True)
    return {"seq_len": seq_len, "valid_keys": valid, "causal": True, "weights": w[0, 0].tolist()}
