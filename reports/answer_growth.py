"""Bench's growth line (reports.answer): how fn's time and peak memory grow with N, the report's fits
(fit.scaling_table) with the baseline's beside, an exponent that says nothing (two N, a CI too wide) said so
in the findings' words (growth.says_nothing), never as a number, and fn's peak at its largest N against the
baseline's and the scores'."""

from __future__ import annotations

from typing import Any

from .answer_text import PASSES, SHAPE_AXES, dtypes_first, window_text
from .busy import unsettled
from .growth import says_nothing
from .tables import label, length_axis, length_name, present, varying
from .words import n_text

DRIFTED = " (drifted or noisy)"  # a time fit through a cell whose time is the machine's too (busy.unsettled)


def _series(df, variant: str) -> tuple[Any, str, str] | None:
    """The series a growth line is fitted over: the unpadded cells of fn's first pass and first shape,
    unmasked, or causal where fn measured no unmasked cell (a sliding-window kernel's); with what the line
    says of it besides its dtype (', forward', ', d_k=64') and its mask ('no mask, window 64'). None
    without one."""
    unpadded = df[df["padding"].fillna(0) == 0]
    mask = "no mask"
    plain = unpadded[unpadded["causal"] == False]  # noqa: E712 (pandas)
    if not ((plain["variant"] == variant) & (plain["status"] == "ok")).any():
        mask, plain = "causal", unpadded[unpadded["causal"] == True]  # noqa: E712 (pandas)
    if plain.empty:
        return None
    first = next(p for p in [*PASSES, *plain["pass"].astype(str)] if (plain["pass"] == p).any())
    said = "" if plain["pass"].nunique() == 1 else f", {PASSES.get(first, first)}"
    plain = plain[plain["pass"] == first]  # one pass's series: the forward where it was timed
    shapes = varying(plain, SHAPE_AXES)  # and one shape's: the first of each axis that takes several
    for axis in shapes:
        plain = plain[plain[axis] == plain[axis].sort_values().iloc[0]]
    if shapes:
        said += ", " + label({a: plain[a].iloc[0] for a in shapes}, shapes)
    if "window" not in shapes and "window" in plain.columns and len(plain):
        mask += window_text(plain["window"].iloc[0])
    return plain, said, mask


def growth(df, metas, variant: str, baseline: str) -> list[str]:
    """How fn's time and peak memory grow with N (the report's fits, over _series), with the baseline's
    beside: 'time as N^1.98 [1.95, 2.01], peak memory as N^1.02 [0.98, 1.06] (sdpa: N^1.84 [...] and
    N^1.14 [...])'; an exponent that says nothing (two N, a CI too wide to say: growth.says_nothing) as
    the report says it, 'time's and peak memory's growth not measured (two N), sdpa's likewise'."""
    from .fit import scaling_table

    found = _series(df, variant)
    if found is None:
        return []
    plain, said, mask = found
    dtype = dtypes_first(set(plain["dtype"].dropna().astype(str)))[0]
    series = plain[plain["dtype"] == dtype]
    table = scaling_table(series, metas)
    fits = {str(r["variant"]): r for _, r in table.iterrows()}
    if variant not in fits:
        return []
    mine, base = fits[variant], fits.get(baseline)
    if not present(mine["time_exp"]):  # one length (or none) ok: nothing grows
        return []
    n = length_name(length_axis(series[series["variant"] == variant]))
    memory = present(mine["mem_exp"])  # rows without a peak (a device that cannot measure it): time alone
    drifted = unsettled(df)
    grows = _side(mine, series[series["variant"] == variant], n, memory, drifted)
    beside = ""
    if base is not None and present(base["time_exp"]) and (present(base["mem_exp"]) or not memory):
        theirs = _side(base, series[series["variant"] == baseline], n, memory, drifted, short=True)
        beside = f", {baseline}'s likewise" if theirs == grows else f" ({baseline}: {theirs})"
    over = mine["fit_seq_lens"].replace(" ", ", ")
    peak = _peak(series, variant, baseline) if memory else ""
    return [f"grows with {n} ({dtype}{said}, {mask}, fitted over {n} {over}): {grows}{beside}{peak}"]


def _side(fit: Any, rows: Any, n: str, memory: bool, drifted: Any, short: bool = False) -> str:
    """One variant's exponents (a scaling_table row; `rows`: its series): 'time as N^1.98 [1.95, 2.01]
    (drifted or noisy), peak memory as N^1.02 [0.98, 1.06]', or `short` (the baseline's, beside fn's)
    'N^1.98 [...] and N^1.02 [...]'; an exponent that says nothing (says_nothing) as 'time's growth not
    measured (two N)', time's and memory's in one phrase where they say nothing for one reason. A time
    exponent read off a cell that drifted or was noisy (`drifted`: busy.unsettled per row, at an N the fit
    went through) is marked as the race's ends are (answer._end)."""
    fitted = rows[length_axis(rows)].isin([int(x) for x in str(fit["fit_seq_lens"]).split()])
    marked = bool(drifted.loc[rows.index[fitted]].any())
    off = _off_line(fit, rows, n)  # said before a CI too wide: a point far off the line is why it is wide
    time_why = says_nothing(fit["time_exp"], fit["time_ci_low"], fit["time_ci_high"], n)
    whys = {"time": None if off else time_why}
    if memory:
        whys["peak memory"] = says_nothing(fit["mem_exp"], fit["mem_ci_low"], fit["mem_ci_high"], n)
    unsaid: dict[str, list[str]] = {}  # why -> what it leaves unmeasured
    for what, why in whys.items():
        if why:
            unsaid.setdefault(why, []).append(f"{what}'s")
    short = short and not unsaid  # 'N^a and N^b' only where both are exponents: else each is named
    said = []
    if not whys["time"]:
        exponent = off or f"{'' if short else 'time as '}{n}^{fit['time_fit']}"
        said.append(exponent + (DRIFTED if marked else ""))
    if memory and not whys["peak memory"]:
        said.append(f"{'' if short else 'peak memory as '}{n}^{fit['mem_fit']}")
    said += [f"{' and '.join(whats)} growth not measured ({why})" for why, whats in unsaid.items()]
    return (" and " if short else ", ").join(said)


def _off_line(fit: Any, rows: Any, n: str) -> str:
    """Where a point lies far off the time fit's line (fit.off_line: a kernel 20x slower at N 256 alone,
    which the race line names), that no power law fits, its exponent noise: 'time fits no power law of N (a
    point 20.1x off its line, R² -0.35)'; '' where none does."""
    from .fit import off_line

    ok = rows[rows["status"] == "ok"]
    length = length_axis(rows)
    off = off_line(fit["_time_fit"], ok[length].astype(float), ok["time_ms_median"].astype(float))
    if off is None:
        return ""
    return f"time fits no power law of {n} (a point {off:.3g}x off its line, R² {fit['time_r2']:.2f})"


def _peak(rows: Any, variant: str, baseline: str) -> str:
    """'; peak 130 MiB at N 512: 242x sdpa's, 64.9x the N×N scores (2 MiB)': fn's peak at the largest N of
    its series (`rows`: one dtype, mask, pass and shape), beside the baseline's in the same cell and one
    score matrix's analytic size (formulas.scores_bytes): two kernels of one exponent differ here."""
    from attnbench.results.formulas import bytes_text, scores_bytes

    length = length_axis(rows)
    ok = rows[(rows["status"] == "ok") & rows["peak_mem_bytes"].notna()]
    mine = ok[ok["variant"] == variant]
    if mine.empty:
        return ""
    top = mine.loc[mine[length].astype(float).idxmax()]
    peak = float(top["peak_mem_bytes"])
    theirs = ok[(ok["variant"] == baseline) & (ok[length] == top[length])]["peak_mem_bytes"]
    said = [f"{peak / float(theirs.iloc[0]):.3g}x {baseline}'s"] if len(theirs) and theirs.iloc[0] > 0 else []
    n_k = top.get("seq_k") if present(top.get("seq_k")) else top["seq_len"]
    dims = [top.get(a) for a in ("batch", "heads", "seq_len")] + [n_k]
    scores = scores_bytes(*map(int, dims), str(top["dtype"])) if all(map(present, dims)) else 0
    matrix = "N×N" if length == "seq_len" else "N_q×N_k"
    said += [f"{peak / scores:.3g}x the {matrix} scores ({bytes_text(scores)})"] if scores > 0 else []
    at = f"{length_name(length)} {n_text(top[length])}"
    return f"; peak {bytes_text(peak)} at {at}" + (f": {', '.join(said)}" if said else "")
