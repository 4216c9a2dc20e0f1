"""flex_attention's compile and kernel options against the best SDPA backend, on one cell (a benchmark).

Issue 27's target is flex >= 0.85x the best SDPA backend at B1 H16 N8192 d128 bf16 (non-causal); the
attnbench `flex` variant measured 0.66x forward and 0.57x forward+backward on an H200 (compiled with
dynamic=True and torch's default kernel config). This script asks whether that is flex's or the variant's:
the same cell compiled the ways a user can compile it, each timed against sdpa_cudnn and sdpa_flash in the
same process and rounds:

  shipped        attnbench's `flex` variant as the harness calls it (its block mask and compile options)
  static         torch.compile(flex_attention, dynamic=False), torch's default kernel config for the GPU
  static+tma     the same with kernel_options USE_TMA=True (Hopper's tensor memory accelerator)
  autotune       mode="max-autotune-no-cudagraphs": inductor benchmarks its list of flex configs and keeps
                 the fastest (its table goes to stderr)
  autotune+tma   both

Every compiled output is checked against sdpa's (max abs difference), so a fast config that is wrong is
seen. Configs are compiled in that order while --seconds (per pass) lasts (the rest are recorded as not
reached), then timed in --rounds rounds, each round visiting every config in a rotated order
(triton.testing.do_bench on CUDA, torch.utils.benchmark on CPU); the JSON is written after every step, so a
run stopped by a device command's limit keeps what it measured. The FLASH backend (flex through
FlashAttention 4's CuTe DSL) is not tried: it needs flash-attn-4 and nvidia-cutlass-dsl, whose CUDA 13
libraries wheel alone is 92 MB, more than a device command carries.

    python benchmarks/flex_options.py --device cuda --json flex-options.json
    python benchmarks/flex_options.py --device cpu --n 1024 --heads 8 --d 64 --dtype float32 --passes fwd

Exit status 0 when every reached config was timed, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from attnbench import variants
from attnbench.results.formulas import attention_flops, tflops

sys.path.insert(0, str(Path(__file__).parent))
from harness_check import pass_call  # noqa: E402  (the same calls that check times)

# name -> (devices, torch.compile arguments, kernel_options)
CONFIGS = {
    "static": (("cpu", "cuda"), {"dynamic": False}, {}),
    "static+tma": (("cuda",), {"dynamic": False}, {"USE_TMA": True}),
    "autotune": (("cpu", "cuda"), {"dynamic": False, "mode": "max-autotune-no-cudagraphs"}, {}),
    "autotune+tma": (("cuda",), {"dynamic": False, "mode": "max-autotune-no-cudagraphs"}, {"USE_TMA": True}),
}
REFERENCES = {"cuda": ("sdpa_cudnn", "sdpa_flash"), "cpu": ("sdpa",)}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def ms_per_call(call, device: str) -> float:
    """Median ms per call: triton's do_bench on CUDA (L2 flushed between calls), torch.utils.benchmark
    on CPU."""
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(call, warmup=25, rep=150, return_mode="median")
    from torch.utils.benchmark import Timer

    return Timer(stmt="call()", globals={"call": call}).blocked_autorange(min_run_time=0.5).median * 1e3


def flex_fn(name: str, q, k, v):
    """The attention function of one config: fn(q, k, v) -> out."""
    if name == "shipped":
        variant = variants.get("flex")
        return variant.bind(q, k, v, causal=False, key_lengths=None)
    from torch.nn.attention import flex_attention as fa

    from attnbench.variants import flex as flex_variant

    flex_variant._compiled(False)  # dynamo's recompile limit raised as the variant does (many configs here)
    _, compile_args, options = CONFIGS[name]
    compiled = torch.compile(fa.flex_attention, **compile_args)
    block_mask = fa.create_block_mask(fa.noop_mask, None, None, q.shape[2], k.shape[2], device=q.device)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, kernel_options=dict(options) or None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--passes", default="fwd,fwdbwd")
    ap.add_argument("--configs", default="shipped,static,static+tma,autotune,autotune+tma")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=120.0, help="per pass: compile no new config after this")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    passes = [p for p in args.passes.split(",") if p]
    names = [c for c in args.configs.split(",") if c]
    bad = [p for p in passes if p not in ("fwd", "fwdbwd")] + [
        c for c in names if c != "shipped" and c not in CONFIGS
    ]
    if bad:
        print(f"flex_options: unknown pass or config {', '.join(bad)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("flex_options: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    names = [c for c in names if c == "shipped" or args.device in CONFIGS[c][0]]
    dev, dtype = args.device, getattr(torch, args.dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (
        torch.randn(1, args.heads, args.n, args.d, generator=gen, dtype=torch.float32).to(dev, dtype)
        for _ in range(3)
    )
    record = {
        "cell": f"B1 H{args.heads} N{args.n} d{args.d} {args.dtype} non-causal",
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "torch": torch.__version__,
        "rounds": args.rounds,
        "rows": [],
    }

    def save():
        if args.json:
            args.json.write_text(json.dumps(record, indent=1) + "\n")

    ok = True
    for pass_ in passes:
        calls, rows = {}, {}
        started = time.monotonic()
        for name in REFERENCES[dev]:
            fn = variants.get(name).bind(q, k, v, causal=False, key_lengths=None)
            calls[name] = pass_call(fn, q, k, v, pass_)
            rows[name] = {"config": name, "pass": pass_, "reference": True}
        reference_out = calls[REFERENCES[dev][0]]().float()
        for name in names:
            row = rows[name] = {"config": name, "pass": pass_}
            record["rows"].append(row)
            if time.monotonic() - started > args.seconds:
                row["status"] = f"not reached (--seconds {args.seconds:g})"
                save()
                continue
            t0 = time.monotonic()
            try:
                call = pass_call(flex_fn(name, q, k, v), q, k, v, pass_)
                out = call()
                sync(dev)
            except Exception as exc:  # a config torch refuses is a result, not the end of the run
                row["status"] = "error"
                row["message"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
                ok = False
                save()
                print(f"{pass_} {name}: {row['message']}", file=sys.stderr)
                continue
            row["compile_s"] = round(time.monotonic() - t0, 1)
            row["max_abs_diff"] = float((out.detach().float() - reference_out).abs().max())
            row["status"] = "ok"
            calls[name] = call
            print(f"{pass_} {name}: compiled in {row['compile_s']} s, max |diff| {row['max_abs_diff']:.3g}")
            save()
        for name in REFERENCES[dev]:
            record["rows"].append(rows[name])
        timed = list(calls)
        samples = {name: [] for name in timed}
        for r in range(args.rounds):
            order = timed[r % len(timed) :] + timed[: r % len(timed)]
            for name in order:
                samples[name].append(ms_per_call(calls[name], dev))
        flops = attention_flops(1, args.heads, args.n, args.n, args.d, args.d, causal=False, pass_=pass_)
        for name in timed:
            ms = statistics.median(samples[name])
            rows[name].update(ms_rounds=[round(x, 4) for x in samples[name]], ms=round(ms, 4),
                              tflops=float(f"{tflops(flops, ms):.4g}"))  # fmt: skip
        best = min(REFERENCES[dev], key=lambda n: rows[n]["ms"])
        for name in timed:
            rows[name]["of_best_sdpa"] = round(rows[best]["ms"] / rows[name]["ms"], 3)
            rows[name]["best_sdpa"] = best
            print(f"{pass_} {name:13} {rows[name]['ms']:9.3f} ms {rows[name]['tflops']:7.4g} TFLOP/s "
                  f"{rows[name]['of_best_sdpa']:6.3f}x {best}")  # fmt: skip
        save()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
