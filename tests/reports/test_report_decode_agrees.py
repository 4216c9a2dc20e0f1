"""A decode (paged) report that agrees with itself: the theory of a decode series is the work its shape
does (linear in N_k), one fitted exponent per series in every figure, table and sentence, the drifted cells
ringed in the decode figures as the text says, and the length axis named for what it is."""

from __future__ import annotations

import re

import synthetic
from matplotlib.collections import PathCollection

from attnbench import results
from attnbench.reports import fit as fitmod
from attnbench.reports import plots
from attnbench.reports.panels import decode
from attnbench.reports.render import prepare, render, summary_table

NK = [256, 512, 1024, 2048, 4096, 8192]


def _decode_rows(drift_at: int | None = None) -> list[dict]:
    """naive (quadratic class) and chunked (linear) decode steps, 1 query against N_k keys: time bends from
    a constant towards ∝ N_k, so a fit over every point and one over the top octaves differ; memory ∝ N_k."""
    rows = []
    for v, base in (("naive", 0.5), ("chunked", 0.2)):
        for nk in NK:
            row = synthetic.cell(
                v, 1, seq_k=nk, causal=True, causal_align="lower-right", kv_heads=2,
                time_ms=base * (1 + nk / 1024), peak_mem_bytes=2**16 * nk // 256,
                speed_tflops=0.5 if nk == drift_at else 1.0,
            )  # fmt: skip
            rows.append(row)
    return rows


def test_a_decode_series_is_held_to_linear_work_and_its_table_names_n_k(tmp_path):
    """A decode cell (a few queries against N_k keys) does work linear in N_k: its time theory is N_k, and a
    quadratic variant's N_q × N_k scores grow as N_k too; a square series keeps N²."""
    df = results.load(synthetic.write_run(tmp_path / "run", _decode_rows()))
    metas = results.load_meta(tmp_path / "run")
    table = fitmod.scaling_table(df, metas).set_index("variant")
    for v in ("naive", "chunked"):
        assert table.loc[v, "time_theory"] == 1.0 and table.loc[v, "mem_theory"] == 1.0, table.loc[v]
        assert table.loc[v, "time_agreement"] == "agrees" and table.loc[v, "mem_agreement"] == "agrees"
    shown = summary_table(fitmod.scaling_table(df, metas))
    assert "largest N_k measured" in shown.headers and "largest N measured" not in shown.headers
    row = {r[0]: dict(zip(shown.headers, r, strict=True)) for r in shown.rows}["naive"]
    assert row["theory"] == "N_k (N_q × N_k scores)" and row["largest N_k measured"] == "8,192", row
    square = results.load(
        synthetic.write_run(tmp_path / "sq", synthetic.power_law_rows({"naive": (2, 2)}, [256, 512, 1024]))
    )
    sq = fitmod.scaling_table(square, results.load_meta(tmp_path / "sq")).iloc[0]
    assert sq["time_theory"] == 2.0 and sq["mem_theory"] == 2.0


def _legend_exponents(fig) -> dict[str, str]:
    texts = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return dict(re.match(r"(\S+)\s+N_k\^(\S+)", t).groups() for t in texts if "N_k^" in t)


def test_a_decode_series_has_one_fitted_exponent_in_every_figure_and_sentence(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _decode_rows())
    rep = render(prepare([run]), tmp_path / "out")
    df, metas = results.load(run), results.load_meta(run)
    fits = fitmod.scaling_table(df, metas).set_index("variant")
    expected = {v: f"{fits.loc[v, 'time_exp']:.2f}" for v in ("naive", "chunked")}
    # the decode figure, made as the report makes it, and the time figure give the table's exponent
    assert _legend_exponents(decode.decode_time_figure(df, "t")[0]) == expected
    assert _legend_exponents(plots.time_figure(df, fitmod.fit_index(fits.reset_index()), "t")[0]) == expected
    said = " ".join(s for p in rep.findings.panels for s in p.sentences)
    for v, e in expected.items():
        assert f"{v}: time grows as N_k^{e}" in said, said
    # and the decode panel's N is N_k in its findings, never a bare N
    assert not re.search(r"\bN\b", said), said


def test_the_decode_figures_ring_the_drifted_cells_as_the_text_says(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _decode_rows(drift_at=2048))
    df = results.load(run)
    assert df["drift"].sum() == 2
    for fig in (decode.decode_time_figure(df, "t")[0], decode.kv_bandwidth_figure(df, "k", 10.0)[0]):
        rings = [c for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)]
        assert sum(len(r.get_offsets()) for r in rings) == 2, fig
        assert plots.DRIFT_LABEL in {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    md = render(prepare([run]), tmp_path / "out").readme.read_text()
    assert "orange" not in md and "in red" not in md and "ringed with a dashed circle" in md
    # 'causal' is said once beside 'lower-right causal', in every heading
    headings = [line for line in md.splitlines() if line.startswith("#") and "lower-right causal" in line]
    assert headings and not any(re.search(r"[(·] causal ·", h) for h in headings), headings


def test_the_speed_accuracy_table_of_a_decode_run_shows_what_its_figure_draws(tmp_path):
    """The figure's y is K/V GB/s and its length N_k: the 'points drawn' table says the same, not TFLOP/s
    at N = 1 (the queries)."""
    from attnbench.reports.panels import accuracy

    rows = [{**r, "rel_err": 1e-7} for r in _decode_rows()]
    run = synthetic.write_run(tmp_path / "run", rows)
    df = results.load(run)
    table = accuracy.accuracy_table(accuracy.points(df), accuracy.speed_of(df)[0])
    assert table.headers[2:4] == ("N_k", "K/V GB/s"), table.headers
    drawn = accuracy.accuracy_figure(df, "a")[1]
    for r in table.rows:
        point = drawn[drawn["variant"] == r[0]].iloc[0]
        assert r[2] == "8,192" and float(r[3]) == float(f"{point['kv_gbps']:.3g}"), (r, point)
    md = render(prepare([run]), tmp_path / "out").readme.read_text()
    part = md.split("## Speed against accuracy: the points drawn")[1]
    assert "| N\\_k | K/V GB/s |" in part and "| TFLOP/s |" not in part


def test_a_decode_panels_findings_say_its_kv_read_as_its_table_has_it():
    """The decode figure of merit in the findings, as the bandwidth table has it: each variant's K/V GB/s at
    its largest N_k and its % of the calibrated copy bandwidth, fastest first (the paged preset's report
    named only who was fastest, not how near the memory it ran)."""
    from conftest import ROOT

    from attnbench.reports.render import findings_of
    from attnbench.reports.tables import groups, panels

    run = ROOT / "results" / "reference" / "paged-epyc-2core"
    inputs = prepare([run])
    said = [s for p in findings_of(inputs).panels for s in p.sentences if "K/V is read at: " in s]
    pans = [(gkey, rows) for gkey, group in groups(inputs.df) for _k, _t, rows in panels(group)]
    assert len(said) == len(pans) == 2
    for text, (gkey, rows) in zip(said, pans, strict=True):
        copy = decode.copy_of(gkey, rows, inputs.metas)
        table = decode.decode_table(rows, copy).sort_values("kv_gbps", ascending=False)
        assert copy and f"t N_k = {int(table['seq_k'].max()):,} (N_q = 1), K/V is read at: " in text
        named = re.findall(r"([a-z_]+) ([\d.]+) GB/s, ([\d.]+)%", text)
        assert [n for n, _g, _p in named] == list(table["variant"])
        for (_n, gb, pct), (_, r) in zip(named, table.iterrows(), strict=True):
            assert float(gb) == float(f"{r['kv_gbps']:.3g}") and float(pct) == float(
                f"{r['pct_of_copy']:.2g}"
            )


def test_one_decode_rule_for_a_cell_and_for_a_table(tmp_path):
    """results.formulas.is_decode is the one rule: a cell's two lengths give a bool, a loaded run's columns
    the decode panel's rows, and the two agree row by row; a length not known (pandas' NA, NaN, None: a
    row from before seq_k) is no decode step, in a column of either dtype."""
    import pandas as pd

    from attnbench.results.formulas import is_decode, speed

    rows = _decode_rows() + [synthetic.cell("naive", 256, time_ms=1.0)]  # one square cell beside them
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    panel = decode.decode_rows(df)
    assert len(panel) == len(rows) - 1 and (panel["seq_len"] == 1).all()
    for _, r in df.iterrows():
        row = r.to_dict()
        assert is_decode(row["seq_len"], row["seq_k"]) == (r.name in panel.index)
        assert speed(row)[1] == ("K/V GB/s" if r.name in panel.index else "TFLOP/s")
    assert is_decode(1, 4096) and not is_decode(64, 64)
    assert not is_decode(64, None) and not is_decode(64, float("nan")) and not is_decode(64, pd.NA)
    for n_k in (pd.array([4096, None, 64], dtype="Int64"), [4096.0, float("nan"), 64.0]):
        table = pd.DataFrame({"seq_len": [1, 1, 64], "seq_k": n_k})
        assert is_decode(table["seq_len"], table["seq_k"]).tolist() == [True, False, False]
        assert decode.decode_rows(table).index.tolist() == [0]


def test_a_paged_runs_findings_compare_page_sizes_and_its_table_gives_decode_tokens_per_s(tmp_path):
    """Trial V (L2): page size is a section of its own ('pages of 32', 'pages of 256'), yet no finding
    compared them, and the rows' tokens_per_s (what a server reports) was in no table. Now one sentence per
    N_q gives each variant's K/V GB/s in its fastest page size over its slowest at the largest N_k, in the
    digits the cells' spread supports and under the busy-machine prefix, and the decode table has tokens/s."""
    from conftest import ROOT

    from attnbench.reports import findings as findmod
    from attnbench.reports import page as pg
    from attnbench.reports.render import findings_of
    from attnbench.results.formulas import ratio_number, ratio_spread

    inputs = prepare([ROOT / "results" / "reference" / "paged-epyc-2core"])
    [pages] = [p for p in findings_of(inputs).panels if p.title.endswith(" · page sizes")]
    [text] = pages.sentences
    assert text.startswith(findmod.SHAKY + "at N_k = 4,096 (N_q = 1), by page size: "), text  # a busy run
    top = inputs.df[(inputs.df["seq_k"] == 4096) & (inputs.df["status"] == "ok")].set_index(
        ["variant", "page_size"]
    )
    for variant in ("paged_chunked", "paged_flex", "paged_gather"):
        a, b = top.loc[(variant, 256)], top.loc[(variant, 32)]
        fast, slow = (a, b) if a["time_ms_median"] < b["time_ms_median"] else (b, a)
        ratio = ratio_number(
            slow["time_ms_median"] / fast["time_ms_median"], ratio_spread(fast["rel_iqr"], slow["rel_iqr"])
        )
        sizes = f"pages of {fast.name[1]:,} than of {slow.name[1]:,}"
        assert f"{variant} reads K/V {ratio}× faster in {sizes}" in text, (variant, text)
    assert "paged_flex reads K/V 2.48× faster in pages of 256 than of 32" in text
    # two cells not told apart: 'as fast in pages of 32 as of 256', the smaller first
    df = inputs.df.copy()
    at = (df["variant"] == "paged_gather") & (df["seq_k"] == 4096)
    same = df[at & (df["page_size"] == 32)].iloc[0].copy()
    same["page_size"] = 256
    df.loc[df.index[at & (df["page_size"] == 256)][0]] = same
    [(tied, _)] = decode.page_sentences(df)
    assert "paged_gather reads K/V as fast in pages of 32 as of 256 (within the spread)" in tied, tied
    # one page size: nothing to compare
    one = inputs.df[inputs.df["page_size"] == 32]
    assert decode.page_sentences(one) == []
    section = decode.section(inputs.df, inputs.metas, tmp_path)
    [table] = [b for b in section.tables if isinstance(b, pg.Table)]
    assert table.headers[-1] == "tokens/s" and "tokens/s" in table.caption
    from attnbench.reports.section import rate_text  # after the findings: a name the code before had not

    # every series' largest N_k is 4,096: its tokens/s (B · N_q over the median time) in the table
    assert sorted((r[0], r[-1]) for r in table.rows) == sorted(
        (variant, rate_text(r["tokens_per_s"])) for (variant, _size), r in top.iterrows()
    )
    assert {r[-1] for r in table.rows} >= {"460", "550"}  # paged_gather in pages of 32, paged_flex of 256
