"""Test-only variants for `attnbench profile` (--variant-file): one that takes long enough to be stopped, one
that raises, one that returns the scores instead of the output."""

import time

import torch

from attnbench import variants


@variants.register("profile_sleepy", description="sleeps a minute per call: a profile to stop with Ctrl-C")
def profile_sleepy(q, k, v, **kw):
    time.sleep(60)
    return variants.get("naive").fn(q, k, v, **kw)


@variants.register("profile_boom", description="raises RuntimeError")
def profile_boom(q, k, v, **kw):
    raise RuntimeError("boom in the kernel")


@variants.register("profile_scores", description="returns the scores (B, H, N_q, N_k), not the output")
def profile_scores(q, k, v, **kw):
    return torch.matmul(q, k.transpose(-2, -1))
