"""Configuration of `pytest benchmarks/ --benchmark-only`: loads the attnbench pytest-benchmark plugin.

The plugin is loaded here and nowhere else (no pytest11 entry point), so `pytest tests` never sees it.
"""

pytest_plugins = ["attnbench.harness.pytest_plugin"]
