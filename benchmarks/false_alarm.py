"""How often `attnbench compare --fail-above median:5%` cries wolf on identical code, and whether it catches a
planted 10% slowdown; with one worker process per cell (before) and with --processes 3 (after).

    python benchmarks/false_alarm.py --out results/reference/false-alarm-epyc-2core.json

False alarms: for each --processes K (1 and 3 by default), R runs (default 5) of the same command,
`attnbench run --variants naive,chunked --seq-len 256..1024 --threads 1 --processes K`, the runs of the two
settings interleaved (so that the machine's load falls on both alike); every pair of them (C(5, 2) = 10) is
compared with the gate, each way round as written (earlier run as A). A pair fails when the gate finds a
regression, exactly what makes `attnbench compare` exit 1 (reports.compare.compare_runs, called here in
process). Target: 0 failing pairs.

Power: one run per K of the same variants with chunked replaced by `chunked_planted`
(benchmarks/planted_slowdown.py: chunked, then busy for a tenth of its time), its rows relabelled `chunked`
in a copy of the run (compare pairs cells by identity, the variant name included), compared as B against
each of the R identical runs of the same K as A. Target: caught (the gate fails on the planted cells) in
every comparison.

With --control VARIANT (e.g. naive) every comparison is judged a second time from the same runs, relative to
that variant (`attnbench compare --control`, results.judge): its change between two runs is the
machine's, so a run that was slower as a whole is not taken for slower code.

With --set-size K every side is a run set (results.runset) of K runs of the same command, made one after
another, and compare judges each cell by the spread between a side's runs (results.judge): the
variance from one run to the next, which no run's own samples hold, is then in the interval. The R sets
give C(R, 2) pairs of identical sets; the planted slowdown is a set of K runs, made one after every R/K
sets (spread over the batch, as the identical ones are), compared with each of the R sets.

With --in-run every run also measures `chunked_twin` (chunked under another name) and `chunked_planted`
beside chunked, visited one after another in each round, and each run's A/B is judged on its own
(`attnbench compare RUN RUN --variant-a chunked --variant-b chunked_twin`, then `chunked_planted`): each
round's two visits paired (results.judge). False alarms: twin runs failing the gate (target 0); power:
planted runs caught (target all).

The JSON records every pair's verdict counts and regressions, the power comparisons, /proc/loadavg before
and after (how busy the machine was), and the commit: figures are as measured, never edited.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's attnbench (attnbench/__init__.py maps its folders)
from attnbench.harness.measure.fingerprint import cpu_model, git_commit  # noqa: E402

PLANTED = ROOT / "benchmarks" / "planted_slowdown.py"
DEFAULT_OUT = ROOT / "results" / "reference" / "false-alarm-epyc-2core.json"


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr, exit 2 (argparse would print its usage first)."""

    def error(self, message: str):
        print(f"false_alarm.py: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--runs", type=int, default=5, help="identical runs per --processes value (>= 5: 10 pairs)"
    )
    p.add_argument("--processes", default="1,3", help="the --processes values to measure, comma-separated")
    p.add_argument(
        "--set-size",
        type=int,
        default=1,
        help="runs per side: each of the --runs is a run set of this many runs made one after another "
        "(results.runset), judged by the spread between its runs (>= 3 to judge by it)",
    )
    p.add_argument("--variants", default="naive,chunked")
    p.add_argument("--seq-len", default="256..1024")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fail-above", default="median:5%")
    p.add_argument(
        "--control",
        help="also judge every pair relative to this variant (compare --control), from the same runs",
    )
    p.add_argument("--run-arg", action="append", default=[], help="one more `attnbench run` argument")
    p.add_argument(
        "--in-run",
        action="store_true",
        help="also measure chunked_twin and chunked_planted in every run and judge each run's A/B "
        "(compare RUN RUN --variant-a chunked --variant-b chunked_twin, and chunked_planted)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="with --set-size K: groups of three run sets (A, B identical, and planted) made interleaved, "
        "run i of each back to back; A against B and each against the planted set, runs paired",
    )
    p.add_argument(
        "--rejudge",
        action="store_true",
        help="make no run: judge again the runs an earlier measurement kept in --work (the same "
        "--runs, --set-size, --processes, --interleave), with this checkout's compare",
    )
    p.add_argument("--work", help="where the runs go (default: a temporary directory, removed after)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON written")
    args = p.parse_args(argv)
    if args.runs < 5:
        p.error(f"--runs must be at least 5 (10 pairs of identical runs, or 5 groups), got {args.runs}")
    try:
        args.processes = [int(x) for x in args.processes.split(",")]
    except ValueError:
        p.error(f"--processes takes positive integers, comma-separated, got {args.processes!r}")
    if (
        not args.processes
        or any(k < 1 for k in args.processes)
        or len(set(args.processes)) != len(args.processes)
    ):
        p.error(f"--processes takes distinct positive integers, got {args.processes!r}")
    if args.set_size < 1:
        p.error(f"--set-size must be at least 1, got {args.set_size}")
    if args.interleave and args.set_size < 3:
        p.error(f"--interleave pairs the runs of sets: give --set-size 3 or more, got {args.set_size}")
    if args.set_size > 1 and args.in_run:
        p.error("--in-run judges the A/B inside each run: give it without --set-size")
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    if "chunked" not in args.variants.split(","):
        p.error("--variants must include chunked (the planted slowdown is chunked's)")
    names = args.variants.split(",")
    if args.control is not None and (args.control == "chunked" or args.control not in names):
        p.error(f"--control must be one of --variants other than chunked, got {args.control!r}")
    from attnbench.reports.compare import parse_threshold

    try:
        args.threshold = parse_threshold(args.fail_above)
    except ValueError as exc:
        p.error(str(exc))
    if args.rejudge and not (args.work and Path(args.work).is_dir() and any(Path(args.work).iterdir())):
        p.error("--rejudge judges the runs kept in --work DIR: give the folder of an earlier measurement")
    if not args.rejudge and args.work and Path(args.work).exists() and any(Path(args.work).iterdir()):
        p.error(f"--work {args.work!r} is not empty")
    return args


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def attnbench_run(out: Path, args: argparse.Namespace, k: int, variants: str, extra: list[str] = ()) -> float:
    """One `attnbench run` in a fresh interpreter (as a user runs it); its wall time in s."""
    cmd = [sys.executable, "-m", "attnbench", "run", "--variants", variants, "--seq-len", args.seq_len,
           "--threads", str(args.threads), "--processes", str(k), "--out", str(out), "-q",
           *extra, *args.run_arg]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's attnbench, in the workers too
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"false_alarm.py: `{' '.join(cmd)}` failed ({done.returncode}): {done.stderr[-400:]}"
        )
    return time.perf_counter() - t0


def relabel(run: Path, dest: Path, old: str, new: str) -> Path:
    """A copy of `run` whose `old` rows are `new` (variant and cell_id), so that compare pairs them."""
    from attnbench.results.axes import cell_id

    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("writer.lock", "*.log"))
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    with open(dest / "rows.jsonl", "w") as fh:
        for row in rows:
            if row.get("variant") == old:
                row["variant"] = new
                row["cell_id"] = cell_id(row)
            fh.write(json.dumps(row) + "\n")
    meta = json.loads((dest / "meta.json").read_text())
    meta["variants"] = [new if v == old else v for v in meta.get("variants", [])]
    caps = meta.get("variant_capabilities", {})
    if old in caps:
        caps[new] = caps.pop(old)
    (dest / "meta.json").write_text(json.dumps(meta, indent=1))
    return dest


def judge(a: Path, b: Path, args: argparse.Namespace) -> dict:
    """What `attnbench compare A B --fail-above ...` decides, with the verdict of every cell; with --control,
    what `... --control VARIANT` decides as well (`with_control`)."""
    out = _judged(a, b, args, None)
    if args.control:
        out["with_control"] = _judged(a, b, args, args.control)
    return out


def in_run(run: Path, args: argparse.Namespace) -> dict:
    """A run's A/B: chunked_twin (identical code) and chunked_planted each against chunked, in one run."""
    return {
        "run": run.name,
        "twin": _judged(run, run, args, None, ("chunked", "chunked_twin")),
        "planted": _judged(run, run, args, None, ("chunked", "chunked_planted")),
    }


def _judged(
    a: Path, b: Path, args: argparse.Namespace, control: str | None, pick: tuple[str, str] | None = None
) -> dict:
    from attnbench.reports.compare import compare_runs

    va, vb = pick or (None, None)
    cmp = compare_runs(a, b, threshold=args.threshold, control_variant=control, variant_a=va, variant_b=vb)
    cells = cmp.cells
    return {
        "a": a.name,
        "b": b.name,
        "failed": bool(len(cmp.regressions)),
        "verdicts": {str(v): int(n) for v, n in cells["verdict"].value_counts().items()},
        "basis": sorted(set(cells["basis"])),
        "regressions": [
            f"{r['variant']} N={r['seq_len']}: {r['why']} (B/A {r['ratio']:.3f}, "
            f"CI [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}], p {r['p_value']:.2g})"
            for _, r in cmp.regressions.iterrows()
        ],
        "cells": [
            {
                "variant": str(r["variant"]),
                "seq_len": int(r["seq_len"]),
                "ratio": round(float(r["ratio"]), 4),
                "ci": [round(float(r["ratio_ci_low"]), 4), round(float(r["ratio_ci_high"]), 4)],
                "p": float(r["p_value"]),
                "verdict": str(r["verdict"]),
            }
            for _, r in cells.iterrows()
        ],  # fmt: skip
    }


def tally(pairs: list[dict], power: list[dict], args: argparse.Namespace) -> dict:
    """A setting's counts: identical pairs that failed the gate and planted comparisons it caught, as
    measured and (--control) relative to the control, with every comparison's result."""
    return {
        "pairs": len(pairs),
        "false_alarms": sum(p["failed"] for p in pairs),
        **(
            {
                "control": args.control,
                "false_alarms_with_control": sum(p["with_control"]["failed"] for p in pairs),
                "caught_with_control": sum(p["with_control"]["failed"] for p in power),
            }
            if args.control
            else {}
        ),
        "pair_results": pairs,
        "power": {
            "planted": "chunked_planted (benchmarks/planted_slowdown.py): chunked, then busy for a tenth of "
            "its time, measured with the other variants and relabelled chunked",
            "comparisons": len(power),
            "caught": sum(p["failed"] for p in power),
            "results": power,
        },
    }


def interleaved_sets(args: argparse.Namespace, work: Path, k: int) -> dict:
    """--interleave: R groups, each of three run sets made interleaved: in each of its K slots one run of A,
    one of B (the same command) and one planted, back to back, their order rotating from slot to slot.
    False alarms: A against B in each group (R pairs); power: A and B each against the planted set (2R),
    compare pairing run i with run i (results.runset.interleaved, basis 'paired runs')."""
    names = args.variants.split(",")
    with_plant = ",".join("chunked_planted" if v == "chunked" else v for v in names)
    walls: list[float] = []
    groups = []
    for g in range(args.runs):
        sets = {side: work / f"p{k}-g{g + 1}-{side}" for side in ("a", "b", "planted")}
        groups.append(sets)
        for j in range(0 if args.rejudge else args.set_size):
            turn = (g * args.set_size + j) % 3
            for side in ("a", "b", "planted")[turn:] + ("a", "b", "planted")[:turn]:
                if side == "planted":
                    raw = work / f"p{k}-g{g + 1}-planted-raw" / f"run{j + 1}"
                    walls.append(
                        round(attnbench_run(raw, args, k, with_plant, ["--variant-file", str(PLANTED)]), 1)
                    )
                    relabel(raw, sets["planted"] / f"run{j + 1}", "chunked_planted", "chunked")
                else:
                    walls.append(round(attnbench_run(sets[side] / f"run{j + 1}", args, k, args.variants), 1))
            print(f"group {g + 1}/{args.runs} slot {j + 1}/{args.set_size} --processes {k}: "
                  f"{' '.join(f'{t:.1f}' for t in walls[-3:])} s", file=sys.stderr)  # fmt: skip
    pairs = [judge(s["a"], s["b"], args) for s in groups]
    power = [judge(s[side], s["planted"], args) for s in groups for side in ("a", "b")]
    return {
        "processes": k,
        "run_wall_s": walls,
        "how": "each group: run sets A, B (identical) and planted, made interleaved (run i of each back to "
        "back, the order rotating), compared with runs paired",
        **tally(pairs, power, args),
    }


def rejudged(work: Path) -> dict:
    """--rejudge: which runs were judged again, and the commit(s) and dates they were measured at."""
    metas = [json.loads(m.read_text()) for m in sorted(work.glob("*/**/meta.json")) if "-raw" not in str(m)]
    commits = sorted({str(m.get("fingerprint", {}).get("git_commit")) for m in metas})
    made = sorted(str(m.get("created")) for m in metas)
    return {
        "how": "no run made: the runs an earlier measurement kept were judged again by this commit's compare",
        "runs": len(metas),
        "measured_at_commit": commits,
        "measured_from": made[0] if made else None,
        "measured_to": made[-1] if made else None,
    }


def separate_runs(args: argparse.Namespace, work: Path) -> tuple[dict, str]:
    """The batch of separate runs (or run sets made one after another): every pair of identical ones, and
    the planted run (set) against each; (settings, the load average after the runs)."""
    runs: dict[int, list[Path]] = {k: [] for k in args.processes}
    walls: dict[int, list[float]] = {k: [] for k in args.processes}
    size = args.set_size
    # the planted runs (a set of `size`) are spread over the identical ones: one after every `every` sets
    every = max(args.runs // size, 1)
    made = {k: 0 for k in args.processes}

    def member(base: Path, j: int) -> Path:  # a run, or the j-th run of a run set
        return base if size == 1 else base / f"run{j + 1}"

    def plant(k: int) -> None:
        # the whole sweep, chunked's code changed: what a run after a commit that slowed chunked measures
        names = args.variants.split(",")
        with_plant = ",".join("chunked_planted" if v == "chunked" else v for v in names)
        raw = member(work / f"p{k}-planted-raw", made[k])
        attnbench_run(raw, args, k, with_plant, ["--variant-file", str(PLANTED)])
        relabel(raw, member(work / f"p{k}-planted", made[k]), "chunked_planted", "chunked")
        made[k] += 1
        print(f"planted run {made[k]}/{size} --processes {k}", file=sys.stderr)

    for i in range(args.runs):  # the settings interleaved: the machine's load falls on both alike
        for k in args.processes:
            out = work / (f"p{k}-run{i + 1}" if size == 1 else f"p{k}-set{i + 1}")
            if args.rejudge:  # the runs kept by an earlier measurement: judged again, none made
                runs[k].append(out)
                made[k] = size
                continue
            what = [args.variants, []]
            if args.in_run:  # the A/B's two rivals of chunked, visited in the same rounds
                what = [f"{args.variants},chunked_twin,chunked_planted", ["--variant-file", str(PLANTED)]]
            took = [attnbench_run(member(out, j), args, k, *what) for j in range(size)]
            walls[k] += [round(t, 1) for t in took]
            runs[k].append(out)
            print(f"{'run' if size == 1 else 'set'} {i + 1}/{args.runs} --processes {k}: "
                  f"{' '.join(f'{t:.1f}' for t in took)} s", file=sys.stderr)  # fmt: skip
            if (i + 1) % every == 0 and made[k] < size and size > 1:
                plant(k)
    for k in args.processes:
        while made[k] < size:
            plant(k)
    planted = {k: work / f"p{k}-planted" for k in args.processes}
    after = loadavg()
    settings = {}
    for k in args.processes:
        pairs = [judge(a, b, args) for a, b in itertools.combinations(runs[k], 2)]
        power = [judge(a, planted[k], args) for a in runs[k]]
        ab = [in_run(run, args) for run in runs[k]] if args.in_run else []
        settings[f"processes_{k}"] = {
            "processes": k,
            "run_wall_s": walls[k],
            **(
                {
                    "in_run": {
                        "how": "compare RUN RUN --variant-a chunked --variant-b chunked_twin (identical "
                        "code) and chunked_planted, each run's rounds paired",
                        "runs": len(ab),
                        "false_alarms": sum(x["twin"]["failed"] for x in ab),
                        "caught": sum(x["planted"]["failed"] for x in ab),
                        "results": ab,
                    }
                }
                if args.in_run
                else {}
            ),
            **tally(pairs, power, args),
        }
    return settings, after


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="false-alarm-"))
    work.mkdir(parents=True, exist_ok=True)
    started, before, t0 = datetime.now(timezone.utc), loadavg(), time.perf_counter()
    size = args.set_size
    try:
        if args.interleave:
            settings = {f"processes_{k}": interleaved_sets(args, work, k) for k in args.processes}
            after = loadavg()
        else:
            settings, after = separate_runs(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    result = {
        "what": "compare's false-alarm rate on pairs of identical runs, and its power on a planted 10% "
        "slowdown (benchmarks/false_alarm.py)",
        "command": f"attnbench run --variants {args.variants} --seq-len {args.seq_len} --threads "
        f"{args.threads} --processes K {' '.join(args.run_arg)}".strip()
        + (f" (x{size}: a run set a side)" if size > 1 else "")
        + f"; attnbench compare A B --fail-above {args.fail_above}"
        + (f" [--control {args.control}]" if args.control else ""),
        "machine": {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count()},
        "commit": git_commit() or "unknown",
        **({"rejudged": rejudged(work)} if args.rejudge else {}),
        "shared_machine": "how busy the machine was: the load average below, from /proc/loadavg (1, 5 and "
        "15 min); a shared machine's other jobs are in it",
        "loadavg_before": before,
        "loadavg_after": after,
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "runs_per_setting": args.runs,
        "set_size": size,
        "sides": "single runs"
        if size == 1
        else f"groups of three run sets of {size} runs each made interleaved (A, B identical, planted): "
        "A against B, and each against the planted set, run i paired with run i (results.judge)"
        if args.interleave
        else f"run sets of {size} runs each (results.runset): every pair and the power below compare a set "
        "with a set, judged by the spread between each side's runs (results.judge)",
        "settings": settings,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def table(result: dict) -> str:
    lines = [f"{'processes':>9}  {'pairs':>5}  {'false alarms':>12}  {'planted 10% caught':>18}"]
    for s in result["settings"].values():
        power = s["power"]
        lines.append(
            f"{s['processes']:>9}  {s['pairs']:>5}  {s['false_alarms']:>12}  "
            f"{power['caught']:>10} of {power['comparisons']:<5}"
        )
        if "in_run" in s:
            x = s["in_run"]
            lines.append(
                f"{'':>9}  {x['runs']:>5}  {x['false_alarms']:>12}  {x['caught']:>10} of {x['runs']:<5}  "
                "A/B in one run (twin, planted)"
            )
        if "control" in s:
            lines.append(
                f"{'':>9}  {'':>5}  {s['false_alarms_with_control']:>12}  "
                f"{s['caught_with_control']:>10} of {power['comparisons']:<5}  relative to {s['control']}"
            )
    lines.append(f"load average before: {result['loadavg_before']}; after: {result['loadavg_after']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
