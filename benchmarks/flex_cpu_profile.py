"""Where flex's CPU time goes, against SDPA's, with Linux perf (a benchmark, not a test): the evidence behind
the README's account of why flex misses issue 11's 0.8x-of-SDPA target on CPU.

For each of flex and sdpa, non-causal and causal (fp32, B=1 H=8 N=2048 d=64 unless said), a child process
builds the attnbench variant's call (flex: its block mask and its compiled kernel, both setup, never
sampled), warms it up, and then calls it in a loop; `perf record -F 499 -p PID` samples every thread of that
loop for --seconds, and `perf report --sort dso,sym` gives each symbol's share of the samples. The shares are
grouped into what the kernels do:

  - flex (torch's compiled C++ flex template, fp32 path): the Q.K^T micro-GEMM that inductor generates
    (`*_micro_gemm_transpose_b_*` symbols), the P.V product (`at::native::cpublas::brgemm`, i.e. oneDNN's
    JIT-generated code, which perf shows as `[JIT]`: for fp32 this template sends nothing else there), the
    rest of the template (scale, masks, online softmax), OpenMP;
  - sdpa (ATen's CPU flash kernel): MKL's GEMMs (both Q.K^T and P.V), the rest of the kernel, OpenMP.

Also printed: each child's own ms per call over its loop (the two variants run one after the other, so
their ratio is a rough one; benchmarks/workloads_check.py measures the target's ratio properly), and the
arithmetic the README draws from the shares: flex's time if its Q.K^T cost what its P.V costs (the same
FLOPs), as a fraction of its measured time.

    python benchmarks/flex_cpu_profile.py [--n 2048] [--seconds 8] [--json out.json]

Needs `perf` on PATH with permission to attach to a child (perf_event_paranoid <= 2 for one's own
processes); exits 2 with a one-line reason otherwise. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

B, H, D = 1, 8, 64
LOOP_SLACK_S = 4.0  # the child loops this much longer than perf samples, so perf never outlives it
READY_TIMEOUT_S = 300.0  # a cold inductor cache compiles flex in ~5-60 s on 2 cores

GROUPS = {
    "flex": (
        ("q.kT micro-gemm (inductor)", lambda dso, sym: "micro_gemm_transpose_b" in sym),
        ("p.v brgemm (oneDNN JIT)", lambda dso, sym: dso.startswith("[JIT]")),
        ("softmax, masks, scale (template)", lambda dso, sym: dso.endswith(".so") and "main.so" in dso),
        ("OpenMP", lambda dso, sym: "libgomp" in dso or "libiomp" in dso),
    ),
    "sdpa": (
        ("gemms (MKL)", lambda dso, sym: "mkl" in dso.lower() or "gemm" in sym.lower()),
        ("softmax and the rest (ATen flash kernel)", lambda dso, sym: "libtorch_cpu" in dso),
        ("OpenMP", lambda dso, sym: "libgomp" in dso or "libiomp" in dso),
    ),
}

_ROW = re.compile(r"^\s*([0-9.]+)%\s*\|([^|]*)\|(.*)$")


def parse_report(text: str) -> list[tuple[float, str, str]]:
    """(percent, dso, symbol) for each row of `perf report --sort dso,sym --stdio -t '|'`."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            sym = m.group(3).strip()
            rows.append((float(m.group(1)), m.group(2).strip(), re.sub(r"^\[[.k]\]\s*", "", sym)))
    return rows


def group_shares(variant: str, rows: list[tuple[float, str, str]]) -> dict[str, float]:
    """Each group's share of the samples (percent; the first group a row matches takes it), plus 'other'."""
    shares = {name: 0.0 for name, _ in GROUPS[variant]}
    shares["other"] = 0.0
    for pct, dso, sym in rows:
        name = next((n for n, match in GROUPS[variant] if match(dso, sym)), "other")
        shares[name] += pct
    return {k: round(v, 1) for k, v in shares.items()}


def top_symbols(rows: list[tuple[float, str, str]], k: int = 5) -> list[dict]:
    """The k heaviest symbols with a name (JIT code has none: perf shows addresses)."""
    named = [r for r in rows if not r[2].startswith("0x")]
    heaviest = sorted(named, reverse=True)[:k]
    return [{"percent": p, "dso": dso, "symbol": sym[:120]} for p, dso, sym in heaviest]


def child(variant: str, causal: bool, n: int, seconds: float, ready: str, result: str) -> int:
    """The measured loop: set up one attnbench cell's call, say so in `ready`, loop until `seconds` pass."""
    import torch

    from attnbench import variants

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D) for _ in range(3))
    var = variants.get(variant)
    fn = var.bind(q, k, v, causal=causal)
    for _ in range(3):  # compiles (flex) and warms up
        fn(q, k, v, causal=causal)
    Path(ready).write_text(str(os.getpid()))
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn(q, k, v, causal=causal)
        calls += 1
    elapsed = time.perf_counter() - start
    Path(result).write_text(json.dumps({"calls": calls, "ms_per_call": round(elapsed / calls * 1e3, 2)}))
    return 0


def profile(variant: str, causal: bool, n: int, seconds: float, tmp: Path) -> dict:
    tag = f"{variant}-{'causal' if causal else 'full'}"
    ready, result, data = tmp / f"{tag}.ready", tmp / f"{tag}.json", tmp / f"{tag}.perf"
    loop_s = seconds + LOOP_SLACK_S
    cmd = [sys.executable, __file__, "--child", variant, str(int(causal)), str(n), str(loop_s), str(ready),
           str(result)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{tag} child exited {proc.returncode}: {proc.stderr.read().strip()[-400:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{tag} child not ready after {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.2)
    rec = subprocess.run(["perf", "record", "-q", "-F", "499", "-p", str(proc.pid), "-o", str(data), "--",
                          "sleep", str(seconds)], capture_output=True, text=True)  # fmt: skip
    _, err = proc.communicate()
    if rec.returncode or proc.returncode:
        raise RuntimeError(f"{tag}: perf record exited {rec.returncode} ({rec.stderr.strip()[-300:]}), "
                           f"child {proc.returncode} ({err.strip()[-300:]})")  # fmt: skip
    rep = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso,sym", "--stdio", "--no-children",
                          "-t", "|"], capture_output=True, text=True, check=True)  # fmt: skip
    rows = parse_report(rep.stdout)
    return {
        "variant": variant,
        "causal": causal,
        "shares_percent": group_shares(variant, rows),
        "top_symbols": top_symbols(rows),
        **json.loads(result.read_text()),
    }


def _perf_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"perf is Linux only (this is {sys.platform})"
    if shutil.which("perf") is None:
        return "perf is not on PATH (Debian: apt install linux-perf)"
    probe = subprocess.run(["perf", "stat", "-e", "task-clock", "true"], capture_output=True, text=True)
    if probe.returncode:
        lines = probe.stderr.strip().splitlines() or ["no message"]
        return f"perf cannot count here: {lines[0]}"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        variant, causal, n, seconds, ready, result = argv[1:]
        return child(variant, causal == "1", int(n), float(seconds), ready, result)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="sequence length (queries = keys)")
    parser.add_argument("--seconds", type=float, default=8.0, help="perf's sampling time per case")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.n < 16 or args.seconds <= 0:
        parser.error(f"--n must be at least 16 and --seconds positive, got {args.n} and {args.seconds}")
    reason = _perf_reason()
    if reason:
        print(f"flex_cpu_profile: {reason}", file=sys.stderr)
        return 2
    import torch

    cases = []
    with tempfile.TemporaryDirectory(prefix="flexprof-") as tmp:
        for causal in (False, True):
            for variant in ("flex", "sdpa"):
                case = profile(variant, causal, args.n, args.seconds, Path(tmp))
                cases.append(case)
                print(f"{variant:4s} {'causal' if causal else 'full  '} {case['ms_per_call']:8.2f} ms/call  "
                      + ", ".join(f"{k} {v}%" for k, v in case["shares_percent"].items()))  # fmt: skip
    for causal in (False, True):
        flex, sdpa = (c for c in cases if c["causal"] == causal)
        s = flex["shares_percent"]
        qk, pv = s["q.kT micro-gemm (inductor)"], s["p.v brgemm (oneDNN JIT)"]
        flex["if_qk_cost_pv_fraction"] = round((100 - qk + pv) / 100, 2)
        flex["sdpa_over_flex_this_run"] = round(sdpa["ms_per_call"] / flex["ms_per_call"], 2)
        print(f"{'causal' if causal else 'full'}: flex's q.kT {qk}% of its samples against p.v {pv}% for the "
              f"same FLOPs; at p.v's cost flex would take {flex['if_qk_cost_pv_fraction']} of its time; "
              f"sdpa/flex time this run {flex['sdpa_over_flex_this_run']}")  # fmt: skip
    if args.json:
        what = f"perf record -F 499 shares of each call loop, fp32 B={B} H={H} N={args.n} d={D}"
        res = {
            "what": f"{what}, {args.seconds:g} s per case",
            "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "cases": cases,
        }
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
