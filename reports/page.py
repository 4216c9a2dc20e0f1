"""Pages as a list of blocks, rendered to GitHub Markdown, one self-contained HTML file, or plain text.

Every string in a block is data (variant names, error messages, hostnames) and is escaped by the
renderer: blocks never carry markup, so a hostile name cannot inject any.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from .style import FigureFiles


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    files: FigureFiles


Block = Heading | Para | Bullets | Table | Figure


@dataclass
class Page:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


# ---- Markdown ---------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_MD_LEADING = re.compile(r"^([#>+-])")  # only at the start of a line do these start a heading, quote or list


def md_escape(text: object) -> str:
    """Text that GitHub renders literally: HTML-escaped (it renders inline HTML), Markdown punctuation
    backslash-escaped, newlines folded (a newline would end a table row)."""
    s = html.escape(str(text), quote=False)
    s = _MD_SPECIAL.sub(r"\\\1", " ".join(s.split()))
    return _MD_LEADING.sub(r"\\\1", s)


def to_markdown(page: Page) -> str:
    """GitHub-flavoured Markdown; figures link to the PNGs (and SVG/CSV) beside the file."""
    out = [f"# {md_escape(page.title)}", ""]
    for b in page.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * max(2, min(b.level, 6))} {md_escape(b.text)}", ""]
        elif isinstance(b, Para):
            out += [md_escape(b.text), ""]
        elif isinstance(b, Bullets):
            out += [f"- {md_escape(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"*{md_escape(b.caption)}*", ""]
            out.append("| " + " | ".join(md_escape(h) for h in b.headers) + " |")
            out.append("|" + "|".join("---" for _ in b.headers) + "|")
            out += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Figure):
            f = b.files
            out += [f"![{md_escape(f.title)}]({f.png})", ""]
            note = f"{md_escape(f.caption)} " if f.caption else ""  # md_escape strips: space after
            out += [f"{note}Data: [{f.csv}]({f.csv}) · vector: [{f.svg}]({f.svg})", ""]
    return "\n".join(out).rstrip() + "\n"


# ---- HTML -------------------------------------------------------------------------------------------

CSS = """
body { font: 15px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 1140px; margin: 0 auto; padding: 24px; }
h1 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 2em; }
.scroll { overflow-x: auto; margin: 0 0 1em; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top;
         overflow-wrap: break-word; max-width: 520px; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption, .caption { color: #57606a; font-size: 13px; }
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def to_html(page: Page, base_dir: Path) -> str:
    """One self-contained HTML file: CSS inline, figures embedded as base64 PNG, all text escaped."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_esc(page.title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{_esc(page.title)}</h1>"]
    for b in page.blocks:
        if isinstance(b, Heading):
            lvl = max(2, min(b.level, 6))
            out.append(f"<h{lvl}>{_esc(b.text)}</h{lvl}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_esc(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_esc(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            cap = f"<caption class=\"caption\">{_esc(b.caption)}</caption>" if b.caption else ""
            head = "".join(f"<th>{_esc(h)}</th>" for h in b.headers)
            body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            out.append(f'<div class="scroll"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
                       "</table></div>")
        elif isinstance(b, Figure):
            f = b.files
            cap = _esc(f"{f.caption} " if f.caption else "") + _esc(f"(data: {f.csv})")
            out.append(f'<figure><img src="{_data_uri(base_dir / f.png)}" alt="{_esc(f.title)}">'
                       f"<figcaption>{cap}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---- plain text (stdout) ----------------------------------------------------------------------------


def to_text(table: Table, max_width: int = 48) -> str:
    """A table as aligned columns for a terminal; long cells are cut with '…'."""
    def cut(s: str) -> str:
        s = " ".join(str(s).split())
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    rows = [tuple(cut(c) for c in table.headers)] + [tuple(cut(c) for c in r) for r in table.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(table.headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"
