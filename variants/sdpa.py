"""torch.nn.functional.scaled_dot_product_attention: torch's own dispatch, and each backend pinned.

Each pinned variant runs inside `torch.nn.attention.sdpa_kernel(backend)`. Whether a backend can
take a given call is torch's decision; when it refuses, torch warns why and raises "No available
kernel", which becomes UnsupportedError carrying torch's reasons.

The axes beyond the first calling convention:
- grouped-query k/v heads: `enable_gqa=True` (torch >= 2.5; torch documents it for the flash and math
  backends, so efficient and cuDNN do not declare it);
- lower-right causal: `torch.nn.attention.bias.causal_lower_right` for torch's own dispatch and for FLASH
  (FlashAttention's causal is lower-right). For the other pinned backends it is an explicit boolean mask,
  because CausalBias picks the flash or efficient kernel itself, whatever backend is pinned;
- a sliding window, and any mask combined with key padding: one explicit boolean (B, 1, N_q, N_k) mask.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings

from . import lazy
from .errors import UnsupportedError
from .masks import attention_mask
from .problem import Problem
from .registry import register

_ALL = ("float32", "float16", "bfloat16", "float64")


# A backend is named as torch's SDPBackend names it ("MATH", "FLASH_ATTENTION", ...; None: torch's own
# dispatch), and the enum is looked up at call time: registering these variants does not import torch.
torch = lazy.module("torch", globals())
F = lazy.module("torch.nn.functional", globals(), "F")
attention = lazy.module("torch.nn.attention", globals())


def _sdpa_takes(name: str) -> bool:
    """Whether this torch's F.scaled_dot_product_attention has the keyword `name` (a builtin: its
    signature is read from the docstring's first line when inspect cannot see it)."""
    try:
        return name in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):
        head = (F.scaled_dot_product_attention.__doc__ or "").split("->")[0]
        return f"{name}=" in head or f"{name}:" in head


@functools.cache
def _takes_gqa() -> bool:
    return _sdpa_takes("enable_gqa")


def _no_gqa() -> str:
    return (
        f"this torch ({torch.__version__}) has no enable_gqa in F.scaled_dot_product_attention (torch >= 2.5)"
    )


def _lower_right_bias(n_q: int, n_k: int):
    from torch.nn.attention.bias import causal_lower_right

    with warnings.catch_warnings():  # "will produce NaNs when seq_len_q > seq_len_kv": the gate reports
        warnings.simplefilter("ignore")  # those rows (they see no key) as masked_rows
        return causal_lower_right(n_q, n_k)


def _mask(q, k, causal, key_lengths, backend, causal_align, window):
    """(attn_mask, is_causal) for this call: no mask when is_causal says it all."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    lower_right = causal and causal_align == "lower-right" and n_q != n_k  # equal lengths: the same mask
    bias_ok = backend in (None, "FLASH_ATTENTION")  # where CausalBias's own kernel choice is right
    if key_lengths is not None or window or (lower_right and not bias_ok):
        # SDPA refuses attn_mask with is_causal, so every combination becomes one boolean mask
        mask = attention_mask(
            n_q, n_k, causal=causal, key_lengths=key_lengths, device=q.device,
            causal_align=causal_align, window=window,
        )  # fmt: skip
        return mask, False
    if lower_right:
        return _lower_right_bias(n_q, n_k), False
    return None, causal


def _call(q, k, v, causal, key_lengths, dropout_p, scale, backend, causal_align="top-left", window=0):
    extra = {}
    if k.shape[1] != q.shape[1]:
        if not _takes_gqa():
            raise UnsupportedError(_no_gqa())
        extra["enable_gqa"] = True
    mask, is_causal = _mask(q, k, causal, key_lengths, backend, causal_align, window)
    if backend is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **extra
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if backend == "FLASH_ATTENTION" and q.is_cuda and not isinstance(mask, torch.Tensor):
                _check_cuda_flash(q, k, v, mask, dropout_p, is_causal, extra)
            with attention.sdpa_kernel(getattr(attention.SDPBackend, backend)):
                return F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **extra
                )
        except RuntimeError as exc:
            if "No available kernel" not in str(exc) and "No viable backend" not in str(exc):
                raise
            reasons = [str(w.message).split(" (Triggered internally")[0] for w in caught]
            reasons = [r for r in reasons if r and "kernel not used because:" not in r] or [str(exc)]
            raise UnsupportedError(f"torch refused the {backend} backend: " + "; ".join(reasons)) from None


def flash_impl() -> str:
    """Which FlashAttention SDPA's CUDA flash backend runs: the implementation activated through
    torch.nn.attention.activate_flash_attention_impl (FA3, FA4, where torch has it), else torch's built-in
    FlashAttention-2 and the version it matches."""
    import torch.nn.attention as attention

    current = getattr(attention, "current_flash_attention_impl", lambda: None)()
    if current:
        return str(current)
    version = getattr(attention, "_get_flash_version", lambda: "")()
    return f"FA2 {version}".strip()


def _named(backend: str, q) -> str:
    """A backend's name in the row's `kernel` column, with the flash implementation on CUDA."""
    if backend == "FLASH_ATTENTION":
        return f"FLASH_ATTENTION ({flash_impl()})" if q.is_cuda else "FLASH_ATTENTION (CPU)"
    return backend


def _kernel(backend: str | None):
    """The kernel hook of a variant pinned to `backend`; of torch's own dispatch (None), the backend torch
    picks for these inputs (torch._fused_sdp_choice, the choice F.scaled_dot_product_attention makes)."""

    def kernel(q, k, v, *, causal=False, key_lengths=None, causal_align="top-left", window=0, **_):
        if backend is not None:
            return _named(backend, q)
        choose = getattr(torch, "_fused_sdp_choice", None)
        if choose is None:
            return None
        mask, is_causal = _mask(q, k, causal, key_lengths, None, causal_align, window)
        gqa = k.shape[1] != q.shape[1] and _takes_gqa()
        # a CausalBias dispatches by itself, past _fused_sdp_choice. Its module imports dynamo (about 1 CPU-s
        # in every worker): looked up, not imported, since _mask imported it wherever it made one
        bias = sys.modules.get("torch.nn.attention.bias")
        if bias is not None and isinstance(mask, bias.CausalBias):
            return _lower_right_kernel(q, k, v, mask, gqa)
        extra = {"enable_gqa": True} if gqa else {}
        chosen = choose(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=is_causal, scale=None, **extra)
        return _named(attention.SDPBackend(chosen).name, q)

    return kernel


def _lower_right_kernel(q, k, v, bias, gqa: bool) -> str:
    """The kernel torch's CausalBias dispatch runs for a lower-right causal call (torch.nn.attention.bias:
    the flash kernel where it can take the call, else the efficient one, else SDPA's own choice on the
    materialised mask)."""
    from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention

    if q.is_cuda:
        params = SDPAParams(q, k, v, None, 0.0, True, gqa)
        if can_use_flash_attention(params):
            return _named("FLASH_ATTENTION", q)
        if can_use_efficient_attention(params):
            return _named("EFFICIENT_ATTENTION", q)
    dense = bias._materialize(q.device)
    extra = {"enable_gqa": True} if gqa else {}
    chosen = torch._fused_sdp_choice(q, k, v, attn_mask=dense, dropout_p=0.0, is_causal=False, **extra)
    return _named(attention.SDPBackend(chosen).name, q)


def _check_cuda_flash(q, k, v, bias, dropout_p, is_causal, extra) -> None:
    """A lower-right CausalBias falls back to the efficient kernel when flash cannot take the call, whatever
    is pinned: ask torch first, so that a cell pinned to FLASH never measures another kernel."""
    if bias is None:
        return  # plain SDPA: sdpa_kernel's pin holds
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    params = SDPAParams(q, k, v, None, dropout_p, True, bool(extra.get("enable_gqa")))
    if not can_use_flash_attention(params, debug=True):
        raise RuntimeError("No available kernel: the CUDA flash kernel cannot take this lower-right call")


def _sdpa_supports(p: Problem) -> str | None:
    return _no_gqa() if p.gqa and not _takes_gqa() else None


def _cuda_capability() -> tuple[int, int] | None:
    """The current GPU's (major, minor), or None where this process has not initialised CUDA. Reading it
    would initialise CUDA, and the parent that plans cells must stay without a CUDA context (it is not
    the process that measures): there the capability check is left to the worker, whose speed probe has
    initialised CUDA before it checks the cell again, and past that to torch's own refusal at call time."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.get_device_capability()


def _flash_available(device: str) -> str | None:
    if device == "cpu":
        return None  # torch ships a CPU flash kernel (_scaled_dot_product_flash_attention_for_cpu)
    if not torch.backends.cuda.is_flash_attention_available():
        return "this torch build has no CUDA flash attention kernel"
    capability = _cuda_capability()
    if capability is not None and capability[0] < 8:
        return f"flash attention needs an sm80+ GPU; this one is sm{capability[0]}{capability[1]}"
    return None


def _flash_supports(p: Problem) -> str | None:
    if p.device == "cuda" and p.dtype not in ("float16", "bfloat16"):
        return f"the CUDA flash kernel takes float16/bfloat16 only, not {p.dtype}"
    if p.device == "cuda" and p.padding:
        return "the CUDA flash kernel takes no attention mask (key padding)"
    if p.device == "cuda" and p.window:
        return "the CUDA flash kernel takes no attention mask (attnbench passes a sliding window as one)"
    if p.gqa and not _takes_gqa():
        return _no_gqa()
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
    capability = _cuda_capability()
    if capability is not None and capability[0] < 8:
        return f"cuDNN attention needs an sm80+ GPU; this one is sm{capability[0]}{capability[1]}"
    return None


def _cudnn_supports(p: Problem) -> str | None:
    if p.dtype not in ("float16", "bfloat16"):
        return f"cuDNN attention takes float16/bfloat16 only, not {p.dtype}"
    return None


# the pinned variants whose backends torch's own choice for sdpa picks among: where a run does not record
# which one a cell ran, the report does not rank sdpa against them there (Capability.picks_among)
PINNED = ("sdpa_math", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn")


@register(
    "sdpa",
    kernel=_kernel(None),
    picks_among=PINNED,
    description="F.scaled_dot_product_attention, torch picks the backend",
    dtypes=_ALL,
    memory="linear",
    gqa=True,
    lower_right=True,
    window=True,
    supports=_sdpa_supports,
)
def sdpa(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0
):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, None, causal_align, window)


@register(
    "sdpa_math",
    kernel=_kernel("MATH"),
    description="SDPA pinned to the MATH backend (composite ops, materialises the scores)",
    dtypes=_ALL,
    memory="quadratic",
    gqa=True,
    lower_right=True,
    window=True,
    supports=_sdpa_supports,
)
def sdpa_math(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0
):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, "MATH", causal_align, window)


@register(
    "sdpa_flash",
    kernel=_kernel("FLASH_ATTENTION"),
    description="SDPA pinned to FLASH_ATTENTION (FlashAttention-2 on CUDA, a fused flash kernel on CPU)",
    dtypes=("float32", "float16", "bfloat16", "float64"),
    max_head_dim=256,
    memory="linear",
    available=_flash_available,
    supports=_flash_supports,
    gqa=True,
    lower_right=True,
    window=True,  # through attn_mask: the CPU flash kernel takes one, the CUDA one does not (_flash_supports)
)
def sdpa_flash(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0
):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, "FLASH_ATTENTION", causal_align, window)


@register(
    "sdpa_efficient",
    kernel=_kernel("EFFICIENT_ATTENTION"),
    description="SDPA pinned to EFFICIENT_ATTENTION (xformers-derived cutlass kernel, CUDA)",
    devices=("cuda",),
    dtypes=("float32", "float16", "bfloat16"),
    memory="linear",
    available=_efficient_available,
    lower_right=True,  # both through an explicit attn_mask, which this kernel takes
    window=True,
)
def sdpa_efficient(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0
):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, "EFFICIENT_ATTENTION", causal_align, window)


@register(
    "sdpa_cudnn",
    kernel=_kernel("CUDNN_ATTENTION"),
    description="SDPA pinned to CUDNN_ATTENTION (cuDNN fused flash attention, CUDA)",
    devices=("cuda",),
    dtypes=("float16", "bfloat16"),
    memory="linear",
    available=_cudnn_available,
    supports=_cudnn_supports,
)
def sdpa_cudnn(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return _call(q, k, v, causal, key_lengths, dropout_p, scale, "CUDNN_ATTENTION")
