"""What other front ends call: check, profile and the pytest-benchmark plugin."""
