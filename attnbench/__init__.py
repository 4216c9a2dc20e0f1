"""attnbench: is an attention implementation correct, how fast, how much memory, and how does it scale?

The plug-in API (importing it does not import torch):

    from attnbench import register, Problem, UnsupportedError

The Python API for notebooks and scripts (each imports what it needs when called):

    run = attnbench.run(preset="quick", out="runs/mine")      # -> attnbench.Run
    df = attnbench.load("runs/mine")                           # -> pandas.DataFrame
    attnbench.table(df)                                        # -> its readable display in a notebook
    attnbench.report("runs/mine", out="reports/out/mine")      # -> the report's files
    attnbench.run(variants=[my_attn, "sdpa"])                  # a callable is a variant (attnbench.variant)
    attnbench.bench(my_attn)                                   # gated, against sdpa, every mask and dtype
    attnbench.profile(my_attn, seq_len=1024)                   # py-spy + torch.profiler of one cell
    attnbench.history("runs/mine")                             # -> DataFrame of every run in the store
    attnbench.__version__                                      # the installed (or checkout's) version

The pipeline lives in attnbench.variants -> attnbench.harness -> attnbench.results -> attnbench.reports.
"""

from pathlib import Path as _Path


def _from_the_checkout() -> None:
    """Installed, attnbench.variants etc. sit inside this package (pyproject's package-dir). Imported from a
    checkout that was never installed, or one whose own attnbench/ shadows an install (the repository root is
    the working directory: `python -m attnbench`, pytest), they sit beside it: look there as well. Only a
    checkout of this project qualifies (its pyproject.toml names it), never an installed package's
    neighbours in site-packages."""
    root = _Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if str(root) in __path__ or not (root / "variants" / "__init__.py").is_file() or not pyproject.is_file():
        return
    if 'name = "attnbench"' in pyproject.read_text(encoding="utf-8", errors="replace"):
        __path__.append(str(root))


_from_the_checkout()

from attnbench.api import Run, bench, load, profile, report, run, table, variant  # noqa: E402
from attnbench.api_history import history, steps  # noqa: E402
from attnbench.variants import Problem, UnsupportedError, register  # noqa: E402


def __getattr__(name: str):
    """`attnbench.__version__`, read when asked: the installed distribution's, else the checkout's
    pyproject (the version the fingerprint records in every run)."""
    if name == "__version__":
        from attnbench.harness.measure.fingerprint import attnbench_version

        return attnbench_version()
    raise AttributeError(f"module 'attnbench' has no attribute {name!r}")


__all__ = [
    "Problem",
    "Run",
    "UnsupportedError",
    "bench",
    "history",
    "load",
    "profile",
    "register",
    "report",
    "run",
    "steps",
    "table",
    "variant",
]
