"""The sliding-window panel: time against N with the exponent once N ≫ W and the local slopes between N."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import fit as fitmod
from .. import page as pg
from ..plots import band_line, exponent_label, floats, guides, keys_of
from ..section import Section, file_stem, group_head
from ..style import (
    empty_panel,
    legend_below,
    log_axis,
    mpl_style,
    new_figure,
    seq_axis,
    variant_color,
    variant_marker,
    variant_order,
)
from ..tables import COMBO_AXES, PANEL_AXES, grouped, groups, label, ok_rows, present, varying

FAR_FACTOR = 4  # "N ≫ W": the window fit uses N ≥ 4W
WINDOW_COLUMNS = ("time_ms_median", "time_ms_p25", "time_ms_p75", "local_slope", "fit_exponent", "fit_ci_low",
                  "fit_ci_high")  # fmt: skip


# ---- rows and numbers ----------------------------------------------------------------------------------


def window_rows(df):
    """Rows with a sliding window (window > 0)."""
    if "window" not in df.columns:
        return df.iloc[:0]
    return df[(df["window"] > 0).fillna(False)]


def local_slopes(n, t) -> list[tuple[int, int, float]]:
    """(N_lo, N_hi, slope) between consecutive distinct N: log(t_hi / t_lo) / log(N_hi / N_lo), the
    exponent the series shows there (2 while the window covers every key, falling to 1 once N ≫ W).
    Repeated N (several runs) are merged by their median time; non-positive times are dropped."""
    import statistics

    by_n: dict[int, list[float]] = {}
    for x, y in zip(n, t, strict=True):
        if present(x) and present(y) and float(y) > 0:
            by_n.setdefault(int(x), []).append(float(y))
    pts = sorted((x, statistics.median(ys)) for x, ys in by_n.items())
    return [
        (n0, n1, math.log(t1 / t0) / math.log(n1 / n0))
        for (n0, t0), (n1, t1) in zip(pts, pts[1:], strict=False)
    ]


def window_fit(rows, window: int) -> fitmod.PowerFit:
    """The time exponent of one windowed series over its ok points with N ≥ FAR_FACTOR·W (all of them:
    those are the asymptotic points here)."""
    ok = ok_rows(rows).dropna(subset=["time_ms_median"])
    far = ok[ok["seq_len"] >= FAR_FACTOR * int(window)]
    return fitmod.fit_power_law(
        far["seq_len"].astype(float), far["time_ms_median"].astype(float), asymptotic=False
    )


def window_series(df):
    """(key, windowed rows, the same series without a window or None) per windowed series: key is its
    combination and variant; the no-window series differs only in window = 0."""
    ok = ok_rows(df)
    plain = {
        tuple(str(k[a]) for a in COMBO_AXES if a != "window") + (str(k["variant"]),): sub
        for k, sub in grouped(ok[(ok["window"] == 0).fillna(False)], [*COMBO_AXES, "variant"])
    }
    out = []
    for key, sub in grouped(ok[(ok["window"] > 0).fillna(False)], [*COMBO_AXES, "variant"]):
        match = tuple(str(key[a]) for a in COMBO_AXES if a != "window") + (str(key["variant"]),)
        out.append((key, sub, plain.get(match)))
    return out


def window_text(variant: str, window: int, fit: fitmod.PowerFit, plain: fitmod.PowerFit | None) -> str:
    """'chunked, window 16: exponent 1.05 [0.98, 1.12] over N ≥ 4W (64–512); without a window: 1.98 [...]'."""
    span = f" ({min(fit.seq_lens)}–{max(fit.seq_lens)})" if fit.seq_lens else ""
    text = f"{variant}, window {window}: exponent {fit.text()} over N ≥ {FAR_FACTOR}W{span}"
    if plain is not None:
        text += f"; without a window: {plain.text()}"
    return text


# ---- the figure ----------------------------------------------------------------------------------------


def window_figure(rows, title: str):
    """Per windowed panel: time against N (log-log) with the exponent over N ≥ 4W in the legend and the
    same variant without a window dashed beside it; right, the local slope between consecutive N, which
    falls from about 2 toward 1 once N ≫ W."""
    import pandas as pd

    series = window_series(rows)
    pan_axes = varying(rows[(rows["window"] > 0).fillna(False)], PANEL_AXES)
    keyed: dict[tuple, list] = {}
    for key, sub, plain in series:
        keyed.setdefault(tuple(key[a] for a in pan_axes), []).append((key, sub, plain))
    records = []
    with mpl_style():
        fig, axes = new_figure(2 * max(len(keyed), 1), ncols=2, panel_h=4.6)
        for i, (pkey, items) in enumerate(keyed.items()):
            ptitle = label(dict(zip(pan_axes, pkey, strict=True))) if pan_axes else "windowed"
            records += _window_panel(axes[2 * i], axes[2 * i + 1], ptitle, items)
        if not keyed:
            empty_panel(axes[0], "no ok windowed cells")
        fig.suptitle(title)
    data = pd.DataFrame(records, columns=[*keys_of(rows), *WINDOW_COLUMNS])
    return fig, data


def _window_panel(ax_t, ax_s, ptitle: str, items: list) -> list:
    """One panel of window_figure: its (key, windowed rows, no-window rows) series drawn on the time axes
    and the local-slope axes, the N = 4W lines and the slope 1 and 2 guides; the series' CSV rows."""
    ns: list[int] = []
    ys: list[float] = []
    records: list = []
    windows = sorted({int(k["window"]) for k, _, _ in items})
    for key, sub, plain in sorted(items, key=lambda it: variant_order([it[0]["variant"]])):
        s_ns, s_ys, s_records = _window_lines(ax_t, ax_s, key, sub, plain)
        ns, ys, records = ns + s_ns, ys + s_ys, records + s_records
    if ys:
        log_axis(ax_t)
        guides(ax_t, ns, ys)
    else:
        empty_panel(ax_t, "no ok cells")
    for w in windows:
        ax_t.axvline(FAR_FACTOR * w, color="#999999", lw=1, ls=":")
        ax_s.axvline(FAR_FACTOR * w, color="#999999", lw=1, ls=":")
    for level in (1.0, 2.0):
        ax_s.axhline(level, color="#555555", lw=1, ls="--", alpha=0.7)
    seq_axis(ax_t, ns)
    seq_axis(ax_s, ns)
    ax_s.set_ylim(0, 2.6)
    ax_t.set_ylabel("time per call (ms, median; band p25–p75)")
    ax_s.set_ylabel("local slope d log t / d log N")
    ax_t.set_title(f"{ptitle}: time (dotted: N = {FAR_FACTOR}W)")
    ax_s.set_title(f"{ptitle}: local slope")
    legend_below(ax_t, ncol=1)
    legend_below(ax_s, ncol=1)
    return records


def _window_lines(ax_t, ax_s, key: dict[str, Any], sub, plain) -> tuple[list[int], list[float], list]:
    """One variant at one window W (and, dashed, the same variant without a window when the run has it):
    its time line with the fitted exponent, its local slopes. (N, positive finite times, CSV rows)."""
    variant, w = str(key["variant"]), int(key["window"])
    color = variant_color(variant)
    v = sub.sort_values("seq_len")
    n, t = floats(v["seq_len"]), floats(v["time_ms_median"])
    fit = window_fit(v, w)
    lab = exponent_label(f"{variant}, W={w}", fit) + (f" (N ≥ {FAR_FACTOR}W)" if fit.available else "")
    band_line(ax_t, n, t, floats(v["time_ms_p25"]), floats(v["time_ms_p75"]), variant, lab)
    ns = [int(x) for x in n]
    ys = [y for y in t if math.isfinite(y) and y > 0]
    slopes = local_slopes(n, t)
    ax_s.plot([math.sqrt(a * b) for a, b, _ in slopes], [s for _, _, s in slopes],
              marker=variant_marker(variant), color=color, label=f"{variant}, W={w}")  # fmt: skip
    records = _window_points(key, v, slopes, fit)
    if plain is not None:
        p = plain.sort_values("seq_len")
        pn, pt = floats(p["seq_len"]), floats(p["time_ms_median"])
        pfit = fitmod.fit_power_law(pn, pt)
        ax_t.plot(pn, pt, ls="--", lw=1.2, color=color, alpha=0.8,
                  label=exponent_label(f"{variant}, no window", pfit))  # fmt: skip
        ns += [int(x) for x in pn]
        ys += [y for y in pt if math.isfinite(y) and y > 0]
        pslopes = local_slopes(pn, pt)
        ax_s.plot([math.sqrt(a * b) for a, b, _ in pslopes], [s for _, _, s in pslopes],
                  ls="--", color=color, alpha=0.8, label=f"{variant}, no window")  # fmt: skip
        records += _window_points({**key, "window": 0}, p, pslopes, pfit)
    return ns, ys, records


def _window_points(
    key: dict[str, Any], rows, slopes: list[tuple[int, int, float]], fit: fitmod.PowerFit
) -> list:
    """The CSV rows of one series: each N with its time, the local slope from the previous N (NaN at the
    first) and the series' fitted exponent (over N ≥ 4W for a windowed one, the usual points otherwise)."""
    slope_to = {hi: s for _, hi, s in slopes}
    out = []
    for _, r in rows.iterrows():
        rec = {k: r[k] for k in rows.columns}
        rec.update(key)
        rec.update(local_slope=slope_to.get(int(r["seq_len"]), math.nan), fit_exponent=fit.exponent,
                   fit_ci_low=fit.ci_low, fit_ci_high=fit.ci_high)  # fmt: skip
        out.append(rec)
    return out


# ---- the page's blocks ---------------------------------------------------------------------------------


def section(df, metas: dict[str, dict[str, Any]], out: Path) -> Section:
    """Sliding window, among the figures: time against N with the exponent over N ≥ 4W and the local slopes,
    the no-window series of the same variant beside it, and each series' exponent in a line below."""
    from ..style import save

    if window_rows(df).empty:
        return Section()
    multi = len(metas) > 1
    figures: list = [
        pg.Heading("Sliding window: time against N"),
        pg.Para(
            "A window of W keys makes each query attend at most W keys: time grows as N² while N is within a"
            f" few W and as N once N ≫ W. The exponent is fitted over the ok points with N ≥ {FAR_FACTOR}W; "
            "the local slope between consecutive N shows the fall from about 2 toward 1. Dashed: the same "
            "variant without a window (the N² story)."
        ),
    ]
    files = []
    # a windowed group is shown with its no-window rows (same group), which it is compared with
    for gkey, group in groups(df):
        if window_rows(group).empty:
            continue
        head, stem = group_head(gkey, group, multi), file_stem(gkey, multi)
        fig, data = window_figure(group, f"Sliding window · {head}")
        caption = f"Left: median time (band p25–p75), dotted at N = {FAR_FACTOR}W; right: local slope."
        saved = save(fig, data, out, f"window-{stem}", "Windowed time vs N and its local slope", caption)
        files.append(saved)
        lines = []
        for key, sub, plain in window_series(group):
            pfit = (
                fitmod.fit_power_law(plain["seq_len"], plain["time_ms_median"]) if plain is not None else None
            )
            lines.append(
                window_text(
                    str(key["variant"]), int(key["window"]), window_fit(sub, int(key["window"])), pfit
                )
            )
        figures += [pg.Heading(head, 3), pg.Figure(saved), pg.Bullets(tuple(lines))]
    return Section(figures, files=files)
