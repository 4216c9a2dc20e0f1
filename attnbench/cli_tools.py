"""`attnbench list`, `env`, `check` and `profile`: what the variants are, what this machine is, whether a
variant is right, and where a cell's time goes."""

from __future__ import annotations

import argparse
import json
import sys

from attnbench.cli_common import EXIT_INTERRUPTED, BadInput, out_dir, say
from attnbench.harness.sweep import options
from attnbench.results.formulas import sentence_columns, wrap_text


def _load_files(paths: list[str] | None) -> None:
    from attnbench import variants

    for path in paths or []:
        try:
            variants.load_variant_file(path)
        except variants.VariantError as exc:
            raise BadInput(str(exc)) from None


def _availability(variant, device: str) -> str | None:
    """variant.availability(device), or, when a plug-in's own check raises, that as the reason."""
    try:
        return variant.availability(device)
    except Exception as exc:  # the plug-in's code: list it, do not end `list`
        return f"its availability check raised {type(exc).__name__}: {exc}"


def cmd_list(args: argparse.Namespace) -> int:
    if args.presets:
        from attnbench.harness.sweep.sweeps import preset_description, presets

        for name, path in presets().items():  # the description wrapped under itself, to the terminal's width
            print("\n".join(wrap_text(preset_description(path), sentence_columns(), " " * 9, f"{name:<8} ")))
        return 0
    _load_files(args.variant_file)
    from attnbench import variants
    from attnbench.reports.terminal import WORKLOADS  # the workloads `list` names, in its order
    from attnbench.variants.handed import only_workload

    rows = []
    for name, v in variants.all_variants().items():
        c = v.cap
        caps = ",".join(k for k in ("causal", "padding", "dropout", "backward") if getattr(c, k))
        caps += f",approx<={c.approximate:g}" if c.approximate else ""  # held to that rel_err
        head = f"{c.min_head_dim}..{c.max_head_dim or 'any'}"
        where = {d: _availability(v, d) for d in ("cpu", "cuda")}
        rows.append(
            {
                "name": name,
                "memory": c.memory,
                "dtypes": ",".join(c.dtypes),
                "head_dim": head,
                "supports": caps,
                # the workloads its cells may hold (check gates each): mods their kinds, varlen its work
                "workloads": {
                    k: list(w) if isinstance(w := getattr(c, k), tuple) else w for k, _ in WORKLOADS
                },
                "only": only_workload(v),  # the workload it runs alone: packed, paged, window, or None
                "layout": c.layout,
                "default": c.default,
                "source": v.source,
                "description": c.description,
                "available": {d: r is None for d, r in where.items()},
                "reasons": {d: r for d, r in where.items() if r},
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from attnbench.reports import terminal

    terminal.print_variants(terminal.fitted_console(), rows, variants.load_errors())
    return 0


def add_list(sub) -> None:
    p = sub.add_parser("list", help="registered variants, their capabilities and availability here")
    p.add_argument("--variant-file", action="append", metavar="PATH")
    p.add_argument("--presets", action="store_true", help="list the named sweep presets instead")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)


def cmd_env(args: argparse.Namespace) -> int:
    """The fingerprint a run started here records: taken in its workers, so with the environment they
    start with (harness.measure.allocator: its malloc and huge-page defaults where unset), not this
    process's own."""
    from attnbench.harness.measure.allocator import worker_environ
    from attnbench.harness.measure.fingerprint import collect

    fp = collect(environ=worker_environ())
    if args.json:
        print(json.dumps(fp, indent=1))
        return 0
    for key, val in fp.items():
        if isinstance(val, dict):
            for k2, v2 in val.items():
                print(f"{key}.{k2:<22} {v2}")
        else:
            print(f"{key:<28} {val}")
    return 0


def add_env(sub) -> None:
    p = sub.add_parser(
        "env",
        help="print the fingerprint a run started here records (its workers' environment, before --env)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_env)


def cmd_check(args: argparse.Namespace) -> int:
    """The correctness gate for every variant over causal x padding (and the numerics probe), as tables;
    each problem gated in a worker process, as `run` measures a cell (harness.tools.check.Isolated)."""
    from attnbench.harness.tools import check

    plan, timeout = check_plan(args)
    if plan.left_out:  # before the gate starts: a variant the file's imports registered is not gated
        say(plan.left_out)
    from attnbench.harness.workers.isolation import prestart

    prestart()  # the worker's torch import beside this process's own
    from attnbench.reports import terminal

    console = terminal.fitted_console()
    rows, interrupted, records = [], False, None
    try:
        with check.Isolated(plan.variant_files, timeout) as isolated:
            for row in isolated.gates(plan.problems()):
                rows.append(row)
            if args.probe:
                records = isolated.probe(list(plan.names), list(plan.devices), list(plan.dtypes))
    except KeyboardInterrupt:  # Ctrl-C or a time limit: what was checked is still shown (a GPU session's
        interrupted = True  # check cut at 195 s by flex's compiles printed nothing)
    rows = check.same_cause(rows)  # a layout bug's other failures point to it
    shape = {
        "batch": check.BATCH,
        "heads": check.HEADS,
        "head_dim": check.HEAD_DIM,
        "sequences": check.SEQUENCES,
    }
    notes = terminal.print_gate(console, rows, plan.seq_lens, **shape) if rows else {}
    no_key = terminal.no_key_table(rows, console.width, notes)
    if no_key is not None:
        console.print()
        terminal.show(console, no_key)
    _say_undeclared(plan.names)
    for line in check.notes(rows):  # never a failure: what a pass does not say
        print(f"note: {line}")
    if interrupted:
        made = f"{len(rows)} check{'' if len(rows) == 1 else 's'}"
        print(f"interrupted: the table holds the {made} made before it", file=sys.stderr)
        return EXIT_INTERRUPTED
    if records is not None:
        console.print()
        terminal.show(console, terminal.probe_table(records, console.width, notes))
    say(
        check.verdict(rows, plan.named)
    )  # the last line of a log, as bench's: what failed and the exit status
    return check.exit_status(rows, plan.named)


def check_plan(args: argparse.Namespace):
    """check's flags read and checked before any work (benchmarks/gpu_rehearse.py checks gpu_verify.sh's
    with it too): (harness.tools.check.CheckPlan, --cell-timeout); BadInput naming the flag."""
    from attnbench.harness.sweep.grammar import read_axis, split
    from attnbench.harness.tools import check
    from attnbench.results.axes import axis

    try:
        timeout = _cell_timeout(args.cell_timeout)
        plan = check.prepare(
            split(args.variants) if args.variants else None,
            read_axis(axis("device"), args.device, "--device"),  # the words `run` reads (bf16 too)
            read_axis(axis("dtype"), args.dtype, "--dtype"),
            _lengths(args.seq_len),
            variant_files=args.variant_file or [],
        )
    except ValueError as exc:  # VariantError is one
        raise BadInput(str(exc)) from None
    return plan, timeout


def _cell_timeout(text: str) -> float:
    """check's --cell-timeout, read and checked as `run` reads it (the setting's own rule); ValueError naming
    the flag."""
    from attnbench.harness.sweep.settings import BY_NAME

    return float(BY_NAME["cell_timeout"].read(text, "--cell-timeout"))


def _lengths(text: str | None) -> tuple[int, ...]:
    """check's --seq-len: the N the masks are gated at, read as `run` reads lengths (1k too), check's own
    (harness.tools.check.SEQ_LENS) when not given; ValueError naming the flag."""
    from attnbench.harness.sweep.grammar import read_axis
    from attnbench.harness.tools import check
    from attnbench.results.axes import axis

    return check.SEQ_LENS if text is None else tuple(read_axis(axis("seq_len"), text, "--seq-len"))


def _say_undeclared(names) -> None:
    """A note for each variant whose function takes a workload keyword its capability does not declare:
    no check (and no run) hands it one."""
    from attnbench import variants

    for name in names:
        untaken = variants.get(name).undeclared()
        if untaken:
            keywords = ", ".join(f"{keyword}=" for keyword, _ in untaken)
            how = ", ".join(how for _, how in untaken)
            print(f"note: {name} takes {keywords} but declares no such workload, so no check hands it one: "
                  f"register it with {how} to gate it")  # fmt: skip
        for sentence in variants.get(name).foreign():
            print(f"note: {name} {sentence}")


def add_check(sub) -> None:
    p = sub.add_parser(
        "check",
        help="the float64 correctness gate for every variant, or a --variant-file's, over causal x padding "
        "and each workload it declares (+ numerics probe)",
    )
    p.add_argument("--variants", metavar="A,B", help="default: the --variant-file's variants, else every one")
    p.add_argument("--device", default="cpu", metavar="cpu,cuda")
    p.add_argument("--dtype", default="float32,bfloat16", metavar="DTYPES")
    p.add_argument(
        "--seq-len", metavar="N,N",
        help="the N the masks are gated at; the no-key problem and the workloads at the first "
        "(default 100,300)",
    )  # fmt: skip
    p.add_argument("--probe", action="store_true", help="also run the large-logit numerics probe")
    p.add_argument("--variant-file", action="append", metavar="PATH", help="python file registering variants")
    from attnbench.harness.sweep.settings import BY_NAME

    timeout = BY_NAME["cell_timeout"]  # run's setting: its default and metavar
    p.add_argument(
        "--cell-timeout", default=str(timeout.default), metavar=timeout.metavar,
        help=f"kill a problem's worker after this long, as `run` a cell's (default {timeout.default:g})",
    )  # fmt: skip
    p.extras_hint = _check_extras_hint
    p.set_defaults(func=cmd_check)


def _check_extras_hint(extras: list[str]) -> str:
    """What `attnbench check WORD` meant, for a word check has no place for: a run directory (or a folder
    of runs) is read by `report`, and a Python file is a --variant-file; "" for anything else."""
    from pathlib import Path

    from attnbench.results.store import is_run_dir, runs_inside

    for word in extras:
        path = Path(word)
        if path.is_dir() and (is_run_dir(path) or runs_inside(path)):
            run = is_run_dir(path)
            read = f"attnbench report {word}" if run else f"attnbench report {word.rstrip('/')}/RUN"
            return (
                f" ({word} is {'a run directory' if run else 'a folder of runs'}: check gates variants, a "
                f"--variant-file's or a plug-in module's, against float64 and reads no run; a run's cells, "
                f"wrong ones too, are read by `{read}`)"
            )
        if path.suffix == ".py":
            return f" (a file of variants is given as --variant-file {word})"
    return ""


def cmd_profile(args: argparse.Namespace) -> int:
    """One cell looped under py-spy, then a few calls under torch.profiler; an index page beside the files."""
    from attnbench.harness.tools.profile import CELL_OPTIONS, prepare, profile_cell, removed_if_interrupted
    from attnbench.reports.profile_page import top_ops_text, write_pages

    if len(args.variant) != 1:
        raise BadInput(f"--variant takes one value (profile runs one cell), got {' and '.join(args.variant)}")
    try:
        plan = prepare(
            args.variant[0],
            options.given_options(vars(args), CELL_OPTIONS),
            threads=args.threads,
            seconds=args.seconds,
            rate=args.rate,
            iters=args.iters,
            native=args.native,
            use_py_spy=not args.no_py_spy,
            variant_files=args.variant_file or [],
            need_py_spy=args.py_spy,
        )
    except ValueError as exc:  # VariantError is one
        raise BadInput(str(exc)) from None
    out = out_dir(args.out, plan.default_dir_name(), "profile")
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"--out {str(out)!r} already exists and is not empty; choose another --out")
    with removed_if_interrupted(out):  # Ctrl-C: nothing half-written left, the same command runs again
        result = profile_cell(plan, out)
        md, html_path = write_pages(out)
    sys.stdout.write(top_ops_text(out))
    if not result.profiled_nothing:
        print(f"profile: {html_path} and {md}", file=sys.stderr)
    if result.error:
        print(f"attnbench: {result.error}", file=sys.stderr)
        return 1
    if args.py_spy and result.py_spy_failed:  # asked for, and not there: the profile lacks what was asked
        print(
            f"attnbench: --py-spy: {result.py_spy_failed}; the page has torch.profiler's part only",
            file=sys.stderr,
        )
        return 1
    return 0


def add_profile(sub) -> None:
    p = sub.add_parser(
        "profile", help="profile one cell: py-spy flame graph + speedscope, torch.profiler trace"
    )
    p.add_argument("--variant", action="append", required=True, metavar="NAME", help="the variant to profile")
    from attnbench.harness.tools.profile import CELL_OPTIONS

    g = p.add_argument_group("cell (one value each, checked as `attnbench run` checks them)")
    for option in CELL_OPTIONS:  # one value each: `attnbench run`'s flags, a profile's seq_len default
        g.add_argument(
            option.flag(), dest=option.key, action="append", metavar=option.one_metavar(),
            help=option.help_with_default(),
        )  # fmt: skip
    g.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    g.add_argument("--variant-file", action="append", metavar="PATH", help="python file registering variants")
    t = p.add_argument_group("profilers")
    t.add_argument(
        "--seconds",
        type=float,
        default=5.0,
        help="seconds the cell loops under py-spy, split between the flame graph and speedscope "
        "recordings (default 5)",
    )
    t.add_argument("--rate", type=int, default=100, help="py-spy samples per second (default 100)")
    t.add_argument("--native", action="store_true", help="py-spy --native: C/C++ frames too")
    spy = t.add_mutually_exclusive_group()
    spy.add_argument(
        "--py-spy", action="store_true",
        help="py-spy is required: refused where it is not found, exit status 1 where it fails (default: "
        "used where found, a failure said and the profile written without it)",
    )  # fmt: skip
    spy.add_argument("--no-py-spy", action="store_true", help="torch.profiler only")
    t.add_argument("--iters", type=int, default=5, help="calls recorded by torch.profiler (default 5)")
    p.add_argument(
        "--out", metavar="DIR", help="where to write (default: reports/out/profile-<variant>-<shape>-<time>)"
    )
    p.set_defaults(func=cmd_profile)
