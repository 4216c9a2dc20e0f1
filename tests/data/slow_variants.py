"""A test-only variant slow enough for a test to kill the process that measures it (--variant-file)."""

import time

from attnbench import variants


@variants.register("slow_naive", description="naive attention after a 50 ms sleep per call")
def slow_naive(q, k, v, **kw):
    time.sleep(0.05)
    return variants.get("naive").fn(q, k, v, **kw)
