"""The unit of execution every executor uses: one worker process, a deadline per cell, a row per cell.

A CellRunner owns a `harness.workers.isolation.Worker`; `run(spec)` turns one cell into one row whatever
happens (unsupported, skipped by the memory guard, measured, timed out, crashed), and replaces the worker when
a cell killed it. The local executor holds one, the device pool one per GPU, a Ray actor one, a Slurm array
task one: the same code decides every cell's fate everywhere.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from attnbench import variants
from attnbench.harness.measure import guard
from attnbench.harness.measure.gate_rows import TILE_N
from attnbench.harness.measure.outcomes import (
    clock_fields,
    clock_mismatch,
    clock_readings,
    events_mismatch,
    names_a_change,
    threads_mismatch,
)
from attnbench.harness.measure.rows import base_row, blame, counted_work, finish, noted
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers.isolation import Worker, WorkerDied, WorkerTimeout
from attnbench.results.drift import drifted, is_busy, speed_factors
from attnbench.results.visits import fastest_ms


class SkipAhead:
    """Once a series (variant, all axes but the lengths seq_len and seq_k) OOMs or times out at some
    (N_q, N_k), every cell of that series at least as long in both is skipped: a scaling sweep grows both
    together, a decode sweep grows N_k at a fixed N_q, a prefill sweep N_q at a fixed N_k.

    With max_call_ms (settings.max_call_ms > 0), a cell is skipped too when its call would surely take
    longer: the series' ok cell so far with the most work that it is at least as long as, the least its
    call can be taken to cost (results.visits.fastest_ms: its fastest sample, over every row of it noted: a
    cell visited in rounds is noted once a visit) scaled by the work each call does, as the row's `flops`
    counts it (harness.measure.rows.counted_work: causal, window, padded keys, a pack's sequences; the pass
    is the series'). Not the score count N_q x N_k: a window's work grows with N, not N^2 (trial T: N 128 to
    256 under window 64 is x2.33, not x4). A call whose time grows slower than its work (launch-bound) is
    predicted long, so the guard errs towards skipping only where the series is already slow; one that
    computes more than is counted (a dense kernel that masks a window after computing every score) is
    predicted short, so the guard then measures a cell it might have skipped, never skips one it should
    run. One slow moment of a busy machine must not cost a sweep its largest N (a 225 ms median of two
    calls, one of them 2.6 ms, would have skipped the next N); the line says where the time it scaled was
    read off a drifted or noisy cell, or a busy machine (results.drift, over the ok rows noted so far).

    It keeps the series' measured peaks too (`peaks`, harness.measure.guard.MeasuredPeaks), which the memory
    guard grows to a longer cell's prediction: every executor hands `peaks.of(spec)` to CellRunner.run."""

    def __init__(self, rows: list[dict[str, Any]] = (), max_call_ms: int = 0) -> None:
        self.max_call_ms = max_call_ms
        self.limits: dict[tuple, list[tuple[int, int, str]]] = {}
        self.timed: dict[tuple, dict[tuple[int, int], list[dict[str, Any]]]] = {}  # series -> ok rows by N
        self.ok: list[dict[str, Any]] = []  # every ok row noted: the machine's usual speed, and how busy
        self.peaks = guard.MeasuredPeaks()
        for row in rows:
            self.note(CellSpec.from_dict(row), row)

    def note(self, spec: CellSpec, row: dict[str, Any]) -> None:
        status = row.get("status", "")
        self.peaks.note(spec, row)
        if status in ("oom", "timeout"):
            what = "ran out of memory" if status == "oom" else "timed out"
            self.limits.setdefault(spec.group_key, []).append((spec.seq_len, spec.seq_k, what))
        if status == "ok":
            self.ok.append(row)
        if status == "ok" and fastest_ms(row) is not None:
            self.timed.setdefault(spec.group_key, {}).setdefault((spec.seq_len, spec.seq_k), []).append(row)

    def reason(self, spec: CellSpec) -> str | None:
        for n_q, n_k, what in self.limits.get(spec.group_key, ()):
            if spec.seq_len >= n_q and spec.seq_k >= n_k and (spec.seq_len, spec.seq_k) != (n_q, n_k):
                at = f"seq_len {n_q}" if n_k == n_q else f"seq_len {n_q}, seq_k {n_k}"
                return f"skipped: {spec.variant} {what} at {at} with the same other axes"
        return self._too_slow(spec) if self.max_call_ms > 0 else None

    def _too_slow(self, spec: CellSpec) -> str | None:
        here = (spec.seq_len, spec.seq_k)
        series = self.timed.get(spec.group_key, {})
        shorter = [n for n in series if here[0] >= n[0] and here[1] >= n[1] and here != n]
        if not shorter:
            return None
        work = counted_work(spec)
        done = {n: _flops(spec, *n) for n in shorter}
        (n_q, n_k), flops = max(done.items(), key=lambda item: (item[1], item[0]))
        if flops <= 0:  # nothing counted to scale by (no key visible at all)
            return None
        # every row of it noted has a median (note); the row whose fastest call is the least
        (ms, how), row = min(((e, r) for r in series[(n_q, n_k)] if (e := fastest_ms(r))), key=lambda p: p[0])
        predicted = ms * work["flops"] / flops
        if predicted <= self.max_call_ms:
            return None
        at = f"seq_len {n_q}" if n_k == n_q else f"seq_len {n_q}, seq_k {n_k}"
        return (
            f"skipped: {spec.variant} would take about {predicted:,.0f} ms a call here ({ms:,.1f} ms at "
            f"{at}: {how}, scaled x{work['flops'] / flops:.2f} by the FLOPs counted), over --max-call-ms "
            f"{self.max_call_ms:g}{self._read_off(row)}"
        )

    def _read_off(self, row: dict[str, Any]) -> str:
        """'; read off a drifted and noisy cell, on a busy machine': what the time scaled was read off, by
        the rules a run's end and its report say a cell and a machine by (results.drift); '' for a quiet
        cell of a quiet machine. Last, so that an answer that shortens the line keeps the prediction."""
        factors = speed_factors(self.ok)
        flags = [drifted(f) or r.get("noisy") is True for r, f in zip(self.ok, factors, strict=True)]
        mine = next((f for r, f in zip(self.ok, factors, strict=True) if r is row), math.nan)
        said = [w for w, on in (("drifted", drifted(mine)), ("noisy", row.get("noisy") is True)) if on]
        busy = is_busy(sum(flags), len(self.ok))
        if not said:
            return "; read off a cell of a busy machine" if busy else ""
        return f"; read off a {' and '.join(said)} cell" + (", on a busy machine" if busy else "")


def _flops(spec: CellSpec, n_q: int, n_k: int) -> int:
    """The FLOPs one call of `spec`'s series counts at (N_q, N_k)."""
    return counted_work(dataclasses.replace(spec, seq_len=n_q, seq_k=n_k))["flops"]


def precheck(spec: CellSpec, skip: SkipAhead) -> dict[str, Any] | None:
    """The row of a cell that needs no worker (unsupported here, or skipped after a smaller N failed);
    None when the cell is to be measured. Cheap: the dispatcher calls it before handing a cell out. A
    plug-in's capability check that raises makes its cell an error row (the run goes on)."""
    try:
        reason = variants.get(spec.variant).check(spec.problem())
    except Exception as exc:  # the plug-in's own code, run in the parent: its fault is its cell's row
        return finish(base_row(spec), "error", f"its capability check raised {type(exc).__name__}: {exc}")
    if reason:
        return finish(base_row(spec), "unsupported", reason)
    reason = skip.reason(spec)
    if reason:
        return finish(base_row(spec), "skipped", reason)
    return None


class CellRunner:
    """One worker process and the cells it measures, one at a time; see the module docstring."""

    def __init__(self, config: dict[str, Any], settings: Settings) -> None:
        # the settings travel to the worker once, in its config; each cell's request carries the cell
        self.config = {**config, "settings": dict(settings.__dict__)}
        self.settings = settings
        self.worker: Worker | None = Worker(self.config)

    # ---- requests that are not cells ---------------------------------------------------------------

    def request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """A plain request to the worker (fingerprint, calibrate, ...); replaces a dead or hung worker
        before raising, so the next cell still has one."""
        try:
            reply = self._worker().request(msg, timeout=timeout)
        except (WorkerTimeout, WorkerDied):
            self.replace()
            raise
        if reply.get("exiting"):  # a variant probed there changed torch's global state: a fresh worker
            self.replace()
        return reply

    def numerics(
        self,
        names: Sequence[str],
        devices: Sequence[str],
        dtypes: Sequence[str],
        timeout: float,
        tiles: Mapping[str, Sequence[bool]] | None = None,
    ) -> list[dict[str, Any]]:
        """The numerics probe's records, one variant per request so that a variant that crashes or hangs
        its worker costs only its own records: one record then, {variant, status crashed or timeout,
        message}, with no device, dtype or scale (the worker is replaced for the next). tiles: variant ->
        the causal values it is gated under at N = TILE_N too, a request of its own (numerics.tiles: records
        with a seq_len, a crash's or a hang's too)."""
        records = []
        for name in names:
            msg = {"op": "numerics", "variants": [name], "devices": list(devices), "dtypes": list(dtypes)}
            parts = [({}, {})]  # (what the request adds, what a crash's or a hang's record says)
            if tiles and tiles.get(name):
                parts.append(({"part": "tiles", "causal": list(tiles[name])}, {"seq_len": TILE_N}))
            for part, said in parts:
                try:
                    records += self.request({**msg, **part}, timeout=timeout)["value"]
                except (WorkerTimeout, WorkerDied) as exc:
                    status = "timeout" if isinstance(exc, WorkerTimeout) else "crashed"
                    records.append({"variant": name, **said, "status": status, "message": str(exc)})
        return records

    def describe(self, device: str, dtypes: list[str], known: Collection[str] = ()) -> dict[str, Any] | None:
        """Where this runner's worker measures `device`, with that device's calibration: one entry of
        meta.json `devices` (ARCHITECTURE.md, "Where a row was measured"). None when its `where_key` is in
        `known` (a device the run has described already: its calibration is not measured twice)."""
        from attnbench.results.formulas import where_key

        where = self.request({"op": "where", "device": device}, timeout=120)["value"]
        if where_key(where.get("host"), device, where.get("gpu_uuid")) in known:
            return None
        budget_ms = self.settings.calibrate_ms
        calibration = self.request(
            {"op": "calibrate", "device": device, "dtypes": list(dtypes), "budget_ms": budget_ms}, timeout=600
        )["value"]
        return {**where, "device": device, "calibration": calibration}

    # ---- cells --------------------------------------------------------------------------------------

    def run(
        self,
        spec: CellSpec,
        options: dict[str, Any] | None = None,
        measured: Mapping[tuple[int, int], int] | None = None,
    ) -> dict[str, Any]:
        """The row of one cell (its status says what happened); the memory guard runs here, next to the
        device the cell will use. options: the keywords the worker hands harness.measure.cell.measure_cell
        (harness.run.plan.Visit.options), passed through as they are. measured: the peaks its series
        measured so far, (N_q, N_k) -> bytes (SkipAhead.peaks.of), which the guard predicts from."""
        settings = self.settings
        row = base_row(spec)
        try:
            worker = self._worker()
            available = worker.request({"op": "free_memory", "device": spec.device}, timeout=60)["value"]
            cap = variants.get(spec.variant).cap
            predicted = guard.predict(spec, cap.memory, settings, cap.varlen, measured)
            reason = guard.fits(predicted, available, settings.memory_guard)
            if reason:
                return finish(row, "skipped", reason, predicted_peak_bytes=predicted.bytes)
            reply = worker.request(
                {"op": "cell", "cell": spec.to_dict(), "options": dict(options or {})},
                timeout=settings.cell_timeout,
            )
            row = reply["row"]
            row.setdefault("elapsed_s", round(reply["parent_s"], 3))
            readings = clock_readings(
                reply.get("clock_s"), reply["parent_s"], reply["parent_marks"], reply.get("worker_marks")
            )
            row.update(clock_fields(readings))
            wrong_clock = clock_mismatch(readings)
            wrong_threads = threads_mismatch(row, settings.threads or worker.threads)
            # where the snapshot named what the variant changed (time.perf_counter replaced), that cause
            # comes first and how far the clock ran off after it: a clipped message keeps the cause
            named = wrong_clock is not None and names_a_change(str(row.get("message") or ""))
            offences = (None if named else wrong_clock, events_mismatch(row), wrong_threads)
            blame(row, [w for w in offences if w])
            if named:
                noted(row, wrong_clock)
            # a poisoned CUDA context, a failed graph capture, torch's global state changed by the variant,
            # a clock that cannot be believed: a new worker for the next cell
            if reply.get("exiting") or wrong_clock:
                self.replace()
            return row
        except WorkerTimeout as exc:
            self.replace()
            return finish(row, "timeout", f"cell exceeded --cell-timeout {settings.cell_timeout:g} s: {exc}")
        except WorkerDied as exc:
            self.replace()
            return finish(row, "crashed", str(exc))

    # ---- the worker's life --------------------------------------------------------------------------

    def _worker(self) -> Worker:
        if self.worker is None:
            self.worker = Worker(self.config)
        return self.worker

    def replace(self) -> None:
        """Kill the worker; the next request starts a fresh one (lazily, so a runner that is closing
        does not start a process it will never use)."""
        worker, self.worker = self.worker, None  # let go of first: a Ctrl-C after the kill leaves none behind
        if worker is not None:
            worker.kill()

    @property
    def threads(self) -> int:
        return self._worker().threads

    @property
    def cpu_affinity(self):
        return self._worker().cpu_affinity

    @property
    def gc_frozen(self) -> int | None:
        return self._worker().gc_frozen

    def close(self, *, kill: bool = False) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.kill() if kill else worker.stop()
