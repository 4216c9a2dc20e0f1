"""The ranking of one shape's variants in one run: the groups that the judge's rule for two of them
(results.judge.separated, on results.judge.separation's test) makes of them, fastest first (`rank_groups`):
the one walk that the report's ranking, its best-variant front and the history site's front all take. Pure
Python (math only), as the judge is."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .judge import TOLERANCE, separated, separation


def told_apart(leader: Any, other: Any, tolerance: float = TOLERANCE) -> tuple[bool, float]:
    """The ranking's rule for two rows (the faster `leader` first): whether `other` is `separated` from it
    (at least `tolerance` slower by median: judge.TOLERANCE, or more where the run measured one kernel
    under two names further apart, reports.tables.tolerance_of), and the p of their `separation`."""
    test = separation(leader, other)
    return separated(leader, other, tolerance=tolerance, test=test), test.p


@dataclass(frozen=True)
class Ranked:
    """One of a shape's variants in its ranking: its row, its group (0: the front) and the p of the test
    that placed it, against its group's leader, or the previous group's for a group's leader (nan for the
    fastest, and where the rule given has no test)."""

    row: Any
    group: int
    p: float


Apart = Callable[[Any, Any], "tuple[bool, float]"]  # (leader, other) -> (told apart, p)


def rank_groups(ordered: Iterable[Any], apart: Apart = told_apart) -> Iterator[Ranked]:
    """The ranking of one shape's rows (`ordered`: fastest first) in groups: the fastest leads group 0, and
    each row after it joins the current group while `apart` (by default the judge's rule, `told_apart`)
    cannot tell it from that group's leader, and leads the next group once it can. A row is judged against
    its group's leader only, never a faster group's: a row slower by median than one told apart from the
    fastest is behind the fastest too, even where its own spread is too wide for the test to tell the two
    apart, so a front (group 0) ends at the first row told apart. Lazy: a caller that wants the front alone
    stops at group 1's first row, and no later pair is judged."""
    leader, group = None, 0
    for i, row in enumerate(ordered):
        told, p = (False, math.nan) if i == 0 else apart(leader, row)
        if i == 0 or told:
            leader, group = row, group + (i > 0)
        yield Ranked(row, group, p)
