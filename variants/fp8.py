"""FP8 attention: q, k, v rounded to float8_e4m3fn by a recipe (variants.quant), then attention on them.

- `fp8_emulated` (one scale per tensor) and `fp8_emulated_head` (one per batch element and head): the
  rounding emulated on any device, quantised to float8_e4m3fn and read back in float32, then SDPA's MATH
  backend in float32 and the output cast to the inputs' dtype. No FP8 arithmetic runs, so the speed is an
  emulation's (not in default sweeps); the accuracy is the recipe's, what FP8 inputs cost a kernel that
  computes on them exactly, and it is tested on every machine.
- `fp8_sdpa`: torch's experimental quantized SDPA
  (`torch.nn.attention.experimental._scaled_dot_product_attention_quantized`) on FlashAttention-3's FP8
  forward kernel: CUDA sm90 (Hopper), with a FlashAttention-3 build installed (its `flash_attn_interface`
  module) and FA3 activated through `torch.nn.attention.activate_flash_attention_impl("FA3")`. Its descales
  are per batch element and k/v head, (B, H_kv): the `e4m3fn:head` recipe; it returns bfloat16. The kernel
  also rounds the softmax weights to FP8 before P @ V, which the gate counts as kernel error.

- `fp8_paged_emulated` (one scale per tensor) and `fp8_paged_emulated_head` (per head): an FP8 KV cache in
  paged decode (variants/paged.py's calling convention), emulated: q rounded by the recipe, the K/V pools
  rounded as pools (one scale over a pool, or one per K/V head over it), then paged_chunked's online softmax
  over the pages in float32. A serving engine writes its cache in FP8 once, token by token; here the whole
  pool is rounded inside every call, as the dense pair rounds its inputs: the speed is an emulation's.

Every variant here declares its recipe (Capability.quant): the float64 gate holds the kernel to the
reference of the rounded inputs and records the rounding's own error apart (quant_rel_err, sqnr_db).
The timed call includes the quantisation, as a caller holding float32 or bfloat16 activations pays it.
"""

from __future__ import annotations

import contextlib
import importlib.util

from . import paged, quant
from .errors import UnsupportedError
from .registry import register
from .sdpa import _cuda_capability, sdpa_math

TENSOR, HEAD = "e4m3fn:tensor", "e4m3fn:head"
FA3_MODULE = "flash_attn_interface"  # what torch.nn.attention._fa3 imports to activate FA3


def _emulated(recipe: str):
    """The attention function of an emulated recipe: inputs rounded by it, then SDPA MATH in float32."""

    def fn(
        q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
        window=0,
    ):  # fmt: skip
        q32, k32, v32 = (quant.dequantise(t, recipe) for t in (q, k, v))  # (B, H, N, d) float32 each
        out = sdpa_math(
            q32, k32, v32, causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, scale=scale,
            causal_align=causal_align, window=window,
        )  # fmt: skip
        return out.to(q.dtype)

    fn.__name__ = fn.__qualname__ = f"fp8_emulated_{recipe.partition(':')[2]}"
    return fn


def _emulated_kernel(q, k, v, **_) -> str:
    return "MATH (float32 on FP8-rounded inputs, emulated)"


def _emulated_available(device: str) -> str | None:
    return quant.available()


_EMULATED = dict(
    kernel=_emulated_kernel,
    dtypes=("float32", "float16", "bfloat16"),  # not float64: its gate's tolerance is beyond float32 math
    memory="quadratic",  # SDPA MATH materialises the scores
    dropout=False,
    backward=False,  # the rounding has no gradient (a straight-through estimator is a training recipe)
    default=False,  # an emulation's speed says nothing of FP8 kernels
    available=_emulated_available,
    gqa=True,
    lower_right=True,
    window=True,
)
register(
    "fp8_emulated",
    description=f"FP8 emulated: q, k, v rounded to {quant.describe(TENSOR)}, SDPA MATH in float32",
    quant=TENSOR,
    **_EMULATED,
)(_emulated(TENSOR))
register(
    "fp8_emulated_head",
    description=f"FP8 emulated: q, k, v rounded to {quant.describe(HEAD)}, SDPA MATH in float32",
    quant=HEAD,
    **_EMULATED,
)(_emulated(HEAD))


# ---- an FP8 K/V cache in paged decode --------------------------------------------------------------------


def _emulated_paged(recipe: str):
    """The paged decode function of an emulated FP8 KV cache: q rounded by the recipe as a tensor, the K/V
    pools as pools (one scale over a pool, or per K/V head over it: variants.quant), then paged_chunked's
    online softmax over the pages in float32."""

    def fn(
        q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
        block_table=None,
    ):  # fmt: skip
        q32 = quant.dequantise(q, recipe)  # (B, H, N_q, d_k) float32
        k32, v32 = (quant.dequantise(t, recipe, pool=True) for t in (k, v))  # (P, page, H_kv, d) float32
        out = paged.paged_chunked(
            q32, k32, v32, causal=causal, key_lengths=key_lengths, scale=scale, block_table=block_table
        )
        return out.to(q.dtype)

    fn.__name__ = fn.__qualname__ = f"fp8_paged_emulated_{recipe.partition(':')[2]}"
    return fn


def _emulated_paged_kernel(q, k, v, **_) -> str:
    return "online softmax over the pages (float32 on an FP8-rounded K/V cache, emulated)"


# paged decode cells only (variants/paged.py's capabilities), the dense pair's dtypes and availability
_EMULATED_PAGED = dict(
    paged._PAGED,
    kernel=_emulated_paged_kernel,
    dtypes=_EMULATED["dtypes"],
    memory="linear",  # one page-table column of scores at a time
    available=_emulated_available,
    supports=paged._paged_only,
)
register(
    "fp8_paged_emulated",
    description=f"FP8 KV cache emulated: q and the K/V pools rounded to {quant.describe(TENSOR)} over the "
    "pool, online softmax over the pages in float32",
    quant=TENSOR,
    **_EMULATED_PAGED,
)(_emulated_paged(TENSOR))
register(
    "fp8_paged_emulated_head",
    description="FP8 KV cache emulated: q rounded per batch element and head, the K/V pools per K/V head "
    "(float8_e4m3fn, amax / 448), online softmax over the pages in float32",
    quant=HEAD,
    **_EMULATED_PAGED,
)(_emulated_paged(HEAD))


# ---- torch's FP8 SDPA on FlashAttention-3 --------------------------------------------------------------


def _quantized_sdpa():
    """torch's experimental FP8 SDPA, or None where this torch has none."""
    try:
        from torch.nn.attention.experimental import _scaled_dot_product_attention_quantized as module
    except ImportError:
        return None
    return getattr(module, "_scaled_dot_product_attention_quantized", None)


def _sdpa_available(device: str) -> str | None:
    import torch

    if device != "cuda":
        return "torch's FP8 SDPA runs FlashAttention-3's FP8 kernel: CUDA sm90 (Hopper) only"
    if _quantized_sdpa() is None:
        return f"this torch ({torch.__version__}) has no torch.nn.attention.experimental quantized SDPA"
    from torch.nn import attention

    if "FA3" not in getattr(attention, "list_flash_attention_impls", list)():
        return f"this torch ({torch.__version__}) cannot activate FlashAttention-3 (no FA3 implementation)"
    if importlib.util.find_spec(FA3_MODULE) is None:
        return f"FlashAttention-3 is not installed (no {FA3_MODULE} module: flash-attention's hopper build)"
    capability = _cuda_capability()  # None in the parent, which never initialises CUDA: the worker checks
    if capability is not None and capability[0] != 9:
        sm = f"sm{capability[0]}{capability[1]}"
        return f"FlashAttention-3's FP8 kernel needs an sm90 (Hopper) GPU; this one is {sm}"
    return quant.available()


@contextlib.contextmanager
def _fa3_active():
    """FA3 activated for the call and the implementation before it put back after: left active, it would
    change the kernel of every later SDPA cell in the worker. torch has no scoped form, so this costs each
    call a registration and its removal (tens of microseconds), unless FA3 is active already."""
    from torch.nn import attention

    before = attention.current_flash_attention_impl()
    if before == "FA3":
        yield
        return
    attention.activate_flash_attention_impl("FA3")
    try:
        yield
    finally:
        attention.restore_flash_attention_impl()
        if before is not None:
            attention.activate_flash_attention_impl(before)


def _sdpa_kernel(q, k, v, **_) -> str:
    return "FLASH_ATTENTION quantized (FA3 FP8)"


@register(
    "fp8_sdpa",
    description="torch's quantized SDPA on FlashAttention-3's FP8 kernel (sm90), per-head descales",
    kernel=_sdpa_kernel,
    devices=("cuda",),
    dtypes=("bfloat16",),  # the kernel returns bfloat16
    memory="linear",
    padding=False,  # no attn_mask: is_causal alone
    dropout=False,
    backward=False,  # torch documents forward only
    available=_sdpa_available,
    quant=HEAD,
)
def fp8_sdpa(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    b, h_kv = k.shape[0], k.shape[1]
    (q8, qs), (k8, ks), (v8, vs) = (quant.quantise(t, HEAD) for t in (q, k, v))  # scales (B, H, 1, 1)
    descales = [s.reshape(b, h_kv).contiguous() for s in (qs, ks, vs)]  # (B, H_kv) float32, as torch wants
    try:
        with _fa3_active():
            out = _quantized_sdpa()(
                q8, k8, v8, is_causal=causal, scale=scale, q_descale=descales[0], k_descale=descales[1],
                v_descale=descales[2],
            )  # fmt: skip
    except RuntimeError as exc:
        if "unsupported" not in str(exc):
            raise
        raise UnsupportedError(f"torch's FP8 SDPA refused the call: {exc}") from None
    return out.to(q.dtype)
