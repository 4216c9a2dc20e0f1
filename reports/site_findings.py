"""A machine page's latest findings in the published site (reports.dashboard): per shape, the fastest variant
over each range of N (a decode shape's N_k: one N_q, as the run's report ranks it) at the latest run that
finished measuring it, and the rules the site's pages share with them (a cell's shape and the length its
series grows, a variant's name, a tie). A run stopped before every cell it planned (unfinished, by
results.store.unfinished: its meta.json's planned_cells against the cells the store holds of it) is said so
wherever the site names it, and gives a shape's findings only where no finished run measured that shape: its
missing cells would crown the variants it happened to measure. A suspect cell (results.suspect: too fast to
believe, a flag the store keeps) is never ranked, as in the run's report, and the page says so in the
report's words (reports.words.suspect_text)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

from attnbench.results.judge import TOLERANCE, separated
from attnbench.results.load import picks_among
from attnbench.results.store import unfinished

from . import tables
from .growth import exponent_said
from .page import Para, Table
from .run_rows import RunRows
from .site_gate import run_cell
from .style import variant_order
from .tables import approximate_text, flag_mask, present
from .words import suspect_text

_LENGTH_PART = re.compile(r"n\d+")  # the seq_len part of a cell_id ('n1024')
_KEYS_PART = re.compile(r"nk\d+")  # the seq_k part ('nk4096'), there only where N_k != N_q


def grows(cell_id: str) -> str:
    """The length a cell's series grows (reports.tables.length_axis's word): 'seq_k' for a decode cell, whose
    series holds its N_q and grows N_k as the run's report ranks and fits it, else 'seq_len'. A cell_id
    names seq_k only where it differs from seq_len (results.axes: an axis that follows another says nothing
    where equal to it), which is results.formulas.is_decode's rule."""
    return "seq_k" if any(_KEYS_PART.fullmatch(p) for p in str(cell_id).split("|")) else "seq_len"


def shape_of(cell_id: str, keep: int = 1) -> str:
    """A cell_id without its variant (and without device and dtype for keep=3) and without the length its
    series grows (grows): its N, or a decode cell's N_k, its N_q kept ('...|n1|...', one series per N_q)."""
    parts = str(cell_id).split("|")[keep:]
    length = _KEYS_PART if grows(cell_id) == "seq_k" else _LENGTH_PART
    return "|".join(p for p in parts if not length.fullmatch(p))


def with_series(cells, keep: int = 1):
    """The store's cells `cells` with their series: `shape` (shape_of), `length` (the axis it grows, grows)
    and `seq` (the cell's value of it: a decode cell's N_k, else its N), which the site's pages rank and
    fit over, as the run's report does."""
    length = [grows(c) for c in cells["cell_id"]]
    keys = [a == "seq_k" for a in length]
    seq = cells["seq_len"].mask(keys, cells["seq_k"]) if any(keys) else cells["seq_len"]
    return cells.assign(
        shape=[shape_of(c, keep) for c in cells["cell_id"]], length=length, seq=seq.astype(int)
    )


def length_names(cells) -> str:
    """What a table of the series of `cells` (with_series) calls its N column: 'N_k' where every series is a
    decode series, else 'N' (reports.tables.common_length_name, as the report's tables name it)."""
    return tables.common_length_name(set(cells["length"]))


def range_text(lo: int, hi: int, length: str, column: str) -> str:
    """A range of one series' lengths as a table's N column gives it, '512' or '512..2048', its name before
    it where the column's (`column`: length_names) is not its own: 'N_k 1024..4096' in a table of plain
    and decode series."""
    said = f"{lo}" if lo == hi else f"{lo}..{hi}"
    name = tables.length_name(length)
    return said if name == column else f"{name} {said}"


def named(cell) -> str:
    """A cell's variant as a page names it: one declared approximate (its bound, Capability.approximate)
    says so, as its time is for another answer than the exact kernels' beside it."""
    return approximate_text(cell["variant"], cell.get("approximate"))


def tied(first, other, loaded: RunRows, tolerance: float = TOLERANCE) -> bool:
    """Whether the report's ranking could not tell `other` from the faster `first` (results.judge.separated,
    as reports.tables.best_variant asks it: under `tolerance` slower by median, judge.TOLERANCE or the
    combination's reports.tables.tolerance_of, or not judged slower by its test on the two cells' samples,
    read from their runs' folders); where a run's folder cannot be read, the store's medians decide alone:
    under `tolerance` is a tie."""
    a, b = loaded.row(first["path"], first["cell_id"]), loaded.row(other["path"], other["cell_id"])
    if a is not None and b is not None:
        return not separated(a, b, tolerance=tolerance)
    return not float(other["time_ms_median"]) >= (1 + tolerance) * float(first["time_ms_median"])


def with_kernels(cells, loaded: RunRows):
    """The store's cells `cells` with the two columns the report's contestants rule reads and the store does
    not keep: `kernel` (which kernel the cell ran, where its variant's hook says) and `picks_among` (the
    variants whose kernels its own dispatch picks among: results.load's), from each run's own rows; where a
    run's folder cannot be read, no kernel (not recorded) and picks_among by its meta.json or, without one,
    by the variant's name (results.load.picks_among: the built-in sdpa's)."""
    kernels, picks = [], []
    for _, r in cells.iterrows():
        own = loaded.row(r["path"], r["cell_id"])
        if own is not None:
            kernels.append(own.get("kernel"))
            picks.append(own.get("picks_among"))
        else:
            kernels.append(None)
            picks.append(" ".join(picks_among(loaded.meta(r["path"]), str(r["variant"]))) or None)
    return cells.assign(kernel=kernels, picks_among=picks)


def unfinished_runs(df, loaded: RunRows) -> dict[str, tuple[int, int]]:
    """The runs of a history frame (results.history.frame, every machine's) that stopped before every cell
    they planned, by path: (cells the store holds of it, cells its meta.json plans), by
    results.store.unfinished, as `history add` and the run's report decide it. A run whose folder cannot be
    read, or whose meta.json records no plan, is not known to be unfinished."""
    out = {}
    for path, cells in df.groupby("path", sort=True)["cell_id"]:
        left = unfinished(loaded.meta(path), cells)
        if left is not None:
            out[str(path)] = left
    return out


def unfinished_text(left: tuple[int, int]) -> str:
    """'unfinished: 3 of 6 planned cells measured'."""
    return f"unfinished: {left[0]} of {left[1]} planned cells measured"


def front_rows(ordered, loaded: RunRows, tolerance: float = TOLERANCE) -> list[Any]:
    """The front of one run's cells at one N (`ordered`: fastest first), as the report's ranking has it
    (reports.tables.front: group 0 of results.ranks.rank_groups, each pair judged by `tied` at `tolerance`):
    the fastest cell and those after it tied with it, up to the first that is not. The cells after it are
    never read."""
    return tables.front(
        (r for _, r in ordered.iterrows()), lambda first, other: tied(first, other, loaded, tolerance)
    )


def contestants(at, loaded: RunRows) -> tuple[Any, dict[str, str], dict[str, tuple[str, ...]]]:
    """One run's ok cells at one N as the report's ranking takes them: the suspect ones left out
    (ranked_and_suspect), then reports.tables.contestants on their kernels (with_kernels): one row per
    kernel where two names recorded one ('sdpa (= sdpa_cudnn: CUDNN_ATTENTION)'), and no variant that picks
    its kernel among others' (sdpa) where it may have run one of theirs beside it unrecorded. The rows, the
    suspect variants with their reasons, and the variants so left out with those they may have run
    (reports.tables.unrecorded_picks)."""
    ranked, suspects = ranked_and_suspect(at)
    ranked = with_kernels(ranked, loaded)
    return tables.contestants(ranked), suspects, tables.unrecorded_picks(ranked)


def unrecorded_text(unsure: dict[str, set[str]]) -> list[Para]:
    """Below a table that left out a variant picking its kernel among others' (contestants), the report's
    reason in a sentence per such variant; [] where none was."""
    out = []
    for picker in variant_order(unsure):
        others = variant_order(unsure[picker])
        either = f"{', '.join(others[:-1])} or {others[-1]}" if len(others) > 1 else others[0]
        out.append(
            Para(
                f"{picker} is not ranked where its run did not record which kernel it chose (its own "
                f"dispatch picks it) and {either} ran beside it: their gap may be one kernel measured twice, "
                "as the run's report says (its times are in the tables below)."
            )
        )
    return out


def ranked_and_suspect(at) -> tuple[Any, dict[str, str]]:
    """One run's ok cells at one N: those a ranking may use (not suspect: reports.tables.ranked_rows' rule),
    and the variants left out as suspect there (each with its reason), as the report's best_variant leaves
    them out: a variant with no cell there but suspect ones. A flag the store does not know (NA: a store
    made before it kept them) is not set, as in a report of a run without it."""
    sus = flag_mask(at, "suspect")
    kept = set(at[~sus]["variant"].astype(str))
    left = {
        str(r["variant"]): (named(r), str(r["suspect_reason"]) if present(r.get("suspect_reason")) else "")
        for _, r in at[sus].iterrows()
        if str(r["variant"]) not in kept
    }
    return at[~sus], dict(left[v] for v in variant_order(left))  # in the report's order


def ranked_text(front: Sequence[str], suspects: dict[str, str], alone: bool) -> str:
    """The fastest and those tied with it ('A ≈ B'), then the suspect variants the ranking left out
    (left_out_text); 'none ranked: ...' where every variant was suspect."""
    if not front:
        return f"none ranked: {suspect_text(suspects)}"
    return " ≈ ".join(front) + left_out_text(suspects, alone)


def left_out_text(suspects: dict[str, str], alone: bool) -> str:
    """What follows the fastest where suspect variants were left out, in the report's words: ' is the only
    variant ranked: B is suspect there, never ranked (B: ...)' where it alone was ranked, else '; B is
    suspect there, never ranked (...)'; '' where none was."""
    if not suspects:
        return ""
    return (
        f" is the only variant ranked: {suspect_text(suspects)}" if alone else f"; {suspect_text(suspects)}"
    )


UNKNOWN_FLAGS = (
    "Some cells' trust flags are unknown (a store made before it kept them): a suspect one among them may be "
    "ranked here; `attnbench history rebuild` reads them from the runs."
)


def unknown_flags(ok) -> list[Para]:
    """UNKNOWN_FLAGS, where an ok cell's suspect flag is not known."""
    return [Para(UNKNOWN_FLAGS)] if "suspect" in ok.columns and ok["suspect"].isna().any() else []


def _front(
    at, loaded: RunRows, tolerance: float, unsure: dict[str, set[str]]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], bool]:
    """The fastest variant of one run's ok cells at one N, and those the report's ranking cannot tell from it
    (front_rows at the combination's `tolerance`), in time order, as the report's ranking takes them
    (contestants: no suspect cell, one row per kernel, no variant that may have run one of theirs
    unrecorded, which it adds to `unsure`); the suspect variants with their reasons; whether one variant
    alone was ranked."""
    ranked, suspects, left = contestants(at, loaded)
    for picker, others in left.items():
        unsure.setdefault(picker, set()).update(others)
    ranked = ranked.sort_values(["time_ms_median", "variant"], kind="stable")
    front = tuple(named(r) for r in front_rows(ranked, loaded, tolerance)) if len(ranked) else ()
    return front, tuple(suspects.items()), ranked["variant"].nunique() == 1


def combination_tolerance(rows, loaded: RunRows) -> float:
    """The ranking's tolerance for one run's cells of one shape (a combination, every N): the report's
    (reports.tables.tolerance_of: judge.TOLERANCE, or more where two names of one recorded kernel measured
    further apart), read off its cells that are not suspect, with their kernels (with_kernels)."""
    rows = with_kernels(rows[~flag_mask(rows, "suspect")], loaded)
    if not rows["kernel"].map(present).any():  # no kernel recorded: no two names of one
        return TOLERANCE
    return tables.tolerance_of(rows if "seq_len" in rows.columns else rows.assign(seq_len=rows["seq"]))


def _ranges(winners: list[tuple[int, Any]]) -> list[tuple[int, int, Any]]:
    """Consecutive lengths with the same front (fastest variant, its ties, the suspect ones left out) as
    (first N, last N, front)."""
    out: list[tuple[int, int, Any]] = []
    for n, v in winners:
        if out and out[-1][2] == v:
            out[-1] = (out[-1][0], n, v)
        else:
            out.append((n, n, v))
    return out


def findings(
    ok, reports: dict[str, str], runs: RunRows | None = None, left: dict[str, tuple[int, int]] | None = None
) -> list[Any]:
    """Per shape, the fastest variant over each range of N at the latest run that measured the shape, with
    the run linked (reports: copy_reports's links) and the variant's fitted exponent (time ~ N^b) over that
    run's lengths, as its report ranks and fits them: a decode shape holds its N_q, and its N is N_k
    (with_series); a run whose cells here drifted or were noisy enough to make a busy machine (`runs`:
    reports.busy.machine_busy over its own rows) is marked, and its sentence follows the table. `left`: the
    unfinished runs (unfinished_runs, by path): a shape takes the latest run that finished, and each later
    unfinished run it passed over is named below the table; a shape only unfinished runs measured takes the
    latest of them, marked unfinished."""
    if not len(ok):
        return [Para("No ok cells.")]
    left = left or {}
    ok = with_series(ok)  # a decode cell's series: its N_q, over N_k
    column = length_names(ok)
    rows, busy, passed, unsure = [], {}, {}, {}
    loaded = runs or RunRows()
    for shape, group in ok.groupby("shape", sort=True):
        done = group[~group["path"].astype(str).isin(set(left))] if left else group
        latest = done if len(done) else group
        latest = latest[latest["created"] == latest["created"].max()]
        later = group[group["created"] > latest["created"].max()]
        passed.update({str(r["run_id"]): str(r["path"]) for _, r in later.drop_duplicates("path").iterrows()})
        tolerance = combination_tolerance(latest, loaded)
        length = str(group["length"].iloc[0])  # one per shape: a decode shape holds its N_q (shape_of)
        winners = [
            (int(n), _front(at, loaded, tolerance, unsure)) for n, at in latest.groupby("seq", sort=True)
        ]
        variant_of = {named(r): str(r["variant"]) for _, r in latest.iterrows()}
        run = latest.iloc[0]
        said = runs.busy(run["path"], ok[ok["path"] == run["path"]]["cell_id"]) if runs else None
        if said:
            busy[str(run["run_id"])] = said
        stopped = left.get(str(run["path"]))
        linked = run_cell(str(run["run_id"]), run["path"], reports)
        linked += (f" ({unfinished_text(stopped)})",) if stopped else ()
        linked += (" (machine busy)",) if said else ()
        for lo, hi, (front, suspects, alone) in _ranges(winners):
            said, span = ranked_text(front, dict(suspects), alone), range_text(lo, hi, length, column)
            if not front:  # every variant suspect there: nobody ranked, no time or exponent to give
                rows.append((shape, span, said, "-", "-", linked))
                continue
            # the fastest (the first of the variants one kernel ran under: tables.kernel_name); the others
            # tied with it at every N of the range
            v = variant_of.get(front[0]) or tables.kernel_members(front[0])[0]
            mine = latest[latest["variant"] == v].sort_values("seq")
            fit = loaded.time_fit(run["path"], mine["cell_id"], mine)  # over N_k for a decode series
            best = mine[mine["seq"] == hi].iloc[0]
            said_fit = exponent_said(fit, tables.length_name(length))
            rows.append((shape, span, said, f"{float(best['time_ms_median']):.4g} ms", said_fit, linked))
    return [
        _table(tuple(rows), column, set(ok["length"])),
        *unknown_flags(ok),
        *unrecorded_text(unsure),
        *(_passed_over(r, path, left[path]) for r, path in sorted(passed.items())),
        *(Para(f"Run {r} (machine busy): {said}") for r, said in busy.items()),
    ]


def _table(rows: tuple[tuple[Any, ...], ...], column: str, lengths: set[str]) -> Table:
    """The findings' table, its N named `column` (length_names); where decode series are among its rows
    (`lengths`: the series' length axes), its caption says what their shape holds and what their N counts."""
    decode = ""
    if "seq_k" in lengths:
        where = "" if column == tables.length_name("seq_k") else ", its range named N_k"
        decode = (
            "; a decode shape (N_q queries against a K/V cache of N_k keys) holds its N_q ('n1') and is "
            f"ranked and fitted over N_k, as the run's report does{where}"
        )
    headers = (
        "shape",
        column,
        "fastest",
        f"its time at the last {column}",
        f"its exponent b (time ~ {column}^b)",
    )
    return Table(
        (*headers, "run"),
        rows,
        f"the fastest variant over each range of {column}, 'A ≈ B' where the report's ranking cannot tell B "
        f"from A at every {column} of the range (under {TOLERANCE:.0%} slower, or not judged slower by its "
        "test); the time and the exponent are A's, the exponent given only where the run's report gives it "
        f"('growth not measured (two {column})' where its findings say so); a suspect cell (too fast to "
        f"believe) is never ranked, as in the run's report, and is named{decode}",
    )


def _passed_over(run_id: str, path: str, left: tuple[int, int]) -> Para:
    """The sentence on a later run the findings leave out, being unfinished."""
    resume = f"attnbench run --resume --out {shlex.quote(path)}"
    return Para(
        f"Run {run_id} is later but unfinished ({left[0]} of {left[1]} planned cells measured): the shapes "
        f"it measured take their findings from the latest finished run that measured them (`{resume}` "
        "finishes it; add it to the store again then)."
    )
