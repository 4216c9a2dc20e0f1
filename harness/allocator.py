"""How every worker's memory comes, fixed, so that a cell's time does not depend on what ran in its process
before it, nor on where the kernel happened to place its allocations: glibc malloc's thresholds, and torch's
CPU allocator asking for transparent huge pages.

glibc serves an allocation above M_MMAP_THRESHOLD with a fresh mmap (its pages faulted in on first touch,
freed back to the OS) and below it from the heap, and by default raises that threshold whenever a larger
mmapped chunk is freed (up to 32 MiB on 64-bit; the heap's trim threshold follows at twice it). So the same
call ran at two speeds depending on the process's history: naive at N = 256 (three 2 MiB tensors of
scores) took 4.5 ms a call in a fresh worker and 1.85 ms in one that had once freed a 16 MiB buffer (the
run's calibration matmuls did, in the first worker only), 2.4x; N = 512 13.0 against 8.3 ms. A variant
that freed a large workspace made every later quadratic cell faster (issue 23: one variant changed
another's result), and with --processes the runner's first worker was faster than the others (identical
runs in rounds over three processes: naive at 256 in the third process 2.3x the first, every run). In
page faults (tests/harness/test_allocator.py, THP_MEM_ALLOC_ENABLE=1): ten such calls fault 15,500 pages
in a fresh process, none in one that freed 16 MiB before them.

Setting either threshold switches the dynamic adjustment off (mallopt(3)). Every worker is started with
both at the values the dynamic rule reaches in a long-running process (M_MMAP_THRESHOLD 32 MiB, its
maximum; M_TRIM_THRESHOLD twice it), unless the environment already sets them (a user's --env, or the
shell's): measured both ways, naive at N = 256 then took 1.81-2.16 ms whatever ran before (a fresh
process, one that freed 16 MiB, one that freed 64 MiB, with and without THP_MEM_ALLOC_ENABLE). Above 32
MiB every allocation is a fresh mmap either way (that is what THP_MEM_ALLOC_ENABLE speeds up). The values
are in every run's fingerprint (allocator_env) and part of what a resume must share.

Above 32 MiB, each call maps its N x N scores afresh, and without THP_MEM_ALLOC_ENABLE=1 (torch then
aligns large allocations to 2 MiB and asks for transparent huge pages) faults them in 4 KiB at a time, or
in huge pages where the mapping happens to be aligned: naive at N = 1024, one thread, took 36-52 ms in
some identical runs and 63-100 ms in others (benchmarks/false_alarm.py, 2026-11-25), and the page-fault
handler, not attention, is what such runs rank (docs/presets-and-workloads.md). The cpu and quick presets
set it already; every worker now does, unless the environment says otherwise
(`--env THP_MEM_ALLOC_ENABLE=0` measures torch's default).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MALLOC_DEFAULTS = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(64 << 20),
}
WORKER_DEFAULTS = {**MALLOC_DEFAULTS, "THP_MEM_ALLOC_ENABLE": "1"}


def worker_env(
    env: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a worker is started with over `environ` (default os.environ): WORKER_DEFAULTS where neither
    `environ` nor the run's `env` sets them, then the run's `env`."""
    environ = os.environ if environ is None else environ
    env = dict(env or {})
    fixed = {k: v for k, v in WORKER_DEFAULTS.items() if k not in environ and k not in env}
    return {**fixed, **env}
