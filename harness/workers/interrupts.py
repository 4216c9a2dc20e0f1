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

Signal handlers belong to the main thread: elsewhere (a device pool's slot thread, a Ray actor's thread) both
do nothing, and no KeyboardInterrupt is ever raised there either.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _handler(handler: Any) -> Iterator[Any]:
    """SIGINT handled by `handler` while the block runs (the previous handler yielded), put back after it;
    nothing changed where this is not the main thread or Ctrl-C is not Python's to handle (SIG_IGN, SIG_DFL:
    a process started with Ctrl-C ignored)."""
    previous = signal.getsignal(signal.SIGINT)
    if not _in_main_thread() or not callable(previous):
        yield None
        return
    signal.signal(signal.SIGINT, handler)
    try:
        yield previous
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def held() -> Iterator[None]:
    """Run the block with Ctrl-C held: a SIGINT that comes meanwhile is delivered when the block ends, to the
    handler that was in place (it raises KeyboardInterrupt, or, within first_only, is dropped when the run is
    stopping already), whether the block ended normally or raised."""
    came: list[int] = []
    previous = None
    try:
        with _handler(lambda signum, frame: came.append(signum)) as previous:
            yield
    finally:  # put back first: the handler it is delivered to is the one in place again
        if came and previous is not None:
            previous(signal.SIGINT, None)


@contextmanager
def first_only() -> Iterator[list[int]]:
    """While the block runs, the first SIGINT raises KeyboardInterrupt and every later one is only counted
    (the list yielded holds one entry per SIGINT): a run stopping at the first is not cut short in its
    cleanup by the next, such as the second SIGINT `timeout -s INT` sends, or a second Ctrl-C."""
    came: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        came.append(signum)
        if len(came) == 1:
            raise KeyboardInterrupt

    with _handler(handler):
        yield came
