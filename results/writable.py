"""Whether a directory can be written, asked before a command writes anything into it.

A run or a report refuses an --out it could not create or write in with one line (exit 2 in the CLI), not a
traceback half-way through: the nearest existing ancestor must be a directory this process may write in,
where a file can be made (and is at once removed): the test that permissions, read-only mounts and
special file systems all answer the same way, root or not.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .store import runs_held


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


PAGE_SUFFIXES = (".html", ".htm", ".md")  # an --out so named is a page's file name, not its folder


def why_no_page_folder(path: str | os.PathLike, kind: str = "report") -> str | None:
    """Why `path` is no folder for a `kind` page's files, else None: it is named as a page's file
    (`--out rep/x.html`, not a folder yet), or it holds the user's runs (`--out runs`, the folder of the
    runs: results.store.runs_held). `report` and `history publish` ask it."""
    target = Path(path)
    if target.suffix.lower() in PAGE_SUFFIXES and not target.is_dir():
        return (
            f"names a file, but --out is the folder the {kind}'s pages go into; give a folder, such as "
            f"--out {str(target.with_suffix(''))!r}"
        )
    held = runs_held(target)
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        return f"holds run directories ({shown}); write the {kind} into a folder of its own"
    return None


@contextmanager
def written_whole(target: str | os.PathLike, what: str) -> Iterator[Path]:
    """Write the folder `target` whole or not at all: yields a temporary sibling folder to write into, whose
    entries are moved into `target` (made where missing) only once the block ends without an exception.
    Ctrl-C or any failure before then removes the temporary folder and leaves `target` as it was (a new
    one is not made); the moves themselves run with SIGINT held, so no Ctrl-C cuts them in two. An entry of
    `target` that the new folder does not hold is kept (a user's file beside a report). A KeyboardInterrupt
    is raised again with a line saying that nothing was changed (`what`: 'the report', 'the site')."""
    said, final = str(target), Path(os.path.realpath(target))  # '.' has a name and a parent so
    made = [p for p in (final, *final.parents) if not p.exists()]  # the folders this call would make
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial_dir(final)
    try:
        yield tmp
    except BaseException as exc:
        _discard(tmp, made)
        if isinstance(exc, KeyboardInterrupt):
            kept = "was not made" if final in made else "is as it was"
            raise KeyboardInterrupt(f"interrupted: {what} was not written; {said!r} {kept}") from None
        raise
    try:  # a Ctrl-C while the entries move is delivered after they all moved: the folder is then whole
        with _sigint_held():
            _move_into(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _partial_dir(final: Path) -> Path:
    """The temporary folder: beside `final`, in its file system (so that moving in is renames only); inside
    it (moved out of before it is removed) where `final` is a mount point of its own or its parent cannot
    be written in."""
    if not (final.is_dir() and final.stat().st_dev != final.parent.stat().st_dev):
        try:
            return Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
        except OSError:
            if not final.is_dir():  # no target to write inside either
                raise
    return Path(tempfile.mkdtemp(prefix=".partial-", dir=final))


def _move_into(tmp: Path, final: Path) -> None:
    """Every entry of `tmp` into `final`, replacing one of its name (a folder whole: renamed aside, then
    removed), renames in one file system."""
    final.mkdir(exist_ok=True)
    aside = tmp / ".replaced"
    for entry in sorted(tmp.iterdir()):
        if entry.name == aside.name:
            continue
        dest = final / entry.name
        if dest.is_dir() and not dest.is_symlink():
            aside.mkdir(exist_ok=True)
            dest.rename(aside / entry.name)
        os.replace(entry, dest)


def _discard(tmp: Path, made: list[Path]) -> None:
    """The temporary folder, and the folders a failed write made for it (innermost first), if empty."""
    shutil.rmtree(tmp, ignore_errors=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            pass


@contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked for the block (in the main thread, where Python takes it), delivered after it."""
    held = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
