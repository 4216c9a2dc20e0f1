"""Machine drift within a run: a cell measured while the machine ran more than DRIFT off its usual speed.

Before every cell the worker times a small matmul (harness.measure.calibrate.speed_probe) and the row keeps it
as `speed_tflops`. When runs are loaded, each row's probe is divided by the median probe of its run and
device (`speed_factor`; the device by its where_key, so that the slower of two GPUs is not drift); a row
more than DRIFT away from 1 is flagged `drift`: its time says as much about the machine at that moment
(another tenant, a throttled clock) as about the variant. A cell measured more than once (`--resume
--redo-drift` appends a row; the last is read) whose earlier answers the last one's spread and the probes
cannot account for is flagged `drift` too (`measured`, `Measured.reason`): its answer depends on when it
was measured.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .devices import where_of
from .formulas import command
from .schema import NOISY_REL_IQR

DRIFT = 0.10


def speed_factors(rows: list[dict[str, Any]]) -> list[float]:
    """Per row: its probe over the median probe of its run and device (where_key); NaN without a probe."""
    speeds: dict[tuple, list[float]] = {}
    for r in rows:
        s = r.get("speed_tflops")
        if _num(s):
            speeds.setdefault((r.get("run_id"), where_of(r)), []).append(float(s))
    median = {k: statistics.median(v) for k, v in speeds.items()}
    out = []
    for r in rows:
        s, m = r.get("speed_tflops"), median.get((r.get("run_id"), where_of(r)))
        out.append(float(s) / m if _num(s) and m else math.nan)
    return out


def drifted_cells(rows: list[dict[str, Any]]) -> set[str]:
    """The cell_ids of the rows measured during drift (what `--resume --redo-drift` measures again)."""
    return {r["cell_id"] for r, f in zip(rows, speed_factors(rows), strict=True) if drifted(f)}


def unprobed(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(ok rows that no speed probe judged, ok rows) of rows as results.load gives them (speed_factor NA):
    a run made before the probes has all its ok rows unprobed, and its drift was not measured, which is not
    "none drifted". The one rule that compare and the report's trust line say it by."""
    ok = [r for r in rows if r.get("status") == "ok"]
    return sum(not _finite(r.get("speed_factor")) for r in ok), len(ok)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def drifted(factor: float) -> bool:
    return math.isfinite(factor) and abs(factor - 1) > DRIFT


def probe_reason(factor: float) -> str | None:
    """Why a row's speed probe flags it drift, in words; None where it does not (drifted)."""
    return f"its speed probe read the machine at {factor:.2f}× its run's median" if drifted(factor) else None


# ---- a cell measured more than once ---------------------------------------------------------------------
# rows.jsonl holds a row per measurement of a cell: `--resume --redo-drift` appends one for each drifted cell,
# and the last row of a cell is the one read. An earlier measurement's median that the last one's cannot
# account for says that the cell's answer depends on when it was measured, which the last row alone hides
# (a flex cell read 8.945, 6.345 then 4.645 ms, and the last made it the fastest variant): the cell is flagged
# drift, as a cell the speed probe caught is. MOVED opens that reason.
MOVED = "measured "
BEYOND = ", beyond the last one's own spread and not as the speed probe saw the machine move"


@dataclass(frozen=True)
class Measured:
    """A cell's measurements in one run: how many rows its run holds (`times`), the medians of those that
    ran ok, in the order they were made (the last is the one read), and whether an earlier one `moved`
    (moved_from)."""

    times: int
    medians: tuple[float, ...]
    moved: bool

    @property
    def spread(self) -> float:
        """The largest median over the smallest (NaN with fewer than two)."""
        return max(self.medians) / min(self.medians) if len(self.medians) > 1 else math.nan

    @property
    def reason(self) -> str | None:
        """'measured 3 times: 8.945, 6.345 then 4.645 ms (1.93× apart), ...' where it moved (a reason of
        results.load's `drift_reason`, which `moved_part` finds there); else None."""
        if not self.moved:
            return None
        said = ", ".join(f"{m:.4g}" for m in self.medians[:-1]) + f" then {self.medians[-1]:.4g} ms"
        return f"{MOVED}{self.times} times: {said} ({self.spread:.2f}× apart){BEYOND}"


def moved_part(reason: Any) -> str | None:
    """The part of a loaded row's `drift_reason` that says its measurements moved apart (Measured.reason),
    None where it has none (its probe alone drifted, or nothing did)."""
    parts = reason.split("; ") if isinstance(reason, str) else []
    return next((p for p in parts if p.startswith(MOVED)), None)


def moved_from(earlier: dict[str, Any], last: dict[str, Any]) -> bool:
    """Whether an earlier ok row of a cell disagrees with its last ok row beyond what the cell's own noise
    and the machine's speed, as the speed probe saw it, allow: their medians more than NOISY_REL_IQR apart
    (the spread that makes a cell noisy within one measurement), neither row's own p25-p75 reaching the
    other's median, and the move not the probe's: where the probes before the two rows differ by more than
    DRIFT, the time moved the other way than the machine's speed (the machine faster, the cell slower, or
    the reverse). The probe's size is not the time's (a memory-bound cell slows by another factor than a
    matmul: results.suspect), so only its direction accounts for a move: a row `--redo-drift` measured again
    because the machine was slower, and that was slower, is the re-measurement doing its work."""
    a, b = _num_of(earlier, "time_ms_median"), _num_of(last, "time_ms_median")
    if not (a and b) or max(a, b) / min(a, b) - 1 <= NOISY_REL_IQR:
        return False
    if _covers(last, a) or _covers(earlier, b):
        return False
    sa, sb = _num_of(earlier, "speed_tflops"), _num_of(last, "speed_tflops")
    if sa and sb and drifted(sa / sb):
        return (sa > sb) == (a > b)  # the earlier row's machine faster and its cell slower, or the reverse
    return True


def measured(rows: list[dict[str, Any]]) -> dict[str, Measured]:
    """Per cell_id of one run's rows as its files hold them (every row, in the order written): its
    measurements (Measured). Only a cell whose last row ran ok can have moved: that row is the one read."""
    times = Counter(str(r.get("cell_id")) for r in rows)
    last = {str(r.get("cell_id")): r for r in rows}
    ok: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "ok" and _num_of(r, "time_ms_median"):
            ok.setdefault(str(r.get("cell_id")), []).append(r)
    out = {}
    for cid, n in times.items():
        made = ok.get(cid, [])
        moved = bool(made) and made[-1] is last[cid] and any(moved_from(e, made[-1]) for e in made[:-1])
        out[cid] = Measured(n, tuple(float(r["time_ms_median"]) for r in made), moved)
    return out


def _num_of(row: dict[str, Any], key: str) -> float | None:
    """A row's positive finite number under `key`, else None."""
    v = row.get(key)
    return float(v) if _num(v) else None


def _covers(row: dict[str, Any], value: float) -> bool:
    """Whether a row's own p25-p75 holds `value`."""
    lo, hi = _num_of(row, "time_ms_p25"), _num_of(row, "time_ms_p75")
    return lo is not None and hi is not None and lo <= value <= hi


# A run with at least this share of its ok cells drifted or noisy, and at least BUSY_MIN of them, was measured
# on a busy machine: `run` says so in one sentence when it ends, and the report's findings too (issue 26:
# "±257%" and 14 drift rows, and nothing said). One noisy cell of nine is not a busy machine.
BUSY_SHARE = 0.10
BUSY_MIN = 3


def is_busy(flagged: int, ok: int) -> bool:
    """Whether `flagged` drifted or noisy cells of `ok` ok cells make a busy machine (the one rule)."""
    return ok > 0 and flagged >= max(BUSY_MIN, BUSY_SHARE * ok)


# The speed probes of a run that held within this (their 10th to 90th percentile, over their median) say the
# machine kept its speed: a noisy cell then has a spread of its own (an H200's probes held within 0.1%
# while a Python page loop's cells spread by 12-42%), and is no sign of a busy machine.
STEADY = 0.02


def steady(rows: list[dict[str, Any]]) -> bool:
    """Whether the ok rows' speed probes held steady through the run (STEADY), at least 5 of them read."""
    factors = [f for f in speed_factors([r for r in rows if r.get("status") == "ok"]) if math.isfinite(f)]
    if len(factors) < 5:
        return False
    deciles = statistics.quantiles(factors, n=10)
    return deciles[-1] - deciles[0] <= STEADY


def busy_cells(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(ok cells measured during drift, or flagged noisy while the speed probes did not hold steady, ok
    cells) of a run's rows (latest per cell; rows as results.load gives them carry `drift`, which counts a
    cell whose measurements moved apart too)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    factors = speed_factors(ok)
    moved = {r["cell_id"] for r, f in zip(ok, factors, strict=True) if drifted(f) or r.get("drift") is True}
    noisy = not steady(ok)
    return sum(1 for r in ok if r["cell_id"] in moved or (noisy and r.get("noisy") is True)), len(ok)


def fewer_threads(threads: Any) -> str:
    """' or with `--threads 1`, ...' where a run's worker used more than one torch thread (`threads`: its
    rows' most): each op of such a cell waits at its barrier for its slowest thread, so other load on the
    cores slows it many times over yet evenly (a tight, far too slow time: trial W saw 190 ms at IQR 4%
    against 0.9 ms at one thread); '' where it used one, or its rows do not say. The clause every busy
    machine's advice ends with: a run's closing line, the report's findings, bench's answer, pytest's."""
    try:
        most = int(threads)
    except (TypeError, ValueError):
        return ""
    if most <= 1:
        return ""
    return f" or with `--threads 1`, which other load slows far less than the worker's {most} threads"


def most_threads(rows: list[dict[str, Any]]) -> int | None:
    """The most torch threads a row of `rows` says its worker used (its `threads`), None where none says."""
    said = [int(t) for r in rows if isinstance(t := r.get("threads"), (int, float)) and t == t]
    return max(said) if said else None


def busy_sentence(rows: list[dict[str, Any]], run_dir: str) -> str | None:
    """One plain sentence when the ok cells that drifted or were noisy make a busy machine (is_busy), as
    reports.findings says it; or, where the speed probes held steady and as many cells were noisy, that
    their spread is their own."""
    n, total = busy_cells(rows)
    if is_busy(n, total):
        return (
            f"the machine was busy during this run ({n} of {total} cells drifted or were noisy); rerun on a "
            f"quiet machine{fewer_threads(most_threads(rows))} or "
            f"`{command('attnbench', 'run', '--resume', '--redo-drift', '--out', run_dir)}`"
        )
    own = sum(1 for r in rows if r.get("status") == "ok" and r.get("noisy") is True)
    return own_spread(own, total)


def own_spread(noisy: int, ok: int) -> str | None:
    """The sentence for as many noisy cells as make a busy machine (is_busy) while the machine held its speed
    (steady): their spread is the variants' own; None otherwise."""
    if not is_busy(noisy, ok):
        return None
    return (
        f"{noisy} of {ok} cells were noisy while the machine held its speed (the speed probe steady all "
        "run): their spread is their own calls', not the machine's; a larger --budget-ms samples more of it"
    )
