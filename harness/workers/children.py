"""A worker's child processes end with it: the worker adopts what its variants leave behind, the cell that
left one is named, and the parent kills what a dead or killed worker still has. Torch-free (the parent
imports it through harness.workers.isolation); Linux only, a no-op elsewhere.

- In the worker, `become_subreaper` (prctl PR_SET_CHILD_SUBREAPER): a process a variant started and
  detached (start_new_session, a double fork) is re-parented to the worker when its own parent exits,
  instead of to init, so the worker still sees it. After each cell, `kill_leftovers` kills every child still
  there (torch's own compile workers excepted, known from torch's records: `torch_helpers`) and says which,
  for the cell's row. As the worker ends it kills every child, helpers too, and leaves without running
  atexit hooks (harness.workers.worker.end): a hook a variant registered would start a process after the
  last sweep.
- A thread a variant's cell leaves running (`threads_left`: a Python thread born during the cell, alive
  after it, not one of torch's helpers, known from torch's records: `torch_helper_threads`) could start a
  process, or take the CPU, during a later cell of another variant: the worker exits after that cell, so
  what the thread does happens in no neighbour's cell. A native pool a numerical library starts as it is
  loaded (scipy's OpenBLAS, which transformers imports) runs no Python code and takes the process's name,
  as a plug-in's native thread does, and nothing in /proc says which library runs it: the worker loads
  those libraries and starts their pools as it starts (`start_blas_pools`), before its first snapshot, so
  the pool is its own and a thread born in a cell is still the cell's.
- A variant can switch its worker's subreaper flag off (prctl) before it detaches a process: the worker
  names that in the cell's row (harness.workers.process_state) and is replaced, and the process lands on
  the forkserver the worker was forked from, a subreaper as well (harness.workers.preload), where the
  parent kills it as it kills a worker (`kill_adopted`: every child of the server in a session of its own
  that is no live worker; one left in the worker's process group dies with the group).
  A worker spawned instead (pinned to CPUs) has the run's own process as its parent, which is not made a
  subreaper (it is the user's): such a process escapes.
- A run killed outright (kill -9, the OOM killer) runs no clean-up of its own; its forkserver then ends
  (its alive pipe closed), and as it ends (`end_below`) it kills its workers with everything below them,
  so that what a variant started and detached does not run on, re-parented to init. A worker spawned
  instead (pinned to CPUs: --cpu-affinity) dies with the run (PR_SET_PDEATHSIG), but what its variant
  detached from it runs on; so does everything, when the forkserver itself is killed outright.
- In the parent, `kill_tree(pid)` (harness.workers.isolation.Worker.kill): the worker is stopped, its
  descendants are found and killed, then the worker, then its process group (the worker leads its own:
  `own_group`), so nothing outlives a worker killed for a timeout or a crash either; a Ctrl-C meanwhile
  waits until they are dead (harness.workers.interrupts), so no process is left stopped.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

from attnbench.harness.workers import interrupts

PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


def torch_helpers() -> set[int]:
    """The pids of the children torch and multiprocessing started for themselves in this process, read from
    their own records, not from a command line a variant could imitate: inductor's pools of compile workers
    (torch._inductor.async_compile._pool_set: a SubprocPool's process, a process pool's processes), kept
    for every later compile, and multiprocessing's resource tracker and forkserver. Nothing is imported:
    a module not loaded has started nothing. They end with the worker (harness.workers.worker.end)."""
    pids: set[int] = set()
    compile_pools = getattr(sys.modules.get("torch._inductor.async_compile"), "_pool_set", None) or ()
    for pool in list(compile_pools):
        pid = getattr(getattr(pool, "process", None), "pid", None)  # SubprocPool
        if isinstance(pid, int):
            pids.add(pid)
        processes = getattr(pool, "_processes", None)  # a ProcessPoolExecutor: {pid: process}
        if isinstance(processes, dict):
            pids.update(p for p in processes if isinstance(p, int))
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    for pid in (getattr(tracker, "_pid", None), getattr(server, "_forkserver_pid", None)):
        if isinstance(pid, int):
            pids.add(pid)
    return pids


def torch_helper_threads() -> set[int]:
    """The idents of the Python threads torch keeps for itself in this process, from its own records:
    inductor's compile thread pool (AsyncCompile.pool, once made), the threads of its pools of compile
    workers (async_compile._pool_set: a SubprocPool's reader, "InductorSubproc", and its quiesce timer; a
    process pool's manager thread), the prefetch executor of torch.utils._functools, and tqdm's monitor
    (torch's compile progress bars start it). Nothing is imported: a module not loaded has started
    nothing."""
    executors = [getattr(sys.modules.get("torch.utils._functools"), "_prefetch_executor", None)]
    async_compile = sys.modules.get("torch._inductor.async_compile")
    pool = getattr(getattr(async_compile, "AsyncCompile", None), "pool", None)
    if pool is not None and getattr(pool, "cache_info", None) and pool.cache_info().currsize:
        executors.append(pool())  # the cached pool: made before, so this call makes nothing
    threads = [t for ex in executors for t in list(getattr(ex, "_threads", ()))]
    for workers in list(getattr(async_compile, "_pool_set", None) or ()):  # made on a many-core machine
        timer = getattr(workers, "timer", None)
        threads += [getattr(workers, "read_thread", None), getattr(timer, "background_thread", None),
                    getattr(workers, "_executor_manager_thread", None)]  # fmt: skip
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    threads.append(getattr(tqdm, "monitor", None))
    return {t.ident for t in threads if getattr(t, "ident", None) is not None}


STARTED_RAW = ", started with _thread"  # the end of the name of a thread threading does not list


def python_threads() -> dict[int, str]:
    """{ident: name} of this process's live Python threads: threading's, and those started with _thread,
    which threading does not list (sys._current_frames does: named by the function they run)."""
    out = {t.ident: t.name for t in threading.enumerate() if t.ident is not None and t.is_alive()}
    for ident, frame in sys._current_frames().items():
        if ident not in out:
            while frame.f_back is not None:
                frame = frame.f_back
            out[ident] = f"{frame.f_code.co_name}{STARTED_RAW}"
    return out


def threads_left(before: set[int]) -> list[str]:
    """The names of the Python threads alive now that were not in `before` (python_threads as a cell
    began), torch's helpers (torch_helper_threads) left out."""
    born = {ident: name for ident, name in python_threads().items() if ident not in before}
    helpers = torch_helper_threads() if born else set()
    return [name for ident, name in born.items() if ident not in helpers]


def os_threads() -> set[int]:
    """The tids of every thread of this process, Python's or not (/proc/self/task)."""
    return {int(tid) for tid in os.listdir("/proc/self/task")} if LINUX else set()


def _thread_name(tid: int) -> str:
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    except OSError:  # ended meanwhile
        return ""


# the names torch's and CUDA's own native threads give themselves (c10's pools, autograd's device threads,
# the CUDA driver's): born when a cell first needs them
NATIVE_HELPERS = ("pt_", "cuda", "torch")


# the numerical wheels whose bundled OpenBLAS (in <site-packages>/<name>.libs/) starts a native thread pool
# as it is loaded: numpy's (torch imports numpy) and scipy's, a second copy (transformers imports scipy)
BLAS_WHEELS = ("numpy", "scipy")


def start_blas_pools() -> list[str]:
    """Load the OpenBLAS each installed numerical wheel bundles (BLAS_WHEELS) and start its native pool (its
    own blas_thread_init, which starts none where one runs), so that the pool is born now, in the worker's
    own set-up, not in the cell or plug-in import that first imports the package (scipy.linalg takes 0.5 s;
    loading its OpenBLAS alone, a few ms), nor in the first cell that multiplies numpy arrays: OpenBLAS
    stops its pool as a process forks, so a worker forked from a server that imported numpy (torch does)
    has none until a large enough product starts it. The package itself is not imported: when it is, it
    loads the same file, already loaded, and starts no thread. Those threads run no Python code and take
    the process's name, so no later check could tell them from a plug-in's; born before the first
    snapshot, they are never compared. The files loaded."""
    import importlib.util

    loaded = []
    for name in BLAS_WHEELS:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a broken install, or one blocked in sys.modules
            continue
        for where in (spec and spec.submodule_search_locations) or ():
            libs = Path(where).parent / f"{name}.libs"
            for path in sorted(libs.glob("*openblas*.so*")) if libs.is_dir() else ():
                try:
                    lib = ctypes.CDLL(str(path))
                except OSError:  # built for another machine: the package's own import would fail alike
                    continue
                init = getattr(lib, "blas_thread_init", None)
                if init is not None:
                    init()
                loaded.append(str(path))
    return loaded


def native_threads_left(before: set[int], python_left: int) -> list[str]:
    """'thread <tid> (<name>)' for each thread of the OS alive now that was not in `before` (os_threads as
    a cell began), is none of threading's, nor named as torch's and CUDA's are, beyond the `python_left`
    Python threads already named (a thread started with _thread has a tid threading does not know)."""
    born = os_threads() - before
    if not born:
        return []
    born -= {t.native_id for t in threading.enumerate()}
    names = {tid: _thread_name(tid) for tid in sorted(born)}
    new = [
        f"thread {tid} ({name})"
        for tid, name in names.items()
        if name and not name.startswith(NATIVE_HELPERS)
    ]
    return new[python_left:]


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False where that is not possible."""
    if not LINUX:
        return False
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except OSError:
        return False


def own_group() -> None:
    """Lead a process group of this process's own (a worker: the parent kills the group with it)."""
    if LINUX:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass


def children(pid: int | str = "self") -> list[int]:
    """The pids of `pid`'s children, from every thread's /proc/<pid>/task/<tid>/children."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(p) for p in fh.read().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return out


def cmdline(pid: int, limit: int = 120) -> str:
    """The process's command line, printable, at most `limit` characters (0: all of it)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    text = "".join(c if c.isprintable() else "?" for c in (text[:limit] if limit else text))  # no ESC
    return text or "?"


def _steady_cmdline(pid: int, wait_s: float = 0.2) -> str:
    """cmdline(pid, 0), waiting up to wait_s while it reads empty ('?') and the process is alive: a process
    caught in the middle of exec has no command line yet (seen once: a variant's sleeper named 'pid N: ?'),
    and its row would not say what was killed."""
    deadline = time.monotonic() + wait_s
    line = cmdline(pid, 0)
    while line == "?" and _state(pid) not in ("", "Z") and time.monotonic() < deadline:
        time.sleep(0.002)
        line = cmdline(pid, 0)
    return line


def parent_of(pid: int) -> int | None:
    """The process's parent's pid, None when it is gone."""
    return _stat(pid, 0)


def _stat(pid: int, field: int) -> int | None:
    """A number of /proc/<pid>/stat's, counted from the one after the state (0: the parent, 2: the session);
    None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[-1].split()[field + 1])


def _state(pid: int) -> str:
    """The process's one-letter state (Z: a zombie), '' when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text.rsplit(")", 1)[-1].split()[0]


def _reap(pid: int, wait_s: float) -> None:
    """Collect a child's exit status (it is this process's own child) within wait_s, if it has exited."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.002)


def kill_leftovers(passes: int = 8, spare_helpers: bool = True) -> list[str]:
    """Kill this process's children (the worker's, between cells) but torch's helpers (torch_helpers; all
    of them with spare_helpers=False, as the worker ends); reap the ones that have exited. One 'pid N:
    cmdline' for each process killed; their own children, re-parented here as they die, are found by the
    next round."""
    if not LINUX:
        return []
    killed: list[str] = []
    for _ in range(passes):
        found = False
        spared = torch_helpers() if spare_helpers else set()
        for pid in children():
            if _state(pid) == "Z":  # exited already: only its status is left to collect
                _reap(pid, 0)
                continue
            if pid in spared:
                continue
            line = _steady_cmdline(pid)
            found = True
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(f"pid {pid}: {line[:120]}")
            _reap(pid, 1.0)
        if not found:
            break
    return killed


def kill_adopted(server: int, workers: set[int]) -> list[str]:
    """The parent's side, for the forkserver `server` its workers fork from, a subreaper too
    (harness.workers.preload): kill each of its children in a session of its own that is not one of
    `workers` (the live ones), with what is below it: a process a variant detached (setsid) after switching
    its own worker's subreaper flag off (prctl) landed there, not on init. What the server forked itself
    (a worker, or a process of the user's own pool where the user's code shares the server) is in its
    session; a detached process left in a worker's group dies with the group (kill_tree). One 'pid N:
    cmdline' for each process killed."""
    killed: list[str] = []
    session = _stat(server, 2)
    for pid in children(server):
        if pid in workers or _state(pid) in ("", "Z") or _stat(pid, 2) in (None, session):
            continue
        line = cmdline(pid)
        stopped: list[int] = []
        _signal(pid, signal.SIGSTOP)
        try:
            descendants(pid, stopped)
        finally:
            for child in (*stopped, pid):
                _signal(child, signal.SIGKILL)
        killed.append(f"pid {pid}: {line}")
    return killed


def end_below(server: int) -> None:
    """The forkserver's side as it ends (an atexit hook of harness.workers.preload): its run process is gone
    (the server ends once the run's end of its alive pipe closes: a run killed outright, kill -9 or the OOM
    killer, whose own clean-up never ran). Each child of the server in a process group of its own (a worker:
    own_group; a process a variant detached, adopted here) is stopped with everything below it, then all
    are killed: a worker would die with the server anyway (PR_SET_PDEATHSIG), but what a variant started and
    detached from it, the worker's child, would be re-parented to init and run on for good. What the server
    forked in its own group (a process of the user's own pool where the user's code shares the server) is
    left alone. Only in the server itself (`server`: its pid), not in a process forked from it."""
    if not LINUX or os.getpid() != server:
        return
    group = os.getpgid(0)
    stopped: list[int] = []
    try:
        for pid in children(server):
            try:
                own = os.getpgid(pid) != group
            except ProcessLookupError:
                continue
            if own and _state(pid) not in ("", "Z"):
                stopped.append(pid)
                _signal(pid, signal.SIGSTOP)
                descendants(pid, stopped)
    finally:
        for pid in stopped:
            _signal(pid, signal.SIGKILL)


def descendants(pid: int, found: list[int] | None = None) -> list[int]:
    """Every process below `pid`, each stopped (SIGSTOP) as it is found so that none forks more meanwhile;
    each is added to `found` (a list of the caller's) as it is stopped, so that a caller cut short still
    knows every process it stopped."""
    found = [] if found is None else found
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            if child in found:
                continue
            if _state(child) in ("", "Z"):
                continue
            found.append(child)  # before the signal: whatever comes after it, it is killed
            _signal(child, signal.SIGSTOP)
            todo.append(child)
    return found


def kill_tree(pid: int, *, alive: bool, group: bool) -> None:
    """The parent's side: kill the worker `pid` (alive: not yet reaped) with its descendants, stopped
    first, and (group: it leads its own process group) whatever is left in that group, e.g. the children
    of a worker that died by itself. A group's id is never given to a new process while the group has
    members, so the signal reaches only the worker's own.

    A process stopped here is always killed: Ctrl-C is held while the tree is stopped and killed
    (harness.workers.interrupts.held: delivered once it is dead), and the kills are in a `finally`. A stopped
    worker left alive would never exit, and multiprocessing's exit handler waits for it to."""
    if not LINUX:
        return
    stopped: list[int] = []
    with interrupts.held():
        try:
            if alive:
                _signal(pid, signal.SIGSTOP)
                descendants(pid, stopped)
        finally:
            for child in stopped:
                _signal(child, signal.SIGKILL)
            if alive:
                _signal(pid, signal.SIGKILL)
            if group:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
