"""Which CPUs the worker processes may be pinned to (the cpu_affinity setting), checked before any work."""

from __future__ import annotations

import os

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
