"""xformers.ops.memory_efficient_attention, adapted to attnbench's (B, H, N, d) calling convention.

xformers takes (B, N, H, K) tensors and expresses masks as attention-bias objects:
LowerTriangularMask for top-left causal, BlockDiagonalPaddedKeysMask for key padding (the batch is
packed into one sequence of B blocks, keys padded to N_k). Its causal + padded-keys masks are aligned
bottom-right, which differs from attnbench's top-left convention, so that combination is refused.

xformers also has grouped-query inputs (5-D BMGHK tensors), bottom-right causal masks
(LowerTriangularFromBottomRightMask) and local windows (...LocalAttentionMask), but attnbench cannot run
xformers on this project's machines to check them, so the capability declares none of them (gqa,
lower_right and window stay False): those cells are `unsupported`, never measured on an untested path.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version

from .problem import Problem
from .registry import UnsupportedError, register


def _version() -> str | None:
    try:
        return version("xformers")
    except PackageNotFoundError:
        return None


def _available(device: str) -> str | None:
    if importlib.util.find_spec("xformers") is None:
        return "xformers is not installed (pip install 'attnbench[xformers]')"
    try:
        from xformers.ops import fmha
    except Exception as exc:  # a broken binary install: say what went wrong
        return f"xformers {_version()} failed to import: {type(exc).__name__}: {exc}"
    # Ask xformers itself which devices its forward operators support (0.0.35: cuda only, no CPU kernel).
    ops = getattr(fmha, "ALL_FW_OPS", ())
    if ops and not any(device in getattr(op, "SUPPORTED_DEVICES", ()) for op in ops):
        names = ", ".join(sorted({str(getattr(op, "NAME", op)) for op in ops}))
        return (
            f"xformers {_version()} has no {device.upper()} kernel: no memory_efficient_attention "
            f"operator supports device={device} ({names})"
        )
    return None


def _supports(p: Problem) -> str | None:
    if p.causal and p.padding:
        return "xformers' causal padded-keys masks are bottom-right aligned; attnbench's causal is top-left"
    return None


@register(
    "xformers",
    description="xformers.ops.memory_efficient_attention (cutlass / flash kernels, CUDA)",
    devices=("cuda",),
    dtypes=("float32", "float16", "bfloat16"),
    memory="linear",
    available=_available,
    supports=_supports,
)
def xformers_attention(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    import xformers.ops as xops
    from xformers.ops import fmha

    if causal and key_lengths is not None:
        raise UnsupportedError(_supports(Problem(causal=True, padding=True)))
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    qx, kx, vx = (t.transpose(1, 2) for t in (q, k, v))  # (B, N, H, K) views
    bias = None
    if causal:
        bias = fmha.attn_bias.LowerTriangularMask()
    elif key_lengths is not None:
        bias = fmha.attn_bias.BlockDiagonalPaddedKeysMask.from_seqlens(
            q_seqlen=[n_q] * b, kv_padding=n_k, kv_seqlen=key_lengths.tolist(), device=q.device
        )
        # pack the batch into one sequence of B blocks: (1, B*N, H, K)
        qx, kx, vx = (t.reshape(1, -1, h, t.shape[-1]) for t in (qx, kx, vx))
    try:
        out = xops.memory_efficient_attention(qx, kx, vx, attn_bias=bias, p=dropout_p, scale=scale)
    except NotImplementedError as exc:  # no operator supports these inputs: xformers says which and why
        raise UnsupportedError(" ".join(str(exc).split())[:500]) from None
    return out.reshape(b, n_q, h, -1).transpose(1, 2)  # (B, H, N_q, d_v)
