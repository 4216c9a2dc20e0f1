"""Synthetic run directories with known scaling laws and sample shifts, written through results.RunWriter.

For tests of the fits, pages and compare, and for trying a report without running a sweep.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

from attnbench.results.axes import CELL_AXES, cell_id
from attnbench.results.formulas import attention_flops, gbps, kv_bytes, summarize, tflops

GIB = 2**30
# The memory class a synthetic run records for each variant, as a real run records the registry's
# capabilities in meta.json; a variant not listed here has no recorded theory (like an unknown plug-in).
MEMORY_CLASS = {
    "naive": "quadratic",
    "stable_softmax": "quadratic",
    "sdpa_math": "quadratic",
    "chunked": "linear",
    "sdpa": "linear",
    "sdpa_flash": "linear",
    "sdpa_efficient": "linear",
}

# The `varlen` work a synthetic run records for the packed variants of the varlen panel's tests, as a real run
# records each variant's declared capability (results.formulas.executed_pairs).
VARLEN_WORK = {"sdpa_padded": "padded", "sdpa_masked": "masked", "sdpa_loop": "exact"}


def samples(median_ms: float, n: int = 30, spread: float = 0.02, seed: int = 0) -> list[float]:
    """n timing samples around median_ms with a relative spread (uniform ±spread, seeded)."""
    rng = random.Random(seed)
    return [median_ms * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def cell(
    variant: str,
    seq_len: int,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    batch: int = 1,
    heads: int = 8,
    d_k: int = 64,
    d_v: int | None = None,
    causal: bool = False,
    padding: float = 0.0,
    pass_: str = "fwd",
    status: str = "ok",
    time_ms: float | None = None,
    sample_ms: list[float] | None = None,
    peak_mem_bytes: int | None = None,
    message: str = "",
    kv_heads: int | None = None,
    seq_k: int | None = None,
    causal_align: str = "top-left",
    window: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """One results row. With time_ms (or sample_ms) and status ok it is a measured cell with its samples.
    The workload axes (kv_heads, seq_k, causal_align, window) enter its id, FLOPs and K/V bytes as a real
    row's do; at their defaults the row is what it always was."""
    d_v = d_k if d_v is None else d_v
    workload = {"kv_heads": kv_heads, "seq_k": seq_k, "causal_align": causal_align, "window": window}
    row: dict[str, Any] = {
        "variant": variant,
        "device": device,
        "dtype": dtype,
        "batch": batch,
        "heads": heads,
        "seq_len": seq_len,
        "d_k": d_k,
        "d_v": d_v,
        "causal": causal,
        "padding": padding,
        "pass": pass_,
        "status": status,
        "message": message,
    }
    row["cell_id"] = cell_id({**row, **workload})
    if time_ms is not None and sample_ms is None:
        sample_ms = samples(time_ms, seed=zlib.crc32(f"{variant}|{seq_len}".encode()))
    if sample_ms:
        stats = summarize(sample_ms)
        n_k = seq_len if seq_k is None else seq_k
        flops = attention_flops(batch, heads, seq_len, n_k, d_k, d_v, causal=causal, pass_=pass_,
                                causal_align=causal_align, window=window)  # fmt: skip
        row.update(
            samples_ms=list(sample_ms), **stats, flops=flops, tflops=tflops(flops, stats["time_ms_median"])
        )
    if kv_heads is not None or seq_k is not None or causal_align != "top-left" or window:
        n_k = seq_len if seq_k is None else seq_k
        kv = heads if kv_heads is None else kv_heads
        row.update(kv_heads=kv, seq_k=n_k, causal_align=causal_align, window=window)
        row["kv_bytes"] = kv_bytes(batch, kv, n_k, d_k, d_v, dtype)
        if "time_ms_median" in row:
            row["kv_gbps"] = gbps(row["kv_bytes"], row["time_ms_median"])
    if peak_mem_bytes is not None:
        row["peak_mem_bytes"] = int(peak_mem_bytes)
    row.update(extra)
    return row


def power_law_rows(
    laws: dict[str, tuple[float, float]],
    seq_lens: list[int],
    *,
    noise: float = 0.0,
    seed: int = 0,
    **axes: Any,
) -> list[dict[str, Any]]:
    """Rows whose median time ∝ N^time_exp and peak memory ∝ N^mem_exp, per variant, times a log-normal
    noise factor exp(noise · z) per cell."""
    import math

    rng = random.Random(seed)
    rows = []
    for variant, (t_exp, m_exp) in laws.items():
        for n in seq_lens:
            jitter_t, jitter_m = (math.exp(noise * rng.gauss(0, 1)) for _ in range(2))
            t = 1.0 * (n / 256) ** t_exp * jitter_t
            mem = 2**20 * (n / 256) ** m_exp * jitter_m
            rows.append(
                cell(
                    variant,
                    n,
                    time_ms=t,
                    sample_ms=samples(t, seed=rng.randrange(2**31)),
                    peak_mem_bytes=int(mem),
                    **axes,
                )
            )
    return rows


def rows_in_rounds(
    times: dict[str, float],
    seed: int,
    *,
    rounds: int = 3,
    swing: float = 0.04,
    speed: float = 1.0,
    seq: tuple[int, ...] = (256, 512, 1024, 2048),
) -> list[dict[str, Any]]:
    """Rows of a run in `rounds` rounds: variant -> its time at N = 256 (a slowdown folded in), times
    (N/256)²; the machine ran `speed` times slow through the whole run and each round by its own ±swing on
    top (a round's variants, visited seconds apart, share it), with ±1% of each visit's own; each visit's
    samples tight (±1%) around its median."""
    rng = random.Random(seed)
    rounds_at = {n: [speed * (1 + rng.uniform(-swing, swing)) for _ in range(rounds)] for n in seq}
    rows = []
    for variant, base in times.items():
        for n in seq:
            medians = [base * (n / 256) ** 2 * f * (1 + rng.uniform(-0.01, 0.01)) for f in rounds_at[n]]
            visits = [samples(m, n=4, spread=0.01, seed=seed + i) for i, m in enumerate(medians)]
            rows.append(
                cell(
                    variant,
                    n,
                    sample_ms=[s for v in visits for s in v],
                    visit_medians_ms=medians,
                    visit_samples=[len(v) for v in visits],
                )
            )
    return rows


def write_run(
    path: str | Path,
    rows: list[dict[str, Any]],
    *,
    run_id: str = "synthetic",
    memory_bytes: int = 16 * GIB,
    gpu: dict[str, Any] | None = None,
    peak_tflops: float = 1.0,
    copy_gbps: float = 10.0,
    numerics: dict[str, Any] | None = None,
    hostname: str = "synthetic-host",
    devices: list[dict[str, Any]] | None = None,
) -> Path:
    """A complete run directory (meta.json, rows.jsonl, optional numerics.json) written by RunWriter.

    `devices` (records from `device`) become meta.json's `devices` map, keyed by where_key, as a run
    measured on several devices writes it; put rows on them with `on`."""
    from attnbench.results import RunWriter
    from attnbench.results.formulas import where_key

    kinds = sorted({r["device"] for r in rows}) or ["cpu"]
    dtypes = sorted({r["dtype"] for r in rows}) or ["float32"]
    writer = RunWriter(path)
    writer.write_meta(
        {
            "run_id": run_id,
            "created": "2026-01-01T00:00:00+00:00",
            "sweep": {
                "variants": sorted({r["variant"] for r in rows}),
                "devices": kinds,
                "dtypes": dtypes,
                "seq_len": sorted({r["seq_len"] for r in rows}),
            },
            "variants": sorted({r["variant"] for r in rows}),
            "variant_capabilities": {
                v: {
                    **({"memory": MEMORY_CLASS[v]} if v in MEMORY_CLASS else {}),
                    **({"varlen": VARLEN_WORK[v]} if v in VARLEN_WORK else {}),
                    "source": "builtin",
                }
                for v in sorted({r["variant"] for r in rows})
                if v in MEMORY_CLASS or v in VARLEN_WORK
            },
            "fingerprint": {
                "hostname": hostname,
                "cpu_model": "Synthetic CPU",
                "physical_cores": 4,
                "memory_bytes": memory_bytes,
                "torch": "0.0",
                "cuda": None,
                "gpu": gpu,
            },
            "calibration": {
                d: {
                    "matmul_tflops": dict.fromkeys(dtypes, peak_tflops),
                    "copy_gbps": copy_gbps,
                    "matmul_n": 2048,
                }
                for d in kinds
            },
            **(
                {"devices": {where_key(d["host"], d["device"], d["gpu_uuid"]): d for d in devices}}
                if devices
                else {}
            ),
        }
    )
    for row in rows:
        writer.append({**row, "run_id": run_id})
    writer.close()
    if numerics is not None:
        writer.write_json("numerics.json", numerics)
    return Path(path)


def device(
    host: str,
    *,
    gpu_name: str | None = None,
    gpu_uuid: str | None = None,
    gpu_index: int | None = None,
    tflops: float = 1.0,
    dtypes: tuple[str, ...] = ("float32",),
    copy_gbps: float = 10.0,
) -> dict[str, Any]:
    """A meta.json `devices` record (ARCHITECTURE.md "Where a row was measured"): a GPU when gpu_uuid is
    given, else the host's CPU, calibrated at `tflops` for every dtype."""
    return {
        "host": host,
        "device": "cuda" if gpu_uuid else "cpu",
        "gpu_name": gpu_name,
        "gpu_uuid": gpu_uuid,
        "gpu_index": gpu_index,
        "calibration": {
            "matmul_tflops": dict.fromkeys(dtypes, tflops),
            "copy_gbps": copy_gbps,
            "matmul_n": 2048,
        },
    }


def on(record: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as measured on the device of `record`: its host and GPU columns (and device kind) set."""
    where = {k: record[k] for k in ("host", "gpu_name", "gpu_uuid", "gpu_index")}
    out = []
    for r in rows:
        r = {**r, **where, "device": record["device"]}
        r["cell_id"] = cell_id({a: v for a, v in r.items() if a in CELL_AXES})
        out.append(r)
    return out


def run_series(
    base: str | Path,
    out: str | Path,
    factors: list[float],
    *,
    noise: float = 0.01,
    seed: int = 0,
    edit: Any = None,
    only: Any = None,
) -> list[Path]:
    """len(factors) copies of the real run `base` as out/run-000, run-001, .., made a day apart, each with its
    own run_id, created time and git commit: run i's times (median, quartiles, samples; tflops follows) are
    the base's times factors[i], each cell's jittered by a seeded relative `noise` (gaussian, the same seed
    makes the same runs). `edit(i, meta)` may change run i's meta.json (a torch version, a calibration).
    `only` (variant names) scales those variants' cells by the factors and leaves the others' at 1."""
    import json
    from datetime import datetime, timedelta, timezone

    base, out = Path(base), Path(out)
    meta0 = json.loads((base / "meta.json").read_text())
    rows0 = [json.loads(line) for line in (base / "rows.jsonl").read_text().splitlines() if line.strip()]
    rng = random.Random(seed)
    start = datetime(2026, 10, 1, 3, 0, tzinfo=timezone.utc)
    paths = []
    for i, factor in enumerate(factors):
        when = start + timedelta(days=i)
        run_id = when.strftime("%Y%m%d-%H%M%S") + "-synth"
        meta = json.loads(json.dumps(meta0))
        meta.update(run_id=run_id, created=when.isoformat())
        meta["fingerprint"]["git_commit"] = f"{zlib.crc32(f'commit{i}'.encode()):08x}" * 5
        if edit is not None:
            edit(i, meta)
        rows = []
        for row in rows0:
            f = (factor if only is None or row["variant"] in only else 1.0) * (1 + rng.gauss(0, noise))
            row = {**row, "run_id": run_id}
            for col in ("time_ms_median", "time_ms_p25", "time_ms_p75"):
                if isinstance(row.get(col), (int, float)):
                    row[col] *= f
            if isinstance(row.get("samples_ms"), list):
                row["samples_ms"] = [s * f for s in row["samples_ms"]]
            if isinstance(row.get("tflops"), (int, float)):
                row["tflops"] /= f
            rows.append(row)
        path = out / f"run-{i:03d}"
        path.mkdir(parents=True)
        (path / "meta.json").write_text(json.dumps(meta))
        (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(path)
    return paths


def part_of(base: str | Path, out: str | Path, variants=("naive", "chunked"), causal: bool = False) -> Path:
    """A copy of the real run `base` (meta.json, numerics.json, ...) at `out` whose rows.jsonl keeps only the
    rows of `variants` with `causal`: one group of two variants, whose report costs less than half of what
    cpu-small's ten variants in two groups cost (for tests of where a report goes or how it is said)."""
    import json
    import shutil

    shutil.copytree(base, out)
    rows = [json.loads(line) for line in (Path(out) / "rows.jsonl").read_text().splitlines() if line.strip()]
    keep = [r for r in rows if r["variant"] in variants and bool(r["causal"]) == causal]
    assert keep, f"{base} has no rows of {variants} with causal={causal}"
    (Path(out) / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep))
    return Path(out)


def other_sweep(run: str | Path, out: str | Path, *, hours: int = 12, heads: int = 2, variants=None) -> Path:
    """A copy of the run `run` (meta.json and rows.jsonl) at `out` as a run of another sweep, made `hours`
    after it: its sweep and its rows at `heads` heads (each cell_id made again), only the rows of `variants`
    (all where None), its own run_id. Two sweeps kept in one history store, interleaved by time."""
    import json
    from datetime import datetime, timedelta

    run, out = Path(run), Path(out)
    meta = json.loads((run / "meta.json").read_text())
    when = datetime.fromisoformat(meta["created"]) + timedelta(hours=hours)
    run_id = when.strftime("%Y%m%d-%H%M%S") + "-other"
    meta.update(run_id=run_id, created=when.isoformat())
    meta["sweep"]["heads"] = [heads]
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    rows = [
        {**r, "heads": heads, "run_id": run_id} for r in rows if variants is None or r["variant"] in variants
    ]
    for r in rows:
        r["cell_id"] = cell_id({a: v for a, v in r.items() if a in CELL_AXES})
    out.mkdir(parents=True)
    (out / "meta.json").write_text(json.dumps(meta))
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def two_sweeps(root: Path, lost: int, base: str | Path) -> tuple[str, list[str]]:
    """A history store (root/h.sqlite) of two sweeps run nightly one after the other, as a team keeps its
    serving and training sweeps: 4 nights of `base` (run_series, in root/runs) and each night 12 hours later
    a run of another sweep (other_sweep: H=2, its naive and chunked cells, in root/other), that sweep's run
    last. The first sweep's latest run stopped short of its last `lost` rows (an unfinished nightly). The
    store's path, and the cells lost that were ok."""
    import json

    from attnbench.results import history

    root = Path(root)
    runs = run_series(base, root / "runs", [1.0] * 4)
    for i, run in enumerate(runs):
        other_sweep(run, root / "other" / f"run-{i:03d}", variants=("naive", "chunked"))
    rows = [json.loads(line) for line in (runs[-1] / "rows.jsonl").read_text().splitlines() if line.strip()]
    gone = [r["cell_id"] for r in rows[len(rows) - lost :] if r["status"] == "ok"]
    (runs[-1] / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[: len(rows) - lost]))
    store = root / "h.sqlite"
    history.add(store, [root / "runs", root / "other"])
    return str(store), gone


def stop_before_first_row(run: str | Path) -> str:
    """Make the run `run` (meta.json and rows.jsonl) one stopped before its first row, as a nightly in rounds
    stopped by Ctrl-C half-way is (a cell's row is written once all its visits are done): its meta.json plans
    its cells, its rows.jsonl is empty. Its rows' text, to write back as `attnbench run --resume` would."""
    import json

    run = Path(run)
    rows = (run / "rows.jsonl").read_text()
    meta = json.loads((run / "meta.json").read_text())
    meta["planned_cells"] = len({json.loads(line)["cell_id"] for line in rows.splitlines() if line.strip()})
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "rows.jsonl").write_text("")
    return rows
