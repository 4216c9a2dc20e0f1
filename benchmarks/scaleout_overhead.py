"""What scale-out costs and buys: each executor's per-cell overhead, and Ray's makespan on 1 vs 2 nodes.

    python benchmarks/scaleout_overhead.py --out results/reference/scaleout-epyc-2core.json

Overhead, two ways, start-up (Ray, actors, workers) left out of both: it is paid once a run.
- round trip: N naive cells the memory guard skips (`memory_guard` set tiny): a cell is only its dispatch,
  the worker's free-memory answer and the row's way back: the time from the first row to the last over N-1
  is what an executor costs a cell with nothing measured. Target: <= 50 ms a cell for Ray.
- measured cells: N trivial cells (the `instant` test variant at tiny shapes, still timed, checked and
  speed-probed by the worker), the span from the first row to the last less that of the same cells run by
  one CellRunner in a plain loop, over N-1. A difference of two spans: on a busy machine, noise.

Makespan: 16 cells that each wait 1 s without using the CPU (the `sleep_1s` test variant) on a local
`ray.cluster_utils.Cluster` (loopback) of 1 node, then 2 nodes, one CPU each, so one CPU actor per node.
Makespan is from when the first cell started (its row's arrival less its elapsed_s) to the last row, so
that actor start-up is not counted. Target: 2 nodes <= 0.6x of 1 node.

Another executor's overhead is one more entry in OVERHEAD (a function plan -> executor). slurm-local is
the Slurm path through submitit's LocalExecutor (one array task, its rows through an fsync'd shard the
driver polls), so its figures include the shard's write and the poll, not a cluster's queue.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback (executors/ray.py)

from attnbench import variants  # noqa: E402
from attnbench.harness.run.executors import get  # noqa: E402
from attnbench.harness.run.executors.base import Plan  # noqa: E402
from attnbench.harness.sweep.settings import Settings  # noqa: E402
from attnbench.harness.sweep.spec import SweepSpec
from attnbench.harness.workers.cellrunner import CellRunner  # noqa: E402

VARIANTS = str(Path(__file__).resolve().parent.parent / "tests" / "data" / "scaleout_variants.py")
SETTINGS = Settings(warmup_ms=1, budget_ms=2, min_samples=5, min_ms=0.5)
OVERHEAD_TARGET_S = 0.050
MAKESPAN_TARGET = 0.6


def _plan(
    name: str,
    cells: int,
    run_dir: Path,
    described: set[str],
    settings: Settings = SETTINGS,
    series: bool = False,
) -> Plan:
    """`cells` cells of one series (seq_len 8, 9, ...), or with series=True each its own series (heads 1,
    2, ...): the dispatcher hands out one cell of a series at a time (skip-ahead), so only separate series
    can run on two nodes at once."""
    lengths = (8,) if series else tuple(range(8, 8 + cells))
    heads = tuple(range(1, 1 + cells)) if series else (1,)
    sweep = SweepSpec(variants=(name,), heads=heads, d_k=(8,), seq_len=lengths, settings=settings)
    config = {
        "threads": 1,
        "env": {},
        "variant_files": [VARIANTS],
        "cpu_affinity": [],
        "log_path": str(run_dir / "worker.log"),
    }
    return Plan(sweep=sweep, cells=sweep.cells([name]), config=config, run_dir=run_dir, described=described)


def _timed(executor, plan: Plan, status: str = "ok") -> list[tuple[float, dict]]:
    """(arrival time, row) of every row, in arrival order."""
    arrivals: list[tuple[float, dict]] = []
    executor.run(plan, lambda row: arrivals.append((time.perf_counter(), row)), lambda record: None)
    bad = [r for _, r in arrivals if r["status"] != status]
    if bad:
        raise SystemExit(f"a benchmark cell failed: {bad[0]['status']}: {bad[0].get('message')}")
    return arrivals


def per_cell(arrivals: list[tuple[float, dict]], polled: bool = False) -> float:
    """Seconds per cell from the first row to the last: when each row reached the driver, or for a polled
    executor (slurm: rows come in batches, one per poll of the shards) when the task finished it."""
    if polled:
        done = sorted(datetime.fromisoformat(r["finished_at"]).timestamp() for _, r in arrivals)
        return (done[-1] - done[0]) / (len(done) - 1)
    return (arrivals[-1][0] - arrivals[0][0]) / (len(arrivals) - 1)


class _Loop:
    """The baseline: one CellRunner, the cells in a plain loop, no executor."""

    name = "loop"

    def run(self, plan: Plan, on_row, on_device) -> None:
        for spec in plan.cells:
            on_row(plan.local.run(spec))


def makespan(arrivals: list[tuple[float, dict]]) -> float:
    first_start = min(t - r["elapsed_s"] for t, r in arrivals)
    return arrivals[-1][0] - first_start


def _local(plan: Plan):
    plan.local = CellRunner(plan.config, plan.sweep.settings)  # started before the clock, as the runner does
    return get("local")


def _loop(plan: Plan):
    plan.local = CellRunner(plan.config, plan.sweep.settings)
    return _Loop()


def _ray(plan: Plan):
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    return get("ray")


def _slurm_local(plan: Plan):
    from attnbench.harness.run.executors.slurm import SlurmExecutor

    # one array task (the cells are one series) run by submitit's LocalExecutor; the driver polls the
    # task's shard every 20 ms here (attnbench polls every second: rows then reach rows.jsonl up to a
    # second late, which costs the task nothing)
    # a task reads the run's sweep (settings) and described devices from meta.json, as the runner writes it
    meta = {"sweep": plan.sweep.to_dict(), "devices": {k: {} for k in plan.described}}
    (plan.run_dir / "meta.json").write_text(json.dumps(meta))
    return SlurmExecutor(local=True, tasks=1, poll_s=0.02)


# executor name -> how to get it ready for a plan (start-up excluded from the overhead)
OVERHEAD: dict[str, Callable] = {"local": _local, "ray": _ray, "slurm-local": _slurm_local}


def measure(ready: Callable, variant: str, cells: int, tmp: Path, described: set[str], skip: bool) -> float:
    settings = replace(SETTINGS, memory_guard=1e-12) if skip else SETTINGS
    plan = _plan(variant, cells, tmp, described, settings)
    executor = ready(plan)
    try:
        arrivals = _timed(executor, plan, "skipped" if skip else "ok")
        if len(arrivals) != len(plan.cells):
            raise SystemExit(f"{executor.name}: {len(arrivals)} rows of {len(plan.cells)}")
        return per_cell(arrivals, polled=executor.name == "slurm")
    finally:
        if plan.local is not None:
            plan.local.close()


def measure_makespan(nodes: int, tmp: Path, described: set[str]) -> float:
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        return makespan(_timed(get("ray"), _plan("sleep_1s", 16, tmp, described, series=True)))
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cells", type=int, default=40, help="guard-skipped cells for the round trip (default 40)"
    )
    ap.add_argument("--measured", type=int, default=12, help="trivial measured cells (default 12)")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        print("needs Ray: pip install 'attnbench[ray]'", file=sys.stderr)
        return 2
    variants.load_variant_file(VARIANTS)
    described = {f"{socket.gethostname()}:cpu"}  # every node here is this host: no calibration needed
    result: dict = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        trip = {n: measure(f, "naive", args.cells, d, set(described), skip=True) for n, f in OVERHEAD.items()}
        base = measure(_loop, "instant", args.measured, d, set(described), skip=False)
        cells = {
            n: measure(f, "instant", args.measured, d, set(described), skip=False)
            for n, f in OVERHEAD.items()
        }
        spans = {n: measure_makespan(n, d, set(described)) for n in (1, 2)}
    ratio = spans[2] / spans[1]
    result.update(
        round_trip_ms_per_cell={k: round(v * 1e3, 2) for k, v in trip.items()},
        measured_cell_ms={"loop": round(base * 1e3, 1), **{k: round(v * 1e3, 1) for k, v in cells.items()}},
        overhead_ms_per_measured_cell={k: round((v - base) * 1e3, 1) for k, v in cells.items()},
        makespan_s={f"{n}_nodes": round(v, 2) for n, v in spans.items()},
        makespan_ratio_2_to_1=round(ratio, 3),
        ray_overhead_pass=trip["ray"] <= OVERHEAD_TARGET_S,
        makespan_pass=ratio <= MAKESPAN_TARGET,
    )
    for name, v in trip.items():
        target = (" pass" if v <= OVERHEAD_TARGET_S else " MISS") + " (target <= 50 ms)"
        print(f"round trip per cell, {name:11s}: {v * 1e3:7.2f} ms{target if name == 'ray' else ''}")
    print(f"measured trivial cell, plain loop: {base * 1e3:7.1f} ms")
    for name, v in cells.items():
        print(
            f"measured trivial cell, {name:11s}: {v * 1e3:7.1f} ms ({(v - base) * 1e3:+.1f} ms over the loop)"
        )
    print(f"makespan of 16 x 1 s cells, 1 node: {spans[1]:.2f} s, 2 nodes: {spans[2]:.2f} s")
    verdict = "pass" if ratio <= MAKESPAN_TARGET else "MISS"
    print(f"ratio 2 nodes / 1 node: {ratio:.3f} {verdict} (target <= {MAKESPAN_TARGET})")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
