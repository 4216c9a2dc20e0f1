"""Configuration of `pytest benchmarks/ --benchmark-only`: loads the attnbench pytest-benchmark plugin.

An installed attnbench loads it through its pytest11 entry point (named as the module, so this line then
adds nothing); this line loads it from a checkout that is not installed. It acts only where a test uses
its `attn_cell` fixture, so `pytest tests` loads it and sees no grid.
"""

pytest_plugins = ["attnbench.harness.tools.pytest_plugin"]
