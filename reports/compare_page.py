"""`attnbench compare`'s words out: the text it prints and its page (README.md, compare.html), laid out as a
run's report is: the verdict first, then the figure, then the tables, then the method in one paragraph."""

from __future__ import annotations

from pathlib import Path

from . import page as pg
from .compare import (
    Comparison,
    accuracy_lines,
    calibration_table,
    cell_table,
    missing_lines,
    normalize_note,
    unmatched_lines,
    variant_table,
    verdict,
    verdict_counts,
)

# where the rule is said in full, as a run's report names docs/method.md (no documentation URL is configured)
METHOD_DOCS = (
    "In full: docs/reports-and-compare.md#how-compare-judges ('How compare judges') in attnbench's source "
    "repository (no documentation URL is configured)."
)


def text_report(cmp: Comparison) -> str:
    """What `attnbench compare` prints on stdout: the rule once, then the tables (cmp.warnings, each one
    `attnbench: warning:` line on stderr, are the command's to say, as every command's warnings are)."""
    out = [
        f"A: {cmp.label_a}  [{cmp.run_a}]",
        f"B: {cmp.label_b}  [{cmp.run_b}]",
        *([cmp.differences] if cmp.differences else []),
        cmp.match,
        *cmp.pairing,
        *unmatched_lines(cmp),
        "",
    ]
    out.append(pg.to_text(calibration_table(cmp)))  # its warnings are the command's, on stderr (cmp.warnings)
    out += [normalize_note(cmp), "", f"Rule: {cmp.rule}", ""]
    out.append(pg.to_text(cell_table(cmp), max_width=60))
    out.append(pg.to_text(variant_table(cmp)))
    out.append(verdict_counts(cmp))
    out += accuracy_lines(cmp)
    for _, r in cmp.regressions.iterrows():
        out.append(f"REGRESSION {r['cell_id']}: {r['why']}")
    out += missing_lines(cmp)
    out.append(verdict(cmp))
    return "\n".join(out) + "\n"


def write_page(cmp: Comparison, out_dir: str | Path) -> tuple[Path, Path]:
    """compare.png/.svg/.csv, per_variant.csv, README.md and compare.html in out_dir: the verdict (a busy
    machine's sentence first), the figure, the tables, and the rule as the method's one paragraph with
    where it is said in full."""
    from .plots import compare_figure
    from .style import save

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, data = compare_figure(
        cmp.cells,
        "Run B vs run A",
        cmp.label_a,
        cmp.label_b,
        cmp.threshold.value if cmp.threshold and cmp.threshold.relative else None,
    )
    files = save(
        fig,
        data,
        out,
        "compare",
        "Time ratio B/A per cell",
        "Vertical lines: the ratio's 95% CI (by the rule on the page); filled markers: faster or slower, "
        "hollow: same or ambiguous.",
    )
    cmp.per_variant.to_csv(out / "per_variant.csv", index=False)
    page = pg.Page("attnbench compare")
    # the verdict first, a busy machine's sentence before it (its regressions may be the machine's)
    said = (
        *cmp.busy,
        f"A: {cmp.label_a} ({cmp.run_a})",
        f"B: {cmp.label_b} ({cmp.run_b})",
        *([cmp.differences] if cmp.differences else []),
        cmp.match,
        *cmp.pairing,
        *unmatched_lines(cmp),
        verdict_counts(cmp),
        *accuracy_lines(cmp),
        *missing_lines(cmp),
        verdict(cmp),
        *([cmp.foreign_floor] if cmp.foreign_floor else []),  # the floors behind it are another device's
    )
    page.add(pg.Bullets(said))
    others = [w for w in cmp.warnings if w not in cmp.busy]
    if others:
        page.add(pg.Bullets(tuple(others)))
    page.add(pg.Figure(files))
    page.add(pg.Heading("Per variant (geometric mean of B/A over cells ok in both)"), variant_table(cmp))
    page.add(pg.Heading("Per cell"), cell_table(cmp))
    page.add(pg.Heading("Calibration of both runs"), calibration_table(cmp))
    page.add(pg.Para(f"Rule: {cmp.rule} {normalize_note(cmp)} {METHOD_DOCS}"))
    readme, html_path = (out / name for name in pg.PAGE_FILES["compare"])
    readme.write_text(pg.to_markdown(page), encoding="utf-8")
    html_path.write_text(pg.to_html(page, out), encoding="utf-8")
    return readme, html_path
