"""What the report's figures show a reader: marks no variant uses, series that do not hide each other,
axes and guides that fit the theory of their panel, titles that fit."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import synthetic
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex

from attnbench import results
from attnbench.reports import plots, style

SEQ = [256, 512, 1024, 2048]
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-small"


def _group(tmp_path, rows):
    return results.load(synthetic.write_run(tmp_path / "run", rows))


def _flagged_rows():
    rows = synthetic.power_law_rows({"stable_softmax": (2, 2), "sdpa_math": (2, 2), "naive": (2, 2)}, SEQ)
    for r in rows:
        r["speed_tflops"] = 0.5 if r["seq_len"] == 512 else 1.0  # half the run's usual speed: drift
        if r["seq_len"] == 1024:
            r["throttled"] = True
    return rows


def _rings(fig):
    return [c for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)]


def test_drift_rings_use_no_variant_colour_and_have_their_own_legend(tmp_path):
    df = _group(tmp_path, _flagged_rows())
    with style.palette(df["variant"].unique()):
        fig, _ = plots.time_figure(df, {}, "t")
        variant_colours = {style.variant_color(v) for v in df["variant"].unique()}
    rings = _rings(fig)
    assert rings, "the drifted and throttled cells are ringed"
    edge = {to_hex(c) for ring in rings for c in ring.get_edgecolors()}
    assert not edge & variant_colours
    # the rings are named in a legend of the figure's own, not in a panel's variant legend
    panel_labels = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()}
    assert plots.DRIFT_LABEL not in panel_labels and plots.THROTTLED_LABEL not in panel_labels
    ring_labels = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert {plots.DRIFT_LABEL, plots.THROTTLED_LABEL} <= ring_labels
    # the two kinds of ring differ in style, not only in size
    assert len({str(r.get_linestyle()) for r in rings}) == 2


def test_memory_figures_ring_nothing(tmp_path):
    df = _group(tmp_path, _flagged_rows())
    fig, _ = plots.memory_figure(df, {}, "m", None)
    assert not _rings(fig) and not fig.legends
    labels = {line.get_label() for ax in fig.axes for line in ax.get_lines()}
    assert not labels & {plots.DRIFT_LABEL, plots.THROTTLED_LABEL, plots.SUSPECT_LABEL}
    # ... and at most one line per variant (no hollow ring markers drawn as lines)
    assert len([ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "o"]) <= 1


def test_a_report_palette_keeps_neighbours_apart():
    # a varlen run's variants: plug-ins beside xformers' grey and stable_softmax's orange
    for names in (
        ["chunked", "flex", "sdpa_loop", "sdpa_padded", "varlen_attn", "xformers"],
        ["chunked", "flex", "naive", "sdpa_loop", "sdpa_padded", "stable_softmax"],
        ["sdpa", "sdpa_flash", "sdpa_math", "xformers", "naive", "chunked"],
    ):
        with style.palette(names) as colours:
            gaps = [style.color_distance(colours[a], colours[b]) for a, b in itertools.combinations(names, 2)]
        assert min(gaps) > 20, colours
    # the pale tints (a light grey, a peach) read as the built-in beside them
    assert style.color_distance("#7f7f7f", "#c7c7c7") < 25 and style.color_distance("#ff7f0e", "#ffbb78") < 20
    assert style.color_distance(style.variant_color("sdpa"), style.variant_color("sdpa_flash")) > 30


def test_a_series_under_another_is_named_in_the_legend(tmp_path):
    rows = [
        synthetic.cell(v, n, time_ms=k * n**2 / 1e5, peak_mem_bytes=2**10 * n**p)
        for v, k, p in (("sdpa", 1, 1), ("sdpa_flash", 3, 1), ("naive", 2, 2))
        for n in SEQ
    ]  # sdpa's bytes those of sdpa_flash, its times not
    fig, _ = plots.memory_figure(_group(tmp_path, rows), {}, "m", None)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("sdpa ") and "(= sdpa_flash, under it)" in t for t in labels), labels
    assert not any("under it" in t for t in labels if not t.startswith("sdpa "))
    fig, _ = plots.time_figure(_group(tmp_path / "t", rows), {}, "t")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert not any("under it" in t for t in labels)


def _decode_rows(tmp_path):
    rows = [
        synthetic.cell(v, 1, seq_k=n, time_ms=k * n / 1e3, peak_mem_bytes=2**12 * n, causal=True)
        for v, k in (("sdpa", 1.0), ("naive", 100.0))
        for n in SEQ
    ]
    return _group(tmp_path, rows)


def _notes(fig) -> set[str]:
    return {t.get_text() for ax in fig.axes for t in ax.texts}


def test_decode_bandwidth_is_on_a_log_axis_under_its_labelled_ceiling(tmp_path):
    from attnbench.reports.panels import decode

    fig, _ = decode.kv_bandwidth_figure(_decode_rows(tmp_path), "k", 50.0)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"  # a kernel 100x slower is not flat at 0
    assert any(t.startswith("calibrated copy bandwidth 50 GB/s") for t in _notes(fig))
    lo, hi = ax.get_ylim()
    assert hi > 50.0 and lo < min(
        min(line.get_ydata()) for line in ax.get_lines() if line.get_label() == "naive"
    )


def test_decode_figures_draw_the_linear_guide_and_never_n_squared(tmp_path):
    from attnbench.reports.panels import decode

    df = _decode_rows(tmp_path)
    for fig in (
        decode.decode_time_figure(df, "t")[0],
        plots.time_figure(df, {}, "t")[0],
        plots.memory_figure(df, {}, "m", None)[0],
    ):
        assert "∝N_k" in _notes(fig) and not {"∝N²", "∝N"} & _notes(fig)
    # a plain run keeps both guides
    plain = _group(tmp_path / "plain", synthetic.power_law_rows({"naive": (2, 2)}, SEQ))
    assert {"∝N", "∝N²"} <= _notes(plots.time_figure(plain, {}, "t")[0])


LONG = (
    "K/V read bandwidth · cuda · bfloat16 · forward (causal · d_k=128 · B=32 · H=32 · no padding · H_kv=8 · "
    "lower-right causal · uniform lengths)"
)


def test_a_long_title_fits_the_figure_wrapped_at_its_separators_without_repeats(tmp_path):
    from matplotlib.backends.backend_agg import RendererAgg

    fig, data = plots.time_figure(
        _group(tmp_path, synthetic.power_law_rows({"naive": (2, 2)}, SEQ)), {}, LONG
    )
    style.save(fig, data, tmp_path, "t", "t")
    text = fig._suptitle.get_text()
    lines = text.split("\n")
    assert len(lines) > 1 and "lower-right causal" in lines[-1]  # not 'lower-right' / 'causal'
    assert lines[0] == "K/V read bandwidth · cuda · bfloat16 · forward"  # broken before the '('
    assert "(causal ·" not in text and text.count("causal") == 1  # said once, by its alignment
    box = fig._suptitle.get_window_extent(RendererAgg(fig.bbox.width, fig.bbox.height, fig.dpi))
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_a_title_drops_what_does_not_apply():
    assert style.trim_title("Packed · fwd (causal · B=16 · no padding)", drop=("no padding",)) == (
        "Packed · fwd (causal · B=16)"
    )
    assert style.trim_title("t (a · causal · b)") == "t (a · causal · b)"  # nothing repeats it


def test_the_speed_up_colour_bar_reads_as_fractions(tmp_path):
    rows = [
        synthetic.cell(v, n, time_ms=k * n**2 / 1e5, peak_mem_bytes=n)
        for v, k in (("naive", 1.0), ("sdpa", 1 / 64), ("chunked", 64.0))
        for n in SEQ
    ]
    fig, _ = plots.speedup_figure(_group(tmp_path, rows), "s", "naive")
    bar = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"][0]
    ticks = [t.get_text() for t in bar.get_yticklabels()]
    assert "1/64×" in ticks and "64×" in ticks and "1×" in ticks
    assert not any(t.startswith("0.") for t in ticks)


def _packed(tmp_path, rates):
    import json

    rows = []
    for pattern in ("longtail", "bimodal", "constant", "uniform"):  # not in their order
        for variant, rate in rates.items():
            for n in (256, 512):
                row = synthetic.cell(variant, n, batch=2, time_ms=1e3 / rate)
                row.update(cell_id=f"{row['cell_id']}-{pattern}", lengths=pattern,
                           seq_lens=json.dumps([n, n]), executed_flops=row["flops"])  # fmt: skip
                rows.append(row)
    return _group(tmp_path, rows)


def test_packed_panels_and_bars_follow_the_pattern_order_and_a_tiny_bar_has_its_value(tmp_path):
    from attnbench.reports.panels import varlen

    df = _packed(tmp_path, {"flex": 500.0, "chunked": 2.0})
    fig, _ = plots.time_figure(df, {}, "t")
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [
        f"{p} lengths" for p in ("constant", "uniform", "bimodal", "longtail")
    ]
    fig, _ = varlen.varlen_figure(df, "v")
    ax = fig.axes[0]
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == [
        "constant",
        "uniform",
        "bimodal",
        "longtail",
    ]
    assert any(
        "TFLOP/s" in t.get_text() for t in ax.texts
    )  # chunked's bar, 250x below flex's, says its value


def test_a_history_series_figure_names_its_axes_and_its_colours_on_one_y_range(tmp_path, monkeypatch):
    import pandas as pd
    from matplotlib.colors import to_hex

    from attnbench.reports import dashboard

    rows = [
        {"variant": v, "seq_len": n, "cell_id": f"{v}-n{n}", "created": f"2026-01-0{r}", "run_id": f"r{r}",
         "run_key": f"r{r}", "time_ms_median": n * (1 + (0.5 if v == "naive" and r == 3 else 0.01 * r))}
        for v in ("naive", "sdpa_cudnn") for n in (256, 1024) for r in (1, 2, 3)
    ]  # fmt: skip
    drawn = {}
    monkeypatch.setattr(dashboard, "save", lambda fig, *a, **k: drawn.setdefault("fig", fig))
    dashboard.series_figure("m", pd.DataFrame(rows), [], {f"r{r}": r for r in (1, 2, 3)}, tmp_path, "t")
    fig = drawn["fig"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["naive", "sdpa_cudnn"]
    assert {to_hex(ax.title.get_color()) for ax in panels} == {"#000000"}  # not a pale variant colour
    assert panels[0].get_ylabel()
    assert panels[0].get_ylim() == panels[1].get_ylim()  # naive's 1.5x does not rescale one panel alone
    bar = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"][0]
    assert [t.get_text() for t in bar.get_yticklabels()] == ["256", "1k"]


def test_decode_speed_against_accuracy_plots_gb_s_on_one_scale(tmp_path):
    from attnbench.reports.panels import accuracy

    rows = [
        synthetic.cell(
            v, 1, seq_k=n, time_ms=k * n / 1e3, causal=causal, rel_err=1e-3, causal_align="lower-right"
        )
        for causal, slow in ((False, 100.0), (True, 1.5))  # one panel 100x apart, the other not
        for v, k in (("sdpa", 1.0), ("naive", slow))
        for n in SEQ
    ]
    fig, data = accuracy.accuracy_figure(_group(tmp_path, rows), "a")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2
    assert all("GB/s" in ax.get_ylabel() for ax in panels)  # a decode step's speed is its K/V read rate
    assert {ax.get_yscale() for ax in panels} == {"log"} and panels[0].get_ylim() == panels[1].get_ylim()
    assert "kv_gbps" in data.columns


def test_the_speed_up_map_is_over_sdpa_where_it_ran_ok_else_naive():
    """Over naive, naive's own odd cells (H100: 76 -> 110 TFLOP/s from 8k to 16k) made every row dip."""
    import pandas as pd

    from attnbench.reports.render import resolve_baseline

    df = pd.DataFrame({"variant": ["naive", "sdpa", "flex"], "status": ["ok", "ok", "ok"]})
    assert resolve_baseline(df, None) == "sdpa" and resolve_baseline(df, "flex") == "flex"
    df.loc[df["variant"] == "sdpa", "status"] = "unsupported"
    assert resolve_baseline(df, None) == "naive"


def test_a_legend_gives_an_exponent_only_where_the_findings_do_and_with_its_ci(tmp_path):
    """The trial's time figure said 'chunked N^4.78' and 'flex N^0.17' for series whose findings said
    their growth was not measured (CI too wide to say): a reader of the figure took N^4.78 away. The legend
    follows the text: naive's N² with its CI, chunked's scattered times and sdpa's two N with no exponent,
    and why, in the findings' words; the memory legend likewise."""
    from attnbench.reports import fit
    from attnbench.reports.render import findings_of, prepare

    rows = []
    for i, n in enumerate(SEQ):
        x = n / 256
        rows.append(synthetic.cell("naive", n, time_ms=x**2, peak_mem_bytes=2**20 * n))
        rows.append(synthetic.cell("chunked", n, time_ms=x**2 * (1, 3, 0.4, 2)[i], peak_mem_bytes=2**20 * n))
        if n >= 1024:
            rows.append(synthetic.cell("sdpa", n, time_ms=0.5 * x**2, peak_mem_bytes=2**20 * n))
    run = synthetic.write_run(tmp_path / "run", rows)
    df = results.load(run)
    scaling = fit.scaling_table(df, results.load_meta(run))
    fits = fit.fit_index(scaling)
    legend = [t.get_text() for t in plots.time_figure(df, fits, "t")[0].axes[0].get_legend().get_texts()]
    by = {t.split()[0]: t for t in legend}
    naive = scaling.set_index("variant").loc["naive"]
    assert (
        by["naive"]
        == f"naive  N^{naive['time_exp']:.2f} [{naive['time_ci_low']:.2f}, {naive['time_ci_high']:.2f}]"
    )
    assert by["chunked"] == "chunked  growth not measured (CI too wide to say)", legend
    assert by["sdpa"] == "sdpa  growth not measured (two N)", legend
    said = " ".join(s for p in findings_of(prepare([run])).panels for s in p.sentences)
    assert "naive: time grows as N^" in said and "chunked (CI too wide to say)" in said, said
    assert "sdpa (two N)" in said, said
    memory = [
        t.get_text() for t in plots.memory_figure(df, fits, "m", None)[0].axes[0].get_legend().get_texts()
    ]
    assert next(t for t in memory if t.startswith("sdpa")) == "sdpa  growth not measured (two N)", memory
    assert next(t for t in memory if t.startswith("naive")).startswith("naive  N^1.00 ["), memory
    # the test run's ten variants: their labels this long in two columns collapsed the axes, and the figure
    # was saved with no layout at all (no legend to be seen)
    fixture = results.load(FIXTURE)
    fits = fit.fit_index(fit.scaling_table(fixture, results.load_meta(FIXTURE)))
    for figure in (plots.time_figure, lambda *a: plots.memory_figure(*a, None)):
        fig, data = figure(fixture, fits, "t")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            style.save(fig, data, tmp_path / "fixture", "figure", "t")


def test_a_window_panels_caption_says_how_a_window_kernels_work_grows(tmp_path):
    """The time figure's window panels draw the ∝N and ∝N² guides; the caption says which a window's work
    follows (N² while N ≤ W, N·W once N ≫ W), and only where a window's cells are drawn."""
    from attnbench.reports import fit
    from attnbench.reports.render import group_figures

    rows = [
        synthetic.cell("chunked", n, time_ms=n / 256, causal=True, window=w) for n in SEQ for w in (0, 64)
    ]
    run = synthetic.write_run(tmp_path / "run", rows)
    df, meta = results.load(run), results.load_meta(run)
    fits = fit.fit_index(fit.scaling_table(df, meta))
    key = {"device": "cpu", "dtype": "float32"}
    ((_, _, _, caption),) = group_figures(key, df, meta["synthetic"], fits, None, "h", kinds=("time",))
    assert "N·W (∝N) once N ≫ W" in caption and "95% CI" in caption, caption
    plain = df[df["window"] == 0]
    ((_, _, _, caption),) = group_figures(key, plain, meta["synthetic"], fits, None, "h", kinds=("time",))
    assert "N·W" not in caption, caption
