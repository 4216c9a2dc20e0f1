"""The worker process's own state outside torch, which one variant's code can change for every cell after it:
a snapshot, what changed since, and putting it back. Torch-free; Linux's parts are left out elsewhere.

The worker takes it with torch's (harness.workers.torch_state) and compares both at the same points (after
every cell, probe request and problem `check` gates, and after each plug-in import: harness.workers.worker).
What is compared:

- signals: every catchable signal's Python handler, the real, virtual and profiling interval timers (an
  `alarm` is the real one) armed or not, and the main thread's blocked signals: an alarm a variant arms
  kills the worker in a neighbour's cell, a timer's handler takes its time;
- the garbage collector: its callbacks (by identity), thresholds and whether it is enabled (the timing loop
  disables it and puts it back as it found it: between cells it is the clean state's);
- the interpreter: the profile and trace hooks (sys's for this thread, threading's for new ones), the switch
  interval and the recursion limit (lowered: torch's compiler raises it itself);
- the OS: each thread's CPU affinity and nice value (a thread born later must have the process's: it
  inherits them), and whether the worker is still its orphans' subreaper (harness.workers.children);
- the resource limits (`resource.getrlimit` of every RLIMIT_*: address space, data, open files, CPU time,
  stack, ...): an address space capped by one variant makes every later cell of its worker `oom`.

The threads a variant leaves running are not state: harness.workers.children names them. A comparison reads
some 60 signal handlers, three timers and two syscalls a thread: about 25 µs (median) on the 2-core
reference VM with a worker's five threads; the 15 resource limits add about 8 µs (getrlimit each, the same
VM, 2026-12). `restore` puts back all of it but a nice value lowered without the privilege to raise it
again, a hard resource limit lowered likewise, and an armed timer the snapshot had (never re-armed), which
it says.
"""

from __future__ import annotations

import _signal
import ctypes
import gc
import operator
import os
import resource
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

LINUX = sys.platform.startswith("linux")
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
TIMERS = tuple(
    (name, getattr(signal, name)) for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
    if hasattr(signal, name)
)  # fmt: skip
# (which, name) of every resource limit, one name each (RLIMIT_OFILE is RLIMIT_NOFILE's other name)
LIMITS = tuple(sorted(
    {getattr(resource, name): name for name in sorted(dir(resource), reverse=True)
     if name.startswith("RLIMIT_")}.items()
))  # fmt: skip
# OpenMP's own binding (these variables) gives each of its threads a CPU of its own: only the threads there
# at the snapshot are then compared
_BINDING = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


def _catchable() -> tuple[signal.Signals, ...]:
    out = []
    for sig in sorted(signal.valid_signals()):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        out.append(signal.Signals(sig) if sig in signal.Signals._value2member_map_ else sig)
    return tuple(out)


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True) if LINUX else None
    except OSError:
        return None


@dataclass(frozen=True)
class Snapshot:
    handlers: tuple[Any, ...]
    timers: tuple[tuple[bool, float], ...]  # (armed, interval) of each of TIMERS
    blocked: frozenset[int]
    gc_callbacks: tuple[Any, ...]
    gc_threshold: tuple[int, ...]
    gc_enabled: bool
    hooks: tuple[Any, ...]  # sys.getprofile, sys.gettrace, threading's profile and trace hooks
    switch_interval: float
    recursion_limit: int
    threads: dict[int, tuple[frozenset[int], int]]  # tid -> (CPU affinity, nice)
    own: tuple[frozenset[int], int]  # this (main) thread's: what a thread born later inherits
    subreaper: int | None
    limits: tuple[tuple[int, int], ...]  # (soft, hard) of each of LIMITS


class State:
    """Knows what to read (built once per process), takes snapshots, says what changed and puts it back."""

    def __init__(self) -> None:
        self.signals = _catchable()
        self.libc = _libc()
        self.bound = any(os.environ.get(name) for name in _BINDING)

    def take(self) -> Snapshot:
        threads = _threads()
        return Snapshot(
            tuple(map(_signal.getsignal, self.signals)),  # signal's own wrapper makes each an enum: slower
            tuple((value > 0, interval) for value, interval in (signal.getitimer(w) for _, w in TIMERS)),
            frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])) if LINUX else frozenset(),
            tuple(gc.callbacks),
            gc.get_threshold(),
            gc.isenabled(),
            _hooks(),
            sys.getswitchinterval(),
            sys.getrecursionlimit(),
            threads,
            threads.get(threading.get_native_id(), (frozenset(), 0)),
            self._subreaper(),
            _limits(),
        )

    def _subreaper(self) -> int | None:
        if self.libc is None:
            return None
        flag = ctypes.c_int(-1)
        return (
            flag.value if self.libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 else None
        )

    def changes(self, before: Snapshot) -> list[str]:
        """What differs now from `before`, one phrase each ('SIGALRM handler SIG_DFL → spin', 'gc threshold
        700/10/10 → 1/1/1'); empty when nothing did."""
        now, out = self.take(), []
        for sig, a, b in zip(self.signals, before.handlers, now.handlers, strict=True):
            if a is not b and a != b:
                out.append(f"{_name(sig)} handler {_handler(a)} → {_handler(b)}")
        for (name, _), a, b in zip(TIMERS, before.timers, now.timers, strict=True):
            if a != b:
                out.append(
                    f"{name} {'armed' if b[0] else 'disarmed'}" + (f" (every {b[1]:g} s)" if b[1] else "")
                )
        if now.blocked != before.blocked:
            out.append(f"blocked signals {_signals(before.blocked)} → {_signals(now.blocked)}")
        if not _same(now.gc_callbacks, before.gc_callbacks):
            out.append(f"gc.callbacks changed ({len(before.gc_callbacks)} → {len(now.gc_callbacks)})")
        out += _differ("gc threshold", before.gc_threshold, now.gc_threshold)
        out += _differ("gc enabled", before.gc_enabled, now.gc_enabled)
        for name, a, b in zip(HOOKS, before.hooks, now.hooks, strict=True):
            if a is not b:
                out.append(f"{name} {_text(a)} → {_text(b)}")
        out += _differ("sys.switchinterval", before.switch_interval, now.switch_interval)
        if now.recursion_limit < before.recursion_limit:  # raised is not a change: torch's compiler raises it
            out.append(f"sys.recursionlimit {before.recursion_limit} → {now.recursion_limit}")
        out += self._thread_changes(before, now)
        out += _differ("child subreaper", before.subreaper, now.subreaper)
        for (_, name), a, b in zip(LIMITS, before.limits, now.limits, strict=True):
            if a != b:
                out.append(f"{name} {_limit(a)} → {_limit(b)}")
        return out

    def _thread_changes(self, before: Snapshot, now: Snapshot) -> list[str]:
        """'CPU affinity 0-1 → 0 on 4 threads', 'nice 0 → 19 on 4 threads': each thread against its own at
        the snapshot, a thread born since against the process's."""
        found: dict[str, int] = {}
        for tid, (cpus, nice) in now.threads.items():
            if tid not in before.threads and self.bound:
                continue
            old_cpus, old_nice = before.threads.get(tid, before.own)
            if cpus != old_cpus:
                key = f"CPU affinity {_cpus(old_cpus)} → {_cpus(cpus)}"
                found[key] = found.get(key, 0) + 1
            if nice != old_nice:
                key = f"nice {old_nice} → {nice}"
                found[key] = found.get(key, 0) + 1
        return [f"{key} on {n} thread{'s' if n != 1 else ''}" for key, n in found.items()]

    def restore(self, before: Snapshot) -> list[str]:
        """Put back what changed since `before`; what could not be put back, as `changes` words it."""
        now = self.take()
        # the timers first: a variant's timer that fired after its signal's default action was back (SIGALRM's
        # terminates) would end the worker before its row is sent
        for (_, which), a, b in zip(TIMERS, before.timers, now.timers, strict=True):
            if a != b and not a[0]:
                signal.setitimer(which, 0)  # disarmed, as it was (an armed clean timer is not re-armed)
        for sig, a, b in zip(self.signals, before.handlers, now.handlers, strict=True):
            if a is not b and a is not None:
                _quietly(signal.signal, sig, a)
        if LINUX and now.blocked != before.blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, before.blocked)
        if not _same(now.gc_callbacks, before.gc_callbacks):
            gc.callbacks[:] = before.gc_callbacks
        gc.set_threshold(*before.gc_threshold)
        (gc.enable if before.gc_enabled else gc.disable)()
        for put, a, b in zip(_HOOK_SETTERS, before.hooks, now.hooks, strict=True):
            if a is not b:  # only what changed: a C tracer (coverage's) set again would become a Python one
                put(a)
        sys.setswitchinterval(before.switch_interval)
        sys.setrecursionlimit(max(before.recursion_limit, now.recursion_limit))
        for tid, (cpus, nice) in now.threads.items():
            if tid not in before.threads and self.bound:
                continue
            old_cpus, old_nice = before.threads.get(tid, before.own)
            if cpus != old_cpus:
                _quietly(os.sched_setaffinity, tid, old_cpus)
            if nice != old_nice:
                _quietly(os.setpriority, os.PRIO_PROCESS, tid, old_nice)
        if self.libc is not None and before.subreaper is not None and now.subreaper != before.subreaper:
            self.libc.prctl(PR_SET_CHILD_SUBREAPER, before.subreaper, 0, 0, 0)
        for (which, _), a, b in zip(LIMITS, before.limits, now.limits, strict=True):
            if a != b:  # a hard limit lowered cannot be raised again without the privilege: said as left
                _quietly(resource.setrlimit, which, a)
        return self.changes(before)


HOOKS = ("sys.profile", "sys.trace", "threading.profile", "threading.trace")
_HOOK_SETTERS = (sys.setprofile, sys.settrace, threading.setprofile, threading.settrace)


def _hooks() -> tuple[Any, ...]:
    return (sys.getprofile(), sys.gettrace(), getattr(threading, "_profile_hook", None),
            getattr(threading, "_trace_hook", None))  # fmt: skip


def _threads() -> dict[int, tuple[frozenset[int], int]]:
    """tid -> (CPU affinity, nice) of every thread of this process (Linux: /proc/self/task)."""
    if not LINUX:
        return {}
    out = {}
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        try:
            out[tid] = (frozenset(os.sched_getaffinity(tid)), os.getpriority(os.PRIO_PROCESS, tid))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def _limits() -> tuple[tuple[int, int], ...]:
    out = []
    for which, _ in LIMITS:
        try:
            out.append(resource.getrlimit(which))
        except (OSError, ValueError):  # one this kernel does not know
            out.append((-2, -2))
    return tuple(out)


def _limit(pair: tuple[int, int]) -> str:
    """'unlimited' or the number, soft/hard: 'unlimited/unlimited', '1073741824/unlimited'."""
    return "/".join("unlimited" if v == resource.RLIM_INFINITY else str(v) for v in pair)


def _quietly(put: Any, *args: Any) -> None:
    try:
        put(*args)
    except (OSError, ValueError, TypeError):  # not allowed (raising a priority back), or gone meanwhile
        pass


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _differ(name: str, a: Any, b: Any) -> list[str]:
    return [] if a == b else [f"{name} {_text(a)} → {_text(b)}"]


def _name(sig: Any) -> str:
    return sig.name if isinstance(sig, signal.Signals) else f"signal {sig}"


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return "/".join(map(str, value))
    if isinstance(value, signal.Handlers):
        return value.name
    if isinstance(value, int | float | bool | str):
        return str(value)
    return getattr(value, "__qualname__", None) or type(value).__name__


def _handler(value: Any) -> str:
    """A handler as _signal.getsignal gives it: SIG_DFL and SIG_IGN as plain ints."""
    return signal.Handlers(value).name if isinstance(value, int) and value in (0, 1) else _text(value)


def _signals(sigs: frozenset[int]) -> str:
    return ",".join(_name(signal.Signals(s)) if s in signal.Signals._value2member_map_ else str(s)
                    for s in sorted(sigs)) or "none"  # fmt: skip


def _cpus(cpus: frozenset[int]) -> str:
    """'0-3,6' for {0, 1, 2, 3, 6}."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "none"
