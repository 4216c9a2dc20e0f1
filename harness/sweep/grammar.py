"""How the values of an axis or a setting are read, from text (a flag, a TOML string, a pytest option) or
from Python values (the API, TOML arrays, meta.json), and checked: one reader and one rule per grammar.

`read_axis(axis, value, name)` and `read_setting(setting, value, name)` are what every front end calls; the
data classes (harness.sweep.spec SweepSpec, harness.sweep.settings Settings) check their values with the same
rules, so a value refused by a flag is refused by the API and a sweep file too, in the same words. `name` is
the front end's own name for the axis (`seq-len` for --seq-len, `--attn-seq-len`, `seq_len` for the API), and
every error is a ValueError naming it and the bad value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from attnbench.harness.sweep.models import MODELS, model
from attnbench.results.axes import Axis
from attnbench.variants.lengths import parse_lengths
from attnbench.variants.mods import parse_mod
from attnbench.variants.problem import DTYPES
from attnbench.variants.unknown import did_you_mean

DEVICES = ("cpu", "cuda")
PASSES = ("fwd", "fwdbwd")
LOWER_RIGHT = "lower-right"  # a causal value of a sweep: causal, aligned lower-right (CellSpec.causal_align)
CAUSAL_WORDS = {"no": (False,), "yes": (True,), "both": (False, True), LOWER_RIGHT: (LOWER_RIGHT,)}
PASS_WORDS = {"fwd": ("fwd",), "fwdbwd": ("fwdbwd",), "both": ("fwd", "fwdbwd")}
MAX_SEQ_LEN = 1 << 24
# the short names reports and `attnbench list` print (bf16), and the usual spellings, read as the dtype
DTYPE_ALIASES = {
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
}
LENGTH = re.compile(r"(\d+)([kKmM]?)")  # 512, 4k (4096: plots say 1k for 1024), 1m
# How CUDA cells are timed (harness.measure.timing): chosen per cell (auto), CUDA events around each call, or
# replays of a CUDA graph; CPU cells are always timed with perf_counter.
TIMINGS = ("auto", "events", "graph")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Grammar:
    """How one kind of values is read and checked."""

    parse: Callable[[str, str], tuple]  # (name, text) -> values; errors name `name`
    check: Callable[[str, tuple], tuple]  # (name, values) -> the canonical values; errors name `name`
    write: Callable[[Any], str] = str  # one value -> text that parse reads back
    # a value given twice is refused by the sweep itself (False: counts, which a run's meta.json written
    # before front ends refused repeats may hold twice); read_axis, what front ends read with, refuses any
    unique: bool = True
    choices: tuple[str, ...] = ()  # the words it knows, for help texts ('cpu', 'cuda')
    # what a front end may give, where that is less than a sweep may hold (read_axis, before check): a page
    # size of 0, contiguous K/V, is the default a sweep holds and never a value given
    given: Callable[[str, tuple], None] | None = None


# ---- readers of text ------------------------------------------------------------------------------------


def split(text: str) -> list[str]:
    return [p.strip() for p in str(text).split(",") if p.strip()]


def parse_names(name: str, text: str) -> tuple[str, ...]:
    return tuple(split(text))


class RangeEndError(ValueError):
    """A doubling range whose doubling never lands on its end."""


def parse_ints(name: str, text: str) -> tuple[int, ...]:
    """'512,1024' -> (512, 1024); 'a..b' -> a doubling range from a to b, both included ('256..4096': 256,
    512, ..., 4096); a range whose doubling never lands on its end ('128..500') is refused, saying the ends
    it could have, rather than stop short of the end it was given."""
    out: list[int] = []
    for part in split(text):
        if ".." in part:
            lo_s, hi_s = part.split("..", 1)
            lo, hi = _int(name, lo_s), _int(name, hi_s)
            if lo < 1 or hi < lo:
                raise ValueError(f"{name} range {part!r} must go from a positive start up to its end")
            v = lo
            while v <= hi:
                out.append(v)
                v *= 2
            if out[-1] != hi:
                listed = ",".join(map(str, [*out, hi])) if len(out) < 4 else f"{lo},...,{out[-1]},{hi}"
                raise RangeEndError(
                    f"{name} range {part!r} doubles from {lo} and never lands on {hi} ({out[-1]}, then {v}): "
                    f"end it at {out[-1]} or {v}, or list the values ({listed})"
                )
        else:
            out.append(_int(name, part))
    return tuple(out)


def _int(name: str, s: str) -> int:
    """'512' -> 512; '4k' -> 4096 and '1m' -> 1048576 (the binary steps plots label 1k, 4k)."""
    found = LENGTH.fullmatch(s.strip())
    if not found:
        raise ValueError(f"{name} must be positive integers, got {s.strip()!r}")
    v = int(found[1]) * {"": 1, "k": 1 << 10, "m": 1 << 20}[found[2].lower()]
    if v < 1:
        raise ValueError(f"{name} must be positive integers, got {v}")
    return v


def parse_floats(name: str, text: str) -> tuple[float, ...]:
    out = []
    for part in split(text):
        try:
            out.append(float(part))
        except ValueError:
            raise ValueError(f"{name} must be numbers, got {part!r}") from None
    return tuple(out)


def parse_window(name: str, text: str) -> tuple[int, ...]:
    """'0', '512' or '0,128,512' (0 = no window); a positive part takes parse_ints's forms ('128..1024')."""
    out: list[int] = []
    for part in split(text):
        if part == "0":
            out.append(0)
            continue
        try:
            out += parse_ints(name, part)
        except RangeEndError:  # says what is wrong with the range, and what would do
            raise
        except ValueError:
            raise ValueError(f"{name} must be 0 (none) or a positive number of keys, got {part!r}") from None
    return tuple(out)


def parse_words(words: Mapping[str, tuple]) -> Callable[[str, str], tuple]:
    """A reader of words that each stand for values ('both' -> fwd, fwdbwd), in a comma list."""

    def parse(name: str, text: str) -> tuple:
        return _words(name, split(text), words, strict=True)

    return parse


def _words(name: str, parts: Iterable[Any], words: Mapping[str, tuple], *, strict: bool = False) -> tuple:
    """Each word replaced by its values; anything else kept as it is (a value already: the check says
    whether it is one), or, `strict` (text), refused naming the words."""
    out: list = []
    for part in parts:
        if isinstance(part, str) and part in words:
            out += [v for v in words[part] if v not in out]
        elif strict:
            choices = ", ".join(words)
            raise ValueError(f"{name} must be one of {choices} (or a comma list of them), got {part!r}")
        else:
            out.append(part)
    return tuple(out)


def parse_patterns(name: str, text: str) -> tuple[str, ...]:
    return tuple(split(text))  # each checked (and made canonical) by variants.lengths.parse_lengths


def _pages_refused(name: str, got: Any) -> ValueError:
    """The one refusal of a page size, in every front end's words."""
    return ValueError(f"{name} must be positive integers, tokens per page, got {got!r}")


def parse_page_sizes(name: str, text: str) -> tuple[int, ...]:
    """'16' or '16,64' (parse_ints' forms): tokens per page, each positive. 0, contiguous K/V, is the
    default and not written."""
    for part in split(text):
        found = LENGTH.fullmatch(part)
        if ".." not in part and not (found and int(found[1]) > 0):
            raise _pages_refused(name, part)
    return parse_ints(name, text)  # a range's own refusal says what is wrong with it


def given_page_sizes(name: str, values: tuple) -> None:
    """Page sizes given as Python values (the API, a sweep file) as --page-size takes them: positive
    integers; 0, contiguous K/V, is what giving none means."""
    for p in values:
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise _pages_refused(name, p)


def parse_mods(name: str, text: str) -> tuple[str, ...]:
    return tuple(split(text))  # each checked (and made canonical) by variants.mods.parse_mod


# ---- rules ----------------------------------------------------------------------------------------------


def check_ints(hi: int | None = None) -> Callable[[str, tuple], tuple]:
    def check(name: str, values: tuple) -> tuple:
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be positive integers, got {v!r}")
            if hi is not None and v > hi:
                raise ValueError(f"{name} {v} is larger than the supported maximum {hi}")
        return tuple(values)

    return check


def check_fractions(what: str) -> Callable[[str, tuple], tuple]:
    def check(name: str, values: tuple) -> tuple:
        for p in values:
            if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1):
                raise ValueError(f"{name} must be {what} in [0, 1), got {p!r}")
        return tuple(float(p) for p in values)

    return check


def unknown(what: str, value: Any, known: Iterable[str], also: Iterable[str] = ()) -> str:
    """'unknown dtype 'bf61' (did you mean 'bf16'?); known: ...': the message for a word that is not one
    (`also`: other spellings it may suggest, not listed)."""
    known = list(known)
    return f"unknown {what} {value!r}{did_you_mean(str(value), [*known, *also])}; known: {', '.join(known)}"


def check_known(
    choices: tuple[str, ...], what: str, aliases: Mapping[str, str] | None = None
) -> Callable[[str, tuple], tuple]:
    """Each value one of `choices`, or an alias of one (read as that choice)."""
    aliases = aliases or {}

    def check(name: str, values: tuple) -> tuple:
        out = []
        for v in values:
            v = aliases.get(v, v) if isinstance(v, str) else v
            if v not in choices:
                raise ValueError(unknown(what, v, choices, aliases))
            out.append(v)
        return tuple(out)

    return check


# FP8 is a recipe of the inputs' rounding inside a cell of another dtype (variants/fp8.py), not a dtype cells
# are made in: a float8 name given as one says so, never "did you mean 'float64'?"
FLOAT8 = re.compile(r"(?:torch\.)?(?:float8|fp8|f8|e4m3|e5m2)", re.I)


def check_dtypes(name: str, values: tuple) -> tuple:
    """Each a dtype of DTYPES or an alias of one; a float8 dtype is refused with where FP8 is measured."""
    for v in values:
        if isinstance(v, str) and FLOAT8.match(v):
            raise ValueError(
                f"{name} {v!r}: float8 is not a dtype of a sweep's cells; FP8 is measured by the variants "
                "fp8_emulated, fp8_emulated_head and fp8_sdpa, which round q, k, v to float8_e4m3fn inside a "
                "cell of float32, float16 or bfloat16 (docs/variants.md, quantised inputs)"
            )
    return check_known(DTYPES, "dtype", DTYPE_ALIASES)(name, values)


def check_names(name: str, values: tuple) -> tuple:
    for v in values:
        if not isinstance(v, str) or not v:
            raise ValueError(f"{name} must be names, got {v!r}")
    return tuple(values)


def check_models(name: str, values: tuple) -> tuple:
    for v in check_names(name, values):
        model(v)  # ValueError listing the known models
    return tuple(values)


def check_causal(name: str, values: tuple) -> tuple:
    values = _words(name, values, CAUSAL_WORDS)  # a TOML array may hold the words
    for c in values:
        if not isinstance(c, bool) and c != LOWER_RIGHT:
            raise ValueError(f"{name} values must be booleans or {LOWER_RIGHT!r}, got {c!r}")
    order = (False, True, LOWER_RIGHT)
    return tuple(sorted(values, key=lambda v: next(i for i, o in enumerate(order) if o is v or o == v)))


def check_passes(name: str, values: tuple) -> tuple:
    return check_known(PASSES, "pass")(name, _words(name, values, PASS_WORDS))


def check_window(name: str, values: tuple) -> tuple:
    for w in values:
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"{name} must be 0 (none) or a positive number of keys, got {w!r}")
    return tuple(values)


def check_page_sizes(name: str, values: tuple) -> tuple:
    for p in values:
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:  # 0: contiguous, the default
            raise _pages_refused(name, p)
    if 0 in values and len(values) > 1:
        raise ValueError(f"{name} takes page sizes or 0 (contiguous K/V), not both: got {list(values)}")
    return tuple(values)


def check_mods(name: str, values: tuple) -> tuple:
    return _canonical(name, values, parse_mod, "mod")


def check_patterns(name: str, values: tuple) -> tuple:
    return _canonical(name, values, parse_lengths, "lengths")


def _canonical(name: str, values: tuple, parse: Callable[[Any], str], word: str) -> tuple:
    """Each value in its canonical text (one cell_id per meaning), by `parse`, whose errors say "`word`
    must be ..." (variants.mods, variants.lengths): named as the front end names the option, `name`."""
    out = []
    for value in values:
        try:
            out.append(parse(value))
        except ValueError as exc:
            text = str(exc)
            said = name + text[len(word) :] if text.startswith(f"{word} ") else f"{name}: {text}"
            raise ValueError(said) from None
    return tuple(out)


def _causal_text(value: Any) -> str:
    return {False: "no", True: "yes"}.get(value, str(value)) if isinstance(value, bool) else str(value)


GRAMMARS: dict[str, Grammar] = {
    "variants": Grammar(parse_names, check_names),
    "devices": Grammar(parse_names, check_known(DEVICES, "device"), choices=DEVICES),
    "dtypes": Grammar(parse_names, check_dtypes, choices=DTYPES),
    "ints": Grammar(parse_ints, check_ints(), unique=False),
    "lengths": Grammar(parse_ints, check_ints(MAX_SEQ_LEN), unique=False),
    "fractions": Grammar(parse_floats, check_fractions("a fraction"), write=lambda v: repr(float(v))),
    "probabilities": Grammar(parse_floats, check_fractions("a probability"), write=lambda v: repr(float(v))),
    "causal": Grammar(parse_words(CAUSAL_WORDS), check_causal, write=_causal_text),
    "passes": Grammar(parse_words(PASS_WORDS), check_passes),
    "window": Grammar(parse_window, check_window, unique=False),
    "mods": Grammar(parse_mods, check_mods),
    "patterns": Grammar(parse_patterns, check_patterns),
    "page sizes": Grammar(parse_page_sizes, check_page_sizes, given=given_page_sizes),
    "models": Grammar(parse_names, check_models, choices=tuple(MODELS)),
}


def grammar(axis: Axis) -> Grammar:
    try:
        return GRAMMARS[axis.grammar]
    except KeyError:
        raise KeyError(
            f"axis {axis.name}: unknown grammar {axis.grammar!r}; known: {', '.join(GRAMMARS)}"
        ) from None


def may_be_empty(axis: Axis) -> bool:
    """An axis whose empty value means something (its default is empty): every default variant, no model,
    or the value of the axis it follows (d_v = d_k)."""
    return not axis.default


def check_axis(axis: Axis, values: tuple, name: str | None = None) -> tuple:
    """An axis's values as a sweep holds them, checked (ValueError naming `name`, default the axis)."""
    name = name or axis.name
    g = grammar(axis)
    if not values and not may_be_empty(axis):
        raise ValueError(f"{name} needs at least one value")
    values = g.check(name, tuple(values))
    if g.unique and len(set(values)) != len(values):
        raise ValueError(f"{name} lists a value twice: {list(values)}")
    return values


def read_axis(axis: Axis, value: Any, name: str | None = None) -> tuple:
    """Text ('256..4096', 'both', 'none,alibi') or Python values (a list, or one value) -> the axis's
    checked values. Text and lists must give at least one value: an axis left at its default is one not
    given (None), never an empty one."""
    name = name or axis.name
    if isinstance(value, str):
        values = grammar(axis).parse(name, value)
        if not values:
            raise ValueError(f"{name} needs at least one value, got {value!r}")
    elif isinstance(value, (list, tuple, range)):
        values = tuple(_plain(v) for v in value)
    elif getattr(value, "ndim", 0) >= 1 and hasattr(value, "tolist"):  # a numpy array, a torch tensor
        values = tuple(value.tolist())
    else:
        values = (_plain(value),)
    if not values:  # as empty text: [] is no choice (variants=[] is not "every default variant")
        raise ValueError(f"{name} needs at least one value, got {list(values)}")
    if grammar(axis).given is not None:
        grammar(axis).given(name, values)
    values = check_axis(axis, values, name)
    if len(set(values)) != len(values):  # given twice: a typo, or a range overlapping a list
        raise ValueError(f"{name} lists a value twice: {list(values)}")
    return values


def _plain(value: Any) -> Any:
    """A value as the axis rules read it: a torch.dtype or torch.device as its name ('float32', 'cuda'),
    a numpy or torch scalar as the Python number it holds (no torch import: the parent may never make one)."""
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ in ("dtype", "device"):
        return str(value).removeprefix("torch.")
    if not isinstance(value, (bool, int, float, str)) and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def write_axis(axis: Axis, value: Any) -> str:
    """One value of an axis as text that read_axis reads back as that value."""
    return grammar(axis).write(value)


# ---- settings -----------------------------------------------------------------------------------------


def parse_number(kind: type) -> Callable[[str, Any], Any]:
    def parse(name: str, value: Any) -> Any:
        if not isinstance(value, str):
            value = _plain(value)  # already a number (numpy's as Python's): the setting's rule checks it
            if kind is int and isinstance(value, float):  # rounds=1.5 would pass a rule of >= 1
                raise ValueError(f"{name} must be an integer, got {value!r}")
            return value
        try:
            return kind(value)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise ValueError(f"{name} must be {what}, got {value!r}") from None

    return parse


def parse_cpu_list(name: str, text: Any) -> tuple[int, ...]:
    """'0,1' or '0-3' or '0-3,6' (as taskset -c) -> (0, 1, 2, 3, 6); CPU numbers pass through, sorted."""
    if not isinstance(text, str):
        out = set()
        for c in text:
            if isinstance(c, bool) or not isinstance(c, int) or c < 0:
                raise ValueError(f"{name} takes CPU numbers (0, 1, ...), got {c!r}")
            out.add(c)
        return tuple(sorted(out))
    found: set[int] = set()
    for part in split(text):
        lo_s, dash, hi_s = part.partition("-")
        try:
            lo, hi = int(lo_s), int(hi_s) if dash else int(lo_s)
        except ValueError:
            raise ValueError(f"{name} takes CPU numbers like 0,1 or 0-3, got {part!r}") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"{name} range {part!r} must go from a CPU number up to a larger one")
        found.update(range(lo, hi + 1))
    if not found:
        raise ValueError(f"{name} needs at least one CPU, got {text!r}")
    return tuple(sorted(found))


def format_cpus(cpus) -> str:
    """(0, 1, 2, 3, 6) -> '0-3,6': the form --cpu-affinity takes."""
    parts: list[str] = []
    cpus = sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def parse_timing(name: str, value: Any) -> str:
    """'auto', 'events' or 'graph' (TIMINGS)."""
    word = str(value).strip()
    if word not in TIMINGS:
        raise ValueError(f"{name} must be one of {', '.join(TIMINGS)}, got {word!r}")
    return word


def parse_env(name: str, value: Any) -> tuple[tuple[str, str], ...]:
    """Environment variables for the workers: ['NAME=value', ...] (the --env flag), a mapping or (name, value)
    pairs (a sweep file's [env], meta.json) -> sorted (name, value) pairs of strings."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        pairs = []
        for item in value or ():
            if isinstance(item, str):
                key, eq, val = item.partition("=")
                if not eq or not ENV_NAME.fullmatch(key):
                    raise ValueError(f"{name} takes NAME=VALUE, got {item!r}")
                pairs.append((key, val))
            else:
                pairs.append(item)
    out: dict[str, str] = {}
    for pair in pairs:
        if isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"env entries must be NAME = value pairs, got {pair!r}")
        key, val = pair
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise ValueError(f"env name {key!r} is not a valid environment variable name")
        if isinstance(val, bool) or not isinstance(val, (str, int)):
            raise ValueError(f"env {key} must be a string or an integer, got {val!r}")
        out[key] = str(val)
    return tuple(sorted(out.items()))


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("yes", "true", "1", "on"):
        return True
    if word in ("no", "false", "0", "off"):
        return False
    raise ValueError(f"{name} must be yes or no, got {value!r}")


SETTING_READERS: dict[str, Callable[[str, Any], Any]] = {
    "float": parse_number(float),
    "int": parse_number(int),
    "cpus": parse_cpu_list,
    "timing": parse_timing,
    "env": parse_env,
    "bool": parse_bool,
}
