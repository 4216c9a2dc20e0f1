"""Issue 39's paged target on a run of the paged preset (a benchmark, not a test): gather-then-SDPA's K/V
GB/s at the largest context against the run's calibrated copy bandwidth (the target: within 2x, at least 50%),
and against the most a gather can reach.

The copy bandwidth C counts bytes read plus bytes written. paged_gather copies each sequence's first
ceil(max L / page) pages (G bytes of K and V: every sequence padded to the longest) into a contiguous batch,
then SDPA reads that batch: at least 3G bytes move, at C, for the kv_bytes (sum of L_b) a row counts. Its K/V
GB/s is at most C * kv_bytes / (3G), about C / 6 for the preset's uniform lengths (G = 2.1 kv_bytes), so the
50% target cannot be met by a gather; a kernel that reads the pages in place (paged_flex, varlen_attn) can.

With --measure (CPU), the largest cell's call is split: its two gathers alone, SDPA on what they gathered
alone, and the whole call, each the median of repeated calls, in a process whose memory comes as a
worker's does (harness.measure.allocator: without it every call faults its output in afresh).

    python benchmarks/paged_check.py [RUN_DIR ...] [--measure]
    # RUN_DIR: results/reference/paged-epyc-2core results/reference/h200-paged-2026-11-28

Exit status 0 when gather meets the target everywhere, 1 otherwise (as it is by construction).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

from attnbench.results.store import latest_rows, read_meta

ROOT = Path(__file__).resolve().parent.parent
RUNS = ["results/reference/paged-epyc-2core", "results/reference/h200-paged-2026-11-28"]
TARGET = 0.5


def gathered_bytes(row: dict) -> int:
    """Bytes of K and V paged_gather copies for a row: B sequences of ceil(max L / page) whole pages each."""
    lengths, page = row["seq_lens"], int(row["page_size"])
    per_token = row["kv_bytes"] / sum(lengths)  # K and V at H_kv heads
    return round(len(lengths) * math.ceil(max(lengths) / page) * page * per_token)


def largest(rows: list[dict], variant: str) -> list[dict]:
    """variant's ok rows at the largest context, one per page size."""
    ok = [r for r in rows if r["variant"] == variant and r["status"] == "ok"]
    if not ok:
        return []
    top = max(r["seq_k"] for r in ok)
    return sorted((r for r in ok if r["seq_k"] == top), key=lambda r: r["page_size"])


def check(run_dir: Path) -> bool:
    rows, meta = latest_rows(run_dir), read_meta(run_dir)
    met = True
    for row in largest(rows, "paged_gather"):
        copy = meta["calibration"][row["device"]]["copy_gbps"]
        copied = gathered_bytes(row) / row["kv_bytes"]
        bound = copy / (3 * copied)
        share = row["kv_gbps"] / copy
        met &= share >= TARGET
        others = ", ".join(
            f"{r['variant']} {r['kv_gbps']:.3g} ({r['kv_gbps'] / copy:.0%})"
            for r in rows
            if r["cell_id"] != row["cell_id"] and r["status"] == "ok" and r["seq_k"] == row["seq_k"]
            and r["page_size"] == row["page_size"]
        )  # fmt: skip
        print(
            f"{run_dir.name}: {row['device']} {row['dtype']} mean context {row['seq_k']}, pages of "
            f"{row['page_size']}: paged_gather {row['kv_gbps']:.3g} GB/s = {share:.0%} of the copy bandwidth "
            f"{copy:.4g} GB/s (target {TARGET:.0%}: {'met' if share >= TARGET else 'MISSED'}); a gather's "
            f"ceiling {bound:.3g} GB/s ({bound / copy:.0%}: it copies "
            f"{copied:.2f}x the K/V bytes), reached "
            f"{row['kv_gbps'] / bound:.0%}; beside it: {others}"
        )
    return met


def split_call(row: dict, seconds: float = 1.0) -> dict[str, float]:
    """ms of a CPU paged_gather cell like `row` (its lengths, page size and heads, a shuffled page table):
    its two gathers alone, SDPA on what they gathered alone, and the whole call; each a median of repeated
    calls (torch.utils.benchmark)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.benchmark import Timer

    from attnbench.variants.paged import gather_pages, paged_gather, visible_keys

    lengths, page = row["seq_lens"], int(row["page_size"])
    b, h, h_kv, d = len(lengths), row["heads"], row["kv_heads"], row["d_k"]
    width, longest = math.ceil(max(lengths) / page), max(lengths)
    gen = torch.Generator().manual_seed(0)
    k, v = (torch.randn(b * width, page, h_kv, d, generator=gen) for _ in range(2))
    table = torch.randperm(b * width, generator=gen).view(b, width).to(torch.int32)
    key_lengths = torch.tensor(lengths, dtype=torch.int32)
    q = torch.randn(b, h, 1, d, generator=gen)
    kb, vb = gather_pages(k, table, longest), gather_pages(v, table, longest)
    mask = visible_keys(key_lengths, 1, longest, True).repeat(1, 1, h // h_kv, 1)
    calls = {
        "the two gathers": "gather_pages(k, table, longest), gather_pages(v, table, longest)",
        "SDPA on the gathered batch": "F.scaled_dot_product_attention(rows, kb, vb, attn_mask=mask)",
        "the whole call": "paged_gather(q, k, v, causal=True, key_lengths=key_lengths, block_table=table)",
    }
    names = dict(F=F, gather_pages=gather_pages, paged_gather=paged_gather, k=k, v=v, q=q, kb=kb, vb=vb,
                 table=table, longest=longest, key_lengths=key_lengths, mask=mask,
                 rows=q.reshape(b, h_kv, h // h_kv, d))  # fmt: skip
    return {
        name: Timer(stmt, globals=names).blocked_autorange(min_run_time=seconds).median * 1e3
        for name, stmt in calls.items()
    }


def measure(run_dir: Path) -> None:
    """The CPU run's largest paged_gather cells, each call split into the gathers and the SDPA."""
    for row in largest(latest_rows(run_dir), "paged_gather"):
        times = split_call(row)
        print(f"  measured here, pages of {row['page_size']}: "
              + ", ".join(f"{n} {t:.2f} ms" for n, t in times.items()))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", default=[str(ROOT / r) for r in RUNS])
    ap.add_argument("--measure", action="store_true", help="split the CPU run's largest gather call, timed")
    args = ap.parse_args(argv)
    if args.measure:
        from attnbench.harness.measure.allocator import worker_env

        if worker_env():  # not yet in a worker's memory settings: the same command again, in them
            env = {**os.environ, **worker_env()}
            return subprocess.run([sys.executable, __file__, *(argv or sys.argv[1:])], env=env).returncode
    runs = [Path(r) for r in args.runs]
    for run in runs:  # every folder checked before any is read
        if not (run / "rows.jsonl").is_file() or not (run / "meta.json").is_file():
            sys.exit(f"paged_check: {run} is not a run (no rows.jsonl and meta.json)")
    met = True
    for run in runs:
        met &= check(run)
        if args.measure and "cpu" in read_meta(run)["calibration"]:
            measure(run)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
