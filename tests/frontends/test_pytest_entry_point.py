"""The pytest-benchmark plugin as a user's project gets it: through its pytest11 entry point, with a variant
registered in the project's own test file, beside an ordinary benchmark; then `attnbench import-benchmark`
of the JSON that session wrote. Real pytest subprocesses, real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, cli_env, run_cli

from attnbench.reports.fit import scaling_table
from attnbench.results import load, read_meta

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PROJECT_TEST = """
import torch

from attnbench import register
from attnbench.harness.tools.pytest_plugin import measure


@register("proj_attn", description="the project's own attention", memory="quadratic", default=False)
def proj_attn(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    return scores.softmax(-1) @ v


def test_attention(benchmark, attn_cell, request):
    measure(benchmark, attn_cell, request.config)


def test_sum(benchmark):
    assert benchmark(sum, range(100)) == 4950


def test_unit():
    assert torch.ones(2).sum() == 2
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A directory holding only attnbench's pytest11 entry point, as pip installs it from pyproject.toml."""
    site = tmp_path_factory.mktemp("site")
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist = site / "attnbench_entry-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: attnbench-entry\nVersion: 0.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in points.items())
    (dist / "entry_points.txt").write_text("[pytest11]\n" + lines)
    return site


def pytest_in(site, project, *args: str) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in the project with the entry point on the path; from the repository root so
    that this checkout's attnbench is the one imported, with the project as its own rootdir."""
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(project),
        "-c",
        os.devnull,
    ]
    return subprocess.run(
        [*cmd, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )  # fmt: skip


@pytest.mark.slow  # real pytest sessions, each importing torch
def test_entry_point_grid_sees_the_test_files_variant_and_imports_with_theory_and_peak(site, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "test_proj.py").write_text(PROJECT_TEST)
    out = tmp_path / "out.json"
    grid = [
        "--attn-variants",
        "proj_attn,sdpa",
        "--attn-seq-len",
        "32,64",
        "--attn-heads",
        "1",
        "--attn-d-k",
        "8",
    ]
    quick = ["--attn-calibrate-ms", "50", "--benchmark-max-time", "0.005", "--benchmark-min-rounds", "3"]
    proc = pytest_in(site, project, str(project), "--benchmark-json", str(out), "-q", *grid, *quick)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "6 passed" in proc.stdout  # 4 grid cells, the ordinary benchmark and the unit test
    data = json.loads(out.read_text())
    assert {b["extra_info"].get("variant") for b in data["benchmarks"]} == {"proj_attn", "sdpa", None}
    block = data["attnbench"]
    assert block["variant_capabilities"]["proj_attn"]["memory"] == "quadratic"
    assert block["calibration"]["cpu"]["matmul_tflops"]["float32"] > 0

    run = tmp_path / "run"
    imported = run_cli("import-benchmark", str(out), "--out", str(run), check=True)
    skipped = [line for line in imported.stderr.splitlines() if line.startswith("skipped benchmark")]
    assert skipped == [
        "skipped benchmark test_proj.py::test_sum: not an attnbench grid cell (no attnbench extra_info)"
    ]
    assert "4 ok" in imported.stderr
    meta = read_meta(run)
    table = scaling_table(load(run), {meta["run_id"]: meta}).set_index("variant")
    assert table.loc["proj_attn", "mem_theory"] == 2.0 and table.loc["sdpa", "mem_theory"] == 1.0
    assert table["peak_fraction_at_max"].notna().all() and (table["peak_fraction_at_max"] > 0).all()


PLUGIN = "attnbench.harness.tools.pytest_plugin"
# the distribution that provides the entry point: the test's stand-in, or attnbench itself where it is
# installed and its metadata comes first on sys.path (`pip install -e .`, as nox does, leaves
# attnbench.egg-info in the checkout, and `python -m pytest` from the checkout puts it before PYTHONPATH);
# pluggy loads the first entry point of a name and skips the next of the same name, so it is one of the two
ENTRY_DISTS = re.compile(r"attnbench(-entry)?-\S+")


def plugin_loads(stdout: str) -> tuple[int, list[str]]:
    """From a `--trace-config` session's output: how many times the plugin module was registered, and the
    distributions pytest says it loaded it from through an entry point ("registered third-party plugins")."""
    lines = stdout.splitlines()
    registered = sum(line.startswith(f"PLUGIN registered: <module '{PLUGIN}'") for line in lines)
    dists = []
    if "registered third-party plugins:" in lines:
        for line in lines[lines.index("registered third-party plugins:") + 1 :]:
            if not line.startswith("  "):
                break
            dist, _, path = line.strip().partition(" at ")
            if path.endswith("pytest_plugin.py") and dist.startswith("attnbench"):
                dists.append(dist)
    return registered, dists


# the project's conftest.py: whether the session imported torch, written as pytest ends (after the JSON)
TELLS_IF_TORCH_WAS_IMPORTED = """
import sys
from pathlib import Path


def pytest_unconfigure(config):
    (Path(__file__).parent / "torch_imported").write_text(str("torch" in sys.modules))
"""


@pytest.mark.slow
def test_a_session_without_the_grid_is_untouched_and_benchmarks_conftest_adds_no_second_copy(site, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "test_plain.py").write_text("def test_sum(benchmark):\n    benchmark(sum, range(10))\n")
    (project / "conftest.py").write_text(TELLS_IF_TORCH_WAS_IMPORTED)
    out = tmp_path / "plain.json"
    quick = ("--benchmark-max-time", "0.005", "--benchmark-min-rounds", "3")  # the benchmark is not looked at
    proc = pytest_in(site, project, str(project), "--benchmark-json", str(out), "--trace-config", *quick)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    registered, dists = plugin_loads(proc.stdout)  # loaded once, through an entry point
    assert registered == 1 and len(dists) == 1 and ENTRY_DISTS.fullmatch(dists[0]), proc.stdout[-3000:]
    assert "attnbench grid" not in proc.stdout and "attnbench:" not in proc.stdout  # no header, no summary
    assert "attnbench" not in json.loads(out.read_text())  # no block
    # nor a torch import (the JSON's hook imported the calibration's, about 3 s, before it saw no grid)
    assert (project / "torch_imported").read_text() == "False"
    args = ("--collect-only", "-q", "--attn-seq-len", "32", "--trace-config")
    listed = pytest_in(site, ROOT, str(ROOT / "benchmarks"), *args)
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    assert "test_attention[naive-cpu-float32" in listed.stdout
    # benchmarks/conftest.py's pytest_plugins names the module the entry point registered: no second copy
    # (-q leaves out the list of third-party plugins, not the registrations)
    assert plugin_loads(listed.stdout)[0] == 1, listed.stdout[-3000:]
