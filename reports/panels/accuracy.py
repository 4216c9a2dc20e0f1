"""The speed-against-accuracy panel: TFLOP/s against rel_err to float64, one point per variant and dtype, so
that a kernel that is faster but less accurate (or fast and wrong) shows at a glance.

A quantising variant (FP8: its row has a quant_recipe) is gated on its kernel alone, against the float64
reference of its rounded inputs; here it is drawn where a user stands, at its error against float64 of the
inputs it was given (results.formulas.end_to_end_rel_err, from its sqnr_db), with a line back to its
kernel's error: the length of that line is what the rounding costs."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from attnbench.results.formulas import GRAD_TOLERANCE_FACTOR, end_to_end_rel_err, tolerance

from .. import page as pg
from ..plots import floats, keys_of, ring_cells, ring_legend
from ..section import Section, file_stem, group_head, num_text, panel_section, seq_count
from ..style import (
    empty_panel,
    log_axis,
    mpl_style,
    new_figure,
    number_text,
    variant_color,
    variant_order,
)
from ..tables import (
    GROUP_AXES,
    PANEL_AXES,
    approximate_names,
    approximate_text,
    axis_value,
    best_variant,
    common_length_name,
    flag_mask,
    grouped,
    kernel_members,
    length_axis,
    length_name,
    panels,
    present,
    tied_names,
    varying,
)

ACCURACY_RULE = (
    "Speed against accuracy: one point per variant and dtype, the cell at the largest N that variant was "
    "measured at in that dtype (ok or wrong; a point from a smaller N than its panel's largest is labelled "
    "with its N). Across: the forward output's rel_err against float64 (log axis), the error the float64 "
    "gate judges; up: its TFLOP/s (a decode cell's K/V GB/s), one scale in every panel. Each dtype's "
    "marker, and its tolerance as a vertical line: a hollow point failed the gate, and one right of its "
    "dtype's line failed it on this error. Up and to the left is fast and accurate; a point up and to the "
    "right is fast and less accurate. A quantising variant (FP8, labelled with its recipe) is drawn at its "
    "error against float64 of the inputs it was given, end to end, with a line back to its kernel's error "
    "against its rounded inputs, which is what the gate judges: the line's length is what the rounding "
    "costs. A variant declared approximate (random features, low rank, sparsity) is held to its declared "
    "bound instead of its dtype's tolerance, and labelled with it (approximate ≤ R): a filled point right "
    "of its dtype's line."
)
# marker per dtype (the colour is the variant's); a dtype not listed gets OTHER_MARKER
DTYPE_MARKERS = {"float64": "D", "float32": "o", "float16": "s", "bfloat16": "^"}
DTYPE_LINES = {"float64": ":", "float32": "--", "float16": "-.", "bfloat16": (0, (6, 2, 1, 2, 1, 2))}
OTHER_MARKER = "v"
FIGURE_AXES = [a for a in GROUP_AXES if a != "dtype"]  # one figure holds every dtype of a group
POINT_COLUMNS = [
    "tflops", "e2e_rel_err", "rel_err", "grad_rel_err", "tolerance", "status", "failing", "quant_recipe",
    "quant_rel_err", "sqnr_db", "approximate",
]  # fmt: skip
WORTH_SAYING = 2.0  # the fastest's error over the most accurate's that a finding names


# ---- rows and points -----------------------------------------------------------------------------------


def measured_rows(df):
    """The rows a point may be: ok or wrong (measured: wrong cells are timed too), not suspect, with a
    positive TFLOP/s and a rel_err (infinite where the output was not finite)."""
    if "rel_err" not in df.columns or df.empty:
        return df.iloc[:0]
    timed = df[df["status"].isin(["ok", "wrong"]).fillna(False) & ~flag_mask(df, "suspect")]
    fast = timed["tflops"].astype("Float64").fillna(0) > 0
    erred = timed["rel_err"].notna()
    return timed[fast & erred]


def has_accuracy(df) -> bool:
    """Whether df has an ok row with a finite rel_err: where it has none, the panel adds nothing."""
    rows = measured_rows(df)
    ok = rows[rows["status"] == "ok"]
    return any(math.isfinite(e) for e in floats(ok["rel_err"]))


def quantised(p) -> bool:
    """Whether a point's variant rounds its inputs (its row names a quantisation recipe)."""
    return present(p.get("quant_recipe")) and bool(p.get("quant_recipe"))


_EMULATED = re.compile(r"\bemulat", re.IGNORECASE)


def emulations(metas: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The variants of these runs that emulate another number format (FP8's rounding on any device, then
    float32 math): those whose capability record in meta.json declares a quantisation recipe (`quant`) and
    whose description says it emulates ('FP8 emulated: q, k, v rounded to ...'). Their speed is the
    emulation's, not a kernel's in that format."""
    return frozenset(
        str(name)
        for meta in metas.values()
        for name, record in ((meta or {}).get("variant_capabilities") or {}).items()
        if isinstance(record, Mapping)
        and record.get("quant")
        and _EMULATED.search(str(record.get("description") or ""))
    )


def emulation_sentence(names: list[str]) -> str:
    """The once-per-panel caution where an emulation is ranked: its speed says nothing of real kernels'."""
    who = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    verb = "emulates" if len(names) == 1 else "emulate"
    return (
        f"{who} {verb} FP8 (the inputs rounded, then float32 math): an emulation's speed, and its place in "
        "any ranking here, says nothing of real FP8 kernels; its accuracy is the recipe's."
    )


def bound(p) -> float:
    """A point's declared approximation (Capability.approximate: the rel_err its gate holds it to), 0 for
    an exact kernel."""
    value = p.get("approximate")
    return float(value) if present(value) else 0.0


def named(p) -> str:
    """A point's variant as a sentence names it: an approximation says so."""
    return approximate_text(p["variant"], p.get("approximate"))


def points(rows):
    """Per panel, variant and dtype of `rows`: its cell at the largest length (N, or N_k for a decode
    series) it was measured at, with its dtype's tolerance, whether it failed (wrong, or a rel_err beyond
    the tolerance or not finite), its error end to end (e2e_rel_err: rel_err, or a quantising variant's
    against its original inputs) and `length`, the axis its panel's series grow (tables.length_axis: a
    point alone cannot tell). One DataFrame, fastest first within each panel."""
    import pandas as pd

    picked = []
    for _pkey, _ptitle, prow in panels(rows):
        measured = measured_rows(prow)
        length = length_axis(prow)
        for _key, sub in grouped(measured, ["variant", "dtype"]):
            top = sub.sort_values(length, kind="stable").iloc[-1]
            err, tol = float(top["rel_err"]), max(tolerance(str(top["dtype"])), bound(top))
            failing = top["status"] != "ok" or not math.isfinite(err) or err > tol
            e2e = end_to_end_rel_err(err, top.get("sqnr_db"))
            picked.append(
                {
                    **top.to_dict(),
                    "tolerance": tol,
                    "failing": bool(failing),
                    "e2e_rel_err": e2e,
                    "length": length,
                }
            )
    if not picked:
        return pd.DataFrame(columns=[*rows.columns, "tolerance", "failing", "e2e_rel_err", "length"])
    out = pd.DataFrame(picked)
    order = [a for a in PANEL_AXES if a in out.columns]
    return out.sort_values([*order, "tflops"], ascending=[True] * len(order) + [False], kind="stable")


def err_text(err: Any) -> str:
    """'0.0021', '6e-07', '0 (exact)', 'inf'."""
    if not present(err):
        return "n/a"
    err = float(err)
    return "0 (exact)" if err == 0 else f"{err:.2g}" if math.isfinite(err) else str(err)


def sentence(
    rows, said: Callable[[str, list[tuple[str, int]]], str] | None = None, emulated: Collection[str] = ()
) -> str | None:
    """The findings' sentences for one panel's rows (one dtype): the fastest ok variant's error against the
    most accurate's (end to end: what a user gets), where it is at least WORTH_SAYING times larger, the
    fastest as the ranking has it (_trade: variants it cannot tell apart are named together), opened by
    `said(text, cells)` (busy.SHAKY where a compared (variant, N) cell drifted or was noisy); what
    each quantising variant gives up (fp8_sentence); a wrong cell faster than every ok one; and, once,
    where a variant of `emulated` (emulations) has an ok cell, that its speed says nothing of real kernels.
    None when there is nothing to say."""
    pts = points(rows)
    ok = pts[(pts["status"] == "ok") & pts["e2e_rel_err"].map(lambda e: math.isfinite(float(e)))]
    if ok.empty:
        return None
    fastest = ok.loc[ok["tflops"].astype(float).idxmax()]
    accurate = ok.loc[ok["e2e_rel_err"].astype(float).idxmin()]
    where = _where(length_axis(rows))

    length = length_axis(rows)

    def cell(p) -> tuple[str, int]:
        return str(p["variant"]), int(p[length])

    def opened(text: str, cells: list[tuple[str, int]]) -> str:  # a speed read off an unsettled cell
        return said(text, cells) if said else text

    traded = _trade(rows, ok, fastest, accurate, where)
    out = [] if traded is None else [opened(*traded)]
    # a quantising variant's speed against the fastest exact one's: read off their two cells
    out += [opened(*fp8_sentence(p, ok, where, cell)) for _, p in ok.iterrows() if quantised(p)]
    wrong = pts[(pts["status"] != "ok") & (pts["tflops"].astype(float) > float(fastest["tflops"]))]
    for _, w in wrong.iterrows():
        text = f"{w['variant']} is faster than every ok variant ({where(w)}) but {failed_check(w)}."
        out.append(opened(text, [cell(w), cell(fastest)]))
    ranked = variant_order({str(v) for v in ok["variant"]} & set(emulated))
    if ranked:
        out.append(emulation_sentence(ranked))
    return " ".join(out) or None


def _front(rows, fastest) -> list[str]:
    """The variants the ranking cannot tell apart from the fastest point's at its N (tables.best_variant
    and its tie rule), the fastest first; the fastest alone where it leads alone."""
    length, name = length_axis(rows), str(fastest["variant"])
    best = best_variant(rows)
    for _, b in best[best[length] == fastest[length]].iterrows():
        front = [m for v in (str(b["best"]), *tied_names(b["tied"])) for m in kernel_members(v)]
        if name in front:
            return [name, *(v for v in front if v != name)]
    return [name]


def _trade(rows, ok, fastest, accurate, where) -> tuple[str, list[tuple[str, int]]] | None:
    """The speed-against-accuracy sentence and the (variant, N) cells it compares: the fastest's error
    against the most accurate's; where the ranking ties the fastest with others (a noisy cell of one of them
    made the other look 50x faster), those variants together, and the most accurate of them standing for
    their speed. None where the error it would name is under WORTH_SAYING times the most accurate's."""
    length = length_axis(rows)
    front = _front(rows, fastest)
    tied = [p for _, p in ok.iterrows() if str(p["variant"]) in front]
    best_err = float(accurate["e2e_rel_err"])
    pick = max if str(accurate["variant"]) in front else min  # the front's worst beside it, or its best
    fast = pick(tied, key=lambda p: float(p["e2e_rel_err"]))
    fast_err = float(fast["e2e_rel_err"])
    if fast["variant"] == accurate["variant"] or fast_err <= 0 or fast_err < WORTH_SAYING * best_err:
        return None
    times = f"{fast_err / best_err:.3g}× the error of" if best_err > 0 else "against an exact answer from"
    cells = [(v, int(fastest[length])) for v in front] + [(str(accurate["variant"]), int(accurate[length]))]
    versus = f"the most accurate, {named(accurate)} (rel_err {err_text(best_err)}, {where(accurate)})"
    has = f"has rel_err {err_text(fast_err)}, {times} {versus}."
    if len(front) == 1:
        return f"Speed against accuracy: the fastest, {named(fast)} ({where(fast)}), {has}", cells
    shown = [approximate_names(rows).get(v, v) for v in front]
    at = f"{length_name(length)} = {seq_count(fastest[length])}"
    lead = f"Speed against accuracy: {', '.join(shown[:-1])} and {shown[-1]} lead at {at}"
    lead += " and cannot be told apart (the ranking's tie rule)"
    if pick is min:
        return f"{lead}; the most accurate of them, {named(fast)}, {has}", cells
    among = (
        f"{named(accurate)} (rel_err {err_text(best_err)}); {named(fast)} has rel_err {err_text(fast_err)}"
    )
    return f"{lead}, and the most accurate variant is among them: {among}.", cells


# the checks after timing, in the order harness.measure.cell's verdict says them: their column and words
AFTER_CHECKS = (
    ("fresh_rel_err", "on fresh inputs after timing"),
    ("refill_rel_err", "on the timed tensors refilled in place with fresh values after timing"),
)


def _over(err: Any, tol: float) -> bool:
    return present(err) and not float(err) <= tol


def failed_check(w) -> str:
    """Which float64 check a wrong point failed, with the error that failed it: the gate on its first call
    (rel_err), its gradients (grad_rel_err), or, where its first call passed, the checks after timing (an
    answer remembered: fresh_rel_err, refill_rel_err), with the gate's passing error beside; else the row's
    own message (inputs modified in place, the dropout check)."""
    tol = float(w["tolerance"])
    if _over(w["rel_err"], tol):
        return f"fails the float64 gate (rel_err {err_text(w['rel_err'])}, tolerance {tol:g})"
    grad_tol = tol * GRAD_TOLERANCE_FACTOR
    if _over(w.get("grad_rel_err"), grad_tol):
        err = err_text(w["grad_rel_err"])
        return f"fails the float64 gate on its gradients (grad rel_err {err}, tolerance {grad_tol:g})"
    for column, check in AFTER_CHECKS:
        if _over(w.get(column), tol):
            return (
                f"fails the float64 check {check} (rel_err {err_text(w[column])}, tolerance {tol:g}): its "
                f"gated first call passed (rel_err {err_text(w['rel_err'])}), so its answer does not follow "
                "its inputs"
            )
    message = str(w.get("message") or "") if present(w.get("message")) else ""
    return f"is wrong: {message}" if message else "is wrong"


def _where(length: str):
    """A point's place: '1.2 TFLOP/s at N = 4,096' (N_k for a decode series)."""
    name = length_name(length)
    return lambda p: f"{num_text(p['tflops'], '.3g')} TFLOP/s at {name} = {seq_count(p[length])}"


def fp8_sentence(p, ok, where, cell: Callable[[Any], tuple[str, int]]) -> tuple[str, list[tuple[str, int]]]:
    """What a quantising variant's point gives up: its error against float64 of its original inputs and
    SQNR, against the most accurate ok variant that does not quantise, and its speed against the fastest
    of those; its kernel's own error against its rounded inputs apart. With the (variant, N) cells whose
    speeds it compares (`cell` of a point), which sentence()'s `said` opens it by."""
    cells = [cell(p)]
    e2e = float(p["e2e_rel_err"])
    text = (
        f"{p['variant']} rounds its inputs ({p['quant_recipe']}): rel_err {err_text(e2e)} against float64 of "
        f"the inputs it was given (SQNR {num_text(p['sqnr_db'], '.1f')} dB, {where(p)})"
    )
    exact = ok[[not quantised(o) for _, o in ok.iterrows()]]
    if not exact.empty:
        best = exact.loc[exact["e2e_rel_err"].astype(float).idxmin()]
        fastest = exact.loc[exact["tflops"].astype(float).idxmax()]
        best_err = float(best["e2e_rel_err"])
        times = f"{e2e / best_err:.3g}× the error of" if best_err > 0 else "against an exact answer from"
        speed = float(p["tflops"]) / float(fastest["tflops"])
        cells.append(cell(fastest))
        text += (
            f", {times} the most accurate variant that does not round, {best['variant']} (rel_err "
            f"{err_text(best_err)}), at {speed:.3g}× the TFLOP/s of the fastest that does not round, "
            f"{fastest['variant']}"
        )
    return (
        f"{text}; its kernel alone errs {err_text(p['rel_err'])} against its rounded inputs (tolerance "
        f"{p['tolerance']:g}), and the rounding alone {err_text(p['quant_rel_err'])}."
    ), cells


# ---- the figure ----------------------------------------------------------------------------------------


def _legend(ax, variants: list[str], dtypes: list[str], quantising: bool = False) -> None:
    """Proxies: a colour per variant, a marker per dtype, a hollow point for a failed cell; where a variant
    rounds its inputs, the dotted line back to its kernel's error."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import offset_copy

    def dot(**kw) -> Line2D:
        return Line2D([], [], ls="none", ms=7, **kw)

    handles = [dot(marker="o", color=variant_color(v), label=v) for v in variants]
    handles += [dot(marker=DTYPE_MARKERS.get(d, OTHER_MARKER), color="#555555", label=d) for d in dtypes]
    handles.append(dot(marker="o", mfc="none", mec="#555555", label="failed the gate (wrong)"))
    if quantising:
        cost = "rounding's cost: to the kernel's error"
        handles.append(Line2D([], [], ls=":", color="#555555", label=cost))
    # below the axes, as style.legend_below puts it: inside, it would hide points
    below = offset_copy(ax.transAxes, fig=ax.figure, y=-40, units="points")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=3,
              frameon=False)  # fmt: skip


def _draw_panel(ax, pts, top_n: int, length: str, speed: str = "tflops", seen: set[str] | None = None):
    """One panel's points (up: their `speed` column), each flagged one ringed as the time figure rings it
    (plots.ring_cells: suspect, measured while the machine drifted, or on a throttled GPU; their flags added
    to `seen` for plots.ring_legend), its dtypes' tolerance lines and, where some error is not finite, a
    band for it."""
    shown = floats(pts["e2e_rel_err"])
    errs = [e for e in shown + floats(pts["rel_err"]) if math.isfinite(e)]
    tols = sorted({float(t) for t in pts["tolerance"]})
    positive = [e for e in errs + tols if e > 0]
    floor = 10 ** math.floor(math.log10(min(positive))) / 10 if positive else 1e-16  # where 0 is drawn
    bad_x = max(positive, default=1.0) * 30  # where inf is drawn

    def at(err: float) -> float:
        return floor if err == 0 else err if math.isfinite(err) else bad_x

    for err, (_, p) in zip(shown, pts.iterrows(), strict=True):
        dtype, variant, y = str(p["dtype"]), str(p["variant"]), float(p[speed])
        x, color = at(err), variant_color(variant)
        ax.plot([x], [y], ls="none", marker=DTYPE_MARKERS.get(dtype, OTHER_MARKER), ms=8,
                color=color, mfc="none" if p["failing"] else color, mew=2 if p["failing"] else 1)  # fmt: skip
        if quantised(p):  # back to its kernel's error: the line is what the rounding costs
            ax.plot([at(float(p["rel_err"])), x], [y, y], color=color, lw=1, ls=":", zorder=1)
            ax.annotate(str(p["quant_recipe"]), (x, y), xytext=(5, -10), textcoords="offset points",
                        fontsize=7, color=color)  # fmt: skip
        if bound(p):  # held to its own bound: filled right of its dtype's line
            ax.annotate(f"approximate ≤ {bound(p):g}", (x, y), xytext=(5, -10), textcoords="offset points",
                        fontsize=7, color=color)  # fmt: skip
        if int(p[length]) < top_n:
            ax.annotate(f"N={seq_count(p[length])}", (x, y), xytext=(5, 4),
                        textcoords="offset points", fontsize=7, color="#555555")  # fmt: skip
    ring_cells(ax, pts.assign(_x=[at(e) for e in shown]), "_x", speed, set() if seen is None else seen)
    for dtype in sorted({str(d) for d in pts["dtype"]}):
        tol = tolerance(dtype)
        ax.axvline(tol, color="#333333", lw=1, ls=DTYPE_LINES.get(dtype, "--"), zorder=0)
        ax.annotate(f"{dtype} tolerance {number_text(tol)}", (tol, 1), xycoords=("data", "axes fraction"),
                    xytext=(-2, -4), textcoords="offset points", rotation=90, ha="right", va="top",
                    fontsize=7, color="#333333")  # fmt: skip
    if any(not math.isfinite(e) for e in shown):
        ax.axvspan(bad_x / 3, bad_x * 3, color="#f4cccc", alpha=0.6, zorder=0)
        ax.annotate("not finite", (bad_x, 0.02), xycoords=("data", "axes fraction"), ha="center", fontsize=7)
    log_axis(ax, "x")
    ax.set_xlim(floor / 3, bad_x * 3)
    exact = " (0: drawn at the left edge)" if 0 in errs else ""
    ax.set_xlabel(f"rel_err against float64 of the inputs given, log axis{exact}")


def speed_of(rows) -> tuple[str, str]:
    """The speed a figure plots up, and its axis label: K/V GB/s for decode rows (a decode step is bound by
    reading its cache: its TFLOP/s says nothing), else TFLOP/s."""
    if length_axis(rows) == "seq_k" and "kv_gbps" in rows.columns and rows["kv_gbps"].notna().any():
        return "kv_gbps", "K/V read GB/s (kv_bytes / median time)"
    return "tflops", "achieved TFLOP/s"


def _speed_axis(axes, values: list[float]) -> None:
    """One y scale and range on every panel: log where the speeds are more than 30x apart (dtypes, or a
    reference beside a fused kernel: every one readable), else linear from 0."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    if not values:
        return
    lo, hi = min(values), max(values)
    for ax in axes:
        if hi / lo > 30:
            log_axis(ax)
            ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2, 5)))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: number_text(v)))
            ax.set_ylim(lo / 1.5, hi * 1.5)
        else:
            ax.set_ylim(0, hi * 1.15)


def accuracy_figure(rows, title: str):
    """Speed (TFLOP/s, or K/V GB/s for decode rows: speed_of) against rel_err (log) per panel of a group
    that holds every dtype, on one y scale; (figure, its points)."""
    pans = panels(rows)
    speed, speed_label = speed_of(rows)
    drawn, drawn_axes, seen = [], [], set()
    with mpl_style():
        fig, axes = new_figure(len(pans), panel_h=5.2)
        for ax, (_key, ptitle, prow) in zip(axes, pans, strict=True):
            pts = points(prow)
            length = length_axis(prow)
            if pts.empty:
                empty_panel(ax, "no measured cell with an error")
            else:
                _draw_panel(ax, pts, int(pts[length].max()), length, speed, seen)
                drawn.append(pts)
                drawn_axes.append(ax)
            ax.set_ylabel(speed_label)
            ax.set_title(ptitle)
            dtypes = sorted({str(d) for d in pts["dtype"]})
            quantising = any(quantised(p) for _, p in pts.iterrows())
            _legend(ax, variant_order(pts["variant"].unique()), dtypes, quantising)
        _speed_axis(drawn_axes, [y for pts in drawn for y in floats(pts[speed]) if y > 0])
        ring_legend(fig, seen)  # the time figure's rings, named apart from the variants'
        fig.suptitle(title)
    import pandas as pd

    data = pd.concat(drawn) if drawn else points(rows)
    columns = [c for c in POINT_COLUMNS if c not in keys_of(rows)]
    if speed != "tflops" and speed in data.columns:
        columns.insert(1, speed)
    return fig, data[keys_of(rows) + columns]


# ---- the page's blocks ---------------------------------------------------------------------------------


KV_SPEED = "; K/V GB/s: kv_bytes / median time, the figure's y (a decode step is bound by its cache reads)"


def accuracy_table(pts, speed: str = "tflops") -> pg.Table:
    """One row per variant, dtype and panel: the point drawn, fastest first within a panel, at its length
    (N, or N_k for a decode series: the figure's) and its speed (`speed`: the figure's y, speed_of)."""
    lengths = set(pts["length"]) if "length" in pts.columns and len(pts) else {length_axis(pts)}
    # decode points hold their N_q (a panel each, tables.panels): a column tells them apart
    shown = varying(pts, [*PANEL_AXES, *(["seq_len"] if lengths == {"seq_k"} else [])])
    grads = "grad_rel_err" in pts.columns and pts["grad_rel_err"].notna().any()
    quant = any(quantised(p) for _, p in pts.iterrows())
    rows = []
    for _, p in pts.iterrows():
        verdict = "wrong" if p["status"] != "ok" else "beyond tolerance" if p["failing"] else "ok"
        quantising = quantised(p)
        rows.append(
            (
                str(p["variant"]),
                str(p["dtype"]),
                *[axis_value(a, p[a]) for a in shown],
                seq_count(p[p["length"] if "length" in p else next(iter(lengths))]),
                num_text(p[speed], ".3g"),
                err_text(p["e2e_rel_err"]),
                *(
                    [
                        err_text(p["rel_err"]) if quantising else "",
                        str(p["quant_recipe"]) if quantising else "",
                        num_text(p["sqnr_db"], ".1f") if quantising else "",
                    ]
                    if quant
                    else []
                ),  # fmt: skip
                f"{p['tolerance']:g}",
                *([err_text(p["grad_rel_err"])] if grads else []),
                verdict,
            )
        )
    speed_head = "K/V GB/s" if speed == "kv_gbps" else "TFLOP/s"
    named = ("N_q" if a == "seq_len" else a for a in shown)
    headers = ("variant", "dtype", *named, common_length_name(lengths), speed_head, "rel_err",
               *(["kernel rel_err", "recipe", "SQNR dB"] if quant else []), "tolerance",
               *(["grad rel_err"] if grads else []), "status")  # fmt: skip
    rounding = (
        "; a variant that rounds its inputs (its recipe): rel_err against float64 of the inputs it was "
        "given, its kernel rel_err against its rounded inputs (what the gate judges) and its SQNR"
        if quant
        else ""
    )
    return pg.Table(
        headers,
        tuple(rows),
        f"each variant and dtype at the largest {headers[2 + len(shown)]} it was measured at, fastest first"
        f"{KV_SPEED if speed == 'kv_gbps' else ''}; rel_err: the forward "
        "output's against float64, judged against the dtype's tolerance or a declared approximation's bound "
        f"(gradients: {GRAD_TOLERANCE_FACTOR:g}× it; a declared approximation's against its own forward's "
        f"derivative){rounding}",
    )


def drawn(df, metas: dict[str, dict[str, Any]], multi: bool = False) -> list[tuple[dict, Any, str, list]]:
    """Per group of every dtype with an error to draw: (key, rows, title, [(file kind, figure title,
    (figure, data), caption)]), drawn and not yet saved: what section saves and
    attnbench.Run.plot('speed-accuracy') shows."""
    out = []
    if not has_accuracy(df):
        return out
    for gkey, group in grouped(df, FIGURE_AXES):
        if not has_accuracy(group):
            continue
        head = group_head(gkey, group, multi)
        speed = speed_of(group)[0]
        caption = (
            f"{'K/V GB/s' if speed == 'kv_gbps' else 'TFLOP/s'} against rel_err vs float64 at each variant's "
            f"and dtype's largest measured {length_name(length_axis(group))}."
        )
        figure = accuracy_figure(group, f"Speed against accuracy · {head}")
        out.append((gkey, group, head, [("speed-accuracy", "Speed against accuracy", figure, caption)]))
    return out


def section(df, metas: dict[str, dict[str, Any]], out: Path) -> Section:
    """Speed against accuracy per group of every dtype among the figures (drawn), its points among the
    tables; nothing in a run without an ok cell with a finite rel_err."""
    multi = len(metas) > 1
    groups_drawn = drawn(df, metas, multi)
    if not groups_drawn:
        return Section()
    return panel_section(
        [pg.Heading("Speed against accuracy"), pg.Para(ACCURACY_RULE)],
        [pg.Heading("Speed against accuracy: the points drawn")],
        groups_drawn,
        out,
        lambda gkey, group: accuracy_table(points(group), speed_of(group)[0]),
        lambda gkey: file_stem({**gkey, "dtype": ""}, multi),
    )
