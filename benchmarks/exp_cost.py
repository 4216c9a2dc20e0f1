"""What an elementwise exp costs on this machine, per input kind: the figures behind chunked's base-2 and
shift-free forward (a benchmark, not a test).

One fp32 score block of chunked's size on one k/v head group, (8, 256, 512) = 1 Mi elements, timed with
torch.utils.benchmark (blocked_autorange, median) for:
  - exp and exp2 of standard-normal scores (what a block of unshifted or shifted scores looks like);
  - exp of a block whose second half is -inf (a masked block: exp meets -inf);
  - exp of a block whose second half is -95 (outputs below float32's smallest normal: subnormal results);
  - a multiply by 2 (one read and one write of the block: the memory floor of any elementwise pass).

    python benchmarks/exp_cost.py [--threads 2] [--json out.json]

Prints ns per element for each and the ratios chunked's docstring and the README quote.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from torch.utils import benchmark

SHAPE = (8, 256, 512)


def _inputs() -> dict[str, torch.Tensor]:
    scores = torch.randn(*SHAPE, generator=torch.Generator().manual_seed(0))
    masked, subnormal = scores.clone(), scores.clone()
    masked[..., SHAPE[-1] // 2 :] = float("-inf")
    subnormal[..., SHAPE[-1] // 2 :] = -95.0
    return {"randn": scores, "half -inf": masked, "half -95": subnormal}


def measure(threads: int) -> dict:
    torch.set_num_threads(threads)
    x = _inputs()
    out = torch.empty(SHAPE)
    cases = {
        "exp(randn)": ("torch.exp(a, out=out)", x["randn"]),
        "exp2(randn)": ("torch.exp2(a, out=out)", x["randn"]),
        "exp(half -inf)": ("torch.exp(a, out=out)", x["half -inf"]),
        "exp(half -95)": ("torch.exp(a, out=out)", x["half -95"]),
        "mul(randn, 2)": ("torch.mul(a, 2.0, out=out)", x["randn"]),
    }
    ns = {}
    for name, (stmt, a) in cases.items():
        timer = benchmark.Timer(stmt, globals={"torch": torch, "a": a, "out": out}, num_threads=threads)
        ns[name] = round(timer.blocked_autorange(min_run_time=1.0).median / a.numel() * 1e9, 4)
    return {
        "what": f"ns per fp32 element, block {SHAPE}, {threads} threads, torch.utils.benchmark median",
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "ns_per_element": ns,
        "exp_over_exp2": round(ns["exp(randn)"] / ns["exp2(randn)"], 2),
        "masked_over_finite": round(ns["exp(half -inf)"] / ns["exp(randn)"], 2),
        "subnormal_over_finite": round(ns["exp(half -95)"] / ns["exp(randn)"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    res = measure(args.threads)
    for name, value in res["ns_per_element"].items():
        print(f"{name:16s} {value:7.3f} ns/element")
    print(f"exp / exp2 {res['exp_over_exp2']}x; exp with half -inf {res['masked_over_finite']}x, "
          f"with half subnormal results {res['subnormal_over_finite']}x the finite block")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
