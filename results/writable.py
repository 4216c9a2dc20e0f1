"""Whether a directory can be written, asked before a command writes anything into it.

A run or a report refuses an --out it could not create or write in with one line (exit 2 in the CLI), not a
traceback half-way through: the nearest existing ancestor must be a directory this process may write in,
where a file can be made (and is at once removed): the test that permissions, read-only mounts and
special file systems all answer the same way, root or not. Writing itself, a file or a folder whole, is
results.whole's.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from .store import is_run_dir, runs_held


def why_unwritable(path: str | os.PathLike) -> str | None:
    """None if `path` is, or can be made, a directory this process writes in; else why not, in words."""
    target = Path(path).absolute()
    existing = target
    try:
        while not existing.exists():
            if existing.parent == existing:  # pragma: no cover (the root always exists)
                break
            existing = existing.parent
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        return too_long(target) or "is too long a path for this system"
    # the OS says a path is too long only once a folder of it exists: asked before any is made for it
    long = too_long(target, existing)
    if long:
        return long
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


def too_long(path: str | os.PathLike, within: str | os.PathLike = "/") -> str | None:
    """Why the OS refuses (or would refuse) `path` as too long (ENAMETOOLONG), in words, else None: a name in
    it over the limit for one name of the file system of `within` (255 bytes on most), or the whole path
    over the system's limit for a path (4096 bytes on Linux, its terminating NUL among them)."""
    name_max, path_max = _limit(within, "PC_NAME_MAX", 255), _limit(within, "PC_PATH_MAX", 4096)
    longest = max((len(os.fsencode(part)) for part in Path(path).parts), default=0)
    if longest > name_max:
        return f"is too long a path for this system: a name in it has {longest} bytes, over {name_max}"
    whole = len(os.fsencode(str(path)))
    if whole >= path_max:
        return f"is too long a path for this system: it has {whole} bytes, over {path_max - 1}"
    return None


def _limit(within: str | os.PathLike, name: str, default: int) -> int:
    try:
        return int(os.pathconf(within, name))
    except (OSError, ValueError, AttributeError):  # pragma: no cover (no pathconf: not a POSIX system)
        return default


def why_no_file(path: str | os.PathLike) -> str | None:
    """Why `path` cannot be a file written whole (results.whole.write_whole), in words, else None: too long
    a path, a directory or something other than a file (a device, a pipe), in a folder that does not exist
    (made for it by no command: a mistyped path is said, not made), under a file, inside a run directory
    (what its run wrote), or in a folder this process cannot write in. A file there is replaced, as a
    shell's `>` would."""
    target = Path(path)
    long = too_long(target.absolute())
    if long:
        return long
    if target.is_dir():
        return "is a directory, not a file: give a file's path, such as --out " + repr(str(target / "export"))
    if target.exists() and not target.is_file():
        return "is not a regular file (without --out the export goes to stdout)"
    folder = Path(os.path.realpath(target)).parent
    if not folder.exists():
        return f"is in a folder that does not exist ({str(target.absolute().parent)!r})"
    if not folder.is_dir():
        return f"is under {str(folder)!r}, which is a file, not a directory"
    if is_run_dir(folder):
        return (
            f"is inside the run directory {str(folder)!r}, which holds what its run wrote; write it elsewhere"
        )
    try:  # the one true test, as why_unwritable's
        fd, probe = tempfile.mkstemp(prefix=".attnbench-probe-", dir=folder)
    except OSError as exc:
        return f"cannot be written (in {str(folder)!r}): {exc.strerror or exc}"
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
