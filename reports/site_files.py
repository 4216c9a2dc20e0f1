"""The files `attnbench history publish` writes at the top of its site folder (its pages, and each figure's
PNG, SVG and CSV), listed in a manifest there, so that publishing again removes the ones the new site no
longer writes (the page of a machine gone from the store, a series no longer drawn) and nothing else: a file
publish did not list, a user's own, is never touched. The runs' report copies in runs/ are
reports.dashboard.copy_reports' (a folder publish owns whole)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from .page import Figure, Page, written_by_attnbench

MANIFEST = ".attnbench-site-files"  # one name a line, sorted: the same site writes the same manifest
_HEADER = "# attnbench history publish wrote these files; publishing again removes those it no longer writes"
# what publish writes at the top of its folder, by name: a listed name of any other shape is never removed
OWN = re.compile(r"(index|machines|machine-[^/\\]+)\.html|series-[^/\\]+\.(png|svg|csv)")


def page_files(written: Iterable[tuple[Page, Path]]) -> list[str]:
    """The names of the pages written (page, path) and of every figure file beside them (PNG, SVG, CSV)."""
    names = set()
    for page, path in written:
        names.add(path.name)
        for block in page.blocks:
            if isinstance(block, Figure):
                names.update((block.files.png, block.files.svg, block.files.csv))
    return sorted(names)


def listed(out: Path) -> list[str]:
    """The names the manifest in `out` lists (none where there is none)."""
    path = out / MANIFEST
    if not path.is_file() or path.is_symlink():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def replace(out: Path, names: list[str]) -> list[str]:
    """Remove the files the previous publish listed in `out` that `names` (this publish's) leaves out, and
    list `names` instead; returns the names removed. Only a plain file (no link) at the top of `out`, of a
    name publish writes (OWN), and for a page one attnbench wrote (its title), is removed."""
    gone = []
    for name in sorted(set(listed(out)) - set(names)):
        path = out / name
        if not OWN.fullmatch(name) or path.is_symlink() or not path.is_file():
            continue
        if path.suffix == ".html" and not written_by_attnbench(path):
            continue
        path.unlink()
        gone.append(name)
    (out / MANIFEST).write_text("\n".join([_HEADER, *sorted(names)]) + "\n", encoding="utf-8")
    return gone
