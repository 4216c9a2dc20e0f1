"""Every registered variant over a small shape grid, timed by pytest-benchmark (see
harness/tools/pytest_plugin.py).

pytest benchmarks/ --benchmark-only [--benchmark-json out.json] [--attn-seq-len 512,2048]
attnbench import-benchmark out.json --out runs/from-pytest     # then attnbench report / export
"""

from attnbench.harness.tools.pytest_plugin import measure


def test_attention(benchmark, attn_cell, request):
    """One cell: skipped with its reason when it cannot run here, failed when wrong vs float64."""
    measure(benchmark, attn_cell, request.config)
