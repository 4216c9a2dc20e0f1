"""The clock tamperers' neighbours against a run without them (issue 40's target): a benchmark, not a test.

Each pair is two runs back to back, in alternating order: one with the tamperers of
tests/data/clock_variants.py between honest neighbours (clock_slowed, naive, clock_swapped_module,
chunked, clock_sneaky, sdpa), one of the neighbours alone, with the same cells and settings. Per neighbour
cell, the ratio of its median time with the tamperers to its median without them, over the pairs; the
median of those ratios is the cell's figure.

Targets: every tamperer's row is not `ok` (not believed), and every neighbour cell's median ratio lies within
10% of 1 (or the cell is flagged, not `ok`).

    python benchmarks/clock_neighbours.py [--pairs 3] [--rounds 3] [--seq-len 256,512] [--json out.json]

Exit status 0 when every target is met, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from attnbench.results import read_rows

ROOT = Path(__file__).resolve().parent.parent
CLOCKS = ROOT / "tests" / "data" / "clock_variants.py"
TAMPERERS = ("clock_slowed", "clock_swapped_module", "clock_sneaky")
NEIGHBOURS = ("naive", "chunked", "sdpa")
BAND = 0.10


def _run(out: Path, names: list[str], seq_len: str, budget_ms: int, rounds: int) -> list[dict]:
    cmd = [sys.executable, "-m", "attnbench", "run", "--variant-file", str(CLOCKS), "--variants",
           ",".join(names), "--seq-len", seq_len, "--heads", "4", "--threads", "1", "--budget-ms",
           str(budget_ms), "--min-ms", str(budget_ms), "--warmup-ms", "5", "--rounds", str(rounds), "-q",
           "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return read_rows(out)


def pooled_ratio(logs: list[float]) -> tuple[float, float, float] | None:
    """The geometric mean of the ratios with its 95% t-interval (a clock leaked into the neighbours would
    move it to about 0.8), or None for fewer than 3 ratios."""
    if len(logs) < 3:
        return None
    from scipy.stats import t

    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = t.ppf(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seq-len", default="256,512")
    ap.add_argument("--budget-ms", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="visits of each cell, spread over its run")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    order = [TAMPERERS[0], NEIGHBOURS[0], TAMPERERS[1], NEIGHBOURS[1], TAMPERERS[2], NEIGHBOURS[2]]
    ratios: dict[str, list[float]] = {}
    offenders_ok: list[str] = []
    flagged: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            runs = {}
            for which in ("dirty", "clean") if i % 2 == 0 else ("clean", "dirty"):
                names = order if which == "dirty" else list(NEIGHBOURS)
                out = Path(tmp) / f"{which}{i}"
                runs[which] = _run(out, names, args.seq_len, args.budget_ms, args.rounds)
            clean = {(r["variant"], r["seq_len"]): r for r in runs["clean"]}
            for row in runs["dirty"]:
                key = (row["variant"], row["seq_len"])
                label = f"{row['variant']} N={row['seq_len']}"
                if row["variant"] in TAMPERERS:
                    if row["status"] == "ok":
                        offenders_ok.append(label)
                    continue
                if row["status"] != "ok":
                    flagged.add(label)
                    continue
                ref = clean.get(key)
                if ref and ref["status"] == "ok":
                    ratios.setdefault(label, []).append(row["time_ms_median"] / ref["time_ms_median"])
    figures = {label: statistics.median(r) for label, r in ratios.items()}
    print(f"{'neighbour cell':<18} with / without tamperers (median of {args.pairs} pairs)")
    for label, figure in figures.items():
        spread = ", ".join(f"{r:.3f}" for r in ratios[label])
        print(f"{label:<18} {figure:>8.3f}   ({spread})")
    logs = [math.log(r) for rs in ratios.values() for r in rs]
    pooled = pooled_ratio(logs)
    if pooled:
        ratio, lo, hi = pooled
        print(f"pooled over every neighbour cell and pair: {ratio:.3f} (95% CI {lo:.3f}-{hi:.3f})")
    outside = [label for label, figure in figures.items() if abs(figure - 1) > BAND]
    met = not offenders_ok and not outside and bool(figures)
    print(f"tamperers believed: {offenders_ok or 'none'}; neighbours flagged: {sorted(flagged) or 'none'}")
    verdict = "MET" if met else "MISS"
    print(f"target (every neighbour within {BAND:.0%} of its time without the tamperers): {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"ratios": ratios, "figures": figures, "pooled": pooled,
                                         "offenders_ok": offenders_ok,
                                         "flagged": sorted(flagged), "met": met}, indent=1))  # fmt: skip
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
