"""How far identical code moves between the replicates a comparison cannot see, as measured on the reference
machine (the judge's floors: results.judge, module docstring 6 and 7), and the 'same' band in ratio terms."""

from __future__ import annotations

# How far a whole run of identical code moves from the next on the reference machine: the largest |B/A - 1|
# of any cell over the pairs of identical single runs (every file without a set_size: its pairs are two
# runs, not two run sets) in results/reference/false-alarm-*.json, as compare judged them as measured,
# rounded up to a whole per cent. tests/results/test_judge.py recomputes it from those files.
RUN_SPREAD_FLOOR = 0.48
RUN_SPREAD_SOURCE = (
    "the largest |B/A - 1| of a cell over the pairs of identical single runs in "
    "results/reference/false-alarm-*.json (benchmarks/false_alarm.py, a shared 2-core EPYC VM), rounded up"
)
# How far one visit of a cell moves from another visit of the same cell in the same run (identical code,
# seconds to minutes apart) on the reference machine: the largest max/min - 1 of the visit medians of any ok
# cell of the reference runs made in rounds (results/reference/cpu-epyc-2core-rounds, --rounds 3, and
# cpu-epyc-2core-settle, --rounds 3 --settle-rounds 2), rounded up to a whole per cent.
# tests/results/test_judge.py recomputes it from those runs.
VISIT_SPREAD_FLOOR = 1.58
VISIT_SPREAD_SOURCE = (
    "the largest ratio between two visits of one cell of one run in the reference runs made in rounds "
    "(results/reference/cpu-epyc-2core-rounds and cpu-epyc-2core-settle, a shared 2-core EPYC VM), rounded up"
)


def same_band(tolerance: float, unseen: float = 0.0) -> float:
    """The top of the 'same' band in ratio terms, (1 + tolerance) / (1 + unseen): a CI from 1 / band to band
    is 'same' (a ratio and its inverse alike, so that a tolerance of 100% or more still means something
    below 1); 1 or less: no 'same'."""
    return (1 + tolerance) / (1 + unseen)


def band_text(band: float) -> str:
    """'0.98 to 1.02': the 'same' band as the rule and a change text say it."""
    return f"{1 / band:.3g} to {band:.3g}"


# Both floors above were measured on the CPU reference VM: applied to another device kind's cells, they are
# that VM's figures, not the device's, and the rule says so (foreign_floor_text).
FLOORS_DEVICE = "cpu"


def foreign_floor_text(devices, run: bool, sample: bool) -> str:
    """One sentence where a reference floor (`run`: the run-to-run floor was applied, not one stated with
    --run-spread; `sample`: the visit floor, not one stated with --visit-spread) judged cells of a device kind
    other than FLOORS_DEVICE ('cuda'), with how to measure and state one's own figure; else ''.
    benchmarks/false_alarm.py's quick story measures the run-to-run spread; the visit floor is stated with
    --visit-spread, or left out of the judge by measuring in rounds."""
    kinds = sorted({str(d) for d in devices if d == d and d is not None and str(d) != FLOORS_DEVICE})
    if not kinds or not (run or sample):
        return ""
    where = f"measured on a shared 2-core CPU VM, not on {' or '.join(kinds)}"
    if not run:
        return (
            f"The visit floor was {where}; give your machine's with --visit-spread, or measure with "
            "--rounds 3 so that the spread between visits is in the test."
        )
    return (
        f"The floors were {where}; measure your machine's with `python benchmarks/false_alarm.py --story "
        f"quick --run-arg=--device={kinds[0]}` and give it with --run-spread"
        + (" (the visit floor's with --visit-spread)." if sample else ".")
    )
