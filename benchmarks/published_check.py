"""Check a published figure: measure six cells of the CPU reference run again and print each median's ratio
to the published one.

    python benchmarks/published_check.py [--ref results/reference/cpu-epyc-2core] [--out runs/published-check]

The cells are measured by `attnbench run --rerun` (attnbench.run(rerun=...)): the reference run's own
settings, budgets, seed and environment (THP_MEM_ALLOC_ENABLE=1), read from its meta.json, into a new run
directory. A ratio near 1 on a machine like the reference VM (2-core AMD EPYC) confirms the figure; on
another machine it measures the machine. `attnbench compare REF NEW` then tests each pair of raw samples
for significance. Cells: naive, chunked and sdpa at N = 1024 and 2048, fp32, non-causal, forward (about a
second of sampling each, so the whole check takes about a minute on the reference VM).
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference" / "cpu-epyc-2core"
CELLS = [
    f"{variant}|cpu|float32|b1|h8|n{n}|dk64|dv64|full|pad0|fwd"
    for n in (1024, 2048)
    for variant in ("naive", "chunked", "sdpa")
]


def machine(meta: dict) -> str:
    fp = meta.get("fingerprint", {})
    return (
        f"{fp.get('cpu_model')} ({fp.get('logical_cpus')} CPUs), torch {fp.get('torch')}, "
        f"THP {fp.get('transparent_hugepages')}, worker threads {meta.get('worker_threads')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=str(REFERENCE), help="the published run (default: cpu-epyc-2core)")
    parser.add_argument("--cells", default=",".join(CELLS), help="cell_ids to measure again, comma-separated")
    parser.add_argument("--out", help="the new run (default: runs/published-check-<time>)")
    args = parser.parse_args(argv)

    import attnbench
    from attnbench.results import load_meta

    out = args.out or f"runs/published-check-{datetime.now():%Y%m%d-%H%M%S}"
    try:
        run = attnbench.run(rerun=args.ref, cells=args.cells, out=out, progress=True)
    except ValueError as exc:
        print(f"published_check: error: {exc}", file=sys.stderr)
        return 2
    old = attnbench.load(args.ref).set_index("cell_id")
    new = run.load().set_index("cell_id")
    (meta_old,), (meta_new,) = load_meta(args.ref).values(), load_meta(run.path).values()
    print(f"published: {args.ref}\n  {machine(meta_old)}")
    print(f"now:       {run.path}\n  {machine(meta_new)}\n")
    print(f"{'variant':<10}{'N':>6}{'published ms':>14}{'now ms':>10}{'now/published':>15}  status")
    logs = []
    for cell_id in new.index:
        a, b = old.loc[cell_id], new.loc[cell_id]
        ok = a["status"] == "ok" and b["status"] == "ok"
        ratio = b["time_ms_median"] / a["time_ms_median"] if ok else math.nan
        if ok:
            logs.append(math.log(ratio))
        now = f"{b['time_ms_median']:.2f}" if b["status"] == "ok" else "-"
        print(
            f"{b['variant']:<10}{b['seq_len']:>6}{a['time_ms_median']:>14.2f}{now:>10}{ratio:>15.2f}  "
            f"{b['status']}" + (f" (published p25-p75 {a['time_ms_p25']:.2f}-{a['time_ms_p75']:.2f})")
        )
    if logs:
        print(
            f"\ngeometric mean of now/published over {len(logs)} cells: {math.exp(sum(logs) / len(logs)):.2f}"
        )
    print(f"significance per cell: attnbench compare {args.ref} {run.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
