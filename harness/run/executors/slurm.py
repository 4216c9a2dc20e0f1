"""The Slurm executor: the cells split into submitit array tasks, each writing its own shard of rows.

The driver (this process, `run`) splits the cells into chunks (a series, one variant and shape at every
seq_len, stays in one chunk so that its OOM/timeout skip-ahead holds), submits one array task per chunk group
through submitit, and polls the run directory's `shards/`: every new row goes to `on_row` (the runner is
the single writer of rows.jsonl) and every device record to `on_device`. A task measures its chunk with a
`CellRunner` and appends each row to `shards/<chunk>.jsonl`, fsync'd, so a killed task keeps its finished
rows; `collect` (called by `attnbench collect` and `run --resume`) gathers the shards of a run whose driver
went away, waiting for the tasks still alive. The run directory must be on a filesystem the nodes share:
each task first looks for the driver's marker file there and fails with a message saying so if it is not.

On Slurm the cpu cells are an array of their own whose tasks each hold a node (`--exclusive`: two CPU
cells timed at once on one machine corrupt each other), and the cuda cells one whose tasks ask for their
GPUs; `check` gives sbatch the very scripts with `--test-only` first, so that options Slurm refuses are one
line before anything is written.

submitit is optional (`pip install attnbench[slurm]`) and imported only when this executor is used;
`local=True` (`--slurm-local`) runs the tasks with submitit's LocalExecutor, as processes on this machine,
all at once: there every cpu cell goes to one task (`chunk_cells`), so CPU cells are timed one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from attnbench.harness.run.executors.base import OnDevice, OnRow, Plan, Say, quiet_loggers
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.workers.cellrunner import CellRunner, SkipAhead, precheck
from attnbench.results.formulas import command
from attnbench.results.store import SHARDS, append_record, shard_rows_to_add
from attnbench.results.whole import write_whole

POLL_S = 1.0  # how often the driver reads the shards: rows appear in rows.jsonl this late at most
DEFAULT_MAX_TASKS = 32


def _submitit():
    try:
        import submitit
    except ImportError:
        raise ValueError("--executor slurm needs submitit: pip install 'attnbench[slurm]'") from None
    return submitit


def parse_opts(opts: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`--slurm-opt KEY=VALUE` (repeatable) as sbatch options; ValueError naming a bad one."""
    out = {}
    for text in opts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip() or not key.replace("-", "_").replace("_", "a").isalnum():
            raise ValueError(f"--slurm-opt takes KEY=VALUE (an sbatch option), got {text!r}")
        out[key.strip().replace("-", "_")] = value
    return out


class SlurmExecutor:
    name = "slurm"
    ordered = False  # cells measured in parallel: one round only (harness.run.plan.check)

    def __init__(
        self,
        partition: str | None = None,
        gpus_per_node: int = 0,
        time: str | None = None,
        array_parallelism: int | None = None,
        tasks: int | None = None,
        opts: list[str] | tuple[str, ...] = (),
        local: bool = False,
        poll_s: float = POLL_S,
    ) -> None:
        if gpus_per_node is not None and gpus_per_node < 0:
            raise ValueError(f"--slurm-gpus-per-node must be 0 or more, got {gpus_per_node}")
        if array_parallelism is not None and array_parallelism < 1:
            raise ValueError(f"--slurm-array-parallelism must be 1 or more, got {array_parallelism}")
        if tasks is not None and tasks < 1:
            raise ValueError(f"--slurm-tasks must be 1 or more, got {tasks}")
        if time is not None and not _valid_time(time):
            raise ValueError(f"--slurm-time takes minutes or [D-]HH:MM:SS, got {time!r}")
        self.options = {
            "partition": partition,
            "gpus_per_node": gpus_per_node or 0,
            "time": time,
            "array_parallelism": array_parallelism,
            "tasks": tasks,
            "opts": list(opts),
            "local": bool(local),
        }
        self.sbatch_opts = parse_opts(opts)
        self.poll_s = poll_s
        self.notes: list[str] = []  # what the command should tell the user (failed tasks, duplicates)
        self.running: list[str] = []  # the Slurm jobs left queued or running when the driver was stopped

    def check(self, sweep: SweepSpec) -> None:
        """Refused in one line before anything is written: no submitit, no sbatch, GPUs asked for a sweep of
        no cuda cells (or none for one of cuda cells), and options sbatch refuses: `sbatch --test-only` is
        given the very script submitit would submit, once per kind of array the sweep needs."""
        _submitit()
        if self.options["local"]:
            return
        if shutil.which("sbatch") is None:
            raise ValueError(
                "--executor slurm: no sbatch on PATH (no Slurm here); --slurm-local runs the array tasks "
                "as processes on this machine"
            )
        gpus = self.options["gpus_per_node"]
        if gpus and "cuda" not in sweep.devices:
            raise ValueError(
                f"--slurm-gpus-per-node {gpus} gives GPUs to cuda cells, and the sweep has none "
                f"(--devices {','.join(sweep.devices)}): CPU cells get a node each (sbatch --exclusive)"
            )
        if "cuda" in sweep.devices and not gpus:
            raise ValueError("the sweep's cuda cells need GPUs on Slurm: give --slurm-gpus-per-node N")
        for cpu in sorted({d == "cpu" for d in sweep.devices}):
            self._test_only(self._params(cpu=cpu))

    def _test_only(self, params: dict[str, Any]) -> None:
        """`sbatch --test-only` on the script submitit writes for `params` (running nothing): ValueError
        naming the option sbatch refuses, with sbatch's own words."""
        from submitit.slurm.slurm import _make_sbatch_string

        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "test.sh"
            script.write_text(_make_sbatch_string(command="true", folder=tmp, **params))
            try:
                p = subprocess.run(
                    ["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ValueError(f"--executor slurm: `sbatch --test-only` did not answer ({exc})") from None
        if p.returncode != 0:
            raise ValueError(self._refused(p.stderr or p.stdout))

    def _refused(self, said: str) -> str:
        """One line for what sbatch refused (`said`: its stderr), naming the option that caused it where
        its words tell, else every --slurm-* option given."""
        lines = [ln.strip() for ln in said.splitlines() if ln.strip() and not ln.startswith("Try ")]
        error = next((ln for ln in lines if "error" in ln.lower() or "unrecognized" in ln), None)
        error = error or (lines[0] if lines else "no message")
        text, o = error.lower(), self.options
        if "partition" in text and o["partition"]:
            culprit = f"--slurm-partition {o['partition']}"
        elif ("gres" in text or "gpu" in text) and o["gpus_per_node"]:
            culprit = f"--slurm-gpus-per-node {o['gpus_per_node']}"
        elif "time limit" in text and o["time"]:
            culprit = f"--slurm-time {o['time']}"
        else:
            opts = [t for t in o["opts"] if f"--{t.partition('=')[0].strip()}" in error]
            culprit = " ".join(f"--slurm-opt {t}" for t in opts) or self._given() or "the default options"
        return f"{culprit}: sbatch refuses it ({error[:300]})"

    def _given(self) -> str:
        """The --slurm-* options given, as flags."""
        o = self.options
        flags = [f"--slurm-{k.replace('_', '-')} {o[k]}" for k in ("partition", "time") if o[k]]
        flags += [f"--slurm-gpus-per-node {o['gpus_per_node']}"] if o["gpus_per_node"] else []
        return " ".join(flags + [f"--slurm-opt {t}" for t in o["opts"]])

    def session(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # each submission is its own

    def resume(
        self, run_dir: Path, done: dict[str, dict[str, Any]], on_row: OnRow, on_device: OnDevice, message: Say
    ) -> list[str]:
        """The rows array tasks wrote to shards/ after their driver went away (or still write): `collect`."""
        with quiet_loggers("submitit"):
            try:
                return collect(run_dir, done, on_row, on_device, poll_s=self.poll_s, message=message)
            except KeyboardInterrupt:  # stopped while it waits for tasks: they go on, and are said
                self.running = _array_ids(_alive_tasks(run_dir / SHARDS, slurm_only=True))
                raise

    # ---- the driver ---------------------------------------------------------------------------------

    def run(self, plan: Plan, on_row: OnRow, on_device: OnDevice) -> None:
        skip = SkipAhead(plan.done, plan.sweep.settings.max_call_ms)
        todo = []
        for spec in plan.cells:  # cells that need no worker are decided here, never shipped
            row = precheck(spec, skip)
            if row is None:
                todo.append(spec)
            else:
                on_row(row)
        if not todo:
            return
        shards = plan.run_dir.resolve() / SHARDS  # absolute: the tasks, and a later collect, start elsewhere
        jobs: list = []  # the jobs submitted, as they are, each with its chunks in `groups`
        groups: list = []
        try:
            self._submit_and_wait(plan, todo, shards, jobs, groups, on_row, on_device)
        except KeyboardInterrupt:  # the driver stops; the tasks submitted go on, and a collect gathers them
            if not self.options["local"]:
                self.running = _left_running(jobs, groups, shards)
            raise

    def _submit_and_wait(
        self, plan: Plan, todo: list[CellSpec], shards: Path, jobs: list, groups: list, on_row: OnRow,
        on_device: OnDevice,
    ) -> None:  # fmt: skip
        """Submit `todo`'s arrays, recorded in shards/submission-N.json (each job into `jobs` and its chunks
        into `groups` as it goes out: a Ctrl-C knows what did), then wait for their rows."""
        shards.mkdir(exist_ok=True)
        submission = 1 + len(list(shards.glob("submission-*.json")))
        token = secrets.token_hex(8)
        # the shared-filesystem check: every task must find this file in the run directory it was given
        (shards / f"marker-{submission}").write_text(token + "\n")
        common = {"run_dir": str(plan.run_dir.resolve()), "submission": submission, "token": token}
        common |= {"config": plan.config, "gpus": self.options["gpus_per_node"]}
        common["seeds"] = [r for r in plan.done if r.get("status") in ("oom", "timeout")]
        record = {
            "submission": submission,
            "backend": "local" if self.options["local"] else "slurm",
            "host": socket.gethostname(),
            "folder": str(shards / "submitit"),
            "options": self.options,
            "tasks": [],
        }
        with quiet_loggers("submitit"):
            for params, procs, chunks in self._arrays(todo):
                first = sum(len(g) for g in groups)  # chunk names run on across the submission's arrays
                names = [f"s{submission}-{first + i:04d}" for i in range(len(chunks))]
                # one array task per `procs` chunks: its process of local rank r measures the task's r-th
                array = [
                    [
                        (names[i], [c.to_dict() for c in chunks[i]])
                        for i in range(t, min(t + procs, len(chunks)))
                    ]
                    for t in range(0, len(chunks), procs)
                ]
                submitted = self._submit(shards / "submitit", params, [common | {"group": g} for g in array])
                jobs += submitted
                groups += array
                record["tasks"] += [
                    {"job_id": str(job.job_id), "chunks": [name for name, _ in group]}
                    for job, group in zip(submitted, array, strict=True)
                ]
                _write_json(shards / f"submission-{submission}.json", record)
            self._wait(plan, jobs, groups, shards, on_row, on_device)

    def _arrays(self, todo: list[CellSpec]) -> list[tuple[dict[str, Any] | None, int, list[list[CellSpec]]]]:
        """(submitit parameters, processes per task, chunks) of each array to submit. On Slurm, cpu cells
        are an array of their own whose tasks each have a node to themselves (--exclusive: two CPU cells
        timed at once on one machine corrupt each other; on several nodes they still run at once, one per
        node), and cuda cells one whose tasks run a process per GPU they are given. Locally (--slurm-local:
        every task a process here), one array, all cpu cells in one chunk (chunk_cells)."""
        gpus, tasks = self.options["gpus_per_node"], self.options["tasks"]
        if self.options["local"]:
            procs = max(1, gpus)
            n = tasks or min(DEFAULT_MAX_TASKS, len(_series(todo)))
            return [(None, procs, chunk_cells(todo, n * procs, local=True))]
        arrays = []
        for cpu in (True, False):
            cells = [c for c in todo if (c.device == "cpu") == cpu]
            if cells:
                procs = 1 if cpu else max(1, gpus)
                n = tasks or min(DEFAULT_MAX_TASKS, len(_series(cells)))
                arrays.append((self._params(cpu=cpu), procs, split(cells, n * procs)))
        return arrays

    def _submit(self, folder: Path, params: dict[str, Any] | None, args: list[dict[str, Any]]) -> list:
        """One array of tasks through submitit; sbatch's refusal as a ValueError in one line."""
        submitit = _submitit()
        if params is None:  # --slurm-local
            ex = submitit.LocalExecutor(folder=folder)
            o = self.options
            minutes = _minutes(o["time"]) if o["time"] else None
            # submitit's local default is a 2-minute limit: a sweep gets a week unless --slurm-time says
            procs = max(1, o["gpus_per_node"])
            ex.update_parameters(tasks_per_node=procs, nodes=1, timeout_min=minutes or 7 * 24 * 60)
        else:
            ex = submitit.SlurmExecutor(folder=folder)
            ex.update_parameters(**params)
        try:
            return ex.map_array(run_task, args)
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as exc:
            raise ValueError(self._refused(str(exc)) + "; the run is kept: finish it with `attnbench run "
                             "--resume --executor slurm` and the options fixed") from None  # fmt: skip

    def _wait(self, plan: Plan, jobs: list, groups: list, shards: Path, on_row: OnRow, on_device: OnDevice):
        """Poll this submission's shards into on_row and on_device until its tasks have ended; a note for
        each task that ended before its cells were done."""
        # a cell planned again (--redo-drift) is not a duplicate when it comes back
        seen = {r["cell_id"] for r in plan.done} - {c.cell_id for c in plan.cells}
        names = [name for group in groups for name, _ in group]
        reader = ShardReader(shards, names)  # this submission's shards: earlier ones are collect's
        while True:
            finished = all(_ended(job) for job in jobs)  # asked before reading: no last row is missed
            for kind, item in reader.poll():
                self._hand(kind, item, seen, on_row, on_device)
            if finished:
                break
            time.sleep(self.poll_s)
        for job, group in zip(jobs, groups, strict=True):
            for name, cells in group:
                if not (shards / f"{name}.done").exists():
                    left = len(cells) - reader.count.get(name, 0)
                    self.notes.append(
                        f"array task {job.job_id} (shard {name}) ended before its cells were done "
                        f"({_job_error(job)}); its {left} unfinished cells are left for "
                        f"`{command('attnbench', 'collect', plan.run_dir)}`"
                    )

    def _hand(self, kind: str, item: dict[str, Any], seen: set[str], on_row: OnRow, on_device: OnDevice):
        if kind == "device":
            on_device(item)
        elif item["cell_id"] in seen:
            self.notes.append(
                f"cell {item['cell_id']} came back twice: kept the first finished row, dropped the one "
                f"finished at {item.get('finished_at')}"
            )
        else:
            seen.add(item["cell_id"])
            on_row(item)

    def _params(self, *, cpu: bool) -> dict[str, Any]:
        """submitit's SlurmExecutor parameters for the array of cpu cells (`cpu`) or of cuda cells."""
        o = self.options
        procs = 1 if cpu else max(1, o["gpus_per_node"])
        params: dict[str, Any] = {"ntasks_per_node": procs, "nodes": 1}
        params["additional_parameters"] = dict(self.sbatch_opts)
        if cpu:  # the node to itself: no other task, ours or anyone's, times anything beside it
            params["exclusive"] = True
        if o["partition"]:
            params["partition"] = o["partition"]
        if o["gpus_per_node"] and not cpu:
            params["gpus_per_node"] = o["gpus_per_node"]
        if o["time"]:
            params["time"] = o["time"] if ":" in o["time"] else _minutes(o["time"])
        if o["array_parallelism"]:
            params["array_parallelism"] = o["array_parallelism"]
        return params


def chunk_cells(cells: list[CellSpec], n: int, *, local: bool) -> list[list[CellSpec]]:
    """The chunks of one submission: `split`, except that with `local` (every task a process on this
    machine, all running at once) every cpu cell goes into one chunk, measured one after another by one
    process, as the local executor allows one CPU worker per machine: two CPU cells timed at once on the
    same cores corrupt each other. cuda cells are split as ever (a task per GPU)."""
    if not local:
        return split(cells, n)
    cpu = [c for c in cells if c.device == "cpu"]
    other = [c for c in cells if c.device != "cpu"]
    return ([cpu] if cpu else []) + (split(other, max(1, n - bool(cpu))) if other else [])


def split(cells: list[CellSpec], n: int) -> list[list[CellSpec]]:
    """At most `n` chunks of whole series (largest first onto the emptiest chunk), each in plan order."""
    series = _series(cells)
    n = max(1, min(n, len(series)))
    chunks: list[list[CellSpec]] = [[] for _ in range(n)]
    for group in sorted(series.values(), key=len, reverse=True):
        min(chunks, key=len).extend(group)
    order = {c.cell_id: i for i, c in enumerate(cells)}
    return [sorted(chunk, key=lambda c: order[c.cell_id]) for chunk in chunks]


def _series(cells: list[CellSpec]) -> dict[tuple, list[CellSpec]]:
    out: dict[tuple, list[CellSpec]] = {}
    for c in cells:
        out.setdefault(c.group_key, []).append(c)
    return out


# ---- an array task (runs on a node) ---------------------------------------------------------------


def run_task(task: dict[str, Any]) -> int:
    """One process of one array task: measure its chunk into shards/<chunk>.jsonl; returns rows written.

    `task`: run_dir, submission, token (the marker's), group ([(chunk name, [cell dicts])], one chunk per
    process of the task), config (the worker's), seeds (the run's oom/timeout rows, for skip-ahead), gpus
    (per task: each process then measures on one)."""
    from attnbench import variants

    run_dir, submission, token = task["run_dir"], task["submission"], task["token"]
    group, config, seeds = task["group"], task["config"], task["seeds"]
    shards = Path(run_dir) / SHARDS
    marker = shards / f"marker-{submission}"
    if not marker.is_file() or marker.read_text().strip() != token:
        raise RuntimeError(
            f"the run directory {run_dir} is not visible from {socket.gethostname()} (no {marker.name} "
            "from the driver): --executor slurm needs the run directory on a filesystem the nodes share"
        )
    rank, visible = _rank()
    if rank >= len(group):  # more processes than chunks in this task
        return 0
    name, cells = group[rank]
    meta = json.loads((Path(run_dir) / "meta.json").read_text())
    sweep = SweepSpec.from_meta(meta["sweep"])
    settings = sweep.settings
    if config.get("cell_timeout"):  # a resume's --cell-timeout, given again (harness.run.request)
        settings = dataclasses.replace(settings, cell_timeout=config["cell_timeout"])
    config = {**config, "log_path": str(shards / f"{name}.worker.log"), "env": dict(config.get("env") or {})}
    gpus = task.get("gpus", 0)
    if gpus:  # one GPU per process: this rank's entry of what Slurm made visible (or, locally, GPU rank)
        visible = visible or [str(i) for i in range(gpus)]
        config["env"]["CUDA_VISIBLE_DEVICES"] = visible[rank % len(visible)]
    for path in config.get("variant_files", []):
        variants.load_variant_file(path)
    specs = [CellSpec.from_dict(c) for c in cells]
    # who measures this chunk: collect asks whether this process still lives (local tasks), and people ask
    _write_json(shards / f"{name}.task.json", {"host": socket.gethostname(), "pid": os.getpid()})
    skip = SkipAhead(seeds, settings.max_call_ms)
    # scancel, a time limit or preemption sends SIGTERM to every process of the task, the worker too: the
    # cell it was measuring did not crash, it was stopped, so it gets no row (a resume measures it again)
    stopped: list[int] = []

    def stop(signum, frame):
        stopped.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    runner = CellRunner(config, settings)
    written = 0
    finished = False
    try:
        _describe(runner, sorted({s.device for s in specs}), list(sweep.dtypes), meta, shards / name)
        with (shards / f"{name}.jsonl").open("ab") as fh:
            for spec in specs:
                row = precheck(spec, skip) or runner.run(spec, measured=skip.peaks.of(spec))
                if stopped:  # the signal landed after the worker died, before the handler ran
                    raise KeyboardInterrupt
                skip.note(spec, row)
                append_record(fh, row, shards / f"{name}.jsonl", Path(run_dir))  # whole, or not at all
                written += 1
        (shards / f"{name}.done").write_text(f"{written}\n")
        finished = True
    finally:
        runner.close(kill=not finished)
    return written


def _describe(runner: CellRunner, devices: list[str], dtypes: list[str], meta: dict, stem: Path) -> None:
    """shards/<chunk>.device.json: this process's devices; calibrated only where the run has no record of
    that device yet (the driver's own machine is described already)."""
    from attnbench.results.formulas import where_key

    records = []
    for device in devices:
        where = runner.request({"op": "where", "device": device}, timeout=120)["value"]
        if where_key(where.get("host"), device, where.get("gpu_uuid")) in meta.get("devices", {}):
            continue
        records.append(runner.describe(device, dtypes))
    _write_json(stem.with_suffix(".device.json"), records)


def _rank() -> tuple[int, list[str]]:
    """This process's rank within its task, and the GPUs Slurm made visible to the task."""
    import submitit

    try:
        rank = submitit.JobEnvironment().local_rank
    except (RuntimeError, KeyError):  # not inside a submitit job (called directly, e.g. by a test)
        rank = 0
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    return rank, visible


# ---- reading shards (the driver, and collect) -----------------------------------------------------


class ShardReader:
    """New complete rows and device records in shards/, each handed out once, oldest-finished first
    within a poll. A line still being written (no newline yet) waits for the next poll."""

    def __init__(self, shards: Path, names: list[str] | None = None) -> None:
        self.shards = shards
        self.names = None if names is None else set(names)  # None: every shard there is
        self.offset: dict[Path, int] = {}
        self.devices: set[Path] = set()
        self.count: dict[str, int] = {}

    def poll(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for path in sorted(self.shards.glob("*.device.json")):
            if self.names is not None and path.name.split(".")[0] not in self.names:
                continue
            if path not in self.devices:
                self.devices.add(path)
                yield from (("device", r) for r in json.loads(path.read_text()))
        rows = []
        for path in sorted(self.shards.glob("*.jsonl")):
            if self.names is not None and path.stem not in self.names:
                continue
            with path.open("rb") as fh:
                fh.seek(self.offset.get(path, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1
            self.offset[path] = self.offset.get(path, 0) + end
            for line in data[:end].splitlines():
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # a task killed mid-write left a torn line; its cell is missing, and reruns
                if isinstance(row, dict) and "cell_id" in row:
                    rows.append(row)
                    self.count[path.stem] = self.count.get(path.stem, 0) + 1
        rows.sort(key=lambda r: r.get("finished_at") or "")  # stable: file order breaks ties
        yield from (("row", r) for r in rows)


def collect(
    run_dir: Path,
    done: dict[str, dict[str, Any]],
    on_row: OnRow,
    on_device: OnDevice,
    *,
    wait: bool = True,
    poll_s: float = POLL_S,
    message: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """Every shard row of a run not yet in rows.jsonl (`done`: its rows by cell_id), handed to on_row once the
    array tasks still alive have ended (unless `wait` is false), chosen by the one merging rule
    (results.store.shard_rows_to_add: the row rows.jsonl holds, else the first finished). Returns notes for
    the user (the duplicates). The caller holds the run's writer lock."""
    shards = run_dir / SHARDS
    if not shards.is_dir():
        return []
    said = False
    while wait and (alive := _alive_tasks(shards)):
        if not said:
            message(f"waiting for {len(alive)} array task(s) still running: {', '.join(alive[:5])}")
            said = True
        time.sleep(poll_s)
    for kind, item in ShardReader(shards).poll():
        if kind == "device":
            on_device(item)
    rows, duplicates = shard_rows_to_add(run_dir, done)
    for row in rows:
        on_row(row)
    return [
        f"cell {d.cell_id} came back twice: kept the first finished row ({d.kept}), dropped {d.dropped}"
        for d in duplicates
    ]


def _left_running(jobs: list, groups: list, shards: Path) -> list[str]:
    """The Slurm array jobs (their ids, as `scancel` takes them) with a task still queued or running, among
    those submitted (`jobs`, each with its chunks in `groups`): what a stopped driver leaves behind."""
    return _array_ids(
        str(job.job_id)
        for job, group in zip(jobs, groups, strict=False)
        if not all((shards / f"{name}.done").exists() for name, _ in group) and not _ended(job)
    )


def _array_ids(job_ids: Iterable[str]) -> list[str]:
    """The array jobs of array tasks ("4242_0", "4242_[1-3%4]" -> "4242"), once each, in order: what
    `scancel` takes to stop them all."""
    return list(dict.fromkeys(str(job_id).split("_")[0] for job_id in job_ids))


def _alive_tasks(shards: Path, slurm_only: bool = False) -> list[str]:
    """Job ids of the submitted array tasks that have not written all their .done files and that the
    scheduler (Slurm's sacct, or for local tasks the process table) says are still running (`slurm_only`:
    those on Slurm, not --slurm-local's)."""
    alive = []
    for path in sorted(shards.glob("submission-*.json")):
        record = json.loads(path.read_text())
        if slurm_only and record["backend"] != "slurm":
            continue
        for task in record["tasks"]:
            if all((shards / f"{c}.done").exists() for c in task["chunks"]):
                continue
            if _job_alive(record, task["job_id"], task["chunks"], shards):
                alive.append(task["job_id"])
    return alive


def _job_alive(record: dict[str, Any], job_id: str, chunks: list[str], shards: Path) -> bool:
    if record["backend"] == "slurm":
        return not _ended(_submitit().SlurmJob(folder=record["folder"], job_id=job_id))
    # submitit's local job id is the pid of its controller, whose children run the task: either alive
    # means rows may still come; from another host no process can be asked
    if record["host"] != socket.gethostname():
        return False
    pids = [int(job_id)]
    for chunk in chunks:
        task = shards / f"{chunk}.task.json"
        if task.is_file():
            pids.append(json.loads(task.read_text())["pid"])
    return any(_pid_alive(pid) for pid in pids)


def _ended(job) -> bool:
    """Whether a submitit job has ended. submitit asks sacct; a cluster without accounting has nothing to
    answer (sacct says so on the terminal at every poll, and a task killed before writing its result would
    seem to run forever): there, a job that has written its result or that squeue no longer lists has
    ended, and sacct is not asked."""
    local = getattr(job, "_process", None) is not None
    if not local and not _accounting():
        return job.paths.result_pickle.exists() or _unlisted(job.job_id)
    if job.done():
        return True
    if local or job.state.upper() != "UNKNOWN":
        return False  # a local job (its process said), or one sacct knows is still on its way
    return _unlisted(job.job_id)


def _unlisted(job_id: str) -> bool:
    """Whether squeue no longer lists a Slurm job (False when squeue does not answer)."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%T", "-j", str(job_id)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return (out.returncode == 0 and not out.stdout.strip()) or "Invalid job id" in out.stderr


@functools.cache
def _accounting() -> bool:
    """Whether this Slurm keeps accounting (sacct answers), asked once per process."""
    try:
        p = subprocess.run(["sacct", "-n", "-X", "-j", "1", "-o", "JobID"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _job_error(job) -> str:
    """The last line of the task's stderr (the exception, when it raised one), or its state."""
    try:
        lines = [ln for ln in job.paths.stderr.read_text().splitlines() if ln.strip()]
    except OSError:
        lines = []
    last = next((ln.strip() for ln in reversed(lines) if not ln.startswith(" ")), None)
    if last:
        return f"{last}; log: {job.paths.stderr}"
    local = getattr(job, "_process", None) is not None
    state = f"state {job.state}, " if local or _accounting() else ""  # sacct asked only where it answers
    return f"{state}log: {job.paths.stderr}"


def _write_json(path: Path, data: Any) -> None:
    """A task's or a submission's record replaced whole (results.whole.write_whole)."""
    write_whole(path, json.dumps(data, indent=1) + "\n")


def _valid_time(text: str) -> bool:
    try:
        return _minutes(text) > 0
    except ValueError:
        return False


def _minutes(text: str) -> int:
    """Slurm's --time as whole minutes (rounded up): MM, HH:MM:SS, D-HH:MM:SS."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if not parts or any(p < 0 for p in parts) or len(parts) > 3:
        raise ValueError(text)
    if len(parts) == 1:
        seconds = parts[0] * 60
    else:
        parts = [0] * (3 - len(parts)) + parts
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    seconds += int(days) * 86400 if days else 0
    return -(-seconds // 60)
