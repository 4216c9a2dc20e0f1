"""How often `attnbench compare --fail-above median:5%` fails on identical code (false alarms), and how often
it catches a planted slowdown (power), for each of attnbench's three ways to repeat a measurement.

    python benchmarks/false_alarm.py                     # the three stories, on this machine
    python benchmarks/false_alarm.py --story kernels     # one of them (a comma list takes several)
    python benchmarks/false_alarm.py --table results/reference/false-alarm-stories-epyc-2core.json

Each story is what a user types, measured as they would run it, each run in a fresh interpreter with this
checkout's attnbench, and judged by this checkout's compare (reports.compare.compare_runs: what `attnbench
compare` decides, its exit status 1 being "the gate found a regression"). The plants are in
benchmarks/planted_slowdown.py: chunked, then busy for a fraction of the time its chunked call took.

1. **Two versions of a kernel** (`kernels`): --runs N runs (default 20) of `attnbench run --variants
   naive,chunked,chunked_twin,chunked_planted --variant-file benchmarks/planted_slowdown.py --seq-len
   256..1024 --threads 1 --rounds R` (R: --rounds, default 10), one after another. Each run is its own A/B,
   its rounds paired: `compare RUN RUN --variant-a chunked --variant-b chunked_twin` and the other way
   round (identical code: a pair is a false alarm when either way fails), and `--variant-b
   chunked_planted` (a 10% slowdown: caught when it fails).
2. **Two environments** (`environments`): --groups G (default 4), each one `attnbench interleave` of
   --group-runs K runs (default 5) a side of `attnbench run --variants naive,chunked_env --variant-file
   benchmarks/planted_slowdown.py --seq-len 256..1024 --threads 1 --rounds 3`, with three sides that run
   the same command: a, b, and planted, whose attnbench runs under `env ATTNBENCH_PLANT=0.10` (chunked_env
   is then 10% slower; the run's worker processes inherit the variable). Judged `compare OUT/a OUT/b` both
   ways (false alarms) and `compare OUT/a OUT/planted`, `OUT/b OUT/planted` (power): the run level, run i
   paired with run i; then all of it again with `--control naive`.
3. **A quick look** (`quick`): two single runs, judged blind (results.judge: one run a side, nothing
   paired; a cell is called slower only beyond the run-to-run floor). Run i of side a against run i of
   side b of every group above, both ways (false alarms), and run i of a and of b against run i of planted
   (power on 10%). Group 1 also has a side planted2x (`env ATTNBENCH_PLANT=1.0`: a 2x slowdown), whose
   run i is judged against run i of a and of b. Asked for without `environments`, the groups are made all
   the same.

The JSON (--out; default results/reference/false-alarm-stories-<machine>.json) holds, per story under
`stories`: `command` (what the user types), `judged_by` (the compare commands), `run_wall_s` (each run's
wall time; a group's also its dry runs'), `false_alarms` ({pairs, failed, results}: each result a pair
with its two `ways`) and `planted` ({slowdown, comparisons, caught, results}); the environments story has
the same under `with_control`, the quick look `planted_2x`. A comparison records its runs (relative to
--work), the level the judge chose, whether it paired, whether it was blind, whether it failed the gate,
and every cell's ratio (B/A), 95% CI, p, Holm-adjusted p, verdict and the gate's reason. Beside them: the
commit, the machine (its CPU model), /proc/loadavg before and after (how busy the machine was: a shared
machine's other jobs are in it), the start and the elapsed time. Figures are as measured; nothing here
asserts a target. `--table FILE` prints the Markdown table of a JSON's stories (story | command | false
alarms | planted 10% caught), which a measurement also ends with.

--work DIR keeps the runs (and false_alarm.json, what they were made with); --rejudge judges them again
with this checkout's compare, making none. --run-arg passes one more argument to every `attnbench run`
(e.g. --run-arg=--budget-ms=100).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import re
import shlex
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

PLANTED_FILE = ROOT / "benchmarks" / "planted_slowdown.py"
SHOWN_FILE = "benchmarks/planted_slowdown.py"  # as a user in the checkout types it
STORIES = {
    "kernels": "two versions of a kernel",
    "environments": "two environments",
    "quick": "a quick look",
}
PLANT = 0.10  # the environments' and the quick look's planted slowdown (ATTNBENCH_PLANT)
PLANT_2X = 1.0  # the quick look's 2x slowdown
PLANT_ENV = "ATTNBENCH_PLANT"
CONTROL = "naive"
PLAN = "false_alarm.json"  # in --work: what the runs were made with (read again by --rejudge)


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr, exit 2 (argparse would print its usage first)."""

    def error(self, message: str):
        print(f"false_alarm.py: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def machine_slug() -> str:
    """'epyc-2core' on the reference VM (benchmarks/main_job.py's machine_slug)."""
    spec = importlib.util.spec_from_file_location("main_job", ROOT / "benchmarks" / "main_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.machine_slug()


def _parser() -> OneLineParser:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--story", help=f"a comma list of: {', '.join(STORIES)} (default: all)")
    p.add_argument("--runs", type=int, default=20, help="kernels: runs, each its own A/B (default 20)")
    p.add_argument("--rounds", type=int, default=10, help="kernels: --rounds of each run (default 10)")
    p.add_argument(
        "--groups", type=int, default=4, help="environments, quick: interleaved groups (default 4)"
    )
    p.add_argument("--group-runs", type=int, default=5, help="runs of each side in a group (default 5)")
    p.add_argument("--group-rounds", type=int, default=3, help="--rounds of each group's runs (default 3)")
    p.add_argument("--seq-len", default="256..1024")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fail-above", default="median:5%", help="the gate (compare --fail-above)")
    p.add_argument(
        "--run-arg", action="append", default=[], help="one more `attnbench run` argument (repeatable)"
    )
    p.add_argument("--work", help="where the runs go, kept (default: a temporary folder, removed after)")
    p.add_argument(
        "--rejudge",
        action="store_true",
        help="make no run: judge again the runs kept in --work with this checkout's compare (the stories "
        "measured, or --story: the quick look judges the environments' runs, and they its)",
    )
    p.add_argument(
        "--out", help="the JSON written (default results/reference/false-alarm-stories-<machine>.json)"
    )
    p.add_argument(
        "--table", metavar="FILE", help="print the Markdown table of FILE's stories, and nothing else"
    )
    return p


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = _parser()
    args = p.parse_args(argv)
    if args.table is not None:
        given = [k.replace("_", "-") for k, v in vars(args).items() if k != "table" and v != p.get_default(k)]
        if given:
            p.error(f"--table prints a JSON's table and measures nothing: give it alone (not --{given[0]})")
        return args
    given = [s.strip() for s in (",".join(STORIES) if args.story is None else args.story).split(",")]
    if any(s not in STORIES for s in given) or len(set(given)) != len(given):
        p.error(
            f"--story takes distinct names among {', '.join(STORIES)}, comma-separated, got {args.story!r}"
        )
    args.stories = [s for s in STORIES if s in given]  # in the table's order
    for name, low in (("runs", 1), ("rounds", 3), ("groups", 1), ("group_runs", 3), ("group_rounds", 1),
                      ("threads", 1)):  # fmt: skip
        if getattr(args, name) < low:
            why = {
                "rounds": " (each run's A/B is paired by round: 3 or more)",
                "group_runs": " (attnbench interleave and the run level need 3 or more)",
            }.get(name, "")
            p.error(f"--{name.replace('_', '-')} must be at least {low}{why}, got {getattr(args, name)}")
    from attnbench.results.thresholds import parse_threshold

    try:
        args.threshold = parse_threshold(args.fail_above)
    except ValueError as exc:
        p.error(str(exc))
    work = Path(args.work) if args.work else None
    if args.rejudge and not (work and (work / PLAN).is_file()):
        p.error(f"--rejudge judges the runs kept in --work DIR: give the folder of an earlier measurement "
                f"(it holds {PLAN})")  # fmt: skip
    if not args.rejudge and work and work.exists() and any(work.iterdir()):
        p.error(f"--work {args.work!r} is not empty")
    if args.out is None:
        args.out = str(ROOT / "results" / "reference" / f"false-alarm-stories-{machine_slug()}.json")
    return args


# ---- the commands --------------------------------------------------------------------------------------


def kernels_args(args: argparse.Namespace, planted: str = str(PLANTED_FILE)) -> list[str]:
    variants = "naive,chunked,chunked_twin,chunked_planted"
    return ["--variants", variants, "--variant-file", planted, "--seq-len", args.seq_len,
            "--threads", str(args.threads), "--rounds", str(args.rounds), *args.run_arg]  # fmt: skip


def group_args(args: argparse.Namespace, planted: str = str(PLANTED_FILE)) -> list[str]:
    return ["--variants", f"{CONTROL},chunked_env", "--variant-file", planted, "--seq-len", args.seq_len,
            "--threads", str(args.threads), "--rounds", str(args.group_rounds), *args.run_arg]  # fmt: skip


def group_sides(with_2x: bool, attnbench: str) -> list[str]:
    """The --side values of a group: a and b run `attnbench` as it is; the planted sides under a variable."""
    sides = ["a", "b", f"planted=env {PLANT_ENV}={PLANT:g} {attnbench}"]
    return sides + ([f"planted2x=env {PLANT_ENV}={PLANT_2X:g} {attnbench}"] if with_2x else [])


def shown(argv: list[str]) -> str:
    return shlex.join(argv)


def commands(args: argparse.Namespace) -> dict[str, str]:
    """Each story's command, as a user in the checkout types it."""
    sides = [x for s in group_sides(False, "attnbench") for x in ("--side", s)]
    run = shown(["attnbench", "run", *group_args(args, SHOWN_FILE)])
    return {
        "kernels": shown(["attnbench", "run", *kernels_args(args, SHOWN_FILE), "--out", "RUN"]),
        # the options before OUT: `attnbench interleave` takes everything after OUT as the runs' arguments
        "environments": shown(
            [
                "attnbench",
                "interleave",
                "--runs",
                str(args.group_runs),
                *sides,
                "OUT",
                "--",
                *group_args(args, SHOWN_FILE),
            ]
        ),  # fmt: skip
        "quick": f"{run} --out A; {run} --out B",
    }


def judged_by(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each story's compare commands: the false alarms' first (the table shows it), then the power's."""
    gate = f"--fail-above {args.fail_above}"
    return {
        "kernels": [
            f"attnbench compare RUN RUN --variant-a chunked --variant-b chunked_twin {gate}",
            f"attnbench compare RUN RUN --variant-a chunked_twin --variant-b chunked {gate}",
            f"attnbench compare RUN RUN --variant-a chunked --variant-b chunked_planted {gate}",
        ],
        "environments": [
            f"attnbench compare OUT/a OUT/b {gate}",
            f"attnbench compare OUT/b OUT/a {gate}",
            f"attnbench compare OUT/a OUT/planted {gate}",
            f"attnbench compare OUT/b OUT/planted {gate}",
            f"each again with --control {CONTROL}",
        ],
        "quick": [f"attnbench compare A B {gate}", f"attnbench compare B A {gate}"],
    }


def commit() -> str:
    """This checkout's HEAD (with '-dirty'): the fingerprint's, else git's answer here."""
    found = git_commit()
    if found:
        return found
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True)  # fmt: skip
    except OSError:
        return "unknown"
    return (
        head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
        if head.returncode == 0
        else "unknown"
    )


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def run_env() -> dict[str, str]:
    """The environment of every command: this checkout's attnbench (in the workers too), and no plant but
    the ones a side names."""
    env = {k: v for k, v in os.environ.items() if k != PLANT_ENV}
    return {**env, "PYTHONPATH": str(ROOT)}


def this_attnbench() -> list[str]:
    return [sys.executable, "-m", "attnbench"]


def make_kernels(args: argparse.Namespace, work: Path) -> list[float]:
    """The kernels story's runs, one after another; each one's wall time (s)."""
    walls = []
    for i in range(1, args.runs + 1):
        out = work / "kernels" / f"run{i}"
        cmd = [*this_attnbench(), "run", *kernels_args(args), "--out", str(out), "-q"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, env=run_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"false_alarm.py: `{shown(cmd)}` failed ({done.returncode}): {done.stderr[-400:]}"
            )
        walls.append(round(time.perf_counter() - t0, 1))
        print(f"kernels: run {i}/{args.runs}: {walls[-1]:.1f} s", file=sys.stderr)
    return walls


_STARTED = re.compile(r"^run (\d+) of \d+, side (\S+?):")


def make_group(args: argparse.Namespace, out: Path, with_2x: bool) -> dict[str, object]:
    """One `attnbench interleave`: its sides' runs; the wall time of each run (from its start line to the
    next), and of the dry runs before them."""
    attnbench = shown(this_attnbench())
    sides = [x for s in group_sides(with_2x, attnbench) for x in ("--side", s)]
    cmd = [*this_attnbench(), "interleave", "--runs", str(args.group_runs), *sides, str(out), "--",
           *group_args(args)]  # fmt: skip
    t0 = time.perf_counter()
    marks: list[tuple[float, str]] = []
    tail: list[str] = []
    with subprocess.Popen(cmd, cwd=ROOT, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-5:]
            m = _STARTED.match(line)
            if m:
                marks.append((time.perf_counter() - t0, f"{m[2]}/run{m[1]}"))
                print(f"{out.name}: {m[2]} run {m[1]}/{args.group_runs}", file=sys.stderr)
    end = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"false_alarm.py: `{shown(cmd)}` failed ({proc.returncode}): {' / '.join(tail)}")
    times = [t for t, _ in marks] + [end]
    return {
        "dry_runs_s": round(times[0], 1),
        "run_wall_s": {name: round(times[i + 1] - t, 1) for i, (t, name) in enumerate(marks)},
        "wall_s": round(end, 1),
    }


# ---- judging -------------------------------------------------------------------------------------------


def _num(x: object, digits: int | None = None) -> float | None:
    """A finite float (rounded), else None: the JSON holds no NaN."""
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return round(v, digits) if digits is not None else v


def judged(work: Path, a: Path, b: Path, args: argparse.Namespace, **how: str) -> dict[str, object]:
    """What `attnbench compare A B --fail-above ...` (with `how`: variant_a, variant_b, control_variant)
    decides: whether it fails, the level, and every cell's answer."""
    from attnbench.reports.compare import compare_runs

    cmp = compare_runs(a, b, threshold=args.threshold, **how)
    j = cmp.judgement
    cells = cmp.cells
    return {
        "a": str(a.relative_to(work)),
        "b": str(b.relative_to(work)),
        **({"how": how} if how else {}),
        "failed": cmp.fails,
        "level": j.level,
        "paired": j.paired,
        "blind": j.blind,
        "verdicts": {str(v): int(n) for v, n in cells["verdict"].value_counts().items()},
        "cells": [
            {
                "variant": str(r["variant"]),
                "seq_len": int(r["seq_len"]),
                "ratio": _num(r["ratio"], 4),
                "ci": [_num(r["ratio_ci_low"], 4), _num(r["ratio_ci_high"], 4)],
                "p": _num(r["p_value"]),
                "p_holm": _num(r["p_holm"]),
                "verdict": str(r["verdict"]),
                "regression": bool(r["regression"]),
                "why": str(r["why"]),
            }
            for _, r in cells.iterrows()
        ],
    }


def both_ways(work: Path, a: Path, b: Path, args: argparse.Namespace, **how: str) -> dict[str, object]:
    """A pair of identical code judged A against B and B against A: it fails when either way fails."""
    back = {"variant_a": how["variant_b"], "variant_b": how["variant_a"]} if "variant_a" in how else how
    ways = [judged(work, a, b, args, **how), judged(work, b, a, args, **back)]
    return {"failed": any(w["failed"] for w in ways), "ways": ways}


def false_alarms(results: list[dict[str, object]]) -> dict[str, object]:
    return {"pairs": len(results), "failed": sum(bool(r["failed"]) for r in results), "results": results}


def power(slowdown: float, results: list[dict[str, object]]) -> dict[str, object]:
    return {
        "slowdown": slowdown,
        "comparisons": len(results),
        "caught": sum(bool(r["failed"]) for r in results),
        "results": results,
    }


def judge_kernels(work: Path, args: argparse.Namespace) -> dict[str, object]:
    runs = sorted((work / "kernels").glob("run*"), key=lambda p: int(p.name[3:]))
    twin = [both_ways(work, r, r, args, variant_a="chunked", variant_b="chunked_twin") for r in runs]
    planted = [judged(work, r, r, args, variant_a="chunked", variant_b="chunked_planted") for r in runs]
    return {"runs": len(runs), "false_alarms": false_alarms(twin), "planted": power(PLANT, planted)}


def groups_in(work: Path) -> list[Path]:
    return sorted((work / "groups").glob("g*"), key=lambda p: int(p.name[1:]))


def sides_of(group: Path) -> list[str]:
    return [name for name, _ in json.loads((group / "interleave.json").read_text())["sides"]]


def judge_environments(work: Path, args: argparse.Namespace, control: str | None) -> dict[str, object]:
    how = {"control_variant": control} if control else {}
    groups = groups_in(work)
    pairs = [both_ways(work, g / "a", g / "b", args, **how) for g in groups]
    planted = [judged(work, g / side, g / "planted", args, **how) for g in groups for side in ("a", "b")]
    return {"groups": len(groups), "false_alarms": false_alarms(pairs), "planted": power(PLANT, planted)}


def _runs_of(side: Path) -> list[Path]:
    return sorted(side.glob("run*"), key=lambda p: int(p.name[3:]))


def judge_quick(work: Path, args: argparse.Namespace) -> dict[str, object]:
    pairs, planted, planted_2x = [], [], []
    for g in groups_in(work):
        for ra, rb, rp in zip(_runs_of(g / "a"), _runs_of(g / "b"), _runs_of(g / "planted"), strict=True):
            pairs.append(both_ways(work, ra, rb, args))
            planted += [judged(work, ra, rp, args), judged(work, rb, rp, args)]
        if "planted2x" in sides_of(g):
            for ra, rb, rx in zip(
                _runs_of(g / "a"), _runs_of(g / "b"), _runs_of(g / "planted2x"), strict=True
            ):
                planted_2x += [judged(work, ra, rx, args), judged(work, rb, rx, args)]
    return {
        "runs_from": "the interleaved groups (the environments story's runs): run i of one side against "
        "run i of another, each a single run",
        "false_alarms": false_alarms(pairs),
        "planted": power(PLANT, planted),
        "planted_2x": power(PLANT_2X, planted_2x),
    }


def rejudged(work: Path) -> dict[str, object]:
    """--rejudge: which runs were judged again, and the commit(s) and dates they were measured at."""
    metas = [json.loads(m.read_text()) for m in sorted(work.glob("**/meta.json"))]
    commits = sorted({str(m.get("fingerprint", {}).get("git_commit")) for m in metas})
    made = sorted(str(m.get("created")) for m in metas)
    return {
        "how": "no run made: the runs an earlier measurement kept were judged again by this commit's compare",
        "runs": len(metas),
        "measured_at_commit": commits,
        "measured_from": made[0] if made else None,
        "measured_to": made[-1] if made else None,
    }


# ---- the measurement -----------------------------------------------------------------------------------


def measure(args: argparse.Namespace, work: Path) -> dict[str, object]:
    """Make the stories' runs (none with --rejudge) and judge them: the `stories` of the JSON."""
    if args.rejudge:
        plan = json.loads((work / PLAN).read_text())
        made = set(plan["stories"])
        if args.story is None:  # the stories measured
            args.stories = [s for s in STORIES if s in made]
        for name in args.stories:  # the groups serve both environments and quick
            if name not in made and (name == "kernels" or not {"environments", "quick"} & made):
                raise SystemExit(f"false_alarm.py: --work {work} holds no runs of story {name!r}")
    else:
        plan = {"stories": args.stories, "commands": commands(args), "walls": {}}
        (work / PLAN).write_text(json.dumps(plan, indent=1) + "\n")
        if "kernels" in args.stories:
            plan["walls"]["kernels"] = make_kernels(args, work)
        if {"environments", "quick"} & set(args.stories):
            plan["walls"]["groups"] = {
                f"g{g}": make_group(
                    args, work / "groups" / f"g{g}", with_2x=g == 1 and "quick" in args.stories
                )
                for g in range(1, args.groups + 1)
            }
        (work / PLAN).write_text(json.dumps(plan, indent=1) + "\n")
    walls, made_by = plan["walls"], {**commands(args), **plan["commands"]}
    stories: dict[str, dict[str, object]] = {}
    for name in args.stories:
        print(f"judging {name}", file=sys.stderr)
        if name == "kernels":
            result = {**judge_kernels(work, args), "run_wall_s": walls.get("kernels")}
        elif name == "environments":
            result = {
                **judge_environments(work, args, None),
                "with_control": {"control": CONTROL, **judge_environments(work, args, CONTROL)},
                "run_wall_s": walls.get("groups"),
            }
        else:
            result = {**judge_quick(work, args), "run_wall_s": walls.get("groups")}
        stories[name] = {
            "story": STORIES[name],
            "command": made_by[name],
            "judged_by": judged_by(args)[name],
            **result,
        }
    return stories


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.table is not None:
        try:
            print(table(json.loads(Path(args.table).read_text())))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"false_alarm.py: error: --table {args.table!r}: {exc}", file=sys.stderr)
            return 2
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="false-alarm-"))
    work.mkdir(parents=True, exist_ok=True)
    started, before, t0 = datetime.now(timezone.utc), loadavg(), time.perf_counter()
    try:
        stories = measure(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    result = {
        "what": "compare's false alarms on identical code and its power on planted slowdowns, one story per "
        "way to repeat a measurement (benchmarks/false_alarm.py)",
        "gate": f"--fail-above {args.fail_above}",
        "machine": {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count()},
        "commit": commit(),
        **({"rejudged": rejudged(work)} if args.rejudge else {}),
        "loadavg": "how busy the machine was, from /proc/loadavg (1, 5 and 15 min); a shared machine's other "
        "jobs are in it",
        "loadavg_before": before,
        "loadavg_after": loadavg(),
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "stories": stories,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(
        f"load average before: {result['loadavg_before']}; after: {result['loadavg_after']}", file=sys.stderr
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


# ---- the table -----------------------------------------------------------------------------------------


def _of(n: int, of: int) -> str:
    return f"{n} of {of}"


def table_rows(result: dict) -> list[tuple[str, list[str], str, str]]:
    """One row per story in the JSON: story, its commands (the runs', then compare's), false alarms,
    planted 10% caught."""
    rows = []
    for name, s in result["stories"].items():
        fa, pl = s["false_alarms"], s["planted"]
        alarms, caught = _of(fa["failed"], fa["pairs"]), _of(pl["caught"], pl["comparisons"])
        if name == "environments":
            c = s["with_control"]
            with_control = f"with --control {c['control']}"
            alarms += f" ({_of(c['false_alarms']['failed'], c['false_alarms']['pairs'])} {with_control})"
            caught += f" ({_of(c['planted']['caught'], c['planted']['comparisons'])} {with_control})"
        if name == "quick" and s["planted_2x"]["comparisons"]:
            x = s["planted_2x"]
            caught += f" (2x: {_of(x['caught'], x['comparisons'])})"
        rows.append((s["story"], [*s["command"].split("; "), s["judged_by"][0]], alarms, caught))
    return rows


def table(result: dict) -> str:
    """The stories as a Markdown table (docs/reports-and-compare.md), at most three rows."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| story | command | false alarms | planted 10% caught |", "| --- | --- | --- | --- |"]
    for story, commands, alarms, caught in table_rows(result):
        parts: list[str] = []
        for i, c in enumerate(commands):  # a run made again to another --out: only its --out
            same, _, out = c.rpartition(" --out ")
            again = i and same and commands[i - 1].rpartition(" --out ")[0] == same
            parts.append(f"again with `--out {cell(out)}`" if again else f"`{cell(c)}`")
        lines.append(f"| {cell(story)} | {'; '.join(parts)} | {cell(alarms)} | {cell(caught)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
