"""`attnbench history add | rebuild | check | publish`: many runs in one store, the steps in each cell's
series, and the store as a static site."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from attnbench.cli_common import BadInput, Once, bad_input
from attnbench.results.formulas import counted, printable
from attnbench.results.gate import kind_text
from attnbench.results.history import DEFAULT_STORE
from attnbench.results.thresholds import parse_step


def cmd_add(args: argparse.Namespace) -> int:
    from attnbench.results import history

    with bad_input():
        added = history.add(args.store, args.run_dirs)
    _summary("history", added, args.store)
    return 0


def _summary(verb: str, added, store: str) -> None:
    """One line of counts (runs by what was done with them, cells written, and apart from the runs the
    folders below those given that hold no run: a folder of notes is no run), then a line for each note: an
    unfinished run, another run of the same run_id, an older copy, a run without cells, a folder left out."""
    from attnbench.results.history import STATES

    runs = [a for a in added if a.state != "other"]
    counts = Counter(a.state for a in runs)
    parts = ", ".join(f"{counts[s]} {said}" for s, said in STATES.items() if counts[s]) or "none"
    read = sum(a.cells for a in runs if a.state not in ("kept", "dropped"))  # from the runs' own files
    cells = counted(read, "cell")
    said = f"{verb}: {counted(len(runs), 'run')} ({parts}; {cells} read) in {printable(store)}"
    if len(runs) < len(added):
        said += f"; {counted(len(added) - len(runs), 'folder')} holding no run left out"
    print(said, file=sys.stderr)
    for note in (n for a in added for n in a.notes):
        print(printable(note), file=sys.stderr)


def cmd_rebuild(args: argparse.Namespace) -> int:
    from attnbench.results import history

    with bad_input():
        added = history.rebuild(args.store, gone=args.gone, runs=args.run_dirs)
    _summary("rebuilt", added, args.store)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """One line per step of every series (a cell on one machine over time), one per series broken in its
    latest run (results.breaks), then the gate: exit 1 when the latest step of a series is a slowdown of more
    than --fail-on-step that the judge calls slower, its p Holm-adjusted over its machine's series that could
    be judged (steps.Step.fails), when a series is broken, when one ok in the run before the latest of a sweep
    on its machine has no row in that latest run (MISSING: results.breaks.missing), or when the store holds
    nothing ok to judge. A step with fewer than 3 runs after it has no test yet: PENDING, it fails nothing;
    one with fewer than 3 runs before it in its whole series never will: UNJUDGED, said and counted, and it
    fails nothing. The decision is results.gate's, which the published site reads too."""
    from attnbench.harness.run import rerun
    from attnbench.results import breaks, history, history_runs, steps, steps_text
    from attnbench.results.gate import MARKS, Gate

    with bad_input():
        limit, note = parse_step(args.fail_on_step) if args.fail_on_step is not None else (None, None)
        df = history.frame(args.store, machine=args.machine)
        runs = history_runs.runs(args.store, machine=args.machine)  # a run with no cells among them
        older = history.older_note(args.store)  # a store of an older version, read as it is
    for said in (note, older):
        if said:
            print(printable(said), file=sys.stderr)
    try:
        found = steps.find(df)
    except ImportError as exc:  # ruptures missing: the one line says what to install
        raise BadInput(str(exc)) from None
    gate = Gate.of(df, found, runs, limit)
    verdicts = {id(s): gate.verdict(s) for s in found} if limit is not None else {}
    for step in found:
        verdict = verdicts.get(id(step))
        judged = f"; {steps_text.verdict_text(step, limit)}" if verdict else ""
        repro = rerun.repro_text(step.after.get("path"), step.cell_id)
        mark = f"{MARKS[verdict]} " if verdict in MARKS else ""
        print(printable(f"{mark}{steps_text.describe(step)}{judged}; repro: {repro}"))
    broken, gone, series = gate.broken, gate.missing, gate.series
    for b in broken:
        repro = rerun.repro_text(b.latest.get("path"), b.cell_id)
        print(printable(f"BROKEN {breaks.describe(b)}; repro: {repro}"))
    for g in gone:
        repro = rerun.repro_text(g.before.get("path"), g.cell_id)
        print(printable(f"MISSING {breaks.describe_missing(g)}; repro: {repro}"))
    every = counted(runs["run_key"].nunique(), "run")  # a run with no cells too
    said = f"history: {counted(len(found), 'step')} in {series} series of {every}"
    said += "".join(f"; {kind_text(k, len(of))}" for k, of in (("broken", broken), ("missing", gone)) if of)
    if limit is not None and not series:
        said += f"; {kind_text('empty', 0)} (--fail-on-step fails)"
    if limit is not None:
        said += _gate_summary(found, verdicts, limit)
    print(said + _too_short(steps.lengths(df), limit is not None), file=sys.stderr)
    return 1 if gate.fails else 0


def _gate_summary(found, verdicts: dict[int, str | None], limit: float) -> str:
    """The gate's counts: the series failed, pending, that no test can judge, not significant after Holm's
    adjustment (over how many series of their machine), within their noise."""
    count = Counter(verdicts.values())
    said = f"; {kind_text('fails', count['fails'], limit)}"
    if count["pending"]:
        said += f", {count['pending']} more not judged yet (PENDING: fewer than 3 runs after it)"
    if count["untestable"]:
        said += (
            f", {count['untestable']} more that no test can ever judge (UNJUDGED: fewer than 3 runs before"
        )
        said += " it in its whole series; they fail nothing, look at them)"
    if count["holm"]:
        families = sorted({(s.machine, s.family) for s in found if verdicts.get(id(s)) == "holm"})
        over = ", ".join(f"{n} of {printable(m)}" for m, n in families)
        over = (
            f"the {families[0][1]} series of {printable(families[0][0])}"
            if len(families) == 1
            else f"each machine's series ({over})"
        )
        said += f", {count['holm']} more slower by their own test, not significant after Holm over {over}"
        said += " that could be judged"
    if count["noise"]:
        said += f", {count['noise']} more within their noise"
    if count["fell"]:
        said += f", {count['fell']} more slower only beyond the other variants while their own time fell"
    return said + " (--fail-on-step)"


def _too_short(lengths: list[int], gated: bool) -> str:
    """The summary's last words where series are too short to judge a step in (a CI job's first nights), so
    that a green gate is not read as a judged one: how many, and what --fail-on-step can fail meanwhile."""
    from attnbench.results import steps, steps_text

    short = steps_text.too_short_text(lengths)
    if not short or not gated:
        return f"; {short}" if short else ""
    if all(n < steps.RUNS_TO_JUDGE for n in lengths):
        return f"; {short}: --fail-on-step fails no slowdown until then, only a broken or missing series"
    return f"; {short}: --fail-on-step fails none of their slowdowns yet"


def cmd_publish(args: argparse.Namespace) -> int:
    """The store as a static site in --out: an index, a page per machine, one across machines, and each run's
    report copied into --out/runs/; a report drawn from other rows than its run holds now is not, and one
    line names it with the command that renders it again. --fail-on-step N% (as `check` takes it): the pages
    say what `check` at that threshold fails on, and mark each step it fails on."""
    from pathlib import Path

    from attnbench.reports import dashboard, rendered_from
    from attnbench.results import history, history_runs, steps
    from attnbench.results.writable import why_unwritable

    out = Path(args.out)
    with bad_input():
        limit, note = parse_step(args.fail_on_step) if args.fail_on_step is not None else (None, None)
        why = why_unwritable(out)
        if why:
            raise ValueError(f"--out {printable(str(out))} {why}")
        df = history.frame(args.store)
        if not len(df):
            raise ValueError(f"the history store {printable(args.store)} holds no runs; add some first")
        machines = [str(m) for m in df["machine"].unique()]  # the machines' pages are named by them
        why = dashboard.site_problem(out, Path(args.store), machines)
        if why:
            raise ValueError(f"--out {printable(str(out))} {why}")
    if note:
        print(printable(note), file=sys.stderr)
    try:
        found = steps.find(df)
    except ImportError as exc:  # ruptures missing: the one line says what to install
        raise BadInput(str(exc)) from None
    pages, stale = dashboard.publish(df, found, out, runs=history_runs.runs(args.store), limit=limit)
    print(
        f"published {len(pages)} pages into {printable(str(out))}: {printable(str(pages[0]))}",
        file=sys.stderr,
    )
    if stale:  # a report that says what its run no longer is (resumed since): named, with its command
        print(printable(rendered_from.stale_line(stale)), file=sys.stderr)
    older = history.older_note(args.store)  # a store of an older version, read as it is
    if older:
        print(printable(older), file=sys.stderr)
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
    r.add_argument(
        "run_dirs",
        nargs="*",
        metavar="RUN",
        help="runs to add as well (a run, or a folder of runs): what a damaged store, which cannot say what "
        "it recorded, is made again from",
    )
    _store_option(r)
    r.add_argument(
        "--gone",
        choices=("keep", "drop"),
        help="what to do with a recorded run whose directory is gone (by default rebuild refuses): keep what "
        "the store holds of it, or drop it",
    )
    r.set_defaults(func=cmd_rebuild)
    c = hist.add_parser(
        "check", help="the steps in each cell's series over time (one line each); a CI gate over the latest"
    )
    _store_option(c)
    c.add_argument("--machine", metavar="NAME", help="one machine's series (its name, or a part naming one)")
    c.add_argument(
        "--fail-on-step",
        metavar="N%",
        action=Once,
        help="exit 1 when the latest step of any series is a slowdown of more than N%% (e.g. 5%%; a bare "
        "N is a percent too; 0%% fails any step the judge calls slower) beyond its noise and beyond the "
        "machine's other variants, when a series is broken in the latest run, or when one ok in the run "
        "before the latest of its sweep has no row in that run (MISSING); given once",
    )
    c.set_defaults(func=cmd_check)
    pub = hist.add_parser(
        "publish", help="the store as a static site: a page per machine, one across machines (no server)"
    )
    _store_option(pub)
    pub.add_argument("--out", metavar="DIR", required=True, help="the site's folder (index.html in it)")
    pub.add_argument(
        "--fail-on-step",
        metavar="N%",
        action=Once,
        help="the threshold of the nightly gate (`history check --fail-on-step N%%`, read alike): the pages "
        "say what the gate fails on at it and mark each step it fails on; without it, they say what it "
        "fails on at any threshold and mark the significant slowdowns; given once",
    )
    pub.set_defaults(func=cmd_publish)
