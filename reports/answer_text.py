"""How bench's answer (reports.answer) words its parts: a message shortened at a word's end with its full text
kept, a ratio against the baseline, the dtypes in their order, a cell's pass, its shape's axes, its window;
and which of its lines it shows where they are more than MAX_LINES (cut)."""

from __future__ import annotations

import math
import re
from typing import Any

from attnbench.results.formulas import ci_spread, counted, ratio_change

from .tables import present
from .words import names_text

MAX_LINES = 12  # the most lines an answer shows (Answer.lines); Answer.full keeps every line

PASSES = {"fwd": "forward", "fwdbwd": "forward+backward"}  # a cell's pass, as a line names it
# the axes of a cell's shape besides its lengths and mask: a race line each where fn's cells take several
SHAPE_AXES = ("device", "batch", "heads", "d_k", "d_v", "kv_heads", "window", "dropout", "mod", "lengths",
              "page_size")  # fmt: skip
# the most characters of a row's message a line quotes: its cause and the way out come first, and fit
MESSAGE_CHARS = 200
# where short cut a message, and where the part it cut ends: an Answer's lines say " ..." there, its full
# lines the whole message (private-use characters, taken out of a message first)
CUT, CUT_END = "\ue000", "\ue001"
_CUT_PART = re.compile(f"{CUT}[^{CUT_END}]*{CUT_END}")


def short(text: str, limit: int = MESSAGE_CHARS) -> str:
    """text on one line, its first `limit` characters or fewer up to a word's end (never inside a word or a
    number: 'gradient rel_...' read as a token), the rest marked as cut (shown). A first word longer than
    `limit` (a path) is kept whole."""
    text = " ".join(text.replace(CUT, "").replace(CUT_END, "").split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 3)
    cut = cut if cut > 0 else text.find(" ", limit - 3)
    return text if cut < 0 else f"{text[:cut]}{CUT}{text[cut:]}{CUT_END}"


def shown(line: str, full: bool = False) -> str:
    """A line as shown: its cut messages ending ' ...', or whole (`full`)."""
    return line.replace(CUT, "").replace(CUT_END, "") if full else _CUT_PART.sub(" ...", line)


def dtypes_first(names: set[str]) -> list[str]:
    """float32 first (the dtype a first look is about), then the others by name."""
    return sorted(names, key=lambda d: (d != "float32", d))


def ratio_text(ratio: float, spread: float = math.nan) -> str:
    """'2.05x slower', '1.52x faster', 'as fast (1.00x)' (as compare says it: never faster or slower at
    1.00x either way), 'n/a'; the number in the digits `spread` supports (results.formulas.ratio_change;
    none known: two decimals)."""
    number, direction = ratio_change(ratio, spread)
    if number == "n/a":
        return number
    return f"{number}x {direction}" if direction else f"as fast ({number}x)"


def judged_text(j: Any) -> str:
    """ratio_text of a judged cell (results.judge.Judged): its B/A in the digits its CI supports, as
    compare's change says it."""
    return ratio_text(j.ratio, ci_spread(j.ratio, j.ci_low, j.ci_high))


def window_text(window: Any) -> str:
    """', window 64' for a sliding window's cells (a shape line names a window only where it varies)."""
    return f", window {int(window)}" if present(window) and int(window) else ""


def cut(before: list[str], race: list[str], grows: list[str], run: str, more: str) -> list[str]:
    """The lines an answer shows, at most MAX_LINES: all of them where they fit, the last 'run: X · `more`'
    (`run`: 'run: X'; `more`: where the rest is). Else the lines of `grows` (the K/V read and how time and
    memory grow, which no other line says) and the run's line are kept, and the race's lines (one per dtype
    and pass: 'bfloat16 forward+backward: 3.10x slower ...') after its first are left
    out, its last first (the first dtype's and pass's stays: the others' are in the report), then, where
    that is not enough, the lines before the race from their end (the head stays); the run's line names
    what was left out ('run: X · 1 line left out here: the race of bfloat16 forward+backward · ...'), and
    Answer.full keeps every line."""
    every = [*before, *race, *grows]
    if len(every) + 1 <= MAX_LINES:
        return [*every, f"{run} · {more}"]
    room = MAX_LINES - 1 - len(grows)  # for the lines before the race and the race's
    shown_race = race[: max(min(len(race), 1), room - len(before))]
    shown_before = before[: max(1, room - len(shown_race))]
    left_race = [line.split(": ", 1)[0] for line in race[len(shown_race) :]]
    left = len(before) - len(shown_before) + len(left_race)
    what = f": the race{'s' if len(left_race) > 1 else ''} of {names_text(left_race)}" if left_race else ""
    what = what if len(left_race) == left else ""  # a line before the race left out too: counted alone
    return [
        *shown_before,
        *shown_race,
        *grows,
        f"{run} · {counted(left, 'line')} left out here{what} · {more}",
    ]
