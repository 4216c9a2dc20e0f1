"""Variants the worker processes cannot import (a notebook cell, a script's __main__, a callable handed to
attnbench.run), shipped to them by value: cloudpickled into the run directory's variants.pkl, which the
workers, a resume and a rerun load as they load a variant file (registry.load_variant_file).

Such a variant's `source` says where it was defined (variants.origin). Unpickling runs code, as importing
a variant file does: resume only runs whose variants you trust.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .convention import Keywords
from .errors import VariantError
from .origin import FROM_FILE, by_value, source_of, where_of
from .registry import Variant, made, resolve


def inline(fn: Callable[..., Any] | Variant, name: str | None = None, **capability: Any) -> Variant:
    """A Variant of a callable, with the Capability fields given (register's keywords), not registered:
    named after the function (a lambda needs name=), its source where it was defined, made as register()
    makes one (registry.made: fn is handed only the keywords it takes). VariantError naming what is wrong;
    TypeError for what is no callable (a number, a tensor, a list) or one whose call returns no tensor.
    """
    if isinstance(fn, Variant):
        if capability:
            raise VariantError(f"variant {fn.name!r} has its capabilities already; give them to register()")
        return fn if name in (None, fn.name) else replace(fn, cap=replace(fn.cap, name=name))
    if not callable(fn):  # bench(42), bench(a tensor), bench([fn]): a mistake of type
        raise TypeError(f"a variant is a callable or a registered name, not {type(fn).__name__}")
    if name is not None and not (isinstance(name, str) and name.strip()):
        raise VariantError(f"name={name!r} names no variant: give it a name such as name='mine'")
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    if name == "<lambda>":
        raise VariantError(
            "a lambda has no name: give it one, name='mine' (or, among run's variants, {'mine': fn})"
        )
    return made(fn, name, capability, source_of(fn))


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
            path = str(Path(where_of(variant.source)[len(FROM_FILE) :]).resolve())
            if path not in files:
                files.append(path)
    return files


def relocated(variant_files: Sequence[str], own: Path) -> list[str]:
    """A run's variant files as its meta.json lists them, with its variants.pkl found at `own` (where the
    run's is now) when the run was moved or copied since: its callables travel with it."""
    return [str(own.resolve()) if Path(f).name == own.name and not Path(f).is_file() and own.is_file() else f
            for f in variant_files]  # fmt: skip


def files_with(path: Path, variant_files: Sequence[str]) -> list[str]:
    """The run's variant files with its variants.pkl at `path`, in place of any other run's variants.pkl (a
    rerun's: its variants are in this one now). The caller writes `pack`'s bytes there whole first
    (results.whole.write_whole: a resume must find every variant the run measured)."""
    return [f for f in variant_files if not f.endswith(".pkl")] + [str(path.resolve())]
