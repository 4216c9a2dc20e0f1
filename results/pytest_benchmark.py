"""A pytest-benchmark JSON file (written by benchmarks/test_attention.py) as an attnbench run directory.

What the file holds, and where it goes:
- each benchmark's `extra_info`, written by harness/tools/pytest_plugin.py: the cell spec (every axis and
  cell_id), status, message, flops, peak_mem_bytes, max_abs_err / rel_err / grad_rel_err, ... -> the
  row's columns of the same names;
- each benchmark's `stats`, in seconds per call: the raw `data` list when present (always with
  --benchmark-json; in files saved to pytest-benchmark's storage only with --benchmark-save-data)
  -> samples_ms, and median / p25 / p75 computed from it by results.formulas, as for every run (linear
  interpolation); without `data`, pytest-benchmark's own median / q1 / q3 (q1 and q3 by its
  quartile method, which may differ slightly). The rates (tflops, executed_tflops, tokens_per_s, kv_gbps,
  io_gbps) are recomputed from the stored median, as a run's row has them (results.formulas.median_rates);
- the top-level "attnbench" block: this machine's fingerprint and the cells the plugin did not time
  (unsupported here, memory guard, OOM, error) -> meta.json's fingerprint, and rows of their status;
- the block's variant_capabilities and calibration (files from attnbench 0.2.1 on) -> meta.json's, so
  that the report knows each variant's memory class (its theory) and this machine's ceilings (% of peak);
  for an older file the caller may hand the capabilities of the variants it knows (the CLI: the registry's);
- machine_info, commit_info, the pytest-benchmark version and its timing options -> meta.json.
Benchmarks of other tests in the same file (an ordinary `benchmark(fn)`: no attnbench extra_info) are not
cells: each is skipped, named to `on_skip`; a file with no cell at all is refused. A cell an older plugin
saved after a Ctrl-C cut its timing is left out (cut_short), and timed cells without raw timings are said
(without_raw_timings), each in one line to `on_warning`. meta.json's imported_from keeps the session's digest
(session_sha256: its JSON file and its saved file are one session to compare) and whether the raw timings
came (raw_timings); an imported run is never resumed (not_resumable).
Everything is read and checked before anything is written; results never imports harness.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .axes import IDENTITY, SWEEP_AXES
from .formulas import median_rates, quartiles, rel_iqr
from .schema import AXIS_DEFAULTS, COLUMNS, NOISY_REL_IQR, STATUSES
from .store import RunDirError, RunWriter, is_run_dir

FORMAT = "pytest-benchmark"  # meta.json's imported_from.format
READABLE_FORMATS = (1,)  # harness.tools.pytest_plugin.EXTRA_INFO_FORMAT values this code reads
# the columns of the timing, computed here from the stats (the rates as a run's: median_rates)
TIMING_COLUMNS = (
    "time_ms_median", "time_ms_p25", "time_ms_p75", "rel_iqr", "noisy", "n_samples", *median_rates({}, 1.0),
)  # fmt: skip
_PY_TYPES = {"string": str, "Int64": int, "Float64": (int, float), "boolean": bool}
# what a value of each type is, in a message: 'is not an integer'
_KINDS = {str: "a string", int: "an integer", bool: "true or false"}
# how a user writes a file this reads: a test of their own that uses the plugin's fixture (docs/cli.md,
# "In your own project"); attnbench's own benchmarks/ folder is not theirs
WRITE_IT = (
    "a test that uses attnbench's `attn_cell` fixture, run with `pytest --benchmark-only --benchmark-json "
    "FILE` (docs/cli.md#in-your-own-project)"
)
# the axes of the first calling convention (results.axes), which every cell's extra_info holds
AXIS_TYPES: dict[str, type | tuple[type, ...]] = {
    **{a.name: _PY_TYPES[a.dtype] for a in IDENTITY if a.core},
    "cell_id": str,
    "status": str,
}
# Axes added later: a file written before them lacks them (its cells are at their defaults)
LATER_AXIS_TYPES: dict[str, type | tuple[type, ...]] = {
    a.name: _PY_TYPES[a.dtype] for a in IDENTITY if not a.core
}

AMOUNTS = ("flops", "executed_flops", "kv_bytes", "io_bytes")  # what the rates divide by the median


class BenchmarkFileError(ValueError):
    """The file is missing, not JSON, not from pytest-benchmark, or lacks what the attnbench plugin adds."""


def read_file(path: str | Path) -> dict[str, Any]:
    """The parsed pytest-benchmark JSON file; BenchmarkFileError naming what is wrong."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not" if p.is_dir() else "does not exist; expected"
        raise BenchmarkFileError(f"{str(path)!r} {what} a pytest-benchmark JSON file")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BenchmarkFileError(f"{str(path)!r} is not valid JSON: {exc}") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("benchmarks"), list)
        or not isinstance(data.get("machine_info"), dict)
    ):
        raise BenchmarkFileError(
            f"{str(path)!r} is not a pytest-benchmark JSON file (no 'benchmarks' list and 'machine_info')"
        )
    return data


def _check_cell(info: Any, where: str) -> None:
    if not isinstance(info, dict):
        raise BenchmarkFileError(f"{where}: expected an object, got {type(info).__name__}")
    missing = [k for k in AXIS_TYPES if k not in info]
    if missing:
        raise BenchmarkFileError(
            f"{where} has no attnbench extra_info (missing {', '.join(missing)}); write the file with "
            + WRITE_IT
        )
    for key, typ in {**AXIS_TYPES, **LATER_AXIS_TYPES}.items():
        if key not in info:
            continue  # a later axis (AXIS_TYPES are all present: checked above)
        val = info[key]
        if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
            raise BenchmarkFileError(
                f"{where}: extra_info {key} = {val!r} is not {_KINDS.get(typ, 'a number')}"
            )
    for key in AMOUNTS:
        val = info.get(key)
        if val is not None and (not isinstance(val, (int, float)) or isinstance(val, bool)):
            raise BenchmarkFileError(f"{where}: extra_info {key} = {val!r} is not a number")
    if info["status"] not in STATUSES:
        raise BenchmarkFileError(f"{where}: unknown status {info['status']!r}; known: {', '.join(STATUSES)}")


def _timed_row(bench: dict[str, Any], where: str) -> dict[str, Any]:
    """One row from one benchmark: its extra_info's columns plus the timing columns from its stats."""
    info = bench.get("extra_info")
    _check_cell(info, where)
    fmt = info.get("attnbench_format")
    if fmt not in READABLE_FORMATS:
        raise BenchmarkFileError(
            f"{where}: attnbench extra_info format {fmt!r}; this code reads {list(READABLE_FORMATS)}"
        )
    stats = bench.get("stats")
    if not isinstance(stats, dict) or not all(
        isinstance(stats.get(k), (int, float)) for k in ("median", "q1", "q3")
    ):
        raise BenchmarkFileError(f"{where}: no pytest-benchmark stats (median, q1, q3)")
    row = {k: v for k, v in info.items() if (k in COLUMNS and k not in TIMING_COLUMNS) or k == "cell_id"}
    data = stats.get("data")
    if isinstance(data, list) and data and all(isinstance(s, (int, float)) for s in data):
        samples = [s * 1e3 for s in data]  # seconds per call -> ms
        p25, med, p75 = quartiles(samples)
        row["samples_ms"] = [round(s, 6) for s in samples]
    else:  # a saved file without --benchmark-save-data: only pytest-benchmark's statistics
        p25, med, p75 = (float(stats[k]) * 1e3 for k in ("q1", "median", "q3"))
        row["samples_ms"] = []
    spread = rel_iqr(p25, med, p75)
    rates = median_rates(row, med)  # useful and executed TFLOP/s, tokens/s, K/V and decode GB/s, as a run's
    row.update(
        time_ms_median=med,
        time_ms_p25=p25,
        time_ms_p75=p75,
        rel_iqr=spread,
        noisy=spread > NOISY_REL_IQR,
        n_samples=int(stats.get("rounds") or len(row["samples_ms"])),
        **{k: None if math.isnan(v) else v for k, v in rates.items()},
        stop_reason="pytest-benchmark",
    )
    return row


def cut_short(bench: Any) -> bool:
    """Whether a cell's timing was cut short (a Ctrl-C in a session written by a plugin before it kept such a
    cell out of the file): its extra_info has `elapsed_s`, which the plugin fills last, still None. Its
    partial rounds are no measurement; as a run's interrupted cell, it has no row."""
    info = bench.get("extra_info") if isinstance(bench, dict) else None
    return isinstance(info, dict) and "elapsed_s" in info and info["elapsed_s"] is None


def is_cell(bench: Any) -> bool:
    """Whether a benchmark is an attnbench grid cell (the plugin's extra_info carries its format), not an
    ordinary pytest-benchmark test of the same session."""
    info = bench.get("extra_info") if isinstance(bench, dict) else None
    return isinstance(info, dict) and "attnbench_format" in info


def ordinary(data: dict[str, Any]) -> list[str]:
    """The names of the file's benchmarks that are not grid cells (skipped by the import)."""
    return [
        str(b.get("fullname") or b.get("name"))
        for b in data["benchmarks"]
        if isinstance(b, dict) and not is_cell(b)
    ]


def rows_from(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Result rows (timed cells first, then the cells the plugin did not time), every one checked; ordinary
    benchmarks are left out (`ordinary`)."""
    rows = []
    for i, bench in enumerate(data["benchmarks"]):
        name = bench.get("name", f"#{i}") if isinstance(bench, dict) else f"#{i}"
        if not isinstance(bench, dict):
            raise BenchmarkFileError(f"benchmark {name}: expected an object")
        if is_cell(bench) and not cut_short(bench):
            rows.append(_timed_row(bench, f"benchmark {name!r}"))
    block = data.get("attnbench")
    untimed = block.get("untimed") if isinstance(block, dict) else None
    if block is not None and (not isinstance(untimed, list) or block.get("format") not in READABLE_FORMATS):
        raise BenchmarkFileError(
            f"its 'attnbench' block is not one this code reads (format {list(READABLE_FORMATS)} with an "
            "'untimed' list)"
        )
    for i, info in enumerate(untimed or []):
        _check_cell(info, f"untimed cell #{i}")
        rows.append({k: v for k, v in info.items() if k in COLUMNS or k == "cell_id"})
    if not rows:
        others = len(data["benchmarks"])
        if others:
            raise BenchmarkFileError(
                f"the file holds no attnbench cells, only {others} other benchmark{'s' * (others > 1)} (no "
                f"attnbench extra_info); write the grid with {WRITE_IT}"
            )
        raise BenchmarkFileError("the file holds no benchmarks (did every test fail or get skipped?)")
    seen: set[str] = set()
    for row in rows:
        if row["cell_id"] in seen:
            raise BenchmarkFileError(f"cell {row['cell_id']!r} appears twice in the file")
        seen.add(row["cell_id"])
    return rows


def without_raw_timings(data: dict[str, Any]) -> int:
    """How many of the file's timed cells have no raw timings (`stats.data`): pytest-benchmark writes them to
    --benchmark-json always, to its storage (--benchmark-autosave, --benchmark-save) only with
    --benchmark-save-data. compare judges a cell by its timings, so it can judge none of such a cell."""
    return sum(
        1
        for b in data["benchmarks"]
        if is_cell(b)
        and not cut_short(b)
        and not (isinstance(b.get("stats"), dict) and b["stats"].get("data"))
    )


def session_digest(data: dict[str, Any]) -> str:
    """The sha256 of what a session measured: each benchmark's name, extra_info and statistics (its raw
    timings left out), the machine and the cells not timed. The --benchmark-json file and the saved file of
    one session share it, though each has its own `datetime` and only one may have the raw timings: compare
    refuses two imports of one session as it refuses a run with its copy."""
    benches = [
        {
            "name": b.get("fullname") or b.get("name"),
            "extra_info": b.get("extra_info"),
            "stats": {k: v for k, v in (b.get("stats") or {}).items() if k != "data"},
        }
        for b in data["benchmarks"]
        if isinstance(b, dict)
    ]
    block = data.get("attnbench") if isinstance(data.get("attnbench"), dict) else {}
    what = {"benchmarks": benches, "machine_info": data["machine_info"], "untimed": block.get("untimed")}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _run_id(data: dict[str, Any]) -> str:
    """'<UTC time of the pytest-benchmark run>-<host>-pytest', like the harness's run ids."""
    try:
        when = datetime.fromisoformat(str(data.get("datetime")))
    except ValueError:
        when = datetime.now(timezone.utc)
    node = str(data["machine_info"].get("node") or "host").split(".")[0]
    return f"{when:%Y%m%d-%H%M%S}-{node}-pytest"


def _fingerprint(machine_info: dict[str, Any]) -> dict[str, Any]:
    """What a fingerprint can be rebuilt from pytest-benchmark's machine_info (files without the block)."""
    cpu = machine_info.get("cpu") or {}
    return {
        "hostname": machine_info.get("node"),
        "os": f"{machine_info.get('system', '')} {machine_info.get('release', '')}".strip(),
        "python": machine_info.get("python_version"),
        "cpu_model": cpu.get("brand_raw") or machine_info.get("processor") or machine_info.get("machine"),
        "logical_cpus": cpu.get("count"),
        "gpu": None,
    }


def meta_from(
    data: dict[str, Any],
    rows: list[dict[str, Any]],
    source: str | Path,
    capabilities: Callable[[str], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """meta.json for the imported run: provenance, the grid's axes, fingerprint, each variant's capability
    record (the file's, else `capabilities(name)`'s where it knows the name), calibration, machine and
    commit info."""
    block = data.get("attnbench") if isinstance(data.get("attnbench"), dict) else {}
    recorded = (
        block.get("variant_capabilities") if isinstance(block.get("variant_capabilities"), dict) else {}
    )
    calibration = block.get("calibration") if isinstance(block.get("calibration"), dict) else {}
    sweep: dict[str, list] = {}
    for a in SWEEP_AXES:  # each axis as a SweepSpec holds it, so that meta["sweep"] reads like a run's
        if not a.identity:
            continue
        values = [r.get(a.name, r.get(a.follows) if a.follows else AXIS_DEFAULTS.get(a.name)) for r in rows]
        if a.name == "causal":  # lower-right is a causal value of a sweep
            values = ["lower-right" if r["causal"] and r.get("causal_align") == "lower-right" else r["causal"]
                      for r in rows]  # fmt: skip
        if a.follows and not a.core and values == [r[a.follows] for r in rows]:
            values = []  # empty: it follows its axis (kv_heads = heads, seq_k = seq_len)
        unique = list(dict.fromkeys(values))
        sweep[a.sweep_field] = sorted(unique) if a.role == "length" else unique
    options = next((b.get("options") for b in data["benchmarks"] if isinstance(b, dict)), None)
    return {
        "run_id": _run_id(data),
        "created": data.get("datetime") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "imported_from": {
            "format": FORMAT,
            "file": str(Path(source).resolve()),
            "pytest_benchmark_version": data.get("version"),
            "timing_options": options or {},
            "session_sha256": session_digest(data),
            "raw_timings": without_raw_timings(data) == 0,
            "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
        "sweep": sweep,
        "variants": sweep["variants"],
        "variant_capabilities": {
            name: record
            for name in sweep["variants"]
            if isinstance(record := recorded.get(name) or (capabilities and capabilities(name)), dict)
        },
        "fingerprint": block.get("fingerprint") or _fingerprint(data["machine_info"]),
        "calibration": calibration,
        "machine_info": data["machine_info"],
        "commit_info": data.get("commit_info") or {},
    }


def not_resumable(meta: dict[str, Any], out: str | Path) -> str | None:
    """The one line that refuses `run --resume` and `collect` of an imported run, else None: pytest timed its
    cells in its own process, without a run's workers and their allocator and huge-page settings, so rows a
    run added would not be comparable with them, and its variants may be known only to the test files."""
    source = meta.get("imported_from") if isinstance(meta.get("imported_from"), dict) else None
    if source is None or source.get("format") != FORMAT:
        return None
    return (
        f"{str(out)!r} was imported from a pytest-benchmark file ({source.get('file')}): an imported run "
        "cannot be resumed or collected (pytest timed its cells, without attnbench run's workers and their "
        "allocator and huge-page settings); run the pytest session again and import its file into a new "
        "directory"
    )


def imported_runs(metas: dict[str, dict[str, Any]]) -> set[str]:
    """The ids of the runs among `metas` (run id -> meta.json) imported from a pytest-benchmark file."""
    return {rid for rid, meta in metas.items() if (meta.get("imported_from") or {}).get("format") == FORMAT}


def import_file(
    path: str | Path,
    out: str | Path,
    *,
    capabilities: Callable[[str], dict[str, Any] | None] | None = None,
    on_skip: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> tuple[Path, dict[str, int]]:
    """Write the run directory `out` from a pytest-benchmark JSON file; (out, status counts). Each ordinary
    benchmark is left out and named to `on_skip`; `capabilities(name)` gives the capability record of a
    variant the file has none for (meta_from). `on_warning` is told, in one line each, of a cell cut short
    while timed (left out: cut_short) and of timed cells without raw timings (without_raw_timings).

    Refuses (BenchmarkFileError or RunDirError, nothing written) a bad file or an `out` that is a file,
    a run or a non-empty directory.
    """
    data = read_file(path)
    rows = rows_from(data)
    meta = meta_from(data, rows, path, capabilities)
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise RunDirError(f"{str(out)!r} exists and is not a directory")
    if is_run_dir(target):
        raise RunDirError(f"{str(out)!r} already holds an attnbench run; choose another --out")
    if target.exists() and any(target.iterdir()):
        raise RunDirError(f"{str(out)!r} already exists and is not empty; choose another --out")
    for name in ordinary(data):
        if on_skip is not None:
            on_skip(name)
    for line in _warnings(path, data):
        if on_warning is not None:
            on_warning(line)
    writer = RunWriter(target)
    try:
        writer.write_meta(meta)
        for row in rows:
            writer.append({**row, "run_id": meta["run_id"]})
    finally:
        writer.close()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return target, counts


def _warnings(path: str | Path, data: dict[str, Any]) -> list[str]:
    """import_file's lines for on_warning: each cell cut short, and the timed cells without raw timings."""
    out = [
        f"left out {b['extra_info'].get('cell_id')}: its timing was cut short (the session was interrupted); "
        "as a run's interrupted cell, it has no row"
        for b in data["benchmarks"]
        if cut_short(b)
    ]
    n = without_raw_timings(data)
    if n:
        out.append(
            f"{path} has no raw timings for {n} of its timed cells, so compare can judge none of them: "
            "pytest-benchmark saves them to its storage only with --benchmark-save-data (--benchmark-json "
            "writes them always); save the session with --benchmark-save-data"
        )
    return out
