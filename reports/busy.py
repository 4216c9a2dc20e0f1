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
from attnbench.results.drift import is_busy, steady

from .tables import flag_mask, ok_rows

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


def runs_of(df) -> list[tuple[str | None, Any]]:
    """(run id, its rows) per run of `df`, in its order; (None, df) where its rows name no run."""
    if "run_id" not in df.columns or df["run_id"].isna().all():
        return [(None, df)]
    return [(str(rid), df[df["run_id"] == rid]) for rid in dict.fromkeys(df["run_id"].dropna())]


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
        if flag_mask(ok_rows(rows), "drift").any():
            target = shlex.quote(folder) if folder is not None else "RUN"
            busy_text += (
                " Measure the drifted cells again with "
                f"`attnbench run --resume --redo-drift --out {target}`, or rerun the sweep on a quiet "
                "machine."
            )
        else:
            busy_text += " Rerun the sweep on a quiet machine."
        out.append(busy_text)
        said = len(out)
    if said:
        out[said - 1] += f" A winner or a growth below read off such cells opens with '{SHAKY.strip()}'."
    return tuple(out)
