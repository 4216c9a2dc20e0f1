"""`attnbench export`, `report`, `compare` and `import-benchmark`: commands that read runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from attnbench.cli_common import NO_ROOM, BadInput, Once, out_dir
from attnbench.results.formulas import printable, terminal_columns


def cmd_export(args: argparse.Namespace) -> int:
    from attnbench.results import RunDirError, export, load, load_meta
    from attnbench.results.writable import why_no_file

    why = why_no_file(args.out) if args.out is not None else None
    if why:  # before the runs are read
        raise BadInput(f"--out {str(args.out)!r} {why}")
    try:
        df = load(*args.run_dirs)
        text = export(df, args.format, load_meta(*args.run_dirs) if args.format == "hud" else None)
    except (RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    if args.out is not None:
        return _export_into(args.out, text)
    if sys.stdout.isatty():  # a terminal would obey a variant's control characters; a pipe or file keeps them
        text = printable(text)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()  # here, not at exit: a full disk is then this command's error, not a short file
    except OSError as exc:
        if exc.errno not in NO_ROOM:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the rest of the buffer goes nowhere
        raise BadInput(
            f"cannot write the export: {os.strerror(exc.errno).lower()}; what was written is incomplete"
        ) from None
    return 0


def _export_into(out: str, text: str) -> int:
    """The export written into the file `out`, whole or not at all (results.whole.write_whole)."""
    from attnbench.results.whole import write_whole

    kept = "is as it was" if os.path.exists(out) else "was not made"
    try:
        write_whole(out, text)
    except OSError as exc:  # a full disk, a quota, a file size limit: the file is as it was
        why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise BadInput(f"cannot write --out {out!r}: {why}; nothing was written ({out!r} {kept})") from None
    print(f"export: {printable(out)}", file=sys.stderr)
    return 0


def add_export(sub) -> None:
    p = sub.add_parser(
        "export",
        help="print the tidy results table of runs, or their ok cells for the PyTorch HUD or Bencher",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument(
        "--format", choices=["csv", "json", "hud", "bencher"], default="csv",
        help="csv, json (with raw samples), hud (PyTorch HUD records), bencher (Bencher Metric Format)",
    )  # fmt: skip
    p.add_argument(
        "--out", metavar="FILE",
        help="write the export into FILE (written whole or not at all; a file there is replaced) instead of "
        "printing it on stdout",
    )  # fmt: skip
    p.set_defaults(func=cmd_export)


def cmd_report(args: argparse.Namespace) -> int:

    from attnbench.api import write_report
    from attnbench.reports import findings
    from attnbench.results import RunDirError

    try:
        rep = write_report(args.run_dirs, args.out, args.baseline)
    except (RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    # the findings in sentences, not the fits table (218 columns): the tables are in the report
    if rep.findings is not None:
        sys.stdout.write(findings.text(rep.findings, terminal_columns()))
        sys.stdout.flush()  # before the path on stderr, so that a pipe (nox) keeps the order
    print(f"report: {rep.readme} and {rep.html} ({len(rep.figures)} figures)", file=sys.stderr)
    return 0


def add_report(sub) -> None:
    p = sub.add_parser("report", help="fits, plots, README.md and report.html from runs")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", metavar="DIR", help="where to write the report (default: reports/out/<run id>)")
    p.add_argument(
        "--baseline",
        metavar="VARIANT",
        help="variant the speed-up map is relative to (default: sdpa where it ran ok, else naive)",
    )
    p.set_defaults(func=cmd_report)


def cmd_compare(args: argparse.Namespace) -> int:
    from attnbench.reports.compare import compare_runs
    from attnbench.reports.compare_page import text_report, write_page
    from attnbench.reports.style import slug
    from attnbench.results import RunDirError, thresholds

    out = out_dir(args.out, "compare-" + slug(Path(args.run_a).name, "vs", Path(args.run_b).name), "compare")
    try:
        threshold = thresholds.parse_threshold(args.fail_above) if args.fail_above is not None else None
        run_spread, spread_note = (
            thresholds.parse_run_spread(args.run_spread) if args.run_spread is not None else (None, None)
        )
        sample_spread, sample_note = (
            thresholds.parse_sample_spread(args.sample_spread)
            if args.sample_spread is not None
            else (None, None)
        )
        if not 0 < args.alpha < 1:
            raise ValueError(f"--alpha must be in (0, 1), got {args.alpha}")
        cmp = compare_runs(
            args.run_a,
            args.run_b,
            threshold=threshold,
            alpha=args.alpha,
            normalize=args.normalize,
            control_variant=args.control,
            variant_a=args.variant_a,
            variant_b=args.variant_b,
            run_spread=run_spread,
            sample_spread=sample_spread,
        )
    except (RunDirError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    for note in (threshold.note if threshold else None, spread_note, sample_note):
        if note:
            print(printable(note), file=sys.stderr)
    for warning in cmp.warnings:  # on stderr, as every command's warnings are; the report is stdout's
        print(f"attnbench: warning: {printable(warning)}", file=sys.stderr)
    sys.stderr.flush()  # before the report, so that a log of both keeps the order
    sys.stdout.write(text_report(cmp))
    readme, html_path = write_page(cmp, out)
    print(f"compare: {readme} and {html_path}", file=sys.stderr)
    return 1 if cmp.fails else 0


def add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="the same cells on two runs: ratios with CIs, verdicts by one rule (printed), a gate",
    )
    p.add_argument(
        "run_a",
        metavar="RUN_A",
        help="the reference run (before, or machine A), or a run set: a directory of runs of the same "
        "code, one per subdirectory (attnbench interleave makes them), judged by their runs (3 or more)",
    )
    p.add_argument(
        "run_b", metavar="RUN_B", help="the run (or run set, as RUN_A) compared with it (after, or machine B)"
    )
    p.add_argument(
        "--fail-above",
        metavar="STAT:N%",
        action=Once,
        help="exit 1 if a cell's verdict is 'slower' (significant after Holm's adjustment over the cells, "
        "and the ratio's CI above 1: the rule compare prints) and B is slower than A by "
        "more than this (median: each run's median of the cell, as the table shows it; mean, min or max of "
        "its samples; N%% relative, "
        "which is also the band of 'same', or a number of ms: STAT:Xms or a bare STAT:X, as "
        "pytest-benchmark; 0%% fails any slowdown the judge calls slower), or a cell ok in A is "
        "wrong/error/crashed/timeout in B or has no row in B (MISSING); given once",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the verdict's test (a paired or Welch t-test on log times: the rule "
        "compare prints)",
    )
    p.add_argument(
        "--run-spread",
        metavar="PCT",
        action=Once,
        help="how far whole runs of identical code move on your machine, in per cent (e.g. 8; measure it "
        "with benchmarks/false_alarm.py): two single runs with no control and nothing paired cannot see "
        "it, and call a cell slower or faster only beyond it; default: the figure measured on the "
        "reference VM (results.judge.RUN_SPREAD_FLOOR)",
    )
    p.add_argument(
        "--visit-spread",
        dest="sample_spread",  # compare_runs(sample_spread=)
        metavar="PCT",
        action=Once,
        help="how far one visit of a cell moves from the next in a run on your machine, in per cent (e.g. "
        "30; 158 is 2.58x): a comparison judged by the samples of fewer than 3 visits a side cannot see it, "
        "and calls a cell slower or faster only beyond it; default: the figure measured on the reference VM "
        "(results.spreads.VISIT_SPREAD_FLOOR)",
    )
    p.add_argument(
        "--normalize",
        choices=["calibration"],
        help="rescale B's times to A's machine by the runs' calibrated ceilings (matmul TFLOP/s for "
        "compute-bound cells, copy GB/s for memory-bound ones), so a slower machine is not a slower code",
    )
    p.add_argument(
        "--control",
        metavar="VARIANT",
        help="a variant whose code is the same in both runs: every other variant is judged relative to its "
        "change at the same shape (visit by visit in runs made in rounds), so that a machine that ran "
        "slower through all of B is not taken for slower code; its own cells never fail the gate (across two "
        "machines, whose change moves each variant by what bounds it, use --normalize calibration)",
    )
    p.add_argument(
        "--variant-a",
        metavar="VARIANT",
        help="compare this variant of RUN_A with --variant-b's of RUN_B (RUN_B may be RUN_A: an A/B in one "
        "run, e.g. the old and new code of a kernel registered under two names; made in rounds, each "
        "round's two visits are paired)",
    )
    p.add_argument("--variant-b", metavar="VARIANT", help="the variant of RUN_B compared (with --variant-a)")
    p.add_argument(
        "--out", metavar="DIR", help="where to write the plot and page (default: reports/out/compare-A-vs-B)"
    )
    p.set_defaults(func=cmd_compare)


def cmd_import_benchmark(args: argparse.Namespace) -> int:
    """A pytest-benchmark JSON file of the plugin's grid (`attn_cell`) as a run directory (report, export,
    compare)."""
    from attnbench import variants
    from attnbench.results import RunDirError
    from attnbench.results.pytest_benchmark import import_file

    def known(name: str) -> dict | None:  # an older file's variants, as this installation registers them
        found = variants.all_variants().get(name)
        return found.record() if found is not None else None

    def skipped(name: str) -> None:
        print(f"skipped benchmark {printable(name)}: not an attnbench grid cell (no attnbench extra_info)",
              file=sys.stderr)  # fmt: skip

    def warned(line: str) -> None:
        print(f"attnbench: warning: {printable(line)}", file=sys.stderr)

    try:
        path, counts = import_file(
            args.json_file, args.out, capabilities=known, on_skip=skipped, on_warning=warned
        )
    except (RunDirError, ValueError) as exc:  # BenchmarkFileError is a ValueError
        raise BadInput(str(exc)) from None
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"imported {args.json_file} into {path} ({summary})", file=sys.stderr)
    print(path)
    return 0


def add_import_benchmark(sub) -> None:
    p = sub.add_parser(
        "import-benchmark",
        help="a pytest-benchmark JSON file (a test using the attn_cell fixture) as a run directory",
    )
    p.add_argument(
        "json_file",
        metavar="JSON_FILE",
        help="from pytest --benchmark-json FILE, of a test using the attn_cell fixture",
    )
    p.add_argument("--out", metavar="RUN_DIR", required=True, help="the run directory to create")
    p.set_defaults(func=cmd_import_benchmark)
