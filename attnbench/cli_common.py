"""What every `attnbench` command shares: how bad input and a sentence for the person at the terminal look."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnbench.results.formulas import printable, sentence_columns, wrap_text

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_INCOMPLETE = 3  # a run that ended with cells it planned not measured (an array task cancelled)
EXIT_INTERNAL = 70  # attnbench's own bug (sysexits' EX_SOFTWARE): never 1, which check, bench and compare say
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # what the machine, not the command, got wrong


class Kept:
    """A command's stdout or stderr, whose reader may go away before the command ends (`| head -1`,
    `| grep -q FAIL`): what is written after goes nowhere, and the command goes on to its end and its own
    exit status. A gate's status is its verdict whatever its reader did: a BrokenPipeError let out of a write
    ended `history check --fail-on-step 5% | head -1` with status 0 on a failing gate, its summary unsaid."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._went()
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._went()

    def _went(self) -> None:
        """The stream's descriptor pointed at /dev/null: what its buffer still holds, and the interpreter's
        flush at exit, go nowhere (a flush that fails at exit makes the status 120)."""
        self.gone = True
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):  # a stream with no descriptor (io.StringIO)
            return
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self._stream, name)


@contextmanager
def readers_may_go() -> Iterator[None]:
    """sys.stdout and sys.stderr Kept for a command's length; what stdout holds is written (or dropped) before
    the command's status is returned."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Kept(out), Kept(err)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = out, err


class BadInput(ValueError):
    """A user error found before any work started."""


def fail(msg: str) -> int:
    print(f"attnbench: error: {printable(msg)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def escape_unencodable() -> None:
    """Every command's stdout writes a character its encoding cannot hold (the ± of compare's rule on an
    ASCII-only stream: PYTHONIOENCODING=ascii, LANG=C) as its escape (\\xb1), as Python's stderr always
    does: the one place for it, called once by attnbench.cli.main before a command runs."""
    stream = sys.stdout
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="backslashreplace")


def tell(text: str) -> None:
    """A sentence for the person at the terminal, on stderr, wrapped to its width (a path kept whole)."""
    print("\n".join(wrap_text(printable(text), sentence_columns(sys.stderr), "  ")), file=sys.stderr)


def say(text: str) -> None:
    """A line of what a command found, on stdout, wrapped to the terminal's width."""
    print("\n".join(wrap_text(printable(text), sentence_columns(), "    ")))


# every command's arguments that name a file or a folder (argparse's dest): `--out=~/x` reaches argparse with
# its `~` unexpanded (a shell expands a `~` only at a word's start), and a `~` taken literally makes `./~`
PATH_ARGS = ("out", "store", "run_dir", "run_dirs", "run_a", "run_b", "json_file", "config", "rerun",
             "variant_file")  # fmt: skip


def expand_paths(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with a leading `~` (or `~user`) of each path expanded, as a shell would have."""
    for dest in PATH_ARGS:
        value = getattr(args, dest, None)
        if isinstance(value, str):
            setattr(args, dest, os.path.expanduser(value))
        elif isinstance(value, list):
            setattr(args, dest, [os.path.expanduser(v) if isinstance(v, str) else v for v in value])
    return args


class Once(argparse.Action):
    """An option that may be given once: a repeat is refused (one line, exit 2), not taken as the last value,
    so that `--fail-above median:5% --fail-above median:500%` is never a 500% gate by accident."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = f"_given_{self.dest}"
        if hasattr(namespace, given):
            before = getattr(namespace, self.dest)
            parser.error(f"{option_string} given twice ({before} and {values}): give it once")
        setattr(namespace, given, True)
        setattr(namespace, self.dest, values)


@contextmanager
def bad_input() -> Iterator[None]:
    """What the harness refuses (a ValueError: RunDirError, VariantError and the rules' errors are ones),
    as the command's bad input: one line, exit status 2."""
    try:
        yield
    except BadInput:
        raise
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def out_dir(out: str | None, default: str, kind: str) -> Path:
    """--out DIR of a `kind` page (default reports/out/NAME, git-ignored); refused if it is a run, a file,
    or holds a page by that page's name that attnbench did not write."""
    from attnbench.page_out import report_dir

    with bad_input():
        return report_dir(out, default, kind)
