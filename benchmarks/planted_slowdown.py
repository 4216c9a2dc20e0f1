"""A planted 10% slowdown for benchmarks/false_alarm.py (--variant-file): `chunked_planted` is chunked plus
10% more of the same arithmetic, deterministically.

After the chunked call it runs chunked once more on a slice of the inputs holding 10% of the (query, key)
pairs: ceil(H/10) heads, all queries, and the first 10%·H/ceil(H/10) of the keys (H = 8: one head and 80%
of the keys, 1/8 · 0.8 = 0.1). Its answer is chunked's, so the float64 gate passes; false_alarm.py relabels
its rows `chunked` so that compare pairs them with a run of the real chunked.
"""

import math

from attnbench import variants


@variants.register(
    "chunked_planted",
    description="chunked plus 10% more of the same work (a planted slowdown)",
    default=False,
)
def chunked_planted(q, k, v, **kw):
    chunked = variants.get("chunked").fn
    out = chunked(q, k, v, **kw)
    heads = q.shape[1]  # (B, H, N, d)
    extra_heads = math.ceil(heads / 10)
    keys = max(1, round(k.shape[2] * 0.1 * heads / extra_heads))
    chunked(q[:, :extra_heads], k[:, :extra_heads, :keys], v[:, :extra_heads, :keys])  # 10% of the pairs
    return out
