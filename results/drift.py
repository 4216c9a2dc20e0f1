"""Machine drift within a run: a cell measured while the machine ran more than DRIFT off its usual speed.

Before every cell the worker times a small matmul (harness.measure.calibrate.speed_probe) and the row keeps it
as `speed_tflops`. When runs are loaded, each row's probe is divided by the median probe of its run and
device (`speed_factor`; the device by its where_key, so that the slower of two GPUs is not drift); a row
more than DRIFT away from 1 is flagged `drift`: its time says as much about the machine at that moment
(another tenant, a throttled clock) as about the variant.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from .devices import where_of
from .formulas import command

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
    cells) of a run's rows (latest per cell)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    moved = {r["cell_id"] for r, f in zip(ok, speed_factors(ok), strict=True) if drifted(f)}
    noisy = not steady(ok)
    return sum(1 for r in ok if r["cell_id"] in moved or (noisy and r.get("noisy") is True)), len(ok)


def busy_sentence(rows: list[dict[str, Any]], run_dir: str) -> str | None:
    """One plain sentence when the ok cells that drifted or were noisy make a busy machine (is_busy), as
    reports.findings says it; or, where the speed probes held steady and as many cells were noisy, that
    their spread is their own."""
    n, total = busy_cells(rows)
    if is_busy(n, total):
        return (
            f"the machine was busy during this run ({n} of {total} cells drifted or were noisy); rerun on a "
            f"quiet machine or `{command('attnbench', 'run', '--resume', '--redo-drift', '--out', run_dir)}`"
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
