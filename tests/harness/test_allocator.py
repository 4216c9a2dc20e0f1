"""Every worker keeps freed memory for the next call (harness.measure.allocator), so a quadratic variant's
cost depends neither on what its process freed before nor on fresh pages: counted in page faults, not in
ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli

from attnbench.harness.measure.allocator import MALLOC_DEFAULTS, WORKER_DEFAULTS, worker_env
from attnbench.harness.measure.fingerprint import resume_identity

# naive at N (256: 2 MiB score tensors; 1024: 32 MiB), ten calls after five warm ones: the minor page
# faults they cost, for each step FREE:N of one process in turn (FREE: the MiB it frees first, 0: nothing)
FAULTS = """
import resource, sys, torch
from attnbench import variants
torch.set_num_threads(1)
fn = variants.get("naive").fn
for step in sys.argv[1:]:
    free_mib, n = map(int, step.split(":"))
    if free_mib:
        x = torch.empty(free_mib << 20, dtype=torch.uint8); x.fill_(1); del x
    q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
    for _ in range(5):
        fn(q, k, v)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        fn(q, k, v)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(env: dict[str, str], *steps: str) -> list[int]:
    """The faults of each step (FREE:N), in one process started with `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env = {**base, **env, "THP_MEM_ALLOC_ENABLE": "1", "PYTHONPATH": str(ROOT)}  # as the presets run
    done = subprocess.run(
        [sys.executable, "-c", FAULTS, *steps], env=env, capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    return [int(line) for line in done.stdout.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_call_costs_the_same_whatever_its_process_freed_before_and_reuses_what_it_freed():
    # glibc's default: a fresh process maps (and faults in) every 2 MiB tensor anew (15,500 faults in ten
    # calls here), one that freed 16 MiB once serves them from its heap (none); a 32 MiB tensor is
    # mapped afresh on every call whatever came before. Each first step is a fresh process's.
    [dynamic_fresh] = _faults({}, "0:256")
    dynamic_after, mapped = _faults({}, "16:256", "0:1024")
    assert dynamic_fresh > 10 * max(dynamic_after, 100)
    assert mapped > 1000
    fixed = worker_env({}, environ={})  # the workers': every call reuses the heap the last one freed
    kept = _faults(fixed, "0:256", "16:256", "0:1024")
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
