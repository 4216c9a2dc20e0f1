"""Quantisation recipes: how a variant rounds q, k, v to a narrow format before its kernel computes on them.

A variant that quantises declares its recipe (Capability.quant); the float64 gate then rounds the inputs by
the same recipe, with this module's own functions, and holds the kernel to the float64 reference of the
rounded inputs: the kernel's error is judged apart from the rounding's (harness/measure/correctness.py).

A recipe's canonical text is FORMAT:SCALING:

  e4m3fn:tensor  float8_e4m3fn (4 exponent bits, 3 mantissa bits, no inf; largest finite value 448), one
                 scale for the whole tensor (TransformerEngine's delayed-scaling recipe, here from the
                 tensor's own amax)
  e4m3fn:head    the same format, one scale per batch element and head: the granularity of
                 FlashAttention-3's descale tensors, (B, H), and of torch's quantized SDPA
                 (DescaleType.PER_HEAD)

A paged K/V cache (variants/paged.py: k and v pools of pages, (P, page, H_kv, d)) is rounded as an FP8 KV
cache is (pool=True): per tensor, one scale over the whole pool; per head, one scale per K/V head over the
pool, shaped (1, 1, H_kv, 1) (a pool has no batch axis: its pages are shared out by the page table). Every
slot counts, a context's unused tail too, as a cache's scale sees whatever its pages hold.

The scale is amax / 448 in float32, so that the largest magnitude lands on the format's largest value and
nothing saturates; an all-zero slice gets scale 1. x is stored as round(x / scale) in the format (torch's
cast: round to nearest, ties to even) and read back as that value times the scale, in float32.
Importing this module does not import torch.
"""

from __future__ import annotations

from types import MappingProxyType

FORMATS = MappingProxyType(
    {"e4m3fn": ("float8_e4m3fn", 448.0)}
)  # format -> (torch dtype name, largest finite value)
SCALINGS = MappingProxyType(
    {"tensor": "one scale per tensor", "head": "one scale per batch element and head"}
)
RECIPES = tuple(f"{f}:{s}" for f in FORMATS for s in SCALINGS)


def parse(recipe: str) -> tuple[str, str]:
    """(format, scaling) of a recipe's canonical text; ValueError naming the known ones."""
    fmt, colon, scaling = str(recipe).partition(":")
    if not colon or fmt not in FORMATS or scaling not in SCALINGS:
        raise ValueError(f"unknown quantisation recipe {recipe!r}; known: {', '.join(RECIPES)}")
    return fmt, scaling


def describe(recipe: str) -> str:
    """'float8_e4m3fn, one scale per tensor (amax / 448)': a recipe in words, for tables and `list`."""
    fmt, scaling = parse(recipe)
    name, top = FORMATS[fmt]
    return f"{name}, {SCALINGS[scaling]} (amax / {top:g})"


def available() -> str | None:
    """None where this torch has the recipes' formats, else why not."""
    import torch

    missing = [name for name, _ in FORMATS.values() if not hasattr(torch, name)]
    return f"this torch ({torch.__version__}) has no {', '.join(missing)}" if missing else None


def scales(x, recipe: str, pool: bool = False):
    """The float32 scale(s) of x (B, H, N, d) under `recipe`: shaped (1, 1, 1, 1) or (B, H, 1, 1), amax / top
    (1 where the amax is 0); of a pool of pages x (P, page, H_kv, d) (pool=True), (1, 1, 1, 1) or
    (1, 1, H_kv, 1). Computed from the magnitudes alone: the same whatever x's memory layout."""
    import torch

    fmt, scaling = parse(recipe)
    top = FORMATS[fmt][1]
    mag = x.detach().abs().to(torch.float32)
    per_head = (0, 1, 3) if pool else (2, 3)  # every axis but the head's (and a dense tensor's batch)
    amax = mag.amax() if scaling == "tensor" else mag.amax(dim=per_head, keepdim=True)
    amax = amax.reshape(1, 1, 1, 1) if scaling == "tensor" else amax
    return torch.where(amax > 0, amax / top, torch.ones_like(amax))


def quantise(x, recipe: str, pool: bool = False):
    """(x in the recipe's format, its float32 scales): x ~ stored.float() * scales, stored shaped as x.
    pool: x is a paged cache's pool of pages (P, page, H_kv, d), scaled per K/V head over the pool."""
    import torch

    fmt, _ = parse(recipe)
    name, top = FORMATS[fmt]
    scale = scales(x, recipe, pool)
    # clamped: amax / (amax / top) may round a hair above top, and a cast past it is NaN on some devices
    stored = (x.detach().to(torch.float32) / scale).clamp(-top, top).to(getattr(torch, name))
    return stored, scale


def dequantise(x, recipe: str, pool: bool = False):
    """x rounded by `recipe` and read back, in float32: the values a quantising kernel computes on (pool: x a
    pool of pages, as `quantise`)."""
    import torch

    stored, scale = quantise(x, recipe, pool)
    return stored.to(torch.float32) * scale
