"""Test-only variants that get dropout wrong in the ways a real implementation can (loaded with
--variant-file): each is right without dropout, so only the dropout check can tell."""

import itertools

import torch

from attnbench import register, variants


def _weights(q, k, causal, key_lengths):
    """The softmax weights (B, H, N_q, N_k), as naive computes them."""
    v = torch.zeros(*k.shape[:-1], 1, dtype=k.dtype, device=k.device)
    return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths, return_weights=True)[1]


@register("drop_ignored", description="ignores dropout_p: always the output without dropout")
def drop_ignored(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths)


@register("drop_unscaled", description="drops weights with probability p but never scales by 1/(1 - p)")
def drop_unscaled(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    w = _weights(q, k, causal, key_lengths)
    keep = torch.rand_like(w) >= dropout_p
    return (w * keep) @ v  # E[out] = (1 - p) * P V


@register("drop_renormalised", description="drops weights, then renormalises the kept ones to sum to 1")
def drop_renormalised(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    w = _weights(q, k, causal, key_lengths)
    if dropout_p > 0:
        w = w * (torch.rand_like(w) >= dropout_p)
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)  # softmax over the kept keys: not dropout
    return w @ v


@register("drop_shared_heads", description="one (N_q, N_k) dropout mask shared by every batch and head")
def drop_shared_heads(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    w = _weights(q, k, causal, key_lengths)
    if dropout_p > 0:
        keep = torch.rand(w.shape[-2:], device=w.device) >= dropout_p  # (N_q, N_k), broadcast over B, H
        w = w * keep / (1 - dropout_p)
    return w @ v


@register("drop_fixed_mask", description="the same dropout mask on every call (its own generator, one seed)")
def drop_fixed_mask(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    w = _weights(q, k, causal, key_lengths)
    if dropout_p > 0:
        g = torch.Generator(device=w.device).manual_seed(1234)
        w = w * (torch.rand(w.shape, generator=g, device=w.device) >= dropout_p) / (1 - dropout_p)
    return w @ v


_CALLS = itertools.count(1)


def own_rng(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    """Right dropout from its own generator, seeded by a call counter: not by torch.manual_seed."""
    w = _weights(q, k, causal, key_lengths)
    if dropout_p > 0:
        g = torch.Generator(device=w.device).manual_seed(next(_CALLS))
        w = w * (torch.rand(w.shape, generator=g, device=w.device) >= dropout_p) / (1 - dropout_p)
    return w @ v


register("drop_own_rng", description="its own RNG, and says so", dropout_deterministic=False)(own_rng)
register("drop_own_rng_promised", description="its own RNG, but promises torch.manual_seed")(own_rng)
