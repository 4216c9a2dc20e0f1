"""Test-only variants (loaded with --variant-file) that remember answers for tensor objects, or hold memory
between calls, and one honest variant with a setup hook that plans from shapes only."""

import torch

from attnbench import register, variants


def _naive(q, k, v, causal, key_lengths):
    return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths)


def _identity(*tensors):
    """What a memo keys on: the objects and their memory, never their values."""
    return tuple((id(t), t.data_ptr()) for t in tensors)


def _memo_setup(q, k, v, *, causal=False, key_lengths=None, **axes):
    """Answers for the very tensors it is handed, once, in setup; returns that answer whenever it is called
    on them again (the gated call and every timed call), and computes honestly on any other tensors (the
    fresh-input re-check)."""
    seen = _identity(q, k, v)
    answer = _naive(q, k, v, causal, key_lengths)

    def run(q, k, v, *, causal=causal, key_lengths=key_lengths, dropout_p=0.0, scale=None):
        if _identity(q, k, v) == seen:
            return answer
        return _naive(q, k, v, causal, key_lengths)

    return run


@register(
    "memo_setup", description="its setup hook remembers the answer for the tensors it was handed",
    backward=False, dropout=False, setup=_memo_setup,
)  # fmt: skip
def memo_setup(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _naive(q, k, v, causal, key_lengths)


@register(
    "memo_setup_bnhd", description="memo_setup, handed (B, N, H, d) memory", backward=False, dropout=False,
    setup=_memo_setup, layout="bnhd",
)  # fmt: skip
def memo_setup_bnhd(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _naive(q, k, v, causal, key_lengths)


_BY_ID: dict = {}


@register(
    "memo_id", description="remembers its answer per tensor object (id, data_ptr) in a module dict",
    backward=False, dropout=False,
)  # fmt: skip
def memo_id(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    key = (*_identity(q, k, v), causal)
    if key not in _BY_ID:
        _BY_ID.clear()  # one entry: the last tensors it saw
        _BY_ID[key] = _naive(q, k, v, causal, key_lengths)
    return _BY_ID[key]


WORKSPACE_BYTES = 16 << 20
WORKSPACE: dict = {}  # made on the first call, kept for every later one (and every later cell)


@register(
    "held_workspace", description="scores in a 16 MiB workspace made on its first call and kept",
    causal=False, padding=False, dropout=False, backward=False,
)  # fmt: skip
def held_workspace(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    b, h, n, d = q.shape
    n_k = k.shape[2]
    if "buf" not in WORKSPACE:
        WORKSPACE["buf"] = torch.empty(WORKSPACE_BYTES // q.element_size(), dtype=q.dtype, device=q.device)
    s = WORKSPACE["buf"][: b * h * n * n_k].view(b, h, n, n_k)  # (B, H, N_q, N_k), reused
    torch.matmul(q, k.transpose(-2, -1), out=s)
    s.mul_(d**-0.5 if scale is None else scale)
    s.sub_(s.amax(-1, keepdim=True)).exp_()
    s.div_(s.sum(-1, keepdim=True))
    return s @ v  # (B, H, N_q, d_v)


PLANS = []


def _shape_setup(q, k, v, *, causal=False, key_lengths=None, **axes):
    """A legitimate plan, from shapes only: the scale, and for a causal cell its (N_q, N_k) mask."""
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[-1]
    hidden = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1) if causal else None
    PLANS.append((n_q, n_k, d))

    def run(q, k, v, *, causal=causal, key_lengths=key_lengths, dropout_p=0.0, scale=None):
        s = (q @ k.transpose(-2, -1)) * (d**-0.5 if scale is None else scale)  # (B, H, N_q, N_k)
        if hidden is not None:
            s = s.masked_fill(hidden, float("-inf"))
        return s.softmax(-1) @ v  # (B, H, N_q, d_v)

    return run


@register(
    "shape_setup", description="plans from shapes in a setup hook", padding=False, dropout=False,
    setup=_shape_setup,
)  # fmt: skip
def shape_setup(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _shape_setup(q, k, v, causal=causal)(q, k, v, scale=scale)


def _bound_setup(q, k, v, *, causal=False, key_lengths=None, **axes):
    """Binds the tensors it was handed and ignores what it is called with: right on those tensors whatever
    values they hold (the gated call, the timed calls, their refill in place), wrong on any others (the
    fresh-input check, in a run in rounds the second visit's warm-up)."""

    def run(*_, dropout_p=0.0, scale=None, **__):
        return _naive(q, k, v, causal, key_lengths)

    return run


@register(
    "bound_setup", description="its setup hook binds the tensors it was handed and ignores the call's",
    backward=False, dropout=False, setup=_bound_setup,
)  # fmt: skip
def bound_setup(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _naive(q, k, v, causal, key_lengths)


_BY_VALUE: dict[tuple, torch.Tensor] = {}


def _fingerprint(q, k, v, causal) -> tuple:
    """What a memo by value keys on: the shape and a few sampled values (an automated kernel writer's
    cheapest "cache")."""
    sample = [float(t.flatten()[i]) for t in (q, k, v) for i in (0, t.numel() // 2, t.numel() - 1)]
    return (tuple(q.shape), causal, *sample)


@register(
    "memo_fingerprint",
    description="remembers answers keyed by a few sampled input values: right on any new values",
)
def memo_fingerprint(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    key = _fingerprint(q, k, v, causal)
    if key not in _BY_VALUE:
        _BY_VALUE[key] = _naive(q, k, v, causal, key_lengths)
    return _BY_VALUE[key]


_RECENT: list = []  # (q's exact bytes, the answer), the last two
RECENT_HITS = [0, 0]  # [answers from memory, calls]


@register("memo_recent", description="remembers its last two answers, keyed by q's exact values")
def memo_recent(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    key = (tuple(q.shape), q.detach().cpu().numpy().tobytes())
    RECENT_HITS[1] += 1
    for seen, answer in _RECENT:
        if seen == key:
            RECENT_HITS[0] += 1
            return answer
    answer = _naive(q, k, v, causal, key_lengths)
    _RECENT[:] = [*_RECENT[-1:], (key, answer)]
    return answer
