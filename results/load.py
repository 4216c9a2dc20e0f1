"""Load one or many run directories into one typed pandas DataFrame (long form, one row per cell)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import drift, suspect
from .schema import AXIS_DEFAULTS, COLUMNS, LIST_COLUMNS
from .store import latest_rows, read_meta


def machine_label(meta: dict[str, Any]) -> str:
    """A short name for the machine a run was made on: the GPU if it used one, else the CPU."""
    fp = meta.get("fingerprint", {})
    gpu = (fp.get("gpu") or {}).get("name")
    devices = (meta.get("sweep") or {}).get("devices", [])
    if gpu and "cuda" in devices:
        return str(gpu)
    cpu = fp.get("cpu_model") or "cpu"
    cores = fp.get("physical_cores")
    return f"{cpu} ({cores} cores)" if cores else str(cpu)


def load(*paths: str | Path | list[str | Path]):
    """DataFrame of every row of the given runs, with run_id and machine columns, typed per the schema.

    load("runs/a", "runs/b") and load(["runs/a", "runs/b"]) are the same.
    """
    import pandas as pd

    paths = tuple(p for arg in paths for p in (arg if isinstance(arg, (list, tuple)) else [arg]))
    frames, metas = [], {}
    for path in paths:
        meta = read_meta(path)
        metas[meta.get("run_id", Path(path).name)] = meta
        df = pd.DataFrame(latest_rows(path))
        df["run_id"] = meta.get("run_id", Path(path).name)
        df["machine"] = machine_label(meta)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    for col, dtype in COLUMNS.items():
        if col not in df.columns:
            df[col] = pd.NA
        df[col] = df[col].astype(dtype) if len(df) else pd.Series(dtype=dtype)
        if col in AXIS_DEFAULTS:  # a run written before the axis existed measured it at its default
            df[col] = df[col].fillna(AXIS_DEFAULTS[col])
    factors = drift.speed_factors(df.to_dict("records")) if len(df) else []
    df["speed_factor"] = pd.array(factors, dtype="Float64")
    df["drift"] = pd.array([drift.drifted(f) for f in factors], dtype="boolean")
    why = suspect.reasons(df, metas) if len(df) else []
    df["suspect_reason"] = pd.array(why, dtype="string")
    df["suspect"] = pd.array([w is not None for w in why], dtype="boolean")
    for col in LIST_COLUMNS:
        if col not in df.columns:
            df[col] = None
    extra = [c for c in df.columns if c not in COLUMNS and c not in LIST_COLUMNS]
    return df[list(COLUMNS) + list(LIST_COLUMNS) + extra]


def load_meta(*paths: str | Path) -> dict[str, dict[str, Any]]:
    """run_id -> meta for each run."""
    out = {}
    for path in paths:
        meta = read_meta(path)
        out[meta.get("run_id", Path(path).name)] = meta
    return out


def load_numerics(path: str | Path) -> dict[str, Any]:
    """The run's numerics.json ({'probe': [...], 'example_weights': {...}}), or {} when it has none."""
    import json

    read_meta(path)
    p = Path(path) / "numerics.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def export(df, fmt: str) -> str:
    """The tidy table as CSV (without raw samples) or JSON records (with them)."""
    if fmt == "csv":
        return df.drop(columns=list(LIST_COLUMNS), errors="ignore").to_csv(index=False)
    if fmt == "json":
        return df.to_json(orient="records", indent=1)
    raise ValueError(f"unknown export format {fmt!r}; known: csv, json")
