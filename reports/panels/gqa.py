"""The grouped-query panel: each cell with H_kv < H against the MHA cell of its shape (table, gqa.csv)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import page as pg
from ..section import Section, ms_text, num_text, seq_count
from ..tables import COMBO_AXES, LENGTHS, axis_value, ok_rows, present, varying
from .decode import decode_rows

GQA_RULE = (
    "Each grouped-query cell (H_kv < H) against the MHA cell of the same shape in the same run: the same "
    "variant, device, dtype, batch, H, N_q, N_k, d_k, d_v, mask, window, padding, dropout and pass, only "
    "H_kv = H. Speed-up is MHA median time / GQA median time; 'separated' when the slower is at least 2% "
    "slower by median and the judge calls it slower at p < 0.05 (results.judge.separated). Memory: GQA / MHA "
    "peak bytes "
    "and K/V bytes (kv_bytes)."
)
# What must be equal for a GQA cell and its MHA counterpart: everything but kv_heads.
GQA_MATCH = [a for a in COMBO_AXES if a != "kv_heads"] + ["variant", *LENGTHS]


# ---- rows and numbers ----------------------------------------------------------------------------------


def gqa_rows(df):
    """Rows with fewer key/value heads than query heads (grouped-query or multi-query attention)."""
    if "kv_heads" not in df.columns:
        return df.iloc[:0]
    return df[(df["kv_heads"] < df["heads"]).fillna(False)]


def gqa_pairs(df):
    """One row per ok GQA cell (kv_heads < heads): its MHA counterpart (kv_heads = heads, every other axis
    equal) when the run has one ok, the time speed-up (MHA / GQA), whether the spreads separate
    (results.judge.separated: ≥ 2% by median and judged slower), and the memory ratios (peak bytes and
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


# ---- the page's blocks ---------------------------------------------------------------------------------


def _pairs_table(pairs, drop: list[str]) -> pg.Table:
    """One row per grouped-query cell: its time beside its MHA counterpart's, the speed-up, whether the
    spreads separate, and the memory ratios."""
    shown = varying(pairs, [a for a in GQA_MATCH if a not in ("variant", "seq_len", "seq_k", *drop)])
    lengths = ["seq_len", "seq_k"] if not decode_rows(pairs).empty else ["seq_len"]
    rows = []
    for _, r in pairs.iterrows():
        if r["has_mha"]:
            sep = "yes" if r["separated"] else "no (within the spread)"
            tail = (ms_text(r["mha_ms"]), f"{num_text(r['speedup'], '.3g')}×", sep)
            tail += (f"{num_text(r['mem_ratio'], '.2f')}×", f"{num_text(r['kv_bytes_ratio'], '.3g')}×")
        else:
            tail = ("no MHA cell (H_kv = H) of this shape in the run", "–", "–", "–", "–")
        rows.append(
            (
                str(r["variant"]),
                *[axis_value(a, r[a]) for a in shown],
                *[seq_count(r[a]) for a in lengths],
                str(r["heads"]),
                str(r["kv_heads"]),
                ms_text(r["gqa_ms"]),
                *tail,
            )
        )
    headers = ("variant", *shown, *lengths, "H", "H_kv", "GQA time", "MHA time", "speed-up", "separated",
               "peak memory GQA / MHA", "K/V bytes GQA / MHA")  # fmt: skip
    return pg.Table(headers, tuple(rows), "data: gqa.csv")


def section(df, metas: dict[str, dict[str, Any]], out: Path) -> Section:
    """GQA: each grouped-query cell against its MHA counterpart, among the tables (and gqa.csv); no figure."""
    if gqa_rows(df).empty:
        return Section()
    pairs = gqa_pairs(df)
    tables: list = [pg.Heading("Grouped-query attention against MHA of the same shape"), pg.Para(GQA_RULE)]
    if pairs.empty:
        return Section(tables=[*tables, pg.Para("No grouped-query cell ran ok.")])
    drop = [] if pairs["device_group"].fillna("").astype(str).ne("").any() else ["device_group"]
    pairs.drop(columns=drop).to_csv(out / "gqa.csv", index=False)
    missing = int((~pairs["has_mha"].astype(bool)).sum())
    if missing == len(pairs):  # nothing to set beside: one sentence, not a row per shape saying so
        kv: dict[int, set[int]] = {}
        for h, k in zip(pairs["heads"], pairs["kv_heads"], strict=True):
            kv.setdefault(int(h), set()).add(int(k))
        heads = "; ".join(
            f"H = {h}, H_kv = {' or '.join(map(str, sorted(k)))}" for h, k in sorted(kv.items())
        )
        said = (
            f"None of the {len(pairs)} grouped-query cells ({heads}) has an ok MHA cell (H_kv = H) of its "
            "shape in these runs, so none is set beside one (add the heads count to --kv-heads to measure "
            "it; their times are in the tables above and gqa.csv)."
        )
        return Section(tables=[tables[0], pg.Para(said)])
    tables.append(_pairs_table(pairs, drop))
    if missing:
        tables.append(
            pg.Para(
                f"{missing} of {len(pairs)} grouped-query cells have no ok MHA counterpart in these runs "
                "(add the heads count to --kv-heads to measure it)."
            )
        )
    return Section(tables=tables)
