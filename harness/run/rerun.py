"""Measure cells of an earlier run again: the same sweep settings, environment and variant files, read
from its meta.json, for all of its cells or a chosen few (by cell_id or by status).

The new measurements go to a new run directory, never into the old one, so that `attnbench compare OLD
NEW` can confirm or refute the old figures cell by cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.results import STATUSES, read_meta
from attnbench.results.formulas import command
from attnbench.results.store import SHIPPED, latest_rows
from attnbench.variants import shipped


@dataclass(frozen=True)
class Rerun:
    """What to measure again, and where it came from."""

    sweep: SweepSpec  # the old run's sweep, settings and env included
    variants: tuple[str, ...]  # the variants of the chosen cells, in the old run's order
    variant_files: tuple[str, ...]
    cells: tuple[CellSpec, ...]  # in the old sweep's order
    origin: dict[str, Any]  # {"run_dir", "run_id"}: recorded in the new run's meta.json as rerun_of


def cells_of(run_dir: str | Path) -> tuple[dict[str, Any], SweepSpec, dict[str, CellSpec]]:
    """(meta, sweep, cell_id -> CellSpec) of a run: every cell its sweep plans (rows are made from them)."""
    meta = read_meta(run_dir)
    if "sweep" not in meta:
        raise ValueError(f"{str(run_dir)!r} records no sweep (an imported run?); it cannot be measured again")
    sweep = SweepSpec.from_meta(meta["sweep"], Path(run_dir) / "meta.json")
    names = list(meta.get("variants") or sweep.variants)
    cells = {c.cell_id: c for c in sweep.cells(names)}
    return meta, sweep, cells


def plan(
    run_dir: str | Path,
    *,
    cell_ids: Sequence[str] | None = None,
    status: str | None = None,
) -> Rerun:
    """The cells of `run_dir` to measure again: all, those named, or those whose row has `status`.

    ValueError (RunDirError is one) naming what is wrong: no such run, an id not in it, an unknown
    status, a status no cell has; the options named as the CLI's flags.
    """
    if cell_ids is not None and status is not None:
        raise ValueError("choose cells by --cells or by --status, not both")
    meta, sweep, cells = cells_of(run_dir)
    if cell_ids is not None:
        ids = list(dict.fromkeys(cell_ids))
        if not ids:
            raise ValueError("--cells needs at least one cell_id")
        unknown = [i for i in ids if i not in cells]
        if unknown:
            raise ValueError(f"no cell {', '.join(map(repr, unknown[:3]))} in {str(run_dir)!r}")
        chosen = set(ids)
    elif status is not None:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; known: {', '.join(STATUSES)}")
        chosen = {r["cell_id"] for r in latest_rows(run_dir) if r.get("status") == status}
        if not chosen:
            raise ValueError(f"no cell of {str(run_dir)!r} has status {status!r}")
    else:
        chosen = set(cells)
    picked = tuple(c for c in cells.values() if c.cell_id in chosen)
    used = {c.variant for c in picked}
    names = tuple(n for n in meta.get("variants") or sweep.variants if n in used)
    return Rerun(
        sweep=sweep,
        variants=names,
        variant_files=tuple(shipped.relocated(meta.get("variant_files", []), Path(run_dir) / SHIPPED)),
        cells=picked,
        origin={"run_dir": str(Path(run_dir).resolve()), "run_id": meta.get("run_id")},
    )


def find_cell(run_dir: str | Path, cell_id: str) -> tuple[dict[str, Any], CellSpec]:
    """(meta, cell) for one cell_id of a run; ValueError naming the id when the run has no such cell."""
    meta, _sweep, cells = cells_of(run_dir)
    if cell_id not in cells:
        export = command("attnbench", "export", run_dir)
        raise ValueError(f"no cell {cell_id!r} in {str(run_dir)!r} (see `{export}`)")
    return meta, cells[cell_id]


def repro_argv(run_dir: str, cell_id: str, out: str | None = None, *, note=None) -> list[str]:
    """`attnbench repro`'s command line for one cell of a run (`attnbench history check` and
    `attnbench.steps` give it for each step); `note(text)` hears what the line cannot carry. ValueError when
    the run has no such cell. The line says what the new run is, `--repro-of RUN_ID` (meta.json `repro_of`):
    its --out lands in runs/, which `history add runs/` reads, and it leaves such a run out of the series."""
    from attnbench.harness.sweep.sweeps import cell_given, flag_name

    note = note or (lambda text: None)
    meta, cell = find_cell(run_dir, cell_id)
    settings = SweepSpec.from_meta(meta["sweep"]).settings
    slug = cell.cell_id.replace("|", "-")
    run_id = str(meta.get("run_id") or Path(run_dir).name)
    out = out or f"runs/repro-{run_id}-{slug}"
    marked = ["--repro-of", run_id, "--out", out]
    texts, left = cell_given(cell, settings)
    if left:
        # a setting no flag can say: only the old run's meta.json says it, so measure again from there
        note(
            f"attnbench: note: {', '.join(left)} differ from the defaults and have no flag; "
            "the command re-measures through --rerun, which needs the run directory"
        )
        return ["attnbench", "run", "--rerun", str(run_dir), "--cells", cell.cell_id, *marked]
    argv = ["attnbench", "run"]
    for key, text in texts.items():
        for value in text if isinstance(text, list) else [text]:
            argv += [flag_name(key), value]
    source = str((meta.get("variant_capabilities") or {}).get(cell.variant, {}).get("source", ""))
    installed = source == "builtin" or source.startswith("entry point ")  # no variant file registers it
    for path in [] if installed else meta.get("variant_files", []):
        if not Path(path).is_file():
            note(f"attnbench: warning: variant file {path} is not there any more")
        argv += ["--variant-file", path]
    return [*argv, *marked]


def repro_text(run_dir: str | None, cell_id: str) -> str:
    """repro_argv as one shell line, or in parentheses why there is none (the run directory is gone, or its
    sweep cannot be read by this attnbench)."""
    import shlex

    if not run_dir or not Path(run_dir).is_dir():
        return f"(the run directory {run_dir} is gone)"
    try:
        return shlex.join(repro_argv(run_dir, cell_id))
    except ValueError as exc:
        return f"(none: {exc})"
