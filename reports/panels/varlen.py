"""The packed variable-length panel: useful TFLOP/s per length pattern and variant, the work each executes
beyond it (the padding tax, and the rest), and padded SDPA against the kernels that execute only the useful
pairs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnbench.results.formulas import padding_split, ratio_number, ratio_spread, tflops

from .. import page as pg
from ..plots import ring_cells, ring_legend
from ..section import Section, file_stem, group_head, ms_text, num_text, panel_section, rate_text, seq_count
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
    "row-blocked kernel the whole blocks it visits). Executed / useful (the hatched bar above the solid one) "
    "is the padding tax times the rest: the padding tax is a padded kernel's B · max L pairs over the real "
    "lengths' pairs, of the same causality (B · max L² / Σ L² without a causal mask, B · max L(max L + 1) / "
    "Σ L(L + 1) with one), and 1 for a kernel that pads nothing; the rest is what the kernel computes beyond "
    "its padded or packed shape's pairs: a padded kernel's explicit causal mask (about 2×), a block-diagonal "
    "mask's whole pack, a tiled kernel's whole tiles. Tokens/s is T over the median time."
)
PACKED_N = (  # the scaling table's line on packed series
    "A pack's N is its mean length; each N draws its own lengths, so its exponent describes the pattern, "
    "not one batch growing."
)
TAX_SHOWN = 1.05  # executed / useful worth a word in the findings and a label on the bar
SMALL_BAR = 0.05  # a bar under this fraction of its panel's tallest has its value written above it
NONE_VALUES = ("", "none", "nan", "<NA>")  # the `lengths` of a cell that is not packed
# a group holds its dtype, pass, device and run; inside it one panel per B, mean N and any other axis that
# varies. lengths is left out of both: the patterns are the panel's x
VARLEN_GROUP_AXES = [a for a in GROUP_AXES if a != "lengths"]
VARLEN_PANEL_AXES = [a for a in PANEL_AXES if a not in ("lengths", "batch")]
RATE_COLUMNS = ["pattern", "max_len", "tokens", "flops", "executed_flops", "time_ms_median", "useful_tflops",
                "executed_tflops", "tax", "padding_tax", "rest", "tokens_per_s"]  # fmt: skip
# what a kernel of each `varlen` work computes beyond the useful pairs, besides padding (the findings' words)
REST_WORDS = {
    "padded": "{rest}× for the pairs its explicit {mask} mask hides",
    "masked": "none of it padding: the whole pack's T² scores under a block-diagonal mask",
    "tiles": "none of it padding: the whole tiles its block mask visits",
    "rows": "none of it padding: the whole blocks of query rows it visits",
}


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
    (executed_flops / time), `tax` (executed_flops / flops), its split `padding_tax` x `rest` (padding_split,
    by the variant's `varlen` work the loader gives as `varlen_work`: NaN where no work is recorded) and
    `tokens_per_s`."""
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
    works = ok["varlen_work"] if "varlen_work" in ok.columns else [None] * len(ok)
    split = [_split(w, ls, r) for w, ls, (_, r) in zip(works, lens, ok.iterrows(), strict=True)]
    ok["padding_tax"] = [p for p, _ in split]
    ok["rest"] = [r for _, r in split]
    tokens = list(ok["tokens"])
    ok["tokens_per_s"] = [n / (t * 1e-3) if t > 0 else math.nan for n, t in zip(tokens, times, strict=True)]
    return ok


def _split(work: Any, lens: list[int] | None, row) -> tuple[float, float]:
    """(padding tax, rest) of one packed row by its variant's work; NaN, NaN where either is not known."""
    if not isinstance(work, str) or not work or not lens:
        return math.nan, math.nan
    try:
        return padding_split(
            lens, work=work, causal=bool(row.get("causal")), window=int(row.get("window") or 0)
        )
    except (TypeError, ValueError):  # a work this version cannot read
        return math.nan, math.nan


def work_kind(row) -> str:
    """A rated row's `varlen` work's kind ('padded', 'exact', ...), '' where none is recorded."""
    work = row.get("varlen_work")
    return str(work).partition(":")[0] if isinstance(work, str) else ""


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


def time_ratio(slow, fast) -> str:
    """slow's median time over fast's, in the digits their spread supports (as the findings' leads)."""
    ratio = float(slow["time_ms_median"]) / float(fast["time_ms_median"])
    return ratio_number(ratio, ratio_spread(slow.get("rel_iqr"), fast.get("rel_iqr")))


def waste_words(row) -> str:
    """What a rated row executes beyond the useful pairs, split: 'a padding tax of 4.99×, times 2.0× for
    the pairs its explicit causal mask hides' for a padded kernel, 'none of it padding: ...' for the others;
    '' where its work is not recorded or it executes only the useful pairs."""
    kind, tax, rest = work_kind(row), row.get("padding_tax"), row.get("rest")
    if not present(tax) or not present(rest) or kind not in (*REST_WORDS, "exact"):
        return ""
    mask = " and ".join(w for w, on in (("causal", row.get("causal")), ("window", row.get("window"))) if on)
    more = REST_WORDS[kind].format(mask=mask, rest=f"{float(rest):.1f}") if float(rest) >= TAX_SHOWN else ""
    if kind != "padded":
        return more
    if float(tax) < TAX_SHOWN:
        words = "no padding tax, no sequence being shorter than max L"
        return f"{words}, but {more}" if more else words
    words = f"a padding tax of {float(tax):.2f}×"
    return f"{words}, times {more}" if more else words


def padded_clause(ranked) -> tuple[str, list[Any]]:
    """'sdpa_padded takes 7.3× the time of sdpa_loop, the fastest variant that executes only the useful pairs
    (a padding tax of 4.99×, ...)': the fastest padded kernel against the fastest exact one (padded SDPA
    against one call per sequence, the question a pack's user asks), and the labels it compares; ('', [])
    without a padded kernel among the rows."""
    kinds = [work_kind(r) for _, r in ranked.iterrows()]
    padded = [i for i, k in zip(ranked.index, kinds, strict=True) if k == "padded"]
    exact = [i for i, k in zip(ranked.index, kinds, strict=True) if k == "exact"]
    if not padded:
        return "", []
    p = ranked.loc[padded[0]]
    words = waste_words(p)
    if not exact:
        return f"{p['variant']} pays {words}", [padded[0]]
    e = ranked.loc[exact[0]]
    text = (
        f"{p['variant']} takes {time_ratio(p, e)}× the time of {e['variant']}, the fastest variant that "
        f"executes only the useful pairs ({words})"
    )
    return text, [padded[0], exact[0]]


def pattern_sentence(pattern: str, key: dict[str, Any], rows) -> tuple[str, list[Any]]:
    """'On longtail lengths (B=8, mean N=256, max L=1,024) sdpa_loop is fastest at 0.075 useful TFLOP/s,
    1.47× ahead of flex; sdpa_padded takes 7.3× the time of sdpa_loop, the fastest variant that executes only
    the useful pairs (a padding tax of 4.99×, times 2.0× for the pairs its explicit causal mask hides);
    naive executes 15.9× the useful work (none of it padding: ...) and runs at 0.10× the useful TFLOP/s of
    sdpa_loop.' (each ratio of times in the digits its two cells' spread supports, results.formulas.
    ratio_number, as the findings' leads), and the index labels of the rows it compares. The padded kernel
    against the exact ones (padded_clause), then the variant that executes the most beyond the useful work
    where it is another. Every variant of one pattern does the same useful work, so the most useful TFLOP/s
    is the shortest time."""
    from attnbench.results.judge import separated

    ranked = rows.sort_values("time_ms_median", kind="stable")
    best = ranked.iloc[0]
    compared = [ranked.index[0]]
    name = str(best["variant"])
    text = f"On {pattern} lengths ({shape_text(key, rows['max_len'].max())}) {name} is fastest at "
    text += f"{num_text(best['useful_tflops'], '.3g')} useful TFLOP/s"
    if len(ranked) > 1:
        second = ranked.iloc[1]
        compared.append(ranked.index[1])
        if separated(best, second):
            text += f", {time_ratio(second, best)}× ahead of {second['variant']}"
        else:
            text += f", tied with {second['variant']} (within the spread)"
    padded, labels = padded_clause(ranked)
    if padded:
        text += f"; {padded}"
        compared += [i for i in labels if i not in compared]
    taxed = ranked.dropna(subset=["tax"])
    taxed = taxed[[i not in labels for i in taxed.index]]  # the padded kernel is said already
    if not taxed.empty and float(taxed["tax"].max()) >= TAX_SHOWN:
        worst_at = taxed["tax"].astype(float).idxmax()
        worst = taxed.loc[worst_at]
        # executed over useful FLOPs, counted, not timed: no spread, one decimal
        did = f"executes {float(worst['tax']):.1f}× the useful work"
        words = waste_words(worst)
        did += f" ({words})" if words else ""
        if worst_at == ranked.index[0]:  # named, not 'it': the padded clause may stand between
            text += f"; {name} {did}"
        else:
            # one pattern's useful work is one: the TFLOP/s ratio is best's median time over worst's
            ratio = float(worst["useful_tflops"]) / float(best["useful_tflops"])
            shown = ratio_number(ratio, ratio_spread(best.get("rel_iqr"), worst.get("rel_iqr")))
            text += f"; {worst['variant']} {did} and runs at {shown}× the useful TFLOP/s of {name}"
            compared.append(worst_at)
    return text + ".", compared


def sentences(df, mark: Callable[[str, list[Any]], str] | None = None) -> list[str]:
    """The findings' sentences for packed cells: per B, mean N and pattern, the fastest variant, padded SDPA
    against the fastest variant that executes only the useful pairs, with its padding tax, and the variant
    that executes the most beyond the useful work against the fastest; [] without packed cells. Cells
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
    TFLOP/s, with executed / useful written above where it is worth a word; a flagged cell (drifted, suspect,
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


def varlen_table(rated) -> pg.Table:
    """One row per packed cell: its pattern and shape, useful and executed TFLOP/s, executed / useful and
    its split (the padding tax, the rest), tokens/s and the median time, in the figure's order."""
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
            *(
                f"{num_text(r[c], '.2f')}×" if present(r[c]) else "n/a"
                for c in ("tax", "padding_tax", "rest")
            ),
            rate_text(r["tokens_per_s"]),
            ms_text(r["time_ms_median"]),
        )
        for _, r in order.iterrows()
    )
    headers = ("variant", *shown, "pattern", "B", "mean N", "max L", "useful TFLOP/s", "executed TFLOP/s",
               "executed / useful", "padding tax", "rest", "tokens/s", "median time")  # fmt: skip
    note = (
        "useful: flops (the real lengths) / time; executed: executed_flops / time; executed / useful = "
        "padding tax × rest: the padding tax, a padded kernel's B · max L pairs over the real ones (1× for a "
        "kernel that pads nothing), the rest what it computes beyond them (a padded kernel's explicit causal "
        "mask, a block-diagonal mask's whole pack, a tiled kernel's whole tiles); n/a where the run does not "
        "record the variant's varlen work"
    )
    return pg.Table(headers, rows, note)


def drawn(df, metas: dict[str, dict[str, Any]], multi: bool = False) -> list[tuple[dict, Any, str, list]]:
    """Per group of packed cells: (key, rows, title, [(file kind, figure title, (figure, data), caption)]),
    drawn and not yet saved: what section saves and attnbench.Run.plot('varlen') shows."""
    packed = packed_rows(df)
    out = []
    for gkey, group in grouped(packed, VARLEN_GROUP_AXES) if not packed.empty else ():
        head = group_head(gkey, group, multi)
        # a packed cell's padding is the figure's business (its padding tax), the 'no padding' axis not
        title = trim_title(f"Packed variable-length batches · {head}", drop=("no padding",))
        caption = (
            "One panel per B and mean N. Solid: useful TFLOP/s (the real lengths); hatched: executed "
            "TFLOP/s; ×: executed / useful, the padding tax (a padded kernel's) times the rest (a padded "
            "kernel's explicit causal mask, a block-diagonal mask's whole pack, a tiled kernel's whole "
            "tiles), split in the table below; rings: drifted, suspect or throttled cells."
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
        [pg.Heading("Packed variable-length batches: the work executed, the padding tax and the rest")],
        groups_drawn,
        out,
        lambda gkey, group: _padding_tax_table(group),
        lambda gkey: file_stem(gkey, multi),
    )


def _padding_tax_table(group):
    """A group's packed cells' numbers (varlen_table), or a line where none ran ok."""
    rated = varlen_rates(group)
    return varlen_table(rated) if not rated.empty else pg.Para("No packed cell ran ok.")
