"""A test-only variant that keeps its cell busy for as long as a test wants (loaded with --variant-file):
it waits while the file named by $ATTNBENCH_TEST_HOLD exists (at most 120 s), then answers as naive."""

import os
import time

from attnbench import register, variants


@register("hold", description="waits while $ATTNBENCH_TEST_HOLD names an existing file, then naive")
def hold(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    path = os.environ.get("ATTNBENCH_TEST_HOLD")
    deadline = time.monotonic() + 120
    while path and os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths, scale=scale)
