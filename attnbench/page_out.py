"""Where a page a front end writes goes (a report, a comparison, a profile): its --out checked before any
work, so that a page is never written over a run, a file, the user's own page or among files not its own."""

from __future__ import annotations

import os
from pathlib import Path


def report_dir(out: str | os.PathLike | None, default: str, kind: str = "report") -> Path:
    """Where a `kind` page (reports.page.PAGE_FILES: report, compare, profile) goes: `out`, or
    reports/out/<default>; ValueError (naming --out) if that is a file, named as a page's file (x.html, x.md)
    and no folder, a run, a folder holding runs (`--out runs`), or holds a page of that page's name that
    attnbench did not write (`--out .` beside your README.md); a report's, if it is not empty and holds no
    report attnbench wrote (reports.rendered_from.holds_other_files)."""
    from attnbench.reports import rendered_from
    from attnbench.reports.page import PAGE_FILES, written_by_attnbench
    from attnbench.results import is_run_dir
    from attnbench.results.writable import too_long, why_no_page_folder, why_unwritable

    path = Path(out) if out else Path("reports") / "out" / default
    said = f"--out {str(path)!r}"
    long = too_long(path.absolute())  # before any question the OS would refuse to answer for it
    if long:
        raise ValueError(f"{said} {long}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{said} exists and is not a directory")
    if is_run_dir(path):
        where = f"--out {str(path / 'report')!r} (`attnbench history publish` finds it there)"
        raise ValueError(
            f"{said} is a run directory; write the {kind} somewhere else"
            + (f", such as {where}" if kind == "report" else "")
        )
    for name in PAGE_FILES[kind]:
        if (path / name).exists() and not written_by_attnbench(path / name):
            raise ValueError(  # an index.md, a README.md
                f"{said} holds {'an' if name[0] in 'aeiou' else 'a'} {name} that attnbench did not write, "
                f"and the {kind} writes its own {name} there; write it elsewhere"
            )
    why = why_no_page_folder(path, kind) or why_unwritable(path)
    if why:
        raise ValueError(f"{said} {why}")
    others = rendered_from.holds_other_files(path) if kind == "report" else []
    if others:  # as `run` refuses a non-empty --out: a report is never written in among files not its own
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ValueError(
            f"{said} is not empty ({shown}) and holds no report attnbench wrote; write the report into a new "
            "or empty folder, or one an earlier report was written into"
        )
    return path
