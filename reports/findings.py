"""Findings: the report's first section, in sentences: who is fastest where, how time and memory grow,
where memory runs out, and how much of the run to trust.

Everything here is read off what the tables below it already compute (tables.best_variant with its tie
rule, fit.scaling_table's exponents and memory wall, the rows' flags): the findings add no statistics of
their own, only words.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from attnbench.results.causes import gate_said
from attnbench.results.drift import own_spread, steady, unprobed
from attnbench.results.formulas import wrap_text
from attnbench.results.judge import TOLERANCE
from attnbench.results.visits import blind_lead_text

from . import page as pg
from .busy import (  # noqa: F401 (said here too)
    SHAKY,
    busy_sentences,
    machine_busy,
    remeasured_sentences,
    runs_of,
    unsettled,
)
from .growth import growth_sentences, wall_sentence
from .panels import accuracy, decode, energy, varlen
from .style import variant_order
from .tables import (
    COMBO_AXES,
    GROUP_AXES,
    LENGTHS,
    approximate_names,
    best_variant,
    contestants,
    flag_mask,
    grouped,
    groups,
    kernel_members,
    length_axis,
    length_name,
    ok_rows,
    one_kernel_gaps,
    panels,
    present,
    ranked_rows,
    tied_names,
    unrecorded_picks,
)
from .words import n_text, names_text, range_text, ratio_range, suspect_text

TERMINAL_WIDTH = 100  # the most columns `attnbench report` prints its findings in
NOTHING_OK = "No cell ran ok: nothing is ranked or fitted"
WRONG_HEAD = "Wrong answers (failed the float64 check, never ranked): "  # a panel's first sentence, where any


@dataclass(frozen=True)
class PanelFindings:
    """The sentences of one panel (a group's device, dtype and pass, and the panel axes inside it)."""

    title: str
    sentences: tuple[str, ...]
    ranked: bool = True  # False: a panel with no ok cell, its wrong answers its only sentence


@dataclass(frozen=True)
class Findings:
    """Per panel with ok cells its sentences, then the run-wide sentence (or two) on trust."""

    panels: tuple[PanelFindings, ...]
    trust: tuple[str, ...]
    unfinished: tuple[str, ...] = ()  # first of all: a run that stopped before every cell it planned
    # then, before any winner is named: the machine was busy (machine_busy), and what to do about it
    busy: tuple[str, ...] = ()
    # before all of them: a run's files changed by something other than attnbench (results.integrity)
    changed: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()  # then a variant wrong at the N a run's gate adds (results.tile_sentences)
    # after the busy machine: the cells measured more than once, and those whose answer moved (drifted)
    remeasured: tuple[str, ...] = ()
    # then, last before the panels: a variant left out of rankings where its run did not record which of the
    # kernels beside it it ran (unrecorded_sentences)
    kernels: tuple[str, ...] = ()

    def __str__(self) -> str:  # print(report.findings): the sentences as the terminal shows them
        return text(self)


# ---- (0) who answers wrong ---------------------------------------------------------------------------


def wrong_sentence(panel_rows, marks: Mapping[str, str] | None = None) -> str | None:
    """'Wrong answers (failed the float64 check, never ranked): bug_a at every N_k measured (non-finite output
    (NaN or inf); worst: sequence 8 of 8 ...); bug_b at N_k = 256 (rel_err ...)': per variant with wrong
    cells in the panel, the N they are at and its worst cell's message in the gate's own words
    (results.causes.gate_said: its named mistake, its located worst sequence), in the words a variant wrong at
    the N its run's gate adds is said (`marks`, results.tile_sentences). None where no cell is wrong."""
    if "status" not in panel_rows.columns:
        return None
    wrong = panel_rows[panel_rows["status"] == "wrong"]
    if wrong.empty:
        return None
    length = length_axis(panel_rows)
    name, every_n = length_name(length), sorted({int(n) for n in panel_rows[length].dropna()})
    each = []
    for v in variant_order({str(v) for v in wrong["variant"]}):
        rows = wrong[wrong["variant"].astype(str) == v]
        ns = sorted({int(n) for n in rows[length].dropna()})
        err = rows["rel_err"].astype(float).fillna(math.inf) if "rel_err" in rows else None
        worst = rows.loc[err.idxmax()] if err is not None else rows.iloc[0]  # a NaN answer errs most
        if len(ns) > 1 and ns == every_n:
            where = f"at every {name} measured"
        else:
            where = f"at {name} = {names_text([n_text(n) for n in ns])}" if ns else ""
        why = gate_said(str(worst.get("message") or "")) if present(worst.get("message")) else ""
        each.append(f"{v}{(marks or {}).get(v, '')} {where}".strip() + (f" ({why})" if why else ""))
    return WRONG_HEAD + "; ".join(each) + "."


# ---- (1) who is fastest where ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Point:
    """One N of a panel's ranking: the fastest variant, the ones it cannot be told apart from, its lead."""

    n: int
    best: str
    tied: tuple[str, ...]
    runner_up: str
    lead: float
    ranked: frozenset[str] | None = None  # every variant with a ranked (ok) cell at this N; None: not known
    only_ranked: bool = False  # the best is ranked alone, every other variant here suspect (best_variant's)
    lead_spread: float = math.nan  # the lead's relative spread (best_variant's): the digits it is said in

    @property
    def front(self) -> tuple[str, ...]:
        """The variants at the front at this N: the fastest and those tied with it, fastest first."""
        return (self.best, *self.tied)

    def ran(self, variant: str) -> bool:
        """Whether `variant` has a ranked cell at this N (where that is known)."""
        return self.ranked is None or variant in self.ranked


def _points(best, length: str, ranked: dict[int, frozenset[str]] | None = None) -> list[_Point]:
    """The ranking's points, each with the variants ranked at its N (`ranked`, where given)."""
    out = []
    for _, b in best.sort_values(length).iterrows():
        n, lead = int(b[length]), float(b["lead"]) if present(b["lead"]) else math.nan
        at = ranked.get(n) if ranked is not None else None
        tied, alone = tuple(tied_names(b["tied"])), bool(b.get("only_ranked", False))  # a label kept whole
        spread = float(b["lead_spread"]) if present(b.get("lead_spread")) else math.nan
        out.append(_Point(n, str(b["best"]), tied, str(b["runner_up"] or ""), lead, at, alone, spread))
    return out


def _ranked_at(panel_rows, length: str) -> dict[int, frozenset[str]] | None:
    """Per N, the variants with a ranked cell there (tables.ranked_rows, as best_variant ranks them); None
    for rows without the columns to say."""
    if not {"status", "variant", "time_ms_median", length} <= set(panel_rows.columns):
        return None
    ok = ranked_rows(panel_rows).dropna(subset=["time_ms_median", length])
    return {int(n): frozenset(str(v) for v in contestants(sub)["variant"]) for n, sub in ok.groupby(length)}


def _by_n(names: list[str], pts: list[_Point], name: str = "N") -> str:
    """'a and b at N = 128, c at N = 128 and 256': each variant with the N of pts where it is at the front,
    those of the same N together (`name`: the length's, tables.length_name)."""
    at: dict[tuple[int, ...], list[str]] = {}
    for v in names:
        at.setdefault(tuple(p.n for p in pts if v in p.front), []).append(v)
    return ", ".join(
        f"{names_text(vs)} at {name} = {names_text([n_text(n) for n in ns])}" for ns, vs in at.items()
    )


def _reach(points: list[_Point], i: int, variant: str) -> int:
    """The first index from i on where `variant` is no longer at the front."""
    while i < len(points) and variant in points[i].front:
        i += 1
    return i


def leader_runs(points: list[_Point]) -> list[tuple[str, list[_Point]]]:
    """Consecutive N with one leader: a variant stays the leader while it is the fastest or tied with the
    fastest, so a tie inside a stretch does not break it. A new stretch is led by the front variant that
    stays at the front longest (the fastest at that N when several reach as far)."""
    runs: list[tuple[str, list[_Point]]] = []
    i = 0
    while i < len(points):
        front = points[i].front
        leader = max(front, key=lambda v: _reach(points, i, v))  # max keeps the first (fastest) of equals
        end = _reach(points, i, leader)
        runs.append((leader, points[i:end]))
        i = end
    return runs


def _front_names(leader: str, pts: list[_Point]) -> list[str]:
    """Who holds a stretch: its leader, or the leader and those it ties with everywhere in it (a stretch
    where it never leads alone)."""
    if any(p.best == leader and not p.tied for p in pts):
        return [leader]
    return [leader, *variant_order({v for p in pts for v in p.front if v != leader})]


def run_sentence(leader: str, pts: list[_Point], every: bool, name: str = "N") -> str:
    """'sdpa is fastest from N = 256 to 2,048 (1.05–1.16× ahead of sdpa_flash), except at N = 1,024, where
    it ties with sdpa_flash.', or where it is tied at half its N or more: 'sdpa and sdpa_flash lead at every N
    measured, 256 to 2,560, tied at N = 512, ... (sdpa alone at N = 256: 1.09× ahead of sdpa_flash).'
    `name`: the length's (tables.length_name), 'N_k' for a decode panel."""
    ns = [p.n for p in pts]
    clear = [p for p in pts if p.best == leader and not p.tied]
    ties = [p for p in pts if p not in clear]
    partners = variant_order({v for p in ties for v in p.front if v != leader})
    # a partner at the front at only some of the tied N (one that errored or was not run at the others) is
    # named with its own N, never over the whole range
    throughout = [v for v in partners if all(v in p.front for p in ties)]
    some = [v for v in partners if v not in throughout]
    if not clear:
        if not throughout:  # 'leads' only where the table ranks it first at every N, else the tie
            leads = "leads" if all(p.best == leader for p in pts) else "ties for the lead"
            tied = ", tied with " if leads == "leads" else ": with "
            return f"{leader} {leads} {range_text(ns, every, name)}{tied}{_by_n(partners, pts, name)}."
        also, front = f" (with them: {_by_n(some, pts, name)})" if some else "", [leader, *throughout]
        return f"{names_text(front)} cannot be told apart {range_text(ns, every, name)}{also}."
    led = [p for p in clear if p.runner_up and math.isfinite(p.lead)]
    if led:
        behind = variant_order({p.runner_up for p in led})
        leads = ratio_range([p.lead for p in led], [p.lead_spread for p in led])  # in the digits they bear
        detail = f"{leads} ahead of {names_text(behind)}"
    else:
        detail = "the only variant with a ranked cell"
    at = ", ".join(n_text(p.n) for p in ties)
    if len(ties) >= len(clear) and throughout:  # tied at half its N or more: never 'fastest' over them
        alone = ", ".join(n_text(p.n) for p in clear)
        also = f"with them: {_by_n(some, ties, name)}; " if some else ""
        return (
            f"{names_text([leader, *throughout])} lead {range_text(ns, every, name)}, tied at {name} = {at} "
            f"({also}{leader} alone at {name} = {alone}: {detail})."
        )
    # fastest over a range with a tie inside it says where it is not fastest: 'fastest at every N' and
    # 'tied at N = 256' in one sentence contradict each other
    if not ties:
        return f"{leader} is fastest {range_text(ns, every, name)} ({detail})."
    where = f"at {name} = {at}, where it ties with {names_text(partners)}" if not some else ""
    where = where or f"where it ties with {_by_n(partners, ties, name)}"
    return f"{leader} is fastest {range_text(ns, every, name)} ({detail}), except {where}."


def _split_at(points: list[_Point], even: list[_Point]) -> list[list[_Point]]:
    """`points` (in N order) in runs of consecutive N that no N of `even` lies between."""
    out: list[list[_Point]] = []
    last = None
    for p in points:
        below = sum(e.n < p.n for e in even)  # the N of `even` below it: one more starts a new run
        if below != last:
            out.append([])
            last = below
        out[-1].append(p)
    return out


def _nobody_apart(p: _Point) -> bool:
    """Whether no variant ranked at p's N is told apart from its fastest: two or more ranked, every one of
    them at the front (tables.front's rule, which the tie is read off)."""
    return p.ranked is not None and len(p.ranked) >= 2 and len(p.front) >= len(p.ranked)


def _even_sentence(even: list[_Point], every: bool, name: str = "N") -> str | None:
    """'No variant can be told apart at N = 512 (chunked, sdpa, flex and tiled).', or where that holds at
    every N of the panel (`every`) 'No variant can be told apart at every N measured, 128 to 256 (y and x;
    with them: z at N = 128)': the N where every ranked variant is at the front (_nobody_apart), a variant
    there at only some of them named with its N. None without such an N."""
    if not even:
        return None
    ns = [p.n for p in even]
    names = list(dict.fromkeys(v for p in even for v in p.front))
    throughout = [v for v in names if all(v in p.front for p in even)]
    some = [v for v in names if v not in throughout]
    where = range_text(ns, True, name) if every else f"at {name} = {names_text([n_text(n) for n in ns])}"
    if not throughout:  # no variant at the front at each of those N: each with its own
        return f"No variant can be told apart {where} ({_by_n(some, even, name)})."
    also = f"; with them: {_by_n(some, even, name)}" if some else ""
    return f"No variant can be told apart {where} ({names_text(throughout)}{also})."


def _relabel(p: _Point, named: dict[str, str]) -> _Point:
    tied = tuple(named.get(v, v) for v in p.tied)
    ranked = frozenset(named.get(v, v) for v in p.ranked) if p.ranked is not None else None
    runner_up = named.get(p.runner_up, p.runner_up)
    return replace(p, best=named.get(p.best, p.best), tied=tied, runner_up=runner_up, ranked=ranked)


def _suspect_at(panel_rows, length: str) -> dict[int, dict[str, str]]:
    """Per N, the variants whose ok cells there are suspect (results.suspect), each with its reason."""
    if not {"status", "variant", "suspect", length} <= set(panel_rows.columns):
        return {}
    ok = ok_rows(panel_rows)
    out: dict[int, dict[str, str]] = {}
    for _, r in ok[flag_mask(ok, "suspect")].iterrows():
        if present(r[length]):
            why = r.get("suspect_reason")
            out.setdefault(int(r[length]), {})[str(r["variant"])] = str(why) if present(why) else ""
    return out


def _only_ranked_sentences(
    alone: list[_Point], suspects: dict[int, dict[str, str]], named: dict[str, str], name: str
) -> list[str]:
    """'At N = 256 and 512 naive is the only variant ranked: chunked and sdpa are suspect there, never
    ranked (chunked: 42.8x faster than naive ...; sdpa: ...).' per variant alone and the variants suspect
    beside it, each reason read at the first of its N: nobody is called fastest among one."""
    by: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for p in alone:
        by.setdefault((p.best, tuple(variant_order(suspects[p.n]))), []).append(p.n)
    return [
        f"At {name} = {names_text([n_text(n) for n in ns])} {named.get(best, best)} is the only variant "
        + "ranked: "
        + suspect_text({v: suspects[ns[0]][v] for v in others})
        + "."
        for (best, others), ns in by.items()
    ]


def shaky_cells(panel_rows, length: str) -> set[tuple[str, int]]:
    """(variant, N) of the panel's unsettled cells (drifted, or noisy while the probes did not hold)."""
    rows = panel_rows[unsettled(panel_rows).to_numpy(dtype=bool)]
    return {(str(r["variant"]), int(r[length])) for _, r in rows.iterrows() if present(r[length])}


def shaky_said(panel_rows, busy: bool) -> Callable[[str, list[tuple[str, int]]], str]:
    """How a panel's other sentence that compares cells opens (accuracy.sentence's), as a ranking sentence
    does: with SHAKY on a busy machine where one of its (variant, N) cells is unsettled (shaky_cells)."""
    shaky = shaky_cells(panel_rows, length_axis(panel_rows)) if busy else set()
    return lambda text, cells: SHAKY + text if any(cell in shaky for cell in cells) else text


def _read_off(pts: list[_Point], shaky: set[tuple[str, int]], named: dict[str, str]) -> bool:
    """Whether a sentence about pts compares an unsettled cell: its front's or its runner-up's at one of
    its N (a merged kernel's every name)."""
    back = {shown: v for v, shown in named.items()}
    for p in pts:
        for name in (*p.front, p.runner_up):
            if any((m, p.n) in shaky for m in kernel_members(back.get(name, name)) if name):
                return True
    return False


def ranking_sentences(panel_rows, busy: bool = False, marks: Mapping[str, str] | None = None) -> list[str]:
    """Who is fastest in which range of N (tables.best_variant and its tie rule), and where the lead
    changes hands. On a busy machine (`busy`: machine_busy said so), a sentence that compares a cell that
    drifted or was noisy (unsettled) opens with SHAKY: its winner may be the machine's. `marks`: what a
    sentence says right after a variant's name (' (wrong at N 300)': build)."""
    length = length_axis(panel_rows)
    name = length_name(length)  # a decode panel ranks its N_k
    best = best_variant(panel_rows)
    if best.empty:
        return []
    named = approximate_names(panel_rows)
    named.update({v: named.get(v, v) + m for v, m in (marks or {}).items()})
    points = _points(best, length, _ranked_at(panel_rows, length))
    # an N where the fastest is the only one ranked because the others there are suspect crowns nobody:
    # the sentence says they are suspect instead, and the N takes no part in a stretch or a crossover
    suspects = _suspect_at(panel_rows, length)  # their reasons; which N crown nobody is best_variant's rule
    alone = [p for p in points if p.only_ranked]
    # an N where no variant is told apart from the fastest crowns nobody either: 'chunked, sdpa, flex and
    # tiled lead' for cells 4x apart on a busy machine read as four winners; it is said as no verdict
    even = [p for p in points if p not in alone and _nobody_apart(p)]
    points = [p for p in points if p not in alone and p not in even]
    # a stretch never reaches across such an N: the points on either side of it are ranked apart
    runs = [(named.get(v, v), [_relabel(p, named) for p in pts])
            for part in _split_at(points, even) for v, pts in leader_runs(part)]  # fmt: skip
    every = len(runs) == 1 and not alone and not even
    shaky = shaky_cells(panel_rows, length) if busy else set()

    def said(text: str, pts: list[_Point]) -> str:
        return SHAKY + text if _read_off(pts, shaky, named) else text

    out = [said(run_sentence(leader, pts, every, name), pts) for leader, pts in runs]
    nobody = _even_sentence([_relabel(p, named) for p in even], not points and not alone, name)
    if nobody:  # in its place by N among the stretches
        at = sum(pts[0].n < even[0].n for _, pts in runs)
        out.insert(at, said(nobody, even).replace(SHAKY + "No variant", SHAKY + "no variant"))
    out += _only_ranked_sentences(alone, suspects, named, name)
    for (a, before), (b, after) in zip(runs, runs[1:], strict=False):
        if a == b:  # one leader on both sides of an N where nobody is told apart: no lead changed hands
            continue
        last, first = before[-1], after[0]
        # who is overtaken between the two N: at the front at the last N before and ranked at the first N
        # after (a variant that did not run there stopped, it was not overtaken), and who overtakes: at the
        # front at that first N and ranked at that last N before, the fastest there first (a leader that
        # only ties with it there does not take the lead alone)
        new = [v for v in dict.fromkeys([first.best, *_front_names(b, after)]) if v in first.front]
        new = [v for v in new if last.ran(v)]
        # a new leader that shared the front before takes it from the others only (the quick preset's
        # report once said "sdpa_flash takes the lead from sdpa, naive and sdpa_flash")
        old = [v for v in _front_names(a, before) if v in last.front and first.ran(v) and v not in new]
        # one kernel under two names (sdpa with sdpa_flash below, with sdpa_cudnn above) takes no lead from
        # itself
        mine = {m for v in new for m in kernel_members(v)}
        old = [v for v in old if not mine & set(kernel_members(v))]
        if not new or not old:
            continue
        takes = "takes" if len(new) == 1 else "take"
        text = (
            f"Crossover between {name} = {n_text(before[-1].n)} and {n_text(after[0].n)}: "
            f"{names_text(new)} {takes} the lead from {names_text(old)}."
        )
        out.append(said(text, [last, first]))
    return out


def _panel_fits(scaling, gkey: dict[str, Any], pkey: dict[str, Any]):
    """The scaling rows of one panel (str() compares NA and NaN as fit.combo_key does)."""
    sel = scaling
    for axis, value in {**{a: gkey[a] for a in GROUP_AXES}, **pkey}.items():
        if axis in sel.columns:
            sel = sel[sel[axis].astype(str) == str(value)]
    return sel


# ---- (2) one kernel under two names ---------------------------------------------------------------------


def one_kernel_sentence(panel_rows) -> str | None:
    """Where variants of the panel ran one kernel at some N (tables.one_kernel_gaps: one contestant in the
    ranking), how far apart its names measured: one kernel in two visits, so a lead under that gap is
    within what the run's own visits of one cell differ by, and the ranking does not tell it apart
    (tables.tolerance_of). None where no two variants ran one kernel."""
    gaps = one_kernel_gaps(ranked_rows(panel_rows).dropna(subset=["time_ms_median"]))
    if not gaps:
        return None
    n, names, kernel, gap = max(gaps, key=lambda g: g[3])
    sets = list(dict.fromkeys((names, kernel) for _, names, kernel, _ in gaps))
    name = length_name(length_axis(panel_rows))
    if len(sets) == 1:
        head = f"{names_text(list(names))} ran one kernel ({kernel})"
    else:
        each = [f"{names_text(list(vs))} ({k})" for vs, k in sets]
        head = f"{'; '.join(each)} each ran one kernel"
    where = f"{name} = {n_text(n)}"
    where = f"{names_text(list(names))} at {where}" if len(sets) > 1 else where
    if gap - 1 <= TOLERANCE:
        floor = f"under the {TOLERANCE:.0%} every lead clears"
        return f"{head} and measured at most {gap:.2f}× apart ({where}), {floor}."
    return (
        f"{head} and measured up to {gap:.2f}× apart ({where}): two visits of one kernel differ by that "
        f"much here, so a lead under {gap:.2f}× is a tie."
    )


def unrecorded_sentences(df) -> tuple[str, ...]:
    """Once per report, per variant that picks its kernel among others' (sdpa) and was left out of a
    ranking because its run did not record which of them it ran (tables.unrecorded_picks): what it may be,
    and that its gap to them is not ranked."""
    ok = ranked_rows(df).dropna(subset=["time_ms_median"])
    found: dict[str, dict[str, set[str]]] = {}  # picker -> run -> the variants it may have run beside it
    for key, cell in grouped(ok, [*COMBO_AXES, *LENGTHS]):
        for picker, others in unrecorded_picks(cell).items():
            found.setdefault(picker, {}).setdefault(str(key.get("run_id", "")), set()).update(others)
    out = []
    for picker in variant_order(found):
        runs = sorted(found[picker])
        others = variant_order({v for vs in found[picker].values() for v in vs})
        who = "This run" if ok["run_id"].nunique() == 1 else f"Run{'s' * (len(runs) > 1)} {names_text(runs)}"
        either = ", ".join(others[:-1]) + " or " + others[-1] if len(others) > 1 else others[0]
        may = ", ".join(f"{v}'s" for v in others[:-1]) + f" or {others[-1]}'s" if len(others) > 1 else ""
        out.append(
            f"{who} did not record which kernel {picker} chose (its own dispatch picks it), and it may be "
            f"{may or others[0] + chr(39) + 's'}: where {either if len(others) == 1 else 'one of them'} ran "
            f"too, their gap may be one kernel measured twice, so {picker} is not ranked there (its times "
            "are in the tables and figures)."
        )
    return tuple(out)


# ---- (4) trust -----------------------------------------------------------------------------------------


def trust_sentences(df, imported: Collection[str] = ()) -> tuple[str, ...]:
    """One sentence that counts every flagged row; a second, plain one where noisy cells were their own
    spread (the machine held its speed). A busy machine is said apart, before the winners (busy_sentences)."""
    ok = ok_rows(df)
    status = df["status"].value_counts()
    flags = {
        "suspect (left out of rankings)": int(flag_mask(ok, "suspect").sum()),
        "drifted": int(flag_mask(ok, "drift").sum()),
        "throttled": int(flag_mask(ok, "throttled").sum()),
        "noisy (IQR over 10% of the median)": int(flag_mask(ok, "noisy").sum()),
        "wrong (failed the float64 check)": int(status.get("wrong", 0)),
        "error": int(status.get("error", 0)),
        "crashed": int(status.get("crashed", 0)),
        "timeout": int(status.get("timeout", 0)),
    }
    others = [
        f"{int(c)} {s}" for s, c in status.items() if s not in ("ok", "wrong", "error", "crashed", "timeout")
    ]
    head = f"Trust: {len(ok)} of {len(df)} cells ran ok" + (f" ({', '.join(others)})" if others else "")
    found = [f"{c} {what}" for what, c in flags.items() if c]
    unprobed, probed = _unprobed_text(ok, len(runs_of(df)))
    if found:
        text = f"{head}; flagged: {', '.join(found)}"
    else:
        clocked = "throttled" in ok.columns and ok["throttled"].notna().any()  # GPU clocks: not on a CPU
        text = f"{head}; none is suspect, {'drifted, ' if probed else ''}{'throttled, ' if clocked else ''}"
        text += "noisy or wrong"
        text += ", and none errored, crashed or timed out"
    text += f"; {unprobed}." if unprobed else "."
    blind = tuple(filter(None, [blind_lead_text(ok, imported)]))  # imported: pytest-benchmark runs
    if any(machine_busy(rows) is not None for _rid, rows in runs_of(df)):
        return (text, *blind)
    noisy = flag_mask(ok, "noisy")
    own = own_spread(int(noisy.sum()), len(ok)) if steady(ok.to_dict("records")) else None
    return (text, *blind) if own is None else (text, own[0].upper() + own[1:] + ".", *blind)


def _unprobed_text(ok, runs: int) -> tuple[str | None, bool]:
    """The words for ok cells that no speed probe judged (results.load leaves their `drift` NA: runs made
    before the probe): drift was not measured on them, which is not "none drifted" (None where every ok
    cell was probed); and whether any ok cell was."""
    n, _ = unprobed(ok.reindex(columns=["status", "speed_factor"]).to_dict("records"))
    if not n:
        return None, True
    if n == len(ok):
        where = "this run" if runs == 1 else "these runs"
        return f"drift was not measured (no speed probes in {where})", False
    return f"drift was not measured on {n} of them (no speed probe)", True


# ---- all of it -----------------------------------------------------------------------------------------


def build(
    df,
    scaling,
    head: Callable[[dict[str, Any], Any], str],
    run_dirs: Mapping[str, str] | None = None,
    unfinished: tuple[str, ...] = (),
    changed: tuple[str, ...] = (),
    imported: Collection[str] = (),
    wrong: tuple[str, ...] = (),
    copy_of: Callable[[dict[str, Any], Any], float | None] | None = None,
    wrong_at: Mapping[tuple[str, str], int] | None = None,
    emulated: Collection[str] = (),
) -> Findings:
    """The findings of every panel with ok cells, titled by `head(group key, group rows)` (the title of the
    group's own section below), and the run-wide trust sentences (`run_dirs`: run id -> its folder as
    given, for the commands they name; `imported`: the ids from pytest-benchmark); `changed` (reports.trust's
    sentences on runs whose files something else changed) comes first, then `wrong` (a variant wrong at the
    N a run's gate adds), `unfinished` (runs stopped early), a busy machine's sentence (busy_sentences) and
    the cells measured more than once (remeasured_sentences).
    copy_of(group key, rows): a group's calibrated copy bandwidth, for a decode panel's K/V read.
    wrong_at: {(run id, variant): N} for a variant that answers wrong at the N its run's gate adds
    (results.tile_wrong): every sentence that ranks or fits it names it '(wrong at N 300)'. emulated: the
    variants that emulate a number format (accuracy.emulations), said once in each panel that ranks one."""
    out = []
    said_busy = busy_sentences(df, run_dirs)
    busy = bool(said_busy)
    for gkey, group in groups(df):
        ran = set(map(str, group["run_id"])) if "run_id" in group else set()
        marks = {v: f" (wrong at N {n_text(n)})" for (rid, v), n in (wrong_at or {}).items() if rid in ran}
        # packed variable-length cells: per pattern, across its panels; on a busy machine a sentence that
        # compares an unsettled cell (judged per panel, as ranking_sentences judges) opens with SHAKY
        shaky = {
            i for _k, _t, rows in panels(group) for i in rows.index[unsettled(rows).to_numpy(dtype=bool)]
        }

        def mark(text: str, labels: list[Any], shaky: set[Any] = shaky if busy else set()) -> str:
            return SHAKY + text[0].lower() + text[1:] if shaky.intersection(labels) else text

        packed = varlen.sentences(group, mark)
        if packed:  # the padding tax before each pattern's ranking and growth
            out.append(PanelFindings(f"{head(gkey, group)} · packed variable-length batches", tuple(packed)))
        for pkey, ptitle, rows in panels(group):
            title = head(gkey, group) + (f" · {ptitle}" if ptitle else "")
            wrongs = wrong_sentence(rows, marks)
            if ok_rows(rows).empty:  # nothing ranked or fitted: its wrong answers, where it has them, said
                out += [PanelFindings(title, (wrongs,), ranked=False)] if wrongs else []
                continue
            fits = _panel_fits(scaling, gkey, pkey) if not scaling.empty else scaling
            kv, read = decode.kv_sentence(rows, copy_of(gkey, rows) if copy_of else None)
            # a decode panel's K/V read, joules (--energy), and the fastest against the most accurate
            extra = [
                mark(kv, read) if kv else "",
                energy.sentence(rows),
                accuracy.sentence(rows, shaky_said(rows, busy), emulated),
            ]
            # its wrong answers first: a team gating a kernel on the report reads them before any ranking
            sentences = [wrongs or "", *ranking_sentences(rows, busy, marks), one_kernel_sentence(rows) or ""]
            sentences += extra
            if not fits.empty:  # growth last: the workload's own findings first
                shaky = shaky_cells(rows, length_axis(rows)) if busy else ()
                said = set(rows.loc[rows["status"] == "wrong", "variant"].astype(str))  # said first
                sentences += [
                    *growth_sentences(fits, length_axis(rows), marks, shaky, said),
                    wall_sentence(fits, rows, marks),
                ]
            sentences = [s for s in sentences if s]
            out.append(PanelFindings(title, tuple(sentences)))
        pages = [mark(text, read) for text, read in decode.page_sentences(group)]
        if pages:  # a paged cache's page sizes, each its own panel above: compared across them
            out.append(PanelFindings(f"{head(gkey, group)} · page sizes", tuple(pages)))
    trust = trust_sentences(df, imported)
    remeasured, kernels = remeasured_sentences(df), unrecorded_sentences(df)
    return Findings(tuple(out), trust, unfinished, said_busy, changed, wrong, remeasured, kernels)


def blocks(f: Findings) -> list[pg.Block]:
    """The page's first section: a heading, per panel its title and its sentences, then the trust."""
    first = (*f.changed, *f.wrong, *f.unfinished, *f.busy, *f.remeasured, *f.kernels)
    out: list[pg.Block] = [pg.Heading("Findings"), *(pg.Para(t) for t in first)]
    if not any(p.ranked for p in f.panels):
        out.append(pg.Para(f"{NOTHING_OK} (see 'Cells that are not ok' below)."))
    for p in f.panels:
        out += [pg.Heading(p.title, 3), pg.Bullets(p.sentences)]
    return [*out, *(pg.Para(t) for t in f.trust)]


def headline(f: Findings) -> str:
    """The first finding, for a one-line summary (a Report's repr): who is fastest where, first panel; after
    '(changed)' where something other than attnbench changed a run's files, '(wrong at another N)' where a
    variant failed the run's gate at N = TILE_N, '(wrong answers)' where a panel's cells failed it (its
    sentence is the panel's first, wrong_sentence), '(unfinished)' where a run stopped before every cell it
    planned, '(busy machine)' where it was busy."""
    lead = ("(changed) " if f.changed else "") + ("(wrong at another N) " if f.wrong else "")
    lead += ("(unfinished) " if f.unfinished else "") + ("(busy machine) " if f.busy else "")
    if any(s.startswith(WRONG_HEAD) for p in f.panels for s in p.sentences):
        lead += "(wrong answers) "
    first = next((p for p in f.panels if p.ranked), None)
    if first is None:
        return lead + NOTHING_OK + "."
    said = [s for s in first.sentences if not s.startswith(WRONG_HEAD)]
    return lead + (said[0] if said else first.title)


def text(f: Findings, width: int = TERMINAL_WIDTH) -> str:
    """The findings for a terminal, wrapped to `width` columns (at most TERMINAL_WIDTH). Words are never
    cut (a path or a command stays whole, and copyable), so only a word longer than the line exceeds it."""
    width = max(40, min(width, TERMINAL_WIDTH))

    def wrap(s: str, first: str = "", rest: str = "") -> list[str]:
        return wrap_text(s, width, rest, first)

    lines = ["Findings"]
    for t in (*f.changed, *f.wrong, *f.unfinished, *f.busy, *f.remeasured, *f.kernels):
        lines += wrap(t)
    if not any(p.ranked for p in f.panels):
        lines.append(f"  {NOTHING_OK}.")
    for p in f.panels:
        lines += wrap(p.title, "", "  ")
        for s in p.sentences:
            lines += wrap(s, "  - ", "    ")
    for t in f.trust:
        lines += wrap(t)
    return "\n".join(lines) + "\n"
