"""The energy panel: joules per call above the idle draw against the length, in runs made with --energy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import page as pg
from ..plots import floats, keys_of, length_xaxis
from ..section import Section, file_stem, group_head, num_text, seq_count
from ..style import (
    empty_panel,
    legend_below,
    log_axis,
    mpl_style,
    new_figure,
    variant_color,
    variant_marker,
    variant_order,
)
from ..tables import groups, length_axis, length_name, ok_rows, panels, present

ENERGY_RULE = (
    "Energy per call: NVML's energy counter of the whole board (memory included) read edge to edge over at "
    "least 1 s of the cell's timed call repeated, after its timing; the board's idle draw, measured once per "
    "worker, is subtracted, so what is left is the energy the calls added. TFLOP per joule is the call's "
    "FLOPs over it (TFLOP/s per W). The method's 'Energy per call' says what the window holds."
)
ENERGY_COLUMNS = ["energy_j_per_call", "tflops_per_w", "energy_power_w", "idle_power_w", "energy_calls"]


# ---- rows and numbers ----------------------------------------------------------------------------------


def energy_rows(df):
    """ok rows with a joules-per-call value (a run made with --energy, CUDA cells whose counter was read)."""
    if "energy_j_per_call" not in df.columns:
        return df.iloc[:0]
    ok = ok_rows(df)
    return ok[ok["energy_j_per_call"].notna()]


def watts_text(values) -> str:
    """'70 W', or '65–72 W' where the workers' idle draws differ."""
    lo, hi = min(values), max(values)
    return f"{lo:.0f} W" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f} W"


def sentence(rows) -> str | None:
    """The findings' sentence for one panel's rows: which variant does the most TFLOP per joule at the
    largest length with energy values, and the idle draw subtracted; None without energy values."""
    rated = energy_rows(rows)
    rated = rated[rated["tflops_per_w"].notna()]
    if rated.empty:
        return None
    length = length_axis(rated)
    top = rated[rated[length] == rated[length].max()]
    best = top.loc[top["tflops_per_w"].astype(float).idxmax()]
    name = length_name(length)
    idle = [float(w) for w in rated["idle_power_w"] if present(w)]
    idle_text = f" above the board's idle draw of {watts_text(idle)}, subtracted" if idle else " above idle"
    return (
        f"Energy: the most TFLOP per joule at {name} = {seq_count(best[length])} is {best['variant']}'s, "
        f"{num_text(best['tflops_per_w'], '.3g')} TFLOP/J "
        f"({num_text(best['energy_j_per_call'], '.3g')} J per call{idle_text})."
    )


# ---- the figure ----------------------------------------------------------------------------------------


def energy_figure(rows, title: str):
    """Joules per call above idle against the length (log-log), one line per variant, per panel."""
    rated = energy_rows(rows)
    pans = panels(rows)
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=4.8)
        for ax, (_key, ptitle, prow) in zip(axes, pans, strict=True):
            pok = energy_rows(prow)
            length = length_axis(prow)
            for variant in variant_order(pok["variant"].unique()):
                v = pok[pok["variant"] == variant].sort_values(length)
                x, y = floats(v[length]), floats(v["energy_j_per_call"])
                ax.plot(x, y, marker=variant_marker(variant), ms=4, lw=1.6, color=variant_color(variant),
                        label=variant)  # fmt: skip
            ys = [y for y in floats(pok["energy_j_per_call"]) if math.isfinite(y) and y > 0]
            if ys:
                log_axis(ax)
            else:
                empty_panel(ax, "no energy values above idle")
            length_xaxis(ax, [int(n) for n in prow[length].dropna().unique()], length)
            ax.set_ylabel("energy per call above idle (J)")
            ax.set_title(ptitle)
            legend_below(ax)
        fig.suptitle(title)
    return fig, rated[keys_of(rows) + ENERGY_COLUMNS]


# ---- the page's blocks ---------------------------------------------------------------------------------


def section(df, metas: dict[str, dict[str, Any]], out: Path) -> Section:
    """Energy per call against the length per group among the figures; nothing in a run without energy."""
    from ..style import save

    rated = energy_rows(df)
    if rated.empty:
        return Section()
    multi = len(metas) > 1
    figures: list = [pg.Heading("Energy per call above the idle draw"), pg.Para(ENERGY_RULE)]
    files = []
    for gkey, group in groups(df):
        if energy_rows(group).empty:
            continue
        head, stem = group_head(gkey, group, multi), file_stem(gkey, multi)
        fig, data = energy_figure(group, f"Energy per call · {head}")
        caption = "Joules per call above the board's idle draw (NVML energy counter, >= 1 s windows)."
        saved = save(fig, data, out, f"energy-{stem}", "Energy per call vs N", caption)
        files.append(saved)
        figures += [pg.Heading(head, 3), pg.Figure(saved)]
    return Section(figures, [], files)
