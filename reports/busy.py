"""Whether the machine was busy while a run's cells were measured: per row (unsettled: an ok cell that
drifted, or was noisy while the speed probes did not hold steady), per run (machine_busy: the one rule,
results.drift.is_busy), and the sentences a report opens with (busy_sentences) and a ranking sentence's
prefix (SHAKY) where it reads off such cells. The report's findings, bench's answer and the history site
all say it from here."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from attnbench.results import neighbours
from attnbench.results.axes import CELL_AXES, FOLLOWS
from attnbench.results.drift import BEYOND, drifted, is_busy, moved_part, steady
from attnbench.results.drift import fewer_threads as drift_fewer_threads
from attnbench.results.formulas import counted, is_decode

from .tables import axis_text, flag_mask, length_name, ok_rows, varying
from .words import n_text

SHAKY = "Read off drifted or noisy cells: "  # a ranking sentence of a busy machine whose cells were unsettled


def unsettled(df):
    """Per row, whether its time is the machine's as much as its variant's: an ok cell that drifted, or that
    was noisy while the run's speed probes did not hold steady (results.drift.busy_cells' rule). What
    makes a busy machine (machine_busy), and what marks a ratio read off such a cell (bench's race)."""
    ok = (df["status"] == "ok").fillna(False)
    noisy = flag_mask(df, "noisy") & (not steady(df[ok].to_dict("records")))
    return ok & (flag_mask(df, "drift") | noisy)


def machine_busy(df, run: str | None = None) -> str | None:
    """'The machine was busy while this ran: 38 of 48 ok cells drifted or were noisy, so ...' where the ok
    cells that drifted, or were noisy while the speed probes did not hold steady (unsettled), make a busy
    machine (results.drift.is_busy, the one rule); None otherwise. `run` names the run ('while run X ran')
    where a report has several. The report's trust sentence and bench's answer say it so."""
    ok = ok_rows(df)
    busy = int(unsettled(df).sum())
    if not is_busy(busy, len(ok)):
        return None
    return (
        f"The machine was busy while {'this' if run is None else f'run {run}'} ran: {busy} of {len(ok)} ok "
        "cells drifted or were noisy, so their times say as much about the machine as about the variants."
    )


def probe_drifted(df) -> bool:
    """Whether a row of df drifted by its speed probe (results.drift.drifted), the cells `--redo-drift`
    measures again; not one flagged drift only because its measurements moved apart."""
    if "speed_factor" not in df.columns:
        return False
    return any(drifted(float(f)) for f in df["speed_factor"].dropna())


def runs_of(df) -> list[tuple[str | None, Any]]:
    """(run id, its rows) per run of `df`, in its order; (None, df) where its rows name no run."""
    if "run_id" not in df.columns or df["run_id"].isna().all():
        return [(None, df)]
    return [(str(rid), df[df["run_id"] == rid]) for rid in dict.fromkeys(df["run_id"].dropna())]


def fewer_threads(rows) -> str:
    """results.drift.fewer_threads' clause for the most torch threads a run's rows (their `threads`) say
    its worker used: ' or with `--threads 1`, ...', '' for one thread or none said."""
    threads = rows["threads"].dropna() if "threads" in rows.columns else ()
    return drift_fewer_threads(int(max(threads)) if len(threads) else None)


def busy_sentences(df, run_dirs: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Per run where the machine was busy (machine_busy over that run's own rows: two runs may be two
    machines, and one's drift says nothing of the other), its sentence with the command that measures its
    drifted cells again (`run_dirs`: run id -> the folder as given); the findings open with them, since
    every winner after them may be the machine's. Before a run's, where another attnbench run measured on
    the machine beside it, the sentence that names that run (results.neighbours.sentence)."""
    dirs = dict(run_dirs or {})
    runs = runs_of(df)
    named = len(runs) > 1 or len(dirs) > 1  # 'while run X ran' where the report has several
    out, said = [], 0
    for rid, rows in runs:
        folder = dirs.get(rid) if rid is not None else None
        beside = neighbours.sentence(folder, rid if named else None) if folder is not None else None
        out += [beside] if beside else []
        busy_text = machine_busy(rows, rid if named else None)
        if busy_text is None:
            continue
        quiet = "a quiet machine" + fewer_threads(rows)
        if probe_drifted(ok_rows(rows)):  # a cell whose measurements moved apart it would only move again
            target = shlex.quote(folder) if folder is not None else "RUN"
            busy_text += (
                " Measure the drifted cells again with "
                f"`attnbench run --resume --redo-drift --out {target}`, or rerun the sweep on {quiet}."
            )
        else:
            busy_text += f" Rerun the sweep on {quiet}."
        out.append(busy_text)
        said = len(out)
    if said:
        out[said - 1] += f" A winner or a growth below read off such cells opens with '{SHAKY.strip()}'."
    return tuple(out)


MOVED_SHOWN = 5  # the cells whose answer moved a report names one by one; past them, a count


def remeasured_sentences(df) -> tuple[str, ...]:
    """Per run with a cell measured more than once (results.load's `measured_times`: `--resume --redo-drift`
    appends a row, and the last row of a cell is the one read), one sentence: how many, and those whose
    answer moved beyond their own spread other than as the speed probe saw the machine move (results.drift:
    flagged drift, so that a finding read off one is marked as one read off a drifted cell), each by its
    variant, its shape and its medians in the order measured."""
    if "measured_times" not in df.columns:
        return ()
    runs = runs_of(df)
    out = []
    for rid, rows in runs:
        again = rows[(rows["measured_times"].fillna(1) > 1).to_numpy(dtype=bool)]
        if again.empty:
            continue
        where = f" in run {rid}" if len(runs) > 1 else ""
        were = "was" if len(again) == 1 else "were"
        text = (
            f"{counted(len(again), 'cell')} {were} measured more than once{where} (`--resume --redo-drift` "
            "measures a drifted cell again), and the last measurement of each is the one shown"
        )
        moved = [(r, moved_part(r["drift_reason"])) for _, r in ok_rows(again).iterrows()]
        moved = [(r, part) for r, part in moved if part]
        if not moved:
            out.append(text + "; none moved beyond its own spread other than as the speed probe saw the "
                       "machine move.")  # fmt: skip
            continue
        shape = _shape_axes(rows)
        named = [f"{r['variant']}{_shape_text(r, shape)}, {part.removesuffix(BEYOND)}" for r, part in moved]
        more = len(named) - MOVED_SHOWN
        named = named[:MOVED_SHOWN] + ([f"{more} more (the drift table lists them)"] if more > 0 else [])
        out.append(
            f"{text}. The answer of {len(moved)} moved beyond its own spread, other than as the speed probe "
            f"saw the machine move, so {'it is' if len(moved) == 1 else 'they are'} flagged drifted: "
            f"{'; '.join(named)}."
        )
    return tuple(out)


def _shape_axes(rows) -> list[str]:
    """The identity axes but the variant that vary among a run's rows, those that follow another (N_k = N
    in every row) left out: what tells its cells apart."""
    axes = varying(rows, [a for a in CELL_AXES if a != "variant"])
    return [a for a in axes if not (a in FOLLOWS and bool((rows[a] == rows[FOLLOWS[a]]).fillna(True).all()))]


def _shape_text(row, axes: list[str]) -> str:
    """' at N = 256 (constant lengths)': a cell's values on `axes` (_shape_axes), the length its series grows
    first (tables.length_axis's): its N, or a decode cell's N_k, its N_q after it, ' at N_k = 4,096 (N_q=1)',
    even where one N_k was measured: never its N_q as its N."""
    decode = is_decode(row["seq_len"], row.get("seq_k"))
    grows = "seq_k" if decode else "seq_len"
    said = grows in axes or (decode and "seq_len" in axes)
    length = f" at {length_name(grows)} = {n_text(row[grows])}" if said else ""
    # a plain cell's N_k is its N; a decode cell's N_q stays among the others
    others = [axis_text(a, row[a]) for a in axes if not (said and a in (grows, "seq_k"))]
    return length + (f" ({' · '.join(others)})" if others else "")
