"""Where a variant registered at run time was defined, as its `source`: `defined in __main__ (script
bench.py), source sha256 1a2b3c4d5e6f` (a notebook cell, a script, a module the user imported), so that
meta.json names it honestly and the runner knows it must travel to the workers by value (variants.shipped).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import hashlib
import inspect
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

DEFINED_IN = "defined in "
# the prefix of the module name registry.load_variant_file imports a variant file as (its path's hash after)
VARIANT_FILE_MODULE = "attnbench_variant_file_"
HASHED = ", source sha256 "


def source_of(fn: Callable[..., Any]) -> str:
    """Where `fn` was defined, as a variant's source: 'defined in __main__ (script x.py)', 'defined in
    __main__ (a notebook or IPython)', 'defined in mypkg.kernels', with its code's sha256 when readable."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    where = module
    if module in ("__main__", "__mp_main__"):
        main = sys.modules.get("__main__")
        if getattr(builtins, "__IPYTHON__", False):
            where = "__main__ (a notebook or IPython)"
        elif getattr(main, "__file__", None):
            where = f"__main__ (script {Path(main.__file__).name})"
        else:
            where = "__main__ (an interactive session)"
    digest = _code_hash(fn)
    return DEFINED_IN + where + (HASHED + digest if digest else "")


def calling_file(frame: Any) -> str | None:
    """The resolved path of the file whose code runs in `frame` (the caller of register(): where a
    variant was registered, which need not be where the variant file named on the command line is, when
    that file imports another that registers its own); None where it has none (a notebook cell, `-c`)."""
    name = getattr(getattr(frame, "f_code", None), "co_filename", "") or ""
    if not name or name.startswith("<"):
        return None
    with contextlib.suppress(OSError):
        return str(Path(name).resolve())
    return None


def described(fn: Callable[..., Any]) -> str:
    """What `attnbench list` says a callable registered without a description= is: its docstring's first
    line, else what it is and where it comes from ('Attend object from x_transformers.attend', 'mea from
    memory_efficient_attention_pytorch.memory_efficient_attention': words, which a narrow terminal wraps);
    its name alone where it was defined in __main__."""
    target = getattr(fn, "func", fn)  # a functools.partial: the function it calls
    is_object = not (inspect.isroutine(target) or inspect.isclass(target))
    doc = type(target).__dict__.get("__doc__") if is_object else getattr(target, "__doc__", None)
    if doc and doc.strip():
        return doc.strip().splitlines()[0]
    named = type(target) if is_object else target
    name = (getattr(named, "__name__", "") or "") + (" object" if is_object else "")
    module = getattr(named, "__module__", None) or ""
    if module.startswith(VARIANT_FILE_MODULE):  # a --variant-file's: the file, not the module it is loaded as
        file = getattr(sys.modules.get(module), "__file__", None)
        return f"{name} from {Path(file).name}" if file else name
    return name if module in ("", "__main__", "__mp_main__") else f"{name} from {module}"


def _code_hash(fn: Callable[..., Any]) -> str | None:
    """The first 12 hex digits of the sha256 of fn's source text, None where there is none to read."""
    for target in (fn, getattr(fn, "func", None), type(fn)):  # a function, a functools.partial, an object
        try:
            text = inspect.getsource(target)
        except (OSError, TypeError):
            continue
        return hashlib.sha256(text.encode()).hexdigest()[:12]
    return None


def by_value(source: str) -> bool:
    """Whether a variant of this source travels to the workers by value (it was defined outside a plug-in
    file, an entry point and attnbench itself)."""
    return source.startswith(DEFINED_IN)


def redefines(old: str, new: str) -> bool:
    """Whether a variant of source `new` is one of source `old` defined again in the same place (a notebook
    cell run again after an edit): it replaces the old one instead of clashing with it."""
    return by_value(old) and by_value(new) and old.split(HASHED)[0] == new.split(HASHED)[0]


def function_name(fn: Callable[..., Any]) -> str:
    """fn's name as a person wrote it: 'kern.flash_v1', or 'flash_v1' where it was defined in a variant file
    or __main__ (a module name no one wrote); a functools.partial by the function it calls, an object by its
    class."""
    target = getattr(fn, "func", fn)
    named = target if inspect.isroutine(target) or inspect.isclass(target) else type(target)
    name = getattr(named, "__qualname__", None) or getattr(named, "__name__", None) or repr(named)
    module = getattr(named, "__module__", None) or ""
    mine = module.startswith(VARIANT_FILE_MODULE) or module in ("", "__main__", "__mp_main__")
    return name if mine else f"{module}.{name}"


def clash(old: Any, new: Any, replaces: bool = False) -> str | None:
    """Why the Variant `new` may not take the name the registered Variant `old` holds, None where it replaces
    it: the same function from the same place, defined again (a module imported again or reloaded, a
    notebook cell run again after an edit: the same module and qualified name). Refused: a name of another
    place's (a built-in's, another file's), and another function of the same file or process ('registered
    twice in file dup.py: to kern.flash_v1, then to kern.flash_v2'), which would replace the first without a
    word. `replaces`: another function defined at run time may replace the old one (a run's own variants,
    which attnbench.run names apart within one call)."""
    if old.source != new.source and not redefines(old.source, new.source):
        if old.source == "builtin":  # an upgrade brought a built-in of a plug-in's name: say the way out
            return (
                f"variant name {new.name!r} is attnbench's own ({old.cap.description or 'built in'}); "
                f'register yours under another name (@attnbench.register("my_{new.name}", ...)) or '
                "drop it and use the built-in (`attnbench list` describes it)"
            )
        return f"variant name {new.name!r} is already registered (by {old.source})"
    first, then = function_name(old._layers()[-1]), function_name(new._layers()[-1])
    if first == then or replaces:
        return None
    where = "in one process" if by_value(old.source) else f"in {old.source.split(HASHED)[0]}"
    return (f"variant name {new.name!r} is registered twice {where}: to {first}, then to {then}; register "
            "each under its own name")  # fmt: skip


def entry_point_sources(registered: MutableMapping[str, Any], before: set[str], ep: Any) -> None:
    """Give each variant the entry point `ep` registered (those of `registered` not in `before`) its source:
    'entry point mykern (mykern) of mykern 0.2.0, source sha256 1a2b3c4d5e6f': its distribution's version and
    the sha256 of the module that defines it, as a variant file's, so that an edited or upgraded plug-in is
    another source to history and its steps."""
    dist = getattr(ep, "dist", None)
    of = f" of {dist.name} {dist.version}" if dist is not None and dist.version else ""
    for name in [n for n in registered if n not in before]:
        variant = registered[name]
        digest = module_sha256(variant._layers()[-1], ep.module)
        source = f"entry point {ep.name} ({ep.value}){of}" + (HASHED + digest if digest else "")
        registered[name] = dataclasses.replace(variant, source=source)


def module_sha256(fn: Callable[..., Any], fallback: str) -> str | None:
    """The first 12 hex digits of the sha256 of the file of the module that defines `fn` (a plug-in's own,
    not attnbench's: else the module `fallback`, its entry point's), None where there is none to read."""
    module = getattr(getattr(fn, "func", fn), "__module__", None) or ""  # a functools.partial: what it calls
    for name in (module, fallback) if not module.startswith("attnbench.") else (fallback,):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            with contextlib.suppress(OSError):
                return hashlib.sha256(Path(file).read_bytes()).hexdigest()[:12]
    return None
