"""Run a sweep: expand cells, send each to an isolated worker, append every row as soon as it exists.

Order of events: validate everything (sweep, variants, devices) -> create the run directory ->
fingerprint and calibrate (in a worker) -> meta.json -> for each cell: capability check, OOM /
timeout skip-ahead, memory guard, measure in the worker -> rows.jsonl. Ctrl-C stops between or
during cells with every finished row kept; --resume finishes the remaining cells.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnbench import variants
from attnbench.results import RunWriter, drift
from attnbench.results.store import read_meta

from . import guard, timing
from .isolation import Worker, WorkerDied, WorkerTimeout
from .progress import Progress
from .spec import CellSpec, SweepSpec, check_cpu_affinity

DEFAULT_RUNS_DIR = Path("runs")
NUMERICS_FILE = "numerics.json"
NUMERICS_EXTRA = (
    "unstable_softmax",
)  # left out of sweeps, kept in the probe to show why the max is subtracted


@dataclass
class RunSummary:
    path: Path
    counts: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    resumed: int = 0


def default_variants() -> list[str]:
    return [name for name, v in variants.all_variants().items() if v.cap.default]


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + socket.gethostname().split(".")[0]


def prepare(sweep: SweepSpec, variant_files: list[str]) -> list[str]:
    """Everything checked before any directory is created: variant files, names, devices and CPUs present."""
    check_cpu_affinity(sweep.settings.cpu_affinity)
    for path in variant_files:
        variants.load_variant_file(path)
    names = list(sweep.variants) or default_variants()
    variants.resolve(names)  # names every unknown variant at once
    if "cuda" in sweep.devices:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but torch sees no CUDA device on this machine")
    return names


class _SkipAhead:
    """Once a series (variant, all axes but the lengths seq_len and seq_k) OOMs or times out at some
    (N_q, N_k), every cell of that series at least as long in both is skipped: a scaling sweep grows both
    together, a decode sweep grows N_k at a fixed N_q, a prefill sweep N_q at a fixed N_k."""

    def __init__(self) -> None:
        self.limits: dict[tuple, list[tuple[int, int, str]]] = {}

    def note(self, spec: CellSpec, status: str) -> None:
        if status in ("oom", "timeout"):
            what = "ran out of memory" if status == "oom" else "timed out"
            self.limits.setdefault(spec.group_key, []).append((spec.seq_len, spec.seq_k, what))

    def reason(self, spec: CellSpec) -> str | None:
        for n_q, n_k, what in self.limits.get(spec.group_key, ()):
            if spec.seq_len >= n_q and spec.seq_k >= n_k and (spec.seq_len, spec.seq_k) != (n_q, n_k):
                at = f"seq_len {n_q}" if n_k == n_q else f"seq_len {n_q}, seq_k {n_k}"
                return f"skipped: {spec.variant} {what} at {at} with the same other axes"
        return None


def run(
    sweep: SweepSpec,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    variant_files: list[str] | None = None,
    progress: Progress | None = None,
    only: Sequence[CellSpec] | None = None,
    rerun_of: dict[str, Any] | None = None,
    redo_drift: bool = False,
) -> RunSummary:
    """Run (or resume) a sweep into a run directory; returns where it went and the status counts.

    `only` restricts the run to some of the sweep's cells (`attnbench run --rerun`); meta.json keeps their
    ids as `cells` (a resume runs those again) and `rerun_of`, the run they were chosen from.
    """
    variant_files = [str(Path(p).resolve()) for p in (variant_files or [])]
    chosen = None if only is None else [c.cell_id for c in only]
    if redo_drift and not resume:
        raise ValueError("--redo-drift measures a run's drifted cells again: it needs --resume --out DIR")
    if resume:
        if out is None:
            raise ValueError("--resume needs --out DIR naming the run to finish")
        meta = read_meta(out)
        sweep = SweepSpec.from_dict(meta["sweep"])
        variant_files = meta.get("variant_files", [])
        names = prepare(sweep, variant_files)
        names = meta.get("variants", names)
        chosen = meta.get("cells")
    else:
        names = prepare(sweep, variant_files)
        if only is not None:  # the chosen cells' variants, whether or not they are default ones now
            names = list(dict.fromkeys(c.variant for c in only))
            variants.resolve(names)
    path = Path(out) if out is not None else DEFAULT_RUNS_DIR / new_run_id()
    writer = RunWriter(path, resume=resume)
    path.mkdir(parents=True, exist_ok=True)
    cells = sweep.cells(names)
    if chosen is not None:
        keep = set(chosen)
        cells = [c for c in cells if c.cell_id in keep]
    # --redo-drift: cells whose row was measured while the machine drifted (results.drift) run again; the
    # new row is appended and replaces the old one when the run is loaded
    redo = drift.drifted_cells(list(writer.done.values())) if redo_drift else set()
    todo = [c for c in cells if c.cell_id not in writer.done or c.cell_id in redo]
    progress = progress or Progress(enabled=False)
    summary = RunSummary(path=path, resumed=len(cells) - len(todo))
    settings = sweep.settings
    config = {
        "threads": settings.threads,
        "env": dict(settings.env),
        "variant_files": variant_files,
        "cpu_affinity": list(settings.cpu_affinity),
        "log_path": str(path / "worker.log"),
    }
    skip = _SkipAhead()
    for row in writer.done.values():
        skip.note(CellSpec.from_dict(row), row.get("status", ""))

    worker: Worker | None = None
    try:
        progress.message(f"starting a worker process (log: {path / 'worker.log'})")
        worker = Worker(config)
        if not resume:
            meta = _meta(sweep, names, variant_files, worker, progress)
            if chosen is not None:
                meta["cells"] = chosen
            if rerun_of is not None:
                meta["rerun_of"] = rerun_of
            writer.write_meta(meta)
            progress.message("numerics probe: every variant against float64 with q scaled by 1, 10, 100")
            numerics, worker = _numerics(sweep, names, worker, config)
            writer.write_json(NUMERICS_FILE, numerics)
        run_id = read_meta(path)["run_id"]
        progress.start(total=len(todo), done_before=summary.resumed, run_dir=path)
        for spec in todo:
            row, worker = _one_cell(spec, sweep, worker, config, skip)
            row["run_id"] = run_id
            writer.append(row)
            skip.note(spec, row["status"])
            summary.counts[row["status"]] = summary.counts.get(row["status"], 0) + 1
            progress.cell_done(row)
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        progress.stop()
        writer.close()
        if worker is not None:
            worker.kill() if summary.interrupted else worker.stop()
    return summary


def _meta(
    sweep: SweepSpec, names: list[str], variant_files: list[str], worker: Worker, progress
) -> dict[str, Any]:
    fingerprint = worker.request({"op": "fingerprint"}, timeout=120)["value"]
    fingerprint["sweep_env"] = " ".join(f"{k}={v}" for k, v in sweep.settings.env) or "none"
    calibration = {}
    for device in sweep.devices:
        progress.message(
            f"calibrating {device}: matmul throughput ({', '.join(sweep.dtypes)}) and copy bandwidth"
        )
        calibration[device] = worker.request(
            {"op": "calibrate", "device": device, "dtypes": list(sweep.dtypes)}, timeout=600
        )["value"]
    return {
        "run_id": new_run_id(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sweep": sweep.to_dict(),
        "variants": names,
        # what reports know of each variant (memory class, description, source) without loading it again
        "variant_capabilities": {name: variants.get(name).record() for name in names},
        "variant_files": variant_files,
        "fingerprint": fingerprint,
        "calibration": calibration,
        "worker_threads": worker.threads,
        # timing hygiene: the collector is off while samples are taken; the CPUs asked for and those the
        # worker reported after pinning itself (null asked: the OS's choice, all of them)
        "gc_disabled": timing.GC_DISABLED,
        "cpu_affinity": {
            "requested": list(sweep.settings.cpu_affinity) or None,
            "worker": worker.cpu_affinity,
        },
        "cwd": os.getcwd(),
    }


def _numerics(sweep: SweepSpec, names: list[str], worker: Worker, config: dict):
    """The probe, one variant per request so that a crashing or hanging variant costs only its own records."""
    records = []
    for name in names + [n for n in NUMERICS_EXTRA if n not in names]:
        msg = {
            "op": "numerics",
            "variants": [name],
            "devices": list(sweep.devices),
            "dtypes": list(sweep.dtypes),
        }
        try:
            records += worker.request(msg, timeout=min(sweep.settings.cell_timeout, 300))["value"]
        except (WorkerTimeout, WorkerDied) as exc:
            status = "timeout" if isinstance(exc, WorkerTimeout) else "crashed"
            records.append({"variant": name, "status": status, "message": str(exc)})
            worker.kill()
            worker = Worker(config)
    value = {"probe": records}
    try:
        value["example_weights"] = worker.request({"op": "example_weights"}, timeout=120)["value"]
    except (WorkerTimeout, WorkerDied):
        worker.kill()
        worker = Worker(config)
    return value, worker


def _one_cell(spec: CellSpec, sweep: SweepSpec, worker: Worker, config: dict, skip: _SkipAhead):
    """(row, worker): the worker is replaced when this cell killed it."""
    from .cell import base_row, finish

    settings = sweep.settings
    row = base_row(spec)
    variant = variants.get(spec.variant)
    reason = variant.check(spec.problem())
    if reason:
        return finish(row, "unsupported", reason), worker
    reason = skip.reason(spec)
    if reason:
        return finish(row, "skipped", reason), worker
    try:
        available = worker.request({"op": "free_memory", "device": spec.device}, timeout=60)["value"]
        predicted = guard.predict_peak_bytes(spec, variant.cap.memory, settings)
        reason = guard.fits(predicted, available, settings.memory_guard)
        if reason:
            return finish(row, "skipped", reason, predicted_peak_bytes=predicted), worker
        t0 = time.perf_counter()
        reply = worker.request(
            {"op": "cell", "cell": spec.to_dict(), "settings": settings.__dict__},
            timeout=settings.cell_timeout,
        )
        row = reply["row"]
        row.setdefault("elapsed_s", round(time.perf_counter() - t0, 3))
        return row, worker
    except WorkerTimeout as exc:
        return finish(
            row, "timeout", f"cell exceeded --cell-timeout {settings.cell_timeout:g} s: {exc}"
        ), Worker(config)
    except WorkerDied as exc:
        worker.kill()
        return finish(row, "crashed", str(exc)), Worker(config)
