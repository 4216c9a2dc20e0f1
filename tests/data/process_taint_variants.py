"""Test-only variants that change their worker process outside torch (loaded with --variant-file), each once
per process, on its first call, answering correctly itself: signals, the garbage collector, the interpreter's
hooks, a thread threading does not list, the threads' CPUs and priority, the subreaper flag, a resource
limit. What each leaves would change a later neighbour's row if the harness let it
(tests/harness/test_process_state.py; the same as the hostile plug-ins of a trial did)."""

import _thread
import ctypes
import gc
import os
import resource
import signal
import sys
import time

from attnbench import variants

_DONE: set[str] = set()


def _once(name: str) -> bool:
    if name in _DONE:
        return False
    _DONE.add(name)
    return True


def _naive(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@variants.register("ptaint_alarm", description="signal.alarm(2): SIGALRM's default action, in 2 s")
def ptaint_alarm(q, k, v, **kw):
    if _once("alarm"):
        signal.alarm(2)
    return _naive(q, k, v, **kw)


@variants.register("ptaint_itimer", description="a 10 ms interval timer whose handler burns 3 ms")
def ptaint_itimer(q, k, v, **kw):
    if _once("itimer"):
        signal.signal(signal.SIGALRM, lambda *a: _spin(0.003))
        signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
    return _naive(q, k, v, **kw)


# 0.1 ms: what the harness must see and put back is the callback and the threshold, not their cost (at 2 ms
# a collection the rest of each tainted request, the gate's float64 reference among it, spun for seconds)
@variants.register("ptaint_gc", description="a collection at every allocation, each 0.1 ms longer")
def ptaint_gc(q, k, v, **kw):
    if _once("gc"):
        gc.callbacks.append(lambda phase, info: _spin(0.0001))
        gc.set_threshold(1, 1, 1)
    return _naive(q, k, v, **kw)


@variants.register("ptaint_profile", description="a profile hook and a 1 µs switch interval")
def ptaint_profile(q, k, v, **kw):
    if _once("profile"):
        sys.setprofile(lambda frame, event, arg: None)
        sys.setswitchinterval(1e-6)
    return _naive(q, k, v, **kw)


@variants.register("ptaint_rawthread", description="a thread started with _thread, spinning for 60 s")
def ptaint_rawthread(q, k, v, **kw):
    if _once("raw"):
        _thread.start_new_thread(_spin, (60.0,))
    return _naive(q, k, v, **kw)


def _every_thread(act) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            act(int(tid))
        except OSError:
            pass


@variants.register("ptaint_affinity", description="every thread of its worker pinned to CPU 0")
def ptaint_affinity(q, k, v, **kw):
    if _once("affinity"):
        _every_thread(lambda tid: os.sched_setaffinity(tid, {0}))
    return _naive(q, k, v, **kw)


@variants.register("ptaint_nice", description="every thread of its worker at nice 19")
def ptaint_nice(q, k, v, **kw):
    if _once("nice"):
        _every_thread(lambda tid: os.setpriority(os.PRIO_PROCESS, tid, 19))
    return _naive(q, k, v, **kw)


@variants.register("ptaint_escape", description="subreaper off, then a double-forked sleeper in its session")
def ptaint_escape(q, k, v, **kw):
    if _once("escape"):
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off
        pid = os.fork()
        if pid == 0:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                os.execvp("sleep", ["sleep", "300"])
            folder = os.environ.get("ATTNBENCH_TEST_PIDS")
            if folder:
                open(os.path.join(folder, str(grandchild)), "w").close()
            os._exit(0)
        os.waitpid(pid, 0)
    return _naive(q, k, v, **kw)


@variants.register("ptaint_rlimit", description="its address space capped at its size then + 48 MiB")
def ptaint_rlimit(q, k, v, **kw):
    if _once("rlimit"):
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (size + 48 * 2**20, resource.RLIM_INFINITY))
    return _naive(q, k, v, **kw)
