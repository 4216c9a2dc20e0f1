"""A run's worker log, kept within bounds: the first LOG_HEAD_BYTES and the last LOG_TAIL_BYTES (to twice
that) of what its workers wrote, with a line between them saying how much was left out (a plug-in printing
20 MB a call filled a 168 MB worker.log). The bound is the log's, not each worker's: a run that replaces its
worker (after a crash, a timeout, a variant that changed its state) starts the next one's output where the
last one's ends, within the same head and tail (a trial's noisy plug-ins wrote 11.6 MB, 4 MB for each of
its workers).

The worker's stdout and stderr are a pipe (`open_pipe`); a thread of the process that started it (`Drain`)
copies the pipe into the worker's log as it comes, holding one read and, now and then, one tail in memory:
once more than twice LOG_TAIL_BYTES follow the head, the last LOG_TAIL_BYTES are moved up behind the head
and the note. The file always ends with the latest output, which a crashed cell's message is read from
(isolation.log_tail); a worker's last words reach it before the pipe reports its end.
"""

from __future__ import annotations

import os
import re
import threading
from multiprocessing.connection import Connection

LOG_HEAD_BYTES = 2 << 20
LOG_TAIL_BYTES = 2 << 20
_READ = 1 << 16


_NOTE = re.compile(rb"\n?\[attnbench: (\d+) bytes of the workers' output left out here\]\n")


def note(dropped: int) -> bytes:
    """The line that stands where output was left out."""
    return f"[attnbench: {dropped} bytes of the workers' output left out here]\n".encode()


class CappedLog:
    """A worker's log file from its current end on: the head written as it comes, then a tail that is cut
    back to its last `tail` bytes (from a line's start where one begins near there) whenever it doubles."""

    def __init__(self, path: str, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.end = os.fstat(self.fd).st_size  # an earlier worker's output: the log's head, or past it
        self.head_left, self.tail = max(0, head - self.end), tail
        self.mark = -1  # where the note goes: the head's end, once it is full
        self.tail_from = -1  # where the kept tail begins, behind the note
        self.dropped = 0
        if not self.head_left:  # the head is full already: this worker's output is the log's tail
            self.mark = self.tail_from = head
            found = _NOTE.match(os.pread(self.fd, 128, head))  # an earlier worker's note: its count goes on
            if found:
                self.dropped = int(found.group(1))
                self.tail_from = head + found.end()

    def write(self, data: bytes) -> None:
        if self.head_left > 0:
            now, data = data[: self.head_left], data[self.head_left :]
            self._put(now)
            self.head_left -= len(now)
            if self.head_left == 0:
                self.mark = self.tail_from = self.end
        if data:
            self._put(data)
            if self.end - self.tail_from > 2 * self.tail:
                self._cut()

    def _put(self, data: bytes) -> None:
        # after what else appended meanwhile (isolation's line on the processes it killed), never over it
        self.end = max(self.end, os.fstat(self.fd).st_size)
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, self.end)
            self.end += n
            view = view[n:]

    def _cut(self) -> None:
        keep = os.pread(self.fd, self.tail, self.end - self.tail)
        newline = keep.find(b"\n", 0, 1 << 12)
        if newline >= 0:  # from a line's start: the kept tail does not open with half a line
            keep = keep[newline + 1 :]
        self.dropped += (self.end - self.tail_from) - len(keep)
        head_ends_line = self.mark == 0 or os.pread(self.fd, 1, self.mark - 1) == b"\n"
        said = (b"" if head_ends_line else b"\n") + note(self.dropped)
        os.pwrite(self.fd, said + keep, self.mark)
        self.tail_from = self.mark + len(said)
        self.end = self.tail_from + len(keep)
        os.ftruncate(self.fd, self.end)

    def close(self) -> None:
        os.close(self.fd)


def open_pipe() -> tuple[int, Connection]:
    """(the read end, the write end as a Connection that multiprocessing passes to the worker it starts)."""
    read, write = os.pipe()
    return read, Connection(write, readable=False)


class Drain:
    """A daemon thread copying the pipe `read` into the log at `path` (CappedLog) until every writer of the
    pipe closed it: the worker and whatever it started."""

    def __init__(self, read: int, path: str, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES) -> None:
        self.read, self.log = read, CappedLog(path, head, tail)
        self.thread = threading.Thread(target=self._run, name="attnbench-worker-log", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        failed = False
        try:
            while True:
                data = os.read(self.read, _READ)
                if not data:
                    break
                if not failed:
                    try:
                        self.log.write(data)
                    except OSError:  # a full disk: the rest is read and dropped, so the worker never blocks
                        failed = True
        finally:
            os.close(self.read)
            self.log.close()

    def wait(self, timeout: float) -> None:
        """Until the pipe ended (the worker and its children are gone) or `timeout` seconds passed."""
        self.thread.join(timeout)
