"""What is shown: scaling fits, figures and publishable pages (Markdown + HTML) built from result runs."""

# Modules: fit (power-law exponents), tables (derived tables), style + plots (matplotlib figures), page
# (Markdown / HTML / text), render (`attnbench report`), compare (`attnbench compare`), synthetic (run
# directories with known laws). Nothing is imported here: `import reports` must stay cheap, and matplotlib
# is imported only when a figure is drawn.
