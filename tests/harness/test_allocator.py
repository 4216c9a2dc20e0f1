"""Every worker keeps freed memory for the next call (harness.allocator), so a quadratic variant's cost
depends neither on what its process freed before nor on fresh pages: counted in page faults, not in ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli

from attnbench.harness.allocator import (
    MALLOC_DEFAULTS,
    WARM_HEAP_LIMIT,
    WORKER_DEFAULTS,
    heap_to_warm,
    warm_heap,
    worker_env,
)
from attnbench.harness.fingerprint import resume_identity

# naive at N (256: 2 MiB score tensors; 1024: 32 MiB), ten calls after five warm ones: the minor page
# faults they cost, in a process that first frees `free_mib` MiB (0: nothing)
FAULTS = """
import resource, sys, torch
from attnbench import variants
torch.set_num_threads(1)
free_mib, n = int(sys.argv[1]), int(sys.argv[2])
if free_mib:
    x = torch.empty(free_mib << 20, dtype=torch.uint8); x.fill_(1); del x
fn = variants.get("naive").fn
q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
for _ in range(5):
    fn(q, k, v)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    fn(q, k, v)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(env: dict[str, str], free_mib: int, n: int = 256) -> int:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env = {**base, **env, "THP_MEM_ALLOC_ENABLE": "1", "PYTHONPATH": str(ROOT)}  # as the presets run
    done = subprocess.run(
        [sys.executable, "-c", FAULTS, str(free_mib), str(n)], env=env,
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_call_costs_the_same_whatever_its_process_freed_before_and_reuses_what_it_freed():
    # glibc's default: a fresh process maps (and faults in) every 2 MiB tensor anew (15,500 faults in ten
    # calls here), one that freed 16 MiB once serves them from its heap (none); a 32 MiB tensor is
    # mapped afresh on every call whatever came before
    dynamic_fresh, dynamic_after = _faults({}, 0), _faults({}, 16)
    assert dynamic_fresh > 10 * max(dynamic_after, 100)
    mapped = _faults({}, 16, n=1024)
    assert mapped > 1000
    fixed = worker_env({}, environ={})  # the workers': every call reuses the heap the last one freed
    kept = [_faults(fixed, 0), _faults(fixed, 16), _faults(fixed, 0, n=1024)]
    assert max(kept) < min(dynamic_fresh, mapped) / 10, kept


def test_the_run_env_and_the_shell_win_over_the_defaults():
    assert worker_env({}, environ={}) == WORKER_DEFAULTS
    assert worker_env({"THP_MEM_ALLOC_ENABLE": "0"}, environ={})["THP_MEM_ALLOC_ENABLE"] == "0"
    mine = {"MALLOC_MMAP_MAX_": "65536"}
    assert worker_env(mine, environ={})["MALLOC_MMAP_MAX_"] == "65536"
    assert "MALLOC_TRIM_THRESHOLD_" not in worker_env({}, environ={"MALLOC_TRIM_THRESHOLD_": "0"})
    # a resume compares what a worker would be started with now, defaults included
    assert "MALLOC_MMAP_MAX_=0" in resume_identity({})["allocator_env"] or any(
        k in os.environ for k in MALLOC_DEFAULTS
    )


def test_every_worker_of_a_run_is_started_with_them(tmp_path):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--heads", "1", "--d-k", "8",
                "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1", "--out", str(out), "-q")  # fmt: skip
    assert p.returncode == 0, p.stderr
    meta = json.loads((out / "meta.json").read_text())
    env = meta["fingerprint"]["allocator_env"]
    for name, value in MALLOC_DEFAULTS.items():
        assert f"{name}={value}" in env or name in os.environ
    assert meta["fingerprint"]["THP_MEM_ALLOC_ENABLE"] == os.environ.get("THP_MEM_ALLOC_ENABLE", "1")
    assert meta["heap_warmed_bytes"] > 0  # its heap grown to the cell's predicted peak before it was timed


# the minor page faults of naive's first three calls at N = 1024 (32 MiB score tensors), no warm-up call
# before them, in a process that first warms its heap to `warm_mib` MiB through allocator.warm_heap
FIRST_FAULTS = """
import resource, sys, torch
from attnbench import variants
from attnbench.harness.allocator import warm_heap
torch.set_num_threads(1)
warmed = warm_heap(int(sys.argv[1]) << 20)
q, k, v = (torch.randn(1, 8, 1024, 64) for _ in range(3))
fn = variants.get("naive").fn
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    fn(q, k, v)
print(warmed, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _first_faults(env: dict[str, str], warm_mib: int) -> tuple[int, int]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env = {**base, **env, "THP_MEM_ALLOC_ENABLE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_FAULTS, str(warm_mib)], env=env,
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    warmed, faults = done.stdout.split()[-2:]
    return int(warmed), int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_warmed_heap_serves_the_first_calls_of_a_cell_without_faulting_them_in():
    """Issue 25: the first time a worker's heap grew to a cell's size, its pages were faulted in while the
    cell was timed (the quadratic variants' first visits 1.05-1.14x their later ones); a heap warmed to the
    cell's peak first serves even its first calls from memory already there. Counted as page faults, not
    time."""
    fixed = worker_env({}, environ={})
    cold = _first_faults(fixed, 0)
    warm = _first_faults(fixed, 128)
    assert cold[0] == 0 and warm[0] == 128 << 20
    assert warm[1] * 10 < cold[1], (cold, warm)
    # where the run's environment keeps no freed memory, nothing is warmed (it would go back at once)
    assert _first_faults({"MALLOC_MMAP_MAX_": "65536"}, 128)[0] == 0


def test_the_heap_is_warmed_to_the_largest_peak_within_its_limits():
    gib = 1 << 30
    assert heap_to_warm([], 64 * gib) == 0
    assert heap_to_warm([10, 300 << 20, 5], 64 * gib) == 300 << 20
    assert heap_to_warm([5 * gib], 64 * gib) == WARM_HEAP_LIMIT  # glibc gives back what is over it
    assert heap_to_warm([gib], 2 * gib) == gib // 2  # a quarter of the memory available at most
    assert warm_heap(1 << 20, environ={"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1024"}) == 0
    assert warm_heap(1 << 20, environ={"MALLOC_TRIM_THRESHOLD_": str(gib)}) == 0
    assert warm_heap(0, environ={"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(gib)}) == 0
