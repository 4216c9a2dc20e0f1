"""How every worker's memory comes, fixed, so that a cell's time does not depend on what ran in its process
before it, nor on the operating system handing back fresh pages on every call: glibc malloc keeps what a
call freed for the next call, and torch's CPU allocator asks for transparent huge pages.

Measured on the 2-core reference VM (2026-11-25, naive attention, B=1, H=8, d=64, fp32, THP on, 25 calls
after three warm ones, in a fresh process each):
- glibc's default serves an allocation above its mmap threshold with a fresh mapping (faulted in on first
  touch, unmapped on free) and raises that threshold whenever a larger mapping is freed (up to 32 MiB). So
  the same call ran at two speeds by its process's history: naive at N = 256 took 4.5 ms a call in a
  fresh worker and 1.85 ms in one that had once freed 16 MiB (the run's calibration matmuls did, in the
  first worker only), 2.4x; a variant's large free made its neighbours faster (issue 23), and of
  several worker processes the first was faster than the others (naive at 256 in the third 2.3x the first).
- Above 32 MiB every call maps its N x N scores afresh, and on this VM such calls stalled now and then:
  naive at N = 2048 87-478 ms a call (median 94), N = 4096 375-857 (417), while the kernel reported no
  THP fallback and no compaction stall (the hypervisor re-backing memory the guest had freed is the
  likely cause). The same calls on memory kept by the process: 2048 68-86 ms (72), 4096 315-407 (333),
  N = 1024 18-24 ms against 24-64.

So every worker starts with MALLOC_MMAP_MAX_=0 (no allocation is a mapping of its own: all come from the
heap, and what a call frees the next call reuses, as torch's CUDA caching allocator does on a GPU) and
MALLOC_TRIM_THRESHOLD_ 2 GiB (setting it also switches glibc's dynamic adjustment off: mallopt(3)): the
heap keeps up to 2 GiB free for the next call and gives back more than that, so a cell whose calls need
more (naive at N = 8192 on CPU) still maps and faults afresh on every call, and a worker holds at most
that much beyond what is live. Peak memory is measured from torch's allocation
events (harness.measure.memory), not from the process's resident size, so it is unchanged. And every worker
sets THP_MEM_ALLOC_ENABLE=1 (torch then aligns large allocations to 2 MiB and asks for transparent huge pages;
docs/presets-and-workloads.md: without it the page-fault handler, not attention, is what the quadratic
variants' times rank). Each holds unless the environment or the run's --env sets it
(`--env THP_MEM_ALLOC_ENABLE=0`, `--env MALLOC_MMAP_MAX_=65536` measure the defaults); the values are in
every run's fingerprint (allocator_env) and part of what a resume must share.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MALLOC_DEFAULTS = {
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(2 << 30),
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


def worker_environ(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment a worker of a run with `env` starts with: os.environ under worker_env."""
    return {**os.environ, **worker_env(env)}
