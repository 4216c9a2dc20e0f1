"""A test-only variant that stands in for a Ctrl-C while pytest-benchmark times it (--attn-variant-file)."""

import sys

from attnbench import variants


def _timed_rounds() -> bool:
    """Whether this call is one of pytest-benchmark's timed rounds (inside benchmark.pedantic)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_raw_pedantic":
            return True
        frame = frame.f_back
    return False


_ROUNDS = [0]


@variants.register(
    "ctrl_c_while_timed", description="KeyboardInterrupt in its third timed round from N = 512"
)
def ctrl_c_while_timed(q, k, v, **kw):
    if q.shape[2] >= 512 and _timed_rounds():
        _ROUNDS[0] += 1
        if _ROUNDS[0] == 3:  # some rounds timed, as a Ctrl-C mid-cell leaves them
            raise KeyboardInterrupt
    return variants.get("naive").fn(q, k, v)
