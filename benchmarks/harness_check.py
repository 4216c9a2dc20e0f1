"""Checks the harness's own numbers against independent tools, in one run (a benchmark, not a unit test).

CPU (default):
  1. harness median for sdpa at N=1024 and 2048 vs torch.utils.benchmark.Timer.blocked_autorange on the
     same inputs (target: within +-5%), measured interleaved, three rounds each;
  2. peak memory of the reference naive cell (B=1 H=8 N=2048 d=64 fp32) vs the analytic 272,629,760 B
     (two N x N fp32 score tensors plus the output; target: within 2%);
  3. chunked peak at N=4096 vs naive's (target: at most 1/30);
  4. chunked / sdpa throughput at N=2048 and 4096 (target: at least 0.7).
CUDA (--device cuda): the harness's TFLOP/s for sdpa_flash / sdpa_cudnn / sdpa_efficient / xformers at
bf16, d=128, N=8192 (fwd and fwd+bwd) beside the same cell timed by triton.testing.do_bench.

    python benchmarks/harness_check.py [--device cuda] [--json out.json]

Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from attnbench import variants
from attnbench.harness.cell import InputCache, make_inputs, measure_cell
from attnbench.harness.spec import CellSpec, Settings
from attnbench.results.formulas import attention_flops, tflops

NAIVE_REFERENCE_BYTES = 272_629_760  # 2 * (8 * 2048 * 2048 * 4) + 8 * 2048 * 64 * 4


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


def check_cpu(settings: Settings) -> tuple[list[dict], bool]:
    results, ok = [], True
    cache = InputCache()

    # 1. timing agreement, interleaved rounds so that machine drift hits both tools alike
    for n in (1024, 2048):
        spec = cell("sdpa", n)
        ours, theirs = [], []
        for _ in range(3):
            ours.append(measure_cell(spec, settings, cache)["time_ms_median"])
            theirs.append(blocked_autorange_ms(spec))
        a, b = statistics.median(ours), statistics.median(theirs)
        diff = a / b - 1
        good = abs(diff) <= 0.05
        ok &= good
        results.append(
            {
                "check": f"sdpa N={n} harness vs blocked_autorange",
                "harness_ms": round(a, 3),
                "blocked_autorange_ms": round(b, 3),
                "difference": f"{diff:+.1%}",
                "target": "+-5%",
                "rounds_harness": [round(x, 3) for x in ours],
                "rounds_autorange": [round(x, 3) for x in theirs],
                "met": good,
            }
        )

    # 2. exact peak memory of the reference naive cell
    naive = measure_cell(cell("naive", 2048), settings, cache)
    dev = naive["peak_mem_bytes"] / NAIVE_REFERENCE_BYTES - 1
    good = abs(dev) <= 0.02
    ok &= good
    results.append(
        {
            "check": "naive B1 H8 N2048 d64 fp32 peak",
            "measured_bytes": naive["peak_mem_bytes"],
            "analytic_bytes": NAIVE_REFERENCE_BYTES,
            "difference": f"{dev:+.3%}",
            "target": "+-2%",
            "met": good,
        }
    )

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


def check_cuda(settings: Settings) -> tuple[list[dict], bool]:
    import triton.testing

    results, ok = [], True
    cache = InputCache()
    for pass_ in ("fwd", "fwdbwd"):
        for name in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "xformers"):
            spec = cell(name, 8192, device="cuda", dtype="bfloat16", heads=16, d=128, pass_=pass_)
            row = measure_cell(spec, settings, cache)
            rec = {
                "check": f"{name} bf16 d128 N8192 {pass_}",
                "status": row["status"],
                "message": row["message"],
            }
            if row.get("time_ms_median") is not None:
                q, k, v, _ = cache.get(spec, settings.seed)
                fn = variants.get(name).fn
                if pass_ == "fwd":

                    def call(fn=fn, q=q, k=k, v=v):
                        with torch.no_grad():
                            fn(q, k, v)
                else:
                    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
                    d_out = torch.randn_like(q)

                    def call(fn=fn, leaves=leaves, d_out=d_out):
                        for t in leaves:
                            t.grad = None
                        fn(*leaves).backward(d_out)

                ms = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")
                flops = attention_flops(1, 16, 8192, 8192, 128, 128, causal=False, pass_=pass_)
                diff = row["time_ms_median"] / ms - 1
                good = abs(diff) <= 0.05
                ok &= good
                rec.update(
                    harness_ms=round(row["time_ms_median"], 4),
                    harness_tflops=round(row["tflops"], 1),
                    do_bench_ms=round(ms, 4),
                    do_bench_tflops=round(tflops(flops, ms), 1),
                    difference=f"{diff:+.1%}",
                    peak_mem_bytes=row["peak_mem_bytes"],
                    met=good,
                )
            results.append(rec)
    return results, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    settings = Settings(warmup_ms=100, budget_ms=2000, min_ms=500)
    results, ok = (check_cuda if args.device == "cuda" else check_cpu)(settings)
    for rec in results:
        verdict = {True: "MET ", False: "MISS"}.get(rec.get("met"), "----")
        detail = ", ".join(f"{k}={v}" for k, v in rec.items() if k not in ("check", "met"))
        print(f"[{verdict}] {rec['check']}: {detail}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print("all targets met" if ok else "some targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
