"""The one page model: links and SVG figures in Markdown and HTML, and hrefs that are data, never markup."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.reports import page as pg

PERFETTO = "https://ui.perfetto.dev"
HOSTILE_HREFS = [
    "javascript:alert(1)",
    "JavaScript:alert(1)",
    " javascript:alert(1)",
    "java\nscript:alert(1)",
    "vbscript:msgbox(1)",
    "data:text/html,<script>alert(1)</script>",
    "file:///etc/passwd",
    "/etc/passwd",
    "../secret.json",
    "sub/dir.json",
    "//evil.example/x",
    "http:no-host",
    'x.json" onclick="alert(1)',
    "x.json)](javascript:alert(1)",
]


def _render(*blocks: pg.Block, tmp_path) -> tuple[str, str]:
    page = pg.Page("t")
    page.add(*blocks)
    return pg.to_markdown(page), pg.to_html(page, tmp_path)


def test_links_in_a_para_bullets_and_a_table_cell(tmp_path):
    line = ("open ", pg.Link("trace.json", "trace.json"), " with ", pg.Link(PERFETTO, PERFETTO), ".")
    md, html = _render(
        pg.Para(line),
        pg.Bullets((line, "plain item")),
        pg.Table(("file", "what"), (((pg.Link("top_ops.csv", "top_ops.csv"),), "every operator"),)),
        tmp_path=tmp_path,
    )
    assert f"open [trace.json](trace.json) with [{PERFETTO}]({PERFETTO})." in md  # spaces kept beside links
    assert f"- open [trace.json](trace.json) with [{PERFETTO}]({PERFETTO})." in md
    assert "| [top\\_ops.csv](top_ops.csv) | every operator |" in md
    links = f'<a href="trace.json">trace.json</a> with <a href="{PERFETTO}">{PERFETTO}</a>'
    assert f"<p>open {links}.</p>" in html and f"<li>open {links}.</li>" in html
    assert "<li>plain item</li>" in html
    assert '<td><a href="top_ops.csv">top_ops.csv</a></td>' in html
    assert "- plain item" in md


@pytest.mark.parametrize("href", HOSTILE_HREFS)
def test_a_hostile_href_is_shown_as_text_not_linked(tmp_path, href):
    md, html = _render(pg.Para(("see ", pg.Link("the <b>file</b>", href))), tmp_path=tmp_path)
    assert pg.safe_href(href) is None
    assert "<a " not in html and "<b>" not in html and "see the &lt;b&gt;file&lt;/b&gt;" in html
    assert "](" not in md and "<b>" not in md and "see the &lt;b&gt;file&lt;/b&gt;" in md


def test_a_url_cannot_break_out_of_its_markdown_link_or_html_attribute(tmp_path):
    href = "https://example.org/a)b\"c<d>'e|f`g"
    md, html = _render(pg.Para((pg.Link("x]y", href),)), tmp_path=tmp_path)
    assert "[x\\]y](https://example.org/a%29b%22c%3Cd%3E%27e%7Cf%60g)" in md
    assert '<a href="https://example.org/a%29b%22c%3Cd%3E%27e%7Cf%60g">x]y</a>' in html
    assert pg.safe_href("https://example.org/a b") is None  # whitespace: not a URL we would write
    assert pg.safe_href("https://example.org/q?a=1&b=2#frag") == "https://example.org/q?a=1&b=2#frag"
    assert (
        'href="https://example.org/q?a=1&amp;b=2"'
        in _render(pg.Para((pg.Link("q", "https://example.org/q?a=1&b=2"),)), tmp_path=tmp_path)[1]
    )


def test_svg_figure_is_an_object_in_html_and_an_image_in_markdown(tmp_path):
    caption = ("py-spy flame graph; ", pg.Link("open it on its own", "flame.svg"), " to zoom.")
    md, html = _render(pg.SvgFigure("flame.svg", "flame graph", caption), tmp_path=tmp_path)
    # an <object> runs the SVG's own script (zoom, search); base64 or a bare <img> would not
    assert (
        '<figure><object data="flame.svg" type="image/svg+xml"><img src="flame.svg" alt="flame graph">'
        '</object><figcaption>py-spy flame graph; <a href="flame.svg">open it on its own</a> to zoom.'
        "</figcaption></figure>"
    ) in html
    assert "base64" not in html
    assert "![flame graph](flame.svg)" in md
    assert "py-spy flame graph; [open it on its own](flame.svg) to zoom." in md


def test_svg_figure_without_a_caption(tmp_path):
    md, html = _render(pg.SvgFigure("f.svg", "<i>t</i>"), tmp_path=tmp_path)
    assert '<img src="f.svg" alt="&lt;i&gt;t&lt;/i&gt;"></object></figure>' in html
    assert md.endswith("![&lt;i&gt;t&lt;/i&gt;](f.svg)\n")


@pytest.mark.parametrize("file", [*HOSTILE_HREFS, "https://example.org/flame.svg"])
def test_svg_figure_embeds_only_a_file_beside_the_page(tmp_path, file):
    md, html = _render(pg.SvgFigure(file, "flame graph"), tmp_path=tmp_path)
    assert "<object" not in html and "<img" not in html and "flame graph" in html
    assert "](" not in md and "flame graph" in md


def test_text_of_a_table_with_links_shows_the_link_text():
    table = pg.Table(("file", "n"), (((pg.Link("trace.json", "trace.json"), " (Chrome)"), "3"),))
    assert pg.to_text(table).splitlines()[2] == "trace.json (Chrome)  3"


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "ours"),
    [
        ("reports/reference/cpu-epyc-2core/README.md", True),
        ("reports/reference/cpu-epyc-2core/report.html", True),
        ("reports/reference/cpu-4k-pages-vs-thp/README.md", True),
        ("reports/reference/cpu-4k-pages-vs-thp/compare.html", True),
        ("README.md", False),  # "# attnbench": the project's own, not a page attnbench wrote
        ("docs/index.md", False),
        # publish's pages are attnbench's too: publish writes over its own earlier site, never a user's page
        ("reports/reference/history/index.html", True),
    ],
)
def test_its_own_pages_are_told_from_a_users(path, ours):
    """A report, compare or profile may write over a page by its name only when attnbench wrote it
    (attnbench.page_out.report_dir; the profile pages: tests/frontends/test_profile.py)."""
    assert pg.written_by_attnbench(ROOT / path) is ours


def test_a_command_between_backticks_is_code_in_both_pages_and_hostile_text_stays_text():
    said = "measure again with `attnbench run --out a|b <x>` or rerun_it, `odd"
    assert pg.md_escape(said) == ("measure again with `attnbench run --out a\\|b <x>` or rerun\\_it, \\`odd")
    assert pg.html_text(said) == (
        "measure again with <code>attnbench run --out a|b &lt;x&gt;</code> or rerun_it, `odd"
    )
    hostile = "`<img src=x onerror=alert(1)>` <script>"
    assert "<img" not in pg.html_text(hostile) and "<script>" not in pg.html_text(hostile)
    assert pg.md_escape(hostile).endswith(" &lt;script&gt;")
