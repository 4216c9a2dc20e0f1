"""mkdocs hooks: the published runs (results/reference, reports/reference) and ARCHITECTURE.md join the site.

The docs/ pages link to them as the repository lays them out (`../results/reference/cpu-epyc-2core`), which
works on a code host and in an editor but points outside docs_dir, which strict mode refuses. `on_files` adds
a copy of each (a reference report's README.md renders as a page; a folder without one gets a generated
index page listing its files), and `on_page_markdown` points the links at those copies, and a published
report's links to the manual (`../../../docs/method.md`) at the manual's page. Any other link outside docs/
is left alone, so strict mode still fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).parent
SHARED = ("results/reference", "reports/reference", "ARCHITECTURE.md")
LINK = re.compile(r"\]\(((?:\.\./)+)([^)#\s]+)(#[^)]*)?\)")


def _shared(rel: str) -> bool:
    return any(rel == s or rel.startswith(s + "/") for s in SHARED)


def _target(rel: str) -> str:
    """The site path of a repository path: a folder stands for its README.md, a static site's index.html, else
    its generated index."""
    if (ROOT / rel).is_dir():
        own = next((n for n in ("README.md", "index.html") if (ROOT / rel / n).is_file()), "index.md")
        return f"{rel}/{own}"
    return rel


def _listing(folder: Path) -> str:
    """A generated page for a published folder without a README.md: its files, linked."""
    rel = folder.relative_to(ROOT).as_posix()
    items = []
    for p in sorted(folder.iterdir()):
        target = _target(p.relative_to(ROOT).as_posix())[len(rel) + 1 :]  # relative to the folder
        items.append(f"- [`{p.name}{'/' if p.is_dir() else ''}`]({target})")
    return f"# `{rel}`\n\nPublished as committed in the repository:\n\n" + "\n".join(items) + "\n"


def _in_static_site(folder: Path, top: Path) -> bool:
    """Whether a folder lies inside a published static site: a folder above it, to `top`, has index.html."""
    return any((up / "index.html").is_file() for up in folder.parents if up.is_relative_to(top))


def on_files(files: Files, config) -> Files:
    for name in SHARED:
        top = ROOT / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            rel = path.relative_to(ROOT).as_posix()
            files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
        folders = [top, *top.rglob("*")] if top.is_dir() else []
        # a folder with its own README.md renders that; a published static site (index.html) is its own index,
        # and so are the folders inside it (`history publish`'s runs/: reached from the site's own pages)
        pages = ("README.md", "index.html")
        listed = [f for f in folders if f.is_dir() and not any((f / n).is_file() for n in pages)]
        for folder in sorted(f for f in listed if not _in_static_site(f, top)):
            rel = folder.relative_to(ROOT).as_posix()
            files.append(File.generated(config, f"{rel}/index.md", content=_listing(folder)))
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    depth = page.file.src_uri.count("/")

    shared_page = _shared(page.file.src_uri)  # a published report's page: its links are repository paths

    def point(m: re.Match) -> str:
        ups, rest, anchor = m.group(1), m.group(2), m.group(3) or ""
        here = posixpath.dirname(page.file.src_uri)
        if shared_page:  # a report in reports/reference linking the manual (../../../docs/method.md)
            rel = posixpath.normpath(posixpath.join(here, ups + rest))
            if rel.startswith("docs/"):
                return f"]({'../' * depth}{rel[len('docs/') :]}{anchor})"
            return m.group(0)
        rel = posixpath.normpath(posixpath.join("docs", here, ups + rest))
        if not _shared(rel):
            return m.group(0)
        return f"]({'../' * depth}{_target(rel)}{anchor})"

    return LINK.sub(point, markdown)
