"""What a row's message says, and what that means for the worker that measured it: pure rules, no torch.

The worker writes these messages (harness.measure.cell's verdicts, harness.measure.failures); the torch-free
parent (harness.run.runner, the executors, harness.workers.cellrunner) reads rows by the same rules, so it
imports this module at its top without pulling torch in.
"""

from __future__ import annotations

import math
from typing import Any

from attnbench.results.formulas import bytes_text

INPUT_NAMES = ("q", "k", "v", "key_lengths")  # what a cell is handed, in order; messages name them so

MUTATES = "modifies its inputs in place"
NOT_FOLLOWING = "answer does not follow the inputs"
# where harness.measure.cell.check_after found it: the timed tensors themselves, given new values in place
REFILLED = "on the timed tensors refilled in place with fresh values"

# A row of a CUDA error that left the worker's context unusable (harness.measure.failures.is_poisoned) says so
POISONED_PREFIX = "CUDA context poisoned, worker replaced: "

# A failed CUDA graph capture can leave torch's allocator believing a capture is still under way (torch
# releases that state only where the capture reached its end, and only in releases that fixed it): a later
# empty_cache or capture in the same process then fails an internal assert. The cell itself is fine (timed
# with events, timing_reason says why); the process that measured it is not trusted with the next one.
CAPTURE_FAILED = "graph capture failed"  # in timing_reason (harness.measure.timing.graph_fallback)
CAPTURE_EXIT = "a CUDA graph capture failed in this process (torch's allocator may think one is under way)"


# A variant that changed torch's process-wide state (harness.workers.torch_state) has its row say so, and the
# worker that ran it exits: the next cell gets a fresh one, whatever the order of the variants
STATE_CHANGED = "changed torch's global state"
# what harness.workers.torch_state also compares, which is not torch's: the clocks of `time` the timers read,
# and attnbench's own measuring modules
CLOCK_CHANGED = "changed the process's clock"
HARNESS_CHANGED = "changed attnbench's measuring code"
# what harness.workers.process_state compares: signals, the garbage collector, the interpreter's hooks, the
# threads' CPUs and priority, the worker's subreaper flag
PROCESS_CHANGED = "changed the worker process's state"
CHANGED = (STATE_CHANGED, CLOCK_CHANGED, HARNESS_CHANGED, PROCESS_CHANGED)
STATE_EXIT = "a variant changed torch's global state, the process's clock or attnbench's code in this process"
PROCESS_EXIT = (
    "a variant changed this process's state (signals, garbage collector, hooks, threads, subreaper)"
)
KILLED = "— killed"  # the end of the words for processes a variant left running (processes_left)
# A thread a variant's cell left running could act in a later cell of another variant (start a process, take
# the CPU): its row says so (threads_running) and the worker exits after it
THREADS_EXIT = "a variant left threads running in this process"


def state_changed(changes: list[str]) -> str:
    """A row's words for what its variant changed (harness.workers.torch_state's phrases, 'num_threads 2 →
    1', 'time.perf_counter replaced'), each said as what it is: torch's global state, the process's clock
    (time's functions), attnbench's measuring code (its harness modules)."""
    said: dict[str, list[str]] = {}
    for change in changes:
        kind = CLOCK_CHANGED if change.startswith("time.") else STATE_CHANGED
        kind = HARNESS_CHANGED if change.startswith("attnbench.") else kind
        said.setdefault(kind, []).append(change)
    return "; ".join(f"{kind}: {'; '.join(words)}" for kind, words in said.items())


def process_changed(changes: list[str]) -> str:
    """A row's words for what its variant changed in the worker process (harness.workers.process_state's
    phrases: 'ITIMER_REAL armed', 'gc threshold 700/10/10 → 1/1/1')."""
    return f"{PROCESS_CHANGED}: {'; '.join(changes)}"


def names_a_change(message: str) -> bool:
    """Whether a row's message says what its variant changed in the process (state_changed)."""
    return any(kind in message for kind in CHANGED)


def processes_left(killed: list[str]) -> str:
    """A row's words for the processes its variant left running ('pid N: cmdline' each), killed since."""
    n = len(killed)
    return f"left {n} process{'es' if n != 1 else ''} running ({'; '.join(killed)}) {KILLED}"


def threads_running(names: list[str]) -> str:
    """A row's words for the Python threads its variant's cell left running (harness.workers.children)."""
    n = len(names)
    return f"left {n} thread{'s' if n != 1 else ''} running ({', '.join(names)}); its worker was replaced"


def left_behind(message: str) -> bool:
    """Whether a row's (or a probe record's) message says its variant left something behind."""
    return names_a_change(message) or (" running (" in message and KILLED in message)


def threads_mismatch(row: dict[str, Any], asked: int) -> str | None:
    """Why a measured row's `threads` column is not what its cell asked for (`asked`), or None."""
    ran = row.get("threads")
    if ran is None or not asked or ran == asked:
        return None
    return f"ran on {ran} threads, the run asked for {asked}"


# Memory a variant holds between calls (harness.measure.cell.retained_bytes) is part of what each call needs,
# and the peak of one call never sees it: above this, it is added to the cell's peak_mem_bytes and the row
# says so. Below it (an honest setup hook's plan, a few KiB of state) the peak is left as measured.
RETAINED_MIN_BYTES = 1 << 20
RETAINED_PEAK_FRACTION = 0.10
RETAINED_METHOD = "+ retained_mem_bytes"  # the end of mem_method where peak_mem_bytes counts it
HOLDS = "holds"


def retains(retained: int | None, peak: int | None) -> bool:
    """Whether `retained` bytes held between calls are large: over max(1 MiB, 10% of the peak)."""
    return bool(retained) and retained > max(RETAINED_MIN_BYTES, RETAINED_PEAK_FRACTION * (peak or 0))


def held(retained: int) -> str:
    """A row's words for memory its variant holds between calls, counted in its peak."""
    return f"{HOLDS} {bytes_text(retained)} between calls (retained_mem_bytes), counted in peak_mem_bytes"


def mutation(changed: tuple[str, ...]) -> str:
    """The reason a cell whose variant modified the inputs named in `changed` is wrong."""
    return f"{MUTATES} ({', '.join(n for n in INPUT_NAMES if n in changed)} changed)"


def is_poisoned_row(row: dict[str, Any]) -> bool:
    """Whether a row measured in this process says its CUDA context is poisoned (harness.measure.failures)."""
    return row.get("status") == "crashed" and str(row.get("message", "")).startswith(POISONED_PREFIX)


def exit_reason(row: dict[str, Any]) -> str | None:
    """Why the worker that measured `row` must exit after sending it (the parent starts a fresh one for the
    next cell), or None: a poisoned CUDA context (the row's message), or a failed graph capture."""
    if is_poisoned_row(row):
        return str(row["message"])
    if CAPTURE_FAILED in str(row.get("timing_reason") or ""):
        return CAPTURE_EXIT
    return None


# The clock checked from outside (harness.workers.cellrunner). The parent times each cell's request with
# its own monotonic clock. At each timing loop's start and end (harness.measure.timing.window_mark) the
# worker reads the clock its timer reads (harness.measure.timing.timer_clock), sends a mark, waits for the
# parent's answer, and reads it again; the parent reads its clock between the two, as the mark arrives.
# Both clocks are CLOCK_MONOTONIC on Linux, so for an honest worker the parent's loop lies between the
# worker's shortest and longest readings of it, however long the parent took to be scheduled (the round
# trips widen the bounds, measured each time). A clock a variant slowed, or a `time` module it swapped in,
# reads short over the loops it timed, even where it was put back before the cell ended: the row is
# `error`, and the worker is replaced. Over the request as a whole the worker's interval lies inside the
# parent's: one that reads longer is a clock run fast.
MARK = "mark"  # the op of a worker's message at a timing loop's start or end, and of the parent's answer
CLOCK_SLACK_S = 0.001  # the bounds widened by this much and CLOCK_TOLERANCE (rounding, not latency)
CLOCK_TOLERANCE = 0.01
CLOCK_TAMPERED = "the worker's clock ran at"

Reading = tuple[str, float, float, float]  # (what, shortest, longest the worker's clock allows, parent's)


def clock_readings(
    clock_s: float | None,
    parent_s: float,
    parent_marks: list[float] | None = None,
    worker_marks: list[tuple[float, float]] | None = None,
) -> list[Reading]:
    """One cell's readings: the request as a whole (clock_s: the worker's length of it; None from a worker
    that sends none: no reading), then its timing loops together, a loop's start and end marks after one
    another: the parent's clock at each (parent_marks), the worker's before and after each (worker_marks)."""
    out: list[Reading] = []
    if isinstance(clock_s, (int, float)):
        out.append(("this cell", float(clock_s), math.inf, float(parent_s)))
    pm, wm = parent_marks or [], worker_marks or []
    if pm and len(pm) == len(wm) and len(pm) % 2 == 0:
        shortest = sum(wm[i + 1][0] - wm[i][1] for i in range(0, len(wm), 2))
        longest = sum(wm[i + 1][1] - wm[i][0] for i in range(0, len(wm), 2))
        parent = sum(pm[i + 1] - pm[i] for i in range(0, len(pm), 2))
        out.append(("this cell's timing loops", shortest, longest, parent))
    return out


def _outside(shortest: float, longest: float, parent: float) -> float | None:
    """The worker's bound the parent's interval lies beyond (its clock's rate over the parent's is that
    bound over `parent`), or None where it lies within them."""
    if parent > longest * (1 + CLOCK_TOLERANCE) + CLOCK_SLACK_S:
        return longest
    if parent < shortest * (1 - CLOCK_TOLERANCE) - CLOCK_SLACK_S:
        return shortest
    return None


# CUDA events checked against the host's clock (harness.measure.timing.event_cover): an honest call's events
# cover about all of the host's wall time of its timing loops; far less is work the timed stream did not wait
# for (a side stream joined by nothing), which the events do not time
EVENT_MIN_COVER = 0.85


def events_mismatch(row: dict[str, Any]) -> str | None:
    """Why a CUDA row's event times cannot be believed (its event_cover), or None."""
    cover = row.get("event_cover")
    if not isinstance(cover, (int, float)) or cover >= EVENT_MIN_COVER:
        return None
    return (
        f"the CUDA events timed {cover:.0%} of the host's wall time of this cell's timing loops: work the "
        "timed stream did not wait for (launched on another stream and not joined) ran outside them"
    )


def clock_mismatch(readings: list[Reading]) -> str | None:
    """Why the worker's clock cannot be believed over a cell (clock_readings), or None."""
    for what, shortest, longest, parent in readings:
        bound = _outside(shortest, longest, parent) if parent > 0 else None
        if bound is not None:
            return (
                f"{CLOCK_TAMPERED} {bound / parent:.2f}x the parent's during {what} ({bound:.3f} s against "
                f"{parent:.3f} s): code in this worker changed the clock its timer reads; worker replaced"
            )
    return None


def clock_fields(readings: list[Reading]) -> dict[str, float | None]:
    """The row's clock_ratio, the worker's clock over the parent's as near 1 as its readings allow (1 where
    the parent's interval lies within the worker's bounds), and clock_bounds_ms, how far apart those bounds
    were (the round trips: how closely it could be told), over the timing loops; None without marks."""
    loops = [r for r in readings if math.isfinite(r[2])]
    if not loops or not loops[-1][3] > 0:
        return {"clock_ratio": None, "clock_bounds_ms": None}
    _, shortest, longest, parent = loops[-1]
    nearest = min(max(parent, shortest), longest)
    return {
        "clock_ratio": round(nearest / parent, 4),
        "clock_bounds_ms": round((longest - shortest) * 1e3, 3),
    }


class Gradients(float):
    """The exact gradient check's rel_err (correctness.grad_errors): the worst of dq, dk and dv's, a float
    wherever the check's number goes, with each one's (`each`: name -> rel_err), which `erring` words. Here,
    torch-free, as it crosses in a worker's reply: the parent unpickles it without importing torch (1-3 s)."""

    each: dict[str, float]

    def __new__(cls, each: dict[str, float]) -> Gradients:
        worst = super().__new__(cls, max(each.values()))
        worst.each = dict(each)
        return worst

    def __reduce__(self):  # a worker's row crosses to the parent with each gradient's error
        return Gradients, (self.each,)


def erring(rel_err: float, tolerance: float) -> str:
    """Which of dq, dk and dv a failing gradient check errs in, said after its rel_err: ", in dq (dk 2.1e-07
    and dv 3.3e-07 within it)", ", in dq, dk and dv"; "" where rel_err is not a Gradients (an approximation
    held to its own forward's derivative) or none errs."""
    each = getattr(rel_err, "each", {})
    bad = [name for name, e in each.items() if not e <= tolerance]
    fine = [f"{name} {e:.1e}" for name, e in each.items() if e <= tolerance]
    if not bad:
        return ""
    within = f" ({' and '.join(fine)} within it)" if fine else ""
    return f", in {', '.join(bad[:-1])} and {bad[-1]}{within}" if len(bad) > 1 else f", in {bad[0]}{within}"
