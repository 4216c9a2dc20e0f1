"""Whether a directory can be written, asked before a command writes anything into it.

A run or a report refuses an --out it could not create or write in with one line (exit 2 in the CLI), not a
traceback half-way through: the nearest existing ancestor must be a directory this process may write in,
where a file can be made (and is at once removed): the test that permissions, read-only mounts and
special file systems all answer the same way, root or not.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import signal
import socket
import tempfile
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
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
    """Why `path` cannot be a file written whole (write_whole), in words, else None: too long a path, a
    directory or something other than a file (a device, a pipe), in a folder that does not exist (made for it
    by no command: a mistyped path is said, not made), under a file, inside a run directory (what its run
    wrote), or in a folder this process cannot write in. A file there is replaced, as a shell's `>` would."""
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


def write_whole(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8, its line ends as they are) to the file `path` whole or not at all: into a
    temporary file beside it, flushed to the disk, then renamed over it; any failure (a full disk, Ctrl-C)
    removes the temporary file and leaves `path` as it was. The file gets the mode of the one it replaces,
    or a new file's (0o666 less the umask); a symbolic link is written through, to the file it names."""
    final = Path(os.path.realpath(path))
    if final.is_file():
        mode = final.stat().st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.partial-", dir=final.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
    is raised again with a line saying that nothing was changed (`what`: 'the report', 'the site'). The
    temporary folders of `target` left by a writer killed outright (kill -9) are removed first
    (_remove_abandoned)."""
    said, final = str(target), Path(os.path.realpath(target))  # '.' has a name and a parent so
    made = [p for p in (final, *final.parents) if not p.exists()]  # the folders this call would make
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        _remove_abandoned(final)
        tmp = _partial_dir(final)
    except BaseException:  # the folders made for it go too
        _discard(None, made)
        raise
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
    be written in. Its name says which process writes it (_writer_tag)."""
    tag = _writer_tag(os.getpid())
    if not (final.is_dir() and final.stat().st_dev != final.parent.stat().st_dev):
        try:
            return Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-{tag}-", dir=final.parent))
        except OSError:
            if not final.is_dir():  # no target to write inside either
                raise
    return Path(tempfile.mkdtemp(prefix=f".partial-{tag}-", dir=final))


def _writer_tag(pid: int) -> str:
    """'HOST-PID-START': the machine (a hash of its name: a shared file system), the process and when it
    started (the kernel's clock ticks since boot, from /proc; 0 elsewhere), so that a pid used again by
    another process is not taken for the writer."""
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "0"
    return f"{_host_tag()}-{pid}-{start}"


def _host_tag() -> str:
    """This machine in a temporary folder's name: a hash of its host name (a shared file system)."""
    return f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFFFF:06x}"


def _remove_abandoned(final: Path) -> None:
    """Remove the temporary folders of `final` whose writer is gone: a report or site stopped by kill -9
    (or the OOM killer) before it could remove its own. Only those this machine's processes made, each
    checked by pid and start time (_writer_tag); one of another machine, or of a live writer, is kept."""
    host = _host_tag()
    found = [*final.parent.glob(f".{glob.escape(final.name)}.partial-{host}-*")]
    if final.is_dir():
        found += final.glob(f".partial-{host}-*")
    for tmp in found:
        parts = tmp.name.rsplit(".partial-", 1)[1].split("-")
        if len(parts) < 4 or not parts[1].isdigit() or not tmp.is_dir() or tmp.is_symlink():
            continue
        pid = int(parts[1])
        if _writer_tag(pid) != "-".join(parts[:3]) or not _alive(pid):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: there
        return True
    return True


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


def _discard(tmp: Path | None, made: list[Path]) -> None:
    """The temporary folder, and the folders a failed write made for it (innermost first), if empty."""
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            pass


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP blocked for the block (in the main thread, where Python takes them: the
    command line takes the last two as Ctrl-C), delivered after it."""
    held = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    stops = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
