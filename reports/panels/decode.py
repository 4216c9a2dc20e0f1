"""The decode panel: cells with N_k ≠ N_q, bound by reading the K/V cache; time and K/V GB/s against N_k."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from attnbench.results.formulas import bytes_text, gbps, is_decode, ratio_number, ratio_spread

from .. import fit as fitmod
from .. import page as pg
from ..plots import (
    DECODE_GUIDES,
    Fits,
    band_line,
    exponent_label,
    floats,
    guides,
    keys_of,
    length_xaxis,
    ring_cells,
    ring_legend,
)
from ..section import Section, file_stem, group_head, ms_text, num_text, panel_section, rate_text, seq_count
from ..style import ceiling_line, empty_panel, legend_below, log_axis, mpl_style, new_figure, variant_order
from ..tables import (
    COMBO_AXES,
    PANEL_AXES,
    axis_value,
    calibrated_copy,
    grouped,
    groups,
    label,
    length_name,
    ok_rows,
    panels,
    present,
    varying,
)

DECODE_RULE = (
    "Decode cells (N_q queries against N_k ≠ N_q keys) read the whole K/V cache for a few queries: they are "
    "bound by memory, not FLOPs. K/V GB/s is kv_bytes (B · H_kv · N_k · (d_k + d_v) · itemsize, K and V "
    "each read once) over the median time, its band from the p25 and p75 times, on a log axis; the dashed "
    "line is the device's calibrated copy bandwidth. Time is fitted against N_k as every series is (the "
    "scaling table's fit: one exponent per series in every figure, table and sentence); cells measured while "
    "the machine drifted are ringed (dashed), as in the time figure."
)
DECODE_PANEL_AXES = (*PANEL_AXES, "seq_len")  # a decode series holds N_q fixed: one panel per N_q


# ---- rows and numbers ----------------------------------------------------------------------------------


def decode_rows(df):
    """Rows whose keys are not their queries (results.formulas.is_decode): a decode step reads a K/V cache
    of N_k keys for a few queries."""
    if "seq_k" not in df.columns:
        return df.iloc[:0]
    return df[is_decode(df["seq_len"], df["seq_k"])]


def kv_rates(rows):
    """ok rows with their K/V read bandwidth: kv_gbps (kv_bytes / median time) and its spread, kv_gbps_lo
    and kv_gbps_hi (kv_bytes over the p75 and p25 times)."""
    ok = ok_rows(rows).dropna(subset=["time_ms_median", "kv_bytes"]).copy()

    def rate(col: str) -> list[float]:
        pairs = zip(ok["kv_bytes"], ok[col], strict=True)
        return [gbps(float(b), float(t)) if present(t) else math.nan for b, t in pairs]

    ok["kv_gbps"] = rate("time_ms_median")
    ok["kv_gbps_lo"], ok["kv_gbps_hi"] = rate("time_ms_p75"), rate("time_ms_p25")
    return ok


def decode_table(rows, copy_gbps: float | None):
    """Per series (combination, N_q, variant): its largest N_k with the K/V GB/s reached there, the
    percentage of the calibrated copy bandwidth (NaN when the device has none) and the decode tokens/s
    (B · N_q over the median time: the row's tokens_per_s, NaN in a run before it); indexed by that cell's
    label in `rows`."""
    import pandas as pd

    rated = kv_rates(rows)
    records, labels = [], []
    for key, sub in grouped(rated, [*COMBO_AXES, "seq_len", "variant"]):
        top = sub.sort_values("seq_k").iloc[-1]
        rate = float(top["kv_gbps"])
        labels.append(top.name)
        records.append(
            {
                **key,
                "seq_k": int(top["seq_k"]),
                "kv_bytes": int(top["kv_bytes"]),
                "time_ms_median": float(top["time_ms_median"]),
                "kv_gbps": rate,
                "copy_gbps": copy_gbps,
                "pct_of_copy": rate / copy_gbps * 100 if copy_gbps else math.nan,
                "tokens_per_s": float(top["tokens_per_s"]) if present(top.get("tokens_per_s")) else math.nan,
            }
        )
    cols = [*COMBO_AXES, "seq_len", "variant", "seq_k", "kv_bytes", "time_ms_median", "kv_gbps"]
    return pd.DataFrame(records, columns=[*cols, "copy_gbps", "pct_of_copy", "tokens_per_s"], index=labels)


def kv_sentence(rows, copy_gbps: float | None) -> tuple[str | None, list[Any]]:
    """The decode figure of merit in words, for one panel's rows: each variant's K/V read bandwidth at its
    largest N_k (decode_table), the fastest first, with its % of the calibrated copy bandwidth where the
    device has one ('At N_k = 4,096 (N_q = 1), K/V is read at: paged_gather 12.3 GB/s, 45% of the calibrated
    copy bandwidth (27.4 GB/s); paged_flex 8.1 GB/s, 30%.'); and the index labels of the rows it reads (for
    the findings' busy-machine mark). None where the panel has no ok decode cell."""
    table = decode_table(decode_rows(rows), copy_gbps)
    said = []
    for n_q, tops in table.groupby("seq_len", sort=True):
        tops = tops.sort_values("kv_gbps", ascending=False)
        same = tops["seq_k"].nunique() == 1
        parts = []
        for i, (_, r) in enumerate(tops.iterrows()):
            part = f"{r['variant']} {num_text(r['kv_gbps'], '.3g')} GB/s"
            part += "" if same else f" at N_k = {seq_count(r['seq_k'])}"
            if copy_gbps:
                pct = f"{num_text(r['pct_of_copy'], '.2g')}%"
                part += (
                    f", {pct} of the calibrated copy bandwidth ({num_text(copy_gbps, '.3g')} GB/s)"
                    if not i
                    else f", {pct}"
                )
            parts.append(part)
        where = f"N_k = {seq_count(tops['seq_k'].iloc[0])}" if same else "each variant's largest N_k"
        said.append(f"At {where} (N_q = {int(n_q)}), K/V is read at: {'; '.join(parts)}.")
    return (" ".join(said) or None), list(table.index)


def page_sentences(rows) -> list[tuple[str, list[Any]]]:
    """Page size in words, for one group's rows: per N_q (and any other panel axis that varies), at the
    largest N_k every page size measured, each variant's K/V GB/s in its fastest page size against its
    slowest ('At N_k = 4,096 (N_q = 1), by page size: paged_flex reads K/V 2.5× faster in pages of 256 than
    of 32; paged_gather 1.33× faster in pages of 32 than of 256.'; 'as fast in pages of 32 as of 256 (within
    the spread)' where the two cells are not told apart), the ratio in the digits the two cells' spread
    supports (results.formulas.ratio_number); with the index labels of the rows each sentence compares, for
    the findings' busy-machine mark. [] where fewer than two page sizes ran ok."""
    from attnbench.results.judge import separated

    if "page_size" not in rows.columns:
        return []
    rated = kv_rates(decode_rows(rows))
    rated = rated[rated["page_size"].fillna(0).astype(int) > 0]
    if rated["page_size"].nunique() < 2:
        return []
    others = varying(rated, [a for a in PANEL_AXES if a != "page_size"])
    out = []
    for key, sub in grouped(rated, [*others, "seq_len"]):
        # the largest N_k every page size of the panel reached: one N_k, so the K/V bytes are the same
        n_ks = set.intersection(*(set(p["seq_k"]) for _, p in sub.groupby("page_size")))
        if not n_ks or sub["page_size"].nunique() < 2:
            continue
        at = sub[sub["seq_k"] == max(n_ks)]
        parts, labels = [], []
        for variant in variant_order(at["variant"].unique()):
            v = at[at["variant"] == variant].sort_values("kv_gbps", ascending=False)
            if v["page_size"].nunique() < 2:
                continue
            fast, slow = v.iloc[0], v.iloc[-1]
            labels += [v.index[0], v.index[-1]]
            pages = f"pages of {int(fast['page_size']):,} than of {int(slow['page_size']):,}"
            if separated(fast, slow):
                ratio = float(fast["kv_gbps"]) / float(slow["kv_gbps"])
                shown = ratio_number(ratio, ratio_spread(fast.get("rel_iqr"), slow.get("rel_iqr")))
                parts.append(f"{variant} reads K/V {shown}× faster in {pages}")
            else:
                small, large = sorted((int(fast["page_size"]), int(slow["page_size"])))
                parts.append(
                    f"{variant} reads K/V as fast in pages of {small:,} as of {large:,} (within the spread)"
                )
        if parts:
            where = f"N_k = {seq_count(max(n_ks))} (N_q = {int(key['seq_len'])})"
            shape = {a: key[a] for a in others}
            where += f", {label(shape).replace(' · ', ', ')}" if shape else ""
            out.append((f"At {where}, by page size: {'; '.join(parts)}.", labels))
    return out


# ---- figures -------------------------------------------------------------------------------------------


def decode_time_figure(rows, title: str, fits: Fits | None = None):
    """Median time against N_k (log-log) per decode series, p25–p75 band, exponent against N_k in the
    legend (`fits`: fit.fit_index of the report's scaling table, the one fit of each series that the time
    figure, the table and the findings give; made from `rows` where not given), cells flagged drifted,
    suspect or throttled ringed as in the time figure, and the ∝N_k guide (a decode step reads its cache
    once: no N² term to compare with)."""
    ok = ok_rows(rows).dropna(subset=["time_ms_median"])
    pans = panels(rows, DECODE_PANEL_AXES)
    fits = fitmod.fit_index(fitmod.scaling_table(rows, {})) if fits is None else fits
    seen: set[str] = set()
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=4.8)
        for ax, (_key, ptitle, prow) in zip(axes, pans, strict=True):
            pok = ok_rows(prow).dropna(subset=["time_ms_median"])
            ys: list[float] = []
            for variant in variant_order(pok["variant"].unique()):
                v = pok[pok["variant"] == variant].sort_values("seq_k")
                fit = fits.get(fitmod.combo_key(v.iloc[0], variant), (None, None))[0]
                band_line(
                    ax,
                    floats(v["seq_k"]),
                    floats(v["time_ms_median"]),
                    floats(v["time_ms_p25"]),
                    floats(v["time_ms_p75"]),
                    variant,
                    exponent_label(variant, fit, length_name("seq_k")),
                )
                ring_cells(ax, v, "seq_k", "time_ms_median", seen)
                ys += [y for y in floats(v["time_ms_median"]) if math.isfinite(y) and y > 0]
            n_ks = [int(n) for n in prow["seq_k"].dropna().unique()]
            if ys:
                log_axis(ax)
                guides(ax, n_ks, ys, DECODE_GUIDES)
            else:
                empty_panel(ax, "no ok cells")
            length_xaxis(ax, n_ks, "seq_k")
            ax.set_ylabel("time per call (ms, median; band p25–p75)")
            ax.set_title(ptitle or "decode")
            legend_below(ax, ncol=1)  # an exponent's CI, or why its growth was not measured: one column
        ring_legend(fig, seen)
        fig.suptitle(title)
    data = ok[keys_of(rows) + ["time_ms_median", "time_ms_p25", "time_ms_p75", "n_samples"]]
    return fig, data


def kv_bandwidth_figure(rows, title: str, copy_gbps: float | None):
    """K/V bytes read per second against N_k (log axis), band from the p25–p75 times, and the calibrated
    copy bandwidth as a labelled line (dotted: 10% and 1% of it): how close a decode step gets to memory
    speed. Log, because kernels a hundred times apart share a panel: on a linear axis up to the ceiling the
    slow one lies flat at 0."""
    rated = kv_rates(rows)
    pans = panels(rows, DECODE_PANEL_AXES)
    every = [y for y in floats(rated["kv_gbps_lo"]) + floats(rated["kv_gbps"]) if math.isfinite(y) and y > 0]
    seen: set[str] = set()
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=4.8)
        for ax, (key, ptitle, _prow) in zip(axes, pans, strict=True):
            sel = rated
            for axis, value in key.items():
                sel = sel[sel[axis] == value]
            for variant in variant_order(sel["variant"].unique()):
                v = sel[sel["variant"] == variant].sort_values("seq_k")
                x = floats(v["seq_k"])
                band_line(ax, x, floats(v["kv_gbps"]), floats(v["kv_gbps_lo"]), floats(v["kv_gbps_hi"]),
                          variant, variant)  # fmt: skip
                ring_cells(ax, v, "seq_k", "kv_gbps", seen)
            rates = [
                y for y in floats(sel["kv_gbps_lo"]) + floats(sel["kv_gbps"]) if math.isfinite(y) and y > 0
            ]
            if sel.empty:
                empty_panel(ax, "no ok cells")
            if copy_gbps:
                ceiling_line(ax, copy_gbps, f"calibrated copy bandwidth {copy_gbps:,.0f} GB/s", ls="--")
            if rates:  # log: a kernel at 1% of the ceiling is as readable as one at 80%
                log_axis(ax)
                top = max([*every, copy_gbps or 0.0])
                ax.set_ylim(min(every) / 2, top * 2)  # one range in every panel
                for pct in (10, 1) if copy_gbps else ():  # on a log axis, % of the ceiling as lines
                    level = copy_gbps * pct / 100
                    if level >= min(every) / 2:
                        ax.axhline(level, color="#888888", lw=0.8, ls=":")
                        ax.annotate(f"{pct}% of copy", (0.99, level), xycoords=("axes fraction", "data"),
                                    xytext=(0, 2), textcoords="offset points", ha="right", fontsize=8,
                                    color="#555555")  # fmt: skip
            length_xaxis(ax, [int(n) for n in _prow["seq_k"].dropna().unique()], "seq_k")
            ax.set_ylabel("K/V read GB/s (kv_bytes / median time)")
            ax.set_title(ptitle or "decode")
            legend_below(ax)
        ring_legend(fig, seen)
        fig.suptitle(title)
    data = rated[keys_of(rows) + ["kv_bytes", "time_ms_median", "kv_gbps", "kv_gbps_lo", "kv_gbps_hi"]]
    return fig, data.assign(copy_gbps=copy_gbps)


# ---- the page's blocks ---------------------------------------------------------------------------------


def _kv_table(group, copy: float | None) -> pg.Table:
    """The K/V GB/s, % of the copy bandwidth and tokens/s at each series' largest N_k (decode_table)."""
    table = decode_table(group, copy)
    shown = varying(table, [*PANEL_AXES, "seq_len"])
    rows = tuple(
        (
            str(r["variant"]),
            *[axis_value(a, r[a]) for a in shown],
            seq_count(r["seq_k"]),
            bytes_text(float(r["kv_bytes"])),
            ms_text(r["time_ms_median"]),
            num_text(r["kv_gbps"], ".3g"),
            f"{num_text(r['pct_of_copy'], '.3g')}%" if present(copy) else "no calibration",
            rate_text(r["tokens_per_s"]),
        )
        for _, r in table.iterrows()
    )
    copy_text = f"{copy:.3g} GB/s" if copy else "not calibrated"
    return pg.Table(
        ("variant", *shown, "largest N_k", "K/V bytes", "median time", "K/V GB/s", "% of copy", "tokens/s"),
        rows,
        f"K/V bandwidth at each series' largest N_k; calibrated copy bandwidth {copy_text}; tokens/s: the "
        "decode step's B · N_q tokens over its median time",
    )


def drawn(df, metas: dict[str, dict[str, Any]], multi: bool = False) -> list[tuple[dict, Any, str, list]]:
    """Per group of decode cells: (key, rows, title, its figures drawn and not yet saved, each (file kind,
    figure title, (figure, data), caption)): what section saves and attnbench.Run.plot('decode') shows."""
    dec = decode_rows(df)
    if dec.empty:
        return []
    # each series' one fit, as the time figure, the scaling table and the findings read it
    fits = fitmod.fit_index(fitmod.scaling_table(dec, metas))
    out = []
    for gkey, group in groups(dec):
        copy = copy_of(gkey, group, metas)
        head = group_head(gkey, group, multi)
        figs = [
            (
                "decode-time",
                "Decode time vs N_k",
                decode_time_figure(group, f"Decode time per call · {head}", fits),
                "Median time with its p25–p75 band against the K/V cache length; legend: the fitted "
                "exponent in N_k (the scaling table's); rings: drifted, suspect or throttled cells.",
            ),
            (
                "decode-kv-gbps",
                "Decode K/V GB/s vs N_k",
                kv_bandwidth_figure(group, f"K/V read bandwidth · {head}", copy),
                "kv_bytes / median time (band: p25–p75 times); dashed: calibrated copy bandwidth; rings: "
                "drifted, suspect or throttled cells.",
            ),
        ]
        out.append((gkey, group, head, figs))
    return out


def copy_of(gkey: dict[str, Any], group, metas: dict[str, dict[str, Any]]) -> float | None:
    """The calibrated copy bandwidth of a group's device (tables.calibrated_copy)."""
    meta = metas.get(str(gkey["run_id"]), {})
    return calibrated_copy(meta, str(gkey["device"]), list(group["where"].dropna().unique()))


def section(df, metas: dict[str, dict[str, Any]], out: Path) -> Section:
    """Decode: time and K/V GB/s against N_k per group among the figures (drawn); the GB/s at each series'
    largest N_k among the tables."""
    multi = len(metas) > 1
    groups_drawn = drawn(df, metas, multi)
    if not groups_drawn:
        return Section()
    return panel_section(
        [pg.Heading("Decode: time and K/V bandwidth against N_k"), pg.Para(DECODE_RULE)],
        [pg.Heading("Decode: K/V bandwidth at each series' largest N_k")],
        groups_drawn,
        out,
        lambda gkey, group: _kv_table(group, copy_of(gkey, group, metas)),
        lambda gkey: file_stem(gkey, multi),
    )
