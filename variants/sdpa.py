"""torch.nn.functional.scaled_dot_product_attention: torch's own dispatch, and each backend pinned.

Each pinned variant runs inside `torch.nn.attention.sdpa_kernel(backend)`. Whether a backend can
take a given call is torch's decision; when it refuses, torch warns why and raises "No available
kernel", which becomes UnsupportedError carrying torch's reasons.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .masks import attention_mask, key_padding_mask
from .problem import Problem
from .registry import UnsupportedError, register

_ALL = ("float32", "float16", "bfloat16", "float64")


def _call(q, k, v, causal, key_lengths, dropout_p, scale, backend):
    mask, is_causal = None, causal
    if key_lengths is not None:
        # SDPA refuses attn_mask with is_causal, so causal + padding becomes one (B, 1, N_q, N_k) mask.
        if causal:
            mask = attention_mask(
                q.shape[-2], k.shape[-2], causal=True, key_lengths=key_lengths, device=q.device
            )
        else:
            mask = key_padding_mask(key_lengths.to(q.device), k.shape[-2])  # (B, 1, 1, N_k)
        is_causal = False
    if backend is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
                )
        except RuntimeError as exc:
            if "No available kernel" not in str(exc) and "No viable backend" not in str(exc):
                raise
            reasons = [str(w.message).split(" (Triggered internally")[0] for w in caught]
            reasons = [r for r in reasons if r and "kernel not used because:" not in r] or [str(exc)]
            raise UnsupportedError(
                f"torch refused the {backend.name} backend: " + "; ".join(reasons)
            ) from None


def _cuda_capability() -> tuple[int, int]:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)


def _flash_available(device: str) -> str | None:
    if device == "cpu":
        return None  # torch ships a CPU flash kernel (_scaled_dot_product_flash_attention_for_cpu)
    if not torch.backends.cuda.is_flash_attention_available():
        return "this torch build has no CUDA flash attention kernel"
    major, minor = _cuda_capability()
    if major < 8:
        return f"flash attention needs an sm80+ GPU; this one is sm{major}{minor}"
    return None


def _flash_supports(p: Problem) -> str | None:
    if p.device == "cuda" and p.dtype not in ("float16", "bfloat16"):
        return f"the CUDA flash kernel takes float16/bfloat16 only, not {p.dtype}"
    if p.device == "cuda" and p.padding:
        return "the CUDA flash kernel takes no attention mask (key padding)"
    if p.device == "cpu" and p.dropout:
        return "the CPU flash kernel does not implement dropout"
    return None


def _cuda_only(backend_name: str):
    def check(device: str) -> str | None:
        if device == "cpu":
            return f"torch has no CPU kernel for the {backend_name} SDPA backend (CUDA only)"
        return None

    return check


def _efficient_available(device: str) -> str | None:
    return _cuda_only("memory-efficient")(device)


def _cudnn_available(device: str) -> str | None:
    reason = _cuda_only("cuDNN")(device)
    if reason:
        return reason
    if not torch.backends.cudnn.is_available():
        return "this torch build has no cuDNN"
    major, minor = _cuda_capability()
    if major < 8:
        return f"cuDNN attention needs an sm80+ GPU; this one is sm{major}{minor}"
    return None


def _cudnn_supports(p: Problem) -> str | None:
    if p.dtype not in ("float16", "bfloat16"):
        return f"cuDNN attention takes float16/bfloat16 only, not {p.dtype}"
    return None


@register(
    "sdpa",
    description="F.scaled_dot_product_attention, torch picks the backend",
    dtypes=_ALL,
    memory="linear",
)
def sdpa(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, None)


@register(
    "sdpa_math",
    description="SDPA pinned to the MATH backend (composite ops, materialises the scores)",
    dtypes=_ALL,
    memory="quadratic",
)
def sdpa_math(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, SDPBackend.MATH)


@register(
    "sdpa_flash",
    description="SDPA pinned to FLASH_ATTENTION (FlashAttention-2 on CUDA, a fused flash kernel on CPU)",
    dtypes=("float32", "float16", "bfloat16", "float64"),
    max_head_dim=256,
    memory="linear",
    available=_flash_available,
    supports=_flash_supports,
)
def sdpa_flash(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, SDPBackend.FLASH_ATTENTION)


@register(
    "sdpa_efficient",
    description="SDPA pinned to EFFICIENT_ATTENTION (xformers-derived cutlass kernel, CUDA)",
    devices=("cuda",),
    dtypes=("float32", "float16", "bfloat16"),
    memory="linear",
    available=_efficient_available,
)
def sdpa_efficient(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, SDPBackend.EFFICIENT_ATTENTION)


@register(
    "sdpa_cudnn",
    description="SDPA pinned to CUDNN_ATTENTION (cuDNN fused flash attention, CUDA)",
    devices=("cuda",),
    dtypes=("float16", "bfloat16"),
    memory="linear",
    available=_cudnn_available,
    supports=_cudnn_supports,
)
def sdpa_cudnn(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, SDPBackend.CUDNN_ATTENTION)
