"""How each cell is measured: sweeps, isolation, timing, peak memory and the float64 gate."""

if __name__ != "attnbench.harness":  # the repository's harness/ folder imported under its folder name
    raise ImportError(
        "attnbench's harness package installs as attnbench.harness; write "
        "`from attnbench import harness` "
        "(the top-level `harness` import name was removed in attnbench 0.2, see the README)",
        name="harness",
    )
