"""A planted 10% slowdown for benchmarks/false_alarm.py (--variant-file): `chunked_planted` is chunked, then
busy for a tenth of the time that chunked call took, on the same thread.

Each call times its own chunked call and spins (perf_counter, no sleep: the CPU stays busy, as more
arithmetic would keep it) for PLANTED of it, so that every call is 1.10x the chunked call it made, whatever
the machine's speed at that moment. An earlier plant ran chunked again on a tenth of the (query, key)
pairs: a tenth of the FLOPs, but chunked's time is a staircase in key blocks of 512 and its per-block cost
does not shrink with the heads, so it measured 1.39-1.49x, not a 10% slowdown. Its answer is chunked's, so
the float64 gate passes; false_alarm.py relabels its rows `chunked` so that compare pairs them with a run
of the real chunked. `chunked_twin` is the same wrapper without the spin: chunked's code under another
name, for an A/B in one run (false_alarm.py --in-run: twin against chunked must never fail the gate,
planted against chunked must).
"""

import time

from attnbench import variants

PLANTED = 0.10


def _chunked_then_busy(q, k, v, fraction: float, **kw):
    """chunked's answer, then the CPU kept busy for `fraction` of the time that chunked call took."""
    t0 = time.perf_counter()
    out = variants.get("chunked").fn(q, k, v, **kw)
    end = time.perf_counter() + fraction * (time.perf_counter() - t0)
    while time.perf_counter() < end:
        pass
    return out


@variants.register(
    "chunked_planted",
    description="chunked, then busy for a tenth of its time (a planted 10% slowdown)",
    default=False,
)
def chunked_planted(q, k, v, **kw):
    return _chunked_then_busy(q, k, v, PLANTED, **kw)


@variants.register(
    "chunked_twin",
    description="chunked through the same wrapper as chunked_planted, without the spin (identical code)",
    default=False,
)
def chunked_twin(q, k, v, **kw):
    return _chunked_then_busy(q, k, v, 0.0, **kw)
