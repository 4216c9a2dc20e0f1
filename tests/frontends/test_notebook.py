"""attnbench in Jupyter: examples/quickstart.ipynb executed by a real kernel (nbclient), and the displays it
shows (Run, Report, run.plot(), run.table(), the notebook progress) checked on their own."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def _outputs(cell) -> list[dict]:
    return [dict(o) for o in cell.get("outputs", [])]


def _cell(nb, source_start: str):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start)]
    return cell


# ---- the displays on their own, on a synthetic run (no kernel, no measuring) ------------------------------


def _run(tmp_path, extra_rows=()):
    from tests import synthetic

    laws = {"naive": (2.0, 2.0), "chunked": (1.5, 1.0)}  # chunked ahead, more and more as N grows
    rows = synthetic.power_law_rows(laws, [512, 1024, 2048], rel_err=3e-7)
    return synthetic.write_run(tmp_path / "run", [*rows, *extra_rows])


def test_a_run_shows_as_html_with_its_counts_findings_and_fastest_variant_per_n(tmp_path):
    from attnbench import Run
    from tests import synthetic

    oom = synthetic.cell("naive", 4096, status="oom", message="<b>out of memory</b>")
    run = Run(_run(tmp_path, [oom]), {"ok": 6, "oom": 1}, interrupted=True)
    page = run._repr_html_()
    assert page.startswith('<div class="attnbench">') and "<html" not in page and "<style" not in page
    assert "7 cells: ok 6, oom 1; interrupted: finish it with attnbench.run(out=..., resume=True)" in page
    assert "<h3>Findings</h3>" in page and "time grows as N^2.00" in page
    assert (
        "<th>seq_len</th><th>best variant</th>" in page
        and "<td>2048</td><td>chunked 22.7 ms (2.83× ahead of naive" in page
    )
    assert "<b>" not in page  # data is escaped as on every page


def test_a_run_whose_directory_is_gone_shows_why_not_a_traceback(tmp_path):
    from attnbench import Run

    page = Run(tmp_path / "gone")._repr_html_()
    assert f"attnbench run {tmp_path / 'gone'}: " in page and "<p>" in page


def test_a_report_repr_is_one_line_with_its_first_finding_and_links_below_the_working_directory(
    tmp_path, monkeypatch
):
    import attnbench

    monkeypatch.chdir(tmp_path)
    report = attnbench.report(_run(tmp_path), out=tmp_path / "reports" / "nb")
    line = repr(report)
    assert "\n" not in line and line.startswith(
        f"<attnbench report {tmp_path}/reports/nb: chunked is fastest"
    )
    assert line.endswith(f"(README.md, report.html, {len(report.figures)} figures)>")
    page = report._repr_html_()
    assert '<a href="reports/nb/README.md">README.md</a> · <a href="reports/nb/report.html">' in page
    assert "<h3>Findings</h3>" in page

    monkeypatch.chdir(
        tmp_path / "run"
    )  # the report is no longer below the notebook's folder: named, not linked
    assert "<a " not in report._repr_html_() and f"{tmp_path}/reports/nb</p>" in report._repr_html_()


def test_run_table_formats_numbers_for_reading_and_leaves_the_frame_as_loaded(tmp_path):
    import attnbench

    run = attnbench.Run(_run(tmp_path))
    styler = run.table()
    html = styler.to_html()
    assert ">3.0e-07</td>" in html and ">0.0</td>" not in html  # rel_err; pandas itself shows 0.0
    assert re.search(r">\d+(\.\d+)? (KiB|MiB)</td>", html)  # peak_mem_bytes
    assert list(styler.data.columns) == [
        "variant", "seq_len", "status", "time_ms_median", "rel_iqr", "peak_mem_bytes", "tflops", "rel_err"
    ]  # fmt: skip
    assert (
        str(styler.data["rel_err"].dtype) == "Float64" and str(styler.data["peak_mem_bytes"].dtype) == "Int64"
    )
    assert float(styler.data["rel_err"].iloc[0]) == pytest.approx(3e-7)
    assert list(attnbench.table(run.load(), ["cell_id", "rel_err"]).data.columns) == ["cell_id", "rel_err"]
    with pytest.raises(ValueError, match="no column 'rel_er' in the table"):
        attnbench.table(run.load(), ["rel_er"])


def test_run_plot_returns_the_reports_time_and_memory_figures_shown_as_images(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    import attnbench

    run = attnbench.Run(_run(tmp_path))
    figs = run.plot()
    assert len(figs) == 2 and all(isinstance(f, Figure) for f in figs)
    assert [f.get_suptitle().split(" · ")[0] for f in figs] == ["Time per call", "Peak memory"]
    assert repr(figs).startswith("<2 figures: Time per call")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    figs._ipython_display_()
    assert [bytes(img.data[:4]) for img in shown] == [b"\x89PNG", b"\x89PNG"]
    assert len(run.plot("status")) == 1 and len(run.plot(["time", "speedup"])) == 2
    with pytest.raises(ValueError, match="unknown plot kind 'speed'; known: time, memory, throughput"):
        run.plot("time,speed")


class _Handle:
    def __init__(self, shown):
        self.shown = shown

    def update(self, obj, raw):
        self.shown.append(obj["text/plain"])


def test_notebook_progress_is_one_display_redrawn_in_place(monkeypatch, tmp_path):
    from attnbench.harness import progress as progmod
    from tests import synthetic

    shown: list[str] = []

    def display(obj, raw, display_id):
        assert raw and display_id is True and list(obj) == ["text/plain"]  # text: no widgets, no HTML
        shown.append(obj["text/plain"])
        return _Handle(shown)

    monkeypatch.setattr("IPython.display.display", display)
    monkeypatch.setattr(progmod.NotebookProgress, "REDRAW_S", 0.0)
    p = progmod.NotebookProgress()
    p.message("starting a worker process")
    p.start(total=3, done_before=0, run_dir=tmp_path)
    p.cell_done(synthetic.cell("naive", 64, time_ms=1.5, rel_err=3e-7))
    p.cell_done(synthetic.cell("naive", 128, status="error", message="\x1b[31mboom"))
    p.cell_done(synthetic.cell("chunked", 64, time_ms=1.0))
    p.stop()
    last = shown[-1]
    assert last.splitlines()[0] == "starting a worker process"
    assert "3/3 · elapsed 0:00 · ok 2, error 1" in last and "ETA" not in last
    assert "latest:\n  ok          chunked" in last
    assert "not ok:\n  error       naive" in last and "\\x1b[31mboom" in last  # control characters escaped
    assert "1/3" in shown[2] and "ETA" in shown[2]


def test_progress_defaults_to_the_notebook_display_in_a_kernel_and_to_none_elsewhere(monkeypatch):
    from attnbench.harness import progress as progmod

    assert not progmod.in_notebook()  # pytest: no kernel
    assert progmod.progress_for(None).enabled is False
    assert type(progmod.progress_for(True)) is progmod.Progress
    monkeypatch.setattr(progmod, "in_notebook", lambda: True)
    assert isinstance(progmod.progress_for(None), progmod.NotebookProgress)
    assert progmod.progress_for(False).enabled is False
