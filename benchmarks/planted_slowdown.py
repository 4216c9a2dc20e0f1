"""Planted slowdowns for benchmarks/false_alarm.py (--variant-file): chunked, then busy for a fraction of the
time its chunked call took, on the same thread.

- `chunked_planted`: busy for PLANTED (a tenth) of it: a 10% slowdown in the code, for an A/B in one run
  (`compare RUN RUN --variant-a chunked --variant-b chunked_planted` must fail the gate).
- `chunked_twin`: the same wrapper without the spin: chunked's code under another name (`--variant-b
  chunked_twin` must never fail it).
- `chunked_env`: busy for the fraction in the environment variable ATTNBENCH_PLANT (0 or unset: none, so
  it is chunked_twin): one command, two environments. `env ATTNBENCH_PLANT=0.10 attnbench run ...` is a
  10% slowdown that only the environment differs by, as a change of torch, driver or allocator setting
  would be. The value is read when the file is loaded, in the run's process and in its workers (which
  inherit its environment).

Each call times its own chunked call and spins (perf_counter, no sleep: the CPU stays busy, as more
arithmetic would keep it) for the fraction of it, so that every call is (1 + fraction)x the chunked call it
made, whatever the machine's speed at that moment. Its answer is chunked's, so the float64 gate passes.
"""

import os
import time

from attnbench import variants

PLANTED = 0.10
ENV = "ATTNBENCH_PLANT"


def env_fraction() -> float:
    """The fraction ATTNBENCH_PLANT names (0 when unset or empty); ValueError unless 0 <= it <= 10."""
    text = os.environ.get(ENV, "").strip()
    try:
        fraction = float(text) if text else 0.0
    except ValueError:
        fraction = -1.0
    if not 0 <= fraction <= 10:
        raise ValueError(f"{ENV}={text!r}: expected a fraction of chunked's time from 0 to 10 (e.g. 0.10)")
    return fraction


ENV_FRACTION = env_fraction()  # in every process that loads this file: the run's and its workers


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


@variants.register(
    "chunked_env",
    description=f"chunked, then busy for the fraction of its time that {ENV} names (0 or unset: none)",
    default=False,
)
def chunked_env(q, k, v, **kw):
    return _chunked_then_busy(q, k, v, ENV_FRACTION, **kw)
