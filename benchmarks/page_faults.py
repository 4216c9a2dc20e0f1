"""Why the cpu preset sets THP_MEM_ALLOC_ENABLE=1: page faults and time per naive call, with and without it.

    python benchmarks/page_faults.py --seq-len 8192 --out results/reference/page-faults-epyc-2core.json

torch's CPU allocator hands large tensors back to the OS when they are freed, so every call of a
score-materialising variant maps its N x N scores afresh and faults them in 4 KiB at a time; with
THP_MEM_ALLOC_ENABLE=1 torch aligns large allocations to 2 MiB and asks for transparent huge pages.
The variable is read once when torch starts, so each setting runs in its own interpreter. Faults come from
getrusage(RUSAGE_SELF).ru_minflt around each call (B=1, H=8, d=64, fp32, forward, as the cpu preset).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone

CHILD = r"""
import json, resource, sys, time
import torch
from attnbench import variants
n, calls = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 8, n, 64, generator=g) for _ in range(3))
naive = variants.get("naive").fn
out = []
with torch.no_grad():
    for _ in range(calls):
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        naive(q, k, v)
        t1, f1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out.append({"seconds": round(t1 - t0, 4), "minor_faults": f1 - f0})
print(json.dumps({"threads": torch.get_num_threads(), "calls": out}))
"""


def measure(n: int, calls: int, thp: str) -> dict:
    env = dict(os.environ, THP_MEM_ALLOC_ENABLE=thp)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(n), str(calls)], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return {"THP_MEM_ALLOC_ENABLE": thp, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--out", help="write the JSON here as well as to stdout")
    a = ap.parse_args()
    from attnbench.harness.measure.fingerprint import collect

    fp = collect(with_gpu=False)
    result = {
        "what": "naive attention, B=1 H=8 d=64 fp32 forward: per-call minor page faults and time",
        "command": "python benchmarks/page_faults.py " + " ".join(sys.argv[1:]),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seq_len": a.seq_len,
        "machine": {
            k: fp.get(k)
            for k in (
                "cpu_model",
                "physical_cores",
                "memory_bytes",
                "torch",
                "transparent_hugepages",
                "hostname",
            )
        },  # fmt: skip
        "settings": [measure(a.seq_len, a.calls, thp) for thp in ("0", "1")],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
