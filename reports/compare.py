"""`attnbench compare`: the same cells on two runs: ratios, effect sizes, verdicts on raw samples (or on
process medians, where both runs measured each cell in 3 or more worker processes), a gate."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.results import devices
from attnbench.results.schema import CELL_AXES, float_list
from attnbench.results.stats import (  # noqa: F401
    MIN_PROCESSES,
    PAIRED_RULE,
    PROCESS_RULE,
    RUNS_RULE,
    SAME_TOLERANCE,
    VERDICT_RULE,
    VERDICTS,
    difference,
    holm_adjusted,
    mann_whitney,
    paired_difference,
    process_difference,
)

from . import calibration, control
from . import page as pg
from .tables import axis_value, present, varying

STATS = ("median", "mean", "min", "max")
BROKEN = ("wrong", "error", "crashed", "timeout")  # ok in A and one of these in B is a regression too
DEFAULT_ALPHA = 0.05  # the same as stats.ALPHA; --alpha changes it
_SPEC = re.compile(r"^(?P<stat>[a-z]+):(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?P<pct>%?)$")


@dataclass(frozen=True)
class Threshold:
    """--fail-above STAT:N% (B slower than A by more than N percent) or STAT:X (by more than X ms)."""

    stat: str
    value: float
    relative: bool
    text: str

    def exceeded(self, a: float, b: float) -> bool:
        return (b - a) / a > self.value if self.relative else (b - a) > self.value


def parse_threshold(spec: str) -> Threshold:
    """'median:5%' -> Threshold, as pytest-benchmark's --benchmark-compare-fail; ValueError if malformed."""
    m = _SPEC.match(spec.strip())
    if not m or m["stat"] not in STATS:
        raise ValueError(
            f"bad --fail-above {spec!r}: expected STAT:N% or STAT:MS with STAT one of "
            f"{', '.join(STATS)} (e.g. median:5%)"
        )
    value = float(m["num"])
    relative = bool(m["pct"])
    return Threshold(m["stat"], value / 100 if relative else value, relative, spec.strip())


def stat_value(sample_ms: Any, median: Any, stat: str) -> float:
    """A statistic of a cell's raw samples (its stored median for 'median' or when samples are gone)."""
    if stat == "median" and present(median):
        return float(median)
    if isinstance(sample_ms, (list, tuple)) and sample_ms:
        import statistics

        fn = {"median": statistics.median, "mean": statistics.fmean, "min": min, "max": max}[stat]
        return float(fn(sample_ms))
    return float(median) if present(median) else math.nan


def change_text(ratio: float, significant: bool | None) -> str:
    """pyperf's wording: '1.23x slower', '1.10x faster', with 'not significant' when it is not."""
    if not math.isfinite(ratio):
        return "n/a"
    word = f"{ratio:.2f}x slower" if ratio >= 1 else f"{1 / ratio:.2f}x faster"
    if significant is None:
        return f"{word} (no samples to test)"
    return word if significant else f"{word}, not significant"


@dataclass
class Comparison:
    """Cells of run B against run A: per-cell ratios and p-values, geometric means, status changes."""

    run_a: str
    run_b: str
    label_a: str
    label_b: str
    match: str
    axes: list[str]
    cells: Any  # DataFrame: one row per matched cell
    per_variant: Any  # DataFrame
    threshold: Threshold | None
    alpha: float
    tolerance: float = SAME_TOLERANCE  # the ±band of B/A that counts as 'same'
    ceilings: list = field(default_factory=list)  # reports.calibration.Ceiling of both runs, side by side
    normalize: str | None = None  # 'calibration': B's times were rescaled to A's machine
    pairing: list[str] = field(default_factory=list)  # runs of several devices: which group met which
    control: str | None = None  # --control VARIANT: the others judged relative to its change

    @property
    def calibration_warnings(self) -> list[str]:
        return calibration.warnings_for(self.ceilings)

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
    def process_warnings(self) -> list[str]:
        """One line when paired ok cells were judged on pooled samples (fewer than 3 process medians on a
        side): their verdicts see only the samples within each run, not the spread from run to run."""
        ok = self.cells[(self.cells["status_a"] == "ok") & (self.cells["status_b"] == "ok")]
        n = int((ok["basis"] == "samples").sum()) if "basis" in ok.columns else 0
        if not n:
            return []
        k = max(int(ok["k_a"].min()), int(ok["k_b"].min()), 1) if len(ok) else 1
        how = "one process per cell" if k == 1 else f"fewer than {MIN_PROCESSES} processes per cell"
        return [
            f"{n} paired cell{'s' * (n != 1)} measured in {how} (--processes): their verdicts see only the "
            "samples within each run, not the run-to-run variance, and may cry wolf; measure both runs "
            f"with --processes {MIN_PROCESSES} or --rounds {MIN_PROCESSES}"
        ]

    @property
    def warnings(self) -> list[str]:
        return self.calibration_warnings + self.timing_warnings + self.process_warnings

    @property
    def regressions(self):
        return self.cells[self.cells["regression"]]


def _match_axes(a, b) -> tuple[list[str], str]:
    """Axes to match cells on: all of them when both runs used the same devices, else all but device."""
    da, db = sorted(set(a["device"].dropna())), sorted(set(b["device"].dropna()))
    if da == db:
        return list(CELL_AXES), "cells matched by cell_id (same devices in both runs)"
    if len(da) == 1 and len(db) == 1:
        return [
            x for x in CELL_AXES if x != "device"
        ], f"cells matched on every axis except device ({da[0]} in A, {db[0]} in B)"
    common = sorted(set(da) & set(db))
    return list(
        CELL_AXES
    ), f"cells matched by cell_id on the devices both runs used ({', '.join(common) or 'none'})"


def _with_device_model(rows, groups: list):
    """The run's rows with `device_model`: the device group each row was measured on (results.devices).
    Not `model`: the rows' own `model` column is the published model a cell's shape is from."""
    import pandas as pd

    of = devices.group_of(groups)
    rows["device_model"] = pd.array([of[w].model for w in rows["where"]], dtype="string")
    return rows


def _cell_axes(a, b, split: bool) -> tuple[list[str], str]:
    """The axes a cell pairs on, and how to say it. A run that mixes device models or speeds (split)
    pairs a cell only with the same cell on the same model."""
    if split:
        axes = [*CELL_AXES, "device_model"]
        return axes, "cells matched by cell_id within one device model (runs of several device groups)"
    return _match_axes(a, b)


def _check_normalize(normalize: str | None, meta_a: dict[str, Any], meta_b: dict[str, Any]) -> None:
    if normalize not in (None, "calibration"):
        raise ValueError(f"--normalize takes 'calibration', got {normalize!r}")
    if normalize and not (calibration.has_calibration(meta_a) and calibration.has_calibration(meta_b)):
        raise ValueError("--normalize calibration needs both runs' calibration (meta.json has none)")


def _check_sets(meta_a: dict[str, Any], meta_b: dict[str, Any], normalize, variant_a, same: bool) -> None:
    """ValueError (one line) for what run sets (results.runset) cannot be compared by: a set with a single
    run, --normalize (one calibration per run), an A/B inside one set (made in one run, its rounds pair)."""
    sets = [m.get("runset") for m in (meta_a, meta_b)]
    if not any(sets):
        return
    if not all(sets):
        which = "RUN_A" if sets[0] else "RUN_B"
        n = len((sets[0] or sets[1])["runs"])
        raise ValueError(
            f"{which} is a run set ({n} runs) and the other a single run: compare a set with a set, each "
            "made the same way (the spread between a side's runs is what the verdict is judged by)"
        )
    if normalize:
        raise ValueError("--normalize rescales one run by its calibration: use --control with run sets")
    if same and variant_a is not None:
        raise ValueError(
            "--variant-a/--variant-b in one run set: compare them in one of its runs, whose rounds pair them"
        )


def _paired(a, b, axes: list[str]):
    """One row per cell both runs have (the last row of a cell measured twice), A's columns _a, B's _b."""
    cols = ["run_id", "device", "where", "status", "message", "time_ms_median", "samples_ms", "flops"]
    cols.append("process_medians_ms")  # --processes K: each worker process's median; [] in older runs
    cols.append("round_medians_ms")  # --rounds R: each visit's median, the visits spread over the run
    cols.append("round_samples")  # --rounds R: how many of samples_ms each visit took ([] in older runs)
    cols.append("timing_mode")  # perf_counter, events or graph (harness.measure.timing); NA in older runs
    cols += ["run_medians_ms", "run_round_medians"]  # run sets (results.runset): each run's; [] for a run
    for df in (a, b):
        for col in ("run_medians_ms", "run_round_medians"):
            if col not in df.columns:
                df[col] = [[] for _ in range(len(df))]
    keep_a = a[axes + [c for c in cols if c not in axes]].drop_duplicates(subset=axes, keep="last")
    keep_b = b[axes + [c for c in cols if c not in axes]].drop_duplicates(subset=axes, keep="last")
    return keep_a.merge(keep_b, on=axes, how="inner", suffixes=("_a", "_b"))


@dataclass(frozen=True)
class _Rules:
    """What every paired cell is judged by: the gate, the significance level, the band of B/A that counts
    as 'same', and whether B's times are rescaled to A's machine (by both runs' calibration)."""

    threshold: Threshold | None
    alpha: float
    tolerance: float
    normalize: str | None
    meta_a: dict[str, Any]
    meta_b: dict[str, Any]
    control: str | None = None  # --control VARIANT (reports.control)
    paired: bool = False  # one run's two variants (--variant-a/-b): visits paired by round
    paired_runs: int = 0  # two sets of this many runs made interleaved (runset.interleaved): run i with run i


def _measured(r, axes: list[str], device_a: str, device_b: str) -> dict[str, Any]:
    """A paired cell as both runs measured it: its axes, where it ran, its statuses and median times."""
    return {
        **{x: r[x] for x in axes},
        "device_a": device_a,
        "device_b": device_b,
        "where_a": r["where_a"],
        "where_b": r["where_b"],
        "status_a": r["status_a"],
        "status_b": r["status_b"],
        "timing_mode_a": r["timing_mode_a"] if present(r["timing_mode_a"]) else None,
        "timing_mode_b": r["timing_mode_b"] if present(r["timing_mode_b"]) else None,
        "time_ms_a": float(r["time_ms_median_a"]) if present(r["time_ms_median_a"]) else math.nan,
        "time_ms_b": float(r["time_ms_median_b"]) if present(r["time_ms_median_b"]) else math.nan,
    }


def _gate(
    r, rules: _Rules, diff, sa: list[float], sb: list[float], median_a: float, median_b: float
) -> tuple[bool, str]:
    """(regression, why). The gate acts only on a significant slowdown (verdict 'slower') beyond the
    threshold: a cell whose samples cannot tell (ambiguous, or fewer than 3 samples) never fails a build.
    A cell ok in A and broken in B (BROKEN) is a regression too."""
    threshold = rules.threshold
    regression, why = False, ""
    if threshold is not None and diff is not None and diff.verdict == "slower":
        va = stat_value(sa, median_a, threshold.stat)
        vb = stat_value(sb, median_b, threshold.stat)
        if threshold.exceeded(va, vb):
            regression, why = True, f"{threshold.stat} {va:.4g} -> {vb:.4g} ms"
    if threshold is not None and r["status_a"] == "ok" and r["status_b"] in BROKEN:
        regression, why = True, f"status ok -> {r['status_b']}"
    return regression, why


def _cell_record(r, axes: list[str], rules: _Rules, ctrl: Any = None) -> dict[str, Any]:
    """One paired cell: B/A on the medians (B rescaled when normalising, or relative to the control cell
    `ctrl` of its shape with --control: reports.control), the CI, p-value and Cliff's delta of the raw
    samples (stats.difference), or, when both sides have 3 or more process medians, of those
    (stats.process_difference: the run-to-run spread, stats.PROCESS_RULE), the verdict, and whether it
    fails the gate (never for the control's own cells)."""
    import pandas as pd

    ok = (
        r["status_a"] == "ok"
        and r["status_b"] == "ok"
        and present(r["time_ms_median_a"])
        and present(r["time_ms_median_b"])
    )
    sa, sb = float_list(r["samples_ms_a"]), float_list(r["samples_ms_b"])
    pa, pb = float_list(r["process_medians_ms_a"]), float_list(r["process_medians_ms_b"])
    basis = "processes"
    runs_a, runs_b = float_list(r["run_medians_ms_a"]), float_list(r["run_medians_ms_b"])
    if min(len(runs_a), len(runs_b)) >= MIN_PROCESSES:  # run sets: judged by their runs (RUNS_RULE)
        pa, pb, basis = runs_a, runs_b, "runs"
    elif min(len(pa), len(pb)) < MIN_PROCESSES:
        # --rounds R on both sides: each visit's median, the visits spread over the run, holds the drift
        # within a run as process medians hold the spread from process to process (stats.PROCESS_RULE)
        ra, rb = float_list(r["round_medians_ms_a"]), float_list(r["round_medians_ms_b"])
        if min(len(ra), len(rb)) >= MIN_PROCESSES:
            pa, pb, basis = ra, rb, "rounds"
    device_a = r["device_a"] if "device_a" in r else r["device"]
    device_b = r["device_b"] if "device_b" in r else r["device"]
    scale, which = 1.0, ""
    if rules.normalize:  # B's times as they would be on A's machine, by the ceiling that bounds the cell
        cell = {**{x: r[x] for x in axes}, "device": device_a, "flops": r["flops_a"], "where": r["where_a"]}
        scale, which = calibration.factor(cell, rules.meta_a, rules.meta_b, device_b, r["where_b"])
        ok = ok and math.isfinite(scale)
        sb = [s * scale for s in sb] if math.isfinite(scale) else sb
        pb = [s * scale for s in pb] if math.isfinite(scale) else pb
    median_a = float(r["time_ms_median_a"]) if ok else math.nan
    median_b = float(r["time_ms_median_b"]) * scale if ok else math.nan
    is_control = rules.control is not None and r["variant"] == rules.control
    control_ratio = math.nan
    if ok and rules.control is not None and not is_control and control.usable(ctrl):
        scale = control.factor(ctrl)
        control_ratio = 1.0 / scale
        visits = control.by_visit(r, ctrl) if basis == "rounds" else None
        levels = control.by_run(r, ctrl) if basis == "runs" else None
        if levels is not None:  # each run in the control's A units, by the control of the same run
            pa, pb = levels
            sb = [s * scale for s in sb]
        elif visits is not None:  # every visit in the control's A units, by the control's same visit
            sa, sb, pa, pb = visits
            median_a, median_b = statistics.median(sa), statistics.median(sb)
        else:  # B in A's units by the whole-run factor; process medians over the control's same process
            sb = [s * scale for s in sb]
            median_b = float(r["time_ms_median_b"]) * scale
            ca, cb = float_list(ctrl["process_medians_ms_a"]), float_list(ctrl["process_medians_ms_b"])
            ra, rb = control.per_visit(pa, ca), control.per_visit(pb, cb)
            pa, pb = (ra, rb) if ra is not None and rb is not None else (pa, [s * scale for s in pb])
    ratio = median_b / median_a if ok else math.nan
    by_processes = len(pa) >= MIN_PROCESSES and len(pb) >= MIN_PROCESSES
    judge = process_difference if by_processes else difference
    if ok and rules.paired and basis == "rounds" and by_processes and min(pa + pb) > 0:
        # one run's two variants: visit i of each made in round i, seconds apart (stats.PAIRED_RULE); the
        # ratio and the gate's medians are the visits' geometric means, as the interval's. Over the rounds
        # both were visited in: a settle round (harness.run.settle) visits again only some variants
        k = min(len(pa), len(pb))
        pa, pb = pa[:k], pb[:k]
        judge, basis = paired_difference, "paired rounds"
    if ok and basis == "runs" and rules.paired_runs and len(pa) == len(pb) == rules.paired_runs:
        judge, basis = paired_difference, "paired runs"  # run i of each made back to back (RUNS_RULE)
    if ok and basis in ("paired rounds", "runs", "paired runs") and by_processes and min(pa + pb) > 0:
        # the ratio and the gate's medians are the visits' (or runs') geometric means, as the interval's
        median_a, median_b = _geomean(pa), _geomean(pb)
        ratio = median_b / median_a
    a_values, b_values = (pa, pb) if by_processes else (sa, sb)
    diff = (
        judge(a_values, b_values, ratio=ratio, tolerance=rules.tolerance, alpha=rules.alpha) if ok else None
    )
    p = diff.p_value if diff else math.nan
    significant = (p < rules.alpha) if math.isfinite(p) else None
    regression, why = _gate(r, rules, diff, sa, sb, median_a, median_b)
    if is_control:
        regression, why = False, "the control (its change is the machine's)"
    elif rules.control is not None and not math.isfinite(control_ratio):
        why = why or f"no ok {rules.control} cell of this shape in both runs: compared as measured"
    return {
        **_measured(r, axes, device_a, device_b),
        "control_ratio": control_ratio,
        "bound": which,
        "norm_factor": scale if rules.normalize else math.nan,
        "n_a": len(sa),
        "n_b": len(sb),
        "k_a": len(pa) or 1,  # worker processes (basis 'rounds': visits; 'runs': runs) that measured it
        "k_b": len(pb) or 1,
        "basis": basis if by_processes else "samples",  # what the CI and p were computed from
        "ratio": ratio,
        "ratio_ci_low": diff.ci_low if diff else math.nan,
        "ratio_ci_high": diff.ci_high if diff else math.nan,
        "p_value": p,
        "significant": bool(significant) if significant is not None else pd.NA,
        "cliffs_delta": diff.delta if diff else math.nan,
        "verdict": diff.verdict if diff else "n/a",
        "change": change_text(ratio, significant) if ok else f"{r['status_a']} -> {r['status_b']}",
        "regression": regression,
        "why": why,
    }


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in values) / len(values))


GATE_FAMILY_RULE = (
    "The gate fails a slower cell only where its p, Holm-adjusted over every cell this comparison judged "
    "that can fail it (p_holm; the --control variant's own cells never do and are not counted), is below "
    "alpha as well: a gate fails the build when any cell fails, so each cell's own 5% "
    "would add up over a sweep's cells; Holm's step-down keeps the chance that identical code fails "
    "anywhere at alpha. A cell ok in A and broken in B fails it whatever the statistics."
)


def _family_wise(cells, alpha: float, control: str | None = None):
    """cells with `p_holm` (Holm's step-down adjusted p over every judged cell that can fail the gate: p_(i)
    times (m - i + 1), made monotone, at most 1; the control's own cells never fail it, so they are not in
    the family and have none) and the gate's slowdowns kept only where p_holm < alpha (GATE_FAMILY_RULE);
    a status change (ok -> broken) stays a regression."""
    import numpy as np

    cells = cells.copy()
    p = cells["p_value"].to_numpy(dtype=float)
    if control is not None:
        p = np.where(cells["variant"].astype(str).to_numpy() == control, np.nan, p)
    cells["p_holm"] = holm_adjusted(p)
    slowdown = cells["regression"].astype(bool) & ~cells["why"].astype(str).str.startswith("status ")
    weak = slowdown & ~(cells["p_holm"] < alpha)
    judged = int(cells["p_holm"].notna().sum())
    cells.loc[weak, "regression"] = False
    cells.loc[weak, "why"] = [
        f"not over the family: p {pv:.2g}, Holm-adjusted {ph:.2g} over {judged} cells"
        for pv, ph in zip(cells.loc[weak, "p_value"], cells.loc[weak, "p_holm"], strict=True)
    ]
    return cells


def _picked(a, b, variant_a: str | None, variant_b: str | None, control_variant: str | None, same: bool):
    """--variant-a/--variant-b: A's rows of variant_a (labelled variant_b, so that cells pair) and B's of
    variant_b; ValueError (one line) for one without the other, with --control, a variant a run lacks,
    or a variant compared with itself in one run."""
    if variant_a is None and variant_b is None:
        return a, b
    if variant_a is None or variant_b is None:
        raise ValueError("--variant-a and --variant-b go together: name the variant of each run compared")
    if control_variant is not None:
        raise ValueError("--variant-a/--variant-b compare one variant with another: --control does not apply")
    if same and variant_a == variant_b:
        raise ValueError(f"--variant-a and --variant-b are both {variant_a!r} in one run: nothing to compare")
    control.require_variant(a, variant_a, "--variant-a", "A")
    control.require_variant(b, variant_b, "--variant-b", "B")
    a = a[a["variant"] == variant_a].copy()
    a["variant"] = variant_b
    return a, b[b["variant"] == variant_b]


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
):
    """Load two runs and compare their common cells. RunDirError for a bad run dir; ValueError when the
    runs share no cell. normalize='calibration' rescales B's times to A's machine (reports.calibration);
    control_variant judges the others relative to that variant's change (reports.control); variant_a and
    variant_b compare one variant of run B with another of run A (the same run: an A/B in one run, its
    visits paired by round where it was made in rounds, stats.PAIRED_RULE)."""
    import pandas as pd

    from attnbench import results
    from attnbench.results import runset

    (a, meta_a, name_a), (b, meta_b, name_b) = runset.load(run_a), runset.load(run_b)
    same = Path(run_a).resolve() == Path(run_b).resolve()
    _check_sets(meta_a, meta_b, normalize, variant_a, same)
    groups_a, groups_b = (devices.groups(m, x.to_dict("records")) for m, x in ((meta_a, a), (meta_b, b)))
    a, b = _with_device_model(a, groups_a), _with_device_model(b, groups_b)
    a, b = _picked(a, b, variant_a, variant_b, control_variant, same=same)
    split = any(g.label for g in groups_a + groups_b)
    axes, how = _cell_axes(a, b, split)
    if variant_a is not None:
        how += f"; {variant_b} in B against {variant_a} in A"
    # 'same' means within the gate's own tolerance when it is relative, else within 2%
    tolerance = threshold.value if threshold is not None and threshold.relative else SAME_TOLERANCE
    _check_normalize(normalize, meta_a, meta_b)
    control.check(control_variant, normalize, a, b)
    m = _paired(a, b, axes)
    if m.empty:
        raise ValueError(f"{run_a} and {run_b} have no cell in common ({how}); compare needs the same cells")
    paired = variant_a is not None and same  # one run's two variants: visits paired by round
    paired_runs = len(meta_a["runset"]["runs"]) if runset.interleaved(meta_a, meta_b) else 0
    if paired_runs:
        how += "; runs paired: the two sets were made interleaved (run i of each back to back)"
    rules = _Rules(
        threshold, alpha, tolerance, normalize, meta_a, meta_b, control_variant, paired, paired_runs
    )
    controls = control.index(m, axes, control_variant) if control_variant else {}
    cells = pd.DataFrame(
        [_cell_record(r, axes, rules, controls.get(control.shape_key(r, axes))) for _, r in m.iterrows()]
    )
    cells = _family_wise(cells, alpha, control_variant)
    # which device groups met, in the order of the pairs (before the cells are sorted for the tables)
    of_a, of_b = devices.group_of(groups_a), devices.group_of(groups_b)
    pairs = [(of_a[wa], of_b[wb]) for wa, wb in zip(cells["where_a"], cells["where_b"], strict=True)]
    several = split or any(len(g.members) > 1 for g in groups_a + groups_b)
    cells = cells.sort_values(
        [x for x in axes if x not in ("variant", "seq_len")] + ["variant", "seq_len"], kind="stable"
    ).reset_index(drop=True)
    return Comparison(
        str(run_a),
        str(run_b),
        f"{name_a} ({results.machine_label(meta_a)})",
        f"{name_b} ({results.machine_label(meta_b)})",
        how,
        axes,
        cells,
        _per_variant(cells),
        threshold,
        alpha,
        tolerance,
        calibration.group_ceilings(pairs),
        normalize,
        _pairing(pairs, groups_a, groups_b) if several else [],
        control_variant,
    )


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


def cell_table(cmp: Comparison) -> pg.Table:
    shown = [x for x in varying(cmp.cells, [a for a in cmp.axes if a not in ("variant", "seq_len")])]
    headers = (
        "variant",
        *shown,
        "seq_len",
        "A ms",
        "B ms",
        "B/A",
        "B/A 95% CI",
        "p",
        "Cliff's δ",
        "verdict",
        "change",
        *(("regression",) if cmp.threshold else ()),
    )
    rows = []
    for _, r in cmp.cells.iterrows():
        rows.append(
            (
                str(r["variant"]),
                *[axis_value(a, r[a]) for a in shown],
                str(r["seq_len"]),
                _fmt(r["time_ms_a"]),
                _fmt(r["time_ms_b"]),
                _fmt(r["ratio"], ".3f"),
                _ci_text(r["ratio_ci_low"], r["ratio_ci_high"]),
                _fmt(r["p_value"], ".2g"),
                _fmt(r["cliffs_delta"], "+.2f"),
                str(r["verdict"]),
                str(r["change"]),
                *((("REGRESSION: " + r["why"]) if r["regression"] else "",) if cmp.threshold else ()),
            )
        )
    return pg.Table(
        headers,
        tuple(rows),
        "B/A: B's median time over A's (>1: B slower), its CI a seeded percentile bootstrap of the ratio "
        "of medians; p: Mann-Whitney U, two-sided, on the raw samples, significant below "
        f"{cmp.alpha:g}; Cliff's δ: P(B > A) - P(B < A) over sample pairs (+1: every B sample slower); "
        "where both runs have 3 or more process medians, the CI, p and δ are of those instead. "
        + verdict_rule(cmp),
    )


def verdict_rule(cmp: Comparison) -> str:
    """VERDICT_RULE with this comparison's tolerance and alpha filled in, and PROCESS_RULE (how cells
    measured in several worker processes are judged)."""
    return (
        (
            VERDICT_RULE.replace("±tolerance", f"±{cmp.tolerance:.0%}")
            .replace("(the --fail-above percentage, else 2%)", "")
            .replace("significant", f"significant (p < {cmp.alpha:g})")
            .replace("  ", " ")
        )
        + " "
        + (GATE_FAMILY_RULE + " " if cmp.threshold is not None else "")
        + PROCESS_RULE
        + (
            " " + RUNS_RULE
            if "basis" in cmp.cells and cmp.cells["basis"].isin(["runs", "paired runs"]).any()
            else ""
        )
        + (
            " " + PAIRED_RULE
            if "basis" in cmp.cells and (cmp.cells["basis"] == "paired rounds").any()
            else ""
        )
    )


def variant_table(cmp: Comparison) -> pg.Table:
    rows = []
    for _, r in cmp.per_variant.iterrows():
        g = r["geomean_ratio"]
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
    """The last line: how many regressions beyond the threshold (or that no threshold was given)."""
    if cmp.threshold is None:
        return "no --fail-above given: nothing can fail"
    n = int(cmp.cells["regression"].sum())
    what = f"--fail-above {cmp.threshold.text}"
    return f"{what}: {n} regression{'s' * (n != 1)}" if n else f"{what}: no regression"


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
    if cmp.control is not None:
        import numpy as np

        ratios = cmp.cells["control_ratio"].dropna().to_numpy(dtype=float)
        seen = ""
        if len(ratios):
            mean = float(np.exp(np.log(ratios).mean()))
            seen = (
                f" The control's B/A over the {len(ratios)} cells judged by it: geometric mean {mean:.3f}, "
                f"{ratios.min():.3f} to {ratios.max():.3f}."
            )
        return control.CONTROL_RULE.format(control=cmp.control) + seen
    if cmp.normalize != "calibration":
        return "Times are compared as measured (--normalize calibration rescales B to A's machine)."
    return (
        "Normalised by calibration: each of B's times is multiplied by ceiling_B / ceiling_A for the ceiling "
        "that bounds the cell on A (matmul TFLOP/s when compute-bound, copy GB/s when memory-bound; column "
        "'bound'), so the ratios say how the code differs once the machines' speed is taken out."
    )


def text_report(cmp: Comparison) -> str:
    """What `attnbench compare` prints."""
    out = [
        f"A: {cmp.label_a}  [{cmp.run_a}]",
        f"B: {cmp.label_b}  [{cmp.run_b}]",
        cmp.match,
        *cmp.pairing,
        "",
    ]
    out.append(pg.to_text(calibration_table(cmp)))
    out += [f"WARNING {w}" for w in cmp.warnings]
    out += [normalize_note(cmp), ""]
    out.append(pg.to_text(cell_table(cmp), max_width=60))
    out.append(pg.to_text(variant_table(cmp)))
    out.append(verdict_counts(cmp))
    for _, r in cmp.regressions.iterrows():
        out.append(f"REGRESSION {r['variant']} seq_len={r['seq_len']}: {r['why']}")
    out.append(verdict(cmp))
    return "\n".join(out) + "\n"


def write_page(cmp: Comparison, out_dir: str | Path) -> tuple[Path, Path]:
    """compare.png/.svg/.csv, per_variant.csv, README.md and compare.html in out_dir."""
    from .plots import compare_figure
    from .style import save

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, data = compare_figure(
        cmp.cells,
        "Run B vs run A",
        cmp.label_a,
        cmp.label_b,
        cmp.threshold.value if cmp.threshold and cmp.threshold.relative else None,
    )
    files = save(
        fig,
        data,
        out,
        "compare",
        "Time ratio B/A per cell",
        "Vertical lines: 95% bootstrap CI of the ratio; filled markers: faster or slower, hollow: same or "
        "ambiguous.",
    )
    cmp.per_variant.to_csv(out / "per_variant.csv", index=False)
    page = pg.Page("attnbench compare")
    page.add(
        pg.Bullets(
            (
                f"A: {cmp.label_a} ({cmp.run_a})",
                f"B: {cmp.label_b} ({cmp.run_b})",
                cmp.match,
                *cmp.pairing,
                verdict_counts(cmp),
                verdict(cmp),
            )
        )
    )
    page.add(pg.Para(verdict_rule(cmp)))
    page.add(pg.Heading("Calibration of both runs"), calibration_table(cmp))
    if cmp.warnings:
        page.add(pg.Bullets(tuple(cmp.warnings)))
    page.add(pg.Para(normalize_note(cmp)))
    page.add(pg.Heading("Per variant (geometric mean of B/A over cells ok in both)"), variant_table(cmp))
    page.add(pg.Figure(files))
    page.add(pg.Heading("Per cell"), cell_table(cmp))
    readme, html_path = out / "README.md", out / "compare.html"
    readme.write_text(pg.to_markdown(page), encoding="utf-8")
    html_path.write_text(pg.to_html(page, out), encoding="utf-8")
    return readme, html_path
