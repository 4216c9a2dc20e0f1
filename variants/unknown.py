"""The line that refuses a variant name nobody registered: the nearest known name, and the plug-ins that
failed to load (a variant one of them would have registered is not unknown by name, only unloaded)."""

from __future__ import annotations

from collections.abc import Sequence

FAILED_SAY = 120  # the characters of each failed plug-in's error the line keeps


def unknown_names(names: Sequence[str], known: Sequence[str], load_errors: Sequence[str]) -> str:
    """The line: "unknown variant 'naiv' (did you mean 'naive'?); known: ...", every unknown name at
    once; with "; 2 plug-ins failed to load: bad_import (ModuleNotFoundError: ...), ...: see attnbench list"
    before the known names where entry points failed (load_errors: registry.load_errors' lines)."""
    import difflib

    lower = {k.lower(): k for k in known}  # 'SDPA': the name in another case

    def one(n: str) -> str:
        near = difflib.get_close_matches(n.lower(), list(lower), n=1, cutoff=0.6)
        return repr(n) + (f" (did you mean {lower[near[0]]!r}?)" if near else "")

    unknown = f"unknown variant{'s' * (len(names) > 1)} {', '.join(map(one, names))}"
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
