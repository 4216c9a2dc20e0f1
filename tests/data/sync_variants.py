"""A test-only variant that synchronises inside every call, as a variant reading a value back to the host does
(loaded with --variant-file): a CUDA graph cannot capture it, so graph timing must fall back to events."""

import torch

from attnbench import variants


@variants.register(
    "sync_item",
    description="sdpa's answer after a .item() on q: the host waits for the device in every call",
    default=False,
    memory="linear",
)
def sync_item(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    if not bool(torch.isfinite(q[..., :1, :1]).all().item()):  # .item(): a device-to-host copy, a sync
        raise ValueError("q holds a non-finite value")
    sdpa = variants.get("sdpa").fn
    return sdpa(q, k, v, causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, scale=scale)
