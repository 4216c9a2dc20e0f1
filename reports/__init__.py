"""What is shown: scaling fits, figures and publishable pages (Markdown + HTML) built from result runs."""

if __name__ != "attnbench.reports":  # the repository's reports/ folder imported under its folder name
    raise ImportError(
        "attnbench's reports package installs as attnbench.reports; write "
        "`from attnbench import reports` "
        "(the top-level `reports` import name was removed in attnbench 0.2, see the README)",
        name="reports",
    )


# Modules: fit (power-law exponents), tables (derived tables), style + plots (matplotlib figures), page
# (the one page model: blocks, links and figures rendered and escaped to Markdown / HTML / text; every
# page below is built from it), render (`attnbench report`), compare (`attnbench compare`), profile_page
# (`attnbench profile`). Nothing is imported here: importing attnbench.reports must stay cheap, and
# matplotlib is imported only when a figure is drawn.
