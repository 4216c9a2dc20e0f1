"""The parent that plans a sweep never initialises CUDA (issue 13): the process that measures is the worker.
On a machine with a GPU, every variant's check of a CUDA cell and the dispatcher's precheck must leave
torch.cuda uninitialised. This machine has no GPU to report, so the few answers those checks read before
they could reach a GPU (is_available, device_count, the build's flash and cuDNN flags) are a GPU machine's,
and any attempt to initialise CUDA (torch.cuda._lazy_init, torch.cuda.init) fails the test. The measuring
side of the rule (capability checks done in the worker) runs in tests/harness/test_cuda.py on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from attnbench import variants
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.workers.cellrunner import SkipAhead, precheck
from attnbench.variants import Problem

FRESH = "ATTNBENCH_TEST_FRESH_PROCESS"


@pytest.fixture
def gpu_machine_without_init(monkeypatch, request):
    """True where the test runs here. On a GPU machine an earlier test of this process may have used the GPU
    (the fingerprint, the CUDA tests), and CUDA stays initialised for good: the test then runs in a fresh
    interpreter, whose verdict is this one's, and the fixture returns False (nothing left to do here)."""

    def initialising(*args, **kwargs):
        raise AssertionError("the parent initialised CUDA")

    if torch.cuda.is_initialized() and not os.environ.get(FRESH):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"{__file__}::{request.node.name}",
            ],
            cwd=ROOT,
            env={**os.environ, FRESH: "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0 and "1 passed" in proc.stdout.splitlines()[-1], (
            proc.stdout[-3000:] + proc.stderr[-2000:]
        )
        return False
    assert not torch.cuda.is_initialized()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "_lazy_init", initialising)
    monkeypatch.setattr(torch.cuda, "init", initialising)
    monkeypatch.setattr(torch.backends.cuda, "is_flash_attention_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    return True


PROBLEMS = [
    Problem(device="cuda", dtype="bfloat16"),
    Problem(device="cuda", dtype="float16", causal=True, padding=0.25, pass_="fwdbwd"),
    Problem(device="cuda", dtype="float32", kv_heads=2, heads=8, window=64),
]


def test_every_variant_checks_cuda_cells_without_initialising_cuda(gpu_machine_without_init):
    if not gpu_machine_without_init:
        return  # passed in a fresh interpreter
    checked = 0
    for name, var in variants.all_variants().items():
        for prob in PROBLEMS:
            reason = var.check(prob)  # the AssertionError above if this reaches the GPU
            assert reason is None or "sm" not in reason.split(), (name, reason)  # no capability read
            checked += 1
    assert checked >= 3 * 8
    assert variants.get("sdpa_flash").check(PROBLEMS[0]) is None  # left to the worker, not refused
    assert variants.get("sdpa_cudnn").check(PROBLEMS[0]) is None


def test_the_dispatchers_precheck_leaves_cuda_alone(gpu_machine_without_init):
    if not gpu_machine_without_init:
        return  # passed in a fresh interpreter
    for name in ("sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex", "chunked", "naive"):
        spec = CellSpec(name, "cuda", "bfloat16", 1, 4, 256, 64, 64, True, 0.0, "fwd")
        row = precheck(spec, SkipAhead())
        assert row is None or row["status"] == "unsupported", (name, row)
    assert not torch.cuda.is_initialized()
