"""The worker process: measures cells sent by the parent over a pipe, one at a time.

It imports torch once (after pinning its CPUs) and is reused while healthy; this module's top imports only
torch-free modules, since the parent imports it too (harness.workers.isolation starts worker_main). Its stdout
and stderr go to the run's worker.log (variants that print cannot corrupt the protocol), faulthandler dumps a
traceback there on a fatal signal, it ignores Ctrl-C (the parent decides), and on Linux it dies with its
parent, leads a process group of its own and adopts the processes its variants detach
(harness.workers.children).

What a variant's code leaves behind is its own row's, never a neighbour's: after every cell, every
numerics-probe request and every problem `attnbench check` gates (harness.measure.gate_rows) the worker
compares torch's process-wide state and the process's own (signals, timers, the garbage collector, the
interpreter's hooks, its threads' CPUs and priority, its subreaper flag) with the ones it was set up with
(harness.workers.torch_state, harness.workers.process_state) and kills the processes left running; the row
says what was found (rows.blame), and after a change of state the worker exits so that the next cell gets a
clean one (the process's state is put back at once, so that an alarm armed cannot end it before the row is
sent). A plug-in's import is compared too: what it changed is put back, and its variants' rows say so. A cell
that leaves a thread running (not torch's own; one threading does not list, or one running no Python, too)
has its row say so, and the worker exits after it too: the thread cannot act (start a process, take the CPU)
in a later cell of another variant. A thread an import leaves running runs in every worker: its file's
variants' rows name it, and every other row notes it.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import os
import signal
import sys
import traceback
from typing import Any

from attnbench.harness.measure import timing
from attnbench.harness.measure.outcomes import (
    MARK,
    PROCESS_EXIT,
    STATE_EXIT,
    THREADS_EXIT,
    exit_reason,
    is_poisoned_row,
    process_changed,
    processes_left,
    state_changed,
    threads_running,
)
from attnbench.harness.measure.rows import base_row, blame, finish, noted
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers import children
from attnbench.harness.workers.process_state import State as ProcessState

Threads = tuple[set[int], set[int], bool]  # _threads_now: Python's, the OS's, CUDA initialised

# what the requests use beside harness.measure.cell, imported with torch before freeze_imports so that the
# collector never scans it again (the methods below import from these modules, found in sys.modules)
MEASURING = ("attnbench.harness.measure.calibrate", "attnbench.harness.measure.fingerprint")


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): a killed parent must not leave a worker computing on. A forked
    worker's parent is the forkserver, which ends with the run process (_let_the_server_go)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
        except OSError:
            pass


def _let_the_server_go() -> None:
    """Close this worker's copy of its forkserver's "alive" pipe. multiprocessing hands every process the
    server forks a copy of the pipe whose closing ends the server (its run process holds the other), so the
    server lived on while a worker did, and a worker, tied to the server (_die_with_parent), lived on while
    its cell did: a run killed (kill -9, the OOM killer) left both computing on for good with a hung
    kernel, beside a later --resume. Without the copy, the server ends as the run process does, and the
    worker with it. A variant that starts processes from a forkserver gets one of the worker's own."""
    server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = server._forkserver_address = server._forkserver_pid = None


def _redirect_output(log_path: str | None, pipe: Any = None) -> None:
    """stdout and stderr (this process's and every C library's in it) into the pipe whose other end the
    parent copies into the log (harness.workers.logcap: capped), or into the log itself without one."""
    if pipe is not None:
        fd = os.dup(pipe.fileno())
        pipe.close()
    elif log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    else:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def free_memory(device: str) -> int:
    """Bytes this process could still allocate on `device`."""
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    try:
        with open("/proc/meminfo") as meminfo:  # closed, not left to the collector (-X dev's ResourceWarning)
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover  (non-Linux)
        pass
    import psutil  # pragma: no cover  (non-Linux)

    return int(psutil.virtual_memory().available)


def worker_main(conn, config: dict[str, Any]) -> None:
    """Serve requests until 'stop' or until the parent goes away."""
    _start(config)

    def window_mark() -> None:
        """A timing loop starts or ends: the parent notes its clock between two readings of the timer's."""
        before = timing.timer_clock()
        conn.send({"op": MARK})
        conn.recv()  # the parent's answer, sent as soon as it read its clock
        marks.append((before, timing.timer_clock()))

    marks: list[tuple[float, float]] = []  # this request's, sent with its reply (the parent pairs them)

    timing.window_mark = window_mark  # before the snapshot (_Server): a variant that replaces it is named
    code = 0
    try:
        server = _Server(config)  # imports torch
        conn.send(server.hello())
        _serve(conn, server, marks)
    except BaseException:  # a harness bug, a plug-in's sys.exit: its traceback in the log, exit status 1
        traceback.print_exc()
        code = 1
    finally:
        end(code)


def end(code: int = 0) -> None:
    """The worker's last act, however it ends: kill every child it still has (torch's helpers too: nothing
    outlives it) and leave at once, flushing its log but running no atexit hook: a hook a variant
    registered would otherwise run after this sweep (and could start a process that outlives the run)."""
    try:
        children.kill_leftovers(spare_helpers=False)
        _release_semaphores()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _release_semaphores() -> None:
    """Unlink the named semaphores this process made (multiprocessing's locks, such as the one tqdm makes
    while torch.compile traces): os._exit skips the finalizers that would, and the run's resource tracker
    would then warn of "leaked semaphore objects" on the user's terminal as the run ends. Only
    multiprocessing's own cleanup runs, never another finalizer (a variant may have registered one)."""
    from multiprocessing import synchronize, util

    for finalizer in list(util._finalizer_registry.values()):
        if getattr(finalizer, "_callback", None) is synchronize.SemLock._cleanup:
            finalizer()


def _serve(conn, server: _Server, marks: list[tuple[float, float]]) -> None:
    """Answer the parent's requests until 'stop', a reason to exit, or the parent going away; a cell's reply
    carries its timer clock's readings: the request's length and each timing loop mark's (`marks`)."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        marks.clear()
        try:
            if msg.get("op") == "stop":
                conn.send({"op": "stopped"})
                return
            if msg.get("op") == "numerics":
                reply, why = server.numerics(msg)
            elif msg.get("op") == "gate":
                reply, why = server.gate(msg)
            elif msg.get("op") == "cell":
                start = timing.timer_clock()  # the timer's clock, for the parent to check (clock_mismatch)
                row, left = server.cell(CellSpec.from_dict(msg["cell"]), msg.get("options") or {})
                reply, why = {"op": "row", "row": row}, exit_reason(row) or left
                reply["clock_s"], reply["worker_marks"] = timing.timer_clock() - start, list(marks)
            else:
                conn.send(server.answer(msg))
                continue
            if why:
                # a poisoned context (every later CUDA call would fail), a failed graph capture (the
                # allocator may be left mid-capture) or torch's global state changed by a variant: send the
                # reply, say so, and exit; the parent's CellRunner starts a fresh worker for the next request
                print(f"attnbench worker {os.getpid()} exiting: {why}", flush=True)
                conn.send({**reply, "exiting": why})
                return
            conn.send(reply)
            server.refreeze()
        except (BrokenPipeError, EOFError):
            return


def _start(config: dict[str, Any]) -> None:
    """The process's own set-up, before torch is imported: tied to its parent, deaf to Ctrl-C, output to
    the log, tracebacks on fatal signals, pinned to its CPUs."""
    for name, value in config.get("per_call", {}).items():  # as the parent has them (isolation.PER_CALL)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _die_with_parent()
    _let_the_server_go()  # after: a server that ends from now on takes the worker with it
    children.own_group()  # the parent kills the group with the worker (harness.workers.children.kill_tree)
    children.become_subreaper()  # what a variant starts and detaches stays the worker's child
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # spawned blocked (interrupts.blocked_for_children)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _redirect_output(config.get("log_path"), config.get("log_pipe"))
    faulthandler.enable(all_threads=True)
    print(f"attnbench worker {os.getpid()} starting", flush=True)
    if config.get("cpu_affinity"):
        # before torch is imported: its OpenMP pool sizes itself from the CPUs this process may use
        os.sched_setaffinity(0, config["cpu_affinity"])


class _Server:
    """What the worker keeps between requests: torch set up, the variant files loaded, the last shape's
    inputs (cell.InputCache), where each device is (found once), and how many modules are frozen."""

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        from attnbench.harness.measure.inputs import InputCache
        from attnbench.harness.measure.timing import freeze_imports, pin_cuda_events
        from attnbench.harness.workers.torch_state import State

        for name in MEASURING:
            importlib.import_module(name)
        # the native pools numerical libraries start as they are loaded (scipy's OpenBLAS, which transformers
        # imports) are born now, the worker's own, not taken for threads a first cell or import left
        children.start_blas_pools()
        pin_cuda_events()  # the timers' CUDA events, as torch made them, before any plug-in is imported
        if config.get("threads"):
            torch.set_num_threads(int(config["threads"]))
        # torch's own native threads are born now, not in a first cell that would seem to leave them: OpenMP's
        # pool (a parallel region) and Kineto's (the profiler CPU memory peaks are read under)
        from attnbench.harness.measure.memory import peak_cpu

        peak_cpu(lambda: torch.ones(1 << 17).sum())
        self.state, self.process = State(), ProcessState()
        self.clean = self.state.take()  # torch's global state as the run asked: every cell must leave it so
        self.process_clean = self.process.take()  # and the process's own (signals, gc, hooks, threads' CPUs)
        self.import_threads = ""  # the threads a plug-in's import left running (in every worker): a note
        self.threads_importers: set[str] = set()  # the variants of the file(s) that started them: blamed
        self.imported: dict[str, str] = {}  # variant -> what importing its plug-in changed (then put back)
        self.unrestored = ""  # what an import changed and could not be put back: no cell here is clean
        self._load_plugins(config.get("variant_files", []))
        # measure's collection before each cell then skips the imports' ~170k objects
        self.frozen = freeze_imports()
        self.modules_frozen = len(sys.modules)
        self.threads = torch.get_num_threads()
        self.cache = InputCache()
        self.where: dict[str, dict] = {}  # device -> where_measured(device), found once per worker
        self.settings = Settings(**config.get("settings", {}))  # the run's, sent once

    def _load_plugins(self, files: list[str]) -> None:
        """Builtins, entry points and variant files, each import compared with the clean state: what one
        changed is put back (a fresh worker would import it again) and its variants' rows name it."""
        from attnbench import variants

        steps = [(None, lambda: [n for n, v in variants.all_variants().items() if v.source != "builtin"])]
        steps += [(path, lambda path=path: variants.load_variant_file(path)) for path in files]
        for path, load in steps:
            threads = _threads_now()
            names = load()
            self._compare_import(f"variant file {path}" if path else "entry-point plug-ins", names, threads)

    def _compare_import(self, where: str, names: list[str], threads: Threads) -> None:
        """After one import step (`where`, which registered `names`): what it changed is put back and named
        in its variants' rows; what cannot be is named in every row, and a thread it left running (it
        cannot be stopped, and runs beside every cell of every worker) is noted in every row."""
        changes, process = self.state.changes(self.clean), self.process.changes(self.process_clean)
        if changes or process:
            left, left_process = self.state.restore(self.clean), self.process.restore(self.process_clean)
            said = _changed(changes, process)
            restored = "not all put back" if left or left_process else "put back"
            for name in names:
                self.imported[name] = f"{said} when imported ({restored})"
            print(f"importing {where} {said}", flush=True)
            if left or left_process:  # every cell of every worker runs so: each row says so
                self.unrestored = (
                    f"importing {where} {_changed(left, left_process)} for good (it cannot be put back)"
                )
                self.clean, self.process_clean = self.state.take(), self.process.take()
        running = _threads_left(threads)
        if running:
            n = len(running)
            said = f"left {n} thread{'s' if n != 1 else ''} running ({', '.join(running)})"
            for name in names:
                self.imported[name] = "; ".join(
                    w for w in (self.imported.get(name), f"{said} when imported") if w
                )
            self.threads_importers.update(names)
            self.import_threads = f"importing {where} {said}, beside every cell"
            print(self.import_threads, flush=True)

    def left_behind(self, variant: str, threads: Threads) -> tuple[list[str], str, str | None]:
        """What `variant`'s code left in this process, in its row's words (torch's or the process's state
        changed; processes left running, now killed); a note for the threads it left running (`threads`:
        _threads_now as its cell or probe began); and why the worker must exit, or None."""
        words = [w for w in [self.imported.get(variant) or self.unrestored] if w]
        changes = self.state.changes(self.clean)
        process = self.process.changes(self.process_clean)
        if process:  # at once: an alarm it armed must not end the worker before this row is sent
            self.process.restore(self.process_clean)
        if changes or process:
            words.append(_changed(changes, process))
        killed = children.kill_leftovers()
        if killed:
            words.append(processes_left(killed))
        running = _threads_left(threads)
        notes = [
            self.import_threads if variant not in self.threads_importers else "",
            threads_running(running) if running else "",
        ]
        why = STATE_EXIT if changes else PROCESS_EXIT if process else THREADS_EXIT if running else None
        return words, "; ".join(n for n in notes if n), why

    def hello(self) -> dict[str, Any]:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return {"op": "ready", "pid": os.getpid(), "threads": self.threads, "cpu_affinity": cpus,
                "gc_frozen": self.frozen, "own_group": os.getpgid(0) == os.getpid()}  # fmt: skip

    def where_measured(self, device: str) -> dict[str, Any]:
        from attnbench.harness.measure.fingerprint import where_measured

        return self.where.setdefault(device, where_measured(device))

    def cell(self, spec: CellSpec, options: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The cell's row, whatever happens (measured, or a harness error as the row's status), blamed for
        what its variant left behind (left_behind); and whether torch's global state changed. options: the
        parent's keywords for harness.measure.cell.measure_cell, as they came."""
        threads = _threads_now()
        row = self._measure(spec, options)
        words, note, why = self.left_behind(spec.variant, threads)
        return blame(noted(row, note), words), why

    def _measure(self, spec: CellSpec, options: dict[str, Any]) -> dict[str, Any]:
        from attnbench.harness.measure.calibrate import speed_probe
        from attnbench.harness.measure.cell import measure_cell
        from attnbench.harness.measure.failures import failure, is_poisoned

        print(f"cell {spec.cell_id}", flush=True)
        try:
            options = dict(options)
            probe = options.pop("probe", True)  # the parent's say: a probe nobody reads is not taken
            speed = speed_probe(spec.device) if probe else None  # the machine's speed just before this cell
            row = measure_cell(spec, self.settings, self.cache, **options)
            if speed is not None:
                row["speed_tflops"] = round(speed, 6)
            if is_poisoned_row(row):  # where_measured would meet the same CUDA error: what is known
                row.update(self.where.get(spec.device, {}))
            else:
                row.update(self.where_measured(spec.device))
            return row
        except Exception as exc:  # a harness bug must still become this cell's row
            traceback.print_exc()
            if is_poisoned(exc):  # the harness's own CUDA call met a context the cell broke
                return finish(base_row(spec), *failure(exc, spec.device))
            return finish(base_row(spec), "error", f"harness error: {type(exc).__name__}: {exc}")

    def numerics(self, msg: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The numerics probe of msg's variants, one after another (its `part` "tiles": their gate at N =
        TILE_N under each of msg's `causal` values instead), each one's records blamed as its cells would be
        (left_behind); and why this worker must exit, or None. The runner asks for one variant and part a
        request, so that the next is probed in a fresh worker after one that changed torch's state."""
        from attnbench.harness.measure.memory import HOLDINGS
        from attnbench.harness.measure.numerics import probe, tiles

        records, exit_why = [], None
        for name in msg["variants"]:
            before, threads = HOLDINGS.mark(), _threads_now()
            if msg.get("part") == "tiles":
                mine = tiles([name], msg["devices"], msg["dtypes"], msg["causal"])
            else:
                mine = probe([name], msg["devices"], msg["dtypes"])
            HOLDINGS.attribute(name, before)  # what its first calls made and keep: its cells' retained bytes
            words, note, why = self.left_behind(name, threads)
            records += [blame(noted(record, note), words) for record in mine]
            exit_why = exit_why or why
        return {"op": "numerics", "value": records}, exit_why

    def gate(self, msg: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """`attnbench check`'s gate of one problem (harness.measure.gate_rows.GateProblem, as a dict): its
        GateRow as a dict, blamed for what the variant left behind as a cell is (left_behind); and why this
        worker must exit, or None."""
        import dataclasses

        from attnbench.harness.measure.gate_rows import GateProblem, gate_request

        problem = GateProblem(**{**msg["problem"], "dtypes": tuple(msg["problem"]["dtypes"])})
        threads = _threads_now()
        row = dataclasses.asdict(gate_request(problem))
        words, note, why = self.left_behind(problem.variant, threads)
        said = blame(noted({"status": row["status"], "message": row["reason"]}, note), words)
        row.update(status=said["status"], reason=said["message"])
        return {"op": "gate", "value": row}, why

    def refreeze(self) -> None:
        """After a cell that imported modules (torch.compile brings dynamo and inductor: ~290k objects):
        freeze them too, between cells, when only the worker's caches are alive beside them."""
        from attnbench.harness.measure.timing import freeze_imports

        if len(sys.modules) != self.modules_frozen:
            freeze_imports()
            self.modules_frozen = len(sys.modules)

    def answer(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The reply to a request that is not a cell (nor stop)."""
        op = msg.get("op")
        if op == "calibrate":
            from attnbench.harness.measure.calibrate import calibrate

            return {
                "op": "calibration",
                "value": calibrate(msg["device"], msg["dtypes"], msg.get("budget_ms", 1000.0)),
            }
        if op == "example_weights":
            from attnbench.harness.measure.numerics import example_weights

            return {"op": "example_weights", "value": example_weights()}
        if op == "where":
            return {"op": "where", "value": self.where_measured(msg["device"])}
        if op == "fingerprint":
            from attnbench.harness.measure.fingerprint import collect

            return {"op": "fingerprint", "value": collect()}
        if op == "free_memory":
            return {"op": "free_memory", "value": free_memory(msg["device"])}
        return {"op": "error", "message": f"unknown op {op!r}"}


def _threads_now() -> Threads:
    """The Python threads' idents, the OS threads' tids alive now (harness.workers.children), and whether
    CUDA is initialised in this process."""
    return set(children.python_threads()), children.os_threads(), _cuda_initialized()


def _cuda_initialized() -> bool:
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


def _threads_left(before: Threads) -> list[str]:
    """The threads alive now that were not `before` (_threads_now), torch's own left out: Python's, by name,
    then the OS's that run no Python code (one a C library or ctypes started), except where CUDA was
    initialised meanwhile: its driver's threads are born then, and are not told apart by name everywhere."""
    running = children.threads_left(before[0])
    if not before[2] and _cuda_initialized():
        return running
    raw = sum(name.endswith(children.STARTED_RAW) for name in running)  # these have a tid threading lacks
    return running + children.native_threads_left(before[1], raw)


def _changed(torch_changes: list[str], process_changes: list[str]) -> str:
    """A row's words for what changed in torch's state and in the process's."""
    return "; ".join(w for w in (torch_changes and state_changed(torch_changes),
                                 process_changes and process_changed(process_changes)) if w)  # fmt: skip
