"""Third-party attention code as a variant from a declaration of its shapes, not a hand-written wrapper.

attnbench calls every variant as fn(q, k, v, *, causal, key_lengths, dropout_p, scale) with (B, H, N, d)
tensors and wants a (B, H, N_q, d_v) tensor back. Code written for a model rarely looks like that; the three
differences seen most are declared to `register` and bridged here:

  takes="bnhd"       q, k, v as (B, N, H, d) and the output as (B, N_q, H, d_v) (xformers', FlashAttention's
                     and most model code's layout). The harness then also hands the inputs over in
                     (B, N, H, d) memory (Capability.layout "bnhd"), so the transposes cost no copy.
  returns="first"    a tuple (out, weights, ...): the first element is the output.
  mask="bool"        one mask tensor instead of causal= and key_lengths=: (B, 1, N_q, N_k), True = attend
  mask="additive"    (the same positions) or a float mask added to the scores, 0 to attend and the dtype's
                     lowest value not to (torch's attn_mask, transformers' eager masks). The function is then
                     called fn(q, k, v, attn_mask=MASK, dropout_p=..., scale=...) (mask_arg= renames the
                     keyword), MASK None when nothing is masked; causal alignment and windows reach it
                     through the mask, so such a variant may declare lower_right=True and window=True.
  mask="keys"        one mask per key instead of key_lengths=: (B, N_k), True = attend (the key padding mask
                     of lucidrains' and x-transformers' attention); causal masking and the other workloads
                     reach it through its own keywords (causal=, ...), as without a declaration.
  causal="lower-right"  its causal=True aligns the mask to the last key (FlashAttention >= 2.1's, xformers'
                     and most decode kernels' causal): it is handed causal=True in lower-right cells (no
                     causal_align=), and a top-left causal cell with N_q != N_k is `unsupported` with the
                     reason (with N_q = N_k the two masks are one).

The mask is made once per cell by a setup hook (timed apart, setup_ms), as a model makes it once per
forward pass, and reused for calls with the same shapes, options and the very key_lengths tensor it was made
from, unwritten since; any other call makes its own (the harness's fresh-input check among them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TAKES = ("bhnd", "bnhd")  # the shape q, k, v and the output have in the function's own convention
RETURNS = ("tensor", "first")  # the output itself, or a tuple whose first element is the output
MASKS = ("flags", "bool", "additive", "keys")  # attnbench's causal=/key_lengths= keywords, or a mask tensor
WHOLE = ("bool", "additive")  # one mask carries every masked position, causal ones included
DECLARED = ("takes", "returns", "mask", "mask_arg")  # the register() keywords this module owns
LOWER_RIGHT = "lower-right"  # causal="lower-right": the function's own causal=True is aligned lower-right


def declared(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Pop the declaration keywords out of register()'s keywords and check them; ValueError naming a bad
    value. Empty when the function already has attnbench's calling convention."""
    decl = {k: options.pop(k) for k in DECLARED if k in options}
    for key, allowed in (("takes", TAKES), ("returns", RETURNS), ("mask", MASKS)):
        if key in decl and decl[key] not in allowed:
            raise ValueError(f"variant {name}: {key} must be one of {allowed}, not {decl[key]!r}")
    if "mask_arg" in decl and (not isinstance(decl["mask_arg"], str) or not decl["mask_arg"].isidentifier()):
        raise ValueError(f"variant {name}: mask_arg must be a keyword name, not {decl['mask_arg']!r}")
    if decl.get("takes") == "bnhd":
        options.setdefault("layout", "bnhd")  # (B, N, H, d) memory: the transposes below are free
    if decl.get("takes") == "bhnd" and decl.get("returns", "tensor") == "tensor" and "mask" not in decl:
        decl = {}
    if isinstance(options.get("causal"), str):
        decl["causal"] = _lower_right_causal(name, options, decl)
    return decl


def _lower_right_causal(name: str, options: dict[str, Any], decl: dict[str, Any]) -> str:
    """causal="lower-right" read into the capability it means: causal and lower-right cells, top-left ones
    with N_q != N_k refused by its supports (LowerRightOnly). ValueError for another string, or beside a
    declared mask (which carries the alignment itself)."""
    if options["causal"] != LOWER_RIGHT:
        raise ValueError(
            f"variant {name}: causal must be True, False or {LOWER_RIGHT!r}, not {options['causal']!r}"
        )
    if decl.get("mask") in WHOLE:
        raise ValueError(f'variant {name}: causal="lower-right" says how its causal= aligns; a declared mask '
                         "carries the alignment itself (declare lower_right=True)")  # fmt: skip
    if options.get("lower_right") is False:
        raise ValueError(
            f'variant {name}: causal="lower-right" is lower-right causal; lower_right=False says not'
        )
    options.update(causal=True, lower_right=True, supports=LowerRightOnly(options.get("supports")))
    return LOWER_RIGHT


@dataclass(frozen=True)
class LowerRightOnly:
    """The supports= of a variant whose causal=True is aligned lower-right (causal="lower-right"): a top-left
    causal cell with N_q != N_k is not its; then its own supports=, if any."""

    supports: Callable[..., str | None] | None = None

    def __call__(self, problem) -> str | None:
        if problem.causal and not problem.lower_right and problem.seq_q != problem.seq_k:
            return (
                'its causal=True is aligned lower-right (declared causal="lower-right"), where this cell '
                "asks top-left with N_q != N_k: sweep causal lower-right to measure it"
            )
        return self.supports(problem) if self.supports is not None else None


def make_mask(q, k, *, kind: str, causal: bool, key_lengths, causal_align: str = "top-left", window: int = 0):
    """The (B or 1, 1, N_q, N_k) mask of `kind` ("bool": True = attend; "additive": 0 or the lowest value of
    q's dtype, as transformers makes it, so a row that sees nothing averages instead of giving NaN), the
    (B, N_k) key padding mask of "keys" (True = attend: causal masking is not its), or None when nothing is
    masked. q and k are (B, H, N, d)."""
    import torch

    from .masks import attention_mask, key_padding_mask  # imports torch: only when a mask is made

    if kind == "keys":
        if key_lengths is None:
            return None
        return key_padding_mask(key_lengths.to(q.device), k.shape[2])[:, 0, 0]

    seen = attention_mask(
        q.shape[2], k.shape[2], causal=causal, key_lengths=key_lengths, device=q.device,
        causal_align=causal_align, window=window,
    )  # fmt: skip
    if seen is None:
        return None
    # attention_mask gives (N_q, N_k) for causal alone, (B, 1, 1, N_k) for padding alone, (B, 1, N_q, N_k) for
    # both: broadcast (never reshape) to (B or 1, 1, N_q, N_k), one row per query as a model's mask has, the
    # head axis 1 for any number of query and k/v heads (MQA, GQA)
    seen = seen if seen.dim() == 4 else seen[None, None]
    seen = seen.expand(seen.shape[0], 1, q.shape[2], k.shape[2]).contiguous()
    if kind == "bool":
        return seen
    low = torch.finfo(q.dtype).min
    return torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, low)


def _version_of(t) -> int | None:
    return getattr(t, "_version", None)


class Call:
    """fn with attnbench's calling convention, from its declaration; `mask`/`made_for` hold a mask made by
    setup for one shape, option set and key_lengths tensor."""

    def __init__(self, name: str, fn: Callable[..., Any], decl: dict[str, Any], mask=None, made_for=None):
        self.name, self.fn, self.decl = name, fn, decl
        self.mask, self.made_for = mask, made_for
        self.__name__ = getattr(fn, "__name__", name)
        self.__doc__ = getattr(fn, "__doc__", None)

    @staticmethod
    def key(q, k, causal, key_lengths, opts) -> tuple:
        """What a mask depends on, without reading key_lengths' values (a device->host sync)."""
        shape = (q.shape[0], q.shape[2], k.shape[2], q.dtype, q.device)
        lengths = None if key_lengths is None else (id(key_lengths), _version_of(key_lengths))
        return (shape, bool(causal), opts.get("causal_align", "top-left"), opts.get("window", 0), lengths)

    def mask_for(self, q, k, causal, key_lengths, opts):
        if self.made_for is not None and self.made_for[0] is key_lengths:
            if self.made_for[1] == self.key(q, k, causal, key_lengths, opts):
                return self.mask
        return make_mask(q, k, kind=self.decl["mask"], causal=causal, key_lengths=key_lengths, **opts)

    def __call__(self, q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, **opts):
        decl = self.decl
        extra = {o: opts.pop(o) for o in ("causal_align", "window") if o in opts}
        mask_arg = decl.get("mask_arg", "attn_mask")
        if decl.get("mask") in WHOLE:
            mask = self.mask_for(q, k, causal, key_lengths, extra)
            kwargs = {mask_arg: mask, "dropout_p": dropout_p, "scale": scale}
        else:
            if decl.get("causal") == LOWER_RIGHT:  # its own causal=True is the lower-right mask
                extra.pop("causal_align", None)
            kwargs = dict(causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, scale=scale, **extra)
            if decl.get("mask") == "keys":  # key padding as its (B, N_k) mask, the rest as its keywords
                kwargs[mask_arg] = self.mask_for(q, k, causal, kwargs.pop("key_lengths"), extra)
        if decl.get("takes") == "bnhd":  # (B, H, N, d) -> (B, N, H, d): a view, contiguous in bnhd memory
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = self.fn(q, k, v, **kwargs, **opts)
        if decl.get("returns") == "first":
            if not isinstance(out, (tuple, list)) or not out:
                raise TypeError(
                    f"{self.name} is declared returns='first' but returned {type(out).__name__}, not a tuple"
                )
            out = out[0]
        if decl.get("takes") == "bnhd" and hasattr(out, "transpose"):
            out = out.transpose(1, 2)  # (B, N_q, H, d_v) -> (B, H, N_q, d_v)
        return out


def wrap(name: str, fn: Callable[..., Any], decl: dict[str, Any], setup: Callable[..., Any] | None):
    """(fn, setup) with attnbench's calling convention for a function declared with `decl`. A declared mask
    without a setup of the variant's own gets one that makes the mask per cell; a setup of its own is called
    with the inputs in the declared shape, and what it returns is bridged like fn (its mask made per call)."""
    if setup is not None:
        takes_bnhd = decl.get("takes") == "bnhd"

        def own_setup(q, k, v, **opts):
            args = (t.transpose(1, 2) for t in (q, k, v)) if takes_bnhd else (q, k, v)
            return Call(name, setup(*args, **opts), decl)

        return Call(name, fn, decl), own_setup
    if decl.get("mask", "flags") == "flags":
        return Call(name, fn, decl), None

    def mask_setup(q, k, v, *, causal=False, key_lengths=None, **opts):
        extra = {o: opts[o] for o in ("causal_align", "window") if o in opts}
        mask = make_mask(q, k, kind=decl["mask"], causal=causal, key_lengths=key_lengths, **extra)
        made_for = (key_lengths, Call.key(q, k, causal, key_lengths, extra))
        return Call(name, fn, decl, mask=mask, made_for=made_for)

    return Call(name, fn, decl), mask_setup
