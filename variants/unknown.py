"""The lines that refuse a word nobody defined, with the nearest known one ("did you mean"): a variant name
nobody registered, with the plug-ins that failed to load (a variant one of them would have registered is not
unknown by name, only unloaded), and any other word (a capability keyword). The harness's and the API's
unknown words (harness.sweep.grammar.unknown) say theirs by the same `did_you_mean`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

FAILED_SAY = 120  # the characters of each failed plug-in's error the line keeps


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """ " (did you mean 'dtypes'?)": the known word nearest `word` in any case, or "" where none is near."""
    import difflib

    lower = {str(k).lower(): k for k in known}  # 'SDPA', 'CPU': the word in another case
    near = difflib.get_close_matches(str(word).lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {lower[near[0]]!r}?)" if near else ""


def unknown_word(what: str, word: str, known: Sequence[str], also: Iterable[str] = ()) -> str:
    """ "unknown capability 'dtype' (did you mean 'dtypes'?); known: ...": the line for a word that is none of
    `known` (`also`: other words it may suggest, not listed)."""
    return f"unknown {what} {word!r}{did_you_mean(word, [*known, *also])}; known: {', '.join(known)}"


def unknown_names(names: Sequence[str], known: Sequence[str], load_errors: Sequence[str]) -> str:
    """The line: "unknown variant 'naiv' (did you mean 'naive'?); known: ...", every unknown name at
    once; with "; 2 plug-ins failed to load: bad_import (ModuleNotFoundError: ...), ...: see attnbench list"
    before the known names where entry points failed (load_errors: registry.load_errors' lines)."""
    said = ", ".join(repr(n) + did_you_mean(n, known) for n in names)
    unknown = f"unknown variant{'s' * (len(names) > 1)} {said}"
    return f"{unknown}{failed_plugins(load_errors)}; known: {', '.join(known)}"


def failed_plugins(load_errors: Sequence[str]) -> str:
    """The line's part: "; N plug-in(s) failed to load: NAME (ERROR), ...: see attnbench list", or "" where
    none failed."""
    said = []
    for line in load_errors:  # "entry point NAME (VALUE) failed to load: TYPE: MESSAGE"
        head, _, why = line.partition(" failed to load: ")
        name = head.removeprefix("entry point ").split(" (", 1)[0]
        why = " ".join(why.split())
        said.append(f"{name} ({why if len(why) <= FAILED_SAY else why[: FAILED_SAY - 3] + '...'})")
    if not said:
        return ""
    n = len(said)
    return f"; {n} plug-in{'s' * (n > 1)} failed to load: {', '.join(said)}: see attnbench list"
