"""The variant registry: a plain attention function plus a frozen capability record, found by name."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from . import adapt, importing
from .convention import (
    CONVENTION,
    KEYWORD_FLAGS,
    Keywords,
    KeywordsSetup,
    check_takes_qkv,
    signature_of,
    taken_keywords,
)
from .errors import VariantError
from .handed import (
    AXIS_KEYWORDS,
    foreign,
    keyword_refusal,
    mask_arg_refusal,
    only_where_handed,
    other_spelling,
    required_unhanded,
    undeclared,
)
from .mods import MOD_KINDS, NONE, mod_kind
from .origin import (
    FROM_FILE,
    VARIANT_FILE_MODULE,
    calling_file,
    clash,
    code_suffix,
    described,
    entry_point_sources,
    source_of,
    where_of,
)
from .problem import DTYPES, LAYOUTS, Problem, extra_options, validate_tensors
from .quant import RECIPES as QUANT_RECIPES
from .unknown import unknown_names, unknown_word

ENTRY_POINT_GROUP = "attnbench.variants"
# The top-level import names attnbench had before 0.2 (now attnbench.variants, ...): a plug-in that still
# imports one is told how to write it today.
OLD_IMPORT_NAMES = ("variants", "harness", "results", "reports")
MEMORY_CLASSES = ("quadratic", "linear")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Capability:
    """What a variant can do; `available` and `supports` return None when fine, else a readable reason."""

    name: str
    description: str = ""
    devices: tuple[str, ...] = DEVICES
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    min_head_dim: int = 1
    max_head_dim: int | None = None
    causal: bool = True
    padding: bool = True
    dropout: bool = True
    # the same torch.manual_seed before a call gives the same output with dropout (torch's own dropout and
    # SDPA's kernels draw from torch's generators); a variant with its own RNG sets False
    dropout_deterministic: bool = True
    backward: bool = True
    memory: str = "quadratic"  # how peak memory grows with N: "quadratic" (N x N scores) or "linear"
    default: bool = True  # part of default sweeps (False for demonstration-only variants)
    available: Callable[[str], str | None] | None = field(default=None, compare=False)
    supports: Callable[[Problem], str | None] | None = field(default=None, compare=False)
    # setup(q, k, v, *, causal, key_lengths, [causal_align, window, mod when set]) -> a callable with fn's
    # calling convention, prepared for inputs of that shape (plans, block masks, compiled kernels). The
    # harness times it apart (setup_ms) and gates and times what it returns; it must depend on shapes and
    # options only, never on the values of q, k, v. key_lengths are the cell's (fresh inputs get the same):
    # a plan made from them (xformers' padded-keys bias) must check that a call's are the ones it was made
    # for, and re-plan or raise when they are not, never answer with a stale plan.
    setup: Callable[..., Callable[..., Any]] | None = field(default=None, compare=False)
    # kernel(q, k, v, **the call's options) -> which kernel a call on these inputs runs ("FLASH_ATTENTION
    # (FA2 2.5.7)", xformers' "fa3F"), or None where it cannot tell. Asked once per cell after the gated
    # first call, outside the timed calls; the row's `kernel` column. A library that dispatches by itself
    # (SDPA, xformers) makes a number meaningless without it.
    kernel: Callable[..., str | None] | None = field(default=None, compare=False)
    # Axes added after the first calling convention default to "not supported", so that a variant is never
    # handed a keyword (causal_align=, window=, mod=) or a k/v head count it never declared it takes.
    gqa: bool = False  # k, v with fewer heads than q (grouped-query / multi-query attention)
    lower_right: bool = False  # causal_align="lower-right"
    window: bool = False  # window=W, a sliding window with causal masking
    mods: tuple[str, ...] = ()  # score modifications it applies (kinds of variants.mods: alibi, softcap)
    # packed variable-length batches (variants.lengths: (1, H, T, d) inputs and cu_seqlens=), and how much
    # work the kernel does for them (results.formulas.executed_pairs): "padded" (each sequence padded to the
    # longest: B * max(L)^2 pairs), "masked" (one dense T x T score matrix under a block-diagonal mask: T^2
    # pairs, causal or not), "exact" (each sequence alone: the useful pairs), "tiles:N" (N x N tiles that
    # touch a sequence's pairs) or "rows:N" (blocks of N query rows over the keys their sequences span)
    varlen: str = ""
    # a paged K/V cache (variants/paged.py: k, v pools of pages, key_lengths contexts, block_table=)
    paged: bool = False
    # The memory layout the harness hands q, k, v in, made before any timed call (problem.LAYOUTS): "bhnd"
    # (B, H, N, d)-contiguous, or "bnhd", the same (B, H, N, d) shape over (B, N, H, d) memory, for a
    # kernel that takes (B, N, H, d) and would otherwise copy its inputs inside every timed call. Last, so
    # that a Capability built positionally before it keeps its meaning.
    layout: str = "bhnd"
    # The quantisation recipe the variant applies to q, k, v before its kernel (variants.quant.RECIPES:
    # "e4m3fn:tensor", "e4m3fn:head"), or "" for none. The float64 gate then judges the kernel against the
    # reference of the inputs rounded by that recipe, and reports the rounding's own error apart
    # (quant_rel_err, sqnr_db; harness/measure/correctness.py). With paged=True the recipe rounds q and the
    # K/V pools as pools (one scale over a pool, or per K/V head over it): an FP8 KV cache.
    quant: str = ""
    # An approximation by design (random features, low rank, sparsity, a KV cache it compresses): the rel_err
    # against float64 it is held to instead of its dtype's tolerance, when larger (0 < approximate < 1: an
    # answer of zeros has rel_err 1). Its every gate (first call, fresh inputs, refilled inputs) holds it
    # to that bound, and its rows carry it, so that reports and answers name it as approximate. 0: exact.
    approximate: float = 0.0
    # A kernel compiled in setup or at the first call (torch.compile): True, every cell shape its own; or
    # compiles(problem) -> a key, a worker's cells of one key sharing a compile. Only the dry run reads it.
    compiles: bool | Callable[[Problem], Any] = field(default=False, compare=False)
    # The variants whose kernels this one's own dispatch picks among at call time (sdpa: torch picks one of
    # the backends that sdpa_math, sdpa_flash, sdpa_efficient and sdpa_cudnn are pinned to). Where a run's
    # rows do not record which kernel a cell ran (the `kernel` column), its time and theirs there may be one
    # kernel's measured twice, and the report ranks none of them against it (reports.tables.contestants).
    picks_among: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise VariantError(f"variant name {self.name!r} must be non-empty letters, digits, '_' or '-'")
        if self.memory not in MEMORY_CLASSES:
            raise VariantError(
                f"variant {self.name}: memory must be one of {MEMORY_CLASSES}, not {self.memory!r}"
            )
        if not (isinstance(self.compiles, bool) or callable(self.compiles)):
            raise VariantError(
                f"variant {self.name}: compiles must be True, False or a function of a Problem"
            )
        for flag in (f.name for f in fields(self) if f.type == "bool"):  # gqa="yes" would read as True
            if not isinstance(value := getattr(self, flag), bool):
                raise VariantError(f"variant {self.name}: {flag} must be True or False, not {value!r}")
        if self.layout not in LAYOUTS:
            raise VariantError(f"variant {self.name}: layout must be one of {LAYOUTS}, not {self.layout!r}")
        for key, known in (("devices", DEVICES), ("dtypes", DTYPES), ("mods", MOD_KINDS)):
            given = getattr(self, key)  # a str is refused: dtypes="float32" would read as 'f', 'l', 'o', ...
            if isinstance(given, str) or not set(given) <= set(known):
                raise VariantError(f"variant {self.name}: {key} must be a tuple of {list(known)}, such as "
                                   f"({known[0]!r},), not {given!r}")  # fmt: skip
        if self.quant and self.quant not in QUANT_RECIPES:
            raise VariantError(
                f"variant {self.name}: quant must be one of {list(QUANT_RECIPES)} or '', not {self.quant!r}"
            )
        bound = self.approximate
        if isinstance(bound, bool) or not isinstance(bound, int | float) or not 0 <= bound < 1:
            raise VariantError(
                f"variant {self.name}: approximate is the rel_err against float64 it is held to, a number "
                f"in (0, 1) (an answer of zeros has rel_err 1, which no bound passes), not {bound!r}"
            )
        if self.varlen and not _known_work(self.varlen):
            raise VariantError(
                f"variant {self.name}: varlen must be padded, masked, exact, tiles:N or rows:N, not "
                f"{self.varlen!r}"
            )
        picks = self.picks_among  # a str is refused: picks_among="sdpa_flash" would read as 's', 'd', ...
        if not isinstance(picks, tuple | list) or not all(
            isinstance(p, str) and p and p != self.name for p in picks
        ):
            raise VariantError(
                f"variant {self.name}: picks_among must be a tuple of other variants' names, such as "
                f"('sdpa_flash',), not {picks!r}"
            )
        for hook in ("setup", "kernel"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise VariantError(
                    f"variant {self.name}: {hook} must be callable, not {type(value).__name__}"
                )


def _known_work(varlen) -> bool:  # anything but a str (varlen=True) is not
    kind, colon, size = str(varlen).partition(":")
    sized = kind in ("tiles", "rows") and size.isdigit() and int(size) > 0
    return isinstance(varlen, str) and (varlen in ("padded", "masked", "exact") or sized)


def _recorded() -> tuple[str, ...]:
    """What Variant.record keeps of a Capability: every field but the name (the record's key) and the
    functions (compare=False: code, not data), in the class's order, but layout before the flags of axes added
    later, where meta.json has always had it (layout is the class's last field only so that a Capability built
    positionally keeps its meaning)."""
    names = [f.name for f in fields(Capability) if f.compare and f.name != "name"]
    names.insert(names.index("gqa"), names.pop(names.index("layout")))
    return tuple(names)


RECORDED = _recorded()


@dataclass(frozen=True)
class Variant:
    """A registered attention implementation: fn(q, k, v, *, causal, key_lengths, dropout_p, scale) -> out."""

    fn: Callable[..., Any]
    cap: Capability
    source: str = "builtin"

    @property
    def name(self) -> str:
        return self.cap.name

    def record(self) -> dict[str, Any]:
        """The capability as plain JSON data (what a run stores in meta.json for its reports)."""
        out = {f: list(v) if isinstance(v := getattr(self.cap, f), tuple) else v for f in RECORDED}
        return {**out, "source": self.source}

    def _layers(self) -> list[Callable[..., Any]]:
        """self.fn, then each callable it wraps: through a declared shape's bridge (adapt.Call) and the
        keywords' (Keywords) down to the function itself, last."""
        layers = [self.fn]
        while isinstance(layers[-1], (Keywords, adapt.Call)):
            layers.append(layers[-1].fn)
        return layers

    def undeclared(self) -> tuple[tuple[str, str], ...]:
        """(keyword, how to declare it) for each workload keyword fn takes while its capability does not
        declare the workload (handed.undeclared): read from fn itself, not the wrapper handing it keywords."""
        return tuple(undeclared(signature_of(self._layers()[-1]), self.cap))

    def foreign(self) -> tuple[str, ...]:
        """A sentence for each workload keyword fn takes in another library's spelling, undeclared
        (handed.foreign): how a wrapper hands it on."""
        return tuple(foreign(signature_of(self._layers()[-1]), self.cap))

    def mask_kind(self) -> str:
        """The mask it was declared to take (variants.adapt.MASKS): "flags" where none was."""
        bridge = next((f for f in self._layers() if isinstance(f, adapt.Call)), None)
        return "flags" if bridge is None else bridge.decl.get("mask", "flags")

    def availability(self, device: str) -> str | None:
        """None when this variant can run on `device` on this machine, else why not."""
        if device not in self.cap.devices:
            custom = self.cap.available(device) if self.cap.available is not None else None
            return custom or f"{self.name} does not run on {device} (devices: {', '.join(self.cap.devices)})"
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "no CUDA device on this machine (torch.cuda.is_available() is False)"
        if self.cap.available is not None:
            return self.cap.available(device)
        return None

    def check(self, problem: Problem) -> str | None:
        """None when this variant supports `problem` here, else the reason it does not."""
        reason = self.availability(problem.device)
        if reason:
            return reason
        cap = self.cap  # the workload first: a paged cell's other axes (lower-right, GQA) are its cache's
        if problem.page_size and not cap.paged:
            return (
                f"{self.name} does not read a paged K/V cache (a variant that does declares paged=True and "
                "takes block_table=)"
            )
        if problem.packed and not cap.varlen:
            return (
                f"{self.name} does not take packed variable-length batches (a variant that does declares "
                "varlen= and takes cu_seqlens=)"
            )
        if problem.dtype not in cap.dtypes:
            return (
                f"{self.name} does not support {problem.dtype} (dtypes: {', '.join(cap.dtypes)}; declare "
                "others with dtypes=)"
            )
        for dim in (problem.d_k, problem.d_v):
            if dim < cap.min_head_dim or (cap.max_head_dim is not None and dim > cap.max_head_dim):
                hi = cap.max_head_dim if cap.max_head_dim is not None else "any"
                return f"{self.name} supports head dims {cap.min_head_dim}..{hi}, not {dim}"
        if problem.causal and not cap.causal:
            how = _other_spelling(self.fn, "is_causal") or "(a variant that does takes causal=)"
            return f"{self.name} does not support causal masking {how}"
        if problem.padding and not cap.padding:
            how = _other_spelling(self.fn, "") or "(a variant that does takes key_lengths=)"
            return f"{self.name} does not support key padding {how}"
        if problem.dropout and not cap.dropout:
            return f"{self.name} does not support dropout (a variant that does takes dropout_p=)"
        if problem.dropout and cap.approximate:  # the dropout check reads exact weights through the output
            return f"{self.name} is approximate: its dropout cannot be checked against float64"
        mine = self.source != "builtin"  # a user's function: say what declares the axis
        if problem.backward and not cap.backward:
            way = "(declare it with backward=True)" if mine else "(a built-in variant with no backward)"
            return f"{self.name} does not support backward {way}"
        if problem.gqa and not cap.gqa:
            way = "; declare gqa=True if it takes k and v with fewer heads than q" if mine else ""
            return (
                f"{self.name} does not support grouped-query attention "
                f"({problem.kv_heads} k/v heads for {problem.heads} query heads{way})"
            )
        if problem.lower_right and not cap.lower_right:
            way = (
                ' (declare lower_right=True if it takes causal_align="lower-right", or causal="lower-right" '
                "if its causal=True is aligned so)"
                if mine
                else ""
            )
            return f"{self.name} does not support lower-right causal alignment{way}"
        if problem.window and not cap.window:
            way = "; declare window=True if it takes window=" if mine else ""
            return f"{self.name} does not support a sliding window (window {problem.window}{way})"
        if problem.mod != NONE and mod_kind(problem.mod) not in cap.mods:
            way = f' (declare mods=("{mod_kind(problem.mod)}",) if it takes mod=)' if mine else ""
            return f"{self.name} does not support score modification {problem.mod}{way}"
        if cap.supports is not None:
            return cap.supports(problem)
        return None

    def validate(
        self, q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, causal_align="top-left", window=0,
        mod=NONE, cu_seqlens=None, block_table=None,
    ) -> Problem:  # fmt: skip
        """The Problem these inputs pose; ValueError naming what is wrong with them, or the dtype, score
        modification or packed batch refused (a variant is never handed a keyword it does not declare)."""
        problem = validate_tensors(
            q, k, v, key_lengths=key_lengths, causal=causal, dropout_p=dropout_p,
            causal_align=causal_align, window=window, mod=mod, cu_seqlens=cu_seqlens, block_table=block_table,
        )  # fmt: skip
        if problem.page_size and not self.cap.paged:
            raise ValueError(f"{self.name} does not read a paged K/V cache (block_table=)")
        if problem.packed and not self.cap.varlen:
            raise ValueError(f"{self.name} does not take packed variable-length batches (cu_seqlens=)")
        if problem.dtype not in self.cap.dtypes:
            raise ValueError(
                f"{self.name} does not support {problem.dtype} (dtypes: {', '.join(self.cap.dtypes)})"
            )
        if problem.mod != NONE and mod_kind(problem.mod) not in self.cap.mods:
            raise ValueError(f"{self.name} does not support score modification {problem.mod}")
        return problem

    def bind(self, q, k, v, **opts: Any) -> Callable[..., Any]:
        """The callable to gate and time on inputs of this shape: what the setup hook returns for them,
        or fn itself when the variant has no hook. Whatever setup raises propagates (the cell's row),
        marked as the hook's (`attnbench_where`)."""
        if self.cap.setup is None:
            return self.fn
        try:
            bound = self.cap.setup(q, k, v, **opts)
        except Exception as exc:  # the row says it was the hook, not the call (harness.measure.failures)
            with contextlib.suppress(AttributeError, TypeError):
                exc.attnbench_where = "its setup hook"
            raise
        if not callable(bound):
            raise TypeError(f"setup of {self.name} returned {type(bound).__name__}, not a callable")
        return bound

    def __call__(
        self, q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None,
        causal_align="top-left", window=0, mod=NONE, cu_seqlens=None, block_table=None, **kwargs,
    ):  # fmt: skip
        """Validate the inputs (ValueError naming the problem), then run the variant; causal_align, window,
        mod (as its canonical text) and cu_seqlens reach it only when not at their default (extra_options)."""
        problem = self.validate(
            q, k, v, causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, causal_align=causal_align,
            window=window, mod=mod, cu_seqlens=cu_seqlens, block_table=block_table,
        )  # fmt: skip
        extra = extra_options(
            causal_align=causal_align, window=window, mod=problem.mod, cu_seqlens=cu_seqlens,
            block_table=block_table,
        )  # fmt: skip
        opts = dict(causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, scale=scale)
        return self.fn(q, k, v, **opts, **extra, **kwargs)


_REGISTRY: dict[str, Variant] = {}
_LOAD_ERRORS: list[str] = []
_LOADED = {"builtins": False, "entry_points": False}
_current_source = ["builtin"]
# the file whose code called register() for each name (origin.calling_file): a variant file's own variants,
# told apart from those a module it imports registers while it loads (imported_by)
_REGISTERED_IN: dict[str, str] = {}
# what importing each variant file (by its resolved path) changed in os.environ: {name: (before, after)},
# None where a variable was unset; the run warns where it is one that changes a measurement
ENV_CHANGED: dict[str, dict[str, tuple[str | None, str | None]]] = {}


def register(name: str, **capability: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register `fn` under `name` with the given Capability fields (setup=hook among them), and
    the shapes of a function written for other code (takes=, returns=, mask=: variants.adapt). fn is handed
    only the keywords it takes, and what it does not take it does not support (made). Returns fn unchanged."""

    called_in = calling_file(sys._getframe(1))

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        source = _current_source[0]
        if source.startswith(FROM_FILE):  # a variant file's: its code as an imported one's (code_suffix)
            source += code_suffix(fn, called_in)
        elif source == "builtin" and not str(getattr(fn, "__module__", "")).startswith(__package__ + "."):
            source = source_of(fn, called_in)  # a notebook's or a script's: it goes to the workers by value
            _load_builtins()  # a clash with a built-in name is found here, not when they load later
        add(made(fn, name, capability, source))
        if called_in:
            _REGISTERED_IN[name] = called_in
        return fn

    return decorate


def _other_spelling(fn: Callable[..., Any], flag: str) -> str:
    """How a callable handed only the keywords it takes (Keywords) that spells a mask or causal masking
    another library's way would be handed it (handed.other_spelling); "" for any other callable."""
    return other_spelling(fn.taken, fn.unread, flag) if isinstance(fn, Keywords) else ""


def made(fn: Callable[..., Any], name: str, capability: dict[str, Any], source: str) -> Variant:
    """The Variant of fn under `name` with the Capability fields given (register's keywords, and the shapes
    of code written for a model: variants.adapt), not registered: register() and attnbench.variant both
    make theirs here. Of the calling convention's keywords (causal, key_lengths, dropout_p, scale) fn is
    handed only those it takes; the capabilities it does not declare follow (no `causal` parameter, no
    causal masking), and cells that need them are `unsupported` with the reason. VariantError naming what
    is wrong (a declared capability it cannot take, an unknown capability, too few positional arguments)."""
    capability = dict(capability)
    try:  # takes=, returns=, mask=: the shapes of code written for a model (variants.adapt), as register()
        decl = adapt.declared(name, capability)
    except ValueError as exc:
        raise VariantError(str(exc)) from None
    unknown = sorted(set(capability) - {f.name for f in fields(Capability)})
    if unknown:
        known = [f.name for f in fields(Capability) if f.name != "name"]
        raise VariantError(unknown_word("capability", unknown[0], known, also=adapt.DECLARED))
    capability["description"] = capability.get("description") or described(fn)
    sig = signature_of(fn)
    check_takes_qkv(name, fn, sig)
    # a declared shape (variants.adapt) calls fn its own way: with a declared mask, causal masking and key
    # padding reach it through the mask, and it is handed the mask, dropout_p= and scale=; with a mask per
    # key (mask="keys") only key padding does, and the rest of the calling convention is its own keywords
    masked = decl.get("mask") in adapt.WHOLE
    keys = decl.get("mask") == "keys"
    mask_arg = decl.get("mask_arg", "attn_mask")
    taken = None if decl and sig is None else taken_keywords(sig, capability)
    if taken is not None:
        checked = {}  # capability flag -> the keyword it is handed as, which fn must take when it is declared
        for keyword, flag in KEYWORD_FLAGS.items():
            if keys and keyword == "key_lengths":  # key padding reaches fn as its mask per key
                capability.setdefault(flag, True)
                checked[flag] = mask_arg
            elif not masked or keyword == "dropout_p":  # masked: causal and padding reach fn through its mask
                capability.setdefault(flag, keyword in taken)
                checked[flag] = keyword
        if sig is not None and not masked:  # the workloads' keywords, and without a default only there
            checked.update(AXIS_KEYWORDS)
            # causal="lower-right": lower-right through its own causal=, not causal_align=
            if decl.get("causal") == adapt.LOWER_RIGHT:
                del checked["lower_right"]
        refusal = mask_arg_refusal(name, mask_arg, taken) if (masked or keys) and sig is not None else None
        refusal = refusal or keyword_refusal(name, capability, taken, checked)
        if not refusal and sig is not None and capability.get("setup") is None:  # a setup calls fn its way
            refusal = required_unhanded(name, sig, set(CONVENTION) | set(AXIS_KEYWORDS.values()) | {mask_arg})
        if not refusal and sig is not None and not masked:
            refusal = only_where_handed(name, sig, capability)
        if refusal:
            raise VariantError(refusal)
        handed = {mask_arg, "dropout_p", "scale"} if masked else set(CONVENTION)
        if keys:
            handed = handed - {"key_lengths"} | {mask_arg}
        if not handed <= taken:
            fn = Keywords(fn, name, frozenset(taken), unread=sig is None)
            if not decl and capability.get("setup") is not None:  # what the hook returns is called as fn is
                capability["setup"] = KeywordsSetup(capability["setup"], name, frozenset(taken))
    if decl:
        fn, capability["setup"] = adapt.wrap(name, fn, decl, capability.get("setup"))
    return Variant(fn=fn, cap=Capability(name=name, **capability), source=source)


def add(variant: Variant, replaces: bool = False) -> None:
    """Register a Variant; a second, different variant under a taken name is an error (origin.clash), but
    where it `replaces` one defined at run time (attnbench.run's variants: the call names its own)."""
    old = _REGISTRY.get(variant.name)
    refused = None if old is None else clash(old, variant, replaces)
    if refused:
        raise VariantError(refused)
    _REGISTRY[variant.name] = variant


def _load_builtins() -> None:
    if _LOADED["builtins"]:
        return
    _LOADED["builtins"] = True
    for module in (
        "naive",
        "stable_softmax",
        "chunked",
        "chunked_compiled",
        "sdpa",
        "sdpa_packed",
        "paged",
        "varlen_attn",
        "flex",
        "xformers_mea",
        "fp8",
        "hf",  # transformers' attention functions, when it is installed
    ):  # registration order = list order
        importlib.import_module(f".{module}", __package__)


def _load_entry_points() -> None:
    if _LOADED["entry_points"]:
        return
    _LOADED["entry_points"] = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _current_source[0], before = f"entry point {ep.name} ({ep.value})", set(_REGISTRY)
        try:
            obj = ep.load()
            if isinstance(obj, Variant):
                add(obj)
            entry_point_sources(_REGISTRY, before, ep)  # its version, the sha256 of each one's module
        except Exception as exc:  # a broken plug-in must not take the tool down: report it instead
            _LOAD_ERRORS.append(
                f"entry point {ep.name} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
            )
        finally:
            _current_source[0] = "builtin"


def not_a_file(path: str | Path) -> str | None:
    """Why `path` is no file to read ("'adir' is a directory, not a file"), None when it is one."""
    p = Path(path)
    if p.is_file():
        return None
    return f"{str(path)!r} is a directory, not a file" if p.is_dir() else f"{str(path)!r} does not exist"


def load_variant_file(path: str | Path) -> list[str]:
    """Import a Python file whose @register decorators add variants; returns the names it added."""
    p = Path(path)
    why = not_a_file(path)
    if why:
        raise VariantError(f"variant file {why}")
    if p.suffix == ".pkl":  # a run's variants.pkl: variants shipped by value (variants.shipped)
        return _load_pickled(p)
    if p.suffix != ".py":
        raise VariantError(f"variant file {str(path)!r} is not a .py file (nor a run's variants.pkl)")
    _load_builtins()
    before = set(_REGISTRY)
    mod_name = f"{VARIANT_FILE_MODULE}{abs(hash(str(p.resolve())))}"
    if mod_name in sys.modules:  # loaded already (the worker and the parent both load it once)
        return [n for n, v in _REGISTRY.items() if where_of(v.source) == f"{FROM_FILE}{p}"]
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise VariantError(f"variant file {str(path)!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    # its path; each variant's code (code_suffix) beside it: an edited kernel is another source to history
    _current_source[0] = f"{FROM_FILE}{p}"
    environ = dict(os.environ)
    stopped: list[int] = []
    try:
        sys.modules[mod_name] = module
        with importing.guarded() as stopped:  # os._exit raises; the stop signals that come are noted
            spec.loader.exec_module(module)
        ENV_CHANGED[str(p.resolve())] = {
            k: (environ.get(k), os.environ.get(k))
            for k in {*environ, *os.environ}
            if environ.get(k) != os.environ.get(k)
        }
    except BaseException as exc:  # a broken file leaves nothing half-registered behind
        sys.modules.pop(mod_name, None)
        for name in set(_REGISTRY) - before:
            del _REGISTRY[name]
            _REGISTERED_IN.pop(name, None)
        if isinstance(exc, VariantError):
            raise
        if isinstance(exc, KeyboardInterrupt) and stopped:  # the user's Ctrl-C (or SIGTERM), not the file's
            raise KeyboardInterrupt(
                f"interrupted while importing the variant file {str(path)!r}: nothing was measured"
            ) from None
        if isinstance(exc, importing.EndedAtImport):
            raise VariantError(f"variant file {str(path)!r} failed to import: {exc}") from None
        if isinstance(exc, ImportError) and exc.name in OLD_IMPORT_NAMES:
            raise VariantError(
                f"variant file {str(path)!r} imports {exc.name!r}, the plug-in API before attnbench 0.2; "
                "write `from attnbench import register` (and Problem, UnsupportedError) instead"
            ) from None
        raise VariantError(
            f"variant file {str(path)!r} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        _current_source[0] = "builtin"
    added = sorted(set(_REGISTRY) - before)
    if not added:
        raise VariantError(f"variant file {str(path)!r} registered no variant (use @attnbench.register)")
    return added


def imported_by(path: str | Path, names: list[str]) -> dict[str, str]:
    """Of the `names` the variant file `path` registered (load_variant_file's), those that another file its
    imports ran registered (`from tiled import tiled_core` runs tiled.py's @register): name -> that file.
    The rest are the file's own: their register() was called in its code (a library's function registered
    there among them)."""
    own = str(Path(path).resolve())
    return {n: _REGISTERED_IN[n] for n in names if _REGISTERED_IN.get(n, own) != own}


def _load_pickled(path: Path) -> list[str]:
    """Register the variants of a run's variants.pkl (variants.shipped.pack's bytes); their names."""
    _load_builtins()
    try:
        with open(path, "rb") as fh:
            travel = pickle.load(fh)
    except Exception as exc:  # unpickling runs the pickled code's imports: any failure is the file's
        why = f"{type(exc).__name__}: {exc}"
        raise VariantError(f"variant file {str(path)!r} failed to load: {why}") from None
    if not isinstance(travel, list) or not all(isinstance(v, Variant) for v in travel):
        raise VariantError(f"variant file {str(path)!r} holds no list of variants")
    for variant in travel:
        add(variant)
    return [v.name for v in travel]


def all_variants() -> dict[str, Variant]:
    """Every registered variant (builtins, entry points, loaded files), by name, in registration order."""
    _load_builtins()
    _load_entry_points()
    return dict(_REGISTRY)


def load_errors() -> list[str]:
    """Plug-ins that failed to load, one line each."""
    all_variants()
    return list(_LOAD_ERRORS)


def _unknown(names: list[str], reg: dict[str, Variant]) -> str:
    return unknown_names(names, list(reg), _LOAD_ERRORS)


def get(name: str) -> Variant:
    """The variant called `name`; VariantError listing the known names otherwise."""
    reg = all_variants()
    if name not in reg:
        raise VariantError(_unknown([name], reg))
    return reg[name]


def resolve(names: list[str]) -> list[Variant]:
    """Variants for the given names, naming every unknown one at once."""
    reg = all_variants()
    unknown = [n for n in names if n not in reg]
    if unknown:
        raise VariantError(_unknown(unknown, reg))
    return [reg[n] for n in names]
