"""The packed variable-length panel (issue 39): useful and executed TFLOP/s per length pattern, executed /
useful split into the padding tax and the rest in its table and its findings, padded SDPA against the
kernels that execute only the useful pairs, and nothing at all in a run without packed cells."""

from __future__ import annotations

import json

import pytest
import synthetic

from attnbench.reports.panels import varlen
from attnbench.reports.render import prepare, render
from attnbench.results.formulas import attention_flops

B, N, H, D = 8, 512, 8, 64
LENGTHS = {  # every pattern holds T = B · N = 4,096 tokens
    "constant": [512] * 8,
    "uniform": [128, 256, 384, 512, 640, 768, 896, 512],
    "longtail": [100] * 7 + [3396],
}
# executed FLOP/s of each kernel, and what it executes: the padded kernel B · max L² pairs, the masked dense
# kernel T², the loop over the sequences only the useful pairs. Fastest: padded on constant lengths, the loop
# on uniform ones, the masked kernel on longtail ones (where padding to 3,396 costs 8x the useful work)
RATES = {"sdpa_padded": 2e12, "sdpa_masked": 2e12, "sdpa_loop": 1e12}
FASTEST = {"constant": "sdpa_padded", "uniform": "sdpa_loop", "longtail": "sdpa_masked"}


def _flops(batch: int, n: int) -> int:
    return attention_flops(batch, H, n, n, D, D, causal=False)


def _executed(variant: str, lens: list[int]) -> int:
    if variant == "sdpa_padded":
        return _flops(len(lens), max(lens))
    if variant == "sdpa_masked":
        return _flops(1, sum(lens))
    return sum(_flops(1, n) for n in lens)


def packed_rows(seq_lens_as_text: bool = False) -> list[dict]:
    """3 variants × 3 patterns at B = 8, mean N = 512: flops from the real lengths, executed_flops per
    kernel."""
    rows = []
    for pattern, lens in LENGTHS.items():
        useful = sum(_flops(1, n) for n in lens)
        for variant, rate in RATES.items():
            executed = _executed(variant, lens)
            t = executed / rate * 1e3
            row = synthetic.cell(variant, N, batch=B, heads=H, d_k=D, time_ms=t)
            row.update(cell_id=f"{row['cell_id']}-{pattern}", lengths=pattern, executed_flops=executed,
                       flops=useful, tflops=useful / (row["time_ms_median"] * 1e-3) / 1e12,
                       seq_lens=json.dumps(lens) if seq_lens_as_text else lens)  # fmt: skip
            rows.append(row)
    return rows


def plain_rows() -> list[dict]:
    """Ordinary cells beside the packed ones: lengths 'none'."""
    return [
        {**synthetic.cell(v, n, batch=B, heads=H, d_k=D, time_ms=1e-3 * n), "lengths": "none"}
        for v in ("naive", "chunked")
        for n in (256, 512)
    ]


def _inputs(tmp_path, rows):
    """The report's inputs, with the packed columns the loader does not know yet put back by cell_id (as
    the loader will give them once `lengths` is an axis)."""
    import pandas as pd

    inputs = prepare([synthetic.write_run(tmp_path / "run", rows, peak_tflops=100.0)])
    extra = pd.DataFrame(rows).set_index("cell_id")
    for col in ("lengths", "seq_lens", "executed_flops", "flops", "tflops"):
        if col in extra.columns:
            inputs.df[col] = inputs.df["cell_id"].map(extra[col])
    return inputs


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("varlen")
    inputs = _inputs(tmp, packed_rows() + plain_rows())
    return render(inputs, tmp / "out"), inputs.df


def _table(md: str) -> dict[tuple[str, str], list[str]]:
    """The padding-tax table's rows by (variant, pattern)."""
    part = md.split("## Packed variable-length batches: the work executed, the padding tax and the rest")[1]
    out = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| sdpa\\_") and len(cells) == 12:
            out[(cells[0].replace("\\_", "_"), cells[1])] = cells
    return out


def test_the_figure_and_its_data_are_written(report):
    import pandas as pd

    rep, _ = report
    [fig] = [f for f in rep.figures if f.stem.startswith("varlen-")]
    assert fig.stem == "varlen-cpu-float32-fwd"
    for name in (fig.png, fig.svg):
        assert (rep.out_dir / name).stat().st_size > 10_000
    data = pd.read_csv(rep.out_dir / fig.csv)
    assert len(data) == 9 and set(data["pattern"]) == set(LENGTHS)
    assert data["useful_tflops"].to_numpy() == pytest.approx(
        (data["flops"] / data["time_ms_median"] / 1e9).to_numpy()
    )
    assert data["tax"].to_numpy() == pytest.approx((data["executed_flops"] / data["flops"]).to_numpy())
    assert [json.loads(s) for s in data[data["variant"] == "sdpa_loop"]["seq_lens"]] == list(LENGTHS.values())
    md = rep.readme.read_text()
    assert "## Packed variable-length batches: useful TFLOP/s per length pattern" in md
    assert "](varlen-cpu-float32-fwd.png)" in md


def test_the_table_has_every_cell_and_its_padding_tax(report):
    rep, df = report
    table = _table(rep.readme.read_text())
    assert len(table) == 9
    for pattern, lens in LENGTHS.items():
        useful = sum(_flops(1, n) for n in lens)
        for variant in RATES:
            cells = table[(variant, pattern)]
            row = df[(df["variant"] == variant) & (df["lengths"] == pattern)].iloc[0]
            t = float(row["time_ms_median"])
            assert cells[2:5] == ["8", "512", f"{max(lens):,}"]
            assert float(cells[5]) == pytest.approx(useful / t / 1e9, rel=5e-3)
            assert float(cells[6]) == pytest.approx(_executed(variant, lens) / t / 1e9, rel=5e-3)
            assert cells[7] == f"{_executed(variant, lens) / useful:.2f}×"  # executed / useful
            # split: the padding tax (a padded kernel's alone) times the rest
            padding = len(lens) * max(lens) ** 2 / sum(n * n for n in lens) if variant == "sdpa_padded" else 1
            assert cells[8:10] == [f"{padding:.2f}×", f"{_executed(variant, lens) / useful / padding:.2f}×"]
    assert table[("sdpa_padded", "longtail")][7:10] == ["7.95×", "7.95×", "1.00×"]
    assert table[("sdpa_masked", "constant")][7:10] == [
        "8.00×",
        "1.00×",
        "8.00×",
    ]  # no padding: the pack's T²
    assert table[("sdpa_loop", "uniform")][7:10] == ["1.00×"] * 3
    # patterns in their order, whatever the rows' order
    order = [k[1] for k in table]
    assert order == sorted(order, key=list(LENGTHS).index)


def test_findings_name_the_fastest_per_pattern_and_the_padding_tax(report):
    rep, _ = report
    [found] = [p for p in rep.findings.panels if p.title.endswith("packed variable-length batches")]
    assert len(found.sentences) == 3
    maxes = {p: f"{max(lens):,}" for p, lens in LENGTHS.items()}
    for sentence, (pattern, best) in zip(found.sentences, FASTEST.items(), strict=True):
        assert sentence.startswith(
            f"On {pattern} lengths (B=8, mean N=512, max L={maxes[pattern]}) {best} is fastest at "
        ), sentence
    # per pattern, padded SDPA against the one call per sequence, with its padding tax, then the variant
    # that executes the most beyond the useful work, what it is named
    assert found.sentences[2].endswith(
        "; sdpa_padded takes 4.00× the time of sdpa_loop, the fastest variant that executes only the useful "
        "pairs (a padding tax of 7.95×); sdpa_masked executes 1.4× the useful work (none of it padding: the "
        "whole pack's T² scores under a block-diagonal mask)."
    ), found.sentences[2]
    assert "sdpa_padded takes 1.26× the time of sdpa_loop" in found.sentences[1], found.sentences[1]
    # constant lengths: no padding, but a block-diagonal mask over the whole batch still computes T² pairs
    said = (
        "; sdpa_padded takes 0.50× the time of sdpa_loop, the fastest variant that executes only the useful "
    )
    assert said + "pairs (no padding tax, no sequence being shorter than max L);" in found.sentences[0]
    tail = (
        "sdpa_masked executes 8.0× the useful work (none of it padding: the whole pack's T² scores under a "
        "block-diagonal mask) and runs at 0.13× the useful TFLOP/s of sdpa_padded."
    )
    assert found.sentences[0].endswith(tail), found.sentences[0]
    assert "packed variable-length batches" in rep.readme.read_text()


def test_a_lead_is_said_in_the_digits_its_cells_spread_supports(tmp_path):
    """'1.52× ahead' off two cells spread ±20% read as measured to the hundredth: the panel's lead says the
    digits its cells' spread supports, as the findings' leads do (results.formulas.ratio_number)."""
    from attnbench import results

    lens = LENGTHS["uniform"]
    useful = sum(_flops(1, n) for n in lens)
    rows = []
    for variant, t in (("sdpa_loop", 100.0), ("flex", 152.0)):  # slow enough to be believed
        wide = [t * (0.8 + 0.4 * i / 99) for i in range(100)]  # rel_iqr 0.2: the lead's spread ±20%
        row = synthetic.cell(variant, N, batch=B, heads=H, d_k=D, sample_ms=wide)
        row.update(cell_id=f"{row['cell_id']}-uniform", lengths="uniform", flops=useful,
                   executed_flops=useful, seq_lens=lens)  # fmt: skip
        rows.append(row)
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    [sentence] = varlen.sentences(df)
    assert "sdpa_loop is fastest at " in sentence and ", 1.5× ahead of flex." in sentence, sentence


def test_seq_lens_as_json_text_give_the_same_numbers():
    import pandas as pd

    as_list = varlen.varlen_rates(pd.DataFrame(packed_rows()))
    as_text = varlen.varlen_rates(pd.DataFrame(packed_rows(seq_lens_as_text=True)))
    assert list(as_text["max_len"]) == list(as_list["max_len"]) and set(as_list["tokens"]) == {B * N}
    assert varlen.seq_lens_of("[1, 2]") == [1, 2] and varlen.seq_lens_of(None) is None


def test_patterns_in_their_order_with_caps_and_others_last():
    names = ["weird", "longtail", "uniform:2048", "bimodal", "uniform", "constant", "uniform:512"]
    assert varlen.pattern_order(names) == [
        "constant", "uniform", "uniform:512", "uniform:2048", "bimodal", "longtail", "weird",
    ]  # fmt: skip


@pytest.mark.parametrize("column", ["none", "missing"])
def test_a_run_without_packed_cells_adds_nothing(tmp_path, column):
    import pandas as pd

    rows = plain_rows() if column == "none" else [{k: v for k, v in r.items() if k != "lengths"}
                                                  for r in plain_rows()]  # fmt: skip
    df = pd.DataFrame(rows)
    assert varlen.section(df, {"synthetic": {}}, tmp_path).figures == []
    assert varlen.sentences(df) == []
    rep = render(_inputs(tmp_path, rows), tmp_path / "out")
    assert not list(rep.out_dir.glob("varlen-*"))
    assert "Packed variable-length" not in rep.readme.read_text()
    assert not [p for p in rep.findings.panels if "packed" in p.title]


def test_the_one_legend_names_a_variant_absent_from_the_last_panel_and_a_long_title_wraps(tmp_path):
    """On an H200 the memory guard skipped sdpa_padded and sdpa_loop at the largest mean length: the legend,
    drawn under the last panel, named neither; and the group heading of a run with many axes ran past both
    edges of the figure."""
    import pandas as pd
    from matplotlib.backends.backend_agg import RendererAgg

    from attnbench.reports.style import save

    rows = packed_rows()
    for row in [dict(r) for r in rows if r["variant"] != "sdpa_padded"]:  # mean N = 1,024 without it
        lens = [2 * n for n in row["seq_lens"]]
        row.update(seq_len=2 * N, seq_k=2 * N, seq_lens=lens, cell_id=row["cell_id"] + "-2n")
        rows.append(row)
    title = "Packed variable-length batches · " + " · ".join(f"axis {i}=value {i}" for i in range(16))
    fig, data = varlen.varlen_figure(pd.DataFrame(rows), title)
    last = fig.axes[-1]
    assert "sdpa_padded" not in set(pd.DataFrame(rows)[lambda d: d.seq_len == 2 * N]["variant"])
    assert {"sdpa_padded", "sdpa_loop", "sdpa_masked"} <= {
        t.get_text() for t in last.get_legend().get_texts()
    }
    save(fig, data, tmp_path, "varlen", "title")
    wrapped = fig._suptitle
    assert "\n" in wrapped.get_text() and wrapped.get_text().replace("\n", " ") == title
    renderer = RendererAgg(fig.bbox.width, fig.bbox.height, fig.dpi)
    assert wrapped.get_window_extent(renderer).width <= fig.bbox.width


def test_a_drifted_packed_cell_is_ringed_at_its_bar_as_the_time_figure_rings_it():
    """A packed cell measured while the machine ran slower (its speed probe off the run's) is drawn with a
    drift ring at its useful bar's top and the rings' legend below, as the time figure marks it: a
    single-pass varlen run on a busy machine showed a drifted loop's bar as any other."""
    import pandas as pd
    from matplotlib.collections import PathCollection

    from attnbench.reports import plots

    rows = pd.DataFrame(packed_rows())
    drifted = (rows["variant"] == "sdpa_loop") & (rows["lengths"] == "uniform")
    rows["drift"] = drifted
    rated = varlen.varlen_rates(rows)
    fig, _ = varlen.varlen_figure(rows, "t")
    rings = [c for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)]
    assert len(rings) == 1 and {t.get_text() for leg in fig.legends for t in leg.get_texts()} == {
        plots.DRIFT_LABEL
    }
    ((x, y),) = rings[0].get_offsets()
    assert y == pytest.approx(float(rated[rated["variant"].eq("sdpa_loop") & rated["pattern"].eq("uniform")][
        "useful_tflops"].iloc[0]))  # fmt: skip
    clean, _ = varlen.varlen_figure(rows.assign(drift=False), "t")
    assert not clean.legends and not [
        c for ax in clean.axes for c in ax.collections if isinstance(c, PathCollection)
    ]


def test_a_causal_pack_splits_the_padding_tax_from_the_mask_and_says_padded_against_exact_per_pattern():
    """The committed CPU varlen run (causal): executed / useful of sdpa_padded on constant lengths was
    called 'the padding tax' at 1.98× where nothing is padded (its explicit causal mask hides half the
    rectangle it computes), and the findings named 'the most wasteful', naive's whole-pack T², in 6 of 8
    patterns, never padded SDPA against the loop. Now the padding tax is issue 39's B · pairs(max L) /
    Σ pairs(L_i), of the same causality, the mask's share apart, and every pattern says padded against
    exact."""
    from attnbench.reports.render import findings_of, prepare
    from attnbench.results.formulas import packed_pairs

    inputs = prepare(["results/reference/varlen-epyc-2core"])
    rated = varlen.varlen_rates(inputs.df)
    padded = rated[rated["variant"] == "sdpa_padded"]
    assert len(padded) == 8 and padded["causal"].all()
    for _, r in padded.iterrows():
        lens = varlen.seq_lens_of(r["seq_lens"])
        tax = len(lens) * packed_pairs([max(lens)], causal=True) / packed_pairs(lens, causal=True)
        assert r["padding_tax"] == pytest.approx(tax) and r["rest"] == pytest.approx(r["tax"] / tax)
        assert 1.98 < r["rest"] < 2  # the causal mask's hidden half: 2 L / (L + 1)
    constant = padded[padded["pattern"] == "constant"]
    assert constant["padding_tax"].tolist() == [1.0, 1.0] and (constant["tax"] > 1.98).all()
    others = rated[rated["variant"] != "sdpa_padded"]
    assert (others["padding_tax"] == 1).all() and others["rest"].to_numpy() == pytest.approx(others["tax"])
    [packed] = [p for p in findings_of(inputs).panels if p.title.endswith("packed variable-length batches")]
    assert len(packed.sentences) == 8
    for s in packed.sentences:
        assert (
            "; sdpa_padded takes " in s and "× the time of sdpa_loop, the fastest variant that executes " in s
        )
        if "naive executes" in s:  # not padding, and said so
            assert "× the useful work (none of it padding: the whole pack's T² scores" in s, s
    assert (
        "(no padding tax, no sequence being shorter than max L, but 2.0× for the pairs its explicit causal "
        "mask hides)" in packed.sentences[0]
    ), packed.sentences[0]
    assert (
        "(a padding tax of 4.98×, times 2.0× for the pairs its explicit causal mask hides)"
        in (packed.sentences[7])
    ), packed.sentences[7]
