"""`attnbench history add | rebuild | check`: many runs in one store, and the steps in each cell's series."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from attnbench.cli_common import bad_input
from attnbench.results.formulas import printable
from attnbench.results.history import DEFAULT_STORE


def cmd_add(args: argparse.Namespace) -> int:
    from attnbench.results import history

    with bad_input():
        added = history.add(args.store, args.run_dirs)
    _summary("history", added, args.store)
    return 0


def _summary(verb: str, added, store: str) -> None:
    counts = Counter(a.state for a in added)
    parts = ", ".join(f"{counts[s]} {s}" for s in ("added", "updated", "unchanged") if counts[s])
    cells = sum(a.cells for a in added)
    print(f"{verb}: {len(added)} runs ({parts}; {cells} cells read) in {printable(store)}", file=sys.stderr)


def cmd_rebuild(args: argparse.Namespace) -> int:
    from attnbench.results import history

    with bad_input():
        added = history.rebuild(args.store)
    _summary("rebuilt", added, args.store)
    return 0


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="PATH",
        default=DEFAULT_STORE,
        help=f"the history store, one SQLite file (default: {DEFAULT_STORE})",
    )


def add_history(sub) -> None:
    p = sub.add_parser(
        "history", help="many runs in one store, and the steps in each cell's series over time"
    )
    hist = p.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    a = hist.add_parser("add", help="record runs (a run, a run set, a folder of runs) into the store")
    a.add_argument(
        "run_dirs", nargs="+", metavar="RUN", help="a run directory, or a folder with runs below it"
    )
    _store_option(a)
    a.set_defaults(func=cmd_add)
    r = hist.add_parser("rebuild", help="make the store again from the run directories it recorded")
    _store_option(r)
    r.set_defaults(func=cmd_rebuild)
