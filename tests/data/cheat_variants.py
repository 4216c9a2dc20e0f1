"""Test-only variants that harm other cells or fool the gate (loaded with --variant-file), and one with a
setup hook done right."""

import time

import torch

from attnbench import register, variants


def _naive(q, k, v, causal, key_lengths):
    return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths)


@register("cheat_mutate", description="right answer, then scales q in place")
def cheat_mutate(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    out = _naive(q, k, v, causal, key_lengths)
    q.mul_(1e4)  # as a new user's in-place "optimisation" might: the next cells see q * 1e4, then inf
    return out


_REMEMBERED: dict = {}


@register("cheat_cache", description="returns its first answer for a shape forever")
def cheat_cache(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    key = (tuple(q.shape), causal)
    if key not in _REMEMBERED:
        _REMEMBERED[key] = _naive(q, k, v, causal, key_lengths)
    return _REMEMBERED[key]


_MEMO: dict = {}


@register(
    "cheat_memo", description="remembers its answer per input tensor (by address): right on any new input"
)
def cheat_memo(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    # passes the gate and the fresh-input check (new tensors, new addresses), then times a dict lookup:
    # only the throughput checks can tell
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal)
    if key not in _MEMO:
        _MEMO[key] = _naive(q, k, v, causal, key_lengths)
    return _MEMO[key]


SETUP_SLEEP_S = 0.2  # the setup hook's cost: it must land in setup_ms and stay out of the timed call
SETUP_CALLS = []


def _planned_setup(q, k, v, *, causal=False, key_lengths=None):
    """A 'plan' for this shape (here: the causal mask), built once; shapes only, never values."""
    SETUP_CALLS.append(tuple(q.shape))
    time.sleep(SETUP_SLEEP_S)
    n_q, n_k = q.shape[2], k.shape[2]
    hidden = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1) if causal else None

    def run(q, k, v, *, causal=causal, key_lengths=key_lengths, dropout_p=0.0, scale=None):
        s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)  # (B, H, N_q, N_k)
        if hidden is not None:
            s = s.masked_fill(hidden, float("-inf"))
        return s.softmax(-1) @ v  # (B, H, N_q, d_v)

    return run


@register(
    "with_setup", description="plans in a setup hook", padding=False, dropout=False, setup=_planned_setup
)
def with_setup(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _planned_setup(q, k, v, causal=causal)(q, k, v, scale=scale)


LATE_CALLS = [0]


@register("cheat_mutate_late", description="right answer; from its third call on, also adds 1 to k")
def cheat_mutate_late(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    out = _naive(q, k, v, causal, key_lengths)
    LATE_CALLS[0] += 1
    if LATE_CALLS[0] > 2:  # passes the gate untouched: only the check after timing can see it
        k.add_(1.0)
    return out


LAZY_SLEEP_S = 0.2  # a lazy initialisation on the first call per shape (as compilation or autotuning)
_LAZY_DONE: set = set()


@register("lazy_init", description="initialises lazily on its first call per shape")
def lazy_init(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    if tuple(q.shape) not in _LAZY_DONE:
        time.sleep(LAZY_SLEEP_S)
        _LAZY_DONE.add(tuple(q.shape))
    return _naive(q, k, v, causal, key_lengths)


@register("bad_setup", description="its setup hook returns no callable", setup=lambda q, k, v, **opts: 42)
def bad_setup(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _naive(q, k, v, causal, key_lengths)


@register("cheat_mutate_lengths", description="right answer, then hides every key of the first batch")
def cheat_mutate_lengths(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    out = _naive(q, k, v, causal, key_lengths)
    if key_lengths is not None:
        key_lengths[0] = 0
    return out
