"""`attnbench history publish`: the static site's pages, that the site is self-contained (copied alone to
another folder, every link and image in every page, the runs' copied reports included, resolves to a file
inside it), that publishing again is idempotent and drops the copies of runs gone from the store, bad input in
one line with nothing written, and (where playwright and its chromium are installed) the pages opened over
file:// in a real headless browser."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pandas as pd
import pytest
from conftest import DATA, run_cli
from synthetic import part_of, run_series, stop_before_first_row, two_sweeps

from attnbench.reports import dashboard, site_findings

BASE = DATA / "runs" / "cpu-small"

pytest.importorskip("ruptures")


class _Refs(HTMLParser):
    """Every <a href> and <img src> of a page, and every other href, src or data attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.others: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag == "img" and a.get("src"):
            self.images.append(a["src"])
        else:
            self.others += [v for k, v in attrs if k in ("href", "src", "data") and v]


def refs(page: Path) -> _Refs:
    parser = _Refs()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def part(tmp_path_factory) -> Path:
    """Two variants of one group of BASE (synthetic.part_of): the runs the pages are published from. What a
    page says and links is the same for them as for the whole run's ten variants in two groups, whose
    series figures and report cost several times as much to draw (a publish of six runs 2.9 CPU-s, of six
    of these 0.4)."""
    return part_of(BASE, tmp_path_factory.mktemp("part") / "base")


@pytest.fixture(scope="module")
def published(tmp_path_factory, part):
    """A store of 6 runs with a 20% step after the third, laid out as the project publishes reports: the runs
    in results/hist/, run 0's report (`attnbench report`: report.html, README.md, figures) in reports/hist/,
    run 1's the same report without its report.html (so its README.md and the figures it shows are linked),
    the other four with none; published into site/."""
    tmp = tmp_path_factory.mktemp("publish")
    store = str(tmp / "h.sqlite")
    runs = run_series(part, tmp / "results" / "hist", [1.0] * 3 + [1.2] * 3)
    reports = [tmp / "reports" / "hist" / r.name for r in runs]
    run_cli("report", str(runs[0]), "--out", str(reports[0]), check=True)
    shutil.copytree(reports[0], reports[1])
    (reports[1] / "report.html").unlink()
    run_cli("history", "add", *map(str, runs), "--store", store, check=True)
    p = run_cli("history", "publish", "--store", store, "--out", str(tmp / "site"), check=True)
    assert p.stdout == "" and p.stderr.startswith("published 3 pages into "), p.stderr
    return {"site": tmp / "site", "store": store, "runs": runs, "reports": reports}


@pytest.fixture(scope="module")
def site(published):
    return published["site"]


def files_of(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def assert_self_contained(site: Path) -> int:
    """Every page of `site` (its own and the runs' copied report.html pages): each relative href, src and
    data resolves to a file inside `site`, and none is a URL to another host or an absolute path; each
    copied README.md's figures and files are in the copy beside it. Returns how many references it checked."""
    root, checked = site.resolve(), 0
    for page in site.rglob("*.html"):
        found = refs(page)
        for ref in found.links + found.images + found.others:
            parts = urlsplit(ref)
            if parts.scheme == "data" and ref in found.images:
                continue  # a report's figure, embedded
            assert not parts.scheme and not parts.netloc and not parts.path.startswith("/"), (page, ref)
            target = (page.parent / unquote(parts.path)).resolve()
            assert target.is_relative_to(root), (page, ref)  # no '..' above the site's root
            assert target.is_file(), (page, ref)
            checked += 1
    for readme in site.glob(f"{dashboard.RUNS}/*/README.md"):
        for ref in dashboard.references(readme):
            target = (readme.parent / unquote(urlsplit(ref).path)).resolve()
            assert target.is_relative_to(readme.parent.resolve()) and target.is_file(), (readme, ref)
            checked += 1
    return checked


def test_the_pages_are_written_and_name_what_they_show(site):
    pages = sorted(p.name for p in site.glob("*.html"))
    assert pages == ["index.html", "machine-AMD-EPYC-2-cores-on-vm.html", "machines.html"]
    index = (site / "index.html").read_text()
    assert "6 runs on 1 machine," in index and 'href="machine-AMD-EPYC-2-cores-on-vm.html"' in index
    machine = (site / "machine-AMD-EPYC-2-cores-on-vm.html").read_text()
    for said in ("Latest findings", "Every series over time", "Steps", "Runs", "20261004-030000-synth"):
        assert said in machine, said
    assert re.search(r"<td>\+(19|20|21)\.\d%", machine)  # the planted 20% step, in the steps table
    assert "No shape was measured on two machines" in (site / "machines.html").read_text()
    assert list(site.glob("series-*.png")) and list(site.glob("series-*.csv"))


def test_every_link_and_image_resolves_to_a_file_in_the_site(published):
    site, runs = published["site"], published["runs"]
    linked: dict[str, set[str]] = {}
    for page in site.glob("*.html"):
        found = refs(page)
        assert bool(found.images) == page.name.startswith("machine-"), page.name  # a graph per machine page
        for ref in found.links + found.images:
            parts = urlsplit(ref)
            assert not parts.scheme and not parts.netloc, ref  # relative: opens from disk and any host
            target = (site / unquote(parts.path)).resolve()
            assert target.is_file() and target.is_relative_to(site.resolve()), (page.name, ref)
            if target.parent != site.resolve():  # a run's report: its copy in runs/<run>/
                assert target.parent.parent == (site / dashboard.RUNS).resolve(), ref
                linked.setdefault(target.parent.name, set()).add(target.name)
        assert all((site / src).suffix == ".png" for src in found.images)
    # run 0 links its report.html, run 1 its README.md; the other four are named, not linked
    assert sorted(linked.values(), key=sorted) == [{"README.md"}, {"report.html"}], linked
    copies = sorted(p.name for p in (site / dashboard.RUNS).iterdir() if p.name != dashboard.SITE_MARK)
    assert sorted(linked) == copies and (site / dashboard.RUNS / dashboard.SITE_MARK).is_file()
    machine = (site / "machine-AMD-EPYC-2-cores-on-vm.html").read_text()
    for run in runs[2:]:
        assert f"{_run_id(run)} (no report)" in machine, run
    for run in runs[:2]:
        assert f"{_run_id(run)} (no report)" not in machine, run


def _run_id(run: Path) -> str:
    import json

    return json.loads((run / "meta.json").read_text())["run_id"]


def test_the_site_copied_alone_keeps_every_link_and_figure(published, tmp_path):
    """The site folder on its own (a static host, a CI artifact): nothing it links lies beside it."""
    alone = tmp_path / "elsewhere" / "site"
    shutil.copytree(published["site"], alone)
    assert assert_self_contained(alone) > 20
    copies = sorted((alone / dashboard.RUNS).iterdir())
    html = next(c for c in copies if (c / "report.html").is_file())
    md = next(c for c in copies if (c / "README.md").is_file() and not (c / "report.html").exists())
    # figures embedded: nothing else to copy but the fits.csv its method paragraph links and the CSV each
    # figure's caption links
    names = sorted(f.name for f in html.iterdir())
    assert "fits.csv" in names and "report.html" in names and any(n.startswith("time-") for n in names)
    assert all(n.endswith(".csv") for n in names if n != "report.html"), names
    # the README's figures (PNG, SVG and CSV each) are in the copy, and nothing it does not reference is
    source = published["reports"][1]
    wanted = {"README.md"} | {r for r in dashboard.references(source / "README.md") if (source / r).is_file()}
    assert {f.name for f in md.iterdir()} == wanted
    assert any(n.endswith(".png") for n in wanted) and any(n.endswith(".csv") for n in wanted)
    for name in wanted:
        assert (md / name).read_bytes() == (source / name).read_bytes(), name


def test_publishing_again_is_idempotent_and_drops_runs_gone_from_the_store(published, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(published["site"], site)
    before = files_of(site)
    run_cli("history", "publish", "--store", published["store"], "--out", str(site), check=True)
    assert files_of(site) == before  # over an existing site: the same files, byte for byte
    # a store without run 0: its copy goes, run 1's stays; nothing out of runs/ or beside the site is touched
    (tmp_path / "beside.txt").write_text("not the site's")
    (site / "notes.txt").write_text("the user's own")
    store = str(tmp_path / "fewer.sqlite")
    run_cli("history", "add", *map(str, published["runs"][1:]), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(site), check=True)
    copies = [p.name for p in (site / dashboard.RUNS).iterdir() if p.name != dashboard.SITE_MARK]
    assert len(copies) == 1 and (site / dashboard.RUNS / copies[0] / "README.md").is_file(), copies
    assert (tmp_path / "beside.txt").read_text() == "not the site's"
    assert (site / "notes.txt").read_text() == "the user's own"
    assert_self_contained(site)


def test_an_interrupted_publish_leaves_the_site_as_it_was(published, tmp_path, monkeypatch):
    site = tmp_path / "site"
    shutil.copytree(published["site"], site)
    before = files_of(site)
    store = str(tmp_path / "fewer.sqlite")
    run_cli("history", "add", *map(str, published["runs"][1:]), "--store", store, check=True)

    def interrupted(*_args, **_kw):
        raise KeyboardInterrupt  # Ctrl-C at the last page: runs/ and the other pages already rewritten

    monkeypatch.setattr(dashboard, "cross_page", interrupted)
    p = run_cli("history", "publish", "--store", store, "--out", str(site))
    assert p.returncode == 130
    assert p.stderr.strip() == f"interrupted: the site was not written; {str(site)!r} is as it was"
    assert files_of(site) == before and sorted(x.name for x in tmp_path.iterdir()) == ["fewer.sqlite", "site"]


def test_a_run_links_to_its_published_report(tmp_path):
    run = tmp_path / "results" / "reference" / "r1"
    run.mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    assert dashboard.report_of(run) is None  # a run's own data is not a report: named, not linked
    (run / "README.md").write_text("# r1, by hand\n")
    assert dashboard.report_of(run) == run / "README.md"
    report = tmp_path / "reports" / "reference" / "r1"
    report.mkdir(parents=True)
    (report / "README.md").write_text("# r1\n")
    assert dashboard.report_of(run) == report / "README.md"
    (report / "report.html").write_text("<html></html>")
    assert dashboard.report_of(run) == report / "report.html"
    reports = {str(run): "runs/r1-0123abcd/report.html"}
    (link,) = dashboard.run_cell("r1", str(run), reports)
    assert link.href == "runs/r1-0123abcd/report.html" and link.relative
    assert dashboard.run_cell("r2", str(tmp_path / "r2"), reports) == ("r2 (no report)",)


def test_a_users_own_runs_link_the_reports_attnbench_report_wrote(tmp_path, part, monkeypatch):
    """A user's runs in runs/ (not the project's results/ layout): the report `attnbench report RUN` writes
    by default (reports/out/<run id>, from the same folder) and one written into the run's own report/
    folder are linked, and so is one of another name under reports/out (`--out reports/out/mine`, as the
    README writes it: found by its title); a run with none, or only in a report of several runs, is named,
    not linked. The runs are two variants of one group of the base run (their report takes 3.5 CPU-s, the
    whole base run's 8; what is linked is the point here, and the published fixture's report of the whole
    base run is checked link by link and figure by figure)."""
    runs = run_series(part, tmp_path / "runs", [1.0, 1.0, 1.0, 1.0])
    run_cli("report", str(runs[0].relative_to(tmp_path)), cwd=tmp_path, check=True)
    default = tmp_path / dashboard.DEFAULT_REPORTS / _run_id(runs[0])
    assert (default / "report.html").is_file()  # where `attnbench report` put it, with no --out
    shutil.copytree(default, runs[1] / dashboard.OWN_REPORT)  # as `--out runs/run-001/report` writes it
    for name, ids in (("mine", [runs[2]]), ("both", [runs[3], runs[0]])):  # their titles, as render writes
        (tmp_path / dashboard.DEFAULT_REPORTS / name).mkdir()
        title = "# attnbench report: " + ", ".join(_run_id(r).replace("_", "\\_") for r in ids)
        (tmp_path / dashboard.DEFAULT_REPORTS / name / "README.md").write_text(title + "\n\n## Findings\n")
    run_cli("history", "add", "runs", cwd=tmp_path, check=True)
    run_cli("history", "publish", "--out", "site", cwd=tmp_path, check=True)
    machine = next((tmp_path / "site").glob("machine-*.html")).read_text()
    for run in runs[:3]:
        assert f"{_run_id(run)} (no report)" not in machine, run
    assert f"{_run_id(runs[3])} (no report)" in machine
    copies = [c for c in (tmp_path / "site" / dashboard.RUNS).iterdir() if c.name != dashboard.SITE_MARK]
    assert sorted((c / "report.html").is_file() for c in copies) == [False, True, True]
    monkeypatch.chdir(tmp_path)  # reports/out is read from the folder publish runs in
    assert dashboard.report_of(runs[2], _run_id(runs[2])) == dashboard.DEFAULT_REPORTS / "mine" / "README.md"
    assert dashboard.report_of(runs[1], _run_id(runs[1])) == runs[1] / "report" / "report.html"


def test_a_report_drawn_before_its_run_was_resumed_is_not_linked_and_publish_says_how_to_render_it(
    tmp_path, part
):
    """A run stopped after 3 cells, its report rendered (`Unfinished: 3 of 8`), then resumed and added again:
    publish found that report by its title and copied it as the run's, with nothing said. The report records
    the rows it was drawn from (rendered_from.RECORD), so publish leaves it unlinked and says in one line
    which run's report is stale with the command that renders it again; after that command it is linked."""
    import shlex

    from attnbench.reports import rendered_from

    (run,) = run_series(part, tmp_path / "runs", [1.0])
    full = (run / "rows.jsonl").read_text()
    planned = _stop_early(run, 3)
    rel = str(run.relative_to(tmp_path))
    run_cli("report", rel, cwd=tmp_path, check=True)
    folder = tmp_path / dashboard.DEFAULT_REPORTS / _run_id(run)
    assert f"Unfinished: 3 of {planned} planned cells measured" in (folder / "README.md").read_text()
    assert (folder / rendered_from.RECORD).is_file()
    (run / "rows.jsonl").write_text(full)  # `attnbench run --resume` measured the rest
    run_cli("history", "add", "runs", cwd=tmp_path, check=True)
    p = run_cli("history", "publish", "--out", "site", cwd=tmp_path, check=True)
    published, said = p.stderr.splitlines()
    command = f"attnbench report {rel} --out {folder.relative_to(tmp_path)}"
    assert published.startswith("published 3 pages"), published
    assert said.startswith("not linked: a report was drawn from other rows than the run holds now"), said
    assert said.endswith(f"render again and publish: {_run_id(run)} (`{command}`)"), said
    machine = next((tmp_path / "site").glob("machine-*.html")).read_text()
    assert f"{_run_id(run)} (no report)" in machine
    assert [c.name for c in (tmp_path / "site" / dashboard.RUNS).iterdir()] == [dashboard.SITE_MARK]
    run_cli(*shlex.split(command)[1:], cwd=tmp_path, check=True)
    p = run_cli("history", "publish", "--out", "site", cwd=tmp_path, check=True)
    assert len(p.stderr.splitlines()) == 1, p.stderr
    machine = next((tmp_path / "site").glob("machine-*.html")).read_text()
    assert f"{_run_id(run)} (no report)" not in machine
    (copy,) = [c for c in (tmp_path / "site" / dashboard.RUNS).iterdir() if c.name != dashboard.SITE_MARK]
    assert "Unfinished" not in (copy / "report.html").read_text()


def test_a_copy_takes_only_the_files_inside_the_report_folder(tmp_path):
    """What a report names out of its folder, as a URL, hidden, or missing, is never copied; a page it links
    brings its own files."""
    (tmp_path / "secret.txt").write_text("outside")
    folder = tmp_path / "rep"
    (folder / "sub").mkdir(parents=True)
    for name in ("fig.png", "fig.csv", ".hidden", "sub/more.md", "sub/deep.svg", "unlinked.png"):
        (folder / name).write_text(name)
    (folder / "sub" / "more.md").write_text("![deep](deep.svg) [up](../fig.csv) [out](../../secret.txt)")
    (folder / "out.png").symlink_to(tmp_path / "secret.txt")
    (folder / "README.md").write_text(
        "![fig](fig.png) [data](fig.csv#x) [more](sub/more.md) [h](.hidden) [gone](gone.png) [o](out.png) "
        "[up](../secret.txt) [abs](/etc/passwd) [web](https://example.com/a.png) "
        '<img src="fig.png"> <a href="file:///etc/passwd">x</a>'
    )
    got = [str(p) for p in dashboard.report_files(folder / "README.md")]
    assert got == ["README.md", "fig.csv", "fig.png", "sub/deep.svg", "sub/more.md"]


def test_a_copied_report_keeps_no_link_out_of_its_folder(tmp_path):
    """A report in the project's checkout links docs/method.md relatively (reports.render.method_href); its
    copy in the site has nothing there, so the link becomes its text; a link up inside the folder stays."""
    run = tmp_path / "results" / "ref" / "run"
    run.mkdir(parents=True)
    folder = tmp_path / "reports" / "ref" / "run"
    (folder / "sub").mkdir(parents=True)
    (folder / "fits.csv").write_text("x\n")
    (folder / "sub" / "more.md").write_text("[up](../fits.csv) [docs](../../../../docs/method.md)")
    (folder / "report.html").write_text(
        '<p>In full: <a href="../../../docs/method.md">docs/method.md</a>; <a href="fits.csv">fits.csv</a>; '
        '<a href="sub/more.md">more</a></p>'
    )
    runs = pd.DataFrame([{"run_key": "k", "path": str(run), "run_id": "run"}])
    (tmp_path / "site").mkdir()
    links, _ = dashboard.copy_reports(runs, tmp_path / "site")
    copy = tmp_path / "site" / links[str(run)]
    assert "In full: docs/method.md;" in copy.read_text() and '<a href="fits.csv">' in copy.read_text()
    assert (copy.parent / "sub" / "more.md").read_text() == "[up](../fits.csv) docs"
    assert_self_contained(tmp_path / "site")


def test_the_site_names_of_runs_are_safe_and_their_own():
    a = dashboard.site_name("20261001-030000-synth", "20261001-030000-synth@2026-10-01T03:00:00+00:00")
    b = dashboard.site_name("20261001-030000-synth", "20261001-030000-synth@2026-10-02T03:00:00+00:00")
    assert a != b and a.startswith("20261001-030000-synth-") and re.fullmatch(r"[A-Za-z0-9._-]+", a)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", dashboard.site_name("../../etc/x y\u202e", "k"))
    assert not dashboard.site_name("..", "k").startswith(".")


def _machines(store) -> list[str]:
    from attnbench.results import history

    return [str(m) for m in history.frame(store)["machine"].unique()]


def _one_run(tmp_path, store) -> None:
    run = run_series(BASE, tmp_path / "runs", [1.0])[0]
    run_cli("history", "add", str(run), "--store", str(store), check=True)


@pytest.mark.parametrize(
    "case",
    ["empty store", "corrupt store", "out is a file", "no store", "runs is a link", "runs is a file",
     "the user's runs/", "out is a run", "out holds the runs and store", "out holds a run set",
     "the user's index.html", "the user's machines.html", "the user's machine page", "out named as a page",
     "a bad threshold", "a threshold twice"],
)  # fmt: skip
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, case):
    store, out = tmp_path / "h.sqlite", tmp_path / "site"
    twice = ["--fail-on-step", "5%", "--fail-on-step", "10%"]
    extra = {"a bad threshold": ["--fail-on-step", "five"], "a threshold twice": twice}.get(case, [])
    if extra:
        _one_run(tmp_path, store)
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
    elif case == "out named as a page":  # `--out site.html` made a folder site.html; `report` refuses it
        _one_run(tmp_path, store)
        out = tmp_path / "site.html"
    elif case.startswith("runs is"):
        # publish would empty runs/ of what it did not copy: through a link, that would be out of the site
        _one_run(tmp_path, store)
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "keep.txt").write_text("not the site's")
        out.mkdir()
        if case == "runs is a link":
            (out / dashboard.RUNS).symlink_to(tmp_path / "elsewhere")
        else:
            (out / dashboard.RUNS).write_text("a file")
    elif case == "the user's runs/":  # `--out .` in a project: runs/ holds the user's runs and the store
        out.mkdir()
        store = out / dashboard.RUNS / "history.sqlite"
        _one_run(out, store)
        held = files_of(out)
    elif case == "out is a run":
        _one_run(tmp_path, store)
        out = run_series(BASE, tmp_path / "more", [1.0])[0]
        held = files_of(out)
    elif case == "out holds the runs and store":  # `--out runs`: the pages would land among the runs
        out = tmp_path / "runs"
        store = out / "history.sqlite"
        _one_run(tmp_path, store)
        held = files_of(out)
    elif case == "out holds a run set":  # a run set (`attnbench interleave`) in a folder of --out
        _one_run(tmp_path, store)
        run_series(BASE, tmp_path / "site" / "set", [1.0, 1.0])
        held = files_of(out)
    elif case.startswith("the user's") and case.endswith(("html", "page")):  # a folder of the user's pages
        _one_run(tmp_path, store)
        out.mkdir()
        name = {"index.html": dashboard.INDEX, "machines.html": dashboard.CROSS}.get(case.split()[-1])
        name = name or next(iter(dashboard.machine_pages(_machines(store)).values()))
        (out / name).write_text("<html><head><title>team portal</title></head><h1>team portal</h1></html>")
        held = files_of(out)
    p = run_cli("history", "publish", "--store", str(store), "--out", str(out), *extra)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    said = "attnbench history publish: error: " if case == "a threshold twice" else "attnbench: error: "
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith(said), p.stderr
    if case.startswith("the user's") or case.startswith("out holds") or case == "out is a run":
        assert files_of(out) == held  # every byte of every run, and the store, as they were
        said = {
            "the user's index.html": "holds a page index.html that attnbench did not write",
            "the user's machines.html": "holds a page machines.html that attnbench did not write",
            "the user's machine page": "holds a page machine-",
            "the user's runs/": "did not make (it holds history.sqlite,",
            "out is a run": "is a run dir",
            "out holds the runs and store": "holds the history store",
            "out holds a run set": "holds run directories (set/run-000, set/run-001)",
        }[case]
        assert said in p.stderr, p.stderr
    elif case.startswith("runs is"):
        assert [f.name for f in out.iterdir()] == [dashboard.RUNS]
        assert (tmp_path / "elsewhere" / "keep.txt").is_file()
    else:
        assert out.is_file() if case == "out is a file" else not out.exists()
    if case == "a bad threshold":  # check's grammar and words (results.thresholds.parse_step)
        assert "bad --fail-on-step 'five': expected a percentage of 0 or more, such as 5%" in p.stderr
    if case == "out named as a page":
        assert f"--out {out} names a file, but --out is the folder the site's pages go into" in p.stderr
        assert f"such as --out '{tmp_path / 'site'}'" in p.stderr, p.stderr


def _browser():
    """playwright's sync API and a chromium: the system's (Debian's package, which .ci/run installs) where
    there is one, else playwright's own download; skip, with the reason, where neither starts."""
    sync_api = pytest.importorskip("playwright.sync_api")
    try:
        pw = sync_api.sync_playwright().start()
    except Exception as exc:  # noqa: BLE001 (no driver: skip with its reason)
        pytest.skip(f"playwright cannot start: {exc}")
    system = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        return pw, pw.chromium.launch(executable_path=system)
    except Exception as exc:  # noqa: BLE001 (no browser installed: skip with its reason)
        pw.stop()
        pytest.skip(f"no chromium for playwright: {str(exc).splitlines()[0]}")


def _hrefs(page) -> list[str]:
    return page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")


def _drawn(page) -> bool:
    """The page has images, and the browser decoded every one of them."""
    widths = page.eval_on_selector_all("img", "els => els.map(e => e.complete && e.naturalWidth)")
    assert all(w and w > 0 for w in widths), (page.url, widths)
    return bool(widths)


def test_a_headless_browser_opens_every_page_and_its_graphs(site):
    pw, browser = _browser()
    try:
        page = browser.new_page()
        page.goto((site / "index.html").as_uri())
        hrefs = _hrefs(page)
        assert hrefs and all(h.endswith(".html") for h in hrefs)
        for href in hrefs:
            page.goto((site / "index.html").as_uri())
            page.click(f"a[href='{href}']")
            page.wait_for_load_state("load")
            assert page.url == (site / href).as_uri()
            assert page.title().startswith("attnbench history")
            assert _drawn(page) == href.startswith("machine-"), href
            runs = [h for h in _hrefs(page) if h.startswith(f"{dashboard.RUNS}/")]
            assert bool(runs) == href.startswith("machine-"), href
            if runs:  # a point's link: the run's copied report opens, its figures drawn
                page.click(f"a[href='{runs[0]}']")
                page.wait_for_load_state("load")
                assert page.url == (site / runs[0]).as_uri() and _drawn(page), runs[0]
    finally:
        browser.close()
        pw.stop()


def test_the_committed_dashboard_is_self_contained(tmp_path):
    """reports/reference/history (the project's own runs, published), copied alone to another folder: every
    link and image of every page resolves to a file inside it."""
    committed = Path(__file__).resolve().parents[2] / "reports" / "reference" / "history"
    site = tmp_path / "history"
    shutil.copytree(committed, site)
    pages = list(site.glob("*.html"))
    assert (site / "index.html") in pages and (site / "machines.html") in pages
    assert list(site.glob(f"{dashboard.RUNS}/*/report.html"))
    assert assert_self_contained(site) > 0


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


def test_an_approximation_is_named_where_a_page_says_who_is_fastest():
    """A cell of a variant declared approximate (its bound in the store's `approximate`) is named so in the
    machine page's findings and in the cross-machine tables: its time is for another answer."""
    import pandas as pd

    rows = [
        {"cell_id": f"{v}|cpu|float32|n{n}", "variant": v, "seq_len": n, "created": "t", "run_id": "r",
         "path": "runs/r", "time_ms_median": t, "approximate": b}
        for v, b, f in (("performer", 0.9, 0.5), ("sdpa", None, 1.0))
        for n, t in ((512, f * 1.0), (1024, f * 2.0))
    ]  # fmt: skip
    (table,) = site_findings.findings(pd.DataFrame(rows), {})
    assert {r[2] for r in table.rows} == {"performer (approximate, rel_err <= 0.9)"}
    assert site_findings.named(pd.Series(rows[-1])) == "sdpa"


def test_the_latest_findings_name_the_variants_the_ranking_cannot_tell_apart():
    """At N = 512 sdpa is 1% behind chunked (a tie by the ranking's rule), at N = 1024 10% behind: the
    machine page says 'chunked ≈ sdpa' for the first and chunked alone for the second, as a report would."""
    import pandas as pd

    rows = [
        {"cell_id": f"{v}|cpu|float32|n{n}", "variant": v, "seq_len": n, "created": "t", "run_id": "r",
         "path": "runs/gone", "time_ms_median": t}
        for v, n, t in (("chunked", 512, 1.0), ("sdpa", 512, 1.01), ("chunked", 1024, 2), ("sdpa", 1024, 2.2))
    ]  # fmt: skip
    table, *_ = site_findings.findings(pd.DataFrame(rows), {})
    assert [(r[1], r[2]) for r in table.rows] == [("512", "chunked ≈ sdpa"), ("1024", "chunked")]


def test_the_latest_findings_of_a_busy_run_say_the_machine_was_busy(tmp_path):
    """The latest run measured while the machine ran at half its speed for a fifth of its cells: the
    machine page marks that run where its findings are and says why in the report's own sentence
    (reports.busy.machine_busy); the quiet run before it is not marked."""
    import json

    runs = run_series(BASE, tmp_path / "runs", [1.0, 1.0])  # the busy rule counts its cells
    rows_file = runs[1] / "rows.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    for i, row in enumerate(rows):  # every cell probed; one in five at half the machine's usual speed
        row["speed_tflops"] = 0.5 if i % 5 == 0 else 1.0
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "h.sqlite")
    run_cli("history", "add", *map(str, runs), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    machine = next((tmp_path / "site").glob("machine-*.html")).read_text()
    assert f"{_run_id(runs[1])} (no report) (machine busy)" in machine
    assert "The machine was busy while this ran" in machine
    assert f"{_run_id(runs[0])} (no report) (machine busy)" not in machine


def _stop_early(run: Path, keep: int) -> int:
    """Make `run` one stopped after its first `keep` rows, as Ctrl-C leaves it: its meta.json plans every
    cell (planned_cells), its rows.jsonl holds the first `keep`. How many it planned."""
    import json

    lines = [line for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    meta = json.loads((run / "meta.json").read_text())
    meta["planned_cells"] = len(lines)
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "rows.jsonl").write_text("".join(line + "\n" for line in lines[:keep]))
    return len(lines)


def _section(page: str, heading: str) -> str:
    """A page's text from `heading` to the next heading, its tags dropped."""
    return re.sub(r"<[^>]+>", " ", page.split(f"<h2>{heading}</h2>", 1)[1].split("<h2>", 1)[0])


def test_the_latest_findings_pass_over_an_unfinished_run_and_the_runs_table_marks_it(tmp_path, part):
    """The latest run stopped after 3 of its cells (Ctrl-C): the machine page took its findings from it, as
    if the variants it had not reached were not there, and no table said it was unfinished. Its findings come
    from the latest run that finished, the unfinished run is named below them with how far it got, and the
    runs table marks it; with no finished run of the shape, its findings are the unfinished run's, marked."""
    runs = run_series(part, tmp_path / "runs", [1.0, 1.0])
    planned = _stop_early(runs[1], 3)
    store = str(tmp_path / "h.sqlite")
    run_cli("history", "add", *map(str, runs), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    page = next((tmp_path / "site").glob("machine-*.html")).read_text(encoding="utf-8")
    said = f"unfinished: 3 of {planned} planned cells measured"
    found = _section(page, "Latest findings")
    assert f"{_run_id(runs[0])} (no report)" in found and f"{_run_id(runs[1])} (no report)" not in found
    assert f"Run {_run_id(runs[1])} is later but unfinished (3 of {planned} planned cells measured)" in found
    table = _section(page, "Runs")
    assert table.count(said) == 1 and re.search(rf"{_run_id(runs[1])}.*?\b3 \({said}\)", table, re.S)
    alone = str(tmp_path / "alone.sqlite")
    run_cli("history", "add", str(runs[1]), "--store", alone, check=True)
    run_cli("history", "publish", "--store", alone, "--out", str(tmp_path / "alone"), check=True)
    page = next((tmp_path / "alone").glob("machine-*.html")).read_text(encoding="utf-8")
    assert f"{_run_id(runs[1])} (no report) ({said})" in _section(page, "Latest findings")


def test_who_leads_names_no_winner_the_ranking_would_call_a_tie():
    """On one machine two variants under 1% apart (420 against 417 TFLOP/s), on the other 1.5x apart: the
    first is a tie (under judge.TOLERANCE, the report's ranking's floor; the runs' folders are gone, so the
    store's medians decide), the second has one leader."""
    import pandas as pd

    rows = [
        {"machine": m, "shape": "b1|h8|dk128|fwd", "seq": 1024, "cell_id": f"{v}|cuda|bfloat16|n1024|{m}",
         "variant": v, "path": f"/gone/{m}", "time_ms_median": t, "tflops": 420 / t, "cal_matmul_tflops": 700}
        for m, times in (("H100", {"sdpa_cudnn": 1.0, "flex": 1.007}), ("A100", {"sdpa": 1.0, "naive": 1.5}))
        for v, t in times.items()
    ]  # fmt: skip
    table = dashboard.lead_table(pd.DataFrame(rows), ["A100", "H100"], dashboard.RunRows())
    ((_, _, a100, h100),) = table.rows
    assert h100.startswith("sdpa_cudnn 420") and h100.endswith(", tied with flex"), h100
    assert a100.startswith("sdpa 420") and "tied" not in a100, a100


def test_the_site_never_ranks_a_cell_its_runs_report_calls_suspect(tmp_path, part):
    """The latest run's fastest cell at its longest N is too fast to believe (100 TFLOP/s, above 1.25x the
    calibrated ceiling): the run's report ranks the other variant alone there and says why; the machine page
    called the suspect one fastest (trial S, M2). It says what the report says, in its words."""
    import json

    runs = run_series(part, tmp_path / "runs", [1.0, 1.0])
    rows_file = runs[-1] / "rows.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    ok = [r for r in rows if r["status"] == "ok"]
    longest = max(r["seq_len"] for r in ok)
    fast = min((r for r in ok if r["seq_len"] == longest), key=lambda r: r["time_ms_median"])
    fast["tflops"] = 100.0
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = tmp_path / "report"
    run_cli("report", str(runs[-1]), "--out", str(report), check=True)
    said = re.search(r"is the only variant ranked: (.+?\)\))\.", (report / "README.md").read_text())
    assert said and said[1].startswith(f"{fast['variant']} is suspect there, never ranked"), said
    store = str(tmp_path / "h.sqlite")
    run_cli("history", "add", *map(str, runs), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    (page,) = (tmp_path / "site").glob("machine-*.html")
    found = _text(page.read_text(encoding="utf-8").split("<h2>Latest findings</h2>", 1)[1].split("<h2>")[0])
    other = next(v for v in ("naive", "chunked") if v != fast["variant"])
    assert f"{longest} {other} is the only variant ranked: {said[1]}" in found, found


def test_who_leads_ranks_no_suspect_cell_and_says_so_in_the_reports_words():
    """machines.html gave N 256 to 'sdpa 0.0987 (312.6%†)', a cell its run's report left out as suspect:
    the suspect cell is not ranked, the table says so as the report does, and its TFLOP/s is marked."""
    import pandas as pd

    why = "0.0987 TFLOP/s is above 1.25x the calibrated matmul ceiling (0.0316)"
    rows = [
        {"machine": m, "shape": "b1|h2|dk64|fwd", "seq": 256, "cell_id": f"{v}|cpu|float32|n256|{m}",
         "variant": v, "path": f"/gone/{m}", "time_ms_median": t, "tflops": 0.0098 / t,
         "cal_matmul_tflops": 0.0316, "suspect": s, "suspect_reason": why if s else None}
        for m, cells in (("box2", {"sdpa": (0.1, True), "mine": (1.0, False)}),
                         ("vm", {"sdpa": (0.1, False), "mine": (1.0, False)}),
                         ("old", {"sdpa": (0.1, None), "mine": (1.0, None)}))
        for v, (t, s) in cells.items()
    ]  # fmt: skip
    df = pd.DataFrame(rows).astype({"suspect": "boolean"})
    table = dashboard.lead_table(df, ["box2", "old", "vm"], dashboard.RunRows())
    ((_, _, box2, old, vm),) = table.rows
    assert box2.startswith("mine 0.0098 (31.0%) is the only variant ranked: sdpa is suspect there, never ")
    assert box2.endswith(f"ranked (sdpa: {why})"), box2
    assert vm.startswith("sdpa ") and "suspect" not in vm and old.startswith("sdpa "), (vm, old)
    shown = dashboard.variant_table(df.assign(cal_note=""), ["box2", "old", "vm"])
    sdpa = next(r for r in shown.rows if r[2] == "sdpa")
    assert sdpa[3].endswith(", suspect") and "suspect" not in sdpa[5], sdpa
    both = df.assign(suspect=True)  # every variant suspect: nobody leads
    ((_, _, box2, *_),) = dashboard.lead_table(both, ["box2", "old", "vm"], dashboard.RunRows()).rows
    assert box2 == f"none ranked: sdpa and mine are suspect there, never ranked (sdpa: {why})", box2


def test_who_leads_ties_no_variant_the_ranking_puts_behind_one_told_apart(tmp_path):
    """flex fastest, team_varlen 2.4× behind on each of 3 visits (told apart), sdpa_loop 4.7× behind by
    median with one visit as fast as flex's: the report ranks flex › team_varlen ≈ sdpa_loop, so the page
    names flex alone, never 'tied with sdpa_loop' (reports.tables.front, as the report's fastest cell)."""
    import synthetic

    from attnbench.results import load

    def visited(variant, medians):
        visits = [synthetic.samples(m, n=4, spread=0.01, seed=i) for i, m in enumerate(medians)]
        flat = [s for v in visits for s in v]
        return synthetic.cell(variant, 256, sample_ms=flat, visit_medians_ms=medians, visit_samples=[4] * 3)

    times = {"flex": [1.0, 1.02, 0.98], "team_varlen": [2.4, 2.5, 2.3], "sdpa_loop": [1.0, 4.7, 6.0]}
    run = synthetic.write_run(tmp_path / "run", [visited(v, m) for v, m in times.items()])
    common = load(run)[["cell_id", "variant", "seq_len", "time_ms_median", "tflops"]].assign(
        machine="cpu",
        shape="b1|h8|dk64|fwd",
        seq=256,
        path=str(run),
        cal_matmul_tflops=1.0,
        created="t",
        run_id="r",
    )
    table = dashboard.lead_table(common, ["cpu"], dashboard.RunRows())
    ((_, _, cell),) = table.rows
    assert cell.startswith("flex ") and "tied" not in cell, cell
    table, *_ = site_findings.findings(common, {}, dashboard.RunRows())
    assert [r[2] for r in table.rows] == ["flex"], table.rows


def test_who_leads_ties_as_the_report_ranks_a_run(published):
    """With the runs' folders there, the page's front at each shape (the leader and those tied with it) is
    the report's (reports.tables.best_variant: results.judge.separated on the cells' own samples)."""
    from attnbench.reports.tables import best_variant
    from attnbench.results import history, load

    df = history.frame(published["store"])
    ok = df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)]
    common = dashboard.latest_cells(ok)
    machine = str(common["machine"].iloc[0])
    table = dashboard.lead_table(common, [machine], dashboard.RunRows())
    fronts = sorted(
        sorted([cell.split(" ")[0], *(cell.split(", tied with ")[1].split(", ") if "tied" in cell else [])])
        for *_, cell in table.rows
    )
    best = best_variant(load(published["runs"][-1]))
    report = sorted(sorted([b, *str(t).split()]) for b, t in zip(best["best"], best["tied"], strict=True))
    assert fronts == report and any(len(f) > 1 for f in fronts) and any(len(f) == 1 for f in fronts)


def test_a_machine_page_lists_the_series_broken_in_their_latest_run(tmp_path, part):
    import json

    runs = run_series(part, tmp_path / "runs", [1.0] * 3)
    rows = [json.loads(line) for line in (runs[-1] / "rows.jsonl").read_text().splitlines() if line.strip()]
    cell = next(r for r in rows if r["status"] == "ok" and r["variant"] == "naive")
    cell["status"] = "crashed"
    (runs[-1] / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "h.sqlite")
    run_cli("history", "add", str(tmp_path / "runs"), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    (page,) = (tmp_path / "site").glob("machine-*.html")
    html = page.read_text(encoding="utf-8")
    assert "Broken in their latest run" in html and html.count(cell["cell_id"]) >= 1
    assert "crashed" in html.split("Broken in their latest run", 1)[1].split("Every series", 1)[0]


def _text(html: str) -> str:
    """A page's text, its tags dropped, its spaces and entities as read."""
    import html as html_

    return html_.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def _gate_column(page: str) -> dict[str, str]:
    """The machine page's steps table: each series' mark (before it, as `check`'s line has it) and the gate's
    word on its latest step (the last column), as 'MARK: word'."""
    table = page.split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
        cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        *mark, cell = cells[0].split(" ")
        assert not cells[-1] or cells[-1].split(":")[0] == (mark or ["passes"])[0], cells
        out[cell] = out.get(cell) or cells[-1]
    return out


def test_the_site_says_what_the_gate_fails_on_at_its_threshold(tmp_path, part):
    """naive 10% slower from the 6th of 9 runs, and one chunked cell wrong in the latest: `check
    --fail-on-step 5%` fails on naive's 4 steps (FAIL) and the broken cell (BROKEN). The index said only
    'No series is broken...' before the cell broke, then 'fails on 1 series' after: green, or a wrong count.
    Published with the gate's threshold, the index and the machine page say what `check` says, each kind
    counted as `check` counts it, and the steps table marks each FAIL; without one, they name the steps the
    judge finds significant slowdowns after Holm, and the series failed at any threshold (BROKEN)."""
    import json

    runs = run_series(part, tmp_path / "runs", [1.0] * 5 + [1.1] * 4, only={"naive"})
    rows = [json.loads(line) for line in (runs[-1] / "rows.jsonl").read_text().splitlines() if line.strip()]
    broke = next(r for r in rows if r["status"] == "ok" and r["variant"] == "chunked")
    broke["status"] = "wrong"
    (runs[-1] / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "h.sqlite")
    run_cli("history", "add", str(tmp_path / "runs"), "--store", store, check=True)
    p = run_cli("history", "check", "--store", store, "--fail-on-step", "5%")
    failed = sorted(line.split(" on ")[0].removeprefix("FAIL ") for line in p.stdout.splitlines()
                    if line.startswith("FAIL "))  # fmt: skip
    assert p.returncode == 1 and len(failed) == 4 and f"BROKEN {broke['cell_id']} on " in p.stdout, p.stdout
    site = tmp_path / "gated"
    q = run_cli(
        "history", "publish", "--store", store, "--out", str(site), "--fail-on-step", "5%", check=True
    )
    assert q.stderr.startswith("published "), q.stderr
    index = _text((site / "index.html").read_text(encoding="utf-8"))
    said = (
        "attnbench history check --fail-on-step 5% fails: 4 series' latest step slower by more than 5% "
        "beyond its noise (FAIL) and 1 series broken in its latest run (BROKEN)."
    )
    assert said in index and "fails on " not in index, index
    assert re.search(r"FAIL \(over 5%\) broken missing AMD EPYC \(2 cores\) on vm 9 \d+ 4 4 1 0", index), (
        index
    )
    (page,) = site.glob("machine-*.html")
    html = page.read_text(encoding="utf-8")
    assert "fails on this machine: 4 series' latest step slower by more than 5%" in _text(html)
    marks = _gate_column(html)
    assert sorted(c for c, m in marks.items() if m.startswith("FAIL: the judge")) == failed, marks
    # the same store published without a threshold: the slowdowns the judge finds significant, by name
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "plain"), check=True)
    index = _text((tmp_path / "plain" / "index.html").read_text(encoding="utf-8"))
    assert "attnbench history check --fail-on-step fails at any threshold: 1 series broken in its " in index
    assert "4 series' latest step are slowdowns the judge finds significant after Holm's adjustment" in index
    assert "fails on " not in index and failed[0] in index, index
    (page,) = (tmp_path / "plain").glob("machine-*.html")
    marks = _gate_column(page.read_text(encoding="utf-8"))
    assert sorted(c for c, m in marks.items() if m.startswith("slower: the judge")) == failed, marks
    # a threshold above the step: the gate fails on the broken cell alone, and the pages say so
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "high"), "--fail-on-step", "15",
            check=True)  # fmt: skip
    index = _text((tmp_path / "high" / "index.html").read_text(encoding="utf-8"))
    said = "attnbench history check --fail-on-step 15% fails: 1 series broken in its latest run (BROKEN)."
    assert said in index, index
    (page,) = (tmp_path / "high").glob("machine-*.html")
    marks = _gate_column(page.read_text(encoding="utf-8"))
    assert all(marks[c] == "passes: not over 15% slower" for c in failed), marks


@pytest.mark.parametrize("lost", [0, 3])
def test_the_site_shows_the_missing_series_the_gate_fails_on(tmp_path, part, lost):
    """The site said '0 steps found' and nothing else of a store whose gate failed on MISSING series: the
    index counts the series `history check` fails on, and the machine page names each MISSING one with the
    runs of its sweep linked; two whole sweeps interleaved in one store are green on both."""
    store, gone = two_sweeps(tmp_path, lost, part)
    p = run_cli("history", "check", "--store", store, "--fail-on-step", "5%")
    said = sorted(line.split(" on ")[0].removeprefix("MISSING ") for line in p.stdout.splitlines())
    assert p.returncode == (1 if lost else 0) and [c for c in said if c in gone] == sorted(gone), p.stdout
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    (page,) = (tmp_path / "site").glob("machine-*.html")
    html = page.read_text(encoding="utf-8")
    cells = re.findall(r"<tr>(.*?)</tr>", index.split("Machines", 1)[1], re.S)
    counts = [re.findall(r"<td>(\d+)</td>", row)[-2:] for row in cells if "machine-" in row]
    assert counts == [["0", str(len(gone))]], cells  # broken, missing
    if not lost:
        assert "No series is broken in its latest run or missing from the latest run of its sweep" in index
        assert "Missing from the latest run of their sweep" not in html
        return
    assert f"fails at any threshold: {len(gone)} series missing from the latest run of their sweep" in index
    section = html.split("Missing from the latest run of their sweep", 1)[1].split("Every series", 1)[0]
    assert all(cell in section for cell in gone) and section.count("<tr>") == len(gone) + 1
    assert "20261004-030000-synth" in section and "20261003-030000-synth" in section
    assert "-other" not in section  # the other sweep's runs, between them, are not what it is compared with


def test_the_site_shows_a_night_stopped_before_its_first_row_as_missing(tmp_path, part):
    """A night stopped before its first row (no cells) was in no page, and the site was green where the
    gate fails: the machine page names it as the latest run of its sweep, lacking each series ok the night
    before."""
    runs = run_series(part, tmp_path / "runs", [1.0] * 3)
    stop_before_first_row(runs[-1])
    store = str(tmp_path / "h.sqlite")
    run_cli("history", "add", str(tmp_path / "runs"), "--store", store, check=True)
    p = run_cli("history", "check", "--store", store, "--fail-on-step", "5%")
    gone = sorted(line.split(" on ")[0].removeprefix("MISSING ") for line in p.stdout.splitlines())
    assert p.returncode == 1 and gone, p.stdout
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert f"fails at any threshold: {len(gone)} series missing from the latest run of their sweep" in index
    (page,) = (tmp_path / "site").glob("machine-*.html")
    section = page.read_text(encoding="utf-8").split("Missing from the latest run of their sweep", 1)[1]
    section = section.split("Every series", 1)[0]
    assert all(cell in section for cell in gone) and section.count("<tr>") == len(gone) + 1
    assert "20261003-030000-synth (no report)" in section and "20261002-030000-synth" in section


def test_the_run_axis_of_a_series_figure_has_whole_runs_only(tmp_path, monkeypatch):
    """Two runs drew ticks at 1.00, 1.25, ... 2.00 on the run axis: a run's number is whole."""
    import pandas as pd

    drawn = []
    monkeypatch.setattr(dashboard, "save", lambda fig, *a, **k: drawn.append(fig) or [])
    group = pd.DataFrame(
        [
            {"variant": "sdpa", "cell_id": f"sdpa|cpu|float32|n{n}", "seq_len": n, "created": f"t{k}",
             "run_id": f"r{k}", "run_key": f"r{k}", "time_ms_median": float(n * (1 + k / 10))}
            for k in (1, 2)
            for n in (256, 512)
        ]
    )  # fmt: skip
    dashboard.series_figure("m", group, [], {"r1": 1, "r2": 2}, tmp_path, "cpu float32 fwd")
    (fig,) = drawn
    ticks = [t for ax in fig.axes if ax.get_xlabel() == "run" for t in ax.get_xticks()]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_publishing_another_store_removes_the_pages_and_figures_it_no_longer_writes(tmp_path, part):
    """A site published from a store of one machine, then from a store of another: the first machine's page
    and series figures (listed in the site's manifest) go; the user's own files, one named like a figure
    among them, stay; every page left links only to files that are there."""
    from attnbench.reports import site_files

    def hosted(host):
        return lambda i, meta: meta["fingerprint"].update(hostname=host)

    site = tmp_path / "site"
    for name, host in (("a", "box1"), ("b", "box2")):
        runs = run_series(part, tmp_path / name, [1.0, 1.0], edit=hosted(host))
        store = str(tmp_path / f"{name}.sqlite")
        run_cli("history", "add", *map(str, runs), "--store", store, check=True)
        run_cli("history", "publish", "--store", store, "--out", str(site), check=True)
        if name == "a":
            first = {p.name for p in site.iterdir() if p.is_file()}
            (site / "notes.txt").write_text("the user's own")
            (site / "series-mine.png").write_bytes(b"the user's own figure")
    now = {p.name for p in site.iterdir() if p.is_file()}
    assert any("box1" in n for n in first) and any(n.startswith("series-") and "box1" in n for n in first)
    assert not any("box1" in n for n in now), sorted(now)
    assert any(n.startswith("machine-") and "box2" in n for n in now)
    assert (site / "notes.txt").read_text() == "the user's own"
    assert (site / "series-mine.png").read_bytes() == b"the user's own figure"
    assert now - {"notes.txt", "series-mine.png"} == set(site_files.listed(site)) | {site_files.MANIFEST}
    assert_self_contained(site)


def test_the_manifest_removes_only_publishs_own_files(tmp_path):
    """A manifest edited to name a user's file, a path out of the site, a link or a page attnbench did not
    write: none of them is removed; a figure it listed that the new site leaves out is."""
    import os

    from attnbench.reports import site_files

    site = tmp_path / "site"
    site.mkdir()
    (tmp_path / "outside.png").write_bytes(b"x")
    for name in ("notes.txt", "series-old.png", "machine-mine.html", "series-kept.csv"):
        (site / name).write_text("<title>my own page</title>" if name.endswith(".html") else "x")
    os.symlink(tmp_path / "outside.png", site / "series-link.png")
    names = ["notes.txt", "../outside.png", "series-link.png", "machine-mine.html", "series-old.png"]
    (site / site_files.MANIFEST).write_text("\n".join(names) + "\n")
    assert site_files.replace(site, ["series-kept.csv"]) == ["series-old.png"]
    assert sorted(p.name for p in site.iterdir()) == sorted(
        [site_files.MANIFEST, "notes.txt", "series-link.png", "machine-mine.html", "series-kept.csv"]
    )
    assert (tmp_path / "outside.png").exists() and site_files.listed(site) == ["series-kept.csv"]


def test_the_latest_findings_give_each_exponent_as_the_runs_report_does():
    """The machine page's exponent of a run is the report's (reports.fit.time_fit: the same weighted points
    from the run's time_fit_from), and one that says nothing is not given, as the report's findings do not
    give it: a plain fit of the store's medians gave 2.00 [1.83, 2.16] where the report gives 1.98 [1.90,
    2.06], and 1.98 [1.32, 2.63] where the report says time's growth not measured (CI too wide to say).
    (Two CPU references: with sdpa not ranked beside sdpa_flash, the first has no fastest whose fit says
    nothing.)"""
    from conftest import ROOT

    from attnbench.reports.fit import combo_key, fit_index, scaling_table
    from attnbench.reports.growth import exponent_said
    from attnbench.results import history, load, load_meta

    seen = set()
    for name in ("cpu-epyc-2core", "cpu-epyc-2core-4k-pages"):
        run = ROOT / "results" / "reference" / name
        df = history.frame_of([run])
        ok = df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)]
        table, *_ = site_findings.findings(ok, {}, dashboard.RunRows())
        rows = load(run)
        fits = fit_index(scaling_table(rows, load_meta(run)))
        shapes = rows["cell_id"].map(site_findings.shape_of)
        for shape, _, fastest, _, exponent, _ in table.rows:
            variant = fastest.split(" ≈ ")[0].split("; ")[0]
            cell = rows[(shapes == shape) & (rows["variant"] == variant)].iloc[0]
            assert exponent == exponent_said(fits[combo_key(cell, variant)][0]), (shape, variant)
            seen.add(exponent == "growth not measured (CI too wide to say)")
    assert seen == {True, False}  # both kinds checked


def test_an_exponent_of_a_run_whose_folder_is_gone_says_when_it_says_nothing():
    """From the store's medians alone (the run's folder gone): two N is a line with no CI, and three N that
    scatter give a CI too wide to say: neither gives an exponent, as a report's findings give none ('Time's
    growth not measured ... (two N)'); an outside trial found '-0.04 (no CI): two N' on the machine page."""
    import pandas as pd

    def rows(times):
        return [
            {"cell_id": f"sdpa|cpu|float32|n{n}", "variant": "sdpa", "seq_len": n, "created": "t",
             "run_id": "r", "path": "runs/gone", "time_ms_median": t}
            for n, t in times.items()
        ]  # fmt: skip

    (two,) = site_findings.findings(pd.DataFrame(rows({512: 1.0, 1024: 0.8})), {})
    assert two.rows[0][4] == "growth not measured (two N)", two.rows
    (three,) = site_findings.findings(pd.DataFrame(rows({256: 1.0, 512: 0.5, 1024: 3.0})), {})
    assert {r[4] for r in three.rows} == {"growth not measured (CI too wide to say)"}, three.rows


def test_a_percent_of_peak_against_a_smaller_calibration_is_marked_and_each_calibration_shown(tmp_path, part):
    """Two machines, one calibrated on a 512 matmul instead of its usual 2048 (a smaller matmul runs below
    the peak, so its % reads high): machines.html shows each machine's calibration with its matmul N, and
    marks that machine's % and says why; the other machine's % is not marked."""
    import html as html_

    from attnbench.reports import site_calibration

    def edited(host, n=None):
        def edit(i, meta):
            meta["fingerprint"].update(hostname=host)
            if n:  # and an hour later: another run than box1's
                meta["calibration"]["cpu"]["matmul_n_by_dtype"] = {"float32": n}
                meta["created"] = meta["created"].replace("T03:", "T04:")

        return edit

    store = str(tmp_path / "h.sqlite")
    for name, edit in (("a", edited("box1")), ("b", edited("box2", 512))):
        runs = run_series(part, tmp_path / name, [1.0], edit=edit)
        run_cli("history", "add", *map(str, runs), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    page = html_.unescape((tmp_path / "site" / "machines.html").read_text(encoding="utf-8"))
    every = page.split("Every variant at the shared shapes", 1)[1].split("The calibrations", 1)[0]
    cals = page.split("The calibrations", 1)[1]
    rows = re.findall(r"<tr>(.*?)</tr>", every, re.S)[1:]
    cells = [re.findall(r"<td>(.*?)</td>", r, re.S) for r in rows]  # shape, N, variant, box1, box2
    assert cells and all(c[4].endswith(f"%{site_calibration.MARK})") for c in cells if c[4] != "-"), cells
    assert not any(site_calibration.MARK in c[3] for c in cells), cells
    box1, box2 = (
        re.search(rf"<tr><td>[^<]*{b}[^<]*</td>(.*?)</tr>", cals, re.S)[1] for b in ("box1", "box2")
    )
    assert "<td>2048</td>" in box1 and site_calibration.MARK not in box1, box1
    assert "<td>512</td>" in box2 and "below the N = 2048" in box2, box2


def test_a_calibration_smaller_than_another_machines_is_noted_and_an_unknown_one_said():
    """Both at their device's usual size, but one machine's usual size larger (4096 against 2048): the
    smaller is noted; a run whose meta.json cannot be read has an unknown size, and says so."""
    import pandas as pd

    from attnbench.reports import site_calibration

    metas = {
        "/r/a": {"calibration": {"cpu": {"matmul_n": 2048}}},
        "/r/b": {"calibration": {"cpu": {"matmul_n": 4096}}},
    }
    common = pd.DataFrame(
        [
            {"machine": m, "run_id": p[-1], "path": p, "where_key": "?:cpu", "device": "cpu",
             "dtype": "float32", "cal_matmul_tflops": 1.0}
            for m, p in (("A", "/r/a"), ("B", "/r/b"), ("C", "/gone"))
        ]
    )  # fmt: skip
    table, notes = site_calibration.calibrations(common, lambda path: metas.get(path, {}))
    assert notes[("/r/b", "?:cpu", "float32")] == ""
    assert "another machine here on N = 4096" in notes[("/r/a", "?:cpu", "float32")]
    assert "unknown" in notes[("/gone", "?:cpu", "float32")]
    assert [r[4] for r in table.rows] == ["2048", "4096", "?"]
