"""The report renderer: the committed fixture gives non-empty figures and pages; odd runs still render;
data strings are escaped; the real `attnbench report` command, including its bad-input exits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import synthetic
from conftest import run_cli

from attnbench import results
from attnbench.reports.calibration import group_notes
from attnbench.reports.render import prepare, render
from attnbench.reports.style import slug
from attnbench.results import devices

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-small"
HOSTILE_NAME = "<script>alert('x')</script>|$x$"
HOSTILE_MSG = "<img src=x onerror=alert(1)> & `code` | [link](javascript:alert(1)) $\\frac{a}{b}$"


@pytest.fixture(scope="module")
def fixture_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return render(prepare([FIXTURE]), out)


def test_fixture_renders_every_figure(fixture_report):
    kinds = {f.stem.split("-")[0] for f in fixture_report.figures}
    assert kinds == {"time", "memory", "throughput", "speedup", "status", "numerics", "weights", "speed"}
    for f in fixture_report.figures:
        png, svg, csv = (fixture_report.out_dir / name for name in (f.png, f.svg, f.csv))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert svg.read_text().lstrip().startswith("<?xml") and svg.stat().st_size > 10_000
        assert len(csv.read_text().splitlines()) >= 2  # header + data


def test_fixture_pages(fixture_report):
    md = fixture_report.readme.read_text()
    for f in fixture_report.figures:
        assert f"]({f.png})" in md
    assert "time exponent \\[95% CI\\]" in md and "N²" in md
    assert "hostname" in md and "AMD EPYC" in md
    assert "fault\\_wrong" in md and "failed the float64 gate" in md
    html = fixture_report.html.read_text()
    images = re.findall(r'<img src="([^"]*)"', html)
    assert len(images) == len(fixture_report.figures)
    assert all(src.startswith("data:image/png;base64,") for src in images)
    assert "http://" not in html and "https://" not in html  # self-contained
    assert (fixture_report.out_dir / "fits.csv").stat().st_size > 0


def test_summary_has_a_row_per_variant_and_causal(fixture_report):
    summary = fixture_report.summary
    assert summary is not None and "causal" in summary.headers
    assert len(summary.rows) == 20  # 10 variants × causal/non-causal
    naive = [r for r in summary.rows if r[0] == "naive"]
    assert all(r[summary.headers.index("largest N that fits")] == "16,384" for r in naive)


def _render(tmp_path, rows, **kw):
    run = synthetic.write_run(tmp_path / "run", rows, **kw)
    return render(prepare([run]), tmp_path / "out")


def _every_panel_rows():
    """A small run with a cell of every kind a report draws or tabulates: plain MHA series, grouped-query
    cells beside them, a decode series (N_k ≠ N_q) and a windowed series."""
    rows = synthetic.power_law_rows({"naive": (2, 2), "chunked": (2, 1)}, [256, 512, 1024])
    rows += [synthetic.cell("naive", n, kv_heads=2, time_ms=n / 512) for n in (256, 512, 1024)]
    rows += [synthetic.cell("naive", 1, seq_k=n, causal=True, causal_align="lower-right", time_ms=n / 2048)
             for n in (256, 512, 1024)]  # fmt: skip
    rows += [synthetic.cell("chunked", n, causal=True, window=64, time_ms=n / 1024) for n in (256, 512, 1024)]
    return rows


def test_a_report_shows_its_figures_before_its_tables(fixture_report, tmp_path):
    """A report is for looking (issue 38): its findings, then every figure, then the tables, in README.md and
    report.html alike, for a real run (the committed fixture) and a run with every workload panel; the
    method is one short paragraph that points at docs/method.md, where the rules are written out."""
    panels = _render(tmp_path, _every_panel_rows(), copy_gbps=10.0)
    kinds = {f.stem.rsplit("-cpu", 1)[0] for f in panels.figures}
    assert {"decode-time", "decode-kv-gbps", "window"} <= kinds
    for rep in (fixture_report, panels):
        lines = rep.readme.read_text().splitlines()
        figures = [i for i, ln in enumerate(lines) if ln.startswith("![")]
        tables = [i for i, ln in enumerate(lines) if ln.startswith("| ")]
        assert len(figures) == len(rep.figures) and tables
        assert lines.index("## Findings") < figures[0] and figures[-1] < tables[0]
        html = rep.html.read_text()
        shown = [m.start() for m in re.finditer("<figure>", html)]
        assert len(shown) == len(rep.figures)
        assert html.index("<h2>Findings</h2>") < shown[0] and shown[-1] < html.index("<table>")
        method = [ln for ln in lines if "docs/method.md" in ln]
        assert len(method) == 1 and len(method[0].split()) < 150
        assert "Birge" not in rep.readme.read_text() and "docs/method.md" in html
    md = panels.readme.read_text()
    assert md.index("](window-") < md.index("## Grouped-query attention") < md.index("## Runs")


def test_single_seq_len_renders_with_fit_not_available(tmp_path):
    rows = [
        synthetic.cell(v, 1024, time_ms=t, peak_mem_bytes=2**24) for v, t in (("naive", 3.0), ("sdpa", 1.0))
    ]
    rep = _render(tmp_path, rows)
    assert "n/a (ok at 1 N)" in rep.readme.read_text()
    assert rep.html.stat().st_size > 0


def test_single_variant_and_failures_render(tmp_path):
    rows = synthetic.power_law_rows({"chunked": (2.0, 1.0)}, [256, 512, 1024])
    rows.append(synthetic.cell("chunked", 2048, status="oom", message="CUDA out of memory"))
    rows.append(synthetic.cell("chunked", 4096, status="crashed", message="worker died (signal 9)"))
    rep = _render(tmp_path, rows)
    md = rep.readme.read_text()
    assert "worker died" in md and "speedup" not in {f.stem.split("-")[0] for f in rep.figures}


def test_all_failed_and_empty_runs_render(tmp_path):
    rows = [synthetic.cell("naive", n, status="error", message="boom") for n in (256, 512)]
    rep = _render(tmp_path / "a", rows)
    assert "n/a" in rep.readme.read_text()
    empty = _render(tmp_path / "b", [])
    assert empty.readme.read_text().startswith("# attnbench report")


def _gpu_rows(passes=("fwd", "fwdbwd"), dtypes=("float16", "bfloat16")):
    rows = []
    for dtype in dtypes:
        for pass_ in passes:
            for d_k in (64, 128):
                for causal in (False, True):
                    rows += synthetic.power_law_rows(
                        {"naive": (2, 2), "sdpa_flash": (2, 1)},
                        [512, 1024, 2048],
                        device="cuda",
                        dtype=dtype,
                        pass_=pass_,
                        d_k=d_k,
                        causal=causal,
                    )
    return rows


def test_gpu_like_run_groups_by_dtype_and_pass(tmp_path):
    from attnbench.reports.tables import groups, panels

    df = results.load(synthetic.write_run(tmp_path / "run", _gpu_rows()))
    grouped = groups(df)
    assert len(grouped) == 4  # 2 dtypes × 2 passes: one figure each
    titles = [t for _, t, _ in panels(grouped[0][1])]
    assert titles == ["non-causal · d_k=64", "non-causal · d_k=128", "causal · d_k=64", "causal · d_k=128"]


def test_gpu_like_run_renders_small_multiples(tmp_path):
    gpu = {"name": "Synthetic GPU", "memory_bytes": 80 * synthetic.GIB, "sm_count": 1}
    rep = _render(tmp_path, _gpu_rows(passes=("fwdbwd",), dtypes=("bfloat16",)), gpu=gpu)
    (time_figure,) = [f for f in rep.figures if f.stem.startswith("time-")]  # one group: four panels
    assert len(rep.summary.rows) == 8  # 2 variants × (d_k, causal) panels
    assert "Synthetic GPU" in rep.readme.read_text()


def test_hostile_strings_are_escaped(tmp_path):
    rows = synthetic.power_law_rows({HOSTILE_NAME: (2, 2), "naive": (2, 2)}, [256, 512, 1024])
    rows.append(synthetic.cell(HOSTILE_NAME, 2048, status="error", message=HOSTILE_MSG))
    numerics = {
        "probe": [
            {
                "variant": HOSTILE_NAME,
                "device": "cpu",
                "dtype": "float32",
                "q_scale": 1.0,
                "status": "error",
                "message": HOSTILE_MSG,
            }
        ],
        "example_weights": {"seq_len": 2, "valid_keys": 2, "causal": True, "weights": [[1, 0], [0.5, 0.5]]},
    }
    rep = _render(tmp_path, rows, run_id="run<b>1</b>", hostname="<h1>host</h1>", numerics=numerics)
    html = rep.html.read_text()
    for raw in ("<script>", "<img src=x", "<b>1</b>", "<h1>host</h1>", 'javascript:alert(1)">'):
        assert raw not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    md = rep.readme.read_text()
    assert "<script>" not in md and "<img" not in md and "&lt;script&gt;" in md
    assert "\\[link\\](javascript:alert(1))" in md  # brackets escaped: not a link
    table_lines = [line for line in md.splitlines() if "onerror" in line]
    # a '|' in a name or message is escaped: rows keep their 6 (failures) or 7 (probe) columns
    assert sorted(len(re.findall(r"(?<!\\)\|", line)) for line in table_lines) == [7, 8]
    for f in rep.figures:  # file names never carry data strings
        assert re.fullmatch(r"[A-Za-z0-9._-]+", f.png)


def test_cli_report_end_to_end(tmp_path):
    run = synthetic.write_run(
        tmp_path / "run",
        synthetic.power_law_rows({"naive": (2, 2), "chunked": (2, 1)}, [256, 512, 1024, 2048]),
    )
    out = tmp_path / "out"
    proc = run_cli("report", str(run), "--out", str(out), "--baseline", "chunked", timeout=120)
    assert proc.returncode == 0, proc.stderr
    # the findings in sentences; the wide fits table stays in the report (issue 26)
    assert proc.stdout.startswith("Findings\n") and "naive: time grows as N^" in proc.stdout
    assert "time exponent [95% CI]" not in proc.stdout and "report: " in proc.stderr
    assert (out / "README.md").stat().st_size > 0 and (out / "report.html").stat().st_size > 0
    assert any(out.glob("speedup-*.png"))
    captions = [ln for ln in (out / "README.md").read_text().splitlines() if "Data: [" in ln]
    assert captions and all(ln.startswith("Data: [") or ". Data: [" in ln for ln in captions)


@pytest.mark.parametrize("case", ["missing", "not_a_run", "baseline", "out_is_run"])
def test_cli_report_bad_input(tmp_path, case):
    run = synthetic.write_run(tmp_path / "run", [synthetic.cell("naive", 256, time_ms=1.0)])
    out = tmp_path / "out"
    (tmp_path / "empty").mkdir()
    args = {
        "missing": [str(tmp_path / "nope"), "--out", str(out)],
        "not_a_run": [str(tmp_path / "empty"), "--out", str(out)],
        "baseline": [str(run), "--baseline", "no_such_variant", "--out", str(out)],
        "out_is_run": [str(run), "--out", str(run)],
    }[case]
    before = sorted(p.name for p in run.iterdir())
    proc = run_cli("report", *args, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("attnbench: error:")
    assert not out.exists() and sorted(p.name for p in run.iterdir()) == before


def test_seq_axis_labels_powers_of_two_and_marks_the_steps_between():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnbench.reports.style import seq_axis

    fig, ax = plt.subplots()
    seq_axis(ax, [256, 512, 3072, 4096, 12288])
    assert list(ax.xaxis.get_majorticklocs()) == [256, 512, 4096]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "4k"]
    assert list(ax.xaxis.get_minorticklocs()) == [3072, 12288]
    ax.clear()
    seq_axis(ax, [3000, 5000, 7000])  # no powers of two: every tick labelled
    assert [t.get_text() for t in ax.get_xticklabels()] == ["3000", "5000", "7000"]
    plt.close(fig)


def test_one_layout_pass_draws_the_png_matplotlib_would_and_a_notebook_figure_keeps_its_engine(tmp_path):
    """save() places the axes once and then draws each file (style.lay_out): the PNG is the one savefig
    writes with the constrained-layout engine on, which draws the figure twice for it."""
    import hashlib

    import pandas as pd

    from attnbench.reports.style import DPI, legend_below, mpl_style, new_figure, png_bytes, save

    def figure():
        with mpl_style():
            fig, (a, b) = new_figure(2)
            for ax, k in ((a, 1), (b, 2)):
                ax.plot([1, 2, 4], [k, 4 * k, 16 * k], label=f"variant {k} with a long name")
                ax.set_title(f"panel {k}")
                ax.set_xlabel("seq_len")
            legend_below(a, axes=[b])
            fig.suptitle("a group heading")
        return fig

    theirs = figure()
    with mpl_style():
        theirs.savefig(tmp_path / "theirs.png", dpi=DPI)
    save(figure(), pd.DataFrame({"x": [1]}), tmp_path, "ours", "ours")
    digest = hashlib.sha256((tmp_path / "ours.png").read_bytes()).hexdigest()  # a short failure message
    assert digest == hashlib.sha256((tmp_path / "theirs.png").read_bytes()).hexdigest()
    shown = figure()
    engine = shown.get_layout_engine()
    assert hashlib.sha256(png_bytes(shown)).hexdigest() == digest and shown.get_layout_engine() is engine


def _best_cells(tmp_path, cases):
    """Two variants per seq_len, sdpa's samples `factor` × naive's with the given spread and count."""
    from attnbench.reports.render import best_table
    from attnbench.reports.tables import best_variant

    rows = []
    for n, (factor, spread, count) in cases.items():
        a = synthetic.samples(10.0, n=count, spread=spread, seed=n)
        b = synthetic.samples(10.0 * factor, n=count, spread=spread, seed=n + 1)
        rows += [synthetic.cell("chunked", n, sample_ms=a), synthetic.cell("sdpa", n, sample_ms=b)]
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    best = best_variant(df).set_index("seq_len")
    table = best_table(df)
    return best, {int(r[0]): r[1] for r in table.rows}


def test_best_table_says_tie_when_it_cannot_tell(tmp_path):
    best, text = _best_cells(
        tmp_path,
        {
            256: (1.30, 0.02, 30),  # clearly separated
            512: (1.00, 0.01, 30),  # one distribution twice
            1024: (1.01, 0.001, 30),  # significant, but under 2%
            2048: (1.10, 0.40, 5),  # 10% by median, hidden in a ±40% spread
        },
    )
    assert best.loc[256, "tied"] == "" and best.loc[256, "p_value"] < 1e-6
    assert text[256].startswith("chunked ") and "× ahead of sdpa, p < 0.001" in text[256]
    for n in (512, 1024, 2048):
        assert best.loc[n, "tied"] != "", n
        assert text[n].startswith("tie: ") and "≈" in text[n] and "ahead" not in text[n]
    assert best.loc[1024, "p_value"] < 0.05  # tied by the 2% rule, not by the test
    assert best.loc[2048, "p_value"] >= 0.05 and best.loc[2048, "lead"] > 1.02


def test_best_table_says_a_lead_in_the_digits_its_spread_supports(tmp_path):
    """The fastest-per-N table's lead, as the findings' and the ranking's: '2.02× ahead' off cells spread
    ±40% read as measured to the hundredth; it says the digits the two cells' spread supports
    (results.formulas.ratio_number of best.csv's lead_spread)."""
    from attnbench.results.formulas import ratio_number

    best, text = _best_cells(tmp_path, {256: (1.30, 0.02, 30), 512: (2.0, 0.40, 200)})
    for n in (256, 512):
        said = ratio_number(best.loc[n, "lead"], best.loc[n, "lead_spread"])
        assert best.loc[n, "tied"] == "" and f"({said}× ahead of sdpa" in text[n], (n, text[n])
    assert re.fullmatch(r"\d\.\d\d", ratio_number(best.loc[256, "lead"], best.loc[256, "lead_spread"]))
    assert re.search(r"\(\d(\.\d)?× ahead of sdpa", text[512]), text[512]  # ±40%: its tenths at most


def test_the_ranking_ranks_a_variant_far_behind_a_tie_at_the_front(tmp_path):
    # issue 25: two variants tie at every N (sdpa and sdpa_flash, one CPU kernel, then; a run that records
    # no kernel now leaves sdpa out where sdpa_flash ran: tables.contestants); a variant 1.5× behind them must
    # still be ranked behind, not hidden in "tie"
    from attnbench.reports.render import best_table
    from attnbench.reports.tables import ranking

    rows = [
        synthetic.cell("stable_softmax", 1024, sample_ms=synthetic.samples(10.0, n=6, spread=0.01, seed=1)),
        synthetic.cell("sdpa_flash", 1024, sample_ms=synthetic.samples(10.0, n=6, spread=0.01, seed=2)),
        synthetic.cell("chunked", 1024, sample_ms=synthetic.samples(12.5, n=6, spread=0.01, seed=3)),
        synthetic.cell("naive", 1024, sample_ms=synthetic.samples(15.0, n=6, spread=0.01, seed=4)),
    ]
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    ranks = ranking(df).set_index("variant")
    assert ranks.loc["stable_softmax", "group"] == ranks.loc["sdpa_flash", "group"] == 0
    assert ranks.loc["chunked", "group"] == 1 and ranks.loc["naive", "group"] == 2
    assert ranks.loc["chunked", "ratio"] == pytest.approx(1.25, rel=0.03)
    text = {int(r[0]): r[1] for r in best_table(df).rows}[1024]
    front = ("stable_softmax ≈ sdpa_flash", "sdpa_flash ≈ stable_softmax")
    assert text.startswith("tie: ") and any(f"; ranking: {f} › chunked 1.2" in text for f in front), text
    assert " › naive 1.4" in text or " › naive 1.5" in text


def test_a_run_in_rounds_ranks_two_variants_within_each_round(tmp_path):
    # the machine ran 1.0x, 1.35x and 1.15x slow in three rounds; in each, B (visited right after A) was 8%
    # slower than A: pooled, the rounds' drift hides that; visit by visit (results.judge.separated: the
    # visits paired by round) it is told apart; without the visits' sample counts, pooled as before
    from attnbench.reports.tables import ranking

    drift = (1.0, 1.35, 1.15)
    wobble = (0.99, 1.0, 1.01)
    a = [[10.0 * d * w for w in wobble] for d in drift]
    b = [[10.8 * d * w for w in wobble] for d in drift]
    flat = [x for visit in a for x in visit], [x for visit in b for x in visit]

    def run(name, with_counts):
        def visits(v):
            return {
                "visit_medians_ms": [sorted(x)[1] for x in v],
                "visit_samples": [3, 3, 3] if with_counts else [],
            }

        rows = [
            synthetic.cell("sdpa", 1024, sample_ms=flat[0], **visits(a)),
            synthetic.cell("chunked", 1024, sample_ms=flat[1], **visits(b)),
        ]
        return ranking(results.load(synthetic.write_run(tmp_path / name, rows))).set_index("variant")

    assert run("rounds", True).loc["chunked", "group"] == 1
    assert run("pooled", False).loc["chunked", "group"] == 0


def test_best_table_without_samples_is_untested(tmp_path):
    from attnbench.reports.tables import best_variant

    rows = [
        synthetic.cell("chunked", 256, sample_ms=[1.0, 1.0]),
        synthetic.cell("sdpa", 256, sample_ms=[2.0, 2.0]),
    ]
    best = best_variant(results.load(synthetic.write_run(tmp_path / "run", rows))).iloc[0]
    assert best["lead"] == pytest.approx(2.0) and best["tied"] == "sdpa"  # two samples: no test, no winner


def test_a_multi_run_report_puts_the_calibrations_side_by_side(tmp_path):
    rows = synthetic.power_law_rows({"naive": (2.0, 2.0)}, [256, 512, 1024])
    a = synthetic.write_run(tmp_path / "a", rows, run_id="fast-box", peak_tflops=0.5)
    b = synthetic.write_run(tmp_path / "b", rows, run_id="slow-box", peak_tflops=0.4)
    c = synthetic.write_run(tmp_path / "c", rows, run_id="twin-box", peak_tflops=0.48)
    md = render(prepare([a, b, c]), tmp_path / "report").readme.read_text()
    assert "Calibration of each run, against the first" in md
    assert "calibration differs: cpu matmul float32 TFLOP/s is 0.4 in slow-box against 0.5 in fast-box" in md
    assert "in twin-box against" not in md  # 4% apart: within the 10% a VM wanders


def test_a_multi_run_report_keeps_one_order_of_its_runs_and_names_each_runs_folder(tmp_path):
    """Runs given out of their run ids' order: the findings, the title, the Runs, Machine and calibration
    tables all take the run ids' order (the findings' and sections'), the calibration's first is named, and
    the Runs table names each run's folder as given, so that a committed reference run is told apart."""
    from attnbench.reports import page as pg
    from attnbench.reports import trust
    from attnbench.reports.render import findings_of

    rows = synthetic.power_law_rows({"naive": (2.0, 2.0)}, [256, 512, 1024])
    mine = synthetic.write_run(
        tmp_path / "runs" / "mine", rows, run_id="20260102-000000-box", peak_tflops=0.4
    )
    ref = synthetic.write_run(tmp_path / "reference", rows, run_id="20260101-000000-box", peak_tflops=0.5)
    inputs = prepare([mine, ref])
    order = ["20260101-000000-box", "20260102-000000-box"]
    assert list(inputs.metas) == list(inputs.numerics) == order
    assert [t.split(" · ")[0] for t in (p.title for p in findings_of(inputs).panels)] == order
    blocks = trust.blocks(
        inputs.df, inputs.metas, trust.device_groups(inputs.df, inputs.metas), inputs.run_dirs
    )
    runs, machine, calibration = (b for b in blocks if isinstance(b, pg.Table) and b.rows)
    assert runs.headers[:2] == ("run", "folder")
    assert [r[:2] for r in runs.rows] == [(order[0], str(ref)), (order[1], str(mine))]
    assert machine.headers[1:] == tuple(order)
    assert calibration.headers[3] == f"first: {order[0]}" and calibration.rows[0][0] == order[1]


def test_the_report_shows_the_first_call_apart_from_the_steady_state(tmp_path):
    rows = [synthetic.cell("flexish", n, time_ms=1.0 * n / 256, first_call_ms=900.0, setup_ms=120.0)
            for n in (256, 512)]  # fmt: skip
    rows += [
        synthetic.cell("naive", n, time_ms=2.0 * n / 256, first_call_ms=2.1 * n / 256) for n in (256, 512)
    ]
    md = render(
        prepare([synthetic.write_run(tmp_path / "run", rows)]), tmp_path / "report"
    ).readme.read_text()
    assert "Setup apart from steady state" in md
    flex = re.search(r"\| flexish \| 512 \| 900 ms \| 120 ms \| [\d.]+ ms \| (\d+)\.\d× \|", md)
    assert flex and 400 < int(flex[1]) < 500  # 900 ms against a median of about 2 ms
    assert re.search(r"\| naive \| 512 \| 4.2 ms \| no hook \| [\d.]+ ms \| 1\.[01]× \|", md)


H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def _two_gpus(tmp_path, second: str, second_tflops: float, slower: float = 3.0, name: str = "run"):
    """A run on two GPUs of two hosts: node1's H100 measured N = 256, 1024, 4096 and node2's `second`
    N = 512, 2048, 8192, `slower` times slower. Averaged together their time fit zigzags far from 2."""
    first = synthetic.device("node1", gpu_name=H100, gpu_uuid="GPU-aaa", gpu_index=0, tflops=600.0)
    other = synthetic.device("node2", gpu_name=second, gpu_uuid="GPU-bbb", gpu_index=0, tflops=second_tflops)

    def rows(ns, scale):
        return [
            synthetic.cell(v, n, time_ms=base * scale * (n / 256) ** 2, peak_mem_bytes=2**20 * n // 256)
            for v, base in (("naive", 2.0), ("sdpa", 1.0))
            for n in ns
        ]

    cells = synthetic.on(first, rows([256, 1024, 4096], 1.0)) + synthetic.on(
        other, rows([512, 2048, 8192], slower)
    )
    return synthetic.write_run(tmp_path / name, cells, run_id=name, devices=[first, other])


def test_a_run_on_two_gpu_models_is_split_and_says_why(tmp_path):
    rep = render(prepare([_two_gpus(tmp_path, A100, 250.0)]), tmp_path / "out")
    md = rep.readme.read_text()
    assert "Where the cells were measured" in md and "never averaged or fitted together" in md
    assert "node1:cuda:GPU-aaa" in md and "node2:cuda:GPU-bbb" in md
    assert f"another model than {A100}" in md
    fits = rep.summary
    assert "device_group" in fits.headers and len(fits.rows) == 4  # 2 variants x 2 device groups
    col = fits.headers.index("time exponent [95% CI]")
    assert all(r[col].startswith(("1.9", "2.0")) for r in fits.rows), fits.rows  # each group alone: N²
    stems = {f.stem for f in rep.figures if f.stem.startswith("time-")}
    assert stems == {f"time-cuda-{slug(m)}-float32-fwd" for m in (H100, A100)}
    assert md.count(f"\n## cuda · {H100} · float32 · forward") == 1  # (the findings name it under ###)


def test_a_gpu_more_than_10_percent_slower_is_split_from_its_twin(tmp_path):
    df = results.load(_two_gpus(tmp_path, H100, 400.0))  # 400 against 600 TFLOP/s: 0.67x
    assert set(df["device_group"]) == {f"{H100} #1", f"{H100} #2"}
    assert set(df[df["device_group"] == f"{H100} #2"]["where"]) == {"node2:cuda:GPU-bbb"}
    groups = devices.groups(results.read_meta(tmp_path / "run"), df.to_dict("records"))
    assert "float32 matmul 400 TFLOP/s is 0.67x the 600 of node1:cuda:GPU-aaa" in groups[1].why


def test_gpus_of_one_model_within_10_percent_are_one_group(tmp_path):
    from attnbench.reports.fit import scaling_table

    run = _two_gpus(tmp_path, H100, 570.0, slower=1.0)  # 5% apart: the normal 8-GPU box
    df = results.load(run)
    assert set(df["device_group"]) == {""} and set(df["where"]) == {
        "node1:cuda:GPU-aaa",
        "node2:cuda:GPU-bbb",
    }
    table = scaling_table(df, results.load_meta(run))
    assert len(table) == 2 and set(table["fit_seq_lens"]) == {"2048 4096 8192"}  # both GPUs in one fit
    notes = group_notes("run", devices.groups(results.read_meta(run), df.to_dict("records")))
    assert notes == [
        "run measured its cuda cells on 2 devices: node1:cuda:GPU-aaa, node2:cuda:GPU-bbb, all "
        f"{H100} with calibrated matmul ceilings within 10% of each other: shown as one group."
    ]


def test_each_row_is_judged_against_its_own_devices_calibration(tmp_path):
    """The calibration reader: a row's where_key record, else the run-wide calibration of its device kind."""
    from attnbench.results.suspect import matmul_ceiling

    meta = results.read_meta(_two_gpus(tmp_path, A100, 250.0))
    assert devices.calibration_for(meta, "cuda", "node2:cuda:GPU-bbb")["matmul_tflops"]["float32"] == 250.0
    assert devices.calibration_for(meta, "cuda", "node9:cuda:GPU-zzz")["matmul_tflops"]["float32"] == 1.0
    assert devices.calibration_for(meta, "cpu") == {}
    assert matmul_ceiling(meta, "cuda", "float32", "node1:cuda:GPU-aaa") == 600.0


def test_a_forced_resume_is_shown_beside_the_fingerprint(tmp_path):
    from attnbench.reports.trust import fingerprint_table

    run = synthetic.write_run(tmp_path / "run", [synthetic.cell("naive", 256, time_ms=1.0)])
    writer = results.RunWriter(run, resume=True)
    diff = {"torch": ["2.12.0", "2.13.0"]}
    writer.log_resume({"at": "2026-01-02T00:00:00+00:00", "host": "h2", "pid": 7, "forced": True,
                       "fingerprint": {}, "fingerprint_diff": diff})  # fmt: skip
    writer.close()
    rows = dict(fingerprint_table(results.load_meta(run)).rows)
    assert rows["resumed 1"] == "2026-01-02T00:00:00+00:00 on h2 (forced: torch 2.12.0 -> 2.13.0)"


def test_a_fingerprint_key_a_run_did_not_record_reads_not_recorded(tmp_path):
    """An old or edited meta.json without torch had no torch row; without a fingerprint the table dropped
    attnbench's version, the commit, torch and python, yet said `gpu | none` from nothing. A key the run
    did not record reads 'not recorded'; a recorded "gpu": null is still none."""
    import json

    from attnbench.reports.trust import fingerprint_table

    run = synthetic.write_run(tmp_path / "run", [synthetic.cell("naive", 256, time_ms=1.0)])
    rows = dict(fingerprint_table(results.load_meta(run)).rows)
    assert rows["torch"] == "0.0" and rows["gpu"] == "none" and rows["hostname"] == "synthetic-host"
    assert rows["git_commit"] == "not recorded"  # the synthetic run records no commit
    meta = json.loads((run / "meta.json").read_text())
    del meta["fingerprint"]["torch"]
    (run / "meta.json").write_text(json.dumps(meta))
    rows = dict(fingerprint_table(results.load_meta(run)).rows)
    assert rows["torch"] == "not recorded" and rows["gpu"] == "none"
    del meta["fingerprint"]
    (run / "meta.json").write_text(json.dumps(meta))
    rows = dict(fingerprint_table(results.load_meta(run)).rows)
    for key in ("attnbench_version", "git_commit", "torch", "python", "hostname", "gpu"):
        assert rows[key] == "not recorded", key


def test_a_group_timed_in_two_ways_says_so_and_its_time_csv_has_each_cells_mode(tmp_path):
    """--timing auto on CUDA may time a series' short cells with CUDA graphs and its long ones with events:
    the group's section says so in one line, and the time figure's CSV names each cell's mode."""
    from attnbench.reports import plots
    from attnbench.reports.render import _timing_note
    from attnbench.reports.tables import groups

    def rows(modes):
        return [
            synthetic.cell("sdpa", n, device="cuda", dtype="bfloat16", time_ms=0.01 * n / 256, timing_mode=m)
            for n, m in modes.items()
        ]

    mixed = results.load(
        synthetic.write_run(tmp_path / "a", rows({256: "graph", 512: "graph", 1024: "events"}))
    )
    note = _timing_note(mixed)
    assert note is not None and note.text.startswith("Cells timed in more than one way (events 1, graph 2)")
    (_, group), *_ = list(groups(mixed))
    fig, data = plots.time_figure(group, {}, "t")
    assert data.sort_values("seq_len")["timing_mode"].tolist() == ["graph", "graph", "events"]
    import matplotlib.pyplot as plt

    plt.close(fig)
    one = results.load(synthetic.write_run(tmp_path / "b", rows({256: "events", 512: "events"})))
    assert _timing_note(one) is None
    old = results.load(FIXTURE)  # written before timing_mode: nothing to say
    assert _timing_note(old) is None


def test_rows_no_device_measured_are_no_device_and_one_calibration_is_listed_once(tmp_path):
    """A one-CPU run whose unsupported rows carry no host (refused before any worker) measured its cells on
    one device, not on '?:cpu' as well; and its calibration, written run-wide and in its `devices` record
    alike, is one line of the machine table, not two."""
    vm = synthetic.device("vm", tflops=1.0)  # the run-wide calibration below is the same 1.0 TFLOP/s
    measured = synthetic.on(vm, [synthetic.cell("naive", n, time_ms=0.01 * n) for n in (128, 256, 512)])
    refused = [synthetic.cell("flexish", n, status="unsupported", message="no backward") for n in (128, 256)]
    assert all(r.get("host") is None for r in refused)
    run = synthetic.write_run(tmp_path / "run", measured + refused, run_id="run", devices=[vm])
    df = results.load(run)
    groups = devices.groups(results.read_meta(run), df.to_dict("records"))
    assert [g.members for g in groups] == [("vm:cpu",)] and groups[0].unmeasured == ("?:cpu",)
    assert set(df["device_group"]) == {""}
    md = render(prepare([run]), tmp_path / "out").readme.read_text()
    assert "2 devices" not in md and "?:cpu" not in md
    assert md.count("| calibrated cpu matmul float32 |") == 1 and "calibrated vm:cpu" not in md


def test_a_multi_run_reports_calibration_advice_follows_compares_same_machine_rule(tmp_path):
    rows = synthetic.power_law_rows({"naive": (2.0, 2.0)}, [256, 512])
    # run ids in the order the report keeps (its first is the calibration's first)
    a = synthetic.write_run(tmp_path / "a", rows, run_id="1-quiet", peak_tflops=0.5)
    b = synthetic.write_run(tmp_path / "b", rows, run_id="2-loaded", peak_tflops=0.4)  # one host: loaded
    c = synthetic.write_run(tmp_path / "c", rows, run_id="3-other", peak_tflops=0.4, hostname="elsewhere")
    md = render(prepare([a, b, c]), tmp_path / "report").readme.read_text()
    one, two = (
        next(ln for ln in md.splitlines() if f"in {r} against" in ln) for r in ("2-loaded", "3-other")
    )
    assert "same host name and device model in both (one machine, or VMs that share a name)" in one
    assert "calibrated at another speed" in one and "see --normalize calibration" not in one
    assert "see --normalize calibration" in two  # two machines: normalising takes their speed out


def test_a_report_of_several_runs_names_the_machine_of_each_section():
    """A section of a report of several runs, and its findings, open with the run and the machine it ran on
    (a run id alone does not tell an H100 run from an H200 one); a report of one run names neither."""
    from conftest import ROOT

    from attnbench.reports.render import findings_of

    runs = [ROOT / "results" / "reference" / name for name in ("quick-epyc-2core", "h100-sxm-2026-11-26")]
    inputs = prepare(runs)
    machine = {rid: set(rows["machine"]) for rid, rows in inputs.df.groupby("run_id")}
    assert [len(m) for m in machine.values()] == [1, 1] and len(set.union(*machine.values())) == 2
    heads = [f"{rid} · {m} · " for rid, ms in machine.items() for m in ms]
    titles = [p.title for p in findings_of(inputs).panels]
    assert titles and all(t.startswith(tuple(heads)) for t in titles)
    assert {h for h in heads if any(t.startswith(h) for t in titles)} == set(heads)  # each run's sections
    alone = [p.title for p in findings_of(prepare(runs[:1])).panels]
    assert alone and not any(m in t for t in alone for ms in machine.values() for m in ms)


def test_a_percent_of_peak_above_100_says_why():
    """A calibration taken at a busy moment makes cells read 291-312% of 'peak' (trial P): the table says
    it is over the calibrated matmul (docs/reports-and-compare.md says why), never a bare 312%."""
    from attnbench.reports.render import _peak_text

    assert _peak_text(3.12) == "312% (over the calibrated matmul)" and _peak_text(0.38) == "38%"
    assert _peak_text(float("nan")) == _peak_text(None) == "n/a"


def test_prepare_reads_each_row_file_once_and_digests_the_rows_it_loads(tmp_path, monkeypatch):
    """A report's digest of a run's rows (rendered_from, which publish checks) and its load of them come from
    one read of each file (results.rowfile.read_once): rows.jsonl and each shard parsed once, not once for
    the digest and again for the rows, and a row appended after that read is in neither."""
    import json
    import shutil

    from attnbench.results import rowfile
    from attnbench.results.history import rows_digest

    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    (run / "shards").mkdir()
    (run / "shards" / "task-0.jsonl").write_text("")  # an array job's task that wrote nothing yet
    parsed, real = [], rowfile._scan_lines

    def scanned(p, lines, **kw):
        parsed.append(p.name)
        if p.name == "rows.jsonl" and parsed.count("rows.jsonl") == 1:  # a row appended after the first read
            late = {**json.loads(lines[0]), "cell_id": "late"}
            with p.open("a") as fh:
                fh.write(json.dumps(late) + "\n")
        return real(p, lines, **kw)

    monkeypatch.setattr(rowfile, "_scan_lines", scanned)
    inputs = prepare([run])
    assert parsed.count("rows.jsonl") == 1 and parsed.count("task-0.jsonl") == 1, parsed
    assert "late" not in set(inputs.df["cell_id"]) and "late" in (run / "rows.jsonl").read_text()
    with (run / "rows.jsonl").open("rb") as fh:  # the digest of the lines loaded, without the late row
        kept = fh.readlines()[:-1]
    (run / "rows.jsonl").write_bytes(b"".join(kept))
    monkeypatch.setattr(rowfile, "_scan_lines", real)
    assert inputs.rows_sha256 == (rows_digest(run),)


def test_the_not_ok_table_gives_a_decode_groups_context_lengths_not_its_one_query():
    """Paged decode cells (one query against contexts of 1,024 and 4,096 keys) that are wrong: the table of
    cells not ok gives their N_k, not an N_q of 1 under a `seq_lens` header that is neither; beside plain
    cells it gives each its own length's name."""
    import pandas as pd

    from attnbench.reports.trust import _failures_table

    def bad(variant, status, seq_len, seq_k):
        return {"run_id": "r", "variant": variant, "status": status, "seq_len": seq_len, "seq_k": seq_k,
                "message": f"{variant} failed"}  # fmt: skip

    paged = [bad("paged_bug", "wrong", 1, n) for n in (1024, 4096)]
    table = _failures_table(pd.DataFrame(paged))
    assert table.headers[4] == "N_k" and table.rows[0][4] == "1024 4096", table
    mixed = _failures_table(
        pd.DataFrame([*paged, bad("raiser", "error", 64, 64), bad("raiser", "error", 128, 128)])
    )
    assert mixed.headers[4] == "N"
    assert {r[1]: r[4] for r in mixed.rows} == {"paged_bug": "N_k 1024 4096", "raiser": "64 128"}


def test_a_packs_only_variant_is_said_once_not_listed_unsupported_on_every_dense_probe(tmp_path):
    """Trial V: the varlen run's numerics table listed sdpa_padded and sdpa_loop 'unsupported' on each
    large-logit probe and the gate at N 300 (8 rows): the probe's problems are dense, and they run packs
    only. A variant unsupported on every problem for one reason is said once, in a sentence; a variant that
    failed a probe keeps its row, and one unsupported on only some problems keeps its rows too."""
    from attnbench.reports import page
    from attnbench.reports.render import _numerics_section
    from attnbench.variants.lengths import PACKED_ONLY

    def rec(v, status, scale=None, message=""):
        at = {"q_scale": scale} if scale else {"seq_len": 300, "causal": True}
        return {"variant": v, "device": "cpu", "dtype": "float32", "status": status, "message": message, **at}

    packs = ("sdpa_padded", "sdpa_loop")
    probe = [rec(v, "unsupported", s, PACKED_ONLY) for v in packs for s in (1, 10, 100)]
    probe += [rec("naive", "ok", s) for s in (1, 10)] + [rec("naive", "wrong", 100, "overflow")]
    probe += [rec("flexish", "unsupported", 1, "needs CUDA"), rec("flexish", "ok", 10)]
    tiles = [rec(v, "unsupported", message=PACKED_ONLY) for v in packs]
    sec = _numerics_section({"run": {"probe": probe, "tiles": tiles}}, False, tmp_path)
    md = page.to_markdown(page.Page("report", sec.tables))
    assert "| sdpa\\_padded |" not in md and "| sdpa\\_loop |" not in md, md
    said = "sdpa\\_loop and sdpa\\_padded are left out of the probe's table: unsupported on every dense"
    assert md.count(said) == 1 and md.count("batches only") == 1, md
    assert "| naive | cpu | float32 |" in md and "| flexish | cpu | float32 |" in md
