"""attnbench: is an attention implementation correct, how fast, how much memory, and how does it scale?

The plug-in API (importing it does not import torch):

    from attnbench import register, Problem, UnsupportedError

The Python API for notebooks and scripts (each imports what it needs when called):

    run = attnbench.run(preset="quick", out="runs/mine")      # -> attnbench.Run
    df = attnbench.load("runs/mine")                           # -> pandas.DataFrame
    attnbench.report("runs/mine", out="reports/out/mine")      # -> the report's files

The pipeline lives in attnbench.variants -> attnbench.harness -> attnbench.results -> attnbench.reports.
"""

from attnbench.api import Run, load, report, run
from attnbench.variants import Problem, UnsupportedError, register

__all__ = ["Problem", "Run", "UnsupportedError", "load", "register", "report", "run"]
