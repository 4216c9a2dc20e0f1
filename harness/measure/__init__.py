"""Measuring one cell: inputs, the float64 gate, timing, peak memory, checks, and its row."""
