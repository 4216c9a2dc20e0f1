"""One cause said once: where the gate finds that a variant reads its inputs as (B, N, H, d), its other
failures that name no cause of their own (a bare error against float64, a shape that does not match) point
to it, not read as separate bugs. The gate's words for the cause live here, so that the harness that says
it and the check and bench's answer that point to it read one text."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .schema import GATE_FAILED

# harness.measure.correctness's sentence for a variant whose answer is attention over (B, N, H, d) inputs
READS_BNHD = "it computed attention over (B, N, H, d) inputs"
SAME_CAUSE = "(likely the same cause: it reads (B, N, H, d))"
# how a failure that names no cause begins: the gate's bare error (a row's message, a check's reason)
_BARE = ("rel_err", "output rel_err", "non-finite", "gradient rel_err", "grad rel_err")
# an exception that a layout mistake raises where N_q != N_k or the heads differ: its shapes do not match
_SHAPES = re.compile(r"\bsize\b|\bshape|must match|broadcast|dimension|mismatch", re.I)


def reads_bnhd(messages: Iterable[str]) -> bool:
    """Whether one of a variant's failure messages (its rows' or its gate rows' reasons) says it reads its
    inputs as (B, N, H, d)."""
    return any(READS_BNHD in str(m) for m in messages)


def names_no_cause(message: str) -> bool:
    """Whether a failure's message names no cause of its own: the gate's bare error, or an exception whose
    shapes do not match. Anything else (another named mistake, an out-of-memory, a timeout, an exception
    about something else) is a failure of its own, never pointed elsewhere."""
    said = str(message).removeprefix(f"{GATE_FAILED}: ").strip()
    if said.startswith(_BARE):
        return True
    kind, colon, _ = said.partition(": ")
    return bool(colon) and kind.endswith("Error") and bool(_SHAPES.search(said))


def pointed(message: str) -> str:
    """The message with SAME_CAUSE after it where it names no cause of its own, else the message as it is
    (the caller knows the variant reads (B, N, H, d): reads_bnhd)."""
    return f"{message} {SAME_CAUSE}" if names_no_cause(message) else message


WRONG_SAID = 240  # the most characters of a gate's message a report's sentence on a wrong variant quotes
_MAX_ABS = re.compile(r", max_abs_err [^\s;,)]+")
# the worst sequence's own error after it: the gate's rel_err is the worst one's (harness.measure.located)
_WORST_AGAIN = re.compile(r"(worst: [^;]*?\)): (?:rel_err \S+|non-finite \(NaN or inf\))$")


def gate_said(message: str, width: int = WRONG_SAID) -> str:
    """A wrong cell's message as a report's sentence quotes it: the gate's own words without their
    GATE_FAILED opening, the max_abs_err beside the rel_err and the worst sequence's error said twice left
    out, cut at a word to `width` characters ('…' where cut): its named mistake and worst sequence kept."""
    said = _MAX_ABS.sub("", str(message).removeprefix(f"{GATE_FAILED}: ").strip().rstrip("."))
    said = _WORST_AGAIN.sub(r"\1", said)
    if len(said) <= width:
        return said
    return said[:width].rsplit(" ", 1)[0].rstrip(",;:") + "…"
