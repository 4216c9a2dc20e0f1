"""The README and the docs stay true: their code examples run through the real CLI and API, their links point
at files, and the README stays short (the rest lives in docs/)."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from conftest import ROOT, TEST_CALIBRATE_MS, as_a_fresh_process, run_cli

README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKER = "<!-- variant-example"
README_MAX_LINES = 200  # a newcomer's five minutes (issue 26); the reference material is in docs/


def example(marker: str = MARKER) -> str:
    """The python block right after a marker, in whichever docs page holds it (exactly one may)."""
    pages = [p for p in DOCS if marker in p.read_text()]
    assert len(pages) == 1, f"{marker} should be in exactly one docs page, found {[p.name for p in pages]}"
    text = pages[0].read_text()
    after = text[text.index(marker) :]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match, f"no python block after {marker}"
    return match.group(1)


def variant_example() -> str:
    return example(MARKER)


@pytest.mark.slow
def test_variant_example_is_short_and_passes_the_gate(tmp_path):
    code = variant_example()
    assert len(code.strip().splitlines()) <= 16  # the README and docs promise a ~15-line example
    f = tmp_path / "my_attention.py"
    f.write_text(code)
    run = tmp_path / "run"
    run_cli(
        "run", "--variant-file", str(f), "--variants", "einsum", "--seq-len", "32,48", "--heads", "2",
        "--causal", "both", "--padding", "0,0.25", "--warmup-ms", "1", "--budget-ms", "5",
        "--out", str(run), "-q", check=True,
    )  # fmt: skip
    rows = json.loads(run_cli("export", str(run), "--format", "json", check=True).stdout)
    status = {(r["seq_len"], r["causal"], r["padding"]): r["status"] for r in rows}
    assert len(status) == 8
    # the example declares padding=False: those cells are refused with the reason, the others pass
    assert all(s == "ok" for (_, _, pad), s in status.items() if pad == 0), status
    assert all(s == "unsupported" for (_, _, pad), s in status.items() if pad > 0), status


def test_readme_is_short():
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material into docs/"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_point_at_files(page):
    """Relative links (and images) resolve from the page's own folder: README.md into docs/, docs/ pages to
    each other and out to results/reference, reports/reference and ARCHITECTURE.md."""
    for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_readme_links_into_every_docs_page():
    linked = {Path(t).name for t in re.findall(r"\]\(docs/([^)#\s]+)", README)}
    unlinked = sorted({p.name for p in DOCS} - linked)
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_docs_site_lists_every_page():
    """mkdocs.yml's nav names every docs page (strict mode says so too, but only when the site is built)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "strict: true" in nav
    missing = [p.name for p in DOCS if f" {p.name}" not in nav]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


@pytest.mark.slow
def test_python_api_example_runs_and_writes_what_it_says(tmp_path):
    """The block as a script of its own: a fresh namespace, run from an empty folder (in this process, which
    has torch and pandas imported already; the workers it starts are real processes all the same)."""
    # the tests' runs take no calibration (conftest.TEST_CALIBRATE_MS): the default 1000 ms was 4 s of it
    source = example("<!-- api-example")
    assert "budget_ms=20," in source
    source = source.replace("budget_ms=20,", f"budget_ms=20, calibrate_ms={TEST_CALIBRATE_MS},")
    code = compile(source, "docs/api.md (api-example)", "exec")
    with as_a_fresh_process(tmp_path), redirect_stdout(io.StringIO()) as out:
        exec(code, {"__name__": "__main__"})
    assert "{'ok': 6}" in out.getvalue()  # the count the docs' comment shows
    assert (tmp_path / "runs" / "nb" / "rows.jsonl").is_file()
    assert (tmp_path / "reports" / "out" / "nb" / "report.html").is_file()
    assert "chunked" in out.getvalue() and "naive" in out.getvalue()  # the pivot table's columns


def test_a_presets_cell_count_in_the_docs_is_its_sweeps():
    """A preset's cells as docs/presets-and-workloads.md counts them ('its 48 cells') are the cells its sweep
    makes, as `attnbench run --preset NAME --dry-run` counts them: the varlen row said 57, the rows of its
    reference run, 9 of whose 48 cells were measured twice."""
    from attnbench.harness.sweep.sweeps import build_sweep

    text = (ROOT / "docs" / "presets-and-workloads.md").read_text()
    said = re.findall(r"^\| `(\w+)` \|.*?\bits (\d+) cells\b", text, re.M)
    assert said, "no preset row counts its cells"
    for name, count in said:
        sweep = build_sweep(preset=name)
        assert len(sweep.cells(list(sweep.variants))) == int(count), (name, count)


def test_the_readmes_sample_cell_lines_are_what_the_tool_prints_for_their_rows():
    """The README's sample lines and its transcript's are harness.run.progress.cell_line of the sample run's
    rows (a pipe gets every number), so that a change of the line's format shows here first; and 'noisy'
    stands beside an IQR over 10% only (trial U: '0.363 ms ±5% noisy' showed half an IQR of 10.7%)."""
    from attnbench.harness.run.progress import cell_line

    sample = ROOT / "results" / "reference" / "readme-sample-epyc-2core"
    rows = [json.loads(line) for line in (sample / "rows.jsonl").read_text().splitlines()]
    printed = {cell_line(row) for row in rows}
    transcript = (sample / "transcript.txt").read_text()
    for text, least in ((README, 2), (transcript, len(rows))):
        lines = [line for line in text.splitlines() if re.match(r"ok +\S+ +cpu f32 ", line)]
        assert len(lines) >= least and set(lines) <= printed, set(lines) - printed
        for line in lines:
            iqr = float(re.search(r" ms IQR (\d+(?:\.\d+)?)%", line).group(1))
            assert (iqr > 10) == (" noisy " in line), line
