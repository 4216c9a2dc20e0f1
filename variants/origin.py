"""Where a variant registered at run time was defined, as its `source`: `defined in __main__ (script
bench.py), file sha256 1a2b3c4d5e6f` (a notebook cell, a script, a module the user imported), so that
meta.json names it honestly and the runner knows it must travel to the workers by value (variants.shipped).

A variant's code is the file that defines its function, with the file that registers it where that is another
(code_suffix): the kernel's helpers live beside it, and a file imported by pytest or loaded with
--variant-file hashes alike. results.identity.code_differs reads these suffixes (and an older attnbench's).
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
FROM_FILE = "file "  # the source of a variant a variant file registered (registry.load_variant_file)
# the prefix of the module name registry.load_variant_file imports a variant file as (its path's hash after)
VARIANT_FILE_MODULE = "attnbench_variant_file_"
# a variant's code (code_suffix): the sha256 of the file(s) that define and register it; where there is no
# file (a notebook cell, an interactive session), of the function's own text. An older attnbench wrote
# ", source sha256 " (OLD_HASHED): a variant file's and an entry point's module file whole, but an imported
# function's own text alone, which missed an edit to its helpers (results.identity reads both)
HASHED = ", file sha256 "
TEXT_HASHED = ", text sha256 "
OLD_HASHED = ", source sha256 "


def source_of(fn: Callable[..., Any], registered_in: str | None = None) -> str:
    """Where `fn` was defined, as a variant's source: 'defined in __main__ (script x.py)', 'defined in
    __main__ (a notebook or IPython)', 'defined in mypkg.kernels', with its code's sha256 (code_suffix) when
    readable; `registered_in`: the file that called register() for it."""
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
    return DEFINED_IN + where + code_suffix(fn, registered_in)


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


def code_suffix(fn: Callable[..., Any], registered_in: str | None = None) -> str:
    """What a variant's source says of its code, the one rule for every way a variant comes in (a module
    imported by a script or pytest, a --variant-file, an entry point): ', file sha256 1a2b3c4d5e6f', the
    first 12 hex digits of the sha256 of the file that defines fn (a function, what a functools.partial
    calls, an object's class), and of `registered_in`'s too where that is another file (one file: its
    bytes' sha256, as `sha256sum` says); ', text sha256 ...' of fn's own text where no file holds it (a
    notebook cell); '' where neither can be read."""
    targets = [t for t in (fn, getattr(fn, "func", None), type(fn)) if t is not None]
    files: list[Path] = []
    for target in targets:
        with contextlib.suppress(OSError, TypeError):
            name = inspect.getsourcefile(target)
            if name and Path(name).is_file():
                files.append(Path(name).resolve())
                break
    also = Path(registered_in).resolve() if registered_in else None
    if files and also is not None and also.is_file() and also != files[0]:
        files.append(also)
    try:
        data = [f.read_bytes() for f in files]
    except OSError:
        data = []
    if len(data) == 1:
        return HASHED + hashlib.sha256(data[0]).hexdigest()[:12]
    if data:  # each file's digest, in order (the defining file first): two files are one code
        return HASHED + hashlib.sha256(b"".join(hashlib.sha256(d).digest() for d in data)).hexdigest()[:12]
    for target in targets:
        try:
            text = inspect.getsource(target)
        except (OSError, TypeError):
            continue
        return TEXT_HASHED + hashlib.sha256(text.encode()).hexdigest()[:12]
    return ""


def where_of(source: str) -> str:
    """A variant's source without its code's sha256: where it was defined ('file /x/k.py',
    'defined in mykern'), of this attnbench's sources and an older one's."""
    for marker in (HASHED, TEXT_HASHED, OLD_HASHED):
        source = source.split(marker)[0]
    return source


def by_value(source: str) -> bool:
    """Whether a variant of this source travels to the workers by value (it was defined outside a plug-in
    file, an entry point and attnbench itself)."""
    return source.startswith(DEFINED_IN)


def redefines(old: str, new: str) -> bool:
    """Whether a variant of source `new` is one of source `old` defined again in the same place (a notebook
    cell run again after an edit): it replaces the old one instead of clashing with it."""
    return by_value(old) and by_value(new) and where_of(old) == where_of(new)


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
    where = "in one process" if by_value(old.source) else f"in {where_of(old.source)}"
    return (f"variant name {new.name!r} is registered twice {where}: to {first}, then to {then}; register "
            "each under its own name")  # fmt: skip


def entry_point_sources(registered: MutableMapping[str, Any], before: set[str], ep: Any) -> None:
    """Give each variant the entry point `ep` registered (those of `registered` not in `before`) its source:
    'entry point mykern (mykern) of mykern 0.2.0, file sha256 1a2b3c4d5e6f': its distribution's version and
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
