"""Parent side of the worker processes: start, ask with a deadline, notice crashes, replace.

Workers start from a clean interpreter (no inherited CUDA context, locks or variant code) and talk over a
multiprocessing Pipe. A run (or the first worker of a parent process) starts multiprocessing's forkserver
with torch and the harness's measuring modules imported (_FORKSERVER_PRELOAD: no variant, plug-in or CUDA
context is ever loaded there), before the parent imports torch itself (prestart), so that the two imports
run side by side; every worker is forked from it: a worker then costs a fork (tens of ms) instead of
a torch import (about 3 s), which a run that replaces workers (after a tainted cell, a timeout, a crash)
and a test suite of many runs pay again and again. What a worker must see before torch loads decides the
method: a worker pinned to CPUs (OpenMP sizes its pool from them as torch loads) or started under another
environment than the forkserver was (glibc reads its MALLOC_* knobs, torch THP_MEM_ALLOC_ENABLE, at their
start) is spawned instead, a fresh interpreter of its own (_context). Workers never import the user's
`__main__` (_without_main): a script runs once, guarded or not, and what it defines reaches them by value
(variants.shipped). A worker that dies or misses a deadline is killed and replaced; the cell it was on
gets `crashed` or `timeout`. Killing a worker kills the processes below it too (harness.workers.children).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.spawn
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnbench.harness.measure.allocator import worker_env
from attnbench.harness.measure.outcomes import MARK
from attnbench.harness.workers import interrupts, logcap
from attnbench.harness.workers.children import kill_adopted, kill_tree, parent_of
from attnbench.harness.workers.worker import worker_main

STARTUP_TIMEOUT_S = 180.0
JOIN_S = 10.0  # the longest a worker is waited for once it was asked to stop or killed
DRAIN_S = 2.0  # the longest its output is waited for once it is gone (what it started may hold the pipe)
# The parent's clock, taken when this module is imported (before any variant file): what it times each request
# and each mark of a timing loop with, against the worker's report of the same (outcomes.clock_mismatch)
_CLOCK = time.monotonic
# os.environ is process-wide: workers started from several threads at once (the GPU pool, one thread per
# GPU, each pinning its own CUDA_VISIBLE_DEVICES) take turns setting it, or one would inherit another's pin
_SPAWN_LOCK = threading.Lock()


# What the forkserver imports once, before any worker forks from it: first sigint_ignored (a terminal's Ctrl-C
# reaches the server too), then torch and the modules a worker's set-up imports (harness.workers.worker
# ._Server), none of which loads a variant or touches CUDA; then preload, which freezes them for the
# collector, once for every worker
_FORKSERVER_PRELOAD = [
    "attnbench.harness.workers.sigint_ignored",
    "torch",
    "attnbench.harness.workers.worker",
    "attnbench.harness.measure.cell",
    "attnbench.harness.measure.calibrate",
    "attnbench.harness.measure.fingerprint",
    "attnbench.harness.workers.preload",
]
_FORKSERVER_ENVIRON: list[dict[str, str]] = []  # the environment this process's forkserver started under
# Variables that change while a process runs and that nothing the forkserver imports reads: pytest names the
# running test in PYTEST_CURRENT_TEST; a shell says its terminal's size in COLUMNS and LINES; torch sets its
# compiler's cache folder and thread count once it has imported torch._inductor (which _FORKSERVER_PRELOAD
# does not), and the address its compiled C++ modules read a tensor's data through before it loads each of
# them. They do not count in comparing a worker's environment with the forkserver's (a spawn is a fresh torch
# import, about 3 s, for every later run of a pytest session, or of any process that compiled: in CI one
# test process that had compiled flex spawned its 75 later workers); a forked worker sets them as its parent
# has them (harness.workers.worker._start), so its environment is still the parent's. Ray sets variables
# in the process that imports it and calls ray.init (a run with --executor ray, a notebook's own ray.init):
# RAY_CLIENT_MODE, RAY_AUTH_MODE, RAY_USAGE_STATS_ENABLED and PYTHONBREAKPOINT with Ray 2.x, and they stay
# after ray.shutdown; every later worker of that process spawned. Every RAY_* variable is per call
# (PER_CALL_PREFIXES), whatever a Ray version names, and PYTHONBREAKPOINT (read when breakpoint() is called).
PER_CALL = (
    "PYTEST_CURRENT_TEST",
    "COLUMNS",
    "LINES",
    "PYTHONBREAKPOINT",
    "TORCHINDUCTOR_CACHE_DIR",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
)


PER_CALL_PREFIXES = ("RAY_",)


def _per_call(name: str) -> bool:
    return name in PER_CALL or name.startswith(PER_CALL_PREFIXES)


def _lasting(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not _per_call(k)}


def per_call_values() -> dict[str, str | None]:
    """The per-call variables a forked worker sets as this process has them now (None: unset), those the
    forkserver started with included, so that one unset since is unset in the worker too."""
    started = _FORKSERVER_ENVIRON[0] if _FORKSERVER_ENVIRON else {}
    names = {*PER_CALL, *(k for k in (*os.environ, *started) if _per_call(k))}
    return {name: os.environ.get(name) for name in sorted(names)}


def _context(config: dict[str, Any]):
    """The multiprocessing context a worker of `config` starts with, called with its environment set
    (_environment): the forkserver, unless the worker is pinned to CPUs, or this environment is not the
    one the forkserver started under (its first worker's), or this is not Linux: spawn then."""
    if config.get("cpu_affinity") or not sys.platform.startswith("linux"):
        return mp.get_context("spawn")
    if not _FORKSERVER_ENVIRON:
        _FORKSERVER_ENVIRON.append(dict(os.environ))
        mp.set_forkserver_preload(_FORKSERVER_PRELOAD)
    elif _lasting(_FORKSERVER_ENVIRON[0]) != _lasting(os.environ):
        return mp.get_context("spawn")
    return mp.get_context("forkserver")


def prestart(env: dict[str, str] | None = None) -> None:
    """Start this process's forkserver now, for workers that will start under the run's `env`: its torch
    import (about 3 s) then runs beside the parent's own (the variants, the plan) instead of after it. It is
    the forkserver _context records, so a worker of another environment is still spawned; nothing where
    workers are spawned anyway (not Linux)."""
    with _SPAWN_LOCK, _environment(worker_env(env)), _without_main():
        ctx = _context({})
        if ctx.get_start_method() == "forkserver":
            _server_running()


def _server_running() -> None:
    """This process's forkserver started where it is not running, Ctrl-C blocked in it until its first
    preload ignores it (interrupts.blocked_for_children). multiprocessing's resource tracker is started
    first: it unblocks SIGINT as it ends, which would let a Ctrl-C reach the server starting after it."""
    multiprocessing.resource_tracker.ensure_running()
    with interrupts.blocked_for_children():
        multiprocessing.forkserver.ensure_running()


def prestart_for(env: dict[str, str] | None, *, pinned: bool, dry_run: bool) -> None:
    """prestart where a run's workers fork from this process's forkserver: those not pinned to CPUs (spawned),
    and only for a run that starts any (not a dry run). Whatever the executor: the run's own worker, which
    fingerprints the machine and probes the numerics before a Ray or Slurm executor measures a cell, forks
    from it too, and its torch import then overlaps the executor's check and session (a Ray driver's join
    of the cluster in a child, its ray.init)."""
    if not pinned and not dry_run:
        prestart(env)


class WorkerDied(RuntimeError):
    """The worker exited (crash, abort, kill) before answering."""


class WorkerTimeout(RuntimeError):
    """The worker did not answer within the deadline; it has been killed."""


@contextmanager
def _environment(env: dict[str, str]):
    """os.environ with `env` set while a worker is spawned (the child inherits it from exec; allocator
    knobs such as glibc's MALLOC_* are read before any Python runs), restored afterwards."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _without_main():
    """Spawn's preparation data without the main module: a spawned child otherwise runs the parent's
    script again as __mp_main__ (all of an unguarded one, the imports and definitions of a guarded one)
    only so that objects pickled by reference to __main__ can be found, and the worker is handed none: its
    config is plain data and its variants come from files and variants.pkl. Taken under _SPAWN_LOCK."""
    prepare = mp.spawn.get_preparation_data

    def without_main(name: str) -> dict[str, Any]:
        data = prepare(name)
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
        return data

    mp.spawn.get_preparation_data = without_main
    try:
        yield
    finally:
        mp.spawn.get_preparation_data = prepare


def describe_exit(code: int | None) -> str:
    if code is None:
        return "worker did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed by {name} (signal {-code})"
    return f"worker exited with status {code}"


class Worker:
    """One worker process and its pipe."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.parent_pid = os.getpid()
        self.drain, log_pipe = _drain(config.get("log_path"))  # its output, capped (logcap)
        with _SPAWN_LOCK, _environment(worker_env(config.get("env"))), _without_main():
            ctx = _context(config)
            self.conn, child = ctx.Pipe()
            per_call = per_call_values()
            self.proc = ctx.Process(
                target=worker_main, args=(child, {**config, "per_call": per_call, "log_pipe": log_pipe}),
                daemon=True, name="attnbench-worker",
            )  # fmt: skip
            try:
                if ctx.get_start_method() == "forkserver":
                    _server_running()  # a fork of it then inherits Ctrl-C ignored
                    self.proc.start()
                else:
                    multiprocessing.resource_tracker.ensure_running()  # as it ends, it unblocks SIGINT
                    with interrupts.blocked_for_children():  # until the worker ignores it (worker._start)
                        self.proc.start()
            finally:
                if log_pipe is not None:  # the worker has its own end now; the pipe ends when it does
                    log_pipe.close()
            _LIVE.add(self)
        child.close()
        try:
            hello = self._receive(STARTUP_TIMEOUT_S, "starting")
        except BaseException:  # Ctrl-C while it starts, say: nobody else holds it to kill it
            self.kill()
            raise
        self.pid = hello["pid"]
        self.threads = hello["threads"]
        self.cpu_affinity = hello.get("cpu_affinity")  # the CPUs the worker may run on, as it reports them
        self.gc_frozen = hello.get("gc_frozen")  # objects its imports left, frozen out of its collections
        self.own_group = bool(hello.get("own_group"))  # it leads a process group of its own (kill_tree)

    def request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send msg and wait up to `timeout` seconds for the reply. The reply carries the parent's own view of
        the request: `parent_s`, its length on the parent's clock, and `parent_marks`, the parent's clock as
        each mark arrived that the worker sent at a timing loop's start or end on the way
        (harness.measure.timing.window_mark); each mark is answered at once, and the worker reads its own
        clock before sending it and after the answer (harness.measure.outcomes.clock_readings)."""
        self.log_offset = _size(self.config.get("log_path"))
        start = _CLOCK()
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death_note()) from None
        marks = []
        while True:
            reply = self._receive(max(0.0, start + timeout - _CLOCK()), msg.get("op", "?"), start)
            if reply.get("op") != MARK:
                break
            marks.append(_CLOCK())
            try:
                self.conn.send({"op": MARK})
            except (BrokenPipeError, OSError):
                raise WorkerDied(self._death_note()) from None
        return {**reply, "parent_s": _CLOCK() - start, "parent_marks": marks}

    def _receive(self, timeout: float, what: str, since: float | None = None) -> dict[str, Any]:
        """The next reply within `timeout` seconds; WorkerTimeout (the worker killed) where none came, saying
        how long the request went unanswered from `since` (its start: a request's last wait is only what
        is left of its timeout after the marks answered on the way), rounded."""
        started = _CLOCK() if since is None else since
        if not self.conn.poll(timeout):
            if not self.proc.is_alive():
                raise WorkerDied(self._death_note())
            waited = _CLOCK() - started
            self.kill()
            raise WorkerTimeout(f"no answer after {waited:.1f} s ({what}); worker killed")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise WorkerDied(self._death_note()) from None

    def _death_note(self) -> str:
        self.proc.join(timeout=JOIN_S)
        if self.drain is not None:  # its last words, still in the pipe, into its log
            self.drain.wait(DRAIN_S)
        note = describe_exit(self.proc.exitcode)
        tail = log_tail(self.config.get("log_path"), offset=getattr(self, "log_offset", 0))
        return f"{note}; {tail}" if tail else note

    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        """Kill the worker and every process below it (harness.workers.children.kill_tree: what a variant
        started and detached, too), whether it is still running or died by itself; a Ctrl-C meanwhile comes
        once it is dead and reaped (harness.workers.interrupts.held)."""
        with interrupts.held():
            kill_tree(self.proc.pid, alive=self.proc.is_alive(), group=getattr(self, "own_group", False))
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(timeout=JOIN_S)
            self.conn.close()
            _LIVE.discard(self)
            _kill_adopted(self.config.get("log_path"))
            if self.drain is not None:  # its output written whole (what it detached, and held the pipe, is
                self.drain.wait(DRAIN_S)  # dead now) before a next worker appends to the same log

    def stop(self) -> None:
        """Ask politely, then kill."""
        if self.proc.is_alive():
            try:
                self.conn.send({"op": "stop"})
                if self.conn.poll(10):
                    self.conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
            self.proc.join(timeout=JOIN_S)
        self.kill()


def _kill_adopted(log_path: str | None = None) -> None:
    """Kill what this process's forkserver adopted (harness.workers.children.kill_adopted): the processes a
    variant detached from a worker whose subreaper flag it had switched off; each is said in `log_path`
    (the run's worker.log). Under _SPAWN_LOCK: no worker is being started meanwhile, so every child of the
    server that is not in _LIVE is such a process. Only the server this process started (a forked copy of
    this process knows its parent's)."""
    server = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if not server or parent_of(server) != os.getpid():
        return
    if not _SPAWN_LOCK.acquire(timeout=JOIN_S):  # held by a thread that will never let go (at exit): skip
        return
    try:
        killed = kill_adopted(server, {w.proc.pid for w in _LIVE})
    finally:
        _SPAWN_LOCK.release()
    if killed and log_path:
        with open(log_path, "a") as log:
            log.writelines(
                f"attnbench: killed {line}, detached from a worker by a variant\n" for line in killed
            )


def _kill_left_workers() -> None:
    """At exit, before multiprocessing's own exit handler (atexit runs the later registered first), which
    waits for every child without a limit: kill each worker still there, and its tree (a worker a Ctrl-C left
    stopped never exits by itself), each wait bounded (Worker.kill)."""
    for worker in list(_LIVE):
        if worker.parent_pid != os.getpid():  # a forked copy of this process exits: not its workers
            continue
        try:
            if worker.proc.is_alive():  # one that died alone: its pid, as a group's id, may be another's now
                worker.kill()
        except Exception:  # at exit: the next worker still goes
            pass
    _kill_adopted()


# The workers started and not yet killed, for _kill_left_workers; registered after multiprocessing's exit
# handler (multiprocessing.forkserver, imported above, registered it), so that it runs before it
_LIVE: set[Worker] = set()
atexit.register(_kill_left_workers)


def _drain(log_path: str | None) -> tuple[logcap.Drain | None, Any]:
    """The thread that copies a worker's output into `log_path`, capped, and the pipe's end the worker
    writes to; (None, None) without a log, or where the log cannot be opened here (the worker then opens it
    itself, and dies saying why where it cannot)."""
    if not log_path:
        return None, None
    read, write = logcap.open_pipe()
    try:
        return logcap.Drain(read, log_path), write
    except OSError:
        os.close(read)
        write.close()
        return None, None


def _size(path: str | None) -> int:
    return Path(path).stat().st_size if path and Path(path).is_file() else 0


def _exception_line(text: list[str]) -> list[str]:
    """The exception the last Python traceback in `text` ends with, as [its line], or [] without one: a
    traceback's frames and source lines are indented, its exception line is not."""
    starts = [i for i, t in enumerate(text) if t.startswith("Traceback (most recent call last):")]
    if not starts:
        return []
    ends = [t.strip() for t in text[starts[-1] + 1 :] if t.strip() and not t[:1].isspace()]
    return ends[:1]


def log_tail(log_path: str | None, lines: int = 3, offset: int = 0) -> str:
    """The last meaningful lines the worker logged since `offset`, as one line: a fatal error's ('Fatal
    Python error: Aborted'), else a Python traceback's last (its exception: 'KeyboardInterrupt: stop'), else
    the last `lines` joined by ' | '."""
    if not log_path or not Path(log_path).is_file():
        return ""
    with open(log_path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)  # an offset past the end: logcap cut the log back since then
        fh.seek(offset if offset <= size else max(0, size - (1 << 16)))
        text = fh.read().decode(errors="replace").splitlines()
    keep = [
        t.strip() for t in text if t.strip() and "USDT:" not in t and not t.startswith("attnbench worker")
    ]
    fatal = [t for t in keep if t.startswith("Fatal Python error")]
    picked = fatal[-1:] or _exception_line(text) or keep[-lines:]
    return " | ".join(picked)[:400]
