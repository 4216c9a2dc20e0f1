"""Shared test helpers: run the real CLI in a subprocess, skip CUDA tests without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
FAULTS = DATA / "fault_variants.py"


def load_benchmark(name: str):
    """benchmarks/NAME.py imported as a module (benchmarks/ is no package), for tests of its pure parts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# The tests' runs calibrate with 200 ms of sampling instead of the default 1000 (about 2 s less a run, over a
# minute of the suite): their ceilings are only compared within the tests' own tiny runs.
TEST_CALIBRATE_MS = "200"


def _quick_calibration(args: tuple[str, ...]) -> tuple[str, ...]:
    """A fresh `run` gets --calibrate-ms TEST_CALIBRATE_MS unless it names one; a resume or rerun takes
    the settings of the run it finishes (adding a flag there would be refused)."""
    if args[:1] != ("run",) or any(a.startswith(("--calibrate-ms", "--resume", "--rerun")) for a in args):
        return args
    return (*args, "--calibrate-ms", TEST_CALIBRATE_MS)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, check: bool = False):
    """`python -m attnbench ARGS` as a real subprocess; returns CompletedProcess with text output. A fresh
    run calibrates for TEST_CALIBRATE_MS (see _quick_calibration)."""
    proc = subprocess.run(
        [sys.executable, "-m", "attnbench", *_quick_calibration(args)],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"attnbench {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def wait_while_running(cond, proc, what: str, timeout: float = 240) -> None:
    """Poll cond() until it holds, failing at once (with its output) if proc exits first, or after timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        assert proc.poll() is None, (what, proc.communicate())
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
