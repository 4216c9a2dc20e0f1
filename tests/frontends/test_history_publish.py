"""`attnbench history publish`: the static site's pages, that every link and image in them resolves to a
file, bad input in one line with nothing written, and (where playwright and its chromium are installed) the
pages opened over file:// in a real headless browser."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import DATA, run_cli
from synthetic import run_series

from attnbench.reports import dashboard

BASE = DATA / "runs" / "cpu-small"

pytest.importorskip("ruptures")


class _Refs(HTMLParser):
    """Every <a href> and <img src> of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])


def refs(page: Path) -> _Refs:
    parser = _Refs()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A store of 6 runs with a 20% step after the third, published."""
    tmp = tmp_path_factory.mktemp("publish")
    store = str(tmp / "h.sqlite")
    runs = run_series(BASE, tmp / "runs", [1.0] * 3 + [1.2] * 3)
    run_cli("history", "add", *map(str, runs), "--store", store, check=True)
    p = run_cli("history", "publish", "--store", store, "--out", str(tmp / "site"), check=True)
    assert p.stdout == "" and p.stderr.startswith("published 3 pages into "), p.stderr
    return tmp / "site"


def test_the_pages_are_written_and_name_what_they_show(site):
    pages = sorted(p.name for p in site.glob("*.html"))
    assert pages == ["index.html", "machine-AMD-EPYC-2-cores-on-vm.html", "machines.html"]
    index = (site / "index.html").read_text()
    assert "6 runs on 1 machines" in index and 'href="machine-AMD-EPYC-2-cores-on-vm.html"' in index
    machine = (site / "machine-AMD-EPYC-2-cores-on-vm.html").read_text()
    for said in ("Latest findings", "Every series over time", "Steps", "Runs", "20261004-030000-synth"):
        assert said in machine, said
    assert re.search(r"<td>\+(19|20|21)\.\d%", machine)  # the planted 20% step, in the steps table
    assert "No shape was measured on two machines" in (site / "machines.html").read_text()
    assert list(site.glob("series-*.png")) and list(site.glob("series-*.csv"))


def test_every_link_and_image_resolves_to_a_file(site):
    seen_runs = 0
    for page in site.glob("*.html"):
        found = refs(page)
        assert bool(found.images) == page.name.startswith("machine-"), page.name  # a graph per machine page
        for ref in found.links + found.images:
            parts = urlsplit(ref)
            assert not parts.scheme and not parts.netloc, ref  # relative: opens from disk and any host
            target = (site / unquote(parts.path)).resolve()
            assert target.is_file(), (page.name, ref)
            if target.parent == site.resolve():
                continue
            seen_runs += 1  # a run's page: the run folder's own (these runs have no report)
            assert target.name == "meta.json" and (target.parent / "rows.jsonl").is_file(), ref
        assert all((site / src).suffix == ".png" for src in found.images)
    assert seen_runs >= 6


def test_a_run_links_to_its_published_report(tmp_path):
    run = tmp_path / "results" / "reference" / "r1"
    run.mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    assert dashboard.report_of(run) == run / "meta.json"
    report = tmp_path / "reports" / "reference" / "r1"
    report.mkdir(parents=True)
    (report / "README.md").write_text("# r1\n")
    assert dashboard.report_of(run) == report / "README.md"
    (report / "report.html").write_text("<html></html>")
    assert dashboard.report_of(run) == report / "report.html"
    link = dashboard.run_link("r1", str(run), tmp_path / "reports" / "reference" / "history")
    assert link.href == "../r1/report.html" and link.relative


def _one_run(tmp_path, store) -> None:
    run = run_series(BASE, tmp_path / "runs", [1.0])[0]
    run_cli("history", "add", str(run), "--store", str(store), check=True)


@pytest.mark.parametrize("case", ["empty store", "corrupt store", "out is a file", "no store"])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, case):
    store, out = tmp_path / "h.sqlite", tmp_path / "site"
    if case == "empty store":
        _one_run(tmp_path, store)
        import sqlite3

        with sqlite3.connect(store) as con:
            con.execute("DELETE FROM cells")
            con.execute("DELETE FROM runs")
        con.close()
    elif case == "corrupt store":
        store.write_bytes(b"garbage" * 50)
    elif case == "out is a file":
        _one_run(tmp_path, store)
        out.write_text("not a folder")
    p = run_cli("history", "publish", "--store", str(store), "--out", str(out))
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("attnbench: error: "), p.stderr
    assert out.is_file() if case == "out is a file" else not out.exists()


def _browser():
    """playwright's sync API and an installed chromium, else skip."""
    sync_api = pytest.importorskip("playwright.sync_api")
    try:
        pw = sync_api.sync_playwright().start()
    except Exception as exc:  # noqa: BLE001 (no driver: skip with its reason)
        pytest.skip(f"playwright cannot start: {exc}")
    try:
        return pw, pw.chromium.launch()
    except Exception as exc:  # noqa: BLE001 (the browser download is not installed: skip with its reason)
        pw.stop()
        pytest.skip(f"no chromium for playwright: {str(exc).splitlines()[0]}")


def test_a_headless_browser_opens_every_page_and_its_graphs(site):
    pw, browser = _browser()
    try:
        page = browser.new_page()
        page.goto((site / "index.html").as_uri())
        hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
        assert hrefs and all(h.endswith(".html") for h in hrefs)
        for href in hrefs:
            page.goto((site / "index.html").as_uri())
            page.click(f"a[href='{href}']")
            page.wait_for_load_state("load")
            assert page.url == (site / href).as_uri()
            assert page.title().startswith("attnbench history")
            widths = page.eval_on_selector_all("img", "els => els.map(e => e.complete && e.naturalWidth)")
            assert all(w and w > 0 for w in widths), (href, widths)
            assert bool(widths) == href.startswith("machine-"), href
    finally:
        browser.close()
        pw.stop()


def test_the_committed_dashboard_links_resolve():
    """reports/reference/history (the project's own runs, published): every link and image is a file."""
    site = Path(__file__).resolve().parents[2] / "reports" / "reference" / "history"
    pages = list(site.glob("*.html"))
    assert (site / "index.html") in pages and (site / "machines.html") in pages
    for page in pages:
        found = refs(page)
        for ref in found.links + found.images:
            assert (site / unquote(urlsplit(ref).path)).resolve().is_file(), (page.name, ref)


@pytest.mark.parametrize(
    ("href", "relative", "linked"),
    [
        ("../run/report.html", True, True),
        ("../run/report.html", False, False),
        ("javascript:alert(1)", True, False),
        ("/etc/passwd", True, False),
        ("../run/", True, False),
        ("../.hidden/x.html", True, False),
    ],
)
def test_only_a_relative_link_made_as_one_leaves_the_folder(href, relative, linked):
    from attnbench.reports.page import Link, Page, Para, to_html

    page = Page("t", [Para((Link("run", href, relative=relative),))])
    assert (f'href="{href}"' in to_html(page, Path("."))) is linked
