"""The packed variable-length panel: useful TFLOP/s per length pattern and variant, and the padding tax."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnbench.results.formulas import ratio_number, ratio_spread, tflops

from .. import page as pg
from ..plots import ring_cells, ring_legend
from ..section import Section, file_stem, group_head, ms_text, num_text, panel_section, seq_count
from ..style import empty_panel, legend_below, mpl_style, new_figure, trim_title, variant_color, variant_order
from ..tables import (
    GROUP_AXES,
    PANEL_AXES,
    axis_value,
    grouped,
    label,
    ok_rows,
    pattern_key,
    present,
    ranked_rows,
    varying,
)

VARLEN_RULE = (
    "A packed cell holds B sequences of different lengths, T = B · mean N tokens in all; every length "
    "pattern at one (B, mean N) has the same T, so their times compare directly. Useful TFLOP/s counts only "
    "the pairs each sequence attends within itself (flops, from the real lengths) over the median time; "
    "executed TFLOP/s counts what the kernel computes (executed_flops: a padded kernel B · max L² pairs and "
    "a block-diagonal mask over a dense kernel T², causal or not, since a kernel computes every score of an "
    "explicit mask before the mask hides it; a loop over the sequences the useful pairs; a tiled or "
    "row-blocked kernel the whole blocks it visits). Executed / useful is the padding tax: the hatched bar "
    "above the solid one. Tokens/s is T over the median time."
)
TAX_SHOWN = 1.05  # executed / useful worth a word in the findings and a label on the bar
SMALL_BAR = 0.05  # a bar under this fraction of its panel's tallest has its value written above it
NONE_VALUES = ("", "none", "nan", "<NA>")  # the `lengths` of a cell that is not packed
# a group holds its dtype, pass, device and run; inside it one panel per B, mean N and any other axis that
# varies. lengths is left out of both: the patterns are the panel's x
VARLEN_GROUP_AXES = [a for a in GROUP_AXES if a != "lengths"]
VARLEN_PANEL_AXES = [a for a in PANEL_AXES if a not in ("lengths", "batch")]
RATE_COLUMNS = ["pattern", "max_len", "tokens", "flops", "executed_flops", "time_ms_median", "useful_tflops",
                "executed_tflops", "tax", "tokens_per_s"]  # fmt: skip


# ---- rows and numbers ----------------------------------------------------------------------------------


def packed_rows(df):
    """Rows of packed variable-length cells: a `lengths` pattern other than 'none' (ordinary cells, and
    runs before the axis, have 'none', NA or no column), and no page size (a paged cell's pattern draws its
    contexts: the decode panel shows it)."""
    if "lengths" not in df.columns:
        return df.iloc[:0]
    text = df["lengths"].astype("string").fillna("none").str.strip()
    paged = df["page_size"].fillna(0).astype(int) > 0 if "page_size" in df.columns else False
    return df[~text.isin(NONE_VALUES) & ~paged]


def pattern_order(patterns) -> list[str]:
    return sorted({str(p) for p in patterns}, key=pattern_key)


def seq_lens_of(value: Any) -> list[int] | None:
    """A row's `seq_lens` as a list of ints: a list (JSONL) or its JSON text (a CSV); None when absent."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if value is None or isinstance(value, (int, float)):
        return None
    try:
        lens = [int(n) for n in value]
    except (TypeError, ValueError):
        return None
    return lens or None


def varlen_rates(rows):
    """ok packed rows with a median time, and their numbers: `pattern`, `max_len` (the longest sequence),
    `tokens` (T = sum of the lengths, else B · mean N), `useful_tflops` (flops / time), `executed_tflops`
    (executed_flops / time), `tax` (executed_flops / flops: the padding tax) and `tokens_per_s`."""
    ok = ok_rows(packed_rows(rows)).dropna(subset=["time_ms_median"]).copy()
    if ok.empty:
        return ok.reindex(columns=[*ok.columns, *(c for c in RATE_COLUMNS if c not in ok.columns)])
    if "executed_flops" not in ok.columns:
        ok["executed_flops"] = math.nan
    lens = [seq_lens_of(v) for v in (ok["seq_lens"] if "seq_lens" in ok.columns else [None] * len(ok))]
    ok["pattern"] = [str(p).strip() for p in ok["lengths"]]
    ok["max_len"] = [max(ls) if ls else math.nan for ls in lens]
    ok["tokens"] = [
        sum(ls) if ls else int(b) * int(n) for ls, b, n in zip(lens, ok["batch"], ok["seq_len"], strict=True)
    ]
    times = [float(t) for t in ok["time_ms_median"]]
    useful = [float(f) if present(f) else None for f in ok["flops"]]
    executed = [float(f) if present(f) else None for f in ok["executed_flops"]]
    ok["useful_tflops"] = [tflops(f, t) for f, t in zip(useful, times, strict=True)]
    ok["executed_tflops"] = [tflops(f, t) for f, t in zip(executed, times, strict=True)]
    ok["tax"] = [e / u if e and u else math.nan for e, u in zip(executed, useful, strict=True)]
    tokens = list(ok["tokens"])
    ok["tokens_per_s"] = [n / (t * 1e-3) if t > 0 else math.nan for n, t in zip(tokens, times, strict=True)]
    return ok


def shape_panels(rated) -> list[tuple[dict[str, Any], Any]]:
    """(key, rows) per panel of one group: B, mean N and every other panel axis that varies among them."""
    axes = [*varying(rated, VARLEN_PANEL_AXES), "batch", "seq_len"]
    return list(grouped(rated, axes))


def shape_text(key: dict[str, Any], max_len: Any = None) -> str:
    """'B=8, mean N=512' (with ', max L=1,900' when given), after the other axes that vary: 'causal, ...'."""
    others = {a: v for a, v in key.items() if a not in ("batch", "seq_len")}
    text = f"B={int(key['batch'])}, mean N={seq_count(key['seq_len'])}"
    if present(max_len):
        text += f", max L={seq_count(max_len)}"
    return f"{label(others).replace(' · ', ', ')}, {text}" if others else text


# ---- the findings' sentences ---------------------------------------------------------------------------


def pattern_sentence(pattern: str, key: dict[str, Any], rows) -> tuple[str, list[Any]]:
    """'On longtail lengths (B=8, mean N=512, max L=1,900) sdpa_loop is fastest at 0.81 useful TFLOP/s,
    1.52× ahead of flex; padded executes 3.4× the useful work and runs at 0.41× the useful TFLOP/s of
    sdpa_loop.' (each ratio of times in the digits its two cells' spread supports, results.formulas.
    ratio_number, as the findings' leads), and the index labels of the rows it compares (the fastest, the
    one it is ahead of or tied with, the most taxed it names). Every variant of one pattern does the same
    useful work, so the most useful TFLOP/s is the shortest time."""
    from attnbench.results.judge import separated

    ranked = rows.sort_values("time_ms_median", kind="stable")
    best = ranked.iloc[0]
    compared = [ranked.index[0]]
    name = str(best["variant"])
    max_len = rows["max_len"].max()
    text = f"On {pattern} lengths ({shape_text(key, max_len)}) {name} is fastest at "
    text += f"{num_text(best['useful_tflops'], '.3g')} useful TFLOP/s"
    if len(ranked) > 1:
        second = ranked.iloc[1]
        compared.append(ranked.index[1])
        if separated(best, second):
            lead = float(second["time_ms_median"]) / float(best["time_ms_median"])
            spread = ratio_spread(best.get("rel_iqr"), second.get("rel_iqr"))  # as the findings' leads
            text += f", {ratio_number(lead, spread)}× ahead of {second['variant']}"
        else:
            text += f", tied with {second['variant']} (within the spread)"
    taxed = rows.dropna(subset=["tax"])
    if not taxed.empty:
        worst_at = taxed["tax"].astype(float).idxmax()
        worst = taxed.loc[worst_at]
        tax = float(worst["tax"])
        # the tax is executed over useful FLOPs, counted, not timed: no spread, one decimal
        if tax >= TAX_SHOWN and str(worst["variant"]) == name:
            text += f"; it executes {tax:.1f}× the useful work"
        elif tax >= TAX_SHOWN:
            # one pattern's useful work is one: the TFLOP/s ratio is best's median time over worst's
            ratio = float(worst["useful_tflops"]) / float(best["useful_tflops"])
            shown = ratio_number(ratio, ratio_spread(best.get("rel_iqr"), worst.get("rel_iqr")))
            text += (
                f"; {worst['variant']} executes {tax:.1f}× the useful work and runs at {shown}× the "
                f"useful TFLOP/s of {name}"
            )
            compared.append(worst_at)
    return text + ".", compared


def sentences(df, mark: Callable[[str, list[Any]], str] | None = None) -> list[str]:
    """The findings' sentences for packed cells: per B, mean N and pattern, the fastest variant, and the
    variant with the largest padding tax (executed / useful) against it; [] without packed cells. Cells
    flagged suspect (too fast to believe) are left out, as from every ranking. `mark(text, labels)`, where
    given, rewords a sentence by the index labels (of df) of the rows it compares: the findings' busy-machine
    rule (busy.SHAKY) for a sentence read off drifted or noisy cells."""
    rated = ranked_rows(varlen_rates(df))
    out = []
    for key, shape in shape_panels(rated):
        for pattern in pattern_order(shape["pattern"]):
            text, compared = pattern_sentence(pattern, key, shape[shape["pattern"] == pattern])
            out.append(mark(text, compared) if mark is not None else text)
    return out


# ---- the figure ----------------------------------------------------------------------------------------


def _bars(ax, rows, seen: set[str]) -> None:
    """One panel: per pattern (x) a bar per variant, solid to its useful TFLOP/s, hatched on to its executed
    TFLOP/s, with the padding tax written above where it is worth a word; a flagged cell (drifted, suspect,
    throttled) ringed at its bar's top as the time figure rings it, its flag added to `seen`."""
    from matplotlib.patches import Rectangle

    patterns = pattern_order(rows["pattern"])
    variants = variant_order(rows["variant"].unique())
    width = 0.8 / max(len(variants), 1)
    tallest = max([float(t) for t in rows["executed_tflops"].tolist() + rows["useful_tflops"].tolist()
                   if present(t) and math.isfinite(float(t))] or [1.0])  # fmt: skip
    for j, variant in enumerate(variants):
        color, named = variant_color(variant), False
        v = rows[rows["variant"] == variant]
        for i, pattern in enumerate(patterns):
            cell = v[v["pattern"] == pattern]
            if cell.empty:
                continue
            r, x = cell.iloc[0], i - 0.4 + (j + 0.5) * width
            useful, executed = float(r["useful_tflops"]), float(r["executed_tflops"])
            if math.isfinite(executed) and executed > useful:
                ax.bar(x, executed, width, facecolor="none", edgecolor=color, hatch="///", lw=0.8)
            taxed = present(r["tax"]) and float(r["tax"]) >= TAX_SHOWN
            words = [f"{float(r['tax']):.1f}×"] if taxed else []
            if useful < tallest * SMALL_BAR:  # a bar of a few pixels: its value written above it
                words.insert(0, f"{useful:.2g} TFLOP/s")
            if words:
                top = max(executed, useful) if math.isfinite(executed) else useful
                ax.text(x, top + tallest * 0.01, " ".join(words), ha="center", va="bottom", fontsize=7,
                        color="#333333", rotation=90 if len(words) > 1 or not taxed else 0)  # fmt: skip
            ax.bar(x, useful, width, color=color, label=None if named else variant)
            ring_cells(ax, cell.iloc[:1].assign(bar_x=x), "bar_x", "useful_tflops", seen)
            named = True
    # the hatched bar's meaning in the legend (a patch of no size: it draws nothing in the panel)
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor="none", edgecolor="#555555", hatch="///",
                           label="executed TFLOP/s (hatched); ×: executed / useful"))  # fmt: skip
    max_lens = {p: rows[rows["pattern"] == p]["max_len"].max() for p in patterns}
    ax.set_xticks(range(len(patterns)))
    ax.set_xticklabels([f"{p}\nmax L={seq_count(max_lens[p])}" for p in patterns])
    ax.set_xlim(-0.6, len(patterns) - 0.4)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the labels above the tallest bars
    ax.set_ylabel("useful TFLOP/s (solid), executed (hatched)")


def varlen_figure(rows, title: str):
    """Useful TFLOP/s per length pattern (x) and variant (bars), executed TFLOP/s hatched above it, one
    panel per B and mean N (and any other axis that varies); the data: every bar's numbers."""
    rated = varlen_rates(rows)
    pans = shape_panels(rated)
    seen: set[str] = set()
    with mpl_style():
        fig, axes = new_figure(len(pans), ncols=1, panel_h=4.2)  # one wide panel a row: many bars
        for i, (ax, (key, prow)) in enumerate(zip(axes, pans, strict=False)):
            _bars(ax, prow, seen)
            ax.set_title(shape_text(key))
            if i == len(pans) - 1:  # one legend below the last panel, for the variants of every panel
                legend_below(ax, axes=axes)
        if not pans:
            empty_panel(axes[0], "no ok packed cells")
        ring_legend(fig, seen)
        fig.suptitle(title)
    keys = [c for c in [*VARLEN_GROUP_AXES, *VARLEN_PANEL_AXES, "batch", "seq_len", "variant"] if c in rated]
    data = rated[[*dict.fromkeys(keys), *RATE_COLUMNS]].copy()
    if "seq_lens" in rated.columns:
        data["seq_lens"] = [json.dumps(seq_lens_of(v)) for v in rated["seq_lens"]]
    return fig, data


# ---- the page's blocks ---------------------------------------------------------------------------------


def rate_text(v: Any) -> str:
    """Tokens per second in three digits: 812, 52.3k, 4.1M."""
    if not present(v) or not math.isfinite(float(v)):
        return "n/a"
    v = float(v)
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def varlen_table(rated) -> pg.Table:
    """One row per packed cell: its pattern and shape, useful and executed TFLOP/s, the padding tax,
    tokens/s and the median time, in the figure's order."""
    shown = varying(rated, VARLEN_PANEL_AXES)
    order = rated.assign(
        _p=[pattern_key(p) for p in rated["pattern"]],
        _v=[variant_order(rated["variant"].unique()).index(v) for v in rated["variant"]],
    ).sort_values([*shown, "batch", "seq_len", "_p", "_v"], kind="stable")
    rows = tuple(
        (
            str(r["variant"]),
            *[axis_value(a, r[a]) for a in shown],
            str(r["pattern"]),
            str(int(r["batch"])),
            seq_count(r["seq_len"]),
            seq_count(r["max_len"]),
            num_text(r["useful_tflops"], ".3g"),
            num_text(r["executed_tflops"], ".3g"),
            f"{num_text(r['tax'], '.2f')}×" if present(r["tax"]) else "n/a",
            rate_text(r["tokens_per_s"]),
            ms_text(r["time_ms_median"]),
        )
        for _, r in order.iterrows()
    )
    headers = ("variant", *shown, "pattern", "B", "mean N", "max L", "useful TFLOP/s", "executed TFLOP/s",
               "executed / useful", "tokens/s", "median time")  # fmt: skip
    return pg.Table(headers, rows, "useful: flops (the real lengths) / time; executed: executed_flops / time")


def drawn(df, metas: dict[str, dict[str, Any]], multi: bool = False) -> list[tuple[dict, Any, str, list]]:
    """Per group of packed cells: (key, rows, title, [(file kind, figure title, (figure, data), caption)]),
    drawn and not yet saved: what section saves and attnbench.Run.plot('varlen') shows."""
    packed = packed_rows(df)
    out = []
    for gkey, group in grouped(packed, VARLEN_GROUP_AXES) if not packed.empty else ():
        head = group_head(gkey, group, multi)
        # a packed cell pads nothing: its padding tax is the figure's, the 'no padding' axis not
        title = trim_title(f"Packed variable-length batches · {head}", drop=("no padding",))
        caption = (
            "One panel per B and mean N. Solid: useful TFLOP/s (the real lengths); hatched: executed "
            "TFLOP/s; ×: executed / useful, the padding tax; rings: drifted, suspect or throttled cells."
        )
        figure = varlen_figure(group, title)
        out.append((gkey, group, head, [("varlen", "Useful TFLOP/s per length pattern", figure, caption)]))
    return out


def section(df, metas: dict[str, dict[str, Any]], out: Path) -> Section:
    """Packed variable-length batches: useful and executed TFLOP/s per pattern and variant per group among
    the figures (drawn); every packed cell's numbers among the tables; nothing in a run without packed
    cells."""
    multi = len(metas) > 1
    groups_drawn = drawn(df, metas, multi)
    if not groups_drawn:
        return Section()
    return panel_section(
        [
            pg.Heading("Packed variable-length batches: useful TFLOP/s per length pattern"),
            pg.Para(VARLEN_RULE),
        ],
        [pg.Heading("Packed variable-length batches: the padding tax")],
        groups_drawn,
        out,
        lambda gkey, group: _padding_tax_table(group),
        lambda gkey: file_stem(gkey, multi),
    )


def _padding_tax_table(group):
    """A group's packed cells' numbers (varlen_table), or a line where none ran ok."""
    rated = varlen_rates(group)
    return varlen_table(rated) if not rated.empty else pg.Para("No packed cell ran ok.")
