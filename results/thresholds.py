"""The gates' thresholds as the user writes them: `compare --fail-above STAT:N%` (or `STAT:X` / `STAT:Xms`,
X in ms, pytest-benchmark's convention), `compare --run-spread PCT` and `--visit-spread PCT`, and `history
check --fail-on-step N%` (a bare N is a percent there). One grammar, one place: each parser answers the
value and, where a bare number is likely a mistake or a percent so large the gate can hardly fire, a note,
one line for stderr.

0 is accepted everywhere and means the same thing: any slowdown the judge calls slower fails the gate."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

STATS = ("median", "mean", "min", "max")  # the statistics --fail-above compares (results.judge._stat)
HUGE_PERCENT = 1000.0  # a slowdown gate at this many percent or more is noted: a cell must be >= 11x slower
_NUMBER = r"(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_SPEC = re.compile(rf"^(?P<stat>[a-z]+):{_NUMBER}\s*(?P<unit>%|ms)?$")
_PERCENT = re.compile(rf"^{_NUMBER}\s*(?P<unit>%)?$")


@dataclass(frozen=True)
class Threshold:
    """--fail-above STAT:N% (B slower than A by more than N percent) or STAT:X (by more than X ms)."""

    stat: str
    value: float
    relative: bool
    text: str  # as written, with its unit: 'median:5%', 'median:5ms', and a bare 'median:5' as 'median:5 ms'
    note: str | None = None  # one line for stderr: how a likely mistake was read (None when none)

    def exceeded(self, a: float, b: float) -> bool:
        return (b - a) / a > self.value if self.relative else (b - a) > self.value


def _huge(flag: str, text: str, pct: float) -> str | None:
    if pct < HUGE_PERCENT:
        return None
    return f"note: {flag} {text} fails only a slowdown of more than {pct / 100 + 1:.4g}x: it can hardly fire"


def parse_threshold(spec: str) -> Threshold:
    """'median:5%' -> Threshold, as pytest-benchmark's --benchmark-compare-fail ('median:0.5' and
    'median:0.5ms': 0.5 ms); ValueError (one line) if malformed."""
    text = str(spec).strip()
    m = _SPEC.match(text)
    if not m or m["stat"] not in STATS or not math.isfinite(float(m["num"])):
        raise ValueError(
            f"bad --fail-above {spec!r}: expected STAT:N% or STAT:Xms (X in ms; a bare X is ms too) with "
            f"STAT one of {', '.join(STATS)} (e.g. median:5%)"
        )
    value, relative = float(m["num"]), m["unit"] == "%"
    note = None
    if relative:
        note = _huge("--fail-above", text, value)
    elif m["unit"] is None and 0 < value < 1:
        pct = f"{value * 100:.4g}%"
        note = f"note: --fail-above {text} is {m['num']} ms; for {pct} write {m['stat']}:{pct}"
    # echoed with its unit wherever it is printed (the rule, the last line): a bare X is X ms, and
    # 'median:5' alone reads as 5% to most readers
    shown = f"{m['stat']}:{m['num']} ms" if m["unit"] is None else text
    return Threshold(m["stat"], value / 100 if relative else value, relative, shown, note)


def _percent(flag: str, text: str, example: str) -> tuple[float, str | None]:
    """'5' or '5%' -> (0.05, note): a note where a bare fraction below 1 was read as a percent."""
    stripped = str(text).strip()
    m = _PERCENT.match(stripped)
    if not m or not math.isfinite(float(m["num"])):
        raise ValueError(f"bad {flag} {text!r}: expected a percentage of 0 or more, such as {example}")
    pct = float(m["num"])
    note = None
    if m["unit"] is None and 0 < pct < 1:
        note = f"note: {flag} {stripped} is {m['num']}%; for {pct * 100:.4g}% write {pct * 100:.4g}%"
    return pct / 100, note


def parse_step(text: str) -> tuple[float, str | None]:
    """--fail-on-step's N% (a bare N is a percent) as (fraction, note); ValueError naming the flag."""
    value, note = _percent("--fail-on-step", text, "5%")
    return value, note or _huge("--fail-on-step", str(text).strip(), value * 100)


def parse_run_spread(text: str) -> tuple[float, str | None]:
    """'8' or '8%' -> (0.08, note): --run-spread, how far whole runs of identical code move on one's own
    machine (what benchmarks/false_alarm.py measures there); ValueError (one line) unless 0 <= it < 100."""
    value, note = _percent("--run-spread", text, "8%")
    if not value < 1:
        raise ValueError(
            f"bad --run-spread {text!r}: expected a percentage from 0 to below 100 (e.g. 8 or 8%)"
        )
    return value, note


def parse_sample_spread(text: str) -> tuple[float, str | None]:
    """'30' or '30%' -> (0.30, note): --visit-spread, how far one visit of a cell moves from the next in a run
    of identical code on one's own machine (the visit floor, results.spreads.VISIT_SPREAD_FLOOR, may pass
    100%); ValueError (one line) naming the flag for anything but a percentage of 0 or more."""
    return _percent("--visit-spread", text, "30%")
