"""Where the test suite's CPU time goes: a py-spy profile of the whole suite, every process below it included,
summed into jobs (report rendering, measuring, torch imports, ...).

    py-spy record --subprocesses --format raw -r 25 -o suite.raw -- \
        python -m pytest -n 2 --dist loadfile --no-loadscope-reorder tests -q -p no:cacheprovider
    python benchmarks/suite_cpu.py suite.raw [--json out.json]

py-spy samples Python threads only while they run (no --idle), so a sample is CPU time of one thread; a
native thread of torch's (OpenMP's second core) is not sampled, so the matmul-heavy jobs read low. A job's
figure is inclusive (its callees counted in it), so jobs overlap: a report rendered inside a CLI process
counts in both rows. See docs/experiments/suite-time.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

# (job, the frame that marks it: a function name and its file, as py-spy writes them)
JOBS = (
    ("report rendering (reports.render.render)", "render (reports/render.py"),
    ("  of which figures saved (reports.style.save)", "save (reports/style.py"),
    ("compare (reports.compare.compare_runs)", "compare_runs (reports/compare.py"),
    ("measuring a cell (harness.measure.cell.measure_cell)", "measure_cell (harness/measure/cell.py"),
    ("  of which the float64 gate (correctness.gate)", "gate (harness/measure/correctness.py"),
    ("the speed probe before a cell", "speed_probe (harness/measure/calibrate.py"),
    ("the numerics probe", "probe (harness/measure/numerics.py"),
    ("a worker's start (imports, state snapshot)", "_Server.__init__ (harness/workers/worker.py"),
    ("import torch", "<module> (torch/__init__.py"),
    ("torch.compile (dynamo and inductor)", "_compile (torch/_dynamo/convert_frame.py"),
    ("pytest collecting", "pytest_collection (_pytest/main.py"),
)
PROCESSES = (
    # xdist's workers start as `python -u -c "import sys;exec(eval(...))"`, cut at py-spy's ';'
    ("pytest's processes (tests run in them)", re.compile(r"-m pytest|-u -c import sys$")),
    ("a run's worker processes (forked or spawned)", re.compile(r"multiprocessing\.(forkserver|spawn)")),
    ("attnbench CLI processes", re.compile(r"-m attnbench |/bin/attnbench |attnbench\.harness\.tools")),
    ("Ray's and Slurm's processes", re.compile(r"ray/|submitit")),
)
RATE = 25  # samples a second, as recorded (-r)


def samples(path: Path):
    """(frames, count) per line of a py-spy raw (collapsed) file."""
    with path.open(errors="replace") as lines:
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if count.isdigit():
                yield stack.split(";"), int(count)


def process_kind(frames: list[str]) -> str:
    """The kind of the innermost process a sample ran in (py-spy names each process in a 'process' frame)."""
    procs = [f for f in frames if f.startswith("process ")]
    inner = procs[-1] if procs else ""
    return next((name for name, pattern in PROCESSES if pattern.search(inner)), "other processes")


def summed(path: Path, rate: int = RATE) -> dict:
    """CPU-s in all, per process kind and per job (JOBS), from one py-spy raw file."""
    total, kinds, jobs = 0, collections.Counter(), collections.Counter()
    for frames, n in samples(path):
        total += n
        kinds[process_kind(frames)] += n
        for job, marker in JOBS:
            if any(f.startswith(marker) for f in frames):
                jobs[job] += n
    return {
        "total_cpu_s": round(total / rate, 1),
        "processes": {k: round(v / rate, 1) for k, v in kinds.most_common()},
        "jobs": {job: round(jobs[job] / rate, 1) for job, _ in JOBS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--rate", type=int, default=RATE, help="the sampling rate it was recorded at (-r)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not args.raw.is_file():
        parser.error(f"{args.raw}: no such file (record one with py-spy, see this script's docstring)")
    out = summed(args.raw, args.rate)
    print(f"{out['total_cpu_s']:8.1f} CPU-s sampled in all")
    for title, rows in (("by process", out["processes"]), ("by job (inclusive; jobs overlap)", out["jobs"])):
        print(f"\n{title}")
        for name, cpu_s in rows.items():
            print(f"{cpu_s:8.1f}  {name}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
