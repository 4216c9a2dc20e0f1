"""The keywords a declared capability hands a variant, checked against its function's signature when it is
declared: a capability declared for a keyword fn does not take is refused (keyword_refusal), and a keyword fn
takes with no default, cu_seqlens=, block_table= or window=, makes it run that workload's cells only
(only_where_handed), and a declared mask's keyword it does not take is refused (mask_arg_refusal). Each
returns the one-line refusal, or None; variants.registry raises it. A workload keyword fn takes without
declaring its capability is never handed (undeclared names them), and a mask or causal flag spelled another
library's way is named with the declaration that hands it (other_spelling)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .adapt import LowerRightOnly
from .convention import signature_of
from .lengths import PACKED_ONLY, PAGED_ONLY
from .mods import NONE
from .problem import Problem

# the workloads a capability declares, each with the keyword its cells hand the variant
AXIS_KEYWORDS = {
    "lower_right": "causal_align", "window": "window", "mods": "mod", "varlen": "cu_seqlens",
    "paged": "block_table",
}  # fmt: skip
# a keyword only one workload's cells hand: (its capability flag, the workload: only_workload's names)
HANDED_ONLY = {
    "cu_seqlens": ("varlen", "packed"),
    "block_table": ("paged", "paged"),
    "window": ("window", "window"),
}
WINDOW_ONLY = "runs sliding-window cells only (--window W, with --causal yes)"
# the refusal of every other problem, per workload
ONLY = {"packed": PACKED_ONLY, "paged": PAGED_ONLY, "window": WINDOW_ONLY}
# how to declare each workload: the short form a hint shows, and the refusal's (varlen's kinds spelled out)
_HINT = {"lower_right": "lower_right=True", "window": "window=True", "mods": 'mods=("alibi", "softcap")',
         "varlen": 'varlen="exact"', "paged": "paged=True"}  # fmt: skip
_KINDS = '"exact", "padded", "masked", "tiles:N" or "rows:N"'
# a workload keyword of another library's, which attnbench hands under its own name: (the capability flag,
# what the keyword is, how a wrapper hands it on, the declaration)
FOREIGN = {
    "window_size": (
        "window",
        "flash-attn's (left, right) window",
        "window_size=(window - 1, 0)",
        "window=True",
    ),
    "softcap": ("mods", "a logit soft-cap", 'softcap=C for mod="softcap:C"', 'mods=("softcap",)'),
}
_DECLARE = {**_HINT, "varlen": f"varlen= (the work it executes: {_KINDS})"}
_NOT_BY_NAME = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.VAR_POSITIONAL,
    inspect.Parameter.VAR_KEYWORD,
)


def undeclared(sig: inspect.Signature | None, capability: Any) -> list[tuple[str, str]]:
    """(keyword, how to declare it) for each workload keyword fn of signature `sig` takes while `capability`
    (a Capability) does not declare its workload: a window= that no cell will ever hand it, say. [] when
    the signature cannot be read or takes **kwargs."""
    if sig is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return []
    return [
        (keyword, _HINT[flag])
        for flag, keyword in AXIS_KEYWORDS.items()
        if keyword in sig.parameters and not getattr(capability, flag)
    ]


def foreign(sig: inspect.Signature | None, capability: Any) -> list[str]:
    """A sentence for each workload keyword fn of signature `sig` takes in another library's spelling
    (FOREIGN) while `capability` does not declare the workload: attnbench never hands it, and how a wrapper
    would. [] when the signature cannot be read."""
    if sig is None:
        return []
    return [
        f"takes {keyword}= ({what}), which attnbench never hands: a wrapper that takes "
        f"{AXIS_KEYWORDS[flag]}= and hands it {how}, declared {declared}, gates and measures it"
        for keyword, (flag, what, how, declared) in FOREIGN.items()
        if keyword in sig.parameters and not getattr(capability, flag)
    ]


def keyword_refusal(
    name: str, capability: dict[str, Any], taken: set[str], checked: dict[str, str]
) -> str | None:
    """A declared capability is handed as its keyword (checked: flag -> keyword; the calling convention's
    and AXIS_KEYWORDS): the refusal when fn takes no such keyword, said at declaration instead of an
    `unsupported` row in every cell that needs it."""
    for flag, keyword in checked.items():
        if capability.get(flag) and keyword not in taken:
            said = f"{flag}=True" if capability[flag] is True else f"{flag}={capability[flag]!r}"
            spelled = [(k, what, how) for k, (f, what, how, _) in FOREIGN.items() if f == flag and k in taken]
            also = "".join(f" (it takes {k}=, {what}: a wrapper that takes {keyword}= hands it {how})"
                           for k, what, how in spelled)  # fmt: skip
            return f"variant {name!r} declares {said}, but takes no {keyword}= keyword{also}"
    return None


# another library's name for a mask argument (SDPA's attn_mask= aside), most likely first: a bias is added to
# the scores
MASK_NAMES = ("mask", "attention_mask", "attn_bias", "bias")
# torch's nn.MultiheadAttention's mask per key: (B, N_k), True where a key is padded (mask="keys": where seen)
KEY_PADDING = "key_padding_mask"


def declare_mask(spelled: str) -> str:
    """How to declare the mask a function takes as `spelled`= (variants.adapt): its two kinds and how to tell
    them apart, from Python and in a variant file. A name of a bias is additive."""
    arg = "" if spelled == "attn_mask" else f', mask_arg="{spelled}"'
    if spelled.endswith("bias"):
        return f'declare mask="additive"{arg} to be handed the mask, added to the scores'
    return (
        f'declare attnbench.variant(fn, mask="bool"{arg}) if its mask is True where a key is seen (as '
        f'SDPA\'s), mask="additive"{arg} if it adds the mask to the scores (0 where seen, -inf where '
        f"hidden); @attnbench.register(name, mask=...{arg}) in a variant file"
    )


def key_padding_hint() -> str:
    """How a function that takes torch's key_padding_mask= (True = padded) would be handed key padding."""
    return (
        f"(it takes {KEY_PADDING}=, True where a key is padded, as nn.MultiheadAttention's: "
        'mask="keys" hands a (B, N_k) mask True where a key is seen, so a wrapper that takes mask= and hands '
        f'{KEY_PADDING}=~mask, declared attnbench.variant(wrapper, mask="keys", mask_arg="mask"), gates and '
        "measures it)"
    )


def other_spelling(taken: frozenset[str], unread: bool, flag: str) -> str:
    """How a function that takes the keywords `taken` and spells a mask another library's way would be handed
    it: a mask argument (attn_mask=, as SDPA) by declaring mask= (variants.adapt), a mask per key beside a
    causal= of its own by mask="keys", causal masking as is_causal= (flag; "" where key padding is wanted)
    by renaming it, torch's key_padding_mask= (True = padded) by a wrapper that inverts it for mask="keys";
    for a builtin (unread: no signature), both ways to declare it; "" when it spells neither."""
    if unread:  # a builtin, such as torch's own SDPA
        said = "causal=True if it takes causal=" if flag else "padding=True if it takes key_lengths="
        return f'(its signature cannot be read: declare {said}, or mask="bool" if it takes attn_mask=)'
    spelled = mask_param(taken)
    if spelled == "attn_mask":
        return f"(it takes attn_mask=: {declare_mask(spelled)})"
    if not spelled and not flag and KEY_PADDING in taken:
        return key_padding_hint()
    if spelled and not flag and "causal" in taken and not spelled.endswith("bias"):
        # key padding wanted from a function with a causal= of its own: its mask is most likely one per key
        return (
            f'(it takes {spelled}=: declare mask="keys", mask_arg="{spelled}" if its mask is one per key, '
            '(B, N_k); mask="bool" if it is (B, 1, N_q, N_k))'
        )
    if spelled:
        return f"(it takes {spelled}=: {declare_mask(spelled)})"
    if flag and flag in taken:
        return f"(it takes {flag}=: attnbench hands causal=)"
    return ""


def mask_param(taken: set[str] | frozenset[str]) -> str:
    """The keyword of fn's that takes a mask: attn_mask (SDPA's), else another library's name; "" if none."""
    return next((name for name in ("attn_mask", *MASK_NAMES) if name in taken), "")


def mask_arg_refusal(name: str, mask_arg: str, taken: set[str]) -> str | None:
    """A declared mask is handed as mask_arg=: the refusal, naming the parameter that looks like it, when fn
    takes no such keyword."""
    if mask_arg in taken:
        return None
    spelled = mask_param(taken)
    way = f': declare mask_arg="{spelled}"' if spelled else ": declare mask_arg= with its mask's name"
    return f"variant {name!r} declares a mask, handed as {mask_arg}=, but takes no {mask_arg}={way}"


def required_unhanded(name: str, sig: inspect.Signature, handed: set[str]) -> str | None:
    """The refusal when fn has a parameter after q, k, v with no default that no cell ever hands it
    (`handed`: the calling convention's keywords, the workloads', a declared mask's): every call would
    raise a missing-argument TypeError, found only after a sweep's worth of cells. A mask's parameter is told
    its declaration (declare_mask), which hands it in every cell; any other a default or
    functools.partial."""
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for param in positional[3:] + [p for p in params if p.kind is p.KEYWORD_ONLY]:
        if param.default is inspect.Parameter.empty and param.name not in handed:
            said = f"variant {name!r} takes {param.name} with no default"
            if mask_param({param.name}):  # its mask: declared, every cell hands it (None: nothing masked)
                return f"{said}, which attnbench hands only as a declared mask: {declare_mask(param.name)}"
            if param.name == KEY_PADDING:
                return f"{said}, which attnbench never hands {key_padding_hint()}"
            return (
                f"{said}, which attnbench never hands it (it calls fn(q, k, v, causal=..., ...)): give "
                f"{param.name} a default, or bind it, functools.partial(fn, {param.name}=...)"
            )
    return None


def only_where_handed(name: str, sig: inspect.Signature, capability: dict[str, Any]) -> str | None:
    """fn that takes cu_seqlens= (block_table=, window=) with no default runs packed batches (paged caches,
    sliding windows) only: its capability's supports hook becomes Only, so that its other cells are
    unsupported, saying so, where they would raise a TypeError. The refusal when that workload is not
    declared: no cell would run."""
    for keyword, (flag, workload) in HANDED_ONLY.items():
        param = sig.parameters.get(keyword)
        if param is None or param.default is not inspect.Parameter.empty or param.kind in _NOT_BY_NAME:
            continue
        if not capability.get(flag):
            return f"variant {name!r} takes {keyword}= with no default: declare {_DECLARE[flag]}"
        capability["supports"] = Only(workload, capability.get("supports"))
    return None


@dataclass(frozen=True)
class Only:
    """The supports hook of a variant that runs one workload only (ONLY's keys: packed batches, paged
    caches, sliding windows): the other problems' reason, then the variant's own hook (then) on the rest."""

    workload: str
    then: Callable[[Problem], str | None] | None = None

    def __call__(self, problem: Problem) -> str | None:
        given = {"packed": problem.packed, "paged": problem.page_size, "window": problem.window}
        if not given[self.workload]:
            return ONLY[self.workload]
        return None if self.then is None else self.then(problem)


def only_workload(variant) -> str | None:
    """'packed', 'paged' or 'window' for a variant that runs packed batches, paged caches or sliding windows
    only (its supports hook refuses every other problem so: Only, or a built-in's), None otherwise and
    where the hook raises."""
    cap = variant.cap
    try:
        reason = cap.supports(Problem(dtype=cap.dtypes[0])) if cap.supports is not None else None
    except Exception:  # noqa: BLE001 - a plug-in's hook: its fault shows in its cells' rows
        return None
    return {refusal: workload for workload, refusal in ONLY.items()}.get(reason)


def exercised(variant: Any, problem: Problem) -> str:
    """The declarations of a user's variant (a plug-in's, a file's, a notebook's) that a cell of `problem`
    exercises, each with what the cell asks of it: "in a cell of its declared gqa=True (2 k/v heads for 4)",
    for the row of a cell that raised, where a wrong declaration is a likelier cause than the kernel's
    message (a broadcast error) says. "" for a built-in and for a cell that exercises none."""
    cap = variant.cap
    if variant.source == "builtin":
        return ""
    hooks = (cap.supports, getattr(cap.supports, "then", None))
    lower_right = (
        'causal="lower-right"' if any(isinstance(h, LowerRightOnly) for h in hooks) else "lower_right=True"
    )
    said = [
        (problem.page_size and cap.paged, "paged=True", f"pages of {problem.page_size}"),
        (
            problem.packed and cap.varlen,
            f"varlen={cap.varlen!r}",
            f"a packed batch, {problem.lengths} lengths",
        ),
        (problem.gqa and cap.gqa, "gqa=True", f"{problem.kv_heads} k/v heads for {problem.heads}"),
        (problem.lower_right and cap.lower_right, lower_right, f"N_q {problem.seq_q} of N_k {problem.seq_k}"),
        (problem.window and cap.window, "window=True", f"window {problem.window}"),
        (problem.mod != NONE and cap.mods, f"mods={cap.mods!r}", f"mod {problem.mod}"),
    ]
    parts = [f"{declared} ({asked})" for given, declared, asked in said if given]
    told = [f"in a cell of its declared {' and '.join(parts)}"] if parts else []
    return "; ".join(told + _run_outside(variant, problem))


def _run_outside(variant: Any, problem: Problem) -> list[str]:
    """Why a variant declared for packed batches (paged caches) ran a cell that is not one: its cu_seqlens=
    (block_table=) has a default, so it is not that workload's only (only_where_handed), and such a
    kernel often reads the keyword without looking whether it was handed (None[...]: a TypeError)."""
    cap = variant.cap
    sig = signature_of(variant._layers()[-1])  # the function itself, not the wrapper handing it keywords
    if sig is None:  # nothing to say of its defaults
        return []
    params, out = sig.parameters, []
    for workload, given, keyword, flag, declared in (
        ("packed", problem.packed or problem.page_size, "cu_seqlens", "varlen", f"varlen={cap.varlen!r}"),
        ("paged", problem.page_size, "block_table", "paged", "paged=True"),
    ):
        param = params.get(keyword)
        if given or not getattr(cap, flag) or param is None or param.default is inspect.Parameter.empty:
            continue
        out.append(
            f"it declares {declared} but its {keyword}= has a default, so it was run on "
            f"{'contiguous' if workload == 'paged' else 'unpacked'} cells too: drop the default to make it "
            f"{workload}-only"
        )
    return out
