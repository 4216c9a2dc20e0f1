"""How each cell is measured: sweeps, isolation, timing, peak memory and the float64 gate."""

if __name__ != "attnbench.harness":  # the folder imported by its own name, which attnbench 0.2 removed
    raise ImportError(
        f"{__name__} is now attnbench.harness: write `from attnbench import harness`", name="harness"
    )
