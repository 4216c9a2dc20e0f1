"""attnbench in Jupyter: examples/quickstart.ipynb executed by a real kernel (nbclient), and the displays it
shows (Run, Report, run.plot(), run.table(), the notebook progress) checked on their own."""

from __future__ import annotations

import base64
import os
import re

import pytest

from tests.conftest import ROOT, TEST_CALIBRATE_MS

NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def _needs_ipython() -> None:
    """Skip where IPython is absent: attnbench needs it only in a notebook, which has it (the dev extra's
    ipykernel brings it, so CI runs these tests)."""
    pytest.importorskip("IPython", reason="IPython is not installed: attnbench's notebook displays need it")


def _outputs(cell) -> list[dict]:
    return [dict(o) for o in cell.get("outputs", [])]


def _cell(nb, source_start: str):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start)]
    return cell


def explained_out_of_place(cells) -> list[str]:
    """The calls a markdown cell explains (the first `name(` it names in backticks) that the code cell right
    after it does not make: an explanation placed before someone else's code."""
    wrong = []
    for i, cell in enumerate(cells[:-1]):
        words = cell["source"] if cell["cell_type"] == "markdown" else ""
        named = re.search(r"`([A-Za-z_][\w.]*)\(", words)
        after = cells[i + 1]
        if named and not (after["cell_type"] == "code" and f"{named[1]}(" in after["source"]):
            wrong.append(f"{named[1]} explained in cell {i}, not called by cell {i + 1}")
    return wrong


def test_each_explanation_is_right_before_its_code():
    """The markdown that explains a call (`attnbench.bench`, `attnbench.profile`, `run.table()`) comes right
    before the cell that makes it, so that a reader reads each call's words before its output."""
    import json

    cells = [
        {**c, "source": "".join(c["source"])}
        for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    ]
    assert explained_out_of_place(cells) == []
    calls = [c["source"].split("(")[0] for c in cells if c["cell_type"] == "code"]
    assert calls.index("attnbench.bench") < calls.index("attnbench.profile")  # as the first cell says


def test_quickstart_notebook_runs_on_cpu_and_shows_the_run_its_rows_figures_and_report(tmp_path, monkeypatch):
    """The notebook as a user opens it: its own folder is the working directory (here tmp_path, so its runs/
    and the report's links land there), attnbench this checkout (PYTHONPATH)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")

    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.delenv("ATTNBENCH_RUNS", raising=False)  # the notebook's default: runs/ beside it
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the tests' runs calibrate with TEST_CALIBRATE_MS of sampling, as conftest.run_cli's do (2 s less), and
    # so does the bench (its preset's 300 ms)
    bench_cell = _cell(nb, "attnbench.bench(my_attn")
    assert 'dtype="float32",' in bench_cell.source
    bench_cell.source = bench_cell.source.replace(
        'dtype="float32",', f'dtype="float32", calibrate_ms={TEST_CALIBRATE_MS},'
    )
    run_cell = _cell(nb, "run = attnbench.run(")
    assert "budget_ms=20," in run_cell.source
    run_cell.source = run_cell.source.replace(
        "budget_ms=20,", f"budget_ms=20, calibrate_ms={TEST_CALIBRATE_MS},"
    )
    # the kernel is stopped at once after its last cell: a graceful shutdown took 2.6 s there whenever the
    # kernel had started a multiprocessing forkserver (attnbench's or a bare one alike), and nothing below
    # reads what a kernel does as it ends
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
        shutdown_kernel="immediate",
    ).execute()  # fmt: skip

    everything = [o for c in nb.cells if c.cell_type == "code" for o in _outputs(c)]
    errors = [o for o in everything if o["output_type"] == "error"]
    assert not errors, errors
    stderr = "".join(o["text"] for o in everything if o["output_type"] == "stream" and o["name"] == "stderr")
    assert "ipywidgets" not in stderr and "Warning" not in stderr, stderr

    # the run: one progress output, redrawn in place to its end, and the Run's HTML
    (run_dir,) = [
        p for p in (tmp_path / "runs").iterdir() if not p.name.endswith(("-report", "-bench", "-profile"))
    ]
    ran = _outputs(_cell(nb, "run = attnbench.run("))
    progress = [o for o in ran if o["output_type"] == "display_data"]
    assert len(progress) == 1, progress  # not a line per cell
    shown = progress[0]["data"]["text/plain"]
    assert "cells " in shown and "6/6" in shown and "ok 6" in shown, shown
    assert "text/html" not in progress[0]["data"]
    (result,) = [o for o in ran if o["output_type"] == "execute_result"]
    page = result["data"]["text/html"]
    assert f"attnbench run runs/{run_dir.name}" in page and "6 cells: ok 6" in page
    assert "Findings" in page and "fastest" in page and "<table>" in page
    assert "my_attn" in page  # the notebook's own function, measured by the workers

    # bench's answer: its few lines, as HTML and as text
    (answer,) = [
        o for o in _outputs(_cell(nb, "attnbench.bench(my_attn")) if o["output_type"] == "execute_result"
    ]
    lines = answer["data"]["text/plain"].splitlines()
    assert lines[0].startswith("my_attn against sdpa: 12 cells of my_attn") and len(lines) <= 12, lines
    assert lines[1].startswith("correct in 6 of 6 cells gated against float64"), lines
    # and at N = 100, N_q 25 of N_k 100 among them: a causal mask built n x n from q alone raised there
    assert not any(line.startswith(("ERROR", "WRONG")) for line in lines), lines
    assert any(line.startswith("float32: ") and "than sdpa (no mask)" in line for line in lines), lines
    assert answer["data"]["text/html"].startswith("<pre")

    # the profile: its pages linked from the notebook's folder, and the top operators
    (prof,) = [
        o for o in _outputs(_cell(nb, "attnbench.profile(my_attn")) if o["output_type"] == "execute_result"
    ]
    shown = prof["data"]["text/html"]
    assert "Profile: my_attn" in shown and 'href="runs/' in shown and "aten::" in shown, shown
    assert len(list((tmp_path / "runs").glob("*-profile/index.html"))) == 1

    # the rows: rel_err of a float32 cell (about 1e-7) as 3.0e-07, not 0.0, read in its own column (a
    # TFLOP/s of 5.1e-05 is written so too, by its four significant digits)
    (table,) = [o for o in _outputs(_cell(nb, "run.table()")) if o["output_type"] == "execute_result"]
    page = table["data"]["text/html"]
    headers = re.findall(r'class="col_heading level0 (col\d+)" >([^<]*)</th>', page)
    (col,) = [c for c, name in headers if name == "rel_err"]
    assert len(re.findall(rf' {col}" >\d\.\de-(0[5-9]|1\d)</td>', page)) == 6

    # the figures: time and memory as PNG images
    images = [o for o in _outputs(_cell(nb, "run.plot()")) if "image/png" in o.get("data", {})]
    assert len(images) == 2
    assert all(base64.b64decode(o["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n" for o in images)

    # the report: written beside the run, linked from the notebook's folder, its first finding in its repr
    (rep,) = [o for o in _outputs(_cell(nb, "report = run.report(")) if o["output_type"] == "execute_result"]
    rel = f"runs/{run_dir.name}-report"
    assert f'<a href="{rel}/README.md">README.md</a>' in rep["data"]["text/html"]
    assert f'<a href="{rel}/report.html">report.html</a>' in rep["data"]["text/html"]
    assert (tmp_path / rel / "report.html").is_file()
    assert rep["data"]["text/plain"].startswith(f"<attnbench report {rel}: ")


# ---- the displays on their own, on a synthetic run (no kernel, no measuring) ------------------------------


def _run(tmp_path, extra_rows=()):
    from tests import synthetic

    laws = {"naive": (2.0, 2.0), "chunked": (1.5, 1.0)}  # chunked ahead, more and more as N grows
    rows = synthetic.power_law_rows(laws, [512, 1024, 2048], rel_err=3e-7)
    return synthetic.write_run(tmp_path / "run", [*rows, *extra_rows])


def test_the_findings_in_a_notebook_name_the_python_call_not_the_shell_command(tmp_path):
    """A notebook's user is in Python: the findings' `attnbench run ...` (the trust sentence's `--rounds 3`,
    a busy run's `--resume --redo-drift --out RUN`) read as the call that does the same there."""
    from attnbench.reports.notebook import run_call, run_html

    page = run_html(_run(tmp_path))  # one visit per cell: its trust sentence names --rounds 3
    assert "`attnbench.run(rounds=3)`" in page.replace("<code>", "`").replace("</code>", "`")
    assert "attnbench run --" not in page
    assert run_call(" --resume --redo-drift --out 'my runs/x'") == (
        "attnbench.run(resume=True, redo_drift=True, out='my runs/x')"
    )
    assert run_call(" --pass fwdbwd --seq-len 256..1024 --rounds 3") == (
        "attnbench.run(pass_='fwdbwd', seq_len='256..1024', rounds=3)"
    )


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
    # printed (a script, a terminal): the same numbers as text, one line per row, not '<Styler object ...>'
    text = str(styler)
    lines = text.splitlines()
    assert repr(styler) == text and "Styler object" not in text and len(lines) == len(styler.data) + 1
    assert lines[0].split() == list(styler.data.columns) and " 3.0e-07" in lines[1]
    assert re.search(r" \d+(\.\d+)? (KiB|MiB) ", lines[1])
    assert list(attnbench.table(run.load(), ["cell_id", "rel_err"]).data.columns) == ["cell_id", "rel_err"]
    with pytest.raises(ValueError, match="no column 'rel_er' in the table"):
        attnbench.table(run.load(), ["rel_er"])


def test_run_table_of_a_quantising_variant_shows_its_error_end_to_end_as_the_report_draws_it(tmp_path):
    """fp8_emulated's rel_err (3e-07, against float64 of its rounded inputs) beside naive's read as if FP8
    cost nothing: where a row has a quantisation recipe the table shows e2e_rel_err after rel_err, the
    error the report's speed-accuracy panel draws it at (from its sqnr_db); a run without one does not."""
    import attnbench
    from attnbench.reports.panels import accuracy
    from attnbench.reports.render import prepare
    from tests import synthetic

    fp8 = [synthetic.cell("fp8_emulated", n, time_ms=n / 1000, rel_err=3e-7, quant_recipe="e4m3fn:tensor",
                          quant_rel_err=0.046, sqnr_db=26.4) for n in (512, 1024, 2048)]  # fmt: skip
    run = _run(tmp_path, fp8)
    styler = attnbench.table(run)
    shown = styler.data
    assert list(shown.columns)[-2:] == ["rel_err", "e2e_rel_err"], list(shown.columns)
    mine = shown[shown["variant"] == "fp8_emulated"]
    _fig, drawn = accuracy.accuracy_figure(prepare([run]).df, "t")
    panel = float(drawn[drawn["variant"] == "fp8_emulated"]["e2e_rel_err"].iloc[0])
    assert panel == pytest.approx(10 ** (-26.4 / 20)) and (mine["e2e_rel_err"] == panel).all()
    naive = shown[shown["variant"] == "naive"]
    assert (naive["e2e_rel_err"] == naive["rel_err"]).all()  # rounding nothing: its rel_err is end to end
    assert ">4.8e-02</td>" in styler.to_html()
    assert "e2e_rel_err" not in attnbench.load(run).columns  # the frame loaded is left as it is
    assert "e2e_rel_err" not in attnbench.table(_run(tmp_path / "plain")).data.columns


def test_run_plot_returns_the_reports_time_and_memory_figures_shown_as_images(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    import attnbench

    run = attnbench.Run(_run(tmp_path))
    figs = run.plot()
    assert len(figs) == 2 and all(isinstance(f, Figure) for f in figs)
    assert [f.get_suptitle().split(" · ")[0] for f in figs] == ["Time per call", "Peak memory"]
    assert repr(figs).startswith("<2 figures: Time per call")
    assert len(run.plot("status")) == 1 and len(run.plot(["time", "speedup"])) == 2
    with pytest.raises(
        ValueError,
        match="unknown plot kind 'speed'; known: time, memory, throughput, speedup, status, varlen, decode",
    ):
        run.plot("time,speed")
    _needs_ipython()  # shown in a notebook: through IPython's display
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    figs._ipython_display_()
    assert [bytes(img.data[:4]) for img in shown] == [b"\x89PNG", b"\x89PNG"]


def test_run_plot_draws_the_workload_panels_figures_with_the_reports_code(tmp_path):
    """'varlen', 'decode' and 'speed-accuracy' draw what attnbench report draws (the panel's own `drawn`),
    once per group; a run without such cells draws none of that kind."""
    import attnbench
    from attnbench.reports.panels import decode
    from tests import synthetic

    packed = []
    for pattern in ("uniform", "bimodal"):
        for n in (128, 256):
            row = synthetic.cell(
                "naive", n, time_ms=n / 128, peak_mem_bytes=2**20, lengths=pattern, rel_err=3e-7
            )
            row.update(
                cell_id=f"{row['cell_id']}-{pattern}", executed_flops=2 * row["flops"], seq_lens=[n] * 1
            )
            packed.append(row)
    varlen_run = attnbench.Run(synthetic.write_run(tmp_path / "varlen", packed))
    (fig,) = varlen_run.plot("varlen")
    assert fig.get_suptitle().startswith("Packed variable-length batches")
    assert varlen_run.plot("decode") == []  # no decode cell in it
    decode_rows = [
        synthetic.cell(
            v, 1, seq_k=nk, causal=True, time_ms=k * nk / 256, peak_mem_bytes=2**12 * nk, rel_err=3e-7
        )
        for v, k in (("naive", 1.0), ("chunked", 0.5))
        for nk in (256, 512, 1024)
    ]
    decode_path = synthetic.write_run(tmp_path / "decode", decode_rows)
    figs = attnbench.Run(decode_path).plot("decode,speed-accuracy")
    titles = [f.get_suptitle().split(" · ")[0] for f in figs]
    assert titles == ["Decode time per call", "K/V read bandwidth", "Speed against accuracy"], titles
    # the very figure the report's panel draws: its legend's exponents
    df, metas = attnbench.load(decode_path), attnbench.results.load_meta(decode_path)
    ((_k, _g, _h, panel),) = decode.drawn(df, metas)

    def legend(f):
        return [t.get_text() for ax in f.axes if ax.get_legend() for t in ax.get_legend().get_texts()]

    assert legend(figs[0]) == legend(panel[0][2][0])


class _Handle:
    def __init__(self, shown):
        self.shown = shown

    def update(self, obj, raw):
        self.shown.append(obj["text/plain"])


def test_notebook_progress_is_one_display_redrawn_in_place(monkeypatch, tmp_path):
    _needs_ipython()
    from attnbench.harness.run import progress as progmod
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

    for i in range(12):
        p.message(f"message {i}")
    assert shown[-1].startswith("... 3 earlier messages\nmessage 2\n") and "message 11\ncells" in shown[-1]


def test_progress_defaults_to_the_notebook_display_in_a_kernel_and_to_none_elsewhere(monkeypatch):
    from attnbench.harness.run import progress as progmod

    assert not progmod.in_notebook()  # pytest: no kernel
    assert progmod.progress_for(None).enabled is False
    assert type(progmod.progress_for(True)) is progmod.Progress
    monkeypatch.setattr(progmod, "in_notebook", lambda: True)
    assert isinstance(progmod.progress_for(None), progmod.NotebookProgress)
    assert progmod.progress_for(False).enabled is False
