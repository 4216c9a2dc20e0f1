"""Configuration of `pytest benchmarks/ --benchmark-only`: loads the attnbench pytest-benchmark plugin.

The plugin is loaded here and nowhere else (no pytest11 entry point), so `pytest tests` never sees it.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a checkout that is not pip-installed: harness/ and variants/ live here
    sys.path.insert(0, str(ROOT))

pytest_plugins = ["harness.pytest_plugin"]
