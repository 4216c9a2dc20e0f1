"""Measures issue 11's workload targets, and flex's against SDPA, on this machine (a benchmark, not a test).

  1. window: chunked, causal, window 512, fp32, B=1 H=8 d=64, at N=4096 and N=16384. A sliding window
     makes the work O(N * W), so the fitted time exponent between the two lengths,
     log(t_16384 / t_4096) / log(4), must be at most 1.3 (full causal attention gives about 2). Times are
     the harness's own medians (harness.measure.cell.measure_cell: gated, then timed), taken in --rounds
     rounds that alternate the two lengths, and the exponent is read from the median time of each length;
  2. grouped-query heads: naive with 32 query heads on 8 k/v heads against 32 on 32 (a decode step:
     N_q=1, N_k=8192, d=128, fp32). What is measured is memory, with torch.profiler's allocator events
     (harness.measure.memory.peak_cpu, exact for torch allocations): the peak of allocating K and V and
     running the call, minus the peak of the call alone on K and V allocated beforehand, is the K/V memory the
     call needs. Target: MHA's is 4x GQA's (within 1%), and GQA's call alone allocates no more than
     MHA's (no hidden repeat of K and V to 32 heads).
  3. flex: flex_attention under torch.compile against sdpa, B=1 H=8 d=64 fp32, non-causal and causal, at
     N >= 2048: flex's throughput at least 0.8x SDPA's, i.e. median(sdpa) / median(flex) >= 0.8. Both are
     the harness's medians (measure_cell), in --rounds rounds alternating which variant goes first. flex's
     block mask (setup_ms) and compilation (first_call_ms of its first cell) are recorded beside the ratio
     and never counted in it; its later rounds reuse the worker's cached plan and kernel (setup and first
     call near zero). --flex-lengths adds shorter lengths (their compile and mask times, no target).
  4. speed: chunked and chunked_compiled against sdpa, fp32, B=1 H=8 d=64, N=2048 and 4096, non-causal and
     causal. Target (issue 11): chunked, eager or compiled, at least 0.8x SDPA's throughput at N >= 2048.
     Each round measures the three variants of a shape back to back (harness rows, order alternating by
     round); the ratio is the median over rounds of sdpa's median time over the variant's (same FLOPs, so
     a throughput ratio). chunked_compiled compiles in its setup hook (the row's setup_ms), never timed.

    python benchmarks/workloads_check.py [--rounds 3] [--json out.json] [--targets window,gqa,flex,speed]

Timings on a shared machine are noisy: re-run on a quiet one before quoting them. Exit status 0 when
every target run is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import torch

from attnbench import variants
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.measure.memory import peak_cpu
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec

WINDOW, LENGTHS, MAX_EXPONENT = 512, (4096, 16384), 1.3
GQA_HEADS, GQA_KV_HEADS, DECODE_KEYS, HEAD_DIM = 32, 8, 8192, 128
KV_RATIO_BAND = 0.01
FLEX_MIN_N, FLEX_MIN_RATIO = 2048, 0.8
SPEED_LENGTHS, SPEED_VARIANTS, SPEED_TARGET = (2048, 4096), ("chunked", "chunked_compiled"), 0.8
TARGETS = ("window", "gqa", "flex", "speed")


def window_exponent(rounds: int, settings: Settings) -> dict:
    """Target 1: the fitted time exponent of chunked with a 512-key window between N=4096 and 16384."""
    times: dict[int, list[float]] = {n: [] for n in LENGTHS}
    statuses = []
    for r in range(rounds):
        for n in LENGTHS if r % 2 == 0 else reversed(LENGTHS):  # alternate the order: drift hits both
            cell = CellSpec("chunked", "cpu", "float32", 1, 8, n, 64, 64, True, 0.0, "fwd", window=WINDOW)
            row = measure_cell(cell, settings)
            statuses.append(row["status"])
            if row["status"] == "ok":
                times[n].append(row["time_ms_median"])
            print(f"  round {r + 1}: N={n} {row['status']} {row.get('time_ms_median', math.nan):.1f} ms")
    if not all(times.values()):
        return {"met": False, "why": f"cells not ok: {statuses}"}
    t_lo, t_hi = (statistics.median(times[n]) for n in LENGTHS)
    exponent = math.log(t_hi / t_lo) / math.log(LENGTHS[1] / LENGTHS[0])
    return {
        "what": f"chunked, causal, window {WINDOW}, fp32, B=1 H=8 d=64: time exponent N={LENGTHS}",
        "median_ms": {str(n): round(statistics.median(times[n]), 3) for n in LENGTHS},
        "samples_ms": {str(n): [round(t, 3) for t in times[n]] for n in LENGTHS},
        "exponent": round(exponent, 3),
        "target": f"<= {MAX_EXPONENT}",
        "met": exponent <= MAX_EXPONENT,
    }


def gqa_kv_memory() -> dict:
    """Target 2: the K/V memory of naive with 8 k/v heads against 32, measured with torch.profiler."""
    naive = variants.get("naive").fn
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, GQA_HEADS, 1, HEAD_DIM, generator=g)  # one decode query per head

    def kv(h_kv: int):
        return (torch.randn(1, h_kv, DECODE_KEYS, HEAD_DIM), torch.randn(1, h_kv, DECODE_KEYS, HEAD_DIM))

    out = {}
    for h_kv in (GQA_HEADS, GQA_KV_HEADS):
        with torch.no_grad():
            with_kv = peak_cpu(lambda h_kv=h_kv: naive(q, *kv(h_kv), causal=True, causal_align="lower-right"))
            k, v = kv(h_kv)
            call_only = peak_cpu(lambda k=k, v=v: naive(q, k, v, causal=True, causal_align="lower-right"))
        out[h_kv] = {
            "kv_tensor_bytes": k.nbytes + v.nbytes,
            "peak_with_kv_bytes": with_kv,
            "peak_call_only_bytes": call_only,
            "kv_measured_bytes": with_kv - call_only,
        }
        del k, v
    mha, gqa = out[GQA_HEADS], out[GQA_KV_HEADS]
    ratio = mha["kv_measured_bytes"] / gqa["kv_measured_bytes"]
    ratio_ok = abs(ratio / (GQA_HEADS / GQA_KV_HEADS) - 1) <= KV_RATIO_BAND
    return {
        "what": f"naive decode, {GQA_HEADS} query heads on {GQA_KV_HEADS} vs {GQA_HEADS} k/v heads, "
        f"N_q=1 N_k={DECODE_KEYS} d={HEAD_DIM} fp32; measured: torch.profiler peak with K/V allocated "
        "in the call minus the peak of the call alone",
        "mha": mha,
        "gqa": gqa,
        "kv_ratio_measured": round(ratio, 4),
        "kv_ratio_tensors": mha["kv_tensor_bytes"] / gqa["kv_tensor_bytes"],
        "gqa_call_not_larger": gqa["peak_call_only_bytes"] <= mha["peak_call_only_bytes"],
        "target": f"K/V memory ratio {GQA_HEADS // GQA_KV_HEADS} within {KV_RATIO_BAND:.0%}; the GQA call "
        "allocates no more than MHA's",
        "met": ratio_ok and gqa["peak_call_only_bytes"] <= mha["peak_call_only_bytes"],
    }


def flex_vs_sdpa(rounds: int, settings: Settings, lengths: tuple[int, ...] = (FLEX_MIN_N,)) -> dict:
    """Target 3: flex's throughput against SDPA's, non-causal and causal; compile and mask times apart."""
    from attnbench.harness.measure.inputs import InputCache

    records, met = [], True
    for causal in (False, True):
        for n in lengths:
            cache = InputCache()  # one shape: inputs and float64 reference shared by both variants
            times: dict[str, list[float]] = {"flex": [], "sdpa": []}
            setup_ms, first_ms, bad = [], [], []
            for r in range(rounds):
                for name in ("flex", "sdpa") if r % 2 == 0 else ("sdpa", "flex"):
                    cell = CellSpec(name, "cpu", "float32", 1, 8, n, 64, 64, causal, 0.0, "fwd")
                    row = measure_cell(cell, settings, cache)
                    if row["status"] != "ok":
                        bad.append(f"{name}: {row['status']} {row['message']}")
                        continue
                    times[name].append(row["time_ms_median"])
                    if name == "flex":
                        setup_ms.append(row["setup_ms"])
                        first_ms.append(row["first_call_ms"])
                    print(f"  round {r + 1}: N={n} causal={causal} {name} {row['time_ms_median']:.2f} ms")
            rec = {"n": n, "causal": causal, "not_ok": bad}
            if all(times.values()):
                ratio = statistics.median(times["sdpa"]) / statistics.median(times["flex"])
                rec.update(
                    median_ms={k: round(statistics.median(t), 3) for k, t in times.items()},
                    samples_ms={k: [round(x, 3) for x in t] for k, t in times.items()},
                    ratio=round(ratio, 3),
                    # the first flex cell of this shape pays both; later rounds hit the worker's cache
                    mask_ms_first=round(setup_ms[0], 1),
                    compile_ms_first=round(first_ms[0], 1),
                    setup_ms_later=[round(x, 3) for x in setup_ms[1:]],
                    first_call_ms_later=[round(x, 3) for x in first_ms[1:]],
                )
            if n >= FLEX_MIN_N:
                rec["met"] = not bad and rec.get("ratio", 0.0) >= FLEX_MIN_RATIO
                met = met and rec["met"]
            records.append(rec)
    return {
        "what": "flex (torch.compile) vs sdpa, fp32, B=1 H=8 d=64: median(sdpa) / median(flex)",
        "target": f">= {FLEX_MIN_RATIO} at N >= {FLEX_MIN_N}, non-causal and causal; compile not counted",
        "records": records,
        "met": met and any(r["n"] >= FLEX_MIN_N for r in records),
    }


def chunked_speed(rounds: int, settings: Settings) -> dict:
    """Target 4: chunked's (eager, compiled) throughput over sdpa's per shape, median of per-round ratios."""
    shapes = [(n, causal) for n in SPEED_LENGTHS for causal in (False, True)]
    names = ("sdpa", *SPEED_VARIANTS)
    ratios: dict[str, dict[str, list[float]]] = {f"n{n}-{'causal' if c else 'full'}": {} for n, c in shapes}
    problems = []
    for r in range(rounds):
        for n, causal in shapes:
            key = f"n{n}-{'causal' if causal else 'full'}"
            times = {}
            for name in names if r % 2 == 0 else reversed(names):  # alternate: drift hits every variant
                row = measure_cell(
                    CellSpec(name, "cpu", "float32", 1, 8, n, 64, 64, causal, 0.0, "fwd"), settings
                )
                if row["status"] == "ok":
                    times[name] = row["time_ms_median"]
                else:
                    problems.append(f"{name} {key}: {row['status']} {row.get('message', '')}")
            for name in SPEED_VARIANTS:
                if "sdpa" in times and name in times:
                    ratios[key].setdefault(name, []).append(times["sdpa"] / times[name])
            if "chunked" in times and "chunked_compiled" in times:
                ratios[key].setdefault("compiled/chunked", []).append(
                    times["chunked"] / times["chunked_compiled"]
                )
            print(f"  round {r + 1}: {key} " + ", ".join(f"{k} {t:.1f} ms" for k, t in times.items()))
    medians = {
        key: {name: round(statistics.median(v), 3) for name, v in by.items()} for key, by in ratios.items()
    }
    best = {
        key: max((by.get(name, 0.0) for name in SPEED_VARIANTS), default=0.0) for key, by in medians.items()
    }
    return {
        "what": "chunked, chunked_compiled throughput / sdpa's (fp32 B=1 H=8 d=64), median of round ratios",
        "ratios": medians,
        "samples": {key: {k: [round(x, 3) for x in v] for k, v in by.items()} for key, by in ratios.items()},
        "target": f">= {SPEED_TARGET} at every N >= 2048 (the better of eager and compiled)",
        "problems": problems,
        "met": not problems and all(b >= SPEED_TARGET for b in best.values()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of the window cells (>= 1)")
    p.add_argument("--budget-ms", type=float, default=3000.0, help="sampling budget per cell (ms)")
    p.add_argument("--json", metavar="PATH", help="also write the records as JSON")
    p.add_argument("--targets", default=",".join(TARGETS), help=f"which targets (of {','.join(TARGETS)})")
    p.add_argument("--flex-lengths", default=str(FLEX_MIN_N), metavar="N,...", help="flex target's N")
    args = p.parse_args(argv)
    if args.rounds < 1 or not args.budget_ms > 0:
        p.error("--rounds must be at least 1 and --budget-ms positive")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not targets or set(targets) - set(TARGETS):
        p.error(f"--targets must name some of {', '.join(TARGETS)}, got {args.targets!r}")
    try:
        flex_lengths = tuple(int(x) for x in args.flex_lengths.split(","))
    except ValueError:
        flex_lengths = ()
    if not flex_lengths or min(flex_lengths) < 1:
        p.error(f"--flex-lengths must be positive integers, got {args.flex_lengths!r}")
    settings = Settings(warmup_ms=200.0, budget_ms=args.budget_ms, min_samples=5)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; timings on a shared machine are noisy"
    )
    results = {}
    if "window" in targets:
        print("1. sliding window: chunked time exponent")
        window = results["window"] = window_exponent(args.rounds, settings)
        print(
            f"   {'PASS' if window['met'] else 'MISS'}: median ms {window.get('median_ms')}, exponent "
            f"{window.get('exponent')} (target {window.get('target')}) {window.get('why', '')}"
        )
    if "gqa" in targets:
        print("2. grouped-query heads: naive K/V memory, MHA / GQA")
        gqa = results["gqa"] = gqa_kv_memory()
        print(
            f"   {'PASS' if gqa['met'] else 'MISS'}: measured K/V ratio {gqa['kv_ratio_measured']} "
            f"(tensor bytes {gqa['kv_ratio_tensors']:g}x: {gqa['mha']['kv_tensor_bytes']:,} vs "
            f"{gqa['gqa']['kv_tensor_bytes']:,} B); call alone {gqa['gqa']['peak_call_only_bytes']:,} B "
            f"(GQA) vs {gqa['mha']['peak_call_only_bytes']:,} B (MHA)"
        )
    if "flex" in targets:
        print("3. flex vs sdpa: throughput ratio, compile and block mask apart")
        flex = results["flex"] = flex_vs_sdpa(args.rounds, settings, flex_lengths)
        for r in flex["records"]:
            verdict = {True: "PASS", False: "MISS"}.get(r.get("met"), "info")
            print(
                f"   {verdict}: N={r['n']} causal={r['causal']} ratio {r.get('ratio')} (target "
                f"{flex['target']}), median ms {r.get('median_ms')}, block mask {r.get('mask_ms_first')} ms, "
                f"compile (first call) {r.get('compile_ms_first')} ms {'; '.join(r['not_ok'])}"
            )
    if "speed" in targets:
        print(f"4. speed: chunked (eager, compiled) throughput / sdpa, target >= {SPEED_TARGET} at N >= 2048")
        speed = results["speed"] = chunked_speed(args.rounds, settings)
        for key, by in speed["ratios"].items():
            print(f"   {key}: " + ", ".join(f"{name} {ratio}" for name, ratio in by.items()))
        print(f"   {'PASS' if speed['met'] else 'MISS'} (met / not met) {'; '.join(speed['problems'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["met"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
