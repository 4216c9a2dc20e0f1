"""The report's workload panels (issue 11): decode K/V bandwidth against N_k, grouped-query cells against
their MHA counterparts, sliding-window slopes; and a plain run's report left as it was."""

from __future__ import annotations

import math
import re

import pytest
import synthetic
from conftest import run_cli

from attnbench import results
from attnbench.reports import page
from attnbench.reports.panels import gqa, window
from attnbench.reports.panels.gqa import gqa_pairs
from attnbench.reports.render import prepare, render

COPY_GBPS = 10.0


def _decode_rows():
    """naive and chunked decode steps: 1 query (lower-right causal) against N_k = 256..4096, time ∝ N_k."""
    return [
        synthetic.cell(
            v,
            1,
            seq_k=nk,
            causal=True,
            causal_align="lower-right",
            kv_heads=2,
            time_ms=base * nk / 256,
            peak_mem_bytes=2**16 * nk // 256,
        )  # fmt: skip
        for v, base in (("naive", 0.5), ("chunked", 0.2))
        for nk in (256, 512, 1024, 2048, 4096)
    ]


@pytest.fixture(scope="module")
def decode_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decode")
    run = synthetic.write_run(tmp / "run", _decode_rows(), copy_gbps=COPY_GBPS)
    return render(prepare([run]), tmp / "out"), results.load(run)


def test_a_decode_run_has_the_kv_bandwidth_figure_and_csv(decode_report):
    rep, df = decode_report
    stems = {f.stem for f in rep.figures}
    assert {"decode-time-cpu-float32-fwd", "decode-kv-gbps-cpu-float32-fwd"} <= stems
    csv = rep.out_dir / "decode-kv-gbps-cpu-float32-fwd.csv"
    import pandas as pd

    data = pd.read_csv(csv)
    assert {"seq_k", "kv_bytes", "time_ms_median", "kv_gbps", "copy_gbps"} <= set(data.columns)
    assert len(data) == 10 and set(data["copy_gbps"]) == {COPY_GBPS}
    assert data["kv_gbps"].to_numpy() == pytest.approx(
        (data["kv_bytes"] / data["time_ms_median"] / 1e6).to_numpy()
    )
    for f in rep.figures:
        assert (rep.out_dir / f.png).stat().st_size > 10_000 and (rep.out_dir / f.svg).stat().st_size > 10_000
    md = rep.readme.read_text()
    assert "## Decode: time and K/V bandwidth against N\\_k" in md
    assert "](decode-kv-gbps-cpu-float32-fwd.png)" in md
    assert "decode-kv-gbps-cpu-float32-fwd.png" not in rep.html.read_text()  # embedded, not linked
    assert "K/V GB/s" in rep.html.read_text()


def test_the_decode_table_is_kv_bytes_over_time_at_the_largest_n_k(decode_report):
    rep, df = decode_report
    md = rep.readme.read_text()
    for variant in ("naive", "chunked"):
        row = df[(df["variant"] == variant) & (df["seq_k"] == 4096)].iloc[0]
        rate = float(row["kv_bytes"]) / (float(row["time_ms_median"]) * 1e-3) / 1e9
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {variant} | 4,096 |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[4]) == pytest.approx(rate, rel=1e-2)  # K/V GB/s, 3 significant digits
        assert cells[5] == f"{rate / COPY_GBPS * 100:.3g}%"


def test_a_decode_series_is_fitted_and_plotted_against_n_k(decode_report):
    rep, df = decode_report
    fits = {r[0]: r for r in rep.summary.rows}
    col = rep.summary.headers.index("time exponent [95% CI]")
    for variant in ("naive", "chunked"):  # time ∝ N_k: slope 1, where seq_len (always 1) gives no fit
        assert re.match(r"(0\.9\d|1\.0\d) ", fits[variant][col]), fits[variant][col]
    assert fits["naive"][rep.summary.headers.index("largest N_k measured")] == "4,096"  # its N is N_k
    md = rep.readme.read_text()
    assert "| N\\_k | best variant |" in md and "| 4096 | chunked" in md  # ranked per N_k, not lumped


def test_a_decode_run_without_calibration_says_so(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _decode_rows(), copy_gbps=0.0)
    md = render(prepare([run]), tmp_path / "out").readme.read_text()
    assert "calibrated copy bandwidth not calibrated" in md and "no calibration" in md


# ---- grouped-query attention -------------------------------------------------------------------------


def _gqa_rows(with_mha: bool = True):
    """H = 8 with H_kv = 8 (MHA), 2 and 1; GQA time is MHA time / (1 + 8 / H_kv / 8) ... a known ratio."""
    rows = []
    for n in (256, 512):
        for kv, speed in ((8, 1.0), (2, 1.5), (1, 2.0)):
            if kv == 8 and not with_mha:
                continue
            t = 1.0 * n / 256 / speed
            rows.append(synthetic.cell("naive", n, kv_heads=kv, time_ms=t, peak_mem_bytes=2**20 * kv))
            # decoys: the same kv_heads and N but another d_k; and an MHA cell of another variant
            rows.append(synthetic.cell("naive", n, kv_heads=kv, d_k=32, time_ms=t * 7, peak_mem_bytes=5 * kv))
            if kv == 8:
                rows.append(synthetic.cell("chunked", n, kv_heads=kv, time_ms=t * 100, peak_mem_bytes=5))
    return rows


def test_gqa_pairs_pick_exactly_the_mha_counterpart(tmp_path):
    df = results.load(synthetic.write_run(tmp_path / "run", _gqa_rows()))
    pairs = gqa_pairs(df)
    assert len(pairs) == 8 and pairs["has_mha"].all()  # 2 N × 2 H_kv × 2 d_k, naive only
    for _, p in pairs.iterrows():
        mha = df[(df["variant"] == "naive") & (df["kv_heads"] == 8) & (df["d_k"] == p["d_k"])
                 & (df["seq_len"] == p["seq_len"])].iloc[0]  # fmt: skip
        gqa = df[(df["variant"] == "naive") & (df["kv_heads"] == p["kv_heads"]) & (df["d_k"] == p["d_k"])
                 & (df["seq_len"] == p["seq_len"])].iloc[0]  # fmt: skip
        assert p["mha_ms"] == pytest.approx(float(mha["time_ms_median"]))
        assert p["speedup"] == pytest.approx(float(mha["time_ms_median"]) / float(gqa["time_ms_median"]))
        assert p["speedup"] == pytest.approx({2: 1.5, 1: 2.0}[int(p["kv_heads"])], rel=0.03)
        assert bool(p["separated"])  # 30 samples ±2% each, 1.5× apart
        assert p["kv_bytes_ratio"] == pytest.approx(p["kv_heads"] / 8)
        assert p["mem_ratio"] == pytest.approx(p["kv_heads"] / 8)


def _gqa_markdown(tmp_path, name: str, rows) -> tuple[str, object]:
    """The GQA section as the report's Markdown shows it, and its folder (the section alone: render()
    draws every figure besides, and test_real_decode_gqa_and_window_runs_report checks it is in there)."""
    inputs = prepare([synthetic.write_run(tmp_path / name, rows)])
    out = tmp_path / f"out_{name}"
    out.mkdir()
    sec = gqa.section(inputs.df, inputs.metas, out)
    return page.to_markdown(page.Page("report", [*sec.figures, *sec.tables])), out


def test_gqa_table_in_the_report_and_a_missing_counterpart_is_said(tmp_path):
    md, out = _gqa_markdown(tmp_path, "a", _gqa_rows())
    assert "## Grouped-query attention against MHA of the same shape" in md
    assert (out / "gqa.csv").is_file()
    assert re.search(
        r"\| naive \| 64 \| 512 \| 8 \| 1 \| [\d.]+ ms \| [\d.]+ ms \| (1\.9\d*|2(\.0\d*)?)× \| yes "
        r"\| 0\.12× \| 0\.125× \|",
        md,
    )
    assert "no MHA cell" not in md
    # Trial V: a paged run's report had 18 rows of 'no MHA cell (H_kv = H) of this shape in the run';
    # where no shape has its counterpart it is said once, in a sentence, and gqa.csv still holds the cells
    md, out = _gqa_markdown(tmp_path, "b", _gqa_rows(with_mha=False))
    assert "no MHA cell" not in md and "| naive |" not in md and (out / "gqa.csv").is_file()
    said = "None of the 8 grouped-query cells (H = 8, H\\_kv = 1 or 2) has an ok MHA cell (H\\_kv = H) of its"
    assert md.count(said) == 1, md
    # where some shapes have it, the table keeps a row per cell, the missing ones said in it
    md, _ = _gqa_markdown(tmp_path, "c", [r for r in _gqa_rows() if r["d_k"] == 64 or r["kv_heads"] != 8])
    assert "no MHA cell (H\\_kv = H) of this shape in the run" in md
    assert "4 of 8 grouped-query cells have no ok MHA counterpart" in md


# ---- sliding window ------------------------------------------------------------------------------------

W = 64
NS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def test_local_slopes_of_an_n_times_min_n_w_law():
    times = [1e-3 * n * min(n, W) for n in NS]
    slopes = window.local_slopes(NS, times)
    assert [(a, b) for a, b, _ in slopes] == list(zip(NS, NS[1:], strict=False))
    for a, _b, s in slopes:
        assert s == pytest.approx(2.0 if a < W else 1.0)  # N² while N ≤ W, then N·W


def _window_rows():
    rows = []
    for n in NS:
        rows.append(synthetic.cell("chunked", n, causal=True, window=W, time_ms=1e-3 * n * min(n, W)))
        rows.append(synthetic.cell("chunked", n, causal=True, time_ms=1e-3 * n * n))
    return rows


def test_the_window_exponent_over_n_much_larger_than_w_is_near_1(tmp_path):
    df = results.load(synthetic.write_run(tmp_path / "run", _window_rows()))
    [(key, sub, plain)] = window.window_series(df)
    assert int(key["window"]) == W and plain is not None and set(plain["window"]) == {0}
    fit = window.window_fit(sub, W)
    assert fit.seq_lens == (256, 512, 1024, 2048, 4096)  # N ≥ 4W
    assert fit.exponent == pytest.approx(1.0, abs=0.05) and fit.ci_low - 0.01 < 1.0 < fit.ci_high + 0.01
    text = window.window_text("chunked", W, fit, None)
    assert re.fullmatch(
        r"chunked, window 64: exponent (0\.99|1\.0\d) \[(0\.9\d|1\.0\d), 1\.\d\d\] over N ≥ 4W "
        r"\(256–4096\)",
        text,
    )


def test_the_window_panel_in_the_report(tmp_path):
    import pandas as pd

    rep = render(prepare([synthetic.write_run(tmp_path / "run", _window_rows())]), tmp_path / "out")
    md = rep.readme.read_text()
    assert "## Sliding window: time against N" in md and "](window-cpu-float32-fwd.png)" in md
    line = r"- chunked, window 64: exponent (0\.99|1\.0\d) .* over N ≥ 4W .*; without a window: 2\.0\d"
    assert re.search(line, md)
    data = pd.read_csv(rep.out_dir / "window-cpu-float32-fwd.csv")
    win = data[data["window"] == W].set_index("seq_len")
    assert math.isnan(win.loc[16, "local_slope"]) and win.loc[32, "local_slope"] == pytest.approx(2, abs=0.05)
    assert win.loc[4096, "local_slope"] == pytest.approx(1, abs=0.05)
    assert data[data["window"] == 0]["local_slope"].dropna().to_numpy() == pytest.approx(2, abs=0.05)


# ---- a plain run shows no workload panel -------------------------------------------------------------

PLAIN_HEADINGS = [
    "# attnbench report: synthetic",
    "## Findings",  # first since issue 26, per panel (False sorts first)
    "### cpu · float32 · forward (d\\_k=64 · B=1 · H=8 · no padding) · non-causal",
    "### cpu · float32 · forward (d\\_k=64 · B=1 · H=8 · no padding) · causal",
    "## cpu · float32 · forward (d\\_k=64 · B=1 · H=8 · no padding)",  # then the figures (issue 38)
    "## Numerics",
    "## Scaling: fitted exponents vs theory",  # then the tables
    "## Fastest variant · cpu · float32 · forward (d\\_k=64 · B=1 · H=8 · no padding)",
    "## Runs",
    "## Cells that are not ok",
    "## Machine",
]  # the sections of a plain report: no workload panel's heading among them


def test_a_group_with_no_ok_cell_shows_its_status_figure_alone(tmp_path):
    """A kernel that raised in every cell: no empty time, memory or throughput axes, a sentence and the
    status figure that says why."""
    raised = "RuntimeError: kernel not built for this GPU"
    rows = [synthetic.cell("raiser", n, status="error", message=raised) for n in (64, 128)]
    rep = render(prepare([synthetic.write_run(tmp_path / "run", rows)]), tmp_path / "out")
    assert [f.stem for f in rep.figures if f.stem.endswith("-cpu-float32-fwd")] == ["status-cpu-float32-fwd"]
    assert "None of the 2 cells of this group ran ok: its status figure alone." in rep.readme.read_text()


def test_a_plain_run_shows_no_workload_panel(tmp_path):
    rows = []
    for causal in (True, False):
        rows += synthetic.power_law_rows(
            {"naive": (2, 2), "chunked": (2, 1)}, [256, 512, 1024, 2048], causal=causal
        )
    rep = render(prepare([synthetic.write_run(tmp_path / "run", rows)]), tmp_path / "out")
    # every cell ok: no status figure (it would be one colour), a sentence instead
    assert [f.stem for f in rep.figures] == [
        f"{k}-cpu-float32-fwd" for k in ("time", "memory", "throughput", "speedup")
    ]
    md = rep.readme.read_text()
    assert "All 16 cells of this group are ok: no status figure." in md
    assert [ln for ln in md.splitlines() if ln.startswith("#")] == PLAIN_HEADINGS
    assert sorted(p.name for p in rep.out_dir.glob("*.csv")) == sorted(
        [
            "best.csv",
            "fits.csv",
            "ranking.csv",  # every N's full ranking beside the best variant (issue 25)
            *[f"{k}-cpu-float32-fwd.csv" for k in ("time", "memory", "throughput", "speedup")],
        ]
    )
    header = (rep.out_dir / "time-cpu-float32-fwd.csv").read_text().splitlines()[0]
    assert header.startswith(
        "run_id,device,dtype,pass,causal,d_k,d_v,batch,heads,padding,dropout,variant,seq_len,"
    )
    assert "seq_k" not in (rep.out_dir / "best.csv").read_text().splitlines()[0]
    assert "seq_k" not in (rep.out_dir / "fits.csv").read_text().splitlines()[0]


# ---- real tiny runs through the CLI ------------------------------------------------------------------


@pytest.mark.slow  # two real runs (worker, calibration, numerics probe), then their report
def test_real_decode_gqa_and_window_runs_report(tmp_path):
    common = ["--budget-ms", "5", "--warmup-ms", "1", "--d-k", "16", "-q"]
    dec, win = tmp_path / "dec", tmp_path / "win"
    run_cli("run", "--variants", "naive,chunked", "--heads", "4", "--kv-heads", "4,2", "--seq-len", "1",
            "--seq-k", "64,128,256", "--causal", "lower-right", *common, "--out", str(dec),
            check=True)  # fmt: skip
    run_cli("run", "--variants", "chunked", "--heads", "2", "--seq-len", "32,64,128,256", "--causal", "yes",
            "--window", "0,16", *common, "--out", str(win), check=True)  # fmt: skip
    for run, kinds in ((dec, ("decode-time-", "decode-kv-gbps-")), (win, ("window-",))):
        out = tmp_path / f"report-{run.name}"
        proc = run_cli("report", str(run), "--out", str(out), timeout=300)
        assert proc.returncode == 0, proc.stderr
        for kind in kinds:
            assert any(out.glob(f"{kind}*.png")) and any(out.glob(f"{kind}*.csv")), kind
    md = (tmp_path / "report-dec" / "README.md").read_text()
    assert "K/V GB/s" in md and "Grouped-query attention against MHA" in md and "no MHA cell" not in md
    assert "exponent" in (tmp_path / "report-win" / "README.md").read_text()
