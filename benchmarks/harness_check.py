"""Checks the harness's own numbers against independent tools, in one run (a benchmark, not a unit test).

CPU (default):
  1. harness median for sdpa at N=1024 and 2048 vs torch.utils.benchmark.Timer.blocked_autorange on the
     same inputs, in --rounds (>= 9) paired rounds: each round times the cell with both tools back to back
     (alternating which goes first), and the check reads the median of the per-round ratios with its
     distribution-free 95% CI (order statistics). Target: the CI lies within +-3% of 1. When the CI is
     itself wider than that band (6% from end to end), the machine is too noisy for any verdict: a
     warning is printed instead of MET or MISS;
  2. peak memory of the reference naive cell (B=1 H=8 N=2048 d=64 fp32) vs the analytic 272,629,760 B
     (two N x N fp32 score tensors plus the output; target: within 2%);
  3. chunked peak at N=4096 vs naive's (target: at most 1/30);
  4. chunked / sdpa throughput at N=2048 and 4096 (target: at least 0.7).
CUDA (--device cuda): the harness's time for sdpa_flash / sdpa_cudnn / sdpa_efficient / xformers / flex at
bf16, d=128, N=8192 (fwd and fwd+bwd) against the same cell timed by triton.testing.do_bench, in the same
paired rounds with the same target; each measurement's raw ms and the median SM clock NVML read during it
are kept (an order effect between the tools shows in which of them moves, and whether the clock did). Then
the CUDA allocator's peak against the analytic size (target: within 2%): the reference naive cell in fp32,
and sdpa_flash's forward at the timed cell (its output plus the fp32 log-sum-exp it keeps per row).

    python benchmarks/harness_check.py [--device cuda] [--rounds 9] [--json out.json]

Exit status 0 when at least one comparison was made and every target is met, 1 otherwise (a miss, a
noisy-machine warning, or nothing compared, e.g. no CUDA variant available), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

from attnbench import variants
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.measure.inputs import InputCache, make_inputs
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import attention_flops, tflops

NAIVE_REFERENCE_BYTES = 272_629_760  # 2 * (8 * 2048 * 2048 * 4) + 8 * 2048 * 64 * 4
TIMER_BAND = 0.03  # harness / other tool: the 95% CI of the median per-round ratio within +-3% of 1
MIN_ROUNDS = 9  # with 9 rounds the 95% CI of a median is [2nd, 8th] of 9: 3 rounds give no CI at all


def median_ci(x: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (order statistics, scipy's quantile_test); NaN when too few.

    With 9 values the 95% CI is [2nd smallest, 8th smallest] (coverage 96%); a bootstrap of 9 values
    would understate it.
    """
    x = [float(v) for v in x if v == v]
    if len(x) < 6:  # 5 values cannot reach 95% coverage: 2 · 0.5^5 = 0.0625 > 0.05
        return math.nan, math.nan
    from scipy.stats import quantile_test

    ci = quantile_test(x, q=float(sorted(x)[len(x) // 2]), p=0.5).confidence_interval(level)
    return float(ci.low), float(ci.high)


def timer_verdict(ours: list[float], theirs: list[float], band: float = TIMER_BAND) -> dict:
    """The per-round ratios ours/theirs, their median and 95% CI, and 'met', 'missed' or 'noisy'.

    Noisy when the CI is wider than the band itself: then no placement of it could meet the target and
    a miss would say more about the machine than about the harness.
    """
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    lo, hi = median_ci(ratios)
    med = statistics.median(ratios)
    if not (lo == lo and hi == hi) or hi - lo > 2 * band:  # NaN CI (too few rounds) or too wide
        state = "noisy"
    else:
        state = "met" if 1 - band <= lo and hi <= 1 + band else "missed"
    return {
        "ratio_median": round(med, 4),
        "ratio_ci95": [round(lo, 4), round(hi, 4)],
        "difference": f"{med - 1:+.1%}",
        "target": f"95% CI within +-{band:.0%}",
        "state": state,
        "met": {"met": True, "missed": False, "noisy": None}[state],
        "ratios": [round(r, 4) for r in ratios],
    }


def paired_rounds(ours, theirs, rounds: int) -> tuple[list[float], list[float]]:
    """`rounds` pairs of (ours(), theirs()) in ms, back to back, alternating which runs first so that
    drift within a round and any order effect hit both tools alike."""
    a, b = [], []
    for i in range(rounds):
        if i % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    return a, b


def summary(results: list[dict]) -> tuple[list[str], int]:
    """The closing lines and exit status: 'all targets met' only when something was compared."""
    compared = [r for r in results if "met" in r]
    missed = [r for r in compared if r["met"] is False]
    noisy = [r for r in compared if r["met"] is None]
    lines = []
    if noisy:
        lines.append(
            f"WARNING: noisy machine: {len(noisy)} timing check(s) gave no verdict (95% CI of the per-round "
            f"ratio wider than +-{TIMER_BAND:.0%}); rerun on a quiet machine or with more --rounds"
        )
    if not compared:
        lines.append("no comparison was made: nothing verified")
        return lines, 1
    if missed:
        lines.append(f"some targets missed ({len(missed)} of {len(compared)} checks)")
        return lines, 1
    if noisy:
        lines.append(f"no target missed; {len(compared) - len(noisy)} of {len(compared)} checks met")
        return lines, 1
    lines.append(f"all targets met ({len(compared)} checks)")
    return lines, 0


def cell(variant: str, n: int, *, device="cpu", dtype="float32", heads=8, d=64, pass_="fwd") -> CellSpec:
    return CellSpec(variant, device, dtype, 1, heads, n, d, d, False, 0.0, pass_)


def blocked_autorange_ms(spec: CellSpec) -> float:
    """Median ms per call by torch.utils.benchmark on the harness's own inputs, same thread count."""
    from torch.utils.benchmark import Timer

    q, k, v, _ = make_inputs(spec, 0)
    fn = variants.get(spec.variant).fn
    timer = Timer(
        stmt="fn(q, k, v)",
        setup="torch.set_grad_enabled(False)",
        globals={"fn": fn, "q": q, "k": k, "v": v, "torch": torch},
        num_threads=torch.get_num_threads(),
    )
    return timer.blocked_autorange(min_run_time=2.0).median * 1e3


def memory_check(name: str, measured: int, analytic: int) -> dict:
    dev = measured / analytic - 1
    return {
        "check": name,
        "measured_bytes": measured,
        "analytic_bytes": analytic,
        "difference": f"{dev:+.3%}",
        "target": "+-2%",
        "met": abs(dev) <= 0.02,
    }


def check_cpu(settings: Settings, rounds: int = MIN_ROUNDS) -> tuple[list[dict], bool]:
    results, ok = [], True
    cache = InputCache()

    # 1. timing agreement in paired rounds, so that machine drift hits both tools alike
    for n in (1024, 2048):
        spec = cell("sdpa", n)
        ours, theirs = paired_rounds(
            lambda spec=spec: measure_cell(spec, settings, cache)["time_ms_median"],
            lambda spec=spec: blocked_autorange_ms(spec),
            rounds,
        )
        rec = timer_verdict(ours, theirs)
        ok &= rec["met"] is True
        results.append(
            {
                "check": f"sdpa N={n} harness vs blocked_autorange",
                "harness_ms": round(statistics.median(ours), 3),
                "blocked_autorange_ms": round(statistics.median(theirs), 3),
                **rec,
            }
        )

    # 2. exact peak memory of the reference naive cell
    naive = measure_cell(cell("naive", 2048), settings, cache)
    rec = memory_check("naive B1 H8 N2048 d64 fp32 peak", naive["peak_mem_bytes"], NAIVE_REFERENCE_BYTES)
    ok &= rec["met"]
    results.append(rec)

    # 3 + 4. chunked memory and throughput against naive and sdpa, interleaved per N
    rows = {}
    for n in (2048, 4096):
        for name in ("naive", "chunked", "sdpa"):
            rows[(name, n)] = measure_cell(cell(name, n), settings, cache)
    ratio = rows[("naive", 4096)]["peak_mem_bytes"] / rows[("chunked", 4096)]["peak_mem_bytes"]
    good = ratio >= 30
    ok &= good
    results.append(
        {
            "check": "naive / chunked peak memory at N=4096",
            "naive_bytes": rows[("naive", 4096)]["peak_mem_bytes"],
            "chunked_bytes": rows[("chunked", 4096)]["peak_mem_bytes"],
            "ratio": round(ratio, 1),
            "target": ">= 30",
            "met": good,
        }
    )
    for n in (2048, 4096):
        c, s = rows[("chunked", n)], rows[("sdpa", n)]
        r = c["tflops"] / s["tflops"]
        good = r >= 0.7
        ok &= good
        results.append(
            {
                "check": f"chunked / sdpa throughput at N={n}",
                "chunked_gflops": round(c["tflops"] * 1e3, 1),
                "sdpa_gflops": round(s["tflops"] * 1e3, 1),
                "ratio": round(r, 3),
                "target": ">= 0.7",
                "met": good,
            }
        )
    return results, ok


CUDA_VARIANTS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "xformers", "flex")


def timed_cuda_cell(variant: str, pass_: str) -> CellSpec:
    """The CUDA cell timed against do_bench: B=1, H=16, N=8192, d=128, bf16, non-causal."""
    return cell(variant, 8192, device="cuda", dtype="bfloat16", heads=16, d=128, pass_=pass_)


def clocked(measure, clocks: list):
    """measure() in ms, with the median SM clock NVML read while it ran appended to `clocks` (None
    without NVML): which tool of a pair ran slower, and at what clock."""
    from attnbench.harness.measure.telemetry import sampling

    with sampling("cuda") as sampler:
        ms = measure()
    mhz = sorted(s.sm_mhz for s in sampler.samples if s.sm_mhz is not None)
    clocks.append(mhz[len(mhz) // 2] if mhz else None)
    return ms


def check_cuda_memory(settings: Settings, cache: InputCache) -> list[dict]:
    """The CUDA allocator's peak of two cells against their analytic size."""
    out = []
    naive = measure_cell(cell("naive", 2048, device="cuda"), settings, cache)
    if naive["peak_mem_bytes"] is not None:
        out.append(
            memory_check(
                "naive B1 H8 N2048 d64 fp32 CUDA peak", naive["peak_mem_bytes"], NAIVE_REFERENCE_BYTES
            )
        )
    flash = measure_cell(timed_cuda_cell("sdpa_flash", "fwd"), settings, cache)
    if flash["peak_mem_bytes"] is not None:
        analytic = 16 * 8192 * 128 * 2 + 16 * 8192 * 4  # bf16 output + fp32 log-sum-exp per row
        out.append(
            memory_check("sdpa_flash B1 H16 N8192 d128 bf16 fwd CUDA peak", flash["peak_mem_bytes"], analytic)
        )
    return out


def pass_call(fn, q, k, v, pass_: str):
    """A no-argument call of fn for the pass, as another tool times it: forward under no_grad, or forward
    + backward of a fixed d_out into fresh leaves (their grads cleared each call); returns the output."""
    if pass_ == "fwd":

        def call():
            with torch.no_grad():
                return fn(q, k, v)

        return call
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    d_out = torch.randn_like(q)

    def call():
        for t in leaves:
            t.grad = None
        out = fn(*leaves)
        out.backward(d_out)
        return out

    return call


def check_cuda(
    settings: Settings,
    rounds: int = MIN_ROUNDS,
    names: tuple[str, ...] = CUDA_VARIANTS,
    passes: tuple[str, ...] = ("fwd", "fwdbwd"),
    save=lambda results: None,
) -> tuple[list[dict], bool]:
    """`save(results)` after each check, so that a run stopped by its time limit keeps what it measured."""
    import triton.testing

    results, ok = [], True
    cache = InputCache()
    memory = check_cuda_memory(settings, cache)
    save(memory)
    for pass_ in passes:
        for name in names:
            spec = timed_cuda_cell(name, pass_)
            row = measure_cell(spec, settings, cache)
            rec = {
                "check": f"{name} bf16 d128 N8192 {pass_}",
                "status": row["status"],
                "message": row["message"],
            }
            if row.get("time_ms_median") is not None:
                variant = variants.get(name)
                # the inputs and the callable measure_cell times: in the variant's layout, its setup done
                q, k, v, _ = cache.get(spec, settings.seed, variant.cap.layout)
                call = pass_call(variant.bind(q, k, v, causal=False, key_lengths=None), q, k, v, pass_)
                ours_mhz, theirs_mhz = [], []
                ours, theirs = paired_rounds(
                    lambda spec=spec, clocks=ours_mhz: clocked(
                        lambda: measure_cell(spec, settings, cache)["time_ms_median"], clocks
                    ),
                    lambda call=call, clocks=theirs_mhz: clocked(
                        lambda: triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median"),
                        clocks,
                    ),
                    rounds,
                )
                flops = attention_flops(1, 16, 8192, 8192, 128, 128, causal=False, pass_=pass_)
                verdict = timer_verdict(ours, theirs)
                ok &= verdict["met"] is True
                a, b = statistics.median(ours), statistics.median(theirs)
                rec.update(
                    harness_ms=round(a, 4),
                    harness_tflops=round(tflops(flops, a), 1),
                    do_bench_ms=round(b, 4),
                    do_bench_tflops=round(tflops(flops, b), 1),
                    peak_mem_bytes=row["peak_mem_bytes"],
                    **verdict,
                    harness_ms_rounds=[round(x, 4) for x in ours],
                    do_bench_ms_rounds=[round(x, 4) for x in theirs],
                    harness_sm_mhz=ours_mhz,
                    do_bench_sm_mhz=theirs_mhz,
                    first_in_round=["attnbench" if i % 2 == 0 else "do_bench" for i in range(rounds)],
                )
            results.append(rec)
            save(results + memory)
    for rec in memory:
        ok &= rec["met"]
    flex = [flex_against_sdpa(results, p) for p in passes]
    for rec in flex:
        ok &= rec.get("met", True)
    return results + memory + [r for r in flex if r], ok


def flex_against_sdpa(results: list[dict], pass_: str) -> dict:
    """flex's throughput at the timed cell against the best SDPA backend's (the issue's target: >= 0.85),
    from the harness's medians of the same rounds; {} where flex or every SDPA backend was not timed."""
    tf = {
        r["check"].split()[0]: r["harness_tflops"]
        for r in results
        if r["check"].endswith(f" {pass_}") and "harness_tflops" in r
    }
    sdpa = {k: v for k, v in tf.items() if k.startswith("sdpa")}
    if "flex" not in tf or not sdpa:
        return {}
    best = max(sdpa, key=sdpa.get)
    ratio = tf["flex"] / sdpa[best]
    return {
        "check": f"flex / best SDPA backend ({best}) bf16 d128 N8192 {pass_}",
        "flex_tflops": tf["flex"],
        "best_sdpa_tflops": sdpa[best],
        "ratio": round(ratio, 3),
        "target": ">= 0.85",
        "met": ratio >= 0.85,
    }


def in_worker_conditions() -> None:
    """Re-run this script under the allocator environment every attnbench worker starts with
    (harness.measure.allocator: glibc keeps freed memory, torch asks for huge pages) where it is not set yet:
    the check times cells in this process, and without it each tool's calls met fresh mappings and page
    faults by the process's history (sdpa at N = 1024 on the 2-core VM: per-round ratios 0.68 to 1.81)."""
    import os

    from attnbench.harness.measure.allocator import worker_environ

    env = worker_environ()
    if env != dict(os.environ):  # glibc reads MALLOC_* at start: only a new process takes them
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--rounds",
        type=int,
        default=MIN_ROUNDS,
        help=f"paired rounds per timing check (at least {MIN_ROUNDS}; default {MIN_ROUNDS})",
    )
    parser.add_argument(
        "--variants",
        default=",".join(CUDA_VARIANTS),
        help="with --device cuda: the variants compared with do_bench (default: all five)",
    )
    parser.add_argument("--pass", dest="passes", default="fwd,fwdbwd", help="with --device cuda: fwd, fwdbwd")
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=2000.0,
        help="the harness's sampling budget per cell (default 2000)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    names = tuple(n for n in args.variants.split(",") if n)
    passes = tuple(p for p in args.passes.split(",") if p)
    bad = [n for n in names if n not in CUDA_VARIANTS] + [p for p in passes if p not in ("fwd", "fwdbwd")]
    if bad or not names or not passes or not args.budget_ms > 0:
        print(
            f"harness_check: error: unknown or empty --variants/--pass, or --budget-ms <= 0: {bad}",
            file=sys.stderr,
        )
        return 2
    if args.rounds < MIN_ROUNDS:  # fewer rounds give no 95% CI worth reading; refuse before any work
        print(f"harness_check: error: --rounds {args.rounds}: need at least {MIN_ROUNDS}", file=sys.stderr)
        return 2
    in_worker_conditions()
    settings = Settings(warmup_ms=100, budget_ms=args.budget_ms, min_ms=min(500.0, args.budget_ms))

    def save(results: list[dict]) -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))

    if args.device == "cuda":
        results, _ = check_cuda(settings, args.rounds, names, passes, save)
    else:
        results, _ = check_cpu(settings, args.rounds)
    for rec in results:
        tag = {True: "MET ", False: "MISS", None: "NOISY"}.get(rec.get("met"), "----")
        if "met" not in rec:
            tag = "----"
        detail = ", ".join(f"{k}={v}" for k, v in rec.items() if k not in ("check", "met", "state"))
        print(f"[{tag}] {rec['check']}: {detail}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    lines, status = summary(results)
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
