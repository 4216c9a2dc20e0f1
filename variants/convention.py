"""How a variant's function is called: its signature read, checked to take fn(q, k, v, ...), and the calling
convention's keywords it is handed (only those it takes; any other at its default is left out, any other
value is UnsupportedError)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import UnsupportedError, VariantError

# the calling convention's keywords a bare callable may lack, and the capability each one gives
KEYWORD_FLAGS = {"causal": "causal", "key_lengths": "padding", "dropout_p": "dropout"}
CONVENTION = (*KEYWORD_FLAGS, "scale")


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """fn's signature, read from forward() for a torch.nn.Module (whose own __call__ takes *args and
    **kwargs); None when it has none to read (a builtin, such as torch's scaled_dot_product_attention)."""
    if any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module" for c in type(fn).__mro__):
        fn = getattr(fn, "forward", fn)
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def check_takes_qkv(name: str, fn: Callable[..., Any], sig: inspect.Signature | None) -> None:
    """VariantError, before any cell runs, when fn (of signature `sig`) cannot be called fn(q, k, v): too
    few positional parameters, or a torch.nn.MultiheadAttention layer (projections and all, on (N, L, E)
    inputs). A signature that cannot be read, or *args, passes. TypeError for an async def or a generator
    function (or an object whose __call__ is one): its call returns no tensor."""
    said = (("coroutine", "a coroutine"), ("asyncgen", "an async generator"), ("generator", "a generator"))
    for kind, word in said:
        if any(getattr(inspect, f"is{kind}function")(f) for f in (fn, vars(type(fn)).get("__call__"))):
            raise TypeError(f"variant {name!r} returns {word} when called, not the output tensor: give a "
                            "plain def that returns it")  # fmt: skip
    nn = sys.modules.get("torch.nn")  # loaded wherever fn is one of its modules
    if nn is not None and isinstance(fn, nn.MultiheadAttention):
        raise VariantError(
            f"variant {name!r} is a torch.nn.MultiheadAttention layer, whose input and output projections "
            "are part of its answer: give the attention it computes, over q, k, v of (B, H, N, d) "
            "(F.scaled_dot_product_attention, as its forward calls it)"
        )
    if sig is None:
        return
    try:
        sig.bind_partial(None, None, None)
    except TypeError:
        if isinstance(fn, type):  # a Module's class, say, handed over instead of a module made from it
            raise VariantError(
                f"variant {name!r} is a class, whose signature {sig} makes one; give the callable it makes "
                f"({fn.__name__}(...)), which is called as fn(q, k, v, ...)"
            ) from None
        raise VariantError(
            f"variant {name!r} is called as fn(q, k, v, ...), but its signature {sig} takes fewer than three "
            "positional arguments (the calling convention: docs/variants.md, Adding a variant)"
        ) from None


def taken_keywords(sig: inspect.Signature | None, declared: dict[str, Any]) -> set[str] | None:
    """The keyword names a function of signature `sig` accepts, None when it takes any (**kwargs). A
    signature that cannot be read (None: a builtin) is taken to accept the keywords of the capabilities
    declared for it, and no others."""
    if sig is None:
        return {keyword for keyword, flag in KEYWORD_FLAGS.items() if declared.get(flag)}
    params = sig.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY}


@dataclass(frozen=True)
class Keywords:
    """A callable that takes only some of the calling convention's keywords: those at their defaults are
    left out, any other is UnsupportedError (the cell's row says which)."""

    fn: Callable[..., Any]
    name: str
    taken: frozenset[str]
    unread: bool = False  # fn has no signature to read (a builtin): taken are the keywords declared for it

    def __call__(self, q, k, v, **options: Any):
        given = {}
        for key, value in options.items():
            if key in self.taken:
                given[key] = value
            elif not (value is None or value is False or (isinstance(value, float) and value == 0.0)):
                raise UnsupportedError(
                    f"{self.name} takes no {key}= keyword (asked for {key}={_shown(value)})"
                )
        return self.fn(q, k, v, **given)


def _shown(value: Any) -> str:
    """A keyword's value in one short phrase: a tensor by its dtype and shape, anything else by a repr of at
    most 60 characters."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class KeywordsSetup:
    """The setup hook of a Keywords callable: what it returns takes the same keywords as the callable."""

    setup: Callable[..., Any]
    name: str
    taken: frozenset[str]

    def __call__(self, q, k, v, **options: Any):
        bound = self.setup(q, k, v, **options)
        return Keywords(bound, self.name, self.taken) if callable(bound) else bound
