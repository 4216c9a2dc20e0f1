"""A run's ok cells in the formats other dashboards take (`attnbench export --format hud|bencher`).

- **hud**: the PyTorch HUD's benchmark database records (the v3 format pytorch/test-infra uploads: a JSON
  list, one record per metric of a cell), each with `benchmark` (name "attnbench", mode inference for a
  forward cell and training for forward+backward, dtype, the cell's axes in extra_info, with a declared
  approximation's bound as `approximate` and the cell's trust flags, TRUST: `drift` with its
  `speed_factor`, `noisy`, `suspect` with its `suspect_reason`, `throttled`, as results.load derives them),
  `model` (the variant, type "attention"), `metric` (name, benchmark_values: the cell's replicate medians,
  and in its extra_info the cell's `input_shape`, its cell_id without the variant, where tritonbench's
  converter to the HUD's table puts an operator's input: so that each cell of a variant is its own series,
  not every N of it under one key) and `runners` (where it ran: host, device, GPU name, torch version,
  commit and code sha256 from meta.json).
  The table's schema (pytorch/test-infra's oss_ci_benchmark_v3 schema.sql) declares every extra_info a
  Map(String, String) and a runner's gpu_info a String: their values are written as text ('64', '0.9',
  'true', and '' for a runner without a GPU).
  Metrics: time_ms_median, tflops, peak_mem_bytes, and kv_gbps (every cell's K/V bytes over its median time:
  a decode cell's figure of merit).
- **bencher**: the Bencher Metric Format (BMF: {benchmark: {measure: {value, lower_value, upper_value}}}),
  one benchmark per cell (its cell_id) with the measures latency (nanoseconds: the median, the p25 and p75
  as its bounds, as Bencher's built-in latency measure counts), tflops and peak-memory (bytes), each
  rounded to SIGNIFICANT digits; and the trust flags as measures of their own (BMF has no other room, and
  Bencher makes a measure it does not know): speed-factor (the cell's speed probe over its run's median,
  1 = the machine's usual speed), and drift, noisy, suspect and throttled, each 1 where the cell is
  flagged and 0 where it is not. The benchmark's name stays its cell_id, so a flagged cell keeps its series.
  A BMF report is one run's: rows of several runs are refused.

Only ok cells are exported: a wrong, failed or skipped cell has no number another tool should plot. Rows
with no ok cell are refused (ValueError: there is nothing to export).
"""

from __future__ import annotations

import json
import math
from typing import Any

from .axes import CELL_AXES
from .schema import medians_of

METRICS = ("time_ms_median", "tflops", "peak_mem_bytes", "kv_gbps")
# a row's flags that say its number may not be the variant's own (results.drift, results.suspect, the worker's
# noisy and throttled columns): carried with every exported record
TRUST = ("drift", "noisy", "suspect", "throttled")
# Bencher's values, in significant digits: a timer resolves a nanosecond at best, a sub-millisecond median
# holds 6 digits of it, and digits past them are float noise from the unit's scaling (268692.99999999994 ns)
SIGNIFICANT = 6


def _num(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and str(v) != "<NA>"


def _plain(v: Any) -> Any:
    """A pandas or numpy scalar as a JSON value (NA as None)."""
    if not _num(v):
        return None
    return v.item() if hasattr(v, "item") else v


def _ok(df) -> list[dict[str, Any]]:
    """The ok cells' records; ValueError where there is none (an export of nothing is no export)."""
    ok = [r for r in df.to_dict("records") if r.get("status") == "ok" and _num(r.get("time_ms_median"))]
    if not ok:
        status = df["status"].value_counts() if "status" in df.columns and len(df) else {}
        held = ", ".join(f"{n} {s}" for s, n in status.items()) or "no cells"
        raise ValueError(
            f"nothing to export: no ok cell in the rows given ({held}); only ok cells are exported"
        )
    return ok


def trust(r: dict[str, Any]) -> dict[str, Any]:
    """A row's trust flags (TRUST) as JSON values, with the speed factor beside drift and the reason beside
    suspect; a flag the row does not know (NA: an old run, a CPU's clock) is left out."""
    out: dict[str, Any] = {}
    for flag in TRUST:
        value = r.get(flag)
        if _num(value):
            out[flag] = bool(value)
    if _num(r.get("speed_factor")):
        out["speed_factor"] = round(float(r["speed_factor"]), 4)
    if out.get("suspect") and _num(r.get("suspect_reason")):
        out["suspect_reason"] = str(r["suspect_reason"])
    return out


def rounded(value: float) -> float:
    """`value` to SIGNIFICANT digits, as a float."""
    return float(f"{float(value):.{SIGNIFICANT}g}")


def _text(v: Any) -> str:
    """A value where the HUD's table (oss_ci_benchmark_v3's schema.sql) declares a String, or a
    Map(String, String)'s value: text as it is, a number or a flag as its JSON text ('64', '0.9', 'true'),
    nothing as ''."""
    v = _plain(v)
    return "" if v is None else v if isinstance(v, str) else json.dumps(v)


def _texts(d: dict[str, Any]) -> dict[str, str]:
    return {k: _text(v) for k, v in d.items()}


def hud(df, metas: dict[str, dict[str, Any]]) -> str:
    """The PyTorch HUD records of `df`'s ok cells, as JSON text: every String of the HUD's table and every
    value of its extra_info maps as text (_text)."""
    records = []
    for r in _ok(df):
        fingerprint = metas.get(str(r.get("run_id")), {}).get("fingerprint") or {}
        axes = {a: r.get(a) for a in CELL_AXES if a != "variant"}
        # a declared approximation's bound: its numbers are for another answer than the exact kernels'
        held = {"approximate": float(r["approximate"])} if _num(r.get("approximate")) else {}
        flags = trust(r)
        runner = {
            "name": _text(_plain(r.get("host")) or fingerprint.get("hostname")),
            "type": _text(r.get("device")),
            "gpu_info": _text(r.get("gpu_name")),  # '' off a GPU
            "cpu_info": _text(fingerprint.get("cpu_model") or fingerprint.get("cpu")),
            # a version the run did not record is left out, not written as '' (the HUD reads a key as known)
            "extra_info": _texts(
                {
                    k: fingerprint[key]
                    for k, key in (
                        ("torch", "torch"),
                        ("commit", "git_commit"),
                        ("code_sha256", "code_sha256"),
                    )
                    if fingerprint.get(key) is not None
                }
            ),
        }
        for name in METRICS:
            value = r.get(name)
            if not _num(value):
                continue
            values = medians_of(r) if name == "time_ms_median" else [_plain(value)]
            shape = str(r.get("cell_id")).split("|", 1)[-1]  # the cell_id's first part is its variant
            records.append({
                "benchmark": {
                    "name": "attnbench",
                    "mode": "training" if r.get("pass") == "fwdbwd" else "inference",
                    "dtype": _text(r.get("dtype")),
                    "extra_info": _texts({**axes, "cell_id": r.get("cell_id"), "run_id": r.get("run_id"),
                                          **held, **flags}),
                },
                "model": {"name": r.get("variant"), "type": "attention", "origins": ["attnbench"]},
                "metric": {"name": name, "benchmark_values": values, "extra_info": {"input_shape": shape}},
                "runners": [runner],
            })  # fmt: skip
    return json.dumps(records, indent=1)


def bencher(df) -> str:
    """The Bencher Metric Format of one run's ok cells, as JSON text; ValueError for rows of several runs."""
    runs = sorted({str(r) for r in df["run_id"].dropna()}) if "run_id" in df.columns else []
    if len(runs) > 1:
        raise ValueError(f"a Bencher report is one run's: export one run at a time (got {len(runs)} runs)")
    out: dict[str, dict[str, Any]] = {}
    for r in _ok(df):
        ns = 1e6  # Bencher's latency measure counts nanoseconds
        measures: dict[str, Any] = {"latency": {"value": rounded(float(r["time_ms_median"]) * ns)}}
        if _num(r.get("time_ms_p25")) and _num(r.get("time_ms_p75")):
            measures["latency"]["lower_value"] = rounded(float(r["time_ms_p25"]) * ns)
            measures["latency"]["upper_value"] = rounded(float(r["time_ms_p75"]) * ns)
        if _num(r.get("tflops")):
            measures["tflops"] = {"value": rounded(r["tflops"])}
        if _num(r.get("peak_mem_bytes")):
            measures["peak-memory"] = {"value": float(r["peak_mem_bytes"])}
        flags = trust(r)
        if "speed_factor" in flags:
            measures["speed-factor"] = {"value": flags["speed_factor"]}
        for flag in TRUST:
            if flag in flags:
                measures[flag] = {"value": 1.0 if flags[flag] else 0.0}
        out[str(r["cell_id"])] = measures
    return json.dumps(out, indent=1)
