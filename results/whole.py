"""Files and folders written whole or not at all: what is written goes into a temporary sibling, renamed
(a file) or whose entries are moved (a folder) into place only once it is complete.

`write_whole` is the one writer of every file attnbench replaces whole: a run's meta.json, written.json,
side files and variants.pkl, a Slurm task's records, `export --out FILE`. `written_whole` writes a folder
(a report, a site). Each temporary sibling is named for its target and for its writer (_writer_tag), so that
the next write of the same target removes those a writer killed outright (kill -9, the OOM killer) left;
a temporary file's name ends in .tmp, as a run directory's start leftovers (results.store.START_LEFTOVERS)
match it. Whether a place can be written at all is asked before anything is, in results.writable.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_whole(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, its line ends as they are; bytes as they are) to the file `path` whole or
    not at all: into a temporary file beside it (_temp_file), flushed to the disk, then renamed over it. Any
    failure (a full or read-only disk, a quota, Ctrl-C) removes the temporary file and leaves `path` as it
    was; the disk's is raised as an OSError naming `path` (not the temporary file), which each caller says
    in its one line. The file gets the mode of the one it replaces, or a new file's (0o666 less the umask,
    as open() makes one); a symbolic link is written through, to the file it names. The temporary files of
    `path` that a writer killed outright left are removed first (_remove_abandoned)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        _replace(Path(os.path.realpath(path)), raw)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None


def _replace(final: Path, raw: bytes) -> None:
    mode = final.stat().st_mode & 0o7777 if final.is_file() else None
    _remove_abandoned(final)
    fd, tmp = _temp_file(final)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:  # a short write (a file size limit, a disk filling) goes on until it raises
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _temp_file(final: Path) -> tuple[int, Path]:
    """A new temporary file beside `final`, open for writing, named for it and its writer (_writer_tag), its
    name ending in .tmp. Made with open()'s mode, the kernel taking the umask off: asking the umask would
    set it for the whole process meanwhile, and a file another thread made then would be writable by all."""
    prefix = f"{_prefix(final)}{_writer_tag(os.getpid())}-"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = final.parent / f"{prefix}{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name beside {final}")


def _prefix(final: Path) -> str:
    """How the temporary files and folders of `final` start: '.NAME.partial-', a long NAME cut short, so that
    what follows (its writer, a random part) keeps the name within the file system's 255 bytes."""
    name = final.name if len(os.fsencode(final.name)) <= 120 else final.name[:40]
    return f".{name}.partial-"


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
            return Path(tempfile.mkdtemp(prefix=f"{_prefix(final)}{tag}-", dir=final.parent))
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
    """Remove the temporary files or folders of `final` whose writer is gone: a write stopped by kill -9 (or
    the OOM killer) before it could remove its own. Only those this machine's processes made, each checked
    by pid and start time (_writer_tag); one of another machine, or of a live writer, is kept."""
    found = [*final.parent.glob(f"{glob.escape(_prefix(final))}{_host_tag()}-*")]
    if final.is_dir():
        found += final.glob(f".partial-{_host_tag()}-*")
    for tmp in found:
        if tmp.is_symlink() or not _gone(tmp):
            continue
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.is_file() and tmp.name.endswith(".tmp"):  # a file's (write_whole): its name ends so
            tmp.unlink(missing_ok=True)


def _gone(tmp: Path) -> bool:
    """Whether the writer a temporary file's or folder's name names (_writer_tag) is known gone: its process
    ended, or its pid is another process's now (a name of an older attnbench names none: kept)."""
    parts = tmp.name.rsplit(".partial-", 1)[1].split("-")
    if len(parts) < 4 or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    return _writer_tag(pid) != "-".join(parts[:3]) or not _alive(pid)


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
