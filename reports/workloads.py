"""The workload panels' numbers (issue 11): decode K/V bandwidth, grouped-query pairs, sliding-window slopes.

Bookkeeping only, no drawing: plots.py draws from these tables and render.py lays them out. Every group
key comes from tables.COMBO_AXES, so an axis added there is held fixed here too.
"""

from __future__ import annotations

import math
from typing import Any

from attnbench.results.formulas import gbps

from . import fit as fitmod
from .tables import COMBO_AXES, LENGTHS, grouped, ok_rows, present

# ---- decode: K/V cache read bandwidth -----------------------------------------------------------------


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
    """Per series (combination, N_q, variant): its largest N_k with the K/V GB/s reached there and the
    percentage of the calibrated copy bandwidth (NaN when the device has none)."""
    import pandas as pd

    rated = kv_rates(rows)
    records = []
    for key, sub in grouped(rated, [*COMBO_AXES, "seq_len", "variant"]):
        top = sub.sort_values("seq_k").iloc[-1]
        rate = float(top["kv_gbps"])
        records.append(
            {
                **key,
                "seq_k": int(top["seq_k"]),
                "kv_bytes": int(top["kv_bytes"]),
                "time_ms_median": float(top["time_ms_median"]),
                "kv_gbps": rate,
                "copy_gbps": copy_gbps,
                "pct_of_copy": rate / copy_gbps * 100 if copy_gbps else math.nan,
            }
        )
    cols = [*COMBO_AXES, "seq_len", "variant", "seq_k", "kv_bytes", "time_ms_median", "kv_gbps"]
    return pd.DataFrame(records, columns=[*cols, "copy_gbps", "pct_of_copy"])


def decode_fit(rows) -> fitmod.PowerFit:
    """Time against N_k of one decode series (ok rows of one variant and N_q): exponent over all points
    (a decode series is short, and time ∝ N_k from its first points when K/V reads dominate)."""
    ok = ok_rows(rows).dropna(subset=["time_ms_median"])
    return fitmod.fit_power_law(
        ok["seq_k"].astype(float), ok["time_ms_median"].astype(float), asymptotic=False
    )


# ---- grouped-query attention against the MHA cell of the same shape -----------------------------------

# What must be equal for a GQA cell and its MHA counterpart: everything but kv_heads.
GQA_MATCH = [a for a in COMBO_AXES if a != "kv_heads"] + ["variant", *LENGTHS]


def gqa_pairs(df):
    """One row per ok GQA cell (kv_heads < heads): its MHA counterpart (kv_heads = heads, every other axis
    equal) when the run has one ok, the time speed-up (MHA / GQA), whether the spreads separate
    (tables.separated: ≥ 2% by median and Mann-Whitney p < 0.05), and the memory ratios (peak bytes and
    K/V bytes, GQA / MHA). has_mha is False where no counterpart was measured ok."""
    import pandas as pd

    from attnbench.results.judge import separated

    ok = ok_rows(df)
    gqa = ok[(ok["kv_heads"] < ok["heads"]).fillna(False)]
    mha = ok[(ok["kv_heads"] == ok["heads"]).fillna(False)]
    index: dict[tuple, Any] = {}
    for _, r in mha.iterrows():
        index.setdefault(tuple(str(r[a]) for a in GQA_MATCH), r)
    records = []
    for _, g in gqa.iterrows():
        m = index.get(tuple(str(g[a]) for a in GQA_MATCH))
        rec = {a: g[a] for a in GQA_MATCH}
        rec.update(kv_heads=g["kv_heads"], gqa_ms=_f(g["time_ms_median"]), has_mha=m is not None)
        if m is None:
            rec.update(mha_ms=math.nan, speedup=math.nan, separated=False)
            rec.update(mem_ratio=math.nan, kv_bytes_ratio=math.nan)
        else:
            gms, mms = _f(g["time_ms_median"]), _f(m["time_ms_median"])
            faster, slower = (g, m) if gms <= mms else (m, g)
            rec.update(mha_ms=mms, speedup=mms / gms if gms > 0 else math.nan)
            rec["separated"] = bool(separated(faster, slower)) if gms > 0 and mms > 0 else False
            rec["mem_ratio"] = _ratio(g["peak_mem_bytes"], m["peak_mem_bytes"])
            rec["kv_bytes_ratio"] = _ratio(g["kv_bytes"], m["kv_bytes"])
        records.append(rec)
    cols = [*GQA_MATCH, "kv_heads", "gqa_ms", "has_mha", "mha_ms", "speedup", "separated"]
    return pd.DataFrame(records, columns=[*cols, "mem_ratio", "kv_bytes_ratio"])


def _f(v: Any) -> float:
    return float(v) if present(v) else math.nan


def _ratio(a: Any, b: Any) -> float:
    return float(a) / float(b) if present(a) and present(b) and float(b) > 0 else math.nan


# ---- sliding window: local slopes and the exponent once N ≫ W ---------------------------------------

FAR_FACTOR = 4  # "N ≫ W": the window fit uses N ≥ 4W


def local_slopes(n, t) -> list[tuple[int, int, float]]:
    """(N_lo, N_hi, slope) between consecutive distinct N: log(t_hi / t_lo) / log(N_hi / N_lo), the
    exponent the series shows there (2 while the window covers every key, falling to 1 once N ≫ W).
    Repeated N (several runs) are merged by their median time; non-positive times are dropped."""
    import statistics

    by_n: dict[int, list[float]] = {}
    for x, y in zip(n, t, strict=True):
        if present(x) and present(y) and float(y) > 0:
            by_n.setdefault(int(x), []).append(float(y))
    pts = sorted((x, statistics.median(ys)) for x, ys in by_n.items())
    return [
        (n0, n1, math.log(t1 / t0) / math.log(n1 / n0))
        for (n0, t0), (n1, t1) in zip(pts, pts[1:], strict=False)
    ]


def window_fit(rows, window: int) -> fitmod.PowerFit:
    """The time exponent of one windowed series over its ok points with N ≥ FAR_FACTOR·W (all of them:
    those are the asymptotic points here)."""
    ok = ok_rows(rows).dropna(subset=["time_ms_median"])
    far = ok[ok["seq_len"] >= FAR_FACTOR * int(window)]
    return fitmod.fit_power_law(
        far["seq_len"].astype(float), far["time_ms_median"].astype(float), asymptotic=False
    )


def window_series(df):
    """(key, windowed rows, the same series without a window or None) per windowed series: key is its
    combination and variant; the no-window series differs only in window = 0."""
    ok = ok_rows(df)
    plain = {
        tuple(str(k[a]) for a in COMBO_AXES if a != "window") + (str(k["variant"]),): sub
        for k, sub in grouped(ok[(ok["window"] == 0).fillna(False)], [*COMBO_AXES, "variant"])
    }
    out = []
    for key, sub in grouped(ok[(ok["window"] > 0).fillna(False)], [*COMBO_AXES, "variant"]):
        match = tuple(str(key[a]) for a in COMBO_AXES if a != "window") + (str(key["variant"]),)
        out.append((key, sub, plain.get(match)))
    return out


def window_text(variant: str, window: int, fit: fitmod.PowerFit, plain: fitmod.PowerFit | None) -> str:
    """'chunked, window 16: exponent 1.05 [0.98, 1.12] over N ≥ 4W (64–512); without a window: 1.98 [...]'."""
    span = f" ({min(fit.seq_lens)}–{max(fit.seq_lens)})" if fit.seq_lens else ""
    text = f"{variant}, window {window}: exponent {fit.text()} over N ≥ {FAR_FACTOR}W{span}"
    if plain is not None:
        text += f"; without a window: {plain.text()}"
    return text
