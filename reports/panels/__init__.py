"""A report's workload panels (issue 11), one module each: decode, grouped-query attention, sliding window,
packed variable-length batches (useful against executed TFLOP/s per length pattern: the padding tax and
the rest), energy per call (a run made with --energy), and speed against accuracy (TFLOP/s against rel_err to
float64, one point per variant and dtype; every run with an ok cell whose error is finite).

A panel owns its rows, its numbers, its figures and the blocks it adds to the page, and shows only where a
run has such cells. render.py calls each through the same function, `section(df, metas, out)`, in PANELS'
order: a section.Section, its blocks among the figures and among the tables apart. Every group key comes
from tables.COMBO_AXES, so an axis added there is held fixed here too (varlen leaves out `lengths`: its
patterns are the bars it sets side by side).
"""

from __future__ import annotations

from . import accuracy, decode, energy, gqa, varlen, window

PANELS = (decode, gqa, window, varlen, energy, accuracy)  # in page order
