"""The history store's cell records (results.history): a run's rows as the store keeps them, a record per
cell: its identity (cell_id and the axes), the machine that measured it (results.devices), what was
measured, that device's calibration, a declared approximation's bound, and the trust flags the loader
derives for it (results.load.trust_flags: suspect with its reason, drift with the speed factor, noisy,
throttled), so that no page ranks a cell its run's report refused to rank."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from . import devices
from .axes import AXES, FOLLOWS, QUIET
from .load import TRUST_COLUMNS, trust_flags

# a cell's columns: its identity, the machine that measured it, what was measured, that device's calibration,
# and its trust flags
AXIS_NAMES = tuple(a.name for a in AXES)
CELL_COLUMNS = (
    "run_key", "cell_id", "machine", "where_key", "device_group", *AXIS_NAMES, "status", "time_ms_median",
    "time_ms_p25", "time_ms_p75", "tflops", "peak_mem_bytes", "variant_source", "cal_matmul_tflops",
    "cal_copy_gbps", "finished_at", "approximate", *TRUST_COLUMNS,
)  # fmt: skip


def plain(value: Any) -> Any:
    """A value SQLite stores as it is (text, number, NULL); anything else as its JSON text."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    return json.dumps(value, sort_keys=True)


def cell_records(
    meta: dict[str, Any], rows: Sequence[dict[str, Any]], key: str, flags=None
) -> list[tuple[Any, ...]]:
    """The store's cell records of one run's rows (CELL_COLUMNS' order), under its key in the store; `flags`:
    the rows' trust flags (load.trust_flags), derived here where not given."""
    flags = trust_flags([(meta, list(rows))])[0] if flags is None else flags
    group = {w: g.label for g in devices.groups(meta, rows) for w in g.wheres}
    sources = {v: c.get("source") for v, c in (meta.get("variant_capabilities") or {}).items()}
    out = []
    for row, flagged in zip(rows, flags, strict=True):
        where = devices.where_of(row)
        cal = devices.calibration_for(meta, str(row.get("device")), where)
        record = {
            **{a: row.get(a, QUIET.get(a)) for a in AXIS_NAMES},
            "run_key": key,
            "cell_id": row["cell_id"],
            "machine": devices.machine_of(meta, where, row),
            "where_key": where,
            "device_group": group.get(where, ""),
            "status": row.get("status"),
            "time_ms_median": row.get("time_ms_median"),
            "time_ms_p25": row.get("time_ms_p25"),
            "time_ms_p75": row.get("time_ms_p75"),
            "tflops": row.get("tflops"),
            "peak_mem_bytes": row.get("peak_mem_bytes"),
            "variant_source": sources.get(row.get("variant")),
            "cal_matmul_tflops": devices.matmul_tflops(cal, str(row.get("dtype"))),
            "cal_copy_gbps": devices.positive(cal.get("copy_gbps")),
            "finished_at": row.get("finished_at"),
            "approximate": row.get("approximate"),  # its bound, so that pages name it as approximate
            **flagged,
        }
        for axis, followed in FOLLOWS.items():  # rows written before the axis existed (results.load does so)
            if record[axis] is None:
                record[axis] = record[followed]
        out.append(tuple(plain(record[c]) for c in CELL_COLUMNS))
    return out
