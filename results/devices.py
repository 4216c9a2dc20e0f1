"""Where each row was measured: its own device's calibration, and which devices of a run may be averaged.

A run may hold rows measured on several devices (GPUs of one box, nodes of a cluster). Each row names
its device through `formulas.where_key` (host, device, GPU UUID); meta.json keeps one record per such
device under `devices` (its calibration among them). Runs from before that keep one calibration per
device kind, `calibration[device]`, which is every row's fallback here.

Devices of one model whose calibrated matmul ceilings lie within SPLIT_CALIBRATION of the fastest of them
form one group (the usual 8-GPU box); another model, or a device more than that slower or faster, is a
group of its own. Reports fit, rank and plot each group apart, so that two machines are never averaged
into one number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .formulas import where_key

SPLIT_CALIBRATION = 0.10  # the same 10% as reports.calibration's warning between two runs


def _text(value: Any) -> str | None:
    """A column value as text, or None for None, pd.NA and NaN (rows from a DataFrame carry those)."""
    if value is None:
        return None
    try:
        if value != value:  # NaN
            return None
    except TypeError:  # pd.NA: its comparison is NA, whose truth value raises
        return None
    return str(value)


def _kind(row: dict[str, Any]) -> str:
    """A row's device kind: cpu, cuda ('?' when the row has none)."""
    return str(_text(row.get("device")) or "?")


def where_of(row: dict[str, Any]) -> str:
    """A row's where_key, from its host, device and gpu_uuid columns ('?:cpu' for a row without a host)."""
    return where_key(_text(row.get("host")), str(_text(row.get("device")) or "?"), _text(row.get("gpu_uuid")))


def device_record(meta: dict[str, Any], where: str | None) -> dict[str, Any]:
    """meta.json's `devices` record of one where_key, or {} (older runs, or a device it does not list)."""
    return ((meta.get("devices") or {}).get(where) or {}) if where else {}


def calibration_for(meta: dict[str, Any], device: str, where: str | None = None) -> dict[str, Any]:
    """The calibration of the device that measured a row: its `devices[where]` record's, else the run's
    `calibration[device]` (runs made before per-device records, and single-device runs); {} if none."""
    own = device_record(meta, where).get("calibration")
    if isinstance(own, dict) and own:
        return own
    return (meta.get("calibration") or {}).get(device) or {}


def positive(value: Any) -> float | None:
    """A calibration figure that can be divided by: finite and > 0, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and value > 0 else None


def matmul_tflops(cal: dict[str, Any], dtype: str) -> float | None:
    return positive((cal.get("matmul_tflops") or {}).get(dtype))


def matmul_n(cal: dict[str, Any], dtype: str) -> int | None:
    """The size of the square matmul a calibration timed for `dtype`: its `matmul_n_by_dtype` entry (a slow
    dtype or a short calibrate_ms: a smaller matmul), else its `matmul_n`; None where it records neither."""
    n = (cal.get("matmul_n_by_dtype") or {}).get(dtype, cal.get("matmul_n"))
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


@dataclass(frozen=True)
class DeviceGroup:
    """Devices of one run that may be averaged together: one model, calibrations within 10%."""

    device: str  # the device kind: cpu, cuda
    model: str  # the GPU's name, or the CPU's model
    members: tuple[str, ...]  # where_keys, the group's reference (its fastest device) first
    calibration: dict[str, Any] = field(compare=False)  # the reference device's (left out of == and hash)
    label: str  # '' when it is its device kind's only group in the run (nothing is split)
    why: str  # why it stands apart from the first group of its kind ('' for that one)
    unmeasured: tuple[str, ...] = ()  # where_keys of rows no device measured ('?:cpu': refused up front)

    @property
    def wheres(self) -> tuple[str, ...]:
        """Every where_key whose rows belong to this group: its devices, then the rows without a host."""
        return self.members + self.unmeasured


def model_of(meta: dict[str, Any], where: str, row: dict[str, Any]) -> str:
    """The device's model: the GPU name (its record's, else the row's), or the CPU model, which meta.json
    knows for the host that wrote the fingerprint (a record may carry its own `cpu_model`)."""
    rec = device_record(meta, where)
    fp = meta.get("fingerprint") or {}
    device = str(_text(row.get("device")) or rec.get("device") or "?")
    if device == "cuda":
        return str(
            rec.get("gpu_name") or _text(row.get("gpu_name")) or (fp.get("gpu") or {}).get("name") or "GPU"
        )
    host = rec.get("host") or _text(row.get("host"))
    if rec.get("cpu_model"):
        return str(rec["cpu_model"])
    if host is None or host == fp.get("hostname"):
        return str(fp.get("cpu_model") or device)
    return f"{device} of {host}"  # another host whose CPU model meta.json does not record


def machine_of(meta: dict[str, Any], where: str, row: dict[str, Any]) -> str:
    """The machine of a row: the device's model on its host ('NVIDIA H200 on vm', 'AMD EPYC (2 cores) on
    vm'), so that one host's CPU and GPU, or two GPU models, are separate machines. The `machine` column of
    results.load's frame and of the history store's (where it keys a series), one meaning in both."""
    fp = meta.get("fingerprint") or {}
    named = device_record(meta, where).get("host") or _text(row.get("host"))
    host = named or fp.get("hostname") or "?"
    model = model_of(meta, where, row)
    cores = fp.get("physical_cores")
    if row.get("device") != "cuda" and cores and named in (None, fp.get("hostname")):  # the fingerprint's CPU
        model = f"{model} ({cores} cores)"
    return f"{model} on {host}"


def planned_machines(meta: dict[str, Any]) -> list[str]:
    """The machines a run's meta.json says it measures on, named as machine_of names its rows': each device
    it recorded (`devices`, written as the run starts), else each device kind of its sweep on the host that
    wrote the fingerprint. What a run with no rows (stopped before its first) is on, for the history store."""
    recorded = {w: r for w, r in (meta.get("devices") or {}).items() if isinstance(r, dict)}
    kinds = (meta.get("sweep") or {}).get("devices") or []
    planned = recorded or {where_key(None, str(d)): {"device": str(d)} for d in kinds}
    rows = {w: {k: r.get(k) for k in ("device", "host", "gpu_name")} for w, r in planned.items()}
    return sorted({machine_of(meta, w, row) for w, row in rows.items()})


def _close(cal: dict[str, Any], ref: dict[str, Any]) -> tuple[bool, str]:
    """(whether cal is within SPLIT_CALIBRATION of ref on every dtype both calibrated, why not)."""
    for dtype in sorted(set(cal.get("matmul_tflops") or {}) & set(ref.get("matmul_tflops") or {})):
        a, r = matmul_tflops(cal, dtype), matmul_tflops(ref, dtype)
        if a and r and abs(a / r - 1) > SPLIT_CALIBRATION:
            return False, f"{dtype} matmul {a:.3g} TFLOP/s is {a / r:.2f}x the {r:.3g} of"
    return True, ""


def _fastest(cal: dict[str, Any]) -> float:
    return max((matmul_tflops(cal, d) or 0.0 for d in cal.get("matmul_tflops") or {}), default=0.0)


def groups(meta: dict[str, Any], rows: Iterable[dict[str, Any]]) -> list[DeviceGroup]:
    """The device groups of one run's rows: per device kind, per model (by name), and within a model the
    fastest group first.

    Within a model the fastest device is the first group's reference; a device whose matmul ceiling for
    some dtype is more than SPLIT_CALIBRATION off it starts a group of its own (and so on down). A device
    without a calibration has nothing to differ by and joins its model's first group.
    """
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(where_of(r), r)
    # a row without a host was never measured (unsupported, refused before any worker): it is no device,
    # and joins its device kind's first group, unless the run measured nothing of that kind
    hostless = {w: r for w, r in seen.items() if _text(r.get("host")) is None}
    kinds = {_kind(r) for w, r in seen.items() if w not in hostless}
    seen = {w: r for w, r in seen.items() if w not in hostless or _kind(r) not in kinds}
    by_model: dict[tuple[str, str], list[str]] = {}
    for w, r in seen.items():
        by_model.setdefault((_kind(r), model_of(meta, w, r)), []).append(w)
    out: list[DeviceGroup] = []
    for device in sorted({d for d, _ in by_model}):
        names = sorted(m for d, m in by_model if d == device)
        clusters: list[tuple[str, str, list[str], str]] = []  # (model, reference where, members, why)
        for model in names:
            cal = {w: calibration_for(meta, device, w) for w in by_model[(device, model)]}
            for w in sorted(cal, key=lambda w: (-_fastest(cal[w]), w)):
                for _, ref, members, _ in (c for c in clusters if c[0] == model):
                    if _close(cal[w], cal[ref])[0]:
                        members.append(w)
                        break
                else:
                    firsts = [c for c in clusters if c[0] == model]
                    if not firsts:
                        why = "" if not clusters else f"another model than {clusters[0][0]}"
                    else:
                        apart = f": more than {SPLIT_CALIBRATION:.0%} apart"
                        why = _close(cal[w], cal[firsts[0][1]])[1] + f" {firsts[0][1]}{apart}"
                    clusters.append((model, w, [w], why))
        models = [c[0] for c in clusters]
        for i, (model, ref, members, why) in enumerate(clusters):
            label = "" if len(clusters) == 1 else model
            if models.count(model) > 1:
                label = f"{model} #{models[: i + 1].count(model)}"
            cal = calibration_for(meta, device, ref)
            unmeasured = (
                ()
                if i
                else tuple(sorted(w for w, r in hostless.items() if w not in seen and _kind(r) == device))
            )
            out.append(DeviceGroup(device, model, tuple(members), cal, label, why, unmeasured))
    return out


def group_of(groups_: Iterable[DeviceGroup]) -> dict[str, DeviceGroup]:
    """where_key -> its DeviceGroup."""
    return {w: g for g in groups_ for w in g.wheres}
