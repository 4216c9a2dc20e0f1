"""Words for numbers, as every sentence of a report, bench's answer and the history site says them: an N,
a list of names, a range of N or of ratios, a fitted exponent with its growth's word, and the suspect
variants a ranking left out."""

from __future__ import annotations

import math
from typing import Any

from attnbench.results.formulas import ratio_number

from .fit import agrees, too_wide
from .tables import present


def n_text(n: Any) -> str:
    return f"{int(n):,}"


def names_text(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def suspect_text(suspects: dict[str, str]) -> str:
    """The variants a ranking left out at an N as suspect (results.suspect), in the report's words, each
    with its reason where it has one: 'chunked and sdpa are suspect there, never ranked (chunked: 42.8x
    faster than naive ...; sdpa: ...)'."""
    why = "; ".join(f"{v}: {r}" for v, r in suspects.items() if r)
    are = "is" if len(suspects) == 1 else "are"
    return f"{names_text(list(suspects))} {are} suspect there, never ranked" + (f" ({why})" if why else "")


def range_text(ns: list[int], every: bool = False, name: str = "N") -> str:
    """'at N = 4,096', 'from N = 256 to 2,048', 'at every N measured, 256 to 4,096' (`name`: what the
    length is called, tables.length_name: 'N_k' for a decode series)."""
    if len(ns) == 1:
        return f"at {name} = {n_text(ns[0])}"
    if every:
        return f"at every {name} measured, {n_text(ns[0])} to {n_text(ns[-1])}"
    return f"from {name} = {n_text(ns[0])} to {n_text(ns[-1])}"


def ratio_range(ratios: list[float], spreads: list[float] | None = None) -> str:
    """'1.29×' or '1.05–1.16×': each end in the digits its spread supports (`spreads`, one per ratio: the
    relative spread results.formulas.ratio_number reads; none given: two decimals), so that a lead read off
    cells spread ±1463% says '300×', not '344.99×'."""
    spread_of = dict(zip(ratios, spreads or [math.nan] * len(ratios), strict=True))
    lo, hi = min(ratios), max(ratios)
    lo_text, hi_text = ratio_number(lo, spread_of[lo]), ratio_number(hi, spread_of[hi])
    return f"{lo_text}×" if lo_text == hi_text else f"{lo_text}–{hi_text}×"


GROWTH_WORDS = (("flat", 0.0), ("linear", 1.0), ("quadratic", 2.0), ("cubic", 3.0))  # a power's word


def growth_word(exp: Any, lo: Any, hi: Any) -> str:
    """An exponent in words: a power's ('quadratic') only where it agrees with it by the scaling table's rule
    (fit.agrees), so that no word says more than the CI, else where it lies ('between linear and
    quadratic'), or 'CI too wide to say' (the table's 'uncertain'). A CI holding two powers names neither."""
    lo, hi = (float(lo), float(hi)) if present(lo) and present(hi) else (None, None)
    if too_wide(lo, hi):
        return "CI too wide to say"
    e = float(exp)
    named = [w for w, power in GROWTH_WORDS if agrees(e, lo, hi, power)]
    if len(named) == 1:
        return named[0]
    if e < 1:
        return "sub-linear"
    return "between linear and quadratic" if e < 2 else "faster than quadratic"


def exponent_text(exp: Any, lo: Any, hi: Any, name: str = "N") -> str:
    """'N^1.98 [1.95, 2.01] (quadratic)'; without a CI (a fit through 2 points) 'N^1.98 (no CI)' and no
    word for the growth: two noisy points name no class (an O(N²) kernel read 'N^0.16, flat' so). `name`:
    the length's (tables.length_name), 'N_k^1.02' for a decode series."""
    if present(lo) and present(hi):
        word = growth_word(exp, lo, hi)
        return f"{name}^{float(exp):.2f} [{float(lo):.2f}, {float(hi):.2f}] ({word})"
    return f"{name}^{float(exp):.2f} (no CI)"
