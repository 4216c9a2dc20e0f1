"""Whether a directory can be written, asked before a command writes anything into it.

A run or a report refuses an --out it could not create or write in with one line (exit 2 in the CLI), not a
traceback half-way through: the nearest existing ancestor must be a directory this process may write in,
where a file can be made (and is at once removed): the test that permissions, read-only mounts and
special file systems all answer the same way, root or not.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def why_unwritable(path: str | os.PathLike) -> str | None:
    """None if `path` is, or can be made, a directory this process writes in; else why not, in words."""
    target = Path(path).absolute()
    existing = target
    while not existing.exists():
        if existing.parent == existing:  # pragma: no cover (the root always exists)
            break
        existing = existing.parent
    if not existing.is_dir():
        what = "is" if existing == target else f"is under {str(existing)!r}, which is"
        return f"{what} a file, not a directory"
    try:  # the one true test (permissions, read-only mounts, sysfs): a file made and removed at once
        fd, probe = tempfile.mkstemp(prefix=".attnbench-probe-", dir=existing)
    except OSError as exc:
        where = "" if existing == target else f" (in {str(existing)!r})"
        return f"cannot be written{where}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None
