"""The `attnbench` command's first code (the console script's and `python -m attnbench`'s): attnbench's
command-line modules imported under a Ctrl-C handler of the command's own. Importing them takes a few tenths
of a second, and a Ctrl-C then printed Python's traceback and ended the process by SIGINT, not the command's
'interrupted' line and status 130 (a terminal's Ctrl-C in a run's first second)."""

import sys


def main() -> int:
    try:
        from attnbench.cli import main as command
    except KeyboardInterrupt:
        from attnbench.cli_common import EXIT_INTERRUPTED

        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return command()
