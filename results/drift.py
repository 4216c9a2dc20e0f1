"""Machine drift within a run: a cell measured while the machine ran more than DRIFT off its usual speed.

Before every cell the worker times a small matmul (harness.calibrate.speed_probe) and the row keeps it
as `speed_tflops`. When runs are loaded, each row's probe is divided by the median probe of its run and
device (`speed_factor`); a row more than DRIFT away from 1 is flagged `drift`: its time says as much about
the machine at that moment (another tenant, a throttled clock) as about the variant.
"""

from __future__ import annotations

import math

DRIFT = 0.10


def speed_factors(df) -> list[float]:
    """Per row of results.load's typed frame: its probe over its run and device's median probe (NaN when
    the row has no probe)."""
    import pandas as pd

    speed = pd.to_numeric(df["speed_tflops"], errors="coerce").astype(float)
    median = speed.groupby([df["run_id"], df["device"]]).transform("median")
    return [
        s / m if math.isfinite(s) and math.isfinite(m) and m > 0 else math.nan
        for s, m in zip(speed, median, strict=True)
    ]


def drifted(factor: float) -> bool:
    return math.isfinite(factor) and abs(factor - 1) > DRIFT
