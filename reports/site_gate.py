"""What `attnbench history check`'s gate decides, as the published site shows it (reports.dashboard): the
decision is results.gate's, the one the CLI's exit status reads, so that a red gate is never a green site.
With a threshold (`history publish --fail-on-step N%`, as `check` takes it) the index and each machine page
say what `check` at that threshold fails on (FAIL, BROKEN, MISSING) and the machine page's steps table marks
each step with the gate's word on it; without one they say the series the gate fails on at any threshold
(BROKEN, MISSING) and the latest steps the judge finds significant slowdowns after Holm's adjustment, which
it fails at any threshold below their size. A machine page has tables of its BROKEN and MISSING series."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnbench.results.gate import MARKS, Gate, kind_text, percent
from attnbench.results.steps_text import gate_text, verdict_text

from .page import Heading, Link, Table

SHOWN = 3  # the slowdowns a sentence names by cell before it counts the rest


def _its(n: int) -> str:
    return "its" if n == 1 else "their"


def _of(gate: Gate, machine: str | None) -> tuple[list[Any], list[Any], list[Any]]:
    """The gate's (failing or significant steps, broken, missing) on `machine` (every machine's: None)."""
    mine = (lambda x: True) if machine is None else (lambda x: x.machine == machine)
    slower = gate.failing if gate.limit is not None else gate.significant
    return (
        [s for s in slower if mine(s)],
        [b for b in gate.broken if mine(b)],
        [g for g in gate.missing if mine(g)],
    )


def count(gate: Gate, machine: str) -> tuple[int, int, int]:
    """A machine's (failing or significant steps, broken, missing) series: the index's table's counts."""
    return tuple(len(x) for x in _of(gate, machine))  # type: ignore[return-value]


def slower_header(gate: Gate) -> str:
    """The index table's column of the steps `count` counts first."""
    return f"FAIL (over {percent(gate.limit)})" if gate.limit is not None else "significant slowdowns"


def sentences(gate: Gate, machine: str | None = None) -> list[str]:
    """What the gate fails on, the store's (machine None: the index) or one machine's: at its threshold, in
    `check`'s words, or without one, at any threshold (BROKEN, MISSING) and at thresholds below a slowdown's
    size. Counts by kind, never one total: a series both BROKEN and with a failing step is two of them."""
    slower, broken, missing = _of(gate, machine)
    here = "" if machine is None else " on this machine"
    kinds = [kind_text(kind, len(of)) for kind, of in (("broken", broken), ("missing", missing)) if of]
    if machine is None and not gate.series:
        kinds.append(kind_text("empty", 0))
    if gate.limit is not None:
        command = f"`attnbench history check --fail-on-step {percent(gate.limit)}`"
        if slower:
            kinds.insert(0, kind_text("fails", len(slower), gate.limit))
        if kinds:
            return [f"{command} fails{here}: {_and(kinds)}."]
        return [
            f"{command} passes{here}: no series' latest step is slower by more than "
            f"{percent(gate.limit)} beyond its noise, none is broken in its latest run, none is missing from "
            "the latest run of its sweep."
        ]
    out = [
        f"`attnbench history check --fail-on-step` fails{here} at any threshold: {_and(kinds)}."
        if kinds
        else f"No series{here} is broken in its latest run or missing from the latest run of its sweep."
    ]
    if not slower:
        out.append(
            f"No series' latest step{here} is a slowdown the judge finds significant after Holm's adjustment."
        )
        return out
    named = [f"{s.cell_id}{'' if machine else f' on {s.machine}'} ({s.gated_change:+.1%})" for s in slower]
    more = len(named) - SHOWN
    listed = ", ".join(named[:SHOWN]) + (f" and {more} more" if more > 0 else "")
    said = "is a slowdown" if len(slower) == 1 else "are slowdowns"
    out.append(
        f"{len(slower)} series' latest step{here} {said} the judge finds significant after Holm's "
        f"adjustment, which `--fail-on-step N%` fails where N is below {_its(len(slower))} size: {listed}."
    )
    return out


def _and(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def step_mark(gate: Gate, step: Any) -> str:
    """The gate's word on a step in the steps table: at a threshold, `check`'s mark (FAIL, PENDING,
    UNJUDGED, else 'passes') and what the judge read (steps_text.verdict_text); without one, 'slower' and the
    judge's numbers for a significant slowdown; '' for a step the gate does not judge."""
    if gate.limit is None:
        return f"slower: {gate_text(step)}" if step.fails(0.0) else ""
    verdict = gate.verdict(step)
    if verdict is None:
        return f"passes: not over {percent(gate.limit)} slower" if step.latest else ""
    return f"{MARKS.get(verdict, 'passes')}: {verdict_text(step, gate.limit)}"


def step_badge(gate: Gate, step: Any) -> str:
    """What a step's series starts with in the steps table, as `check`'s line starts with it: FAIL, PENDING
    or UNJUDGED at a threshold, 'slower' for a significant slowdown without one; '' otherwise."""
    word = step_mark(gate, step).split(":", 1)[0]
    return word if word in (*MARKS.values(), "slower") else ""


def steps_caption(gate: Gate) -> str:
    """What the steps table's gate column says."""
    if gate.limit is not None:
        return (
            f"the gate: what `attnbench history check --fail-on-step {percent(gate.limit)}` says of the "
            "latest step of each series, its mark (FAIL: it fails on it) before the series as `check` "
            "prints it"
        )
    return (
        "the gate: 'slower', before the series too, marks a latest step the judge finds a significant "
        "slowdown after Holm's adjustment, which `history check --fail-on-step N%` fails where N is below "
        "its size (publish with --fail-on-step to mark what a gate at that threshold fails)"
    )


def blocks(gate: Gate, machine: str, reports: dict[str, str]) -> list[Any]:
    """A machine page's headings and tables of its BROKEN and MISSING series (none where it has none)."""
    out: list[Any] = []
    _, broken, gone = _of(gate, machine)
    if broken:
        out += [Heading("Broken in their latest run"), broken_table(broken, reports)]
    if gone:
        out += [Heading("Missing from the latest run of their sweep"), missing_table(gone, reports)]
    return out


def run_cell(text: str, run_path: Any, reports: dict[str, str]) -> tuple[Any, ...]:
    """A run in a table: linked to its report's copy in the site, else its name and that it has none."""
    href = reports.get(str(run_path)) if run_path else None
    return (Link(text, href, relative=True),) if href else (f"{text} (no report)",)


def broken_table(broken: Sequence[Any], reports: dict[str, str]) -> Table:
    """The series broken in their latest run after an ok one (results.breaks: `history check` fails on them),
    each with that run and its last ok run linked."""
    rows = [
        (
            b.cell_id,
            b.status,
            run_cell(str(b.latest.get("run_id")), b.latest.get("path"), reports),
            run_cell(str(b.last_ok.get("run_id")), b.last_ok.get("path"), reports),
            str(b.runs_broken),
        )
        for b in broken
    ]
    headers = ("cell", "status", "its latest run", "its last ok run", "runs since")
    return Table(headers, tuple(rows), "ok in an earlier run, broken in the latest: `history check` fails")


def missing_table(gone: Sequence[Any], reports: dict[str, str]) -> Table:
    """The series ok in the run before the latest of their sweep that the latest has no row of
    (results.breaks.missing: `history check` fails on them), each with both runs linked."""
    rows = [
        (
            g.cell_id,
            run_cell(str(g.latest.get("run_id")), g.latest.get("path"), reports),
            run_cell(str(g.before.get("run_id")), g.before.get("path"), reports),
        )
        for g in gone
    ]
    headers = ("cell", "the latest run of its sweep (no row)", "the run of its sweep before (ok)")
    caption = "ok in the run of their sweep before its latest, no row in the latest: `history check` fails"
    return Table(headers, tuple(rows), caption)
