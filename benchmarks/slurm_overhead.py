"""What the slurm path costs per cell: the same trivial cells through `--executor local` and through
`--executor slurm --slurm-local` (submitit's LocalExecutor, one array task), timed where the runner
receives each row.

    python benchmarks/slurm_overhead.py [--cells 30] [--poll-s 0.05]

A Slurm array task pays a start-up (a Python process, a worker, torch imported, the device looked up)
before its first row, and then per cell the same CellRunner work as the local executor plus an fsync'd
shard line and the driver's poll. Start-up is the first row's lateness against the local run; the per-cell
overhead is the difference in the steady gap between rows (first to last row over cells - 1). On a real
cluster the queue wait comes on top and is not the harness's. The driver polls every --poll-s seconds
(attnbench uses 1 s: rows reach rows.jsonl at most that late, which adds nothing to a task's own work).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from attnbench.harness.run.progress import Progress
from attnbench.harness.run.runner import run
from attnbench.harness.sweep.sweeps import build_sweep


class Clock(Progress):
    """Progress that only notes when the executor started and when each row reached the runner."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.t0 = 0.0
        self.rows: list[float] = []

    def start(self, total, done_before, run_dir) -> None:
        self.t0 = time.perf_counter()

    def cell_done(self, row) -> None:
        self.rows.append(time.perf_counter())


def once(executor: str, options: dict, cells: int, out: Path) -> dict[str, float]:
    seq = ",".join(str(8 * (i + 1)) for i in range(cells))  # one series: one array task gets them all
    sweep = build_sweep(
        {"variants": "naive", "seq_len": seq, "heads": 1, "d_k": 8, "threads": 1}
        | {"budget_ms": 1, "warmup_ms": 1, "min_samples": 5, "max_samples": 5}
    )
    clock = Clock()
    run(sweep, out, executor=executor, executor_options=options, progress=clock)
    assert len(clock.rows) == cells, f"{executor}: {len(clock.rows)} rows of {cells}"
    return {
        "first_row_s": clock.rows[0] - clock.t0,
        "per_cell_ms": (clock.rows[-1] - clock.rows[0]) / (cells - 1) * 1e3,
        "total_s": clock.rows[-1] - clock.t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=30)
    ap.add_argument("--poll-s", type=float, default=0.05, help="the driver's poll interval for this measure")
    ap.add_argument("--rounds", type=int, default=2, help="alternating local/slurm rounds (medians shown)")
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"local": [], "slurm-local": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # interleaved: a noisy minute hits both paths
            results["local"].append(once("local", {}, args.cells, Path(tmp, f"local{r}")))
            opts = {"local": True, "tasks": 1, "poll_s": args.poll_s}
            results["slurm-local"].append(once("slurm", opts, args.cells, Path(tmp, f"slurm{r}")))
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in results.items()}
    for name, m in med.items():
        print(
            f"{name:12s} first row {m['first_row_s']:6.2f} s   per cell {m['per_cell_ms']:7.1f} ms   "
            f"total {m['total_s']:6.2f} s   ({args.cells} cells, median of {args.rounds})"
        )
    loc, slu = med["local"], med["slurm-local"]
    print(
        f"slurm-local overhead: task start-up {slu['first_row_s'] - loc['first_row_s']:+.2f} s, "
        f"per cell {slu['per_cell_ms'] - loc['per_cell_ms']:+.1f} ms "
        f"(poll {args.poll_s:g} s; timings on a shared machine are noisy)"
    )


if __name__ == "__main__":
    main()
