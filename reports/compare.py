"""`attnbench compare`: the same cells on two runs (or run sets), judged by results.judge, as tables and
pages: ratios with CIs, verdicts, a gate, both runs' calibration, and which device groups met."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.results import devices, judge, spreads
from attnbench.results.formulas import ci_spread, counted, ratio_change
from attnbench.results.judge import BROKEN, VERDICTS
from attnbench.results.schema import CELL_AXES, STATUSES
from attnbench.results.thresholds import Threshold

from . import calibration, compare_load
from . import page as pg
from .tables import axis_value, present, varying

DEFAULT_ALPHA = judge.ALPHA  # --alpha changes it


def change_text(ratio: float, significant: bool | None, judged: judge.Judged | None = None) -> str:
    """pyperf's wording: '1.23x slower', '1.10x faster', with 'not significant' when it is not; a ratio
    that shows as 1.00x either way reads 'no change (1.00x)'. The number in the digits the judged cell's CI
    supports (results.formulas.ratio_change: '1.7x slower' at CI [1.51, 1.89]); without `judged` (a
    variant's geometric mean over cells) no spread is known, and it keeps two decimals. A significant
    change the judge calls 'ambiguous' (CI excluding 1, not past the run-to-run or visit-to-visit floor) or
    'same' says so. Where
    the cell's medians point the other way (judge.disagreement), it says that instead of a direction, so
    that the change never reads one way beside the gate's medians reading the other."""
    if not math.isfinite(ratio) or ratio <= 0:
        return "n/a"
    apart = judge.disagreement(judged) if judged is not None else ""
    spread = ci_spread(ratio, judged.ci_low, judged.ci_high) if judged is not None else math.nan
    number, direction = ratio_change(ratio, spread)
    word = apart or (f"{number}x {direction}" if direction else f"no change ({number}x)")
    if significant is None:
        return f"{word} (no test)"
    if not significant:
        return f"{word}, not significant"
    if judged is not None and judged.verdict == "ambiguous":
        words = judge.verdict_words(judged)
        return f"{word}, ambiguous" + (f" ({words})" if words else "")
    if judged is not None and judged.verdict == "same" and not word.startswith("no change"):
        return f"{word}, {judge.verdict_words(judged) or 'same (within the tolerance)'}"
    return f"{word}; judged {judged.verdict} by the test" if apart and judged is not None else word


@dataclass
class Comparison:
    """Cells of run B against run A: per-cell ratios and verdicts (results.judge), per-variant geometric
    means, status changes, and the one rule they were judged by."""

    run_a: str
    run_b: str
    label_a: str
    label_b: str
    match: str
    axes: list[str]
    cells: Any  # DataFrame: one row per matched cell
    per_variant: Any  # DataFrame
    judgement: judge.Judgement
    ceilings: list = field(default_factory=list)  # reports.calibration.Ceiling of both runs, side by side
    normalize: str | None = None  # 'calibration': B's times were rescaled to A's machine
    pairing: list[str] = field(default_factory=list)  # runs of several devices: which group met which
    only_a: Any = None  # DataFrame (cell_id, status): the cells only A has, never compared
    only_b: Any = None  # and those only B has
    sampling_warnings: list[str] = field(
        default_factory=list
    )  # the runs' sampling settings, where they differ
    machines: tuple[str, str] | None = None  # A's machine and B's, where they are two
    busy: list[str] = field(default_factory=list)  # a run on a busy machine (drift.is_busy), or unprobed
    setup: list[str] = field(default_factory=list)  # the runs' set-ups, where they differ (compare_load)
    # what differs between the runs' settings, sweep and environment, in one line, said first
    differences: str = ""
    unjudged: list[str] = field(default_factory=list)  # cells ok in both with too few timings to judge

    @property
    def threshold(self) -> Threshold | None:
        return self.judgement.design.threshold

    @property
    def alpha(self) -> float:
        return self.judgement.design.alpha

    @property
    def tolerance(self) -> float:
        return self.judgement.design.tolerance

    @property
    def control(self) -> str | None:
        return self.judgement.design.control

    @property
    def rule(self) -> str:
        return " ".join(t for t in (self.judgement.rule, self.foreign_floor) if t)

    @property
    def foreign_floor(self) -> str:
        """A sentence where a floor measured on the CPU reference VM judged cells of another device kind."""
        kinds = [*self.cells.get("device_a", ()), *self.cells.get("device_b", ())]
        run, sample = self.judgement.reference_floors
        return spreads.foreign_floor_text(kinds, run=run, sample=sample)

    @property
    def calibration_warnings(self) -> list[str]:
        return calibration.warnings_for(self.ceilings, same_machine=self.machines is None)

    @property
    def timing_warnings(self) -> list[str]:
        """One line per pair of timing modes that met in paired ok cells (events in A, graph in B, ...): a
        CUDA graph leaves out the launch gaps that events time, so such a ratio is partly the mode's."""
        if "timing_mode_a" not in self.cells.columns:
            return []
        ok = self.cells[(self.cells["status_a"] == "ok") & (self.cells["status_b"] == "ok")]
        ta, tb = ok["timing_mode_a"].astype("string"), ok["timing_mode_b"].astype("string")
        differ = ok[ta.notna() & tb.notna() & (ta != tb)]
        counts = differ.groupby(["timing_mode_a", "timing_mode_b"]).size()
        return [
            f"{n} paired cell{'s' if n > 1 else ''} timed by {a} in A and by {b} in B: their ratios are "
            "partly the timing mode's (a CUDA graph leaves out launch gaps); run both with the same --timing"
            for (a, b), n in counts.items()
        ]

    @property
    def control_warnings(self) -> list[str]:
        """A line where the control crosses machines and its own time moved with them."""
        if self.control is None or self.machines is None:
            return []
        own = self.cells[self.cells["variant"] == self.control]["ratio"].dropna().to_numpy(dtype=float)
        move = math.exp(sum(math.log(r) for r in own) / len(own)) if len(own) else math.nan
        return calibration.control_moved(self.control, self.machines, move, self.tolerance)

    @property
    def warnings(self) -> list[str]:
        return (
            self.busy
            + self.unjudged
            + self.setup
            + self.calibration_warnings
            + self.sampling_warnings
            + self.timing_warnings
            + self.control_warnings
        )

    @property
    def regressions(self):
        return self.cells[self.cells["regression"]]

    @property
    def missing(self) -> list[str]:
        """The cells ok in A that B has no row of: with --fail-above each fails the gate (MISSING), as a cell
        ok in A and broken in B does, so that a sweep that shrank is no pass; [] without --fail-above."""
        x = self.only_a
        return [] if self.threshold is None or x is None else list(x.loc[x["status"] == "ok", "cell_id"])

    @property
    def fails(self) -> bool:
        """Whether the gate fails: a regression (REGRESSION) or a cell ok in A missing from B (MISSING)."""
        return bool(len(self.regressions) or self.missing)

    @property
    def lacking(self) -> tuple[int, int]:
        """(cells of A with no ok row in B, cells of A): B's row missing, or not ok."""
        only = len(self.only_a) if self.only_a is not None else 0
        return only + int((self.cells["status_b"] != "ok").sum()), only + len(self.cells)


def _match_axes(a, b) -> tuple[list[str], str]:
    """Axes to match cells on: all of them when both runs used the same devices, else all but device."""
    da, db = sorted(set(a["device"].dropna())), sorted(set(b["device"].dropna()))
    if da == db:
        ma, mb = (sorted(set(df["device_model"].dropna())) if "device_model" in df else [] for df in (a, b))
        other = f"{', '.join(da)} in both runs, on other models: {', '.join(ma)} in A, {', '.join(mb)} in B"
        said = "same devices in both runs" if ma == mb else other
        return list(CELL_AXES), f"cells matched by cell_id ({said})"
    if len(da) == 1 and len(db) == 1:
        return [
            x for x in CELL_AXES if x != "device"
        ], f"cells matched on every axis except device ({da[0]} in A, {db[0]} in B)"
    common = sorted(set(da) & set(db))
    return list(
        CELL_AXES
    ), f"cells matched by cell_id on the devices both runs used ({', '.join(common) or 'none'})"


def _cell_axes(a, b, split: bool) -> tuple[list[str], str]:
    """The axes a cell pairs on, and how to say it. A run that mixes device models or speeds (split)
    pairs a cell only with the same cell on the same model."""
    if split:
        axes = [*CELL_AXES, "device_model"]
        return axes, "cells matched by cell_id within one device model (runs of several device groups)"
    return _match_axes(a, b)


# what each side of a paired cell keeps: what results.judge.Side.of reads (a run set's rows have the run
# columns, judge.RUN_COLUMNS; a run's are [] here), and what the tables show
_KEEP = (
    "run_id", "cell_id", "device", "where", "status", "message", "flops", "timing_mode", "rel_err",
    "approximate",
    *judge.SIDE_COLUMNS,
)  # fmt: skip


def _paired(a, b, axes: list[str]):
    """One row per cell both runs have (the last row of a cell measured twice), A's columns _a, B's _b."""
    for df in (a, b):
        for col in judge.RUN_COLUMNS:
            if col not in df.columns:
                df[col] = [[] for _ in range(len(df))]
    keep = axes + [c for c in _KEEP if c not in axes]
    keep_a = a[keep].drop_duplicates(subset=axes, keep="last")
    keep_b = b[keep].drop_duplicates(subset=axes, keep="last")
    return keep_a.merge(keep_b, on=axes, how="inner", suffixes=("_a", "_b"))


def _shape(r: Any, axes: list[str]) -> tuple:
    """A paired cell's axes but its variant: the shape its control is looked up at."""
    return tuple(r[x] for x in axes if x != "variant")


def _side(r: Any, suffix: str, scale: float = 1.0) -> judge.Side | None:
    """One side of a paired row for the judge, B's times rescaled by `scale` (--normalize); None where it
    is not ok or the scale is unknown."""
    if r[f"status{suffix}"] != "ok" or not present(r[f"time_ms_median{suffix}"]) or not math.isfinite(scale):
        return None
    side = judge.Side.of(r, suffix)
    return side.scaled(scale) if scale != 1.0 else side


def _cells(m, axes: list[str], control: str | None, scales: list[float]) -> list[judge.Cell]:
    """The judge's cells of the paired rows, each with the control's cell of its shape (ok in both)."""
    ctrl = {_shape(r, axes): r for _, r in m.iterrows() if control is not None and r["variant"] == control}
    out = []
    for (_, r), scale in zip(m.iterrows(), scales, strict=True):
        c = ctrl.get(_shape(r, axes))
        ca, cb = (_side(c, "_a"), _side(c, "_b")) if c is not None else (None, None)
        out.append(
            judge.Cell(
                str(r["status_a"]), str(r["status_b"]), _side(r, "_a"), _side(r, "_b", scale), ca, cb,
                is_control=control is not None and r["variant"] == control,
            )
        )  # fmt: skip
    return out


def _scales(m, axes: list[str], normalize: str | None, meta_a, meta_b) -> list[tuple[float, str]]:
    """Per paired row: what B's times are multiplied by (--normalize calibration: by the ceiling that bounds
    the cell on A, reports.calibration.factor) and that ceiling's name; (1, '') without."""
    if not normalize:
        return [(1.0, "")] * len(m)
    out = []
    for _, r in m.iterrows():
        device_a = r["device_a"] if "device_a" in r else r["device"]
        cell = {**{x: r[x] for x in axes}, "device": device_a, "flops": r["flops_a"], "where": r["where_a"]}
        device_b = r["device_b"] if "device_b" in r else r["device"]
        out.append(calibration.factor(cell, meta_a, meta_b, device_b, r["where_b"]))
    return out


def _record(
    r: Any, axes: list[str], j: judge.Judged, scale: float, bound: str, normalize, alpha: float
) -> dict[str, Any]:
    """One row of the cells table: the cell's axes, where it ran, its statuses, and the judge's answer;
    time_ms_a and time_ms_b are the judge's levels where it was judged (geometric means: their ratio is
    B/A), else the stored medians; median_ms_a and median_ms_b the stored medians (B's times `scale`)."""
    import pandas as pd

    def median(side: str, factor: float) -> float:
        m = r[f"time_ms_median_{side}"]
        return float(m) * factor if present(m) else math.nan

    def shown(side: str, factor: float, level: float) -> float:
        return level if math.isfinite(level) else median(side, factor)

    significant = (j.p_value < alpha) if math.isfinite(j.p_value) else None
    ok = r["status_a"] == "ok" and r["status_b"] == "ok"
    ctrl = j.control_ratio if j.control_ratio > 0 else 1.0  # the gate's B median: over its control's
    return {
        **{x: r[x] for x in axes},
        "cell_id": r["cell_id_b"],  # B's: the cell a REGRESSION names (A's differs in an A/B's variant)
        "device_a": r["device_a"] if "device_a" in r else r["device"],
        "device_b": r["device_b"] if "device_b" in r else r["device"],
        "where_a": r["where_a"],
        "where_b": r["where_b"],
        "status_a": r["status_a"],
        "status_b": r["status_b"],
        "timing_mode_a": r["timing_mode_a"] if present(r["timing_mode_a"]) else None,
        "timing_mode_b": r["timing_mode_b"] if present(r["timing_mode_b"]) else None,
        **{f"{c}_{side}": r[f"{c}_{side}"] for c in ("rel_err", "approximate") for side in "ab"},
        "time_ms_a": shown("a", 1.0, j.level_a),
        "time_ms_b": shown("b", scale if math.isfinite(scale) else 1.0, j.level_b),
        "median_ms_a": median("a", 1.0),
        "median_ms_b": median("b", (scale if math.isfinite(scale) else 1.0) / ctrl),
        "control_ratio": j.control_ratio,
        "bound": bound,
        "norm_factor": scale if normalize else math.nan,
        "n_a": j.n_a,
        "n_b": j.n_b,
        "paired": j.paired,
        "blind": j.blind,
        "ratio": j.ratio,
        "ratio_ci_low": j.ci_low,
        "ratio_ci_high": j.ci_high,
        "p_value": j.p_value,
        "p_holm": j.p_holm,
        "significant": bool(significant) if significant is not None else pd.NA,
        "verdict": j.verdict,
        "change": change_text(j.ratio, significant, j) if ok else f"{r['status_a']} -> {r['status_b']}",
        "regression": j.regression,
        "why": j.why,
    }


def _per_variant(cells):
    """Per variant: the geometric mean of B/A over the cells ok in both, the cells per verdict, and how
    many cells changed status."""
    import numpy as np
    import pandas as pd

    per = []
    for variant, sub in cells.groupby("variant", sort=True):
        ratios = sub["ratio"].dropna().to_numpy(dtype=float)
        per.append(
            {
                "variant": variant,
                "cells": len(ratios),
                "geomean_ratio": float(np.exp(np.log(ratios).mean())) if len(ratios) else math.nan,
                **{v: int((sub["verdict"] == v).sum()) for v in VERDICTS},
                "status_changed": int((sub["status_a"] != sub["status_b"]).sum()),
            }
        )
    return pd.DataFrame(per)


def compare_runs(
    run_a: str | Path,
    run_b: str | Path,
    *,
    threshold: Threshold | None = None,
    alpha: float = DEFAULT_ALPHA,
    normalize: str | None = None,
    control_variant: str | None = None,
    variant_a: str | None = None,
    variant_b: str | None = None,
    run_spread: float | None = None,
    sample_spread: float | None = None,
) -> Comparison:
    """Load two runs (or run sets) and judge their common cells (results.judge). RunDirError for a bad run
    dir; ValueError (one line) when they share no cell or cannot be compared as asked. normalize=
    'calibration' rescales B's times to A's machine (reports.calibration); control_variant judges the
    others relative to that variant; variant_a and variant_b compare one variant of run B with another of
    run A (the same run: an A/B in one run, its visits paired by round); run_spread (sample_spread) how far
    whole runs (visits) move on this machine (a fraction), for comparisons that cannot see it."""
    from attnbench.results import runset

    a, b, meta_a, meta_b, labels, (groups_a, groups_b), same, busy = compare_load.load(
        run_a, run_b, normalize, control_variant, variant_a, variant_b
    )
    split = any(g.label for g in groups_a + groups_b)
    axes, how = _cell_axes(a, b, split)
    if variant_a is not None:
        how += f"; {variant_b} in B against {variant_a} in A"
    m = _paired(a, b, axes)
    if m.empty:
        raise ValueError(compare_load.no_common(run_a, run_b, a, b, axes, how))
    interleaved = runset.interleaved(meta_a, meta_b)
    if interleaved:
        how += "; runs paired: the two sets were made interleaved (run i of each back to back)"
    if run_spread is not None and not 0 <= run_spread < 1:
        raise ValueError(f"--run-spread must be from 0 to below 100%, got {run_spread:.0%}")
    design = judge.Design(alpha, threshold, control_variant, same, interleaved, run_spread, sample_spread)
    scales = _scales(m, axes, normalize, meta_a, meta_b)
    judge_cells = _cells(m, axes, control_variant, [s for s, _ in scales])
    judgement = judge.judge(judge_cells, design)
    lacking = compare_load.unjudged(list(zip(judge_cells, judgement.cells, strict=True)), meta_a, meta_b)
    if lacking.startswith("compare can judge none"):  # a gate of nothing would pass: refused, as no_common
        raise ValueError(lacking)
    cells = _table(m, axes, judgement, scales, normalize)
    # which device groups met, in the order of the pairs (before the cells are sorted for the tables)
    of_a, of_b = devices.group_of(groups_a), devices.group_of(groups_b)
    pairs = [(of_a[wa], of_b[wb]) for wa, wb in zip(cells["where_a"], cells["where_b"], strict=True)]
    several = split or any(len(g.members) > 1 for g in groups_a + groups_b)
    cells = cells.sort_values(
        [x for x in axes if x not in ("variant", "seq_len")] + ["variant", "seq_len"], kind="stable"
    ).reset_index(drop=True)
    return Comparison(
        str(run_a), str(run_b), *labels, how, axes, cells, _per_variant(cells), judgement,
        calibration.group_ceilings(pairs), normalize, _pairing(pairs, groups_a, groups_b) if several else [],
        *(compare_load.unmatched(x, y, axes) for x, y in ((a, b), (b, a))),
        compare_load.sampling_warnings(meta_a, meta_b), compare_load.machines(meta_a, meta_b), busy,
        compare_load.setup_lines(meta_a, meta_b), compare_load.differences_line(meta_a, meta_b),
        [lacking] if lacking else [],
    )  # fmt: skip


def _table(m, axes: list[str], judgement: judge.Judgement, scales, normalize):
    """The cells table: one record per paired row (_record), with its basis: the level judged at, and
    'paired' where its replicates were."""
    import pandas as pd

    alpha, level = judgement.design.alpha, judgement.level
    records = [
        {
            **_record(r, axes, j, scale, bound, normalize, alpha),
            "basis": level + " paired" * j.paired if j.n_a else "",
        }
        for (_, r), j, (scale, bound) in zip(m.iterrows(), judgement.cells, scales, strict=True)
    ]
    return pd.DataFrame(records)


def _pairing(pairs: list[tuple[Any, Any]], groups_a: list, groups_b: list) -> list[str]:
    """One line per pair of device groups whose cells were compared, and one per group left unpaired."""
    from collections import Counter

    def text(side: str, g) -> str:
        n, names = len(g.members), ", ".join(g.members)
        return f"{side} {g.device} {g.label or g.model} ({n} device{'s' * (n != 1)}: {names})"

    counts = Counter(pairs)
    lines = [f"paired {text('A', ga)} with {text('B', gb)}: {n} cells" for (ga, gb), n in counts.items()]
    for side, gs, used in (("A", groups_a, {p[0] for p in counts}), ("B", groups_b, {p[1] for p in counts})):
        lines += [
            f"unpaired: {text(side, g)} has no cell the other run measured on its model"
            for g in gs
            if g not in used
        ]
    return lines


def _fmt(v: float, spec: str = ".4g") -> str:
    return format(v, spec) if isinstance(v, float) and math.isfinite(v) else "n/a"


def _ci_text(lo: float, hi: float) -> str:
    return f"[{lo:.3f}, {hi:.3f}]" if math.isfinite(lo) and math.isfinite(hi) else "n/a"


def _judged_ms(r: Any, side: str) -> float:
    """What a row shows of one side beside its B/A: the geometric mean of the replicates judged (time_ms_a,
    time_ms_b: the ratio is of these), so the two times, the ratio and the change are one quantity."""
    return float(r[f"time_ms_{side}"]) if present(r[f"time_ms_{side}"]) else math.nan


def cell_table(cmp: Comparison) -> pg.Table:
    """One row per cell: both sides' judged geometric means, B/A (their ratio), its CI, p, the verdict and
    the change in words, all of one quantity; the rows' medians beside them only where --fail-above
    median:N% gates on them (labelled as the gate's)."""
    shown = [x for x in varying(cmp.cells, [a for a in cmp.axes if a not in ("variant", "seq_len")])]
    medians = cmp.threshold is not None and cmp.threshold.stat == "median"
    scaled = cmp.normalize == "calibration"  # B's times were rescaled before judging, as with a control
    headers = (
        "variant",
        *shown,
        "seq_len",
        "A ms",
        f"B ms rescaled by {cmp.control}"
        if cmp.control
        else "B ms rescaled by calibration"
        if scaled
        else "B ms",
        "B/A",
        "B/A 95% CI",
        "p",
        "p_holm",
        "verdict",
        "change",
        *(("gate: A median ms", "gate: B median ms") if medians else ()),
        *(("regression",) if cmp.threshold else ()),
    )
    rows = []
    for _, r in cmp.cells.iterrows():
        rows.append(
            (
                str(r["variant"]),
                *[axis_value(a, r[a]) for a in shown],
                str(r["seq_len"]),
                _fmt(_judged_ms(r, "a")),
                _fmt(_judged_ms(r, "b")),
                _fmt(r["ratio"], ".3f"),
                _ci_text(r["ratio_ci_low"], r["ratio_ci_high"]),
                _fmt(r["p_value"], ".2g"),
                _fmt(r["p_holm"], ".2g"),
                str(r["verdict"]),
                str(r["change"]),
                *((_fmt(r["median_ms_a"]), _fmt(r["median_ms_b"])) if medians else ()),
                *((("REGRESSION: " + r["why"]) if r["regression"] else "",) if cmp.threshold else ()),
            )
        )
    level = cmp.judgement.level
    gate = (
        "; gate: A median ms, gate: B median ms: each run's median of the cell (time_ms_median, as run and "
        "report show it; B's rescaled by --normalize), what --fail-above median:N% compares (with "
        "--control, B's relative to it): a heavy tail can set them apart from the geometric means"
        if medians
        else ""
    )
    return pg.Table(
        headers,
        tuple(rows),
        f"A ms, B ms: the geometric mean of each side's {level}s judged (B's rescaled by --normalize, "
        "relative to the control with --control; a cell not judged: its median), what B/A is the ratio of "
        "(>1: B slower), with its 95% CI, and what the change says in words; p the cell's test, p_holm "
        f"Holm-adjusted over the cells judged; verdicts and the gate by the rule below{gate}. A change that "
        f"reads 'medians and {level}s disagree (M vs G)' has no direction: B/A by the medians is M and by "
        "the geometric means G, one above 1 and the other below, each more than 5% from it.",
    )


def accuracy_lines(cmp: Comparison) -> list[str]:
    """A line per variant declared approximate on either side (its rows' `approximate` bound): its worst
    rel_err against float64 over the cells ok on both sides, in A and in B. A faster approximation may
    owe its speed to a coarser answer, which the time ratios alone do not say."""
    cells = cmp.cells
    if "approximate_a" not in cells.columns:
        return []
    ok = cells[(cells["status_a"] == "ok") & (cells["status_b"] == "ok")]
    lines = []
    for variant, sub in ok.groupby("variant", sort=True):
        held = {s: sub[f"approximate_{s}"].dropna() for s in "ab"}
        if not any(len(h) for h in held.values()):
            continue
        said = []
        for s, label in (("a", "A"), ("b", "B")):
            worst = sub[f"rel_err_{s}"].dropna()
            bound = f" (held to {float(held[s].max()):g})" if len(held[s]) else " (exact)"
            said.append(f"{float(worst.max()):.2g} in {label}{bound}" if len(worst) else f"n/a in {label}")
        lines.append(f"{variant} is approximate: worst rel_err against float64 {', '.join(said)}")
    return lines


def unmatched_lines(cmp: Comparison, named: int = 10) -> list[str]:
    """How many cells only one run has (never compared) and their statuses, and B's broken ones by name: a
    cell only in B has no A to regress from, so it never fails the gate, but it is not hidden."""
    sides = [(side, x) for side, x in (("A", cmp.only_a), ("B", cmp.only_b)) if x is not None and len(x)]
    if not sides:
        return []

    def statuses(x) -> str:
        counts = x["status"].value_counts()
        return ", ".join(
            f"{int(counts[s])} {s}" for s in dict.fromkeys((*STATUSES, *counts.index)) if s in counts.index
        )

    said = [f"{counted(len(x), 'cell')} only in {side} ({statuses(x)})" for side, x in sides]
    gone = f"; the {len(cmp.missing)} ok only in A are MISSING from B, which --fail-above fails on"
    gone = gone if len(cmp.missing) else ""
    lines = [f"not compared, the other run has no such cell: {' and '.join(said)}{gone}"]
    broken = cmp.only_b[cmp.only_b["status"].isin(BROKEN)] if cmp.only_b is not None else []
    if len(broken):
        names = [f"{cid} ({st})" for cid, st in zip(broken["cell_id"], broken["status"], strict=True)]
        more = f", and {len(names) - named} more" if len(names) > named else ""
        lines.append(
            f"broken only in B, not gated (no cell of A to regress from): {', '.join(names[:named])}{more}"
        )
    return lines


def verdict_rule(cmp: Comparison) -> str:
    """The one rule text this comparison was judged by (results.judge.rule_text)."""
    return cmp.rule


def variant_table(cmp: Comparison) -> pg.Table:
    rows = []
    for _, r in cmp.per_variant.iterrows():
        g = r["geomean_ratio"]
        # a geometric mean over cells: no one spread is known for it, so two decimals (change_text)
        overall = change_text(g, None).replace(" (no samples to test)", "") if math.isfinite(g) else "n/a"
        rows.append(
            (
                str(r["variant"]),
                str(r["cells"]),
                _fmt(g, ".3f"),
                overall,
                *(str(r[v]) for v in VERDICTS),
                str(r["status_changed"]),
            )
        )
    return pg.Table(
        ("variant", "cells ok in both", "geomean B/A", "overall", *VERDICTS, "status changed"),
        tuple(rows),
        "cells per verdict (faster, slower, same, ambiguous: rule under the per-cell table)",
    )


def verdict(cmp: Comparison) -> str:
    """The last line: how many regressions beyond the threshold (or that no threshold was given), how many
    cells ok in A are missing from B (MISSING, with a threshold), how many of A's cells have no ok row in B,
    and how many cells only B has are broken (never gated: unmatched_lines)."""
    n_broken = int(cmp.only_b["status"].isin(BROKEN).sum()) if cmp.only_b is not None else 0
    also = f"; {counted(n_broken, 'cell')} broken only in B, not gated (above)" if n_broken else ""
    lacking, of = cmp.lacking
    if lacking:
        has = "has" if lacking == 1 else "have"
        also = f"; {lacking} of A's {counted(of, 'cell')} {has} no ok row in B" + also
    if cmp.threshold is None:
        return "no --fail-above given: nothing can fail" + also
    n = int(cmp.cells["regression"].sum())
    what = f"--fail-above {cmp.threshold.text}"
    said = f"{what}: {n} regression{'s' * (n != 1)}" if n else f"{what}: no regression"
    if cmp.missing:  # the gate fails on them alone: said first, so that the line does not read as a pass
        lost = f"{counted(len(cmp.missing), 'cell')} ok in A missing from B (MISSING)"
        said = f"{what}: FAILED: {lost}, " + (f"and {n} regression{'s' * (n != 1)}" if n else "no regression")
    return said + also


def verdict_counts(cmp: Comparison) -> str:
    """'verdicts: 3 slower, 1 same, 4 ambiguous' over the cells ok in both runs."""
    counts = cmp.cells["verdict"].value_counts()
    parts = [f"{int(counts[v])} {v}" for v in VERDICTS if v in counts]
    return "verdicts: " + (", ".join(parts) if parts else "no cell ok in both runs")


def calibration_table(cmp: Comparison) -> pg.Table:
    """Both runs' calibrated ceilings side by side, B/A, and whether they differ by more than 10%."""
    rows = tuple(
        (c.device, c.what, _fmt(c.a or math.nan), _fmt(c.b or math.nan), _fmt(c.ratio, ".3f"),
         "differs" if c.differs else "")
        for c in cmp.ceilings
    )  # fmt: skip
    return pg.Table(
        ("device", "ceiling", "A", "B", "B/A", f"> {calibration.CALIBRATION_WARN:.0%} apart"), rows
    )


def normalize_note(cmp: Comparison) -> str:
    """What B's times were rescaled by before judging: nothing, the calibration, or the control (with the
    control's own change between the runs, as measured)."""
    if cmp.control is not None:
        import numpy as np

        ratios = cmp.cells["control_ratio"].dropna().to_numpy(dtype=float)
        seen = f"Relative to the control variant {cmp.control} (rule below)."
        if len(ratios):
            mean = float(np.exp(np.log(ratios).mean()))
            seen += (
                f" The control's B/A over the {len(ratios)} cells judged by it: geometric mean {mean:.3f}, "
                f"{ratios.min():.3f} to {ratios.max():.3f}."
            )
        return seen
    if cmp.normalize != "calibration":
        return "Times are compared as measured (--normalize calibration rescales B to A's machine)."
    return calibration.normalized_text(list(cmp.cells["norm_factor"].astype(float)))


def missing_lines(cmp: Comparison) -> list[str]:
    """A line per cell ok in A that B has no row of, which fails --fail-above (Comparison.missing)."""
    return [f"MISSING {cid}: ok in A, no row in B" for cid in cmp.missing]
