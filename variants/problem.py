"""The shape of one attention problem, and validation of the tensors every variant is called with."""

from __future__ import annotations

from dataclasses import dataclass

# Names used everywhere (CLI, results, capabilities) for the torch dtypes attnbench measures.
DTYPES = ("float32", "float16", "bfloat16", "float64")


def torch_dtype(name: str):
    """torch.dtype for a dtype name from DTYPES."""
    import torch

    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return getattr(torch, name)


def dtype_name(dtype) -> str:
    """'float32' for torch.float32."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Problem:
    """What a capability check needs to know about a call, without the tensors."""

    device: str = "cpu"
    dtype: str = "float32"
    batch: int = 1
    heads: int = 1
    seq_q: int = 1
    seq_k: int = 1
    d_k: int = 64
    d_v: int = 64
    causal: bool = False
    padding: bool = False
    dropout: bool = False
    dropout_p: float = 0.0  # the probability itself, for a `supports` check that refuses some values
    backward: bool = False


def validate_tensors(q, k, v, *, key_lengths=None, causal=False, dropout_p=0.0) -> Problem:
    """Check the common calling convention and return the Problem; ValueError naming what is wrong.

    q: (B, H, N_q, d_k), k: (B, H, N_k, d_k), v: (B, H, N_k, d_v), key_lengths: (B,) integer valid key counts.
    """
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dims (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")
    (bq, hq, nq, dq), (bk, hk, nk, dk), (bv, hv, nv, dv) = q.shape, k.shape, v.shape
    if not (bq == bk == bv):
        raise ValueError(f"batch sizes differ: q {bq}, k {bk}, v {bv}")
    if not (hq == hk == hv):
        raise ValueError(f"head counts differ: q {hq}, k {hk}, v {hv}")
    if dq != dk:
        raise ValueError(f"q and k head dims differ: {dq} vs {dk}")
    if nk != nv:
        raise ValueError(f"k and v sequence lengths differ: {nk} vs {nv}")
    if min(bq, hq, nq, nk, dq, dv) < 1:
        raise ValueError(
            f"empty dimension in shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if key_lengths is not None:
        if not isinstance(key_lengths, torch.Tensor) or key_lengths.dim() != 1 or key_lengths.shape[0] != bq:
            raise ValueError(f"key_lengths must be a 1-D tensor of {bq} valid key counts")
        if key_lengths.dtype.is_floating_point or key_lengths.dtype == torch.bool:
            raise ValueError(f"key_lengths must be integers, not {key_lengths.dtype}")
        if int(key_lengths.min()) < 0 or int(key_lengths.max()) > nk:
            raise ValueError(f"key_lengths must lie in 0..{nk}, got {key_lengths.tolist()}")
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"dropout_p must lie in [0, 1), got {dropout_p}")
    name = dtype_name(q.dtype)
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {q.dtype}; attnbench measures {', '.join(DTYPES)}")
    return Problem(
        device=q.device.type,
        dtype=name,
        batch=bq,
        heads=hq,
        seq_q=nq,
        seq_k=nk,
        d_k=dq,
        d_v=dv,
        causal=bool(causal),
        padding=key_lengths is not None,
        dropout=float(dropout_p) > 0,
        dropout_p=float(dropout_p),
        backward=q.requires_grad or k.requires_grad or v.requires_grad,
    )
