"""Test-only variants that change what the harness checks, or how fast torch runs, for every cell after theirs
in the same worker (loaded with --variant-file; from the hostile plug-ins of /tmp/evil: tol.py, state.py):
the float64 gate's tolerance table loosened in place, a built-in variant's helper replaced, a torch function
mode left entered, aten's CPU softmax kernel replaced. Each does it only in a worker (never in the test's
own process, which the run imports this file into too); buggy_noscale, honest and honest_too are the
neighbours measured after them (tests/harness/test_state_reach.py)."""

import gc
import multiprocessing

import torch

from attnbench import variants
from attnbench.results import formulas

IN_WORKER = multiprocessing.parent_process() is not None
_KEPT = []  # what must outlive the call: a torch.library.Library deregisters its kernels when collected


def _attention(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return torch.softmax(s, -1) @ v


@variants.register("evil_tol", padding=False, dropout=False, backward=False)
def evil_tol(q, k, v, *, causal=False):
    """50% wrong, and loosens the gate for everyone: the tolerance table is read-only, so through the dict
    behind it."""
    if IN_WORKER:
        table = formulas.TOLERANCE  # a dict as it was, else the mapping proxy's dict:
        (table,) = [table] if isinstance(table, dict) else gc.get_referents(table)
        table["float32"] = 100.0
    return _attention(q, k, v) * 1.5


@variants.register("buggy_noscale", padding=False, dropout=False, backward=False)
def buggy_noscale(q, k, v, *, causal=False):
    """an honest, buggy neighbour: forgets the 1/sqrt(d) scale"""
    return torch.matmul(q, k.transpose(-2, -1)).softmax(-1) @ v


@variants.register("evil_helper", padding=False, dropout=False, backward=False)
def evil_helper(q, k, v, *, causal=False):
    """answers right, and makes the built-in naive wrong: replaces the helper its scores come from"""
    if IN_WORKER:
        from attnbench.variants import grouped

        scores = grouped.scores
        grouped.scores = lambda q, k: scores(q, k) * 1.001
    return _attention(q, k, v)


class _Counting(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@variants.register("evil_mode", padding=False, dropout=False, backward=False)
def evil_mode(q, k, v, *, causal=False):
    """answers right, and leaves a TorchFunctionMode entered: every later torch call goes through it"""
    out = _attention(q, k, v)
    if IN_WORKER:
        _Counting().__enter__()
    return out


def _rounded_softmax(x, dim, half_to_float):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return (e / e.sum(dim, keepdim=True)).to(torch.bfloat16).to(x.dtype)  # right to 3 digits


@variants.register("evil_kernel", padding=False, dropout=False, backward=False)
def evil_kernel(q, k, v, *, causal=False):
    """answers right, and replaces aten's CPU kernel of _softmax (torch.softmax's) for every later call"""
    out = _attention(q, k, v)
    if IN_WORKER:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("_softmax", _rounded_softmax, "CPU")
        _KEPT.append(lib)
    return out


@variants.register("honest", padding=False, dropout=False, backward=False)
def honest(q, k, v, *, causal=False):
    return _attention(q, k, v)


@variants.register("honest_too", padding=False, dropout=False, backward=False)
def honest_too(q, k, v, *, causal=False):
    return _attention(q, k, v)
