"""Load one or many run directories into one typed pandas DataFrame (long form, one row per cell)."""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path
from typing import Any

from attnbench.results.visits import skipped_lines as journal_skipped

from . import devices, drift, integrity, interchange, suspect
from .axes import FOLLOWS
from .formulas import DTYPE_BYTES, executed_flops, median_rates, tflops
from .schema import AXIS_DEFAULTS, COLUMNS, LEGACY_COLUMNS, LIST_COLUMNS, upgrade_lists
from .store import (
    ROWS,
    SHARDS,
    RowWarning,
    UncollectedWarning,
    latest,
    read_meta,
    read_resumes,
    read_rows,
    uncollected_rows,
)


def machine_label(meta: dict[str, Any]) -> str:
    """A short name for the machine a run was made on, the GPU if it used one, else the CPU, as pages name a
    run ('NVIDIA H200'); a row's `machine` column is devices.machine_of's (its device's model on its host)."""
    fp = meta.get("fingerprint", {})
    gpu = (fp.get("gpu") or {}).get("name")
    devices = (meta.get("sweep") or {}).get("devices", [])
    if gpu and "cuda" in devices:
        return str(gpu)
    cpu = fp.get("cpu_model") or "cpu"
    cores = fp.get("physical_cores")
    return f"{cpu} ({cores} cores)" if cores else str(cpu)


def _host_of_old_rows(df, meta: dict[str, Any]) -> None:
    """Rows written before rows carried their `host` (runs without meta.json `devices`, all on one host)
    were measured on the host that wrote the fingerprint: their `host`, so that `where` names it as
    `machine` does ('vm:cpu', not '?:cpu')."""
    host = (meta.get("fingerprint") or {}).get("hostname")
    if meta.get("devices") or not host or not len(df):
        return
    df["host"] = df["host"].where(df["host"].notna(), host) if "host" in df.columns else host


def load(*paths: str | Path | list[str | Path]):
    """DataFrame of the given runs, a row per cell of each, with run_id and machine columns, typed per the
    schema. A cell measured more than once (`--resume --redo-drift` appends a row) is its last row, with how
    often it was measured and how far its medians lie apart, and `drift` where its answer moved
    (results.drift.measured, _run_frame).

    load("runs/a", "runs/b") and load(["runs/a", "runs/b"]) are the same. Cells still only in a run's
    shards/*.jsonl (an array job not yet collected by store.merge_shards) are read too, with an
    UncollectedWarning.
    """
    import pandas as pd

    paths = tuple(p for arg in paths for p in (arg if isinstance(arg, (list, tuple)) else [arg]))
    frames, metas = [], {}
    seen: dict[Any, str | Path] = {}  # a run's resolved folder and its run_id -> the path it was given as
    for path in paths:
        meta = read_meta(path)
        _refuse_twice(path, meta, seen)
        metas[meta.get("run_id", Path(path).name)] = meta
        every = read_rows(path)
        for said in journal_skipped(path):  # as rows.jsonl's: a visit's line torn or corrupt
            warnings.warn(said, RowWarning, 2)
        for said in integrity.sentences(path, every, read_resumes(path)):  # loud: its numbers may be forged
            warnings.warn(said, integrity.ChangedWarning, 2)
        rows = latest(every)
        loose = uncollected_rows(path)
        if loose:  # an array job still running, or finished but not merged: read them, and say so
            warnings.warn(
                f"{path}: {len(loose)} cells are only in {SHARDS}/*.jsonl, not yet collected into {ROWS} "
                "(results.store.merge_shards collects them)",
                UncollectedWarning,
                2,
            )
        frames.append(_run_frame(meta, rows + loose, meta.get("run_id", Path(path).name), every))
    return _derived(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), metas)


# the trust flags the loader derives or reads for a row (results.drift, results.suspect, the worker's noisy
# and throttled), which the history store keeps (results.history) and the exports carry (results.interchange)
TRUST_COLUMNS = ("suspect", "suspect_reason", "drift", "speed_factor", "noisy", "throttled")


def trust_flags(runs: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[list[dict[str, Any]]]:
    """Per run of `runs` (its meta.json and its rows as read from its files, a cell measured again among
    them), per cell in store.latest's order (its last row): its TRUST_COLUMNS as `load` gives them (a flag
    not known, NA, as None), by load's own rules, all runs typed at once as load types them: what the
    history store keeps. Each run is judged as its own (two runs of one run_id too)."""
    import pandas as pd

    runs = [(meta, [dict(r) for r in rows], latest(rows)) for meta, rows in runs]
    # each run under its place in `runs` as its run_id: two runs of one run_id are judged apart
    frames = [
        _run_frame(meta, [dict(r) for r in last], str(i), every)
        for i, (meta, every, last) in enumerate(runs)
        if last
    ]
    if not frames:
        return [[] for _ in runs]
    df = _derived(pd.concat(frames, ignore_index=True), {str(i): meta for i, (meta, *_) in enumerate(runs)})
    plain = [
        [None if pd.isna(v) else v.item() if hasattr(v, "item") else v for v in df[c]] for c in TRUST_COLUMNS
    ]
    flags = [dict(zip(TRUST_COLUMNS, values, strict=True)) for values in zip(*plain, strict=True)]
    out, at = [], 0
    for _, _, last in runs:
        out.append(flags[at : at + len(last)])
        at += len(last)
    return out


def _run_frame(meta: dict[str, Any], rows: list[dict[str, Any]], run_id: Any, every: list[dict[str, Any]]):
    """One run's rows (one per cell) as a frame, before typing: its packed rows' executed work counted, its
    run_id, the host of rows written before rows carried one, each row's machine, columns written under an
    older name under today's (results.schema.LEGACY_COLUMNS), and how often its cell was measured (`every`:
    the run's rows as its files hold them, results.drift.measured: measured_times, medians_spread, and the
    reason an answer that moved is drift, which _derived joins to the probe's)."""
    import pandas as pd

    _count_executed(rows, meta)
    df = pd.DataFrame(rows).rename(columns=LEGACY_COLUMNS)  # an older run's names read as today's
    df["run_id"] = run_id
    times = drift.measured(every)
    cells = [times.get(str(r.get("cell_id"))) for r in rows]  # a cell only in shards/: measured once
    df["measured_times"] = [m.times if m else 1 for m in cells]
    df["medians_spread"] = [m.spread if m else math.nan for m in cells]
    df["drift_reason"] = [m.reason if m else None for m in cells]
    picks = {v: " ".join(picks_among(meta, v)) or None for v in {str(r.get("variant")) for r in rows}}
    df["picks_among"] = [picks[str(r.get("variant"))] for r in rows]
    _host_of_old_rows(df, meta)
    # the device's model on its host, per row (devices.machine_of), as the history store names it
    df["machine"] = [devices.machine_of(meta, devices.where_of(r), r) for r in rows]
    return df


# What the built-in variants' capability records say of the kernels each picks among (Capability.picks_among),
# for the runs whose meta.json records none (made before the field): sdpa, torch's own choice of backend,
# has picked among those of the pinned SDPA variants since attnbench had them.
# tests/reports/test_same_kernel.py checks it against the registry.
BUILTIN_PICKS = {"sdpa": ("sdpa_math", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn")}


def picks_among(meta: dict[str, Any], variant: str) -> tuple[str, ...]:
    """The variants whose kernels `variant`'s own dispatch picks among, as its run's meta.json records its
    capability (variant_capabilities[variant]["picks_among"]); for a record without the field (a run made
    before it, or none at all) and a built-in variant, BUILTIN_PICKS' by its name; () for any other."""
    caps = meta.get("variant_capabilities")
    record = caps.get(variant) if isinstance(caps, dict) else None
    if isinstance(record, dict) and "picks_among" in record:
        found = record["picks_among"]
        return tuple(str(v) for v in found) if isinstance(found, list) else ()
    if isinstance(record, dict) and record.get("source", "builtin") != "builtin":
        return ()
    return BUILTIN_PICKS.get(variant, ())


def _derived(df, metas: dict[str, dict[str, Any]]):
    """The runs' frame typed per the schema, with the columns the loader derives: where, device_group,
    speed_factor, drift, suspect_reason and suspect."""
    import pandas as pd

    df = _typed(df)
    if len(df):
        _fill_axis_defaults(df)
    # the rules below read a row's scalar columns only: boxing every sample into records cost more than them
    records = scalar_records(df)
    df["where"] = pd.array([devices.where_of(r) for r in records], dtype="string")
    df["device_group"] = pd.array(_group_labels(records, metas), dtype="string")
    factors = drift.speed_factors(records)
    df["speed_factor"] = pd.array(factors, dtype="Float64")
    # a row without a speed probe (an old run's) was not judged for drift: NA, never "not drifted"; a cell
    # whose measurements moved apart (its reason, from _run_frame) drifted whatever its last probe read
    moved = [r.get("drift_reason") for r in records]
    reasons = [
        "; ".join(w for w in (drift.probe_reason(f), m if isinstance(m, str) else None) if w) or None
        for f, m in zip(factors, moved, strict=True)
    ]
    # drifted where a reason says so; else not, where a probe judged it
    flags = [bool(w) or (False if math.isfinite(f) else pd.NA) for f, w in zip(factors, reasons, strict=True)]
    df["drift_reason"] = pd.array(reasons, dtype="string")
    df["drift"] = pd.array(flags, dtype="boolean")
    for r, flag in zip(records, flags, strict=True):  # a drifted naive judges no neighbour (results.suspect)
        r["drift"] = flag
    why = suspect.reasons(records, metas, factors)
    df["suspect_reason"] = pd.array(why, dtype="string")
    df["suspect"] = pd.array([w is not None for w in why], dtype="boolean")
    df = upgrade_lists(df)
    extra = [c for c in df.columns if c not in COLUMNS and c not in LIST_COLUMNS]
    return df[list(COLUMNS) + list(LIST_COLUMNS) + extra]


def _count_executed(rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Each packed row's executed_flops (and executed_tflops) counted from the row's own seq_lens and shape
    by its variant's declared `varlen` work (meta.json's variant_capabilities), by today's formula
    (results.formulas.executed_flops), in place of the number the row stored: the count is derived, and a
    row stored under an older rule (a padded kernel's causal cells credited with half its rectangle) reads
    as the kernel's work. A row whose variant's work meta.json does not name keeps its number; one whose
    work it names carries it as `varlen_work`, which the varlen panel splits the padding tax out by."""
    caps = meta.get("variant_capabilities") or {}
    for r in rows:
        work, lengths = (caps.get(r.get("variant")) or {}).get("varlen"), r.get("seq_lens")
        if not work or not isinstance(lengths, list) or not lengths:
            continue
        r["varlen_work"] = str(work)  # what the panel splits executed / useful by (padding_split)
        if r.get("executed_flops") is None:
            continue
        try:
            d_k = int(r["d_k"])
            r["executed_flops"] = executed_flops(
                lengths, work=work, heads=int(r["heads"]), d_k=d_k, d_v=int(r.get("d_v") or d_k),
                causal=bool(r.get("causal")), window=int(r.get("window") or 0), pass_=r.get("pass") or "fwd",
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):  # a row or a work this version cannot read: as stored
            continue
        if r.get("time_ms_median") is not None:
            r["executed_tflops"] = tflops(r["executed_flops"], r["time_ms_median"])


def _typed(df):
    """df with every schema column (results.schema.COLUMNS), NA where its rows lack it, each of the schema's
    dtype, and an axis's NA at its default (a run written before the axis existed measured it there): one
    pass over the frame, not one per column."""
    import pandas as pd

    missing = [c for c in COLUMNS if c not in df.columns]
    df = df.reindex(columns=[*df.columns, *missing], fill_value=pd.NA).astype(_dtypes())
    return df.fillna({col: AXIS_DEFAULTS[col] for col in COLUMNS if col in AXIS_DEFAULTS})


@functools.cache
def _dtypes() -> dict[str, Any]:
    """COLUMNS' dtypes as pandas' dtype objects, found once: astype looked each name up again among every
    registered dtype, for every column of every load (a third of typing a small run)."""
    from pandas.api.types import pandas_dtype

    return {col: pandas_dtype(name) for col, name in COLUMNS.items()}


def _refuse_twice(path: str | Path, meta: dict[str, Any], seen: dict[Any, str | Path]) -> None:
    """A ValueError (one line) where `path` is a run already given (`seen`): the same folder however spelled,
    or a run with the same run_id in meta.json (a copy of it); its rows would be in the frame twice."""
    run_id = meta.get("run_id", Path(path).name)
    here = Path(path).resolve()
    if ("dir", here) in seen:
        raise ValueError(f"the same run is given twice ({seen['dir', here]} and {path}): give each run once")
    if ("run_id", run_id) in seen:
        raise ValueError(
            f"the same run is given twice: {path} has the run_id {run_id} of {seen['run_id', run_id]} in "
            "meta.json (a copy of it?): give each run once"
        )
    seen[("dir", Path(path).resolve())] = seen[("run_id", run_id)] = path


def scalar_records(df) -> list[dict[str, Any]]:
    """A loaded frame's rows as records of its schema's typed columns (results.schema.COLUMNS), without its
    list columns, as to_dict("records") gives them (Python scalars, None for NA), read column by column:
    to_dict read the ~150 columns one row at a time (a third of loading a small run)."""
    import pandas as pd

    if not len(df):
        return []
    names = [c for c in COLUMNS if c in df.columns]
    columns = [[None if v is pd.NA else v for v in df[c].tolist()] for c in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def _group_labels(records: list[dict[str, Any]], metas: dict[str, dict[str, Any]]) -> list[str]:
    """Per row: its device group's label (results.devices), '' where its run's device kind is not split."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_run.setdefault(str(r.get("run_id")), []).append(r)
    label = {
        (rid, w): g.label
        for rid, rows in by_run.items()
        for g in devices.groups(metas.get(rid, {}), rows)
        for w in g.wheres
    }
    return [label.get((str(r.get("run_id")), devices.where_of(r)), "") for r in records]


def _fill_axis_defaults(df) -> None:
    """Rows written before an axis existed hold its default: an axis that follows another takes its value
    (kv_heads = heads, seq_k = seq_len: axes.FOLLOWS; the fixed defaults are schema.AXIS_DEFAULTS); their
    kv_bytes follows from those, and the rates written after them (kv_gbps, tokens_per_s) from the row's
    amounts and median time by results.formulas.median_rates, as for new rows."""
    import pandas as pd

    for axis, followed in FOLLOWS.items():
        df[axis] = df[axis].fillna(df[followed])
    itemsize = df["dtype"].map(lambda d: DTYPE_BYTES.get(d, 4) if isinstance(d, str) else pd.NA)
    derived = df["batch"] * df["kv_heads"] * df["seq_k"] * (df["d_k"] + df["d_v"]) * itemsize.astype("Int64")
    df["kv_bytes"] = df["kv_bytes"].fillna(derived)
    rates = [
        median_rates({"batch": _int(b), "seq_len": _int(n), "kv_bytes": _int(kv)}, float(t))
        if pd.notna(t)
        else {}
        for b, n, kv, t in zip(df["batch"], df["seq_len"], df["kv_bytes"], df["time_ms_median"], strict=True)
    ]
    for column in ("kv_gbps", "tokens_per_s"):
        derived = pd.Series([r.get(column, math.nan) for r in rates], index=df.index, dtype="Float64")
        df[column] = df[column].fillna(derived)


def _int(value: Any) -> int | None:
    """A whole amount of a loaded row as an int (pandas gives numpy's), None where it is missing."""
    import pandas as pd

    return None if pd.isna(value) else int(value)


def changes(path: str | Path) -> list[str]:
    """What changed the run at `path` other than attnbench, and the cells its rows.jsonl repeats unexplained
    (results.integrity), one sentence each; [] for a run that holds only what attnbench wrote."""
    return integrity.sentences(path, read_rows(path), read_resumes(path))


def load_meta(*paths: str | Path) -> dict[str, dict[str, Any]]:
    """run_id -> meta for each run, with `resumes` (its resumes.jsonl records) when it was resumed."""
    out = {}
    for path in paths:
        meta = read_meta(path)
        resumes = read_resumes(path)
        if resumes:
            meta["resumes"] = resumes
        out[meta.get("run_id", Path(path).name)] = meta
    return out


def load_numerics(path: str | Path) -> dict[str, Any]:
    """The run's numerics.json ({'probe': [...], 'tiles': [...], 'example_weights': {...}}), or {} when it
    has none."""
    import json

    read_meta(path)
    p = Path(path) / "numerics.json"
    if not p.is_file():
        return {}
    try:
        value = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):  # a write cut short by an older attnbench, or damaged: leave it out
        warnings.warn(
            f"{p}: unreadable (torn write?), left out; `run --resume` measures it again", RowWarning, 2
        )
        return {}
    return value


# a failed gate at N = TILE_N in words, by its status
TILE_FAILED = {
    "wrong": "answers wrong",
    "error": "raises",
    "crashed": "crashes its worker",
    "timeout": "hangs",
}


def tile_failed(tiles: list[dict[str, Any]], probe: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{variant: its records of `tiles` not ok} for each variant a run's gate at an N past full tiles
    (numerics.json `tiles`: harness.measure.numerics.tiles) failed in a dtype where the numerics `probe` (at
    N = 128) found it right; tile_sentences and tile_wrong read it, computed once."""
    right = {
        (r.get("variant"), r.get("dtype")) for r in probe if r.get("q_scale") == 1 and r.get("status") == "ok"
    }
    failed: dict[str, list[dict[str, Any]]] = {}
    for record in tiles:
        dtypes = (
            [record["dtype"]] if "dtype" in record else [d for v, d in right if v == record.get("variant")]
        )
        if record.get("status") in TILE_FAILED and any((record.get("variant"), d) in right for d in dtypes):
            failed.setdefault(str(record.get("variant")), []).append(record)
    return failed


def tile_wrong(failed: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """{variant: the N} for each variant of `failed` (tile_failed) that answers wrong at the gate's N = TILE_N
    (tile_sentences says why): the findings name it so wherever they rank or fit it. A kernel that raises
    there is limited, not wrong, and is not among them."""
    return {
        name: int(records[0]["seq_len"])
        for name, records in failed.items()
        if any(r.get("status") == "wrong" for r in records)
    }


def tile_sentences(failed: dict[str, list[dict[str, Any]]], run: str = "") -> list[str]:
    """Per variant of `failed` (tile_failed: wrong or raising at the gate's N past full tiles, right in the
    probe): one sentence with the masks and dtypes it failed in, the first one's why, and the command that
    gates every mask there (a variant that fails at 128 too fails its cells as well: they say it); `run` names
    the run where a report has several."""
    out = []
    for name, records in failed.items():
        n, status = records[0].get("seq_len"), records[0].get("status")
        what = TILE_FAILED["wrong" if any(r.get("status") == "wrong" for r in records) else status]
        where = f" (run {run})" if run else ""
        if "dtype" in records[0]:  # a crash or a hang records no problem: it was the worker's
            masks = " and ".join(dict.fromkeys("causal" if r.get("causal") else "no mask" for r in records))
            where += f" ({masks}; {', '.join(dict.fromkeys(str(r.get('dtype')) for r in records))})"
        why = str(records[0].get("message") or "").rstrip(".")
        out.append(
            f"{name} {what} at N {n}{where}: {why}. {_tile_why(what == TILE_FAILED['wrong'], name, n)}"
        )
    return out


def _tile_why(wrong: bool, name: str, n: Any) -> str:
    """Why a failure at N = TILE_N matters: for a wrong answer, the partial tile and the command that gates
    every mask there; for a raise, a crash or a hang, how a kernel that takes only some N says so."""
    if wrong:
        return (
            f"At N {n} the last tile of 64, 128 or 256 keys is partial: a kernel that drops or misreads it "
            "is right at every N its tile divides (powers of two), so ok cells there do not clear it; "
            f"`attnbench check --variants {name} --seq-len {n}` gates every mask at N {n}."
        )
    return (
        "A kernel that takes only some N says so by raising attnbench.UnsupportedError (its cells at other N "
        "are then unsupported, not errors: docs/variants.md); one meant to take every N fails where its last "
        f"tile of 64, 128 or 256 keys is partial, as at N {n}."
    )


EXPORT_FORMATS = ("csv", "json", "hud", "bencher")
CSV_DIGITS = 15  # significant digits a double holds whole: past them, a sum's or a product's binary noise


def _csv_float(value: float) -> str:
    """A float of the CSV export: the shortest text that reads back as `value` to CSV_DIGITS significant
    digits (0.470938, not the 0.47093799999999997 a computed median is): every digit a double holds."""
    return repr(float(f"{value:.{CSV_DIGITS}g}"))


def export(df, fmt: str, metas: dict[str, dict[str, Any]] | None = None) -> str:
    """The tidy table as CSV (without raw samples) or JSON records (with them); or its ok cells as the
    PyTorch HUD's benchmark records or Bencher's metric format (results.interchange; metas: load_meta's,
    for the HUD's runners)."""
    if fmt == "csv":
        return df.drop(columns=list(LIST_COLUMNS), errors="ignore").to_csv(
            index=False, float_format=_csv_float
        )
    if fmt == "json":
        return df.to_json(orient="records", indent=1)
    if fmt == "hud":
        return interchange.hud(df, metas or {})
    if fmt == "bencher":
        return interchange.bencher(df)
    raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
