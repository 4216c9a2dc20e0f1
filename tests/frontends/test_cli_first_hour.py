"""The CLI a newcomer meets in the first hour (issue 26 items 4 and 5): quick to answer, output that fits the
terminal, a dry run and a cost warning before a long sweep, a plain sentence after a noisy one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, cli_env

# ---- list, env and --help answer without what they do not need ----------------------------------------

# `python -m attnbench ARGS`, then the heavy modules it imported on the way, as JSON on the last line
_IMPORTED = """
import json, runpy, sys
sys.argv = ["attnbench", *sys.argv[1:]]
try:
    runpy.run_module("attnbench", run_name="__main__")
except SystemExit:
    pass
heavy = ("torch", "torch._dynamo", "pandas", "matplotlib", "scipy", "cpuinfo")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def _imported(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args], cwd=ROOT, env=cli_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args, allowed",
    [
        (("list",), {"torch"}),  # availability asks torch (CUDA, AVX2), never dynamo (3 s of 8, issue 26)
        (("env",), {"torch"}),  # the fingerprint records torch's build; cpuinfo's CPUID child took 1.1 s
        (("--help",), set()),
        (("run", "--help"), set()),
    ],
)
def test_quick_commands_import_only_what_they_need(args, allowed):
    """Timings are noisy on a shared machine, so what is pinned is the cause: the modules imported."""
    assert set(_imported(*args)) <= allowed
