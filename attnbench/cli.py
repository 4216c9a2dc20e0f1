"""attnbench: is an attention implementation correct, how fast, how much memory, and how does it grow with N?

The commands: run, collect, repro, interleave, export, report, compare, list, check, env, profile,
import-benchmark (a pytest-benchmark JSON file as a run), history (many runs in one store: add,
rebuild, check).

Bad input (unknown names, bad numbers, missing files) is reported as one line on stderr with exit
status 2, before any work starts and before anything is written. Each command lives in the module of its
kind: cli_run (run, collect, repro, interleave), cli_read (export, report, compare, import-benchmark) and
cli_tools (list, env, check, profile), cli_history (history); cli_common holds what they share.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from contextlib import contextmanager

from attnbench import cli_history, cli_read, cli_run, cli_tools
from attnbench.cli_common import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    NO_ROOM,
    BadInput,
    escape_unencodable,
    expand_paths,
    fail,
    readers_may_go,
)
from attnbench.harness.workers import interrupts
from attnbench.results.formulas import printable


class OneLineParser(argparse.ArgumentParser):
    """argparse's own errors (a missing argument, an unknown or ambiguous option) in one line, as the
    commands' are, with where the usage is: argparse prints the whole usage block first. Every
    subcommand's parser is of this class (add_subparsers makes its parent's)."""

    given: tuple[str, ...] = ()  # the words parse_args was given: what an error can point at
    # a command's hint for words it takes no place for (check given a run directory): extras -> "" or " (...)"
    extras_hint = None

    def error(self, message: str):
        self.exit(
            2,
            f"{self.prog}: error: {printable(message + _dash_hint(message))} (`{self.prog} -h` for usage)\n",
        )

    def parse_args(self, args=None, namespace=None):
        """An option no parser knows is the chosen command's mistake: said by that command's parser (its
        usage is `attnbench run -h`, not `attnbench -h`), with the option it most likely meant."""
        OneLineParser.given = tuple(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = _chosen(self, parsed)
            known = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
            meant = [_meant(x, extras[i + 1 : i + 2], known) for i, x in enumerate(extras)]
            meant = [m for m in meant if m]
            hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
            if not hint and parser.extras_hint is not None:
                hint = parser.extras_hint(extras)
            parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed


def _meant(word: str, after: list[str], known: list[str]) -> str:
    """The option an unknown `word` most likely meant: --variant-file where its value (after: the next
    word) is a .py file (--variants-from kvars.py: a file of variants, not --variants), else the nearest
    known; "" for none."""
    import difflib

    option, _, value = word.partition("=")
    value = value or (after[0] if after and not after[0].startswith("-") else "")
    if option.startswith("-") and value.endswith(".py") and "--variant-file" in known:
        return "--variant-file"
    return next(iter(difflib.get_close_matches(option, known, n=1)), "")


def _dash_hint(message: str) -> str:
    """For argparse's 'argument --x: expected one argument' where the word after --x starts with '-' (a value
    such as -5%, which argparse reads as an option): how to give it."""
    import re

    said = re.fullmatch(r"argument (\S+): expected one argument", message)
    if not said:
        return ""
    words = OneLineParser.given
    for flag in said.group(1).split("/"):
        at = [i for i, w in enumerate(words[:-1]) if w == flag]
        if at and words[at[0] + 1].startswith("-"):
            value = words[at[0] + 1]
            return f" ({value!r} reads as an option: write {flag}={value})"
    return ""


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest subcommand's parser that `parsed` chose (attnbench history add: history's add)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(parsed, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


class _Version(argparse.Action):
    """`attnbench --version`: the version the fingerprint records, the commit where it knows one (a
    checkout's, or the one pip installed from; read only when asked: git is a subprocess) and the sha256 of
    the code, which tells two installs of one version apart."""

    def __call__(self, parser, namespace, values, option_string=None):
        from attnbench.harness.measure.fingerprint import attnbench_version, code_sha256, git_commit

        commit = git_commit()
        said = [f"commit {commit}"] if commit else []
        print(f"attnbench {attnbench_version()} ({', '.join([*said, f'code sha256 {code_sha256()}'])})")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="attnbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, nargs=0, help="print attnbench's version and commit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        cli_run.add_run,
        cli_run.add_bench,
        cli_run.add_collect,
        cli_run.add_repro,
        cli_run.add_interleave,
        cli_read.add_export,
        cli_tools.add_list,
        cli_tools.add_check,
        cli_tools.add_env,
        cli_read.add_report,
        cli_read.add_compare,
        cli_tools.add_profile,
        cli_read.add_import_benchmark,
        cli_history.add_history,
    ):
        add(sub)
    return parser


@contextmanager
def _one_line_warnings():
    """A skipped row (torn or corrupt) or uncollected shards reach the user as one line, as errors do:
    Python's default format adds the file and source line of the warnings.warn call, which says nothing
    to them. Each is said once: a command that reads a run's rows twice (a report: its rows, then what
    changed them) said a skipped row twice."""
    import warnings

    from attnbench.results import RowWarning, UncollectedWarning
    from attnbench.results.integrity import ChangedWarning

    show = warnings.showwarning
    said: set[str] = set()

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (RowWarning, UncollectedWarning, ChangedWarning)):
            text = f"attnbench: warning: {printable(str(message))}"
            if text not in said:
                said.add(text)
                print(text, file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning
    try:
        yield
    finally:
        warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args = None
    if argv[:1] == ["interleave"] and "--" in argv:  # what follows -- is every run's: not interleave's
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1 :]
    escape_unencodable()
    try:  # building the parser imports each command's modules: a Ctrl-C meanwhile is the command's too
        args = expand_paths(build_parser().parse_args(argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if run_args is not None:
        args.run_args = run_args
    with readers_may_go():  # `| head -1`: the status is still the command's (a gate's is its verdict)
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    """The command's status: its own, or how it failed."""
    try:  # SIGTERM and SIGHUP end a command as Ctrl-C does: its clean-up runs, its line is said
        with interrupts.stops_as_ctrl_c(), _one_line_warnings():
            return _stopped_by(args.func(args))
    except BadInput as exc:
        return fail(_file_hint(str(exc), args))
    except KeyboardInterrupt as exc:  # a run's own says how to finish it (attnbench.api.RunInterrupted)
        print(printable(str(exc)) or "interrupted", file=sys.stderr)
        return _stopped_by(EXIT_INTERRUPTED)
    except OSError as exc:  # a full disk (or a quota, a read-only mount) while writing a page or a file
        if exc.errno == errno.ENAMETOOLONG and exc.filename:  # a path given that the OS cannot take
            from attnbench.results.writable import too_long

            why = too_long(exc.filename) or "is too long a path for this system"
            return fail(f"{str(exc.filename)!r} {why}")
        if exc.errno not in NO_ROOM:
            return _internal_error()
        where = exc.filename or getattr(args, "out", None) or "the output"
        return fail(f"cannot write {where}: {os.strerror(exc.errno).lower()}")
    except Exception:
        return _internal_error()


def _file_hint(message: str, args: argparse.Namespace) -> str:
    """An unknown variant's line, where the command takes --variant-file and was given none, with how a
    variant defined in a file is named: its name alone finds nothing the file did not register. Not where a
    plug-in failed to load, which the line names as the likelier cause."""
    if not message.startswith("unknown variant") or not hasattr(args, "variant_file") or args.variant_file:
        return message
    names, sep, rest = message.partition("; ")  # the names, then the failed plug-ins or the known names
    if " failed to load: " in rest.partition("known: ")[0]:
        return message
    return f"{names} (a variant defined in a file needs --variant-file FILE){sep}{rest}"


def _stopped_by(code: int) -> int:
    """A command's exit status, where it was interrupted (EXIT_INTERRUPTED, 130: 128 + SIGINT) 128 plus
    the signal that stopped it, as a shell says: 143 after SIGTERM, 129 after SIGHUP."""
    return 128 + interrupts.stop_signal() if code == EXIT_INTERRUPTED else code


def _internal_error() -> int:
    """An exception no command expected (attnbench's bug): its traceback, and EXIT_INTERNAL, not the 1 by
    which check, bench and compare --fail-above say a wrong kernel or a regression (Python's own status for
    an uncaught exception), which a CI gate would take for their verdict."""
    import traceback

    traceback.print_exc()
    said = f"internal error (exit status {EXIT_INTERNAL}): please report it with the traceback above"
    print(f"attnbench: {said}", file=sys.stderr)
    sys.stderr.flush()
    return EXIT_INTERNAL
