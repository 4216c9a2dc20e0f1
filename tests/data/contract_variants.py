"""Test-only variants for the output contract and the backward gate (loaded with --variant-file): ones that
return something other than a (B, H, N_q, d_v) tensor of the inputs' dtype and device, each with the right
numbers inside (always, or only after their first call, or only when autograd records), and one correct
variant that autograd accepts only through .backward() (reentrant activation checkpointing refuses
torch.autograd.grad)."""

import torch
import torch.utils.checkpoint

from attnbench import variants


def _naive(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)


@variants.register("contract_float64", description="the right answer, in float64 whatever the inputs")
def contract_float64(q, k, v, **kw):
    return _naive(q.double(), k.double(), v.double(), **kw)  # more accurate, and twice the bytes moved


@variants.register("contract_tuple", description="returns (out, lse), as flash-attention kernels do")
def contract_tuple(q, k, v, **kw):
    out = _naive(q, k, v, **kw)
    return out, torch.zeros(out.shape[:-1], dtype=torch.float32, device=out.device)  # (B, H, N_q)


@variants.register("contract_list", description="returns [out]")
def contract_list(q, k, v, **kw):
    return [_naive(q, k, v, **kw)]


@variants.register("contract_transposed", description="the right answer laid out (B, N_q, H, d_v)")
def contract_transposed(q, k, v, **kw):
    return _naive(q, k, v, **kw).transpose(1, 2).contiguous()


@variants.register("checkpointed", description="naive under reentrant activation checkpointing")
def checkpointed(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, **kw):
    def attend(q, k, v):
        return _naive(q, k, v, causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, scale=scale, **kw)

    if not torch.is_grad_enabled():  # forward only: nothing to recompute
        return attend(q, k, v)
    # use_reentrant=True: autograd's .grad() is refused ("Checkpointing is not compatible with .grad()")
    return torch.utils.checkpoint.checkpoint(attend, q, k, v, use_reentrant=True)


LATE_CALLS = [0]  # calls of contract_late; a test resets it before its cell


@variants.register("contract_late", description="a tensor on its first call, (out, lse) from its second on")
def contract_late(q, k, v, **kw):
    LATE_CALLS[0] += 1
    out = _naive(q, k, v, **kw)
    return out if LATE_CALLS[0] == 1 else (out, out.sum(-1))  # the gated call is its first


@variants.register("contract_grad_tuple", description="(out, lse) when autograd records, as in training")
def contract_grad_tuple(q, k, v, **kw):
    out = _naive(q, k, v, **kw)
    return (out, out.sum(-1)) if torch.is_grad_enabled() else out
