"""Ctrl-C in the parent, around work that must not be cut in two: killing a worker's process tree, writing a
row, closing a run. Torch-free.

Python raises KeyboardInterrupt between any two bytecodes of the main thread. Raised inside
harness.workers.children.kill_tree after a worker was stopped (SIGSTOP) and before it was killed, it left the
worker stopped for good, and multiprocessing's exit handler then waited on it forever (seen: `timeout -s INT`
signals the command and then its whole process group, so a run gets two SIGINTs, the second while it is
closing). So:

- `held()`: a block that runs to its end; a SIGINT that comes meanwhile is delivered as the block ends (the
  handler that was in place then runs: KeyboardInterrupt, usually).
- `first_only()`: for the length of a run, the first SIGINT raises KeyboardInterrupt and later ones are noted
  and dropped: the run is stopping already, and a second KeyboardInterrupt would only cut its cleanup short.

SIGTERM (`timeout`, a batch system's time limit) and SIGHUP (a closed terminal, a lost ssh session) stop a run
as Ctrl-C does (`STOPS`): the command line makes them Ctrl-C for its whole length (`stops_as_ctrl_c`; one
ignored, as under `nohup`, stays ignored) and exits with 128 plus the signal (`stop_signal`); a run from the
Python API takes them for its own length (first_only). Both blocks hold and drop them as they do SIGINT.

Signal handlers belong to the main thread: elsewhere (a device pool's slot thread, a Ray actor's thread) both
do nothing, and no KeyboardInterrupt is ever raised there either.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The signals that stop a run as Ctrl-C does: SIGTERM (`timeout`, a batch system's time limit, `kill`) and
# SIGHUP (a closed terminal, a lost ssh session) end it with every finished row kept and its workers killed,
# not at once with the workers left computing on
STOPS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
STOPPED: list[int] = []  # the stop signals this process was sent and took as Ctrl-C, first first


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def as_ctrl_c(signum: int, frame: Any) -> None:
    """The handler of SIGTERM and SIGHUP that the command line installs (`stops_as_ctrl_c`): noted, then
    KeyboardInterrupt, as Ctrl-C."""
    STOPPED.append(signum)
    raise KeyboardInterrupt


@contextmanager
def stops_as_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise KeyboardInterrupt as Ctrl-C does, where this is the
    main thread and each has its default disposition (one ignored, as `nohup` ignores SIGHUP, stays
    ignored); put back after it."""
    STOPPED.clear()
    taken = [sig for sig in STOPS[1:] if _in_main_thread() and signal.getsignal(sig) == signal.SIG_DFL]
    for sig in taken:
        signal.signal(sig, as_ctrl_c)
    try:
        yield
    finally:
        for sig in taken:
            signal.signal(sig, signal.SIG_DFL)


def stop_signal() -> int:
    """The signal that stopped this process's command: the first SIGTERM or SIGHUP taken as Ctrl-C, else
    SIGINT (the command line exits with 128 plus it, as a shell says a process ended by it)."""
    return STOPPED[0] if STOPPED else int(signal.SIGINT)


def _taken(sig: int, previous: Any, defaults: bool) -> bool:
    """Whether a block's handler takes `sig` over from `previous`: Ctrl-C where Python handles it (not a
    process started with it ignored); SIGTERM and SIGHUP where the command line made them Ctrl-C, or,
    with `defaults`, where they would end the process at once (a run from the Python API)."""
    if sig == signal.SIGINT:
        return callable(previous)
    ours = previous is as_ctrl_c or getattr(previous, "stops_as_ctrl_c", False)  # an outer block's
    return ours or (defaults and previous == signal.SIG_DFL)


@contextmanager
def _handler(handler: Any, defaults: bool = False) -> Iterator[dict[int, Any]]:
    """The stop signals (STOPS) handled by `handler` while the block runs (`_taken`; the previous handlers
    yielded, by signal), put back after it; nothing changed where this is not the main thread."""
    if not _in_main_thread():
        yield {}
        return
    previous = {sig: signal.getsignal(sig) for sig in STOPS}
    taken = {sig: was for sig, was in previous.items() if _taken(sig, was, defaults)}
    for sig in taken:
        signal.signal(sig, handler)
    try:
        yield taken
    finally:
        for sig, was in taken.items():
            signal.signal(sig, was)


@contextmanager
def held() -> Iterator[None]:
    """Run the block with Ctrl-C (and SIGTERM, SIGHUP where taken as it) held: one that comes meanwhile is
    delivered when the block ends, to the handler that was in place (it raises KeyboardInterrupt, or,
    within first_only, is dropped when the run is stopping already), whether the block ended normally or
    raised."""
    came: list[int] = []
    previous: dict[int, Any] = {}

    def hold(signum: int, frame: Any) -> None:
        came.append(signum)

    # a held block inside takes it over, as it does an outer one's
    hold.stops_as_ctrl_c = True  # type: ignore[attr-defined]
    try:
        with _handler(hold) as previous:
            yield
    finally:  # put back first: the handler it is delivered to is the one in place again
        if came and came[0] in previous:
            previous[came[0]](came[0], None)


@contextmanager
def first_only() -> Iterator[list[int]]:
    """While the block runs, the first stop signal (Ctrl-C, SIGTERM, SIGHUP) raises KeyboardInterrupt and
    every later one is only counted (the list yielded holds one entry per signal): a run stopping at the
    first is not cut short in its cleanup by the next, such as the second signal `timeout` sends (to the
    command, then to its process group), or a second Ctrl-C. SIGTERM and SIGHUP are taken even where they
    would end the process at once (a run from the Python API): its workers are killed and its rows kept."""
    came: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        came.append(signum)
        if signum != signal.SIGINT and len(came) == 1:
            STOPPED.append(signum)
        if len(came) == 1:
            raise KeyboardInterrupt

    # a held block inside takes it over
    handler.stops_as_ctrl_c = True  # type: ignore[attr-defined]
    with _handler(handler, defaults=True):
        yield came


@contextmanager
def blocked_for_children() -> Iterator[None]:
    """Ctrl-C blocked in this thread for the block, in which it starts a process (the forkserver, a spawned
    worker) that must not handle it before it ignores it. A terminal's Ctrl-C reaches the whole process
    group; one in a run's first second reached the forkserver while Python still handled it there
    (starting up, and importing attnbench before its first preload, sigint_ignored, could ignore it), and
    printed the server's KeyboardInterrupt traceback under the run's own 'interrupted' line. A new process
    inherits the blocked signal (multiprocessing's resource tracker starts the same way): it stays pending
    there until the process ignores it and unblocks it (sigint_ignored, harness.workers.worker). Here it is
    only held up, not lost: another thread, or this one after the block, takes it to this process's
    handler. Keep the block to the start itself (a fork and an exec): the main thread waits that long."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if signal.SIGINT not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
