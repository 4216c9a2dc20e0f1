"""Variants the worker processes cannot import (a notebook cell, a script's __main__, a callable handed to
attnbench.run), shipped to them by value: cloudpickled into the run directory's variants.pkl, which the
workers, a resume and a rerun load as they load a variant file (registry.load_variant_file).

Such a variant's `source` says where it was defined (variants.origin). Unpickling runs code, as importing
a variant file does: resume only runs whose variants you trust.
"""

from __future__ import annotations

import inspect
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from . import adapt
from .origin import HASHED, by_value, source_of
from .registry import (
    Capability,
    UnsupportedError,
    Variant,
    VariantError,
    check_takes_qkv,
    resolve,
    signature_of,
)

FROM_FILE = "file "  # the source of a variant a variant file registered (registry.load_variant_file)

# the calling convention's keywords a bare callable may lack, and the capability each one gives
KEYWORD_FLAGS = {"causal": "causal", "key_lengths": "padding", "dropout_p": "dropout"}
CONVENTION = (*KEYWORD_FLAGS, "scale")


def inline(fn: Callable[..., Any] | Variant, name: str | None = None, **capability: Any) -> Variant:
    """A Variant of a callable, with the Capability fields given (register's keywords), not registered.

    Of the calling convention's keywords (causal, key_lengths, dropout_p, scale), `fn` is handed only those
    it takes; the capabilities it does not declare follow: no `causal` parameter, no causal masking (and so
    for key_lengths and padding, dropout_p and dropout), and cells that need them are `unsupported` with
    the reason. VariantError naming what is wrong (no usable name, a declared capability it cannot take).
    """
    if isinstance(fn, Variant):
        if capability:
            raise VariantError(f"variant {fn.name!r} has its capabilities already; give them to register()")
        return fn if name in (None, fn.name) else replace(fn, cap=replace(fn.cap, name=name))
    if not callable(fn):
        raise VariantError(f"a variant is a callable or a registered name, not {type(fn).__name__}")
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    if name == "<lambda>":
        raise VariantError("a lambda has no name: give it one (variants={'mine': fn} or name='mine')")
    try:  # takes=, returns=, mask=: the shapes of code written for a model (variants.adapt), as register()
        decl = adapt.declared(name, capability)
    except ValueError as exc:
        raise VariantError(str(exc)) from None
    unknown = sorted(set(capability) - {f.name for f in fields(Capability)})
    if unknown:
        known = ", ".join(f.name for f in fields(Capability) if f.name != "name")
        raise VariantError(f"unknown capability {unknown[0]!r}; known: {known}")
    check_takes_qkv(name, fn)
    source = source_of(fn)
    # a declared shape (variants.adapt) calls fn its own way: with a declared mask, causal masking and key
    # padding reach it through the mask, and it is handed the mask, dropout_p= and scale=
    masked = decl.get("mask", "flags") != "flags"
    taken = None if decl and signature_of(fn) is None else _keywords(fn, capability)
    if taken is not None:
        for keyword, flag in KEYWORD_FLAGS.items():
            if masked and keyword != "dropout_p":
                continue
            if capability.setdefault(flag, keyword in taken) and keyword not in taken:
                raise VariantError(f"variant {name!r} declares {flag}=True, but takes no {keyword}= keyword")
        handed = {decl.get("mask_arg", "attn_mask"), "dropout_p", "scale"} if masked else set(CONVENTION)
        if not handed <= taken:
            fn = Keywords(fn, name, frozenset(taken))
            if not decl and capability.get("setup") is not None:  # what the hook returns is called as fn is
                capability["setup"] = KeywordsSetup(capability["setup"], name, frozenset(taken))
    if decl:
        fn, capability["setup"] = adapt.wrap(name, fn, decl, capability.get("setup"))
    return Variant(fn=fn, cap=Capability(name=name, **capability), source=source)


def _keywords(fn: Callable[..., Any], declared: dict[str, Any]) -> set[str] | None:
    """The keyword names fn accepts, None when it takes any (**kwargs). A signature that cannot be read
    (a builtin) is taken to accept the keywords of the capabilities declared for it, and no others."""
    sig = signature_of(fn)
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

    def __call__(self, q, k, v, **options: Any):
        given = {}
        for key, value in options.items():
            if key in self.taken:
                given[key] = value
            elif not (value is None or value is False or (isinstance(value, float) and value == 0.0)):
                raise UnsupportedError(f"{self.name} takes no {key}= keyword (asked for {key}={value!r})")
        return self.fn(q, k, v, **given)


@dataclass(frozen=True)
class KeywordsSetup:
    """The setup hook of a Keywords callable: what it returns takes the same keywords as the callable."""

    setup: Callable[..., Any]
    name: str
    taken: frozenset[str]

    def __call__(self, q, k, v, **options: Any):
        bound = self.setup(q, k, v, **options)
        return Keywords(bound, self.name, self.taken) if callable(bound) else bound


def pack(names: Sequence[str]) -> bytes | None:
    """The named variants that travel by value, cloudpickled; None when none does. VariantError naming a
    variant that cannot be pickled, before a run writes anything."""
    travel = [v for v in resolve(list(names)) if by_value(v.source)]
    if not travel:
        return None
    try:
        import cloudpickle
    except ImportError:
        raise VariantError(
            f"variant {travel[0].name!r} ({travel[0].source}) goes to the worker processes by value, "
            "which needs cloudpickle: pip install cloudpickle"
        ) from None
    for variant in travel:
        try:
            cloudpickle.dumps(variant)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
            raise VariantError(
                f"variant {variant.name!r} ({variant.source}) cannot be sent to the worker processes: "
                f"{type(exc).__name__}: {exc}{_compiled_hint(variant, exc)}"
            ) from None
    return cloudpickle.dumps(travel)


def _compiled_hint(variant: Variant, exc: Exception) -> str:
    """The way out when what cannot be pickled is torch.compile's (a compiled function, or one it calls)."""
    fn = variant.fn.fn if isinstance(variant.fn, Keywords) else variant.fn
    compiled = hasattr(fn, "_torchdynamo_orig_callable") or hasattr(fn, "_orig_mod")
    if not compiled and "ConfigModuleInstance" not in str(exc):
        return ""
    plain = getattr(fn, "_torchdynamo_orig_callable", None) or getattr(fn, "_orig_mod", None)
    fn_name = getattr(plain, "__name__", "fn")
    return (
        "; a torch.compile'd function does not pickle: give the plain function and compile it in the "
        f"worker, in a setup hook: attnbench.variant({fn_name}, setup=lambda q, k, v, **_: "
        f"torch.compile({fn_name}))"
    )


def files_of(names: Sequence[str], variant_files: Sequence[str]) -> list[str]:
    """The run's variant files with those of the named variants that were loaded from a file the caller did
    not list (`load_variant_file` in a notebook): the workers load every variant the run measures."""
    files = list(variant_files)
    for variant in resolve(list(names)):
        if variant.source.startswith(FROM_FILE):
            path = str(Path(variant.source[len(FROM_FILE) :].split(HASHED)[0]).resolve())
            if path not in files:
                files.append(path)
    return files


def relocated(variant_files: Sequence[str], own: Path) -> list[str]:
    """A run's variant files as its meta.json lists them, with its variants.pkl found at `own` (where the
    run's is now) when the run was moved or copied since: its callables travel with it."""
    return [str(own.resolve()) if Path(f).name == own.name and not Path(f).is_file() and own.is_file() else f
            for f in variant_files]  # fmt: skip


def write(path: Path, packed: bytes, variant_files: Sequence[str]) -> list[str]:
    """Write `packed` to `path` (the run's variants.pkl), whole or not at all (a .tmp renamed once synced:
    a resume must find every variant the run measured); the run's variant files with it, in place of any
    other run's variants.pkl (a rerun's: its variants are in this one now)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(packed)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return [f for f in variant_files if not f.endswith(".pkl")] + [str(path.resolve())]
