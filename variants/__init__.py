"""Attention implementations behind one calling convention, each with a frozen capability record.

    out = variant(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None)
    q: (B, H, N_q, d_k)  k: (B, H_kv, N_k, d_k)  v: (B, H_kv, N_k, d_v)  ->  out: (B, H, N_q, d_v)

H_kv < H (grouped-query attention) only for variants that declare `gqa`; causal_align="lower-right" and
window=W are passed only when set, and only to variants that declare `lower_right` / `window`.

Third-party variants register with @attnbench.register in a module named by an `attnbench.variants`
entry point, or in a file passed as --variant-file. Importing this package does not import torch.
"""

if __name__ != "attnbench.variants":  # the folder imported by its own name, which attnbench 0.2 removed
    raise ImportError(
        f"{__name__} is now attnbench.variants: write `from attnbench import register`", name="variants"
    )

from .errors import UnsupportedError, VariantError
from .problem import DTYPES, LAYOUTS, Problem, dtype_name, in_layout, torch_dtype, validate_tensors
from .registry import (
    ENTRY_POINT_GROUP,
    Capability,
    Variant,
    all_variants,
    get,
    load_errors,
    load_variant_file,
    register,
    resolve,
)

__all__ = [
    "DTYPES",
    "ENTRY_POINT_GROUP",
    "LAYOUTS",
    "Capability",
    "Problem",
    "UnsupportedError",
    "Variant",
    "VariantError",
    "all_variants",
    "dtype_name",
    "get",
    "in_layout",
    "load_errors",
    "load_variant_file",
    "register",
    "resolve",
    "torch_dtype",
    "validate_tensors",
]
