"""Test-only variants written as model code is, not for attnbench: their shapes are declared to @register
(variants.adapt) instead of wrapped by hand. Loaded with --variant-file."""

import torch
import torch.nn.functional as F

from attnbench import register

CALLS: list = []  # (variant, the mask it was handed: None or its dtype and shape)


def model_attention(query, key, value, attn_mask=None, dropout_p=0.0, scale=None):
    """Attention as a model's layer writes it: (B, N, H, d) in and out, an additive mask, (out, weights)."""
    CALLS.append(("model", None if attn_mask is None else (attn_mask.dtype, tuple(attn_mask.shape))))
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (B, H, N, d)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, N_q, N_k)
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = scores.softmax(dim=-1)
    return (weights @ v).transpose(1, 2), weights  # (B, N_q, H, d_v)


def wrong_sign_attention(query, key, value, attn_mask=None, dropout_p=0.0, scale=None):
    """The same with a real bug: the additive mask subtracted, so the masked keys win instead of losing."""
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if attn_mask is not None:
        scores = scores - attn_mask.clamp(min=-1e4)  # -min would overflow to inf
    return (scores.softmax(dim=-1) @ v).transpose(1, 2), None


declared = dict(takes="bnhd", returns="first", mask="additive", lower_right=True, window=True, dropout=False)
register("declared_model", description="model-style attention, shapes declared", **declared)(model_attention)
register("declared_wrong_sign", description="the mask subtracted", **declared)(wrong_sign_attention)
# torch's own SDPA as third-party code: (B, H, N, d), a boolean attn_mask, the output itself
register("declared_sdpa_bool", description="F.scaled_dot_product_attention, bool attn_mask", mask="bool",
         lower_right=True, window=True, dropout=False)(F.scaled_dot_product_attention)  # fmt: skip
assert torch  # imported for the reader: the functions above are torch code
