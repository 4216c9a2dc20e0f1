"""The shape of one attention problem, and validation of the tensors every variant is called with."""

from __future__ import annotations

from dataclasses import dataclass

from .mods import NONE, parse_mod

# Names used everywhere (CLI, results, capabilities) for the torch dtypes attnbench measures.
DTYPES = ("float32", "float16", "bfloat16", "float64")
# What causal means when N_q != N_k: query i sees keys j <= i (top-left, torch's is_causal) or
# j <= i + N_k - N_q (lower-right: the last query sees every key, torch's causal_lower_right, FlashAttention
# >= 2.1). They agree when N_q = N_k.
CAUSAL_ALIGNS = ("top-left", "lower-right")
# The memory layouts a variant may ask the harness to hand it q, k and v in (Capability.layout). The shape is
# (B, H, N, d) in both: "bhnd" is (B, H, N, d)-contiguous (the default); "bnhd" keeps (B, N, H, d) in memory,
# as xformers and FlashAttention's own API take it, so that `t.transpose(1, 2)` is contiguous and costs the
# timed call no copy.
LAYOUTS = ("bhnd", "bnhd")


def extra_options(
    *, causal_align: str = "top-left", window: int = 0, mod: str = NONE, cu_seqlens=None, block_table=None
) -> dict:
    """The keyword arguments added to the calling convention after it was first written, keeping only those
    not at their default: a variant written before them is never handed one (it declares none)."""
    out: dict = {}
    if causal_align != "top-left":
        out["causal_align"] = causal_align
    if window:
        out["window"] = window
    if mod != NONE:
        out["mod"] = mod
    if cu_seqlens is not None:
        out["cu_seqlens"] = cu_seqlens  # a packed batch (variants.lengths)
    if block_table is not None:
        out["block_table"] = block_table  # a paged K/V cache (variants/paged.py)
    return out


def in_layout(t, layout: str):
    """A new copy of t (B, H, N, d): the same shape and values, its memory in `layout` (one of LAYOUTS).
    Always a copy (clone, never .contiguous(), which hands back t itself where H or N is 1)."""
    import torch

    if layout == "bhnd":
        return t.clone(memory_format=torch.contiguous_format)
    if layout == "bnhd":  # (B, H, N, d) view of (B, N, H, d)-contiguous memory
        return t.transpose(1, 2).clone(memory_format=torch.contiguous_format).transpose(1, 2)
    raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")


def known_dtype(name: str) -> str:
    """name, where it is one of DTYPES, else a ValueError naming them; without importing torch."""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return name


def torch_dtype(name: str):
    """torch.dtype for a dtype name from DTYPES."""
    import torch

    return getattr(torch, known_dtype(name))


def dtype_name(dtype) -> str:
    """'float32' for torch.float32."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Problem:
    """What a capability check needs to know about a call, without the tensors: each field named and valued
    as the sweep axis it comes from (results.axes), so that a cell's Problem is its axes'."""

    device: str = "cpu"
    dtype: str = "float32"
    batch: int = 1
    heads: int = 1
    seq_len: int = 1  # query rows, N_q
    seq_k: int = 1
    d_k: int = 64
    d_v: int = 64
    causal: bool = False
    padding: float = 0.0  # the fraction of keys padded away (key_lengths); 0: every key seen
    dropout: float = 0.0  # the dropout probability; 0: none
    pass_: str = "fwd"  # "fwd", or "fwdbwd" (the backward pass too)
    kv_heads: int | None = None  # key/value heads; None: = heads. Fewer: grouped-query attention
    causal_align: str = "top-left"  # "lower-right" only matters when causal
    window: int = 0  # sliding window in keys (with causal); 0 = none
    mod: str = NONE  # score modification, canonical text of variants.mods ('alibi', 'softcap:30')
    lengths: str = "none"  # a packed batch's length pattern (variants.lengths); "none": one length
    page_size: int = 0  # a paged K/V cache's tokens per page (variants/paged.py); 0: contiguous

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)

    @property
    def backward(self) -> bool:
        """Whether the call runs the backward pass too (pass_ 'fwdbwd')."""
        return self.pass_ == "fwdbwd"

    @property
    def seq_q(self) -> int:
        """The query rows, N_q (seq_len: the axis's name)."""
        return self.seq_len

    @property
    def dropout_p(self) -> float:
        """The dropout probability (dropout: the axis's name)."""
        return self.dropout

    @property
    def gqa(self) -> bool:
        """Grouped-query attention: fewer key/value heads than query heads."""
        return self.kv_heads != self.heads

    @property
    def packed(self) -> bool:
        """A packed variable-length batch: (1, H, T, d) inputs and cu_seqlens (variants.lengths)."""
        return self.lengths != "none" and not self.page_size

    @property
    def lower_right(self) -> bool:
        return self.causal and self.causal_align == "lower-right"


def validate_tensors(
    q, k, v, *, key_lengths=None, causal=False, dropout_p=0.0, causal_align="top-left", window=0, mod=NONE,
    cu_seqlens=None, block_table=None,
) -> Problem:  # fmt: skip
    """Check the common calling convention and return the Problem; ValueError naming what is wrong.

    q: (B, H, N_q, d_k), k: (B, H_kv, N_k, d_k), v: (B, H_kv, N_k, d_v) with H_kv dividing H (query head h
    uses key/value head h // (H / H_kv)), key_lengths: (B,) integer valid key counts; a packed batch
    (variants.lengths): B = 1, N_q = N_k = T and cu_seqlens (S + 1,) integer offsets from 0 to T.
    """
    import torch

    _check_tensors(q, k, v)
    if block_table is not None:
        return _paged_problem(q, k, v, key_lengths, block_table, causal, causal_align)
    (bq, hq, nq, dq), (bk, hk, nk, dk), (bv, hv, nv, dv) = q.shape, k.shape, v.shape
    if not (bq == bk == bv):
        raise ValueError(f"batch sizes differ: q {bq}, k {bk}, v {bv}")
    if hk != hv:
        raise ValueError(f"k and v head counts differ: {hk} vs {hv}")
    if hk < 1 or hq % hk:
        raise ValueError(
            f"k/v heads ({hk}) must divide q heads ({hq}): query head h uses kv head h // (H / H_kv)"
        )
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
    if cu_seqlens is not None:
        _check_offsets(cu_seqlens, bq, nq, nk, key_lengths)
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"dropout_p must lie in [0, 1), got {dropout_p}")
    if causal_align not in CAUSAL_ALIGNS:
        raise ValueError(f"causal_align must be one of {', '.join(CAUSAL_ALIGNS)}, got {causal_align!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be 0 (none) or a positive number of keys, got {window!r}")
    if window and not causal:
        raise ValueError(f"a sliding window ({window}) needs causal=True: it counts back from the diagonal")
    mod = parse_mod(mod)  # ValueError naming a bad mod; the canonical text from here on
    name = dtype_name(q.dtype)
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {q.dtype}; attnbench measures {', '.join(DTYPES)}")
    return Problem(
        device=q.device.type,
        dtype=name,
        batch=bq,
        heads=hq,
        seq_len=nq,
        seq_k=nk,
        d_k=dq,
        d_v=dv,
        causal=bool(causal),
        padding=0.0 if key_lengths is None else 1.0 - float(key_lengths.sum()) / (bq * nk),
        dropout=float(dropout_p),
        lengths="none" if cu_seqlens is None else "packed",
        pass_="fwdbwd" if q.requires_grad or k.requires_grad or v.requires_grad else "fwd",
        kv_heads=hk,
        causal_align=causal_align,
        window=window,
        mod=mod,
    )


def _check_offsets(cu_seqlens, batch: int, n_q: int, n_k: int, key_lengths) -> None:
    """ValueError unless cu_seqlens are a packed batch's offsets: 1-D integers from 0 up to T = N_q = N_k,
    never falling, for B = 1 and no key padding."""
    import torch

    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError("cu_seqlens must be a 1-D tensor of sequence offsets 0, L_0, L_0 + L_1, ..., T")
    if cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype == torch.bool:
        raise ValueError(f"cu_seqlens must be integers, not {cu_seqlens.dtype}")
    if batch != 1 or n_q != n_k or key_lengths is not None:
        raise ValueError(
            "a packed batch has batch 1, N_q = N_k and no key_lengths, "
            f"got batch {batch}, N_q {n_q}, N_k {n_k}"
        )
    offs = cu_seqlens.tolist()
    if offs[0] != 0 or offs[-1] != n_q or any(b < a for a, b in zip(offs, offs[1:], strict=False)):
        raise ValueError(f"cu_seqlens must rise from 0 to T = {n_q}, got {offs}")


def _check_tensors(q, k, v) -> None:
    """ValueError unless q, k, v are 4-D tensors of one dtype on one device."""
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


def _paged_problem(q, k, v, key_lengths, block_table, causal: bool, causal_align: str) -> Problem:
    """The Problem of a paged decode call (variants/paged.py): q (B, H, N_q, d_k), k and v pools (P, page,
    H_kv, d), key_lengths (B,) contexts of at least N_q tokens in their pages, block_table (B, max_pages)
    integer pool pages; ValueError naming what is wrong."""
    import torch

    (b, h, n_q, d_k), (pages, page, h_kv, d_kk), (pv, page_v, h_v, d_v) = q.shape, k.shape, v.shape
    if (pages, page, h_kv) != (pv, page_v, h_v) or d_k != d_kk:
        raise ValueError(f"paged k {tuple(k.shape)} and v {tuple(v.shape)} must be (P, page, H_kv, d) pools")
    if h_kv < 1 or h % h_kv:
        raise ValueError(f"k/v heads ({h_kv}) must divide q heads ({h})")
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != b:
        raise ValueError(f"block_table must be a (B={b}, max_pages) tensor of pool pages")
    if key_lengths is None or key_lengths.shape != (b,):
        raise ValueError(f"a paged cache needs key_lengths, (B={b},) context lengths")
    lengths = key_lengths.tolist()
    if min(lengths) < n_q or max(lengths) > block_table.shape[1] * page:
        raise ValueError(
            f"context lengths must lie in {n_q}..{block_table.shape[1] * page} (N_q..max_pages x page), "
            f"got {lengths}"
        )
    if causal and causal_align != "lower-right" and n_q > 1:
        raise ValueError(
            "a paged decode step's queries sit at the end of their context: causal_align lower-right"
        )
    return Problem(
        device=q.device.type, dtype=dtype_name(q.dtype), batch=b, heads=h, seq_len=n_q, seq_k=max(lengths),
        d_k=d_k, d_v=d_v, causal=bool(causal), kv_heads=h_kv, causal_align=causal_align, page_size=page,
        pass_="fwdbwd" if q.requires_grad or k.requires_grad or v.requires_grad else "fwd",
    )  # fmt: skip
