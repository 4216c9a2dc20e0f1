"""What a notebook shows of a run (attnbench.Run): the report's first blocks as HTML, its figures as images,
and the tidy table with numbers a person can read. A written report shows itself (render.Report).

Nothing here computes a number of its own: the findings, the fastest variant per N, the fits and the figures
are the report's (findings, render, fit, plots); this module only picks which of them a notebook cell shows.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attnbench.results.formulas import bytes_text, end_to_end_rel_err, printable, quantised

from . import page as pg
from .render import FIGURE_KINDS

PLOT_KINDS = ("time", "memory")  # what run.plot() draws unless asked: the two questions of the N² story


def counts_text(df, interrupted: bool = False, resumed: int = 0) -> str:
    """'6 cells: ok 5, unsupported 1' (most common first), then whether the run was cut short or resumed."""
    counts = ", ".join(f"{s} {c}" for s, c in df["status"].value_counts().items())
    text = f"{len(df)} cells: {counts}" if len(df) else "no cells measured yet"
    if resumed:
        text += f"; {resumed} of them were done before this session resumed the run"
    if interrupted:
        text += "; interrupted: finish it with attnbench.run(out=..., resume=True)"
    return text


def run_blocks(path: str | Path, interrupted: bool = False, resumed: int = 0) -> list[pg.Block]:
    """A run as a notebook shows it: where it is, its cells by status, the findings, and per group (device,
    dtype, pass) the fastest variant at each N, as the report's first sections say them."""
    from attnbench.results.pytest_benchmark import imported_runs

    from . import findings as findmod
    from . import fit as fitmod
    from .render import best_table, prepare
    from .section import group_head
    from .tables import groups

    inputs = prepare([path])
    df = inputs.df
    blocks: list[pg.Block] = [
        pg.Heading(f"attnbench run {path}"),
        pg.Para(counts_text(df, interrupted, resumed)),
    ]
    if df.empty:
        return blocks
    scaling = fitmod.scaling_table(df, inputs.metas)
    head = lambda gkey, group: group_head(gkey, group, False)  # noqa: E731
    found = findmod.build(df, scaling, head, inputs.dirs, imported=imported_runs(inputs.metas))
    blocks += findmod.blocks(in_python(found))
    for gkey, group in groups(df):
        blocks += [pg.Heading(group_head(gkey, group, False), 3), best_table(group)]
    return blocks


_RUN_COMMAND = re.compile(r"`attnbench run( [^`]*)`")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def run_call(args: str) -> str:
    """`attnbench run`'s arguments as the Python call that does the same: '--resume --redo-drift --out
    runs/x' -> 'attnbench.run(resume=True, redo_drift=True, out='runs/x')' (a flag with no value is a
    switch, True; a number stays a number; `--pass` is `pass_=`)."""
    words, given = shlex.split(args), []
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        key = word[2:].replace("-", "_")
        key = "pass_" if key == "pass" else key
        value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        if value is None:
            given.append(f"{key}=True")
        else:
            given.append(f"{key}={value if _NUMBER.fullmatch(value) else repr(value)}")
    return f"attnbench.run({', '.join(given)})"


def in_python(found):
    """The findings as a notebook shows them: each `attnbench run ...` they name as the Python call that
    does the same (the user is in Python); other commands stay as a shell takes them."""
    import dataclasses

    def said(text: str) -> str:
        return _RUN_COMMAND.sub(lambda m: f"`{run_call(m.group(1))}`", text)

    def each(texts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(said(t) for t in texts)

    panels = tuple(dataclasses.replace(p, sentences=each(p.sentences)) for p in found.panels)
    kept = {f.name: each(getattr(found, f.name)) for f in dataclasses.fields(found) if f.name != "panels"}
    return dataclasses.replace(found, panels=panels, **kept)


def run_html(path: str | Path, interrupted: bool = False, resumed: int = 0) -> str:
    """run_blocks as a notebook cell's HTML; a directory that cannot be read (moved, deleted, damaged since)
    shows as one line saying why."""
    try:
        blocks = run_blocks(path, interrupted, resumed)
    except (ValueError, OSError) as exc:  # results.RunDirError is a ValueError
        blocks = [pg.Para(f"attnbench run {path}: {exc}")]
    return pg.to_notebook_html(blocks, path)


# ---- figures ----------------------------------------------------------------------------------------------


class Figures(list):
    """matplotlib Figures, one per group (device, dtype, pass) and kind, that a notebook shows as images when
    a cell ends with them (or display(figs)); each is a plain Figure: figs[0].savefig("time.png")."""

    def _ipython_display_(self) -> None:
        from IPython.display import Image, display

        from .style import png_bytes

        for fig in self:
            display(Image(data=png_bytes(fig), format="png"))

    def __repr__(self) -> str:
        titles = [fig.get_suptitle() or "figure" for fig in self]
        return f"<{len(self)} figures: {'; '.join(titles)}>" if titles else "<no figures: no cells>"


def _panel_kinds() -> dict[str, Callable[..., list]]:
    """The workload panels' figures run.plot draws, by kind: each panel's own `drawn`, the code its report
    section saves from (varlen: useful TFLOP/s per length pattern; decode: time and K/V GB/s against N_k;
    speed-accuracy: speed against rel_err)."""
    from .panels import accuracy, decode, varlen

    return {"varlen": varlen.drawn, "decode": decode.drawn, "speed-accuracy": accuracy.drawn}


PANEL_KINDS = ("varlen", "decode", "speed-accuracy")  # _panel_kinds' keys, in the report's page order
KINDS = (*FIGURE_KINDS, *PANEL_KINDS)


def plot_kinds(kinds: str | Sequence[str]) -> tuple[str, ...]:
    """'time,memory' or ['time', 'memory'] as kinds of KINDS (render.FIGURE_KINDS, a group's, and
    PANEL_KINDS, the workload panels'); ValueError naming an unknown."""
    given = [k.strip() for k in kinds.split(",")] if isinstance(kinds, str) else [str(k) for k in kinds]
    unknown = [k for k in given if k not in KINDS]
    if unknown or not given:
        raise ValueError(f"unknown plot kind {(unknown or [''])[0]!r}; known: {', '.join(KINDS)}")
    return tuple(given)


def figures(
    run_dirs: Sequence[str | Path], kinds: str | Sequence[str] = PLOT_KINDS, baseline: str | None = None
) -> Figures:
    """The report's figures of `kinds` for the given runs, per group, in the report's colours, drawn by the
    code the report draws them with (render.group_figures, a panel's `drawn`): a group's figures first, then
    the workload panels' in the report's order; saved nowhere (attnbench.report writes them with their
    CSVs). A run without such cells (no packed cell for 'varlen') draws none of that kind."""
    from . import fit as fitmod
    from .render import group_figures, prepare
    from .section import group_head
    from .style import palette
    from .tables import groups

    chosen = plot_kinds(kinds)
    inputs = prepare(list(run_dirs), baseline)
    df, metas = inputs.df, inputs.metas
    fits = fitmod.fit_index(fitmod.scaling_table(df, metas))
    multi = len(metas) > 1
    out = Figures()
    with palette({str(v) for v in df["variant"].dropna()}):
        for gkey, group in groups(df):
            head = group_head(gkey, group, multi)
            meta = metas.get(str(gkey["run_id"]), {})
            drawn = group_figures(gkey, group, meta, fits, inputs.baseline, head, chosen)
            out.extend(fig for _kind, _title, (fig, _data), _caption in drawn)
        panel = _panel_kinds()
        for kind in (k for k in PANEL_KINDS if k in chosen):
            for _gkey, _group, _head, figs in panel[kind](df, metas, multi):
                out.extend(fig for _kind, _title, (fig, _data), _caption in figs)
    return out


# ---- the tidy table -------------------------------------------------------------------------------------

# what table() shows of each row unless asked for other columns, after the run, variant and the axes that vary
SHOWN = ("status", "time_ms_median", "rel_iqr", "peak_mem_bytes", "tflops", "rel_err", "message")
FRACTIONS = ("rel_iqr", "drop_frac", "sm_clock_drop")  # 0.031 is '3.1%'


def column_format(column: str, dtype: Any) -> str | Callable[[Any], str] | None:
    """How table() writes a column's numbers: errors as 3.0e-07 (pandas' own display prints a nullable
    float below 5e-7 as 0.0), bytes as 96.0 KiB, fractions as percent, other floats with four significant
    digits; text with its control characters as escapes (results.formulas.printable); None: as pandas does
    (integers, flags)."""
    kind = getattr(dtype, "kind", "")
    if kind == "O":  # str, or pandas' string dtype
        return printable
    if column.endswith("_bytes") and kind in "iuf":
        return bytes_text
    if kind != "f":
        return None
    if column.endswith("_err"):
        return "{:.1e}"
    if column in FRACTIONS:
        return "{:.1%}"
    return "{:.4g}"


# a column table() derives from the row's own: the error against float64 of the inputs the variant was given
# (results.formulas.end_to_end_rel_err: a quantising variant's rel_err is against its rounded inputs)
E2E = "e2e_rel_err"


def quantising(df) -> bool:
    """Whether some row of df has a quantisation recipe (a variant that rounds its inputs: FP8)."""
    return "quant_recipe" in df and bool(quantised(df["quant_recipe"]).any())


def with_end_to_end(df):
    """df with its rows' error end to end as E2E, the one the report's speed-accuracy panel draws: rel_err
    where a row rounds nothing, else the error its sqnr_db says."""
    import pandas as pd

    sqnr = df["sqnr_db"] if "sqnr_db" in df else [None] * len(df)
    e2e = [end_to_end_rel_err(e, s) for e, s in zip(df["rel_err"], sqnr, strict=True)]
    return df.assign(**{E2E: pd.array([None if pd.isna(e) else float(e) for e in e2e], dtype="Float64")})


def default_columns(df) -> list[str]:
    """run_id where there are several runs, the variant, the axes that vary (seq_len always), and SHOWN
    (message only where some row has one; E2E after rel_err where some row has a quantisation recipe, whose
    rel_err alone reads as if its rounding cost nothing)."""
    from attnbench.results.axes import FOLLOWS

    from .tables import COMBO_AXES, LENGTHS, varying

    def follows(a: str) -> bool:  # seq_k = seq_len, kv_heads = heads in every row: said by the other
        return a in FOLLOWS and FOLLOWS[a] in df and bool((df[a] == df[FOLLOWS[a]]).fillna(True).all())

    axes = [a for a in varying(df, [*COMBO_AXES, *LENGTHS]) if a != "run_id" and not follows(a)]
    if "seq_len" not in axes:
        axes.append("seq_len")
    messages = df["message"].fillna("").astype(str).str.len().gt(0).any() if "message" in df else False
    shown = [c for c in SHOWN if c != "message" or messages]
    if quantising(df) and "rel_err" in shown:
        shown.insert(shown.index("rel_err") + 1, E2E)
    runs = ["run_id"] if "run_id" in df and df["run_id"].nunique() > 1 else []
    return [c for c in [*runs, "variant", *axes, *shown] if c in df.columns or c == E2E]


def styled(df, columns: Sequence[str] | None = None):
    """df (results.load's frame) as a pandas Styler with readable numbers (column_format) and the chosen
    columns (default_columns when None; E2E, derived, where chosen); the frame and its dtypes are left as
    they are."""
    cols = default_columns(df) if columns is None else list(columns)
    if E2E in cols and E2E not in df.columns and "rel_err" in df.columns:
        df = with_end_to_end(df)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(
            f"no column {missing[0]!r} in the table; its columns: {', '.join(map(str, df.columns))}"
        )
    shown = df[cols]
    formats = {c: f for c in cols if (f := column_format(c, shown[c].dtype)) is not None}
    table = _table_class()(shown).format(formats, na_rep="", escape="html")
    table.text_formats = formats
    return table


@functools.cache
def _table_class():
    """table()'s Styler: HTML where a notebook shows it, and the same numbers as plain text where it is
    printed (a script, a terminal), not pandas' '<Styler object at 0x...>'."""
    import pandas as pd
    from pandas.io.formats.style import Styler

    def written(fmt: str | Callable[[Any], str]) -> Callable[[Any], str]:
        return lambda v: "" if pd.isna(v) else (fmt.format(v) if isinstance(fmt, str) else fmt(v))

    class Table(Styler):
        text_formats: dict[str, Any] = {}

        def __str__(self) -> str:
            shown = {c: written(f) for c, f in self.text_formats.items()}
            return self.data.to_string(index=False, formatters=shown, na_rep="")

        __repr__ = __str__

    return Table
