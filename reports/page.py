"""Pages as a list of blocks, rendered to GitHub Markdown, one HTML file, or plain text.

The one page model of attnbench: `attnbench report`, `compare` and `profile` all build a Page of these
blocks. Every string in a block is data (variant names, error messages, hostnames, commands) and is escaped
here, and only here: blocks never carry markup, so a hostile name cannot inject any, and control and bidi
characters (ESC, U+202E) are written as escapes (results.formulas.printable). Link targets are data
too: only a file name beside the page or an http(s) URL becomes a link.
"""

from __future__ import annotations

import base64
import functools
import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from attnbench.results.formulas import printable

from .style import FigureFiles


@dataclass(frozen=True)
class Link:
    """A link inside a line. `href` is a file name beside the page or an http(s) URL; the renderers show
    any other href (javascript:, data:, a path out of the folder) as the plain `text`, with no link."""

    text: str
    href: str
    # a relative path of file-name segments and '..' (a site's link to a run's report in its runs/), accepted
    # only where the code that made the Link built the path itself: never a path read from data
    relative: bool = False


Inline = str | Link
Text = str | tuple[Inline, ...]  # a plain string, or a run of strings and links


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: Text


@dataclass(frozen=True)
class Bullets:
    items: tuple[Text, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[Text, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    """A matplotlib figure: PNG (embedded in HTML), SVG and CSV beside the page."""

    files: FigureFiles
    embed: bool = True  # False: HTML shows the PNG beside the page (<img src="stem.png">), not base64


@dataclass(frozen=True)
class SvgFigure:
    """An SVG file beside the page that must stay interactive (a py-spy flame graph zooms and searches
    with its own script): HTML shows it in an <object>, which runs that script where <img> or base64 would
    not; Markdown shows it as an image of the file."""

    file: str
    title: str
    caption: Text = ""


Block = Heading | Para | Bullets | Table | Figure | SvgFigure


@dataclass
class Page:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


# The pages each command writes into its --out folder, by name. A file of one of these names that attnbench
# did not write (its title is not one of PAGE_TITLES) is never written over (attnbench.api.report_dir;
# `history publish`'s pages, whose names depend on the store: reports.dashboard.site_problem).
PAGE_FILES = {
    "report": ("README.md", "report.html"),
    "compare": ("README.md", "compare.html"),
    "profile": ("index.md", "index.html", "top_ops.md"),
}
REPORT_TITLE = "attnbench report: "  # a report's title, before the ids of its runs (reports.render)
PAGE_TITLES = (
    "attnbench report",
    "attnbench compare",
    "Profile: ",
    "Top operators by self time",
    "attnbench history",
)
_HTML_TITLE = re.compile(r"<title>(.*?)</title>", re.S)


def written_by_attnbench(path: Path) -> bool:
    """Whether the page at `path` is one attnbench wrote: its Markdown heading or HTML title is a page
    title of PAGE_TITLES."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    if path.suffix == ".md":
        first = head.split("\n", 1)[0]
        return first.startswith("# ") and first[2:].startswith(PAGE_TITLES)
    title = _HTML_TITLE.search(head)
    return bool(title) and html.unescape(title[1]).startswith(PAGE_TITLES)


def named_reports(root: Path) -> dict[str, list[Path]]:
    """run id -> the folders under `root` (as given: root / name) that hold a report of that run alone, read
    off each README.md's title (`# attnbench report: RUN_ID`, reports.render), in name order; read once per
    state of the folder."""
    try:
        found = _named_reports(str(root.resolve()), root.stat().st_mtime_ns)
    except OSError:
        return {}
    return {run_id: [root / name for name in names] for run_id, names in found.items()}


@functools.lru_cache(maxsize=4)
def _named_reports(root: str, _mtime_ns: int) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for readme in sorted(Path(root).glob("*/README.md")):
        try:
            with readme.open(encoding="utf-8", errors="replace") as lines:
                title = re.sub(r"\\(.)", r"\1", lines.readline().strip())
        except OSError:
            continue
        run_id = title.removeprefix(f"# {REPORT_TITLE}")
        if run_id != title and ", " not in run_id:  # a report of several runs is no one run's
            found.setdefault(run_id, []).append(readme.parent.name)
    return found


# ---- link targets -----------------------------------------------------------------------------------

_FILE_NAME = re.compile(r"(?!\.)[A-Za-z0-9._-]+")  # beside the page: no folder, no scheme, not . or ..
_URL_SAFE = "/:?#@!$&*+,;=%~"  # kept as they are; ( ) < > quotes, spaces and backslashes are %-encoded


def safe_href(href: str) -> str | None:
    """`href` ready to write into Markdown or an HTML attribute (after html-escaping), or None when it is
    neither a file name beside the page nor an http(s) URL."""
    if _FILE_NAME.fullmatch(href):
        return href
    if any(c.isspace() or not c.isprintable() for c in href):
        return None  # urlsplit would drop some of them; a link with them is not one we wrote
    try:
        parts = urlsplit(href)
    except ValueError:  # e.g. an unbalanced '[' in the host
        return None
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        return quote(href, safe=_URL_SAFE)  # ')' cannot end a Markdown link early
    return None


_REL_SEGMENT = re.compile(r"\.\.|(?!\.)[A-Za-z0-9._-]+")


def link_href(link: Link) -> str | None:
    """safe_href, or for a `relative` Link a path of file-name segments and '..' (no scheme, not absolute)."""
    parts = link.href.split("/")
    if link.relative and parts[-1] and all(_REL_SEGMENT.fullmatch(p) for p in parts):
        return link.href
    return safe_href(link.href)


def _file(name: str) -> str | None:
    """A file beside the page (what figures show): never a URL, so a page never pulls content from the web."""
    return name if _FILE_NAME.fullmatch(name) else None


def plain(text: Text) -> str:
    """The words of a Text, links as their text (for a terminal)."""
    if not isinstance(text, tuple):
        return str(text)
    return "".join(i.text if isinstance(i, Link) else i for i in text)


# ---- Markdown ---------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_MD_LEADING = re.compile(r"^([#>+-])")  # only at the start of a line do these start a heading, quote or list


_CODE = re.compile(r"`([^`]+)`")  # a command in a sentence, as `attnbench run --resume --out RUN`


def md_escape(text: object) -> str:
    """Text that GitHub renders literally: HTML-escaped (it renders inline HTML), Markdown punctuation
    backslash-escaped, newlines folded (a newline would end a table row); a span between two backticks
    stays a code span (its | escaped, which a table cell needs)."""
    parts = _CODE.split(" ".join(printable(text).split()))
    s = "".join(
        "`" + part.replace("|", r"\|") + "`"
        if i % 2
        else _MD_SPECIAL.sub(r"\\\1", html.escape(part, quote=False))
        for i, part in enumerate(parts)
    )
    return _MD_LEADING.sub(r"\\\1", s)


def _md_piece(text: str) -> str:
    """md_escape, keeping a space at either end that separates the piece from a link beside it."""
    lead = " " if text[:1].isspace() else ""
    trail = " " if text[-1:].isspace() and text.strip() else ""
    return lead + md_escape(text) + trail


def _md_link(text: str, href: str | None, image: bool = False) -> str:
    if href is None:
        return md_escape(text)
    return f"{'!' if image else ''}[{md_escape(text)}]({href})"


def md_text(text: Text) -> str:
    """A Text as one line of Markdown."""
    if not isinstance(text, tuple):  # a str (or, as before links, anything str() can show)
        return md_escape(text)
    return "".join(_md_link(i.text, link_href(i)) if isinstance(i, Link) else _md_piece(i) for i in text)


def to_markdown(page: Page) -> str:
    """GitHub-flavoured Markdown; figures link to the PNGs (and SVG/CSV) beside the file."""
    out = [f"# {md_escape(page.title)}", ""]
    for b in page.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * max(2, min(b.level, 6))} {md_escape(b.text)}", ""]
        elif isinstance(b, Para):
            out += [md_text(b.text), ""]
        elif isinstance(b, Bullets):
            out += [f"- {md_text(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"*{md_escape(b.caption)}*", ""]
            out.append("| " + " | ".join(md_escape(h) for h in b.headers) + " |")
            out.append("|" + "|".join("---" for _ in b.headers) + "|")
            out += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Figure):
            f = b.files
            out += [_md_link(f.title, _file(f.png), image=True), ""]
            note = f"{md_escape(f.caption)} " if f.caption else ""  # md_escape strips: space after
            csv, svg = _md_link(f.csv, _file(f.csv)), _md_link(f.svg, _file(f.svg))
            out += [f"{note}Data: {csv} · vector: {svg}", ""]
        elif isinstance(b, SvgFigure):
            out += [_md_link(b.title, _file(b.file), image=True), ""]
            if b.caption:
                out += [md_text(b.caption), ""]
    return "\n".join(out).rstrip() + "\n"


# ---- HTML -------------------------------------------------------------------------------------------

WIDE_COLUMNS = 8  # a table with more columns than this is wide: rows unwrapped, first column sticky

CSS = """
body { font: 15px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 1140px; margin: 0 auto; padding: 24px; }
h1 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 2em; }
.scroll { overflow-x: auto; max-width: 100%; margin: 0 0 1em; scrollbar-width: thin;
          scrollbar-color: #8c959f #f6f8fa; }
.scroll::-webkit-scrollbar { height: 10px; }
.scroll::-webkit-scrollbar-thumb { background: #8c959f; border-radius: 5px; }
.scroll::-webkit-scrollbar-track { background: #f6f8fa; }
.wide td { white-space: nowrap; }
.wide td:first-child, .wide th:first-child { position: sticky; left: 0; box-shadow: 1px 0 0 #d0d7de; }
.wide td:first-child { background: #fff; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top;
         overflow-wrap: break-word; max-width: 520px; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figure object { width: 100%; }
figcaption, .caption { color: #57606a; font-size: 13px; }
"""


def _esc(text: object) -> str:
    return html.escape(printable(text), quote=True)


def _html_link(text: str, href: str | None) -> str:
    return f'<a href="{_esc(href)}">{_esc(text)}</a>' if href is not None else _esc(text)


def folder_href(folder: str | Path) -> str | None:
    """`folder` as the start of a link from another page (a notebook's output) to the files beside this
    page: '' for the same folder, 'a/b/' for a folder below it, None for any other (absolute, '..', a
    segment starting with '.' or holding other characters than a file name's), whose files are then named,
    not linked."""
    parts = Path(folder).parts
    if Path(folder).is_absolute() or not all(_FILE_NAME.fullmatch(p) for p in parts):
        return None
    return "".join(f"{p}/" for p in parts)


def _href(link: Link, folder: str | None) -> str | None:
    """link_href, a file beside the page reached through `folder` (folder_href: None, files not linked)."""
    if not _FILE_NAME.fullmatch(link.href):
        return link_href(link) if folder == "" or not link.relative else None
    return None if folder is None else folder + link.href


def html_text(text: Text, folder: str | None = "") -> str:
    """A Text as inline HTML; links to files beside the page go through `folder` (folder_href); a span
    between two backticks is <code>."""
    if not isinstance(text, tuple):  # a str (or, as before links, anything str() can show)
        return _esc_code(text)
    return "".join(
        _html_link(i.text, _href(i, folder)) if isinstance(i, Link) else _esc_code(i) for i in text
    )


def _esc_code(text: object) -> str:
    parts = _CODE.split(printable(text))
    return "".join(f"<code>{_esc(part)}</code>" if i % 2 else _esc(part) for i, part in enumerate(parts))


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def to_html(page: Page, base_dir: Path) -> str:
    """One HTML file, all text escaped: CSS inline, figures embedded as base64 PNG (self-contained), SVG
    figures and links pointing at the files beside it."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(page.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_esc(page.title)}</h1>",
        *_html_blocks(page.blocks, base_dir, ""),
        "</body></html>",
    ]
    return "\n".join(out) + "\n"


def to_html_fragment(blocks: list[Block], base_dir: Path, folder: str | None = "") -> str:
    """Blocks as a piece of HTML inside another page (a notebook's output: Run and Report), escaped as
    to_html escapes them, with no CSS of its own; links to files beside the page go through `folder`
    (folder_href), and its headings start at <h3> since the notebook's own headings come first."""
    return "\n".join(['<div class="attnbench">', *_html_blocks(blocks, base_dir, folder, top=3), "</div>"])


def to_notebook_html(blocks: list[Block], page_dir: str | Path) -> str:
    """to_html_fragment for a notebook cell's output: links to the files in `page_dir` are relative to the
    working directory (in Jupyter the notebook's own folder, where the browser resolves them), and files
    outside it are named, not linked."""
    rel = os.path.relpath(Path(page_dir).resolve(), Path.cwd())
    return to_html_fragment(blocks, Path(page_dir), folder_href(rel))


def _html_blocks(blocks: list[Block], base_dir: Path, folder: str | None, top: int = 2) -> list[str]:
    """Each block as HTML: headings from <h`top`>, tables in their scroll box, figures embedded."""
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            lvl = max(top, min(b.level + top - 2, 6))
            out.append(f"<h{lvl}>{_esc(b.text)}</h{lvl}>")
        elif isinstance(b, Para):
            out.append(f"<p>{html_text(b.text, folder)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{html_text(i, folder)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            cap = f'<caption class="caption">{_esc(b.caption)}</caption>' if b.caption else ""
            head = "".join(f"<th>{_esc(h)}</th>" for h in b.headers)
            body = "".join(
                "<tr>" + "".join(f"<td>{html_text(c, folder)}</td>" for c in row) + "</tr>" for row in b.rows
            )
            # every table scrolls sideways in its own box, never the page; a wide one (the fits table)
            # keeps each row on one line and its first column (the variant) in view while it scrolls
            box = "scroll wide" if len(b.headers) > WIDE_COLUMNS else "scroll"
            out.append(
                f'<div class="{box}"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
                "</table></div>"
            )
        elif isinstance(b, Figure):
            f = b.files
            csv = _file(f.csv)  # the CSV it was drawn from, linked where the page's files are reachable
            data = _html_link(f.csv, folder + csv) if csv is not None and folder is not None else _esc(f.csv)
            cap = _esc(f"{f.caption} " if f.caption else "") + f"(data: {data})"
            beside = not b.embed and folder is not None and _file(f.png) is not None
            src = folder + f.png if beside else _data_uri(base_dir / f.png)
            out.append(
                f'<figure><img src="{_esc(src)}" alt="{_esc(f.title)}">'
                f"<figcaption>{cap}</figcaption></figure>"
            )
        elif isinstance(b, SvgFigure):
            src = _file(b.file)
            cap = f"<figcaption>{html_text(b.caption, folder)}</figcaption>" if b.caption else ""
            if src is None or folder is None:  # not a file beside the page, or not reachable: name it
                out.append(f"<figure><p>{_esc(b.title)}</p>{cap}</figure>")
                continue
            # the <img> inside is the fallback where <object> is blocked; it shows the picture, not the script
            src = folder + src
            out.append(
                f'<figure><object data="{_esc(src)}" type="image/svg+xml">'
                f'<img src="{_esc(src)}" alt="{_esc(b.title)}"></object>{cap}</figure>'
            )
    return out


# ---- plain text (stdout) ----------------------------------------------------------------------------


def to_text(table: Table, max_width: int = 48) -> str:
    """A table as aligned columns for a terminal; long cells are cut with '…'."""

    def cut(s: Text) -> str:
        s = " ".join(printable(plain(s)).split())
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    rows = [tuple(cut(c) for c in table.headers)] + [tuple(cut(c) for c in r) for r in table.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(table.headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"
