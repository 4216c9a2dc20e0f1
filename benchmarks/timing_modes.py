"""CUDA events against CUDA-graph timing, on a launch-bound cell and a device-bound one (a benchmark).

Cells (bf16, not causal): small, B=1 H=8 N=256 d=64 (a few microseconds of kernels: the host's launches can
take as long as the device's work, and events then time the launches), and large, B=1 H=16 N=8192 d=128
(milliseconds of work: both modes should agree). Variants sdpa and sdpa_flash, fwd and fwd+bwd. Every cell
is measured by the harness's own measure_cell with --timing events and with --timing graph, in --rounds
(>= 5) rounds; a round measures both modes of a cell back to back, alternating which goes first, so that
drift hits both alike. Per cell: each mode's median over the rounds of the rows' medians, the graph/events
ratio of each round with its median, quartiles and range, the calls a graph replay held, and what
--timing auto chose for that cell (one auto row, the first round) with its reason.

    python benchmarks/timing_modes.py --device cuda [--rounds 5] [--budget-ms 300] [--json out.json]

Exit status 0 when every cell that the GPU supports was measured ok in both modes, each in the mode asked
for (a graph that fell back to events is named in `problems`), 1 otherwise, 2 for bad arguments or a
machine without CUDA (one line, before any work).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

MIN_ROUNDS = 5
MODES = ("events", "graph")
SHAPES = {  # name -> (batch, heads, seq_len, d)
    "small": (1, 8, 256, 64),
    "large": (1, 16, 8192, 128),
}
VARIANTS = ("sdpa", "sdpa_flash")
PASSES = ("fwd", "fwdbwd")


def round_order(r: int) -> tuple[str, ...]:
    """The modes in round r's order: events first in even rounds, graph first in odd ones."""
    return MODES if r % 2 == 0 else MODES[::-1]


def ratio_summary(events_ms: list[float], graph_ms: list[float]) -> dict:
    """Each mode's median over the rounds, and the per-round graph/events ratios: their median, quartiles
    and range (a ratio below 1: the graph timed less, the launch overhead events had counted)."""
    from attnbench.results.formulas import quartiles

    ratios = [g / e for e, g in zip(events_ms, graph_ms, strict=True)]
    q1, med, q3 = quartiles(ratios)
    return {
        "events_ms_median": round(statistics.median(events_ms), 5),
        "graph_ms_median": round(statistics.median(graph_ms), 5),
        "ratio_graph_over_events": {
            "median": round(med, 4),
            "p25": round(q1, 4),
            "p75": round(q3, 4),
            "min": round(min(ratios), 4),
            "max": round(max(ratios), 4),
            "per_round": [round(x, 4) for x in ratios],
        },
    }


def cells():
    """(shape name, CellSpec) of every cell, a shape's cells together (they share inputs and reference)."""
    from attnbench.harness.sweep.spec import CellSpec

    for name, (b, h, n, d) in SHAPES.items():
        for variant in VARIANTS:
            for pass_ in PASSES:
                yield name, CellSpec(variant, "cuda", "bfloat16", b, h, n, d, d, False, 0.0, pass_)


def measure(rounds: int, budget_ms: float, measure_cell=None) -> list[dict]:
    """Every cell in both modes, `rounds` times, through harness.measure.cell.measure_cell (or the function
    given, with its signature: for tests of this bookkeeping); one record per cell. A cell this GPU does not
    support (its first row says unsupported) is recorded with the reason and not measured again."""
    from attnbench.harness.measure.inputs import InputCache
    from attnbench.harness.sweep.settings import Settings

    if measure_cell is None:
        from attnbench.harness.measure.cell import measure_cell

    base = {"warmup_ms": 50.0, "budget_ms": budget_ms, "min_ms": min(100.0, budget_ms)}
    todo = []
    for shape, cell in cells():
        rec = {"shape": shape, "variant": cell.variant, "pass": cell.pass_, "cell_id": cell.cell_id}
        rec.update(events_ms=[], graph_ms=[], graph_calls_per_replay=[], problems=[])
        todo.append((rec, cell))
    cache = InputCache()
    for r in range(rounds):
        for rec, cell in todo:
            if "unsupported" in rec:
                continue
            if r == 0:  # what auto chooses for this cell, and why (as a run's default would record it)
                row = measure_cell(cell, Settings(timing="auto", **base), cache)
                if row["status"] == "unsupported":
                    rec["unsupported"] = row["message"]
                    continue
                keys = ("status", "timing_mode", "timing_reason", "time_ms_median")
                rec["auto"] = {k: row.get(k) for k in keys}
            got = {}
            for mode in round_order(r):
                row = measure_cell(cell, Settings(timing=mode, **base), cache)
                if row["status"] == "ok" and row.get("timing_mode") == mode:
                    got[mode] = row
                else:  # a failed cell, or a graph that fell back to events: not this mode's number
                    rec["problems"].append(
                        f"round {r + 1} {mode}: {row['status']} {row.get('timing_mode')} "
                        f"{row.get('timing_reason') or ''} {row['message']}".strip()
                    )
            if len(got) == len(MODES):  # the ratio pairs the two modes of one round
                for mode, row in got.items():
                    rec[f"{mode}_ms"].append(row["time_ms_median"])
                rec["graph_calls_per_replay"].append(got["graph"]["graph_calls_per_replay"])
            print(f"  round {r + 1}/{rounds}: {rec['shape']} {rec['variant']} {rec['pass']} done", flush=True)
    records = []
    for rec, _cell in todo:
        if "unsupported" in rec:
            rec = {k: rec[k] for k in ("shape", "variant", "pass", "cell_id", "unsupported")}
        elif rec["events_ms"]:
            rec.update(ratio_summary(rec["events_ms"], rec["graph_ms"]))
            rec["events_ms"] = [round(x, 5) for x in rec["events_ms"]]
            rec["graph_ms"] = [round(x, 5) for x in rec["graph_ms"]]
        records.append(rec)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda"], default="cuda", help="timing modes are CUDA's")
    parser.add_argument(
        "--rounds", type=int, default=MIN_ROUNDS, help=f"interleaved rounds (>= {MIN_ROUNDS})"
    )
    parser.add_argument("--budget-ms", type=float, default=300.0, help="sampling budget per row (ms)")
    parser.add_argument("--json", metavar="PATH", help="also write the records as JSON")
    args = parser.parse_args(argv)
    if args.rounds < MIN_ROUNDS or not args.budget_ms > 0:
        print(
            f"timing_modes: error: need --rounds >= {MIN_ROUNDS} and a positive --budget-ms, got "
            f"{args.rounds} and {args.budget_ms:g}",
            file=sys.stderr,
        )
        return 2
    import torch

    if not torch.cuda.is_available():
        print("timing_modes: error: no CUDA device here: the timing modes are CUDA's", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    print(f"torch {torch.__version__} on {gpu}: events vs graph timing, {args.rounds} rounds", flush=True)
    records = measure(args.rounds, args.budget_ms)
    ok = True
    for rec in records:
        head = f"{rec['shape']:<5} {rec['variant']:<10} {rec['pass']:<6}"
        if "unsupported" in rec:
            print(f"{head} unsupported: {rec['unsupported']}")
            continue
        ok &= not rec["problems"] and "ratio_graph_over_events" in rec
        if "ratio_graph_over_events" in rec:
            ratio = rec["ratio_graph_over_events"]
            print(
                f"{head} events {rec['events_ms_median']:.4f} ms, graph {rec['graph_ms_median']:.4f} ms, "
                f"graph/events {ratio['median']:.3f} [{ratio['p25']:.3f}, {ratio['p75']:.3f}], "
                f"auto: {rec['auto']['timing_mode']} ({rec['auto']['timing_reason']})"
            )
        for problem in rec["problems"]:
            print(f"{head} problem: {problem}")
    if args.json:
        out = {"torch": torch.__version__, "gpu": gpu, "rounds": args.rounds, "budget_ms": args.budget_ms}
        Path(args.json).write_text(json.dumps({**out, "cells": records}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
