"""The default executor: this machine. One worker process for every cell, or, with `--devices`, one per GPU.

With `devices` (`cuda:0,cuda:1`, `all`, and at most one `cpu`), each entry is a slot: a thread driving its
own CellRunner, whose worker is pinned to its GPU with CUDA_VISIBLE_DEVICES, and which takes the cells of its
kind (cuda or cpu) from one shared dispatcher. Threads never write: their rows come back through a queue
that this (the runner's) thread drains and hands to on_row, so the runner's RunWriter stays single-threaded.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.harness.measure.rows import base_row, finish
from attnbench.harness.run.executors.base import CellsLeft, OnDevice, OnRow, Plan, Say
from attnbench.harness.run.executors.dispatch import Dispatcher
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.workers import interrupts
from attnbench.harness.workers.cellrunner import CellRunner, SkipAhead, precheck
from attnbench.harness.workers.isolation import WorkerDied, WorkerTimeout

ONE_CPU_WORKER = (
    "two CPU cells timed at once on one machine corrupt each other: give --devices at most one cpu worker"
)


@dataclass(frozen=True)
class Slot:
    """One worker of the pool: its name (`cuda:1`, `cpu`), the cells it takes, and its pinning."""

    name: str
    device: str  # "cuda" or "cpu": the CellSpec.device of the cells it measures
    env: dict[str, str] = field(default_factory=dict)


def parse_devices(text: str, cuda_count: int | None = None) -> list[Slot]:
    """`cuda:0,cuda:1`, `all` (every visible CUDA device) or `cpu`, comma-separated, as slots; ValueError
    naming the bad entry. `cuda_count` is how many CUDA devices torch sees (asked only when needed)."""
    slots: list[Slot] = []
    for entry in (t.strip() for t in text.split(",")):
        if entry == "all":
            count = _cuda_count() if cuda_count is None else cuda_count
            if count == 0:
                raise ValueError("--devices all: torch sees no CUDA device on this machine")
            slots += [Slot(f"cuda:{i}", "cuda", {"CUDA_VISIBLE_DEVICES": str(i)}) for i in range(count)]
        elif entry == "cpu":
            slots.append(Slot("cpu", "cpu"))
        elif entry.startswith("cuda:") and entry[5:].isdigit():
            index = int(entry[5:])
            count = _cuda_count() if cuda_count is None else cuda_count
            if index >= count:
                raise ValueError(f"--devices {entry!r}: torch sees {count} CUDA device(s) on this machine")
            slots.append(Slot(entry, "cuda", {"CUDA_VISIBLE_DEVICES": str(index)}))
        else:
            raise ValueError(f"--devices: unknown device {entry!r} (use cuda:N, all or cpu, comma-separated)")
    names = [s.name for s in slots]
    if names.count("cpu") > 1:
        raise ValueError(ONE_CPU_WORKER)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--devices names {twice[0]} twice")
    return slots


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_slots(slots: list[Slot], sweep: SweepSpec) -> None:
    """ValueError when the sweep measures a device no slot takes."""
    kinds = {s.device for s in slots}
    for device in sweep.devices:
        if device not in kinds:
            hint = "cpu (one per machine)" if device == "cpu" else "cuda:N or all"
            raise ValueError(
                f"the sweep measures {device} cells but --devices has no {device} worker: add {hint}"
            )


class LocalExecutor:
    name = "local"
    ordered = True  # carries out a plan's order (one worker); with --devices the pool does not (check)

    def __init__(self, devices: str | None = None) -> None:
        self.devices = devices
        self.slots: list[Slot] | None = None
        self.notes: list[str] = []  # none: every row comes back through on_row
        self.running: list[str] = []  # none: its workers stop with the run

    def resume(
        self, run_dir: Path, done: dict[str, dict[str, Any]], on_row: OnRow, on_device: OnDevice, message: Say
    ) -> list[str]:
        return []  # nothing is left outside rows.jsonl: rows reach the runner as they are measured

    def session(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # nothing outlives one call here

    def check(self, sweep: SweepSpec) -> None:
        if self.devices is None:
            return
        self.slots = parse_devices(self.devices)
        check_slots(self.slots, sweep)
        self.ordered = False

    def run(self, plan: Plan, on_row: OnRow, on_device: OnDevice) -> None:
        if self.slots is not None:
            return run_pool(plan, self.slots, on_row, on_device)
        skip = SkipAhead(plan.done, plan.sweep.settings.max_call_ms)
        runners = [plan.local or CellRunner(plan.config, plan.sweep.settings)]  # worker 0: the run's own

        def measure(spec: CellSpec, options: dict[str, Any], worker: int) -> dict[str, Any]:
            while len(runners) <= worker:  # Settings.workers: started when first asked for
                runners.append(CellRunner(worker_config(plan.config, len(runners)), plan.sweep.settings))
            row = runners[worker].run(spec, options, skip.peaks.of(spec))
            # each visit feeds the skip-ahead: a cell's row comes in its last round, and the longer cells'
            # first visits, which it decides, are all made in the first
            skip.note(spec, row)
            return row

        def done(row: dict[str, Any]) -> None:
            skip.note(CellSpec.from_dict(row), row)
            on_row(row)

        interrupted = False
        try:
            plan.order.carry_out(measure, done, precheck=lambda spec: precheck(spec, skip))
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:  # the runner closes the run's own worker; a Ctrl-C meanwhile comes after (interrupts.held)
            with interrupts.held():
                for runner in runners:
                    if runner is not plan.local:
                        runner.close(kill=interrupted)


def worker_config(config: dict[str, Any], index: int) -> dict[str, Any]:
    """The config of the run's worker `index` (Settings.workers): the run's own, with a log of its own
    (a dying worker's last lines are read back from its log: another's must not be mistaken for them),
    worker-w2.log beside worker.log."""
    path = str(config.get("log_path") or "")
    if not path:
        return config
    stem, dot, ext = path.rpartition(".")
    return {**config, "log_path": f"{stem}-w{index + 1}.{ext}" if dot else f"{path}-w{index + 1}"}


# ---- the pool ---------------------------------------------------------------------------------------


def slot_config(plan: Plan, slot: Slot) -> dict[str, Any]:
    """The run's worker config with this slot's pin, and a log of its own (a dying worker's last lines
    are read back from its log: another worker's lines must not be mistaken for them)."""
    tag = slot.name.replace(":", "")
    return {
        **plan.config,
        "env": {**plan.config.get("env", {}), **slot.env},
        "log_path": str(plan.run_dir / f"worker-{tag}.log"),
    }


class _SlotThread(threading.Thread):
    """Drives one slot's CellRunner: describe its device, then measure each cell put in its inbox."""

    def __init__(self, slot: Slot, plan: Plan, outbox: queue.Queue) -> None:
        super().__init__(name=f"attnbench-{slot.name}", daemon=True)
        self.slot, self.plan, self.outbox = slot, plan, outbox
        # a cell and the peaks its series measured so far (the guard's evidence), or None to stop
        self.inbox: queue.Queue[tuple[CellSpec, dict] | None] = queue.Queue()
        self.runner: CellRunner | None = None

    def run(self) -> None:
        plan = self.plan
        try:
            # the runner's own worker measures cpu here already (unpinned, calibrated): the cpu slot reuses it
            if self.slot.name == "cpu" and plan.local is not None:
                self.runner = plan.local
            else:
                self.runner = CellRunner(slot_config(plan, self.slot), plan.sweep.settings)
            try:
                record = self.runner.describe(self.slot.device, list(plan.sweep.dtypes), plan.described)
                if record is not None:
                    self.outbox.put(("device", self, record))
            except (WorkerDied, WorkerTimeout):
                pass  # a worker that cannot describe its device will fail its cells, each with a row
            self.outbox.put(("ready", self, None))
            while (given := self.inbox.get()) is not None:
                spec, measured = given
                self.outbox.put(("row", self, (spec, self.runner.run(spec, measured=measured))))
        except BaseException as exc:  # the main thread decides; a thread must never die silently
            self.outbox.put(("failed", self, exc))
        finally:
            if self.runner is not None and self.runner is not plan.local:
                self.runner.close()

    def halt(self, kill: bool) -> None:
        """Stop after the current cell; with `kill`, kill the worker so that the current cell ends now
        (the thread sees the pipe close and returns a row nobody writes)."""
        self.inbox.put(None)
        if kill and self.runner is not None and self.runner.worker is not None:
            self.runner.worker.proc.kill()


def run_pool(plan: Plan, slots: list[Slot], on_row: OnRow, on_device: OnDevice) -> None:
    """Measure plan.cells on every slot at once; rows and device records are handed over from this thread."""
    outbox: queue.Queue = queue.Queue()
    threads = [_SlotThread(slot, plan, outbox) for slot in slots]
    dispatcher = Dispatcher(plan.cells, plan.done, plan.sweep.settings.max_call_ms)
    idle: list[_SlotThread] = []
    busy: dict[_SlotThread, CellSpec] = {}
    alive = set(threads)
    for t in threads:
        t.start()
    clean = False
    try:
        while not dispatcher.finished:
            for t in list(idle):
                spec = dispatcher.take(t.slot.device, on_row)
                if spec is not None:
                    idle.remove(t)
                    busy[t] = spec
                    t.inbox.put((spec, dispatcher.skip.peaks.of(spec)))
            if dispatcher.finished:
                break
            if not busy and not {t.slot.device for t in alive} & dispatcher.devices_left():
                raise CellsLeft("no worker of the pool could start; the cells left are not measured")
            kind, t, payload = _get(outbox)
            if kind == "device":
                plan.described.add(_key(payload))
                on_device(payload)
            elif kind == "ready":
                idle.append(t)
            elif kind == "row":
                spec, row = payload
                del busy[t]
                idle.append(t)
                dispatcher.back(spec, row)
                on_row(row)
            elif kind == "failed":
                alive.discard(t)
                if t in busy:  # its cell still gets its row
                    spec = busy.pop(t)
                    row = finish(base_row(spec), "crashed", f"{t.slot.name} worker thread failed: {payload}")
                    dispatcher.back(spec, row)
                    on_row(row)
                if not isinstance(payload, (WorkerDied, WorkerTimeout)):
                    raise payload  # a harness bug: stop, with its traceback
        clean = True
    finally:
        for t in threads:
            t.halt(kill=not clean)
        for t in threads:
            t.join(timeout=30)


def _get(outbox: queue.Queue):
    # a bounded wait, so that Ctrl-C reaches this thread between polls
    while True:
        try:
            return outbox.get(timeout=0.5)
        except queue.Empty:
            continue


def _key(record: dict[str, Any]) -> str:
    from attnbench.results.formulas import where_key

    return where_key(record.get("host"), record["device"], record.get("gpu_uuid"))
