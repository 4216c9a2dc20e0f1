"""What may happen while a variant file is imported besides its variants registering: it ends the process,
or the user stops the command.

A file's code runs in attnbench's own process (the parent of a run, `check`, `bench`). `sys.exit` there is
a SystemExit, which registry.load_variant_file turns into the file's failure; `os._exit` is no exception:
it ended attnbench at once, with the file's status (0: `check` and `bench`, CI's gates, passed having
checked nothing, and said nothing). While a file is imported, `os._exit` called from the importing thread
of this process raises EndedAtImport instead (a process the file forks, or a thread it starts, still exits
as asked).

A Ctrl-C, or a SIGTERM or SIGHUP that the command line takes as one, that comes while a file's import runs
(one that hangs, or a slow one) is the user's, not the file's failure: `stopped` says the signals that
came, and load_variant_file raises the KeyboardInterrupt on, so that the command stops as at any Ctrl-C
(exit 130, 143 or 129), where a KeyboardInterrupt the file raises itself is its failure.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOPS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class EndedAtImport(BaseException):
    """A variant file called os._exit(status) while it was imported (a BaseException: a file's own
    `except Exception` does not take it)."""

    def __init__(self, status: Any) -> None:
        self.status = status
        super().__init__(f"it called os._exit({status!r}), which would have ended attnbench there")


@contextmanager
def guarded() -> Iterator[list[int]]:
    """For the block (a variant file's import): os._exit from this thread of this process raises
    EndedAtImport; the stop signals that come are noted in the list yielded, then handled as before."""
    came: list[int] = []
    pid, thread = os.getpid(), threading.current_thread()
    real = os._exit
    modules = [m for m in (os, sys.modules.get("posix")) if m is not None and m._exit is real]

    def _exit(status: int) -> None:
        if os.getpid() == pid and threading.current_thread() is thread:
            raise EndedAtImport(status)
        real(status)

    for module in modules:
        module._exit = _exit
    try:
        with _noted(came):
            yield came
    finally:
        for module in modules:
            if module._exit is _exit:
                module._exit = real


@contextmanager
def _noted(came: list[int]) -> Iterator[None]:
    """Each stop signal (STOPS) that Python handles here, appended to `came` before its handler runs; the
    handlers put back after the block (where the file did not install its own meanwhile). Only the main
    thread handles signals: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOPS}
    taken = {sig: was for sig, was in previous.items() if callable(was)}
    ours = {}
    for sig, was in taken.items():

        def note(signum: int, frame: Any, was: Any = was) -> None:
            came.append(signum)
            was(signum, frame)

        signal.signal(sig, note)
        ours[sig] = note
    try:
        yield
    finally:
        for sig, was in taken.items():
            if signal.getsignal(sig) is ours[sig]:
                signal.signal(sig, was)
