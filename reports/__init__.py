"""What is shown: scaling fits, figures and publishable pages (Markdown + HTML) built from result runs."""

if __name__ != "attnbench.reports":  # the folder imported by its own name, which attnbench 0.2 removed
    raise ImportError(
        f"{__name__} is now attnbench.reports: write `from attnbench import reports`", name="reports"
    )

# Modules: fit (power-law exponents), tables (derived tables), style + plots (matplotlib figures), page
# (the one page model: blocks, links and figures rendered and escaped to Markdown / HTML / text; every
# page below is built from it), render (`attnbench report`), compare (`attnbench compare`), profile_page
# (`attnbench profile`), terminal (the rich tables `attnbench list` and `check` print). Nothing is
# imported here: importing attnbench.reports must stay cheap, and matplotlib is imported only when a
# figure is drawn.
