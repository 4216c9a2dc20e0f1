"""Tables derived from the results: figure groups and panels, fraction of peak, best variant, speed-ups."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import takewhile
from typing import Any

from attnbench.results import axes
from attnbench.results.axes import AXES
from attnbench.results.devices import calibration_for, matmul_tflops, positive
from attnbench.results.formulas import is_decode, ratio_number, ratio_spread
from attnbench.results.judge import TOLERANCE, separated, separation
from attnbench.results.ranks import rank_groups, told_apart
from attnbench.results.schema import LIST_COLUMNS

from .style import variant_order

# one figure (and one page section) per group; device_group is '' unless a run mixes devices that may not
# be averaged together (results.devices), and then splits that run's cells by device group; model is ''
# unless the sweep named published models (--model), and then gives each model its own section. Written out
# rather than taken from the axis table: run_id and device_group are no axes, and the table's order of its
# group and label axes (device, dtype, pass, model) is not the order titles, file names and CSV columns have
# always used. Any other group or label axis of the table (a new one) follows them.
GROUP_AXES = ("run_id", "device", "device_group", "model", "dtype", "pass")
GROUP_AXES += tuple(a.name for a in AXES if a.role in ("group", "label") and a.name not in GROUP_AXES)
QUIET_GROUP_AXES = ("device_group", "model")  # '' in every row: left out of titles, file names and CSVs
# one panel per combination inside a group, in the axis table's report order (results.axes: Axis.role and
# Axis.order); seq_k is a length (a decode series grows it), not a panel axis
PANEL_AXES = tuple(a.name for a in sorted((a for a in AXES if a.role == "panel"), key=lambda a: a.order))
# an axis whose value equals another's in every row says nothing of its own (d_v = d_k, kv_heads = heads)
FOLLOWS = {a: b for a, b in axes.FOLLOWS.items() if a in PANEL_AXES}
# named only when some row differs: the usual sweep, and the text of every report made before the axis
QUIET_DEFAULTS = {a: v for a, v in axes.QUIET.items() if a in PANEL_AXES}
COMBO_AXES = GROUP_AXES + PANEL_AXES  # everything but variant and seq_len: what a fit holds fixed
LENGTHS = tuple(a.name for a in AXES if a.role == "length")  # N_q and N_k: what a series grows
PASS_NAMES = axes.PASS_NAMES


def quiet_columns(df) -> list[str]:
    """The QUIET_GROUP_AXES that are '' in every row of df: CSVs leave them out, as reports made before
    they existed did."""
    return [a for a in QUIET_GROUP_AXES if a in df.columns and not df[a].fillna("").astype(str).ne("").any()]


def ok_rows(df):
    """Only `ok` rows count for fits, rankings and speed-ups (`wrong` rows were measured but are excluded)."""
    return df[(df["status"] == "ok").fillna(False)]


def flag_mask(df, column: str):
    """Per row, whether its boolean flag `column` (suspect, drift, throttled) is set: NA, or a run without
    the column, is not set."""
    import pandas as pd

    if column not in df.columns:
        return pd.Series(False, index=df.index)
    return df[column].fillna(False).astype(bool)


def flagged(df, column: str):
    """The rows whose flag `column` is set (see flag_mask)."""
    return df[flag_mask(df, column)]


def ranked_rows(df):
    """The rows a ranking may use: ok and not suspect (results.suspect: too fast to believe, shown apart)."""
    ok = ok_rows(df)
    return ok[~flag_mask(ok, "suspect")]


def present(value: Any) -> bool:
    """False for None, pd.NA and NaN (the loader's missing values)."""
    if value is None:
        return False
    try:
        return not bool(value != value)  # NaN != NaN; pd.NA != x is NA, and bool(NA) raises
    except TypeError:
        return False


def axis_text(axis: str, value: Any) -> str:
    """One axis value as a reader wants it: 'causal', 'd_k=64', 'forward' (results.axes: Axis.show)."""
    if axis in QUIET_GROUP_AXES:  # '' (nothing split, no model) is left out of titles
        return str(value) if present(value) else ""
    if not present(value):
        return f"{axis}=n/a"
    if axis == "run_id":
        return str(value)
    return axes.BY_NAME[axis].show(value) if axis in axes.BY_NAME else f"{axis}={value}"


def axis_value(axis: str, value: Any) -> str:
    """An axis value under a column that already names the axis: '64' under d_k, 'causal' under causal."""
    if axis in axes.BY_NAME and axes.BY_NAME[axis].dtype == "Int64" and present(value):
        return str(value)
    return axis_text(axis, value)


def label(key: dict[str, Any], axes: tuple[str, ...] | list[str] | None = None) -> str:
    """A combination of axis values as one short line ('cpu · float32 · forward')."""
    axes = list(key) if axes is None else axes
    texts = (axis_text(a, key[a]) for a in axes if a in key)
    return " · ".join(t for t in texts if t) or "all cells"


def _follows(df, axis: str) -> bool:
    """axis = the axis it follows in every row (d_v = d_k, kv_heads = heads: the usual sweep): then it is
    never named on its own."""
    other = FOLLOWS.get(axis)
    return (
        other is not None
        and {axis, other} <= set(df.columns)
        and bool((df[axis] == df[other]).fillna(True).all())
    )


def _quiet(df, axis: str) -> bool:
    """An axis added later, at its default in every row: old runs' pages do not name it."""
    return axis in QUIET_DEFAULTS and bool((df[axis] == QUIET_DEFAULTS[axis]).fillna(True).all())


def varying(df, axes: tuple[str, ...] | list[str]) -> list[str]:
    """The axes that take more than one value in df (those a title or table has to name)."""
    out = [a for a in axes if a in df.columns and df[a].nunique(dropna=False) > 1]
    return [a for a in out if not _follows(df, a)]


def grouped(df, axes: list[str]) -> Iterator[tuple[dict[str, Any], Any]]:
    if df.empty:
        return
    for values, sub in df.groupby(axes, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        yield dict(zip(axes, values, strict=True)), sub


def groups(df) -> list[tuple[dict[str, Any], Any]]:
    """(key, rows) per figure group: run, device, dtype and pass."""
    return list(grouped(df, list(GROUP_AXES)))


PATTERN_ORDER = ("constant", "uniform", "bimodal", "longtail")  # then any other pattern, alphabetically


def pattern_key(pattern: str) -> tuple:
    """The order of the length patterns: constant, uniform, bimodal, longtail, then others; a capped
    pattern ('uniform:2048') after its uncapped one, by its cap."""
    base, _, cap = str(pattern).partition(":")
    rank = PATTERN_ORDER.index(base) if base in PATTERN_ORDER else len(PATTERN_ORDER)
    return rank, base, int(cap) if cap.isdigit() else -1, str(pattern)


def all_decode(rows) -> bool:
    """Whether every row is a decode cell (results.formulas.is_decode: N_q queries against N_k != N_q
    keys): such rows' series each hold one N_q and grow N_k, as the decode panel draws them."""
    return (
        "seq_k" in rows.columns and not rows.empty and bool(is_decode(rows["seq_len"], rows["seq_k"]).all())
    )


def panels(group_df, axes: tuple[str, ...] | None = None) -> list[tuple[dict[str, Any], str, Any]]:
    """(key, title, rows) per panel of one group: each combination of the axes that vary inside it
    (PANEL_AXES unless given; and N_q for a group of decode cells, all_decode: a decode series holds its N_q,
    so each N_q is a panel whose length is N_k), in their sorted order but the length patterns in theirs
    (pattern_key: constant, uniform, bimodal, longtail, as the docs and the packed figure's bars)."""
    if axes is None:
        axes = (*PANEL_AXES, "seq_len") if all_decode(group_df) else PANEL_AXES
    axes = varying(group_df, axes)
    if not axes:
        return [({}, "", group_df)]
    pans = list(grouped(group_df, axes))
    rank = {a: {} for a in axes}  # each value's place in groupby's sorted order
    for key, _ in pans:
        for a in axes:
            rank[a].setdefault(key[a], len(rank[a]))
    pans.sort(
        key=lambda p: tuple(pattern_key(p[0][a]) if a == "lengths" else (rank[a][p[0][a]],) for a in axes)
    )
    return [(key, label(key, axes), sub) for key, sub in pans]


def length_axis(rows) -> str:
    """The length a series grows, its plots' x and its fit's N: 'seq_k' for decode series (every row a
    decode cell: all_decode, each N_q its own series, its own panel and fit, even where one N_k was
    measured, whose rows a sentence places at that N_k, never at their N_q; or one seq_len against several
    seq_k), else 'seq_len' (seq_k = seq_len in every plain run, so nothing changes there)."""
    if all_decode(rows):
        return "seq_k"
    if "seq_k" not in rows.columns or rows.empty or rows["seq_k"].nunique() < 2:
        return "seq_len"
    return "seq_k" if rows["seq_len"].nunique() == 1 else "seq_len"


def held_q(values: Any) -> Any:
    """The N_q a decode series holds (one series per N_q, growing N_k): a decode cell's seq_len
    (results.formulas.is_decode), or a scaling-table record's own `seq_len` (its `length` says what its N
    counts; NA for any other series); None for a cell that is no decode step. fit.combo_key adds it."""
    if "length" in values:
        return values.get("seq_len") if present(values.get("seq_len")) else None
    n_q = values.get("seq_len")
    return n_q if is_decode(n_q, values.get("seq_k")) else None


def length_name(length: str) -> str:
    """What the reports' words call a series' length (length_axis): 'N_k' for a decode series' keys, else
    'N' ('at N_k = 4,096', 'N_k^1.02')."""
    return "N_k" if length == "seq_k" else "N"


def common_length_name(lengths: set[str]) -> str:
    """The name a table of series of these lengths (length_axis each) gives its N column: N_k where every
    series is a decode series, else N."""
    return length_name("seq_k") if lengths == {"seq_k"} else length_name("seq_len")


def fixed_text(group_df) -> str:
    """The panel axes that do not vary in a group, e.g. 'B=1 · H=8 · d_k=64 · no padding'."""
    if group_df.empty:
        return ""
    first = group_df.iloc[0]
    return label({a: first[a] for a in fixed_axes(group_df, PANEL_AXES)})


def fixed_axes(df, axes: tuple[str, ...] | list[str]) -> list[str]:
    """The axes with one value in df (d_v and kv_heads left out when they follow d_k and heads; an added
    axis left out at its default)."""
    vary = varying(df, axes)
    return [
        a for a in axes if a in df.columns and a not in vary and not _follows(df, a) and not _quiet(df, a)
    ]


def device_memory(meta: dict[str, Any], device: str, gpu_names: Any = ()) -> int | None:
    """Bytes of memory the device has: the GPU's for cuda, the machine's RAM for cpu. The fingerprint
    describes one GPU: for rows of another model (`gpu_names`, a group's) the memory is unknown (None)."""
    fp = meta.get("fingerprint") or {}
    if str(device).startswith("cuda"):
        gpu = fp.get("gpu") or {}
        if any(present(n) and str(n) != gpu.get("name") for n in gpu_names):
            return None
        mem = gpu.get("memory_bytes")
    else:
        mem = fp.get("memory_bytes")
    return int(mem) if isinstance(mem, (int, float)) and mem > 0 else None


def calibrated_peak(meta: dict[str, Any], device: str, dtype: str, wheres: Any = ()) -> float | None:
    """The measured matmul TFLOP/s for this device and dtype (its practical peak), if calibrated: the
    fastest of the devices named by `wheres` (a group's where_keys, each through results.devices), else
    the run's calibration of that device kind."""
    found = [matmul_tflops(calibration_for(meta, device, str(w)), dtype) for w in wheres if present(w)]
    found = [p for p in found if p] or [matmul_tflops(calibration_for(meta, device), dtype)]
    return max((p for p in found if p), default=None)


def calibrated_copy(meta: dict[str, Any], device: str, wheres: Any = ()) -> float | None:
    """The measured copy bandwidth (GB/s) of the device, if calibrated: the fastest of the devices named by
    `wheres` (each through results.devices), else the run's calibration of that device kind. A memory-bound
    cell (a decode step reading its K/V cache) is judged against it."""
    found = [positive(calibration_for(meta, device, str(w)).get("copy_gbps")) for w in wheres if present(w)]
    found = [p for p in found if p] or [positive(calibration_for(meta, device).get("copy_gbps"))]
    return max((p for p in found if p), default=None)


# How far apart two cells that record one kernel may lie and still be one kernel under two names: the
# reference runs' pairs (sdpa with sdpa_flash or sdpa_cudnn, 118 cells on an EPYC VM, an H100 and an H200)
# lie within 1.25×. A pair further apart does more than that kernel in its timed call (its own work around
# it), and its names are ranked apart, as an outside trial's FP8 emulations, 3× apart, had to be.
SAME_KERNEL_RATIO = 1.5


def _kernel_keys(cell_rows):
    """Each row's kernel key: its `kernel`, with its quantisation recipe where it has one (two recipes
    around one backend are two computations), '' for a row without a kernel."""
    kernels = cell_rows["kernel"].astype("string").fillna("").str.strip()
    if "quant_recipe" not in cell_rows.columns:
        return kernels
    recipes = cell_rows["quant_recipe"].astype("string").fillna("").str.strip()
    return kernels.where((kernels == "") | (recipes == ""), kernels + " | " + recipes)


def _one_kernel_sets(cell_rows) -> Iterator[Any]:
    """The rows of one combination and N that ran one kernel there, fastest first, each set of two or more:
    the same non-empty `kernel` and quantisation recipe, within SAME_KERNEL_RATIO of the fastest of them."""
    if "kernel" not in cell_rows.columns or len(cell_rows) < 2:
        return
    keys = _kernel_keys(cell_rows)
    for _, sub in cell_rows[keys != ""].groupby(keys[keys != ""], sort=False):
        sub = sub.sort_values("time_ms_median", kind="stable")
        fastest = float(sub["time_ms_median"].iloc[0])
        sub = sub[sub["time_ms_median"].astype(float) <= SAME_KERNEL_RATIO * fastest]
        if sub["variant"].nunique() >= 2:
            yield sub


def one_per_kernel(cell_rows):
    """The ranked rows of one combination and N (one cell per variant) with the variants that ran the same
    kernel there made one: where two or more rows record the same non-empty `kernel` (a variant's kernel
    hook: SDPA's backend, xformers' operator) and the same quantisation recipe (`quant_recipe`, none for
    most), and lie within SAME_KERNEL_RATIO of the fastest of them, they become that fastest, named 'sdpa
    (= sdpa_cudnn: CUDNN_ATTENTION)' (kernel_name). One kernel timed under two names is one contestant: a
    lead or a crossover between its names would be noise named a winner. Rows without a kernel, of another
    recipe, or further from the fastest stay as they are."""
    drop, names = [], {}
    for sub in _one_kernel_sets(cell_rows):
        variants = variant_order(str(v) for v in sub["variant"])
        names[sub.index[0]] = kernel_name(variants, str(sub["kernel"].iloc[0]).strip())
        drop += list(sub.index[1:])
    if not names:
        return cell_rows
    out = cell_rows.drop(index=drop).copy()
    for i, name in names.items():
        out.loc[i, "variant"] = name
    return out


def _recorded(kernel: Any) -> bool:
    return present(kernel) and bool(str(kernel).strip())


def unrecorded_picks(cell_rows) -> dict[str, tuple[str, ...]]:
    """{variant: the variants ranked beside it here whose kernel it may have run} for each row of one
    combination and N whose variant picks its kernel among others' (the loader's `picks_among`:
    Capability.picks_among, sdpa's backends) where it or the other does not record its `kernel`: their two
    times may be one kernel measured twice, and nothing tells them apart."""
    if "picks_among" not in cell_rows.columns or len(cell_rows) < 2:
        return {}
    kernels = {str(r["variant"]): r.get("kernel") for _, r in cell_rows.iterrows()}
    out = {}
    for _, r in cell_rows[cell_rows["picks_among"].notna()].iterrows():
        mine = str(r["variant"])
        unsure = [
            v for v in str(r["picks_among"]).split()
            if v in kernels and not (_recorded(kernels[mine]) and _recorded(kernels[v]))
        ]  # fmt: skip
        if unsure:
            out[mine] = tuple(unsure)
    return out


def contestants(cell_rows):
    """The rows of one combination and N a ranking ranks: one per kernel (one_per_kernel), without a variant
    that picks its kernel among others' where it may have run one of theirs beside it (unrecorded_picks): a
    lead or crossover between the two would be one kernel ranked against itself, and the one it may be
    stands for that kernel there (the findings say so once, findings.unrecorded_sentences)."""
    unsure = unrecorded_picks(cell_rows)
    if unsure:
        cell_rows = cell_rows[~cell_rows["variant"].astype(str).isin(set(unsure))]
    return one_per_kernel(cell_rows)


def one_kernel_gaps(combo_rows) -> list[tuple[int, tuple[str, ...], str, float]]:
    """Per N of one combination's ranked rows (a panel's), each set of variants that ran one kernel there
    (one_per_kernel's) with its kernel and how far apart its names measured (slowest over fastest): one
    kernel in two visits, what the run's own visits of one cell differ by. (N, variants, kernel, ratio)."""
    length = length_axis(combo_rows)
    out = []
    for n, cell in combo_rows.groupby(length, sort=True):
        for sub in _one_kernel_sets(cell):
            times = sub["time_ms_median"].astype(float)
            names = tuple(variant_order(str(v) for v in sub["variant"]))
            out.append((int(n), names, str(sub["kernel"].iloc[0]).strip(), float(times.max() / times.min())))
    return out


def tolerance_of(combo_rows) -> float:
    """How much slower by median a variant must be to be told apart from a faster one in one combination
    (the ranking's tolerance, results.judge.separated's): judge.TOLERANCE, or where the combination's rows
    measured one kernel under two names further apart than that (one_kernel_gaps), that gap: a lead under
    what two visits of one kernel differ by here is not told apart from them."""
    gaps = [g for *_, g in one_kernel_gaps(combo_rows)]
    return max([TOLERANCE, *(g - 1 for g in gaps)])


def kernel_name(variants: list[str], kernel: str) -> str:
    """'sdpa (= sdpa_cudnn: CUDNN_ATTENTION)': variants that ran one kernel, as rankings name them (the
    first in variant order, then the others and the kernel)."""
    return f"{variants[0]} (= {', '.join(variants[1:])}: {kernel})"


_KERNEL_NAME = re.compile(r"^(\S+) \(= (.+?): .*\)$")


def kernel_members(name: str) -> tuple[str, ...]:
    """The variants a ranked name stands for: ('sdpa', 'sdpa_cudnn') for kernel_name's 'sdpa (= sdpa_cudnn:
    CUDNN_ATTENTION)', (name,) for any other."""
    found = _KERNEL_NAME.match(str(name))
    return (found.group(1), *found.group(2).split(", ")) if found else (str(name),)


def tied_names(tied: Any) -> list[str]:
    """The names in best_variant's `tied` (joined by spaces), fastest first, each kernel_name label whole:
    'chunked sdpa (= sdpa_flash: FLASH_ATTENTION (CPU))' is ['chunked', 'sdpa (= sdpa_flash: FLASH_ATTENTION
    (CPU))'], never split at the spaces inside its parentheses (a variant name has none: letters, digits,
    '_' and '-')."""
    out: list[str] = []
    depth = 0  # how many of the label's parentheses are still open
    for word in str(tied).split() if present(tied) else []:
        if out and (depth or word.startswith("(")):
            out[-1] += " " + word
        else:
            out.append(word)
        depth = max(0, depth + word.count("(") - word.count(")"))
    return out


# What a ranking reads of a row: its axes, name, kernel and quantisation recipe, median, spread, suspect flag,
# and the sample lists that judge.separation tests (schema.LIST_COLUMNS). best_variant and ranking work on
# these columns alone: a run's rows carry a hundred more, and every filter, group and sort of a wide frame
# copies them all (most of a ranking's time).
RANKED_COLUMNS = (
    "status", "variant", "kernel", "picks_among", "quant_recipe", "time_ms_median", "rel_iqr", "suspect",
    *LIST_COLUMNS,
)  # fmt: skip


def _narrow(df):
    """df with only the columns a ranking reads (RANKED_COLUMNS and the axes), in df's order."""
    keep = {*COMBO_AXES, *LENGTHS, *RANKED_COLUMNS}
    return df[[c for c in df.columns if c in keep]]


def front(ordered: Iterable[Any], tied: Callable[[Any, Any], bool] | None = None) -> list[Any]:
    """The front of one N's ranking (`ordered`: its cells, fastest first): group 0 of
    results.ranks.rank_groups, the fastest and each cell after it that `tied` (by default: not
    results.judge.separated) cannot tell from it, up to the first it can. A cell slower by median than one
    told apart from the fastest is behind the fastest too, even where its own spread is too wide for the
    test to tell the two apart (flex › team_varlen 2.41× ≈ sdpa_loop 4.7× has flex alone at the front): the
    front is `ranking`'s first group, and a tie never names a variant that the ranking beside it puts behind
    another."""
    tied = tied or (lambda first, other: not separated(first, other))  # a front needs no p: no test under 2%
    groups = rank_groups(ordered, lambda first, other: (not tied(first, other), math.nan))
    return [r.row for r in takewhile(lambda r: r.group == 0, groups)]


def _not_separated(first: Any, other: Any, tolerance: float) -> bool:
    return not separated(first, other, tolerance=tolerance)


def _cells(ok) -> Iterator[tuple[dict[str, Any], Any, float]]:
    """(key, rows, tolerance) per combination and N of the ok rows `ok`, in the axes' order, with the
    ranking's tolerance of its combination (tolerance_of, read off its rows that are not suspect)."""
    for combo_key, combo in grouped(ok, list(COMBO_AXES)):
        tolerance = tolerance_of(combo[~flag_mask(combo, "suspect")])
        for length_key, cell in grouped(combo, list(LENGTHS)):
            yield {**combo_key, **length_key}, cell, tolerance


def best_variant(df):
    """Per combination, seq_len and seq_k: the fastest ok variant, its median time, how far ahead of the next,
    the p of the two (results.judge.separation), and the variants it cannot be told apart from (`tied`:
    `front`'s, so its first is the runner-up, whose lead and p a tie's text shows). Variants that ran the
    same kernel there are one (one_per_kernel). `suspect`: the variants whose ok cells there are suspect
    (never ranked); `only_ranked`: the best is the only variant ranked there because every other is
    suspect, so it is fastest of one (the findings say so too)."""
    import pandas as pd

    ok = ok_rows(_narrow(df)).dropna(subset=["time_ms_median"])
    records = []
    for key, every, tolerance in _cells(ok):
        sus = flag_mask(every, "suspect")
        if sus.all():
            continue
        ranked = contestants(every[~sus]).sort_values("time_ms_median", kind="stable")
        first = ranked.iloc[0]
        suspect = variant_order(set(map(str, every[sus]["variant"])) - set(map(str, every[~sus]["variant"])))
        rec = {
            **key,
            "best": first["variant"],
            "time_ms": float(first["time_ms_median"]),
            "runner_up": "",
            "lead": math.nan,
            "lead_spread": math.nan,  # the lead's relative spread: the two cells' half-IQRs added
            "p_value": math.nan,
            "tied": "",
            "only_ranked": len(ranked) == 1 and bool(suspect),
            "suspect": " ".join(suspect),
        }
        if len(ranked) > 1:
            second = ranked.iloc[1]
            rec["runner_up"] = second["variant"]
            rec["lead"] = float(second["time_ms_median"]) / float(first["time_ms_median"])
            rec["lead_spread"] = ratio_spread(first.get("rel_iqr"), second.get("rel_iqr"))
            rec["p_value"] = separation(first, second).p
            # the variants the winner cannot be told apart from, fastest first, up to the first it can
            rows = [r for _, r in ranked.iterrows()]
            tied = partial(_not_separated, tolerance=tolerance)
            rec["tied"] = " ".join(str(r["variant"]) for r in front(rows, tied)[1:])
        records.append(rec)
    return pd.DataFrame(
        records,
        columns=[
            *COMBO_AXES,
            *LENGTHS,
            "best",
            "time_ms",
            "runner_up",
            "lead",
            "lead_spread",
            "p_value",
            "tied",
        ]
        + ["only_ranked", "suspect"],
    )


def ranking(df):
    """Per combination, seq_len and seq_k: every ok variant, fastest first, with its rank group
    (results.ranks.rank_groups): a variant joins the group of the faster variants while it cannot be told
    apart from that group's fastest (`separated`: 2% slower and judged slower at 0.05), and opens the next
    group once it can. Columns: the axes, `variant`, `time_ms`, `ratio` (its median over the fastest's),
    `group` (0 for the front) and `p_value` (separation's p against its group's fastest, or the previous
    group's for a group's first). The best-variant table says only who leads; this says where every other
    variant stands, so that a variant 1.5× behind is ranked behind even where the two at the front are tied.
    Variants that ran the same kernel there are one (one_per_kernel)."""
    import pandas as pd

    ok = ranked_rows(_narrow(df)).dropna(subset=["time_ms_median"])
    records = []
    for key, sub, tolerance in _cells(ok):
        ranked = contestants(sub).sort_values("time_ms_median", kind="stable")
        fastest, first_spread = float(ranked.iloc[0]["time_ms_median"]), ranked.iloc[0].get("rel_iqr")
        apart = partial(told_apart, tolerance=tolerance)  # the combination's (tolerance_of)
        for placed in rank_groups((r for _, r in ranked.iterrows()), apart):
            r = placed.row
            records.append(
                {
                    **key,
                    "variant": r["variant"],
                    "time_ms": float(r["time_ms_median"]),
                    "ratio": float(r["time_ms_median"]) / fastest,
                    "ratio_spread": ratio_spread(first_spread, r.get("rel_iqr")),
                    "group": placed.group,
                    "p_value": placed.p,
                }
            )
    return pd.DataFrame(
        records,
        columns=[*COMBO_AXES, *LENGTHS, "variant", "time_ms", "ratio", "ratio_spread", "group", "p_value"],
    )


def ranking_text(ranks) -> str:
    """One N's ranking (rows of `ranking`, fastest first) as text: 'sdpa_flash ≈ sdpa › chunked 1.25× ›
    flex 1.48×': ≈ within a group, › between groups, each group after the first with its fastest's ratio, in
    the digits its spread supports (results.formulas.ratio_number)."""
    parts: list[str] = []
    current = None
    for _, r in ranks.iterrows():
        if current is None or r["group"] != current:
            ratio = ratio_number(r["ratio"], r["ratio_spread"])
            head = str(r["variant"]) if current is None else f"{r['variant']} {ratio}×"
            parts.append(head)
            current = r["group"]
        else:
            parts[-1] += f" ≈ {r['variant']}"
    return " › ".join(parts)


def speedups(df, baseline: str):
    """Long table of baseline time / variant time per combination, seq_len, seq_k and variant (both ok)."""
    import pandas as pd

    ok = ranked_rows(df).dropna(subset=["time_ms_median"])
    keys = list(COMBO_AXES) + list(LENGTHS)  # a decode cell is paired at its own N_k
    base = ok[ok["variant"] == baseline][keys + ["time_ms_median"]]
    base = base.rename(columns={"time_ms_median": "base_ms"})
    merged = ok[keys + ["variant", "time_ms_median"]].merge(base, on=keys, how="inner")
    merged["speedup"] = merged["base_ms"].astype(float) / merged["time_ms_median"].astype(float)
    merged["baseline"] = baseline
    return pd.DataFrame(merged)


def approximate_names(rows) -> dict[str, str]:
    """{variant: how a ranking names it} for each variant of `rows` declared approximate (its rows carry the
    rel_err bound it is held to, Capability.approximate): its time is for another answer than the exact
    kernels' beside it."""
    if "approximate" not in rows.columns:
        return {}
    held = rows.dropna(subset=["approximate"]).groupby("variant")["approximate"].max()
    return {str(v): approximate_text(v, b) for v, b in held.items()}


def approximate_text(variant: Any, bound: Any) -> str:
    """'performer (approximate, rel_err <= 0.9)': a variant held to `bound` (its rows' `approximate`), as
    every ranking, table and page names it; the name alone where bound is missing (an exact kernel)."""
    return f"{variant} (approximate, rel_err <= {float(bound):g})" if present(bound) else str(variant)
