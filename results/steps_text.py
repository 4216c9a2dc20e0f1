"""Steps in words: the one line `attnbench history check` prints for each step (describe), what changed across
it and near it (what_changed: the site's Steps table says the same), what the gate read of it (gate_text,
verdict_text), the calibration, and the steps as a DataFrame (as_frame, `attnbench.steps()`); results.steps
finds and judges them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .formulas import counted
from .identity import short_hash
from .steps import CALIBRATION_MOVED, RUNS_TO_JUDGE, Step
from .ttest import MIN_REPLICATES


def as_frame(found: Sequence[Step]):
    """Steps as a pandas DataFrame, a row each: the series, the size with its interval, the first run after
    (its id, time and 1-based place), the runs it may be at (1-based), the cells that took it together and
    those the gate judged as one with it, what
    the gate judges with its interval, the judge's p and (a latest step's) Holm-adjusted p, the commits on
    both sides, what else changed across it and near it (nearby_text), the calibration, whether it is its
    series' latest, its line."""
    import pandas as pd

    rows = [
        {
            "machine": s.machine,
            "variant": s.variant,
            "cell_id": s.cell_id,
            "change": s.change,
            "change_low": s.low - 1.0,
            "change_high": s.high - 1.0,
            "run_id": s.after.get("run_id"),
            "created": s.after.get("created"),
            "run": s.at + 1,
            "runs": s.runs,
            "may_be_from": s.first[0] + 1,
            "may_be_to": s.first[1] + 1,
            "cells": s.cells,
            "cells_as_one": s.pooled_cells if s.as_one else 1,
            "others": s.others,
            "beyond_others": None if s.beyond is None else s.beyond - 1.0,
            "gated": s.gated_change,
            "gated_low": s.gated[1] - 1.0,
            "gated_high": s.gated[2] - 1.0,
            "p": s.p,
            "p_holm": s.p_holm,
            "commit_before": s.before.get("git_commit"),
            "commit_after": s.after.get("git_commit"),
            "changed": "; ".join(changes({k: v for k, v in s.changed().items() if k != "git_commit"})),
            "nearby": "; ".join(nearby_text(s)),
            "calibration": s.calibration,
            "calibration_moved": s.calibration_moved,
            "latest": s.latest,
            "line": describe(s),
        }
        for s in found
    ]
    return pd.DataFrame(rows, columns=list(_FRAME_COLUMNS))


_FRAME_COLUMNS = (
    "machine", "variant", "cell_id", "change", "change_low", "change_high", "run_id", "created", "run",
    "runs", "may_be_from", "may_be_to", "cells", "cells_as_one", "others", "beyond_others", "gated",
    "gated_low", "gated_high", "p", "p_holm", "commit_before",
    "commit_after", "changed", "nearby", "calibration", "calibration_moved", "latest", "line",
)  # fmt: skip


def describe(step: Step) -> str:
    """One line for a step: the series, its size and interval (and what it is judged against, where its own
    segment before it is too short), the first run after it, what changed across it and near it, and the
    calibration."""
    size = f"{step.change:+.1%}"
    if step.low == step.low:
        size += f" [{step.low - 1:+.1%}, {step.high - 1:+.1%}]"
    if step.short_before:
        size += (
            f" against runs {step.against[0] + 1} to {step.against[1]} (the {step.short_before} runs just"
            f" before it, between two steps, are too few to judge it against; over them alone it is"
            f" {step.short_ratio - 1:+.1%})"
        )
    when = (step.after.get("created") or "?")[:10]
    where = f"at run {step.after.get('run_id')} ({when}; run {step.at + 1} of {step.runs})"
    if step.first[0] != step.first[1] and step.since and step.until:  # the noise allows more than one run
        since, until = (short_hash(s.get("git_commit")) for s in (step.since, step.until))
        bisect = (
            f" (bisect commits {since}..{until})" if since != until else ""
        )  # one commit: nothing to bisect
        where += f", or any run from {step.first[0] + 1} to {step.first[1] + 1}{bisect}"
    if step.cells > 1:
        where += f", with {cells_text(step)}"
    if step.others is not None:
        where += (
            f"; the other variants x{step.others:.2f} across it, this one {others_text(step)} beyond them"
        )
    return f"{step.cell_id} on {step.machine}: {size} {where}; {what_changed(step)}; {calibration_text(step)}"


def cells_text(step: Step) -> str:
    """The other cells of its variant placed at its run (Step.cells), those that went its way and those that
    went the other: '2 other cells of mine that stepped there too', '1 other cell of mine that stepped there
    the other way'."""
    same, other = step.cells - 1 - step.other_way, step.other_way
    said = [f"{counted(same, 'other cell')} of {step.variant} that stepped there too"] if same else []
    if other:
        cells = f"{other} that" if same else f"{counted(other, 'other cell')} of {step.variant} that"
        said.append(f"{cells} stepped there the other way")
    return ", and ".join(said)


def what_changed(step: Step) -> str:
    """What the runs recorded across a step and near it, as `history check`'s line and the site's Steps table
    both say it: the code's fields that changed, else what its two sides share (same_code: 'same commit'),
    then any other field that changed, then each change near it (nearby_text)."""
    changed = step.changed()
    parts = (
        changes(changed) if CODE & set(changed) else [same_code(step.before, step.after), *changes(changed)]
    )
    return "; ".join([", ".join(parts), *nearby_text(step)])


# the fields that say which attnbench code a run was measured with
CODE = {"git_commit", "code_sha256"}


def same_code(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What a step's two sides that differ in neither CODE field share: 'same commit' where both recorded
    it, 'same code (sha256 ...)' where only the code's sha256 tells (a `pip install` of a folder records no
    commit), 'commit ? -> ?' where neither side recorded either: unknown, not the same."""
    if before.get("git_commit") is not None:
        return "same commit"
    if before.get("code_sha256") is not None:
        return f"same code (sha256 {short_hash(before['code_sha256'])})"
    return "commit ? -> ?"


def changes(changed: dict[str, tuple[Any, Any]]) -> list[str]:
    """What changed (Step.changed), in words: 'commit 1a2b3c4d5e -> 9f8e7d6c5b', 'torch 2.13.0 -> 2.14.0',
    'env MINE_EXTRA=0 -> MINE_EXTRA=3', 'THP madvise -> always', '?' for a value not recorded."""
    return [f"{NAMES.get(k, k)} {_value(k, a)} -> {_value(k, b)}" for k, (a, b) in changed.items()]


# a run field as the words name it, where not by its own name
NAMES = {
    "git_commit": "commit", "sweep_env": "env", "allocator_env": "allocator env",
    "torch_threads": "torch threads", "transparent_hugepages": "THP",
    "thp_mem_alloc_enable": "THP_MEM_ALLOC_ENABLE",
}  # fmt: skip


def _value(field: str, value: Any) -> str:
    """A run field's value in words: a commit or sha256 short (short_hash), the kernel's huge-page setting
    as the mode it selects ('always [madvise] never' is madvise), '?' where not recorded."""
    chosen = re.search(r"\[(\w+)\]", str(value)) if field == "transparent_hugepages" else None
    return chosen.group(1) if chosen else short_hash(value)


def nearby_text(step: Step) -> list[str]:
    """Each change near a step but not across it (Step.nearby), where it is against the placed step:
    'variant_source ? -> builtin between runs 4 and 5, one run after the placed step'."""
    out = []
    for t, changed in step.nearby:
        d = t - step.at
        far = "one run" if abs(d) == 1 else f"{abs(d)} runs"
        out.append(
            f"{', '.join(changes(changed))} between runs {t} and {t + 1}, {far} "
            f"{'after' if d > 0 else 'before'} the placed step"
        )
    return out


def others_text(step: Step) -> str:
    """The step beyond the other variants' move, with its interval: '+2.6% [-3.1%, +13.2%]'."""
    if step.beyond is None:
        return "?"
    low, high = step.beyond_interval
    return f"{step.beyond - 1:+.1%}" + (f" [{low - 1:+.1%}, {high - 1:+.1%}]" if low == low else "")


def gate_text(step: Step) -> str:
    """What the gate read of a latest step judged: 'the judge: p 0.027, Holm-adjusted 0.49 over 18 series',
    with the step it judged where the cells that took it together were judged as one."""
    head = "the judge"
    if step.pooled is not None:
        ratio, low, high = step.pooled
        size = f"{ratio - 1:+.1%}" + (f" [{low - 1:+.1%}, {high - 1:+.1%}]" if low == low else "")
        if step.as_one:
            head += f" of its {step.pooled_cells} cells as one, {size}"
        else:  # its own step is surer than the cells' as one: pooling never hides a slowdown
            head += f" of its own step (its {step.pooled_cells} cells as one, {size}, p {step.pooled_p:.2g})"
    family = f"{step.family} series of this machine"
    return f"{head}: p {step.p:.2g}, Holm-adjusted {step.p_holm:.2g} over {family}"


def verdict_text(step: Step, limit: float) -> str:
    """The gate's word on a latest step over `limit` slower (Step.verdict), after what the judge read."""
    verdict = step.verdict(limit)
    if verdict == "pending":
        after = counted(step.runs_after, "run")
        return f"no test yet: {after} after it, the judge needs 3 (the next runs decide it)"
    if verdict == "untestable":
        before = counted(step.runs_before, "run")
        return f"no test can ever judge it: {before} before it in its whole series, the judge needs 3"
    said = {
        "noise": "within its noise",
        "holm": "slower by its own test, not significant after Holm's adjustment",
        "fell": (
            f"slower only beyond the other variants, its own time fell ({step.change:+.1%}): not a slowdown"
        ),
    }
    return gate_text(step) + (f": {said[verdict]}" if verdict in said else "")


def calibration_text(step: Step) -> str:
    """The calibration across a step in words: unknown, moved (the machine changed), steady, moved by more
    than CALIBRATION_MOVED but within its own noise, or moved by more with too few runs on a side to tell."""
    if step.calibration is None:
        return "calibration unknown"
    ratio = f"x{step.calibration:.2f}"
    beyond = abs(step.calibration - 1.0) > CALIBRATION_MOVED
    low, high = step.calibration_interval
    if beyond and low != low:  # no interval: a side has too few runs to tell its noise from a move
        side = "after" if step.runs_after < MIN_REPLICATES else "before"
        return f"calibration {ratio}: too few runs {side} the step to tell"
    if beyond:
        ratio += f" [{low:.2f}, {high:.2f}]"
    if step.calibration_moved:
        return f"calibration moved too ({ratio}: the machine changed)"
    return f"calibration steady within its own noise ({ratio})" if beyond else f"calibration steady ({ratio})"


def too_short_text(lengths: Sequence[int]) -> str | None:
    """The series too short to judge any step in (fewer than RUNS_TO_JUDGE runs; results.steps.lengths),
    where there are: every series ('no series has the 6 runs ...; the longest has 2') or how many of them."""
    short = sum(n < RUNS_TO_JUDGE for n in lengths)
    if not short:
        return None
    each = MIN_REPLICATES
    need = f"the {RUNS_TO_JUDGE} runs a step needs to be judged ({each} before it, {each} after"
    if short == len(lengths):
        return f"no series has {need}; the longest has {max(lengths)})"
    return f"{short} of {len(lengths)} series {'has' if short == 1 else 'have'} fewer than {need})"
