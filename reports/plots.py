"""The report's figures, one question each; each function returns (Figure, the DataFrame drawn from).

The workload panels' own figures are in panels/; the helpers they share with these are here."""

from __future__ import annotations

import math
from typing import Any

from attnbench.results import axes
from attnbench.results.axes import AXES
from attnbench.results.formulas import bytes_text, is_decode, record_e2e_rel_err

from .fit import PowerFit, combo_key
from .growth import says_nothing
from .style import (
    STATUS_COLORS,
    bytes_axis,
    ceiling_line,
    coincident,
    empty_panel,
    legend_below,
    log_axis,
    mpl_style,
    new_figure,
    number_text,
    ratio_axis,
    seq_axis,
    seq_text,
    under_text,
    variant_color,
    variant_marker,
    variant_order,
)
from .tables import PANEL_AXES, flagged, length_axis, length_name, ok_rows, panels, present, quiet_columns

Fits = dict[str, tuple[PowerFit, PowerFit]]
# the identity columns every figure's CSV starts with: the run, the group axes and the panel axes a CSV always
# names (results.axes: Axis.csv, in report order), then variant and seq_len
KEYS = [
    "run_id",
    *(a.name for a in AXES if a.role == "group" and a.identity),
    *(a for a in PANEL_AXES if axes.BY_NAME[a].csv),
    "variant",
    "seq_len",
]


LENGTH_LABEL = {"seq_len": "sequence length N (tokens, log₂ steps)", "seq_k": "keys N_k (log₂ steps)"}
# in a CSV only where some row sets them: the panel and length axes that a CSV does not always name
WORKLOAD_KEYS = tuple(
    a.name for a in AXES if a.role in ("panel", "length") and not a.csv and a.name not in KEYS
)


def keys_of(rows) -> list[str]:
    """KEYS, with the workload axes of issue 11 before variant where some row is off their default (a
    decode CSV carries seq_k, its x): a plain run's CSVs keep the columns they always had."""
    extra = []
    for axis in WORKLOAD_KEYS:
        if axis not in rows.columns or rows.empty:
            continue
        followed = axes.FOLLOWS.get(axis)
        if followed:  # kv_heads follows heads, seq_k follows seq_len
            off = (rows[axis] != rows[followed]).fillna(False).any()
        else:
            off = (rows[axis] != axes.QUIET[axis]).fillna(False).any()
        if off:
            extra.append(axis)
    i = KEYS.index("variant")
    return KEYS[:i] + extra + KEYS[i:]


def floats(series) -> list[float]:
    """A column as plain floats, missing values as NaN (what matplotlib draws as a gap)."""
    return [float(x) for x in series.astype("Float64").to_numpy(dtype=float, na_value=math.nan)]


def exponent_label(variant: str, fit: PowerFit | None, name: str = "N") -> str:
    """A legend entry with the fitted exponent as the findings give it, with its 95% CI: 'chunked  N^1.98
    [1.95, 2.01]' ('N_k^1.02 [...]' for a decode series: `name`, tables.length_name); where the findings
    say the growth not measured (growth.says_nothing: two N, a CI too wide to say), no exponent either:
    'chunked  growth not measured (CI too wide to say)'; or '(fit n/a)'."""
    if fit is None or not fit.available:
        return f"{variant} (fit n/a)"
    why = says_nothing(fit.exponent, fit.ci_low, fit.ci_high, name)
    return f"{variant}  growth not measured ({why})" if why else f"{variant}  {name}^{fit.text()}"


SUSPECT, SUSPECT_LABEL = "suspect", "suspect (never ranked)"
DRIFT_LABEL = "drifted > 10% (machine or re-measured)"
THROTTLED_LABEL = "GPU clock fell > 10%"
# (row flag, legend label, edge colour, line style, ring size) of the cells a time plot rings: suspect
# (results.suspect), measured while the machine drifted or re-measured apart (results.drift), or while the
# GPU's SM clock fell
# (harness.measure.telemetry). Black and dark grey, solid, dashed and dotted: no variant's colour, and named
# in a legend of their own (ring_legend), apart from the variants'.
RINGS = (
    (SUSPECT, SUSPECT_LABEL, "#000000", "-", 11),
    ("drift", DRIFT_LABEL, "#333333", "--", 15),
    ("throttled", THROTTLED_LABEL, "#333333", ":", 19),
)
RING_FLAGS = tuple(r[0] for r in RINGS)


def _ring(ax, x, y, colour: str, style: str, size: float):
    """Hollow rings at (x, y), drawn as a scatter so that their edge may be dashed or dotted."""
    return ax.scatter(
        x, y, s=size**2, facecolors="none", edgecolors=colour, linestyles=style, linewidths=1.4, zorder=4
    )


def ring_cells(ax, rows, x: str, y: str, seen: set[str]) -> None:
    """Rings the flagged cells of one series at (x, y), columns of `rows` (RINGS: suspect, measured during
    drift, or on a throttled GPU), and adds their flags to `seen` for ring_legend: every figure that rings
    draws the same rings."""
    for flag, _label, colour, style, size in RINGS:
        marked = flagged(rows, flag)
        if len(marked):
            _ring(ax, floats(marked[x]), floats(marked[y]), colour, style, size)
            seen.add(flag)


def ring_legend(fig, seen: set[str]) -> None:
    """The rings' legend, below the figure and apart from every panel's variant legend."""
    rings = [r for r in RINGS if r[0] in seen]
    if not rings:
        return
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="none", marker="o", ms=9, mfc="none", mec=c, mew=1.4) for _, _, c, _, _ in rings
    ]
    for handle, (_, _, _, style, _) in zip(handles, rings, strict=True):
        handle._attnbench_ring_style = style  # noqa: SLF001 - read back by tests, not by matplotlib
    fig.legend(
        handles,
        [label for _, label, _, _, _ in rings],
        loc="outside lower center",
        ncol=len(rings),
        title="ringed cells",
        frameon=True,
        handler_map={h: _RingHandler(style) for h, (_, _, _, style, _) in zip(handles, rings, strict=True)},
    )


class _RingHandler:
    """Draws a legend's ring with its dashes (a Line2D marker's edge is always solid)."""

    def __init__(self, style: str):
        self.style = style

    def legend_artist(self, legend, orig_handle, fontsize, handlebox):
        from matplotlib.patches import Circle

        x0, y0, w, h = handlebox.xdescent, handlebox.ydescent, handlebox.width, handlebox.height
        circle = Circle(
            (x0 + w / 2, y0 + h / 2),
            radius=min(w, h) * 0.55,
            fill=False,
            edgecolor=orig_handle.get_markeredgecolor(),
            linestyle=self.style,
            linewidth=1.4,
            transform=handlebox.get_transform(),
        )
        handlebox.add_artist(circle)
        return circle


def _variant_lines(
    ax,
    rows,
    column: str,
    fits: Fits,
    which: int,
    band: tuple[str, str] | None = None,
    rings: set[str] | None = None,
) -> list[float]:
    """One line per ok variant of a panel, with an optional p25-p75 band; returns the y values plotted.
    With `rings` (a set), the flagged cells are ringed and their flags added to it: a time plot's."""
    ys: list[float] = []
    ok = ok_rows(rows).dropna(subset=[column])
    drawn = {}
    series = dict(iter(ok.groupby("variant", sort=False)))  # one filter of the wide rows, not one a variant
    for variant in variant_order(series):
        length = length_axis(series[variant])  # seq_k for a decode series
        drawn[variant] = (length, series[variant].sort_values(length))
    under = coincident({k: (floats(v[n]), floats(v[column])) for k, (n, v) in drawn.items()})
    for variant, (length, v) in drawn.items():
        n, y = floats(v[length]), floats(v[column])
        fit = fits.get(combo_key(v.iloc[0], variant), (None, None))[which]
        color = variant_color(variant)
        # a decode series' exponent is in its keys (N_k^1.02), as the decode figure says
        label = under_text(exponent_label(variant, fit, length_name(length)), under.get(variant))
        ax.plot(n, y, marker=variant_marker(variant), ms=4, lw=1.6, color=color, label=label)
        if band is not None:
            lo, hi = floats(v[band[0]]), floats(v[band[1]])
            ax.fill_between(n, lo, hi, color=color, alpha=0.2, lw=0)
        if rings is not None:
            ring_cells(ax, v, length, column, rings)
        ys.extend(y)
    return [y for y in ys if math.isfinite(y) and y > 0]


def _panel_lengths(group, rows) -> tuple[list[int], str]:
    """The x ticks of a panel and what they count: the group's seq_lens, or a decode panel's seq_k."""
    if length_axis(rows) == "seq_k":
        return [int(n) for n in rows["seq_k"].dropna().unique()], "seq_k"
    return [int(n) for n in group["seq_len"].dropna().unique()], "seq_len"


def length_xaxis(ax, lengths, length: str) -> None:
    """seq_axis, its label naming the keys N_k when the series grows seq_k."""
    seq_axis(ax, lengths)
    if length == "seq_k":
        ax.set_xlabel("keys N_k (K/V cache length, log₂ axis)")


GUIDES = ((1, "∝N"), (2, "∝N²"))
DECODE_GUIDES = ((1, "∝N_k"),)  # a decode step reads its K/V cache once: linear in N_k, never N_k²


def guides(ax, seq_lens: list[int], ys: list[float], powers=GUIDES) -> None:
    """Dashed lines of `powers` ((exponent, label), by default ∝N and ∝N²) from below the lowest point:
    the slopes a reader compares with, those the theory of the panel names."""
    if len(seq_lens) < 2 or not ys:
        return
    n0, n1 = min(seq_lens), max(seq_lens)
    y0 = min(ys) / 1.5
    for power, text in powers:
        y1 = y0 * (n1 / n0) ** power
        ax.plot([n0, n1], [y0, y1], ls="--", lw=1, color="#555555", alpha=0.7, zorder=0)
        ax.annotate(
            text,
            (n1, y1),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=9,
            color="#555555",
            va="center",
        )


def band_line(ax, x, y, lo, hi, variant: str, label: str) -> None:
    """One variant's line with its band between lo and hi (the workload panels' time and GB/s lines)."""
    color = variant_color(variant)
    ax.plot(x, y, marker=variant_marker(variant), ms=4, lw=1.6, color=color, label=label)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0)


def time_figure(group, fits: Fits, title: str):
    """Median time vs seq_len (log-log), p25–p75 band, fitted exponent in the legend, N and N² guides."""
    pans = panels(group)
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=5.0)
        seen: set[str] = set()
        for ax, (_key, ptitle, rows) in zip(axes, pans, strict=True):
            seq_lens, length = _panel_lengths(group, rows)
            band = ("time_ms_p25", "time_ms_p75")
            ys = _variant_lines(ax, rows, "time_ms_median", fits, 0, band=band, rings=seen)
            if ys:
                log_axis(ax)
                guides(ax, seq_lens, ys, DECODE_GUIDES if length == "seq_k" else GUIDES)
            else:
                empty_panel(ax, "no ok cells")
            length_xaxis(ax, seq_lens, length)
            ax.set_ylabel("time per call (ms, median; band p25–p75)")
            ax.set_title(ptitle)
            legend_below(ax, ncol=1)  # an exponent's CI, or why its growth was not measured: one column
        ring_legend(fig, seen)
        fig.suptitle(title)
    data = ok_rows(group)[
        keys_of(group)
        + ["time_ms_median", "time_ms_p25", "time_ms_p75", "rel_iqr", "noisy", "n_samples", "timing_mode"]
    ]
    return fig, data


def memory_figure(group, fits: Fits, title: str, device_mem: int | None):
    """Peak memory vs seq_len (log-log), fitted exponents, and the device's memory as a horizontal line."""
    pans = panels(group)
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=5.0)
        for ax, (_key, ptitle, rows) in zip(axes, pans, strict=True):
            seq_lens, length = _panel_lengths(group, rows)
            ys = _variant_lines(ax, rows, "peak_mem_bytes", fits, 1)
            if ys:
                hi = max(ys + ([device_mem] if device_mem else []))
                bytes_axis(ax, min(ys), hi)
                guides(ax, seq_lens, ys, DECODE_GUIDES if length == "seq_k" else GUIDES)
            else:
                empty_panel(ax, "no ok cells")
            if device_mem:
                ceiling_line(ax, device_mem, f"device memory {bytes_text(device_mem)}")
            length_xaxis(ax, seq_lens, length)
            ax.set_ylabel("peak memory (bytes, log₂ axis)")
            ax.set_title(ptitle)
            legend_below(ax, ncol=1)  # an exponent's CI, or why its growth was not measured: one column
        fig.suptitle(title)
    data = ok_rows(group)[keys_of(group) + ["peak_mem_bytes", "mem_method"]].assign(
        device_mem_bytes=device_mem
    )
    return fig, data


def throughput_figure(group, title: str, peak: float | None):
    """Achieved TFLOP/s vs seq_len; the run's calibrated matmul peak as a line, % of it on the right."""
    pans = panels(group)
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=4.6)
        for ax, (_key, ptitle, rows) in zip(axes, pans, strict=True):
            seq_lens, length = _panel_lengths(group, rows)
            ok = ok_rows(rows).dropna(subset=["tflops"])
            for variant in variant_order(ok["variant"].unique()):
                v = ok[ok["variant"] == variant].sort_values(length)
                ax.plot(
                    floats(v[length]),
                    floats(v["tflops"]),
                    marker=variant_marker(variant),
                    ms=4,
                    color=variant_color(variant),
                    label=variant,
                )
            if ok.empty:
                empty_panel(ax, "no ok cells")
            if peak:
                ax.axhline(
                    peak, color="black", lw=1.2, ls="--", label=f"calibrated matmul peak {peak:.3g} TFLOP/s"
                )
                sec = ax.secondary_yaxis(
                    "right", functions=(lambda t, p=peak: t / p * 100, lambda pct, p=peak: pct * p / 100)
                )
                sec.set_ylabel("% of calibrated peak")
            ax.set_ylim(bottom=0)
            length_xaxis(ax, seq_lens, length)
            ax.set_ylabel("achieved TFLOP/s")
            ax.set_title(ptitle)
            legend_below(ax)
        fig.suptitle(title)
    data = ok_rows(group)[keys_of(group) + ["flops", "tflops"]].assign(peak_tflops=peak)
    if peak:
        data = data.assign(peak_fraction=data["tflops"].astype(float) / peak)
    return fig, data


def _grid_panels(group, n_rows: int) -> tuple[Any, list]:
    pans = panels(group)
    n_seq = group["seq_len"].nunique()
    ncols = 2 if len(pans) > 1 and n_seq <= 8 else 1
    return new_figure(len(pans), ncols=ncols, panel_h=1.0 + 0.42 * max(n_rows, 2), width=11.0), pans


def _cell_font(group) -> float:
    """Annotation size in heat-map cells: smaller when many seq_lens share a panel's width."""
    return 8.0 if group["seq_len"].nunique() <= 6 else 7.0


def speedup_figure(group, title: str, baseline: str):
    """Heat map over variant × seq_len of baseline time / variant time (>1: faster than the baseline)."""
    import numpy as np
    import pandas as pd
    from matplotlib.colors import TwoSlopeNorm

    from .tables import speedups

    sp = speedups(group, baseline)
    names = [v for v in variant_order(group["variant"].unique()) if v != baseline]
    length = length_axis(group)  # a decode group's columns are its seq_k
    seq_lens = sorted(int(n) for n in group[length].dropna().unique())
    finite = np.log2(sp["speedup"].to_numpy(dtype=float)) if len(sp) else np.array([0.0])
    lim = float(min(max(np.nanmax(np.abs(finite)), 1.0), 6.0))
    norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
    with mpl_style():
        (fig, axes), pans = _grid_panels(group, len(names))
        image = None
        for ax, (key, ptitle, rows) in zip(axes, pans, strict=True):
            grid = np.full((len(names), len(seq_lens)), np.nan)
            cell = sp
            for axis, value in key.items():
                cell = cell[cell[axis] == value]
            for _, r in cell.iterrows():
                if r["variant"] in names:
                    i, j = names.index(r["variant"]), seq_lens.index(int(r[length]))
                    grid[i, j] = math.log2(r["speedup"])
            image = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto")
            stat = statuses_of(rows, length)
            for i, v in enumerate(names):
                for j, n in enumerate(seq_lens):
                    if math.isfinite(grid[i, j]):
                        s = 2 ** grid[i, j]
                        unit = "×" if len(seq_lens) <= 6 else ""  # narrow cells: the colour bar has the unit
                        ax.text(
                            j,
                            i,
                            f"{s:.2g}{unit}",
                            ha="center",
                            va="center",
                            fontsize=_cell_font(group),
                            color="white" if abs(grid[i, j]) > lim * 0.6 else "black",
                        )
                    else:
                        ax.text(
                            j,
                            i,
                            stat.get((v, n), "–") if stat.get((v, n)) != "ok" else "no base",
                            ha="center",
                            va="center",
                            fontsize=_cell_font(group) - 1,
                            color="#777777",
                        )
            ax.set_xticks(range(len(seq_lens)), [seq_text(n) for n in seq_lens])
            ax.set_yticks(range(len(names)), names)
            ax.set_xlabel(LENGTH_LABEL[length])
            ax.set_title(ptitle)
            ax.grid(False)
        if image is not None:
            ticks = [t for t in range(-int(lim), int(lim) + 1)]
            cb = fig.colorbar(image, ax=axes, shrink=0.8, ticks=ticks)
            cb.ax.set_yticklabels([ratio_text(2.0**t) for t in ticks])
            cb.set_label(f"speed-up over {baseline} (log scale)")
        fig.suptitle(title)
    data = pd.DataFrame(sp)
    data = data.drop(columns=quiet_columns(data))  # device_group, model: named only where not '' (tables)
    if "seq_k" in data.columns and not is_decode(data["seq_len"], data["seq_k"]).any():
        data = data.drop(columns=["seq_k"])  # named only where some cell's keys are not its queries
    return fig, data


def ratio_text(r: float) -> str:
    """A colour bar's speed-up tick: '1/64×' below 1 (not '0.015625×'), '4×' above."""
    return f"1/{1 / r:.3g}×" if r < 1 else f"{r:.3g}×"


def statuses_of(rows, length: str = "seq_len") -> dict[tuple[str, int], str]:
    """(variant, seq_len) -> status within one panel ((variant, seq_k) for a decode group)."""
    return {
        (str(r["variant"]), int(r[length])): str(r["status"])
        for _, r in rows.iterrows()
        if present(r[length])
    }


def status_figure(group, title: str):
    """Which cells were ok, wrong, oom, skipped, unsupported, crashed: variant × seq_len per panel."""
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = variant_order(group["variant"].unique())
    length = length_axis(group)  # a decode group's columns are its seq_k
    seq_lens = sorted(int(n) for n in group[length].dropna().unique())
    known = list(STATUS_COLORS)
    cmap = ListedColormap([STATUS_COLORS[s] for s in known] + ["#ffffff"])
    seen: set[str] = set()
    with mpl_style():
        (fig, axes), pans = _grid_panels(group, len(names))
        for ax, (_key, ptitle, rows) in zip(axes, pans, strict=True):
            stat = statuses_of(rows, length)
            grid = np.full((len(names), len(seq_lens)), len(known))
            for (v, n), s in stat.items():
                if v in names and n in seq_lens:
                    grid[names.index(v), seq_lens.index(n)] = known.index(s) if s in known else len(known)
                    seen.add(s)
            ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(known) + 0.5, aspect="auto")
            for (v, n), s in stat.items():
                if v in names and n in seq_lens and s != "ok":  # green needs no word; the exceptions do
                    dark = s in ("wrong", "oom", "crashed")
                    ax.text(
                        seq_lens.index(n),
                        names.index(v),
                        s[:11],
                        ha="center",
                        va="center",
                        fontsize=_cell_font(group) - 1,
                        color="white" if dark else "black",
                    )
            ax.set_xticks(range(len(seq_lens)), [seq_text(n) for n in seq_lens])
            ax.set_yticks(range(len(names)), names)
            ax.set_xlabel(LENGTH_LABEL[length])
            ax.set_title(ptitle)
            ax.grid(False)
        handles = [
            Patch(facecolor=STATUS_COLORS[s], edgecolor="#999999", label=s) for s in known if s in seen
        ]
        if handles:
            fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 8), frameon=False)
        fig.suptitle(title)
    data = group[keys_of(group) + ["status", "message"]]
    return fig, data


def numerics_figure(probe: list[dict[str, Any]], title: str):
    """rel_err against float64 per variant as q (and so every logit) is scaled by 1, 10, 100; one panel per
    device and dtype. Non-finite outputs sit on a marked band above the finite ones. A quantising variant's
    rel_err is its kernel's against its rounded inputs: its end-to-end error against the inputs as made
    (results.formulas.record_e2e_rel_err, the data's e2e_rel_err column) is drawn beside it, dotted."""
    import pandas as pd

    df = pd.DataFrame(probe)
    for col in ("variant", "device", "dtype", "q_scale", "status", "rel_err", "tolerance", "message"):
        if col not in df.columns:
            df[col] = None
    e2e = [record_e2e_rel_err(rec) for rec in probe]
    if any(e is not None for e in e2e):  # only where a variant rounds: the CSV of any other run as it was
        df.insert(df.columns.get_loc("rel_err") + 1, "e2e_rel_err", pd.array(e2e, dtype="Float64"))
    measured = df[df["status"].isin(["ok", "wrong"])].copy()
    measured["rel_err"] = pd.to_numeric(measured["rel_err"], errors="coerce").astype(float)
    keys = sorted({(str(d), str(t)) for d, t in zip(df["device"], df["dtype"], strict=True)})
    with mpl_style():
        fig, axes = new_figure(len(keys), panel_h=4.8)
        for ax, (device, dtype) in zip(axes, keys, strict=True):
            here = (measured["device"].astype(str) == device) & (measured["dtype"].astype(str) == dtype)
            sub = measured[here]
            finite = sub["rel_err"][sub["rel_err"].map(math.isfinite) & (sub["rel_err"] > 0)]
            top = float(finite.max()) if len(finite) else 1.0
            bad_y = max(top * 30, 10.0)  # where non-finite results are drawn
            names = variant_order(sub["variant"].astype(str).unique())
            for i, variant in enumerate(names):
                v = sub[sub["variant"].astype(str) == variant].sort_values("q_scale")
                jitter = 2 ** (0.06 * (i - (len(names) - 1) / 2))  # so equal errors do not hide each other
                x = [float(s) * jitter for s in v["q_scale"]]
                y = [
                    e if math.isfinite(e) and e > 0 else (bad_y if not math.isfinite(e) else 1e-12)
                    for e in v["rel_err"]
                ]
                ax.plot(
                    x, y, marker=variant_marker(variant), ms=5, color=variant_color(variant), label=variant
                )
                rounded = v["e2e_rel_err"].dropna().astype(float) if "e2e_rel_err" in v else []
                if len(rounded):  # end to end: the rounding's error with the kernel's
                    at = [float(s) * jitter for s in v.loc[rounded.index, "q_scale"]]
                    ax.plot(at, list(rounded), ls=":", marker=variant_marker(variant), ms=4, mfc="none",
                            color=variant_color(variant), label=f"{variant}, end to end")  # fmt: skip
            if len(sub):
                log_axis(ax)
                log_axis(ax, "x")
                ax.axhspan(bad_y / 3, bad_y * 3, color="#f4cccc", alpha=0.6, zorder=0)
                ax.annotate(
                    "non-finite (inf / NaN)",
                    (0.01, bad_y * 3),
                    xycoords=("axes fraction", "data"),
                    xytext=(0, -3),
                    textcoords="offset points",
                    va="top",
                    fontsize=8,
                )
                tol = pd.to_numeric(sub["tolerance"], errors="coerce").dropna()
                if len(tol):
                    ax.axhline(
                        float(tol.max()), color="black", ls="--", lw=1, label=f"tolerance {tol.max():g}"
                    )
                scales = sorted({float(s) for s in sub["q_scale"]})
                ax.set_xticks(scales, [f"×{number_text(s)}" for s in scales])
                ax.set_xlim(min(scales) / 2, max(scales) * 2)
            else:
                empty_panel(ax, "no variant measured")
            ax.set_xlabel("q scale (logits grow by the same factor)")
            ax.set_ylabel("relative error vs float64")
            ax.set_title(f"{device} · {dtype}")
            legend_below(ax, ncol=3)
        fig.suptitle(title)
    return fig, df


def weights_figure(example: dict[str, Any], title: str):
    """The softmax weights of a small example with its causal and key-padding masks (a sanity view)."""
    import numpy as np
    import pandas as pd

    w = np.asarray(example.get("weights") or [[0.0]], dtype=float)
    n_q, n_k = w.shape
    valid = example.get("valid_keys")
    with mpl_style():
        fig, (ax,) = new_figure(1, panel_h=5.2, width=7.5)
        masked = np.ma.masked_where(w == 0, w)  # exactly zero: a masked position, drawn in grey
        cmap = _viridis_with_grey()
        image = ax.imshow(masked, cmap=cmap, vmin=0, vmax=max(float(w.max()), 1e-9), interpolation="nearest")
        if isinstance(valid, (int, float)) and 0 < valid < n_k:
            ax.axvline(valid - 0.5, color="#d62728", lw=1.5, ls="--")
            ax.text(
                (valid - 0.5 + n_k - 0.5) / 2,
                n_q / 2,
                f"keys ≥ {int(valid)}: padding",
                rotation=90,
                ha="center",
                va="center",
                color="#d62728",
                fontsize=10,
            )
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.grid(False)
        cb = fig.colorbar(image, ax=ax, shrink=0.85)
        cb.set_label("attention weight (grey: masked, exactly 0)")
        causal = "causal" if example.get("causal") else "non-causal"
        ax.set_title(f"{n_q}×{n_k}, {causal}, {int(valid) if valid is not None else n_k} valid keys")
        fig.suptitle(title)
    data = pd.DataFrame(w, columns=[f"k{j}" for j in range(n_k)]).rename_axis("query").reset_index()
    return fig, data


def _viridis_with_grey():
    import matplotlib

    return matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")


def compare_figure(table, title: str, label_a: str, label_b: str, threshold: float | None = None):
    """Time ratio B/A per cell vs seq_len, one line per variant, with its 95% CI (results.judge); filled
    markers: a verdict of faster or slower, hollow: same or ambiguous."""
    from .tables import PANEL_AXES, label, varying

    axes_vary = varying(table, ["dtype", "pass", *PANEL_AXES]) if len(table) else []
    keyed = list(table.groupby(axes_vary, dropna=False, sort=True)) if axes_vary else [((), table)]
    with mpl_style():
        fig, axes = new_figure(len(keyed), panel_h=4.6)
        for ax, (values, rows) in zip(axes, keyed, strict=True):
            values = values if isinstance(values, tuple) else (values,)
            ok = rows.dropna(subset=["ratio"])
            for variant in variant_order(ok["variant"].unique()):
                v = ok[ok["variant"] == variant].sort_values("seq_len")
                color = variant_color(variant)
                n, r = floats(v["seq_len"]), floats(v["ratio"])
                ax.plot(n, r, color=color, lw=1.4)
                # the legend's entry: the line with the variant's marker, as the points below draw it (a
                # marker on the line itself would fill the hollow points of same and ambiguous cells)
                ax.plot([], [], color=color, lw=1.4, marker=variant_marker(variant), ms=6, label=variant)
                lo, hi = floats(v["ratio_ci_low"]), floats(v["ratio_ci_high"])
                for x, y, verdict, a, b in zip(n, r, v["verdict"], lo, hi, strict=True):
                    if math.isfinite(a) and math.isfinite(b):  # the judge's CI of the ratio
                        ax.plot([x, x], [a, b], color=color, lw=1, alpha=0.6)
                    ax.plot(
                        [x],
                        [y],
                        marker=variant_marker(variant),
                        ms=6,
                        color=color,
                        mfc=color if verdict in ("faster", "slower") else "white",
                    )
            ax.axhline(1.0, color="black", lw=1)
            if threshold is not None:
                ax.axhline(
                    1 + threshold, color="#d62728", ls="--", lw=1, label=f"fail above {1 + threshold:g}×"
                )
            if ok.empty:
                empty_panel(ax, "no cells ok in both runs")
            else:
                ratios = [
                    x
                    for x in floats(ok["ratio"]) + floats(ok["ratio_ci_low"]) + floats(ok["ratio_ci_high"])
                    if math.isfinite(x) and x > 0
                ]
                ratio_axis(ax, min(ratios), max(max(ratios), 1 + (threshold or 0)))
            seq_axis(ax, rows["seq_len"].dropna().unique())
            ax.set_ylabel("time ratio B/A (>1: B slower)")
            title_p = label(dict(zip(axes_vary, values, strict=True))) if axes_vary else "all matched cells"
            ax.set_title(title_p)
            legend_below(ax, ncol=3)
        fig.suptitle(
            f"{title}\nA = {label_a}\nB = {label_b}\n"
            "filled marker: faster or slower (significant, CI excludes 1); hollow: same or ambiguous"
        )
    return fig, table
