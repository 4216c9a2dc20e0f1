"""Which CPUs the worker processes may be pinned to (the cpu_affinity setting), checked before any work."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from attnbench.harness.sweep.grammar import format_cpus


def cpus_allowed() -> set[int]:
    """The CPUs this process may run on (its affinity mask; every CPU where the OS has no such call)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def check_cpu_affinity(cpus: tuple[int, ...]) -> None:
    """ValueError when a requested CPU is not one this machine lets us run on."""
    if not cpus:
        return
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("--cpu-affinity needs os.sched_setaffinity, which this OS does not have")
    allowed = cpus_allowed()
    missing = [c for c in cpus if c not in allowed]
    if missing:
        raise ValueError(
            f"--cpu-affinity asks for CPU {', '.join(map(str, missing))}, but this process may run only on "
            f"CPUs {format_cpus(sorted(allowed))}"
        )


def threads_warning(threads: int, pinned: Sequence[int] = ()) -> str | None:
    """The warning when torch is asked for more threads than the CPUs its workers may run on (those of
    --cpu-affinity where it pins them): the threads then take turns on a core and a cell may run many times
    slower (64 threads on 2 cores: 20x). None where they fit, or where torch chooses (0). Worded in no front
    end's spelling (threads is --threads and threads=), as it is printed, not raised."""
    cpus = len(pinned) if pinned else len(cpus_allowed())
    if threads <= cpus:
        return None
    where = "the workers are pinned to" if pinned else "this process may run on"
    return (
        f"threads {threads} is more than the {cpus} CPU{'s' * (cpus != 1)} {where}: the threads take turns "
        "on the cores, and a cell may run many times slower; measuring as asked"
    )


def warn_threads(threads: int, pinned: Sequence[int] = ()) -> None:
    """threads_warning's line on stderr, where there is one: the run goes on."""
    said = threads_warning(threads, pinned)
    if said:
        print(f"attnbench: warning: {said}", file=sys.stderr, flush=True)
