"""Speed against accuracy (issue 39): TFLOP/s against rel_err to float64, one point per variant and dtype,
each dtype's tolerance drawn, a cell that failed the gate drawn hollow; nothing in a run without an error."""

from __future__ import annotations

import pytest
import synthetic

from attnbench.reports import findings, page
from attnbench.reports.panels import accuracy
from attnbench.reports.render import prepare, render
from attnbench.results.formulas import TOLERANCE

SEQ = (256, 512, 1024)
# (variant, dtype) -> (time at N = 256 in ms, rel_err): sdpa twice as fast as naive and less accurate
CELLS = {
    ("naive", "float32"): (2.0, 2e-7),
    ("sdpa", "float32"): (1.0, 6e-7),
    ("naive", "float16"): (1.0, 4e-4),
    ("sdpa", "float16"): (0.5, 1e-3),
}


def _rows():
    """The four series of CELLS; naive float16 runs out of memory at N = 1,024 (its point is N = 512), and
    sdpa float16 fails the gate there, its error 4× the float16 tolerance (its point is that wrong cell)."""
    rows = []
    for (variant, dtype), (t, err) in CELLS.items():
        for n in SEQ:
            if (variant, dtype, n) == ("naive", "float16", 1024):
                rows.append(synthetic.cell(variant, n, dtype=dtype, status="oom", message="out of memory"))
                continue
            wrong = (variant, dtype, n) == ("sdpa", "float16", 1024)
            rows.append(synthetic.cell(
                variant, n, dtype=dtype, time_ms=t * (n / 256) ** 2, status="wrong" if wrong else "ok",
                rel_err=4 * TOLERANCE[dtype] if wrong else err,
            ))  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The run's data, and the panel's section as render() would add it (render itself draws 10 more)."""
    tmp = tmp_path_factory.mktemp("accuracy")
    inputs = prepare([synthetic.write_run(tmp / "run", _rows())])
    return inputs.df, accuracy.section(inputs.df, inputs.metas, tmp / "out"), tmp / "out"


def _table(section) -> dict[tuple[str, str], tuple[str, ...]]:
    """The points table's rows by (variant, dtype), checking there is one row for each."""
    (table,) = [b for b in section.tables if isinstance(b, page.Table)]
    assert table.headers == ("variant", "dtype", "N", "TFLOP/s", "rel_err", "tolerance", "status")
    by = {(r[0], r[1]): r for r in table.rows}
    assert len(by) == len(table.rows) == 4
    return by


def test_one_figure_with_every_dtype_and_its_csv(drawn):
    _df, section, out = drawn
    (fig,) = section.files
    assert fig.stem == "speed-accuracy-cpu-fwd"  # one figure for both dtypes: dtype is no group here
    assert (out / fig.png).stat().st_size > 10_000 and (out / fig.svg).stat().st_size > 10_000
    import pandas as pd

    data = pd.read_csv(out / fig.csv)
    assert len(data) == 4 and set(zip(data["variant"], data["dtype"], strict=True)) == set(CELLS)
    assert {"tflops", "rel_err", "tolerance", "status", "failing"} <= set(data.columns)
    assert any(isinstance(b, page.Figure) for b in section.figures)


def test_the_table_has_one_row_per_variant_and_dtype_fastest_first(drawn):
    by = _table(drawn[1])
    assert list(by) == [("sdpa", "float16"), ("sdpa", "float32"), ("naive", "float16"), ("naive", "float32")]
    assert by["naive", "float16"][2] == "512"  # out of memory at 1,024: its largest measured N
    assert by["sdpa", "float32"][2:] == ("1,024", "0.135", "6e-07", "0.0001", "ok")


def test_a_point_beyond_its_tolerance_is_drawn_failing(drawn):
    df, section, _out = drawn
    by = _table(section)
    assert by["sdpa", "float16"][4:] == ("0.02", "0.005", "wrong")
    fig, data = accuracy.accuracy_figure(df, "t")
    failing = data[data["failing"]]
    assert list(zip(failing["variant"], failing["dtype"], strict=True)) == [("sdpa", "float16")]
    ax = fig.axes[0]
    tolerances = sorted(ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() != "None")
    assert tolerances == [TOLERANCE["float32"], TOLERANCE["float16"]]
    hollow = [ln for ln in ax.lines if ln.get_linestyle() == "None" and ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and hollow[0].get_xdata()[0] > TOLERANCE["float16"]
    assert hollow[0].get_marker() == accuracy.DTYPE_MARKERS["float16"]


def test_the_findings_say_the_fastest_is_less_accurate(drawn):
    import pandas as pd

    df = drawn[0]
    found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
    said = {p.title: " ".join(p.sentences) for p in found.panels}
    assert "the fastest, sdpa (0.135 TFLOP/s at N = 1,024), has rel_err 6e-07, 3× the error of the most " \
        "accurate, naive (rel_err 2e-07" in said["float32"]  # fmt: skip
    assert "sdpa is faster than every ok variant" in said["float16"]
    assert "fails the float64 gate (rel_err 0.02, tolerance 0.005)" in said["float16"]


def test_a_memoising_kernel_is_said_to_fail_the_check_it_failed_with_its_error(tmp_path):
    """'m_memo ... fails the float64 gate (rel_err 4.2e-07, tolerance 0.0001)': its gated first call passed,
    the check on fresh inputs after timing failed (rel_err 1.4). The sentence names that check and quotes
    its error, the passing gate's beside."""
    import pandas as pd

    rows = _rows()
    for n in SEQ:
        rows.append(synthetic.cell(
            "memo", n, time_ms=0.1 * (n / 256) ** 2, status="wrong", rel_err=4.2e-7, fresh_rel_err=1.4,
            message="answer does not follow the inputs: on fresh inputs (seed 1) rel_err 1.40e+00",
        ))  # fmt: skip
    df = prepare([synthetic.write_run(tmp_path / "run", rows)]).df
    found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
    said = " ".join(dict((p.title, " ".join(p.sentences)) for p in found.panels)["float32"].split())
    assert "memo is faster than every ok variant" in said, said
    tol = TOLERANCE["float32"]
    assert (
        f"fails the float64 check on fresh inputs after timing (rel_err 1.4, tolerance {tol:g}): its gated "
        "first call passed (rel_err 4.2e-07)"
    ) in said, said
    assert "fails the float64 gate (rel_err 4.2e-07" not in said


def test_a_run_without_an_ok_error_adds_nothing(tmp_path):
    failed = [synthetic.cell("naive", n, status="error", message="boom") for n in SEQ]
    untested = synthetic.power_law_rows({"naive": (2, 2), "chunked": (2, 1)}, list(SEQ))  # no rel_err
    for name, rows in (("failed", failed), ("untested", untested)):
        inputs = prepare([synthetic.write_run(tmp_path / name, rows)])
        section = accuracy.section(inputs.df, inputs.metas, tmp_path / f"{name}-out")
        assert not section.figures and not section.tables and not section.files
        assert not (tmp_path / f"{name}-out").exists() or not list((tmp_path / f"{name}-out").iterdir())


def test_the_gate_and_the_report_read_one_tolerance():
    from attnbench.harness.measure import correctness

    assert correctness.TOLERANCE is TOLERANCE


def test_fp8_is_drawn_at_its_end_to_end_error_and_the_findings_say_what_it_gives_up(tmp_path):
    """A quantising variant's rel_err is its kernel's against its rounded inputs (it passes the gate); the
    panel draws it at its error against the inputs given (from sqnr_db), with a dotted line back to the
    kernel's error, and the findings say, from the rows, how much accuracy it gives up and at what speed."""
    import pandas as pd

    rows = _rows()
    sqnr = 30.0  # an end-to-end rel_err of 10^(-30/20) = 0.0316
    for n in SEQ:
        rows.append(synthetic.cell(
            "fp8_emulated", n, time_ms=0.25 * (n / 256) ** 2, rel_err=1e-7, quant_recipe="e4m3fn:tensor",
            quant_rel_err=0.031, sqnr_db=sqnr,
        ))  # fmt: skip
    df = prepare([synthetic.write_run(tmp_path / "run", rows)]).df
    fig, data = accuracy.accuracy_figure(df, "t")
    fp8 = data[data["variant"] == "fp8_emulated"].set_index("dtype").loc["float32"]
    e2e = 10 ** (-sqnr / 20)
    assert fp8["e2e_rel_err"] == pytest.approx(e2e) and not fp8["failing"]  # its kernel passed the gate
    ax = fig.axes[0]
    dotted = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert len(dotted) == 1 and sorted(dotted[0].get_xdata()) == pytest.approx([1e-7, e2e])
    assert any(t.get_text() == "e4m3fn:tensor" for t in ax.texts)
    table = accuracy.accuracy_table(accuracy.points(df[df["dtype"] == "float32"]))
    assert table.headers[5:8] == ("kernel rel_err", "recipe", "SQNR dB")
    (row,) = [r for r in table.rows if r[0] == "fp8_emulated"]
    assert row[4:9] == ("0.032", "1e-07", "e4m3fn:tensor", "30.0", "0.0001")
    found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
    said = {p.title: " ".join(p.sentences) for p in found.panels}["float32"]
    assert "the fastest, fp8_emulated (0.54 TFLOP/s at N = 1,024), has rel_err 0.032, 1.58e+05× the" in said
    assert (
        "fp8_emulated rounds its inputs (e4m3fn:tensor): rel_err 0.032 against float64 of the inputs it was "
        "given (SQNR 30.0 dB, 0.54 TFLOP/s at N = 1,024), 1.58e+05× the error of the most accurate variant "
        "that does not round, naive (rel_err 2e-07), at 4.01× the TFLOP/s of the fastest that does not "
        "round, sdpa; its kernel "
        "alone errs 1e-07 against its rounded inputs (tolerance 0.0001), and the rounding alone 0.031."
    ) in said
    plain = data[(data["variant"] == "sdpa") & (data["dtype"] == "float32")].iloc[0]
    assert plain["e2e_rel_err"] == plain["rel_err"] == pytest.approx(6e-7)  # an unrounded point: its rel_err


def test_a_declared_approximation_is_held_to_its_bound_and_named_as_approximate(tmp_path):
    """A variant declared approximate (its rows carry the bound it was held to) is ok beyond its dtype's
    tolerance: a filled point labelled with its bound, the tolerance column its bound, and where it is
    the fastest, the ranking and the speed-against-accuracy sentence name it as approximate."""
    import pandas as pd

    rows = _rows()
    for n in SEQ:
        rows.append(synthetic.cell("linear", n, time_ms=0.1 * (n / 256), rel_err=0.3, approximate=0.5))
    df = prepare([synthetic.write_run(tmp_path / "run", rows)]).df
    # it skips the N x N work its FLOPs count: over the calibrated ceiling, and not suspect for it
    assert not df.loc[df["variant"] == "linear", "suspect"].any()
    fig, data = accuracy.accuracy_figure(df, "t")
    point = data[data["variant"] == "linear"].iloc[0]
    assert point["tolerance"] == 0.5 and not point["failing"]
    assert any(t.get_text() == "approximate ≤ 0.5" for t in fig.axes[0].texts)
    table = accuracy.accuracy_table(accuracy.points(df[df["dtype"] == "float32"]))
    (row,) = [r for r in table.rows if r[0] == "linear"]
    assert row[4:] == ("0.3", "0.5", "ok")
    found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
    said = {p.title: " ".join(p.sentences) for p in found.panels}["float32"]
    assert said.startswith("linear (approximate, rel_err <= 0.5) is fastest at every N measured"), said
    assert "the fastest, linear (approximate, rel_err <= 0.5) (" in said
    from attnbench.reports.render import best_table

    cells = [c for row in best_table(df[df["dtype"] == "float32"]).rows for c in row[1:]]
    assert cells and all(c.startswith("linear (approximate, rel_err <= 0.5) ") for c in cells), cells


def _tied_rows(drifted: bool):
    """sdpa (rel_err 4e-7) and bf16_softmax (2e-5, 50x it) at N = 64 and 128 in three visits, naive twice as
    slow at N = 32 and 64 (not at 128, where a variant told apart from bf16_softmax would stand between the
    two and put sdpa behind it: reports.tables.front): sdpa's cell at 128 met a busy moment in two visits
    (0.09 ms, then 20 ms twice), so its median is 200x bf16_softmax's while the ranking cannot tell the two
    apart; `drifted`: that cell's speed probe saw the machine at half speed, and those of sdpa's and
    bf16_softmax's at 64 (a busy machine: three of six cells)."""
    rows = []
    series = [("sdpa", 4e-7, (64, 128)), ("bf16_softmax", 2e-5, (64, 128)), ("naive", 1e-6, (32, 64))]
    for variant, err, ns in series:
        for n in ns:
            visits = (
                [0.09, 20.0, 20.0]
                if (variant, n) == ("sdpa", 128)
                else [0.2 if variant == "naive" else 0.1] * 3
            )
            samples = [m * (1 + 0.01 * i) for m in visits for i in range(4)]
            slow = drifted and variant != "naive" and (variant, n) != ("bf16_softmax", 128)
            rows.append(synthetic.cell(
                variant, n, sample_ms=samples, visit_medians_ms=visits, visit_samples=[4] * 3, rel_err=err,
                speed_tflops=0.5 if slow else 1.0,
            ))  # fmt: skip
    return rows


def test_the_fastest_is_never_named_where_the_ranking_ties_it_and_a_shaky_one_says_so(tmp_path):
    """'Speed against accuracy: the fastest, bf16_softmax (0.0109 TFLOP/s at N = 128) ... sdpa (...
    0.000215 TFLOP/s)' beside 'sdpa and bf16_softmax cannot be told apart': the 50x came from a noisy sdpa
    cell. The sentence follows the ranking's tie rule (the two together, and the most accurate among them),
    and on a busy machine it opens with the ranking's SHAKY prefix where it reads an unsettled cell."""
    import pandas as pd

    def said(run, drifted):
        df = prepare([synthetic.write_run(tmp_path / run, _tied_rows(drifted))]).df
        found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
        return [s for p in found.panels for s in p.sentences if "Speed against accuracy" in s]

    (calm,) = said("calm", False)
    assert "the fastest" not in calm, calm
    assert calm == (
        "Speed against accuracy: bf16_softmax and sdpa lead at N = 128 and cannot be told apart (the "
        "ranking's tie rule), and the most accurate variant is among them: sdpa (rel_err 4e-07); "
        "bf16_softmax has rel_err 2e-05."
    ), calm
    (busy,) = said("busy", True)
    assert busy == findings.SHAKY + calm, busy


def test_a_tie_with_a_label_of_one_kernel_names_its_variants_whole(tmp_path):
    """bf16_softmax tied with sdpa (= sdpa_flash: FLASH_ATTENTION (CPU)), the kernel both ran: the sentence
    named 'bf16_softmax, sdpa, (=, sdpa_flash:, FLASH_ATTENTION and (CPU)) lead', the label split at its
    spaces. The front is the label's variants, each named as the accuracy panel names its points."""
    import pandas as pd

    kernel = {"kernel": "FLASH_ATTENTION (CPU)"}
    rows = [
        synthetic.cell(
            v, n, time_ms=t * (n / 64) ** 2, rel_err=err, **(kernel if v.startswith("sdpa") else {})
        )
        for n in (64, 128)
        for v, t, err in (("bf16_softmax", 0.099, 2e-5), ("sdpa", 0.1, 4e-7), ("sdpa_flash", 0.1005, 5e-7))
    ]
    df = prepare([synthetic.write_run(tmp_path / "run", rows)]).df
    found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
    (said,) = [s for p in found.panels for s in p.sentences if "Speed against accuracy" in s]
    assert said.startswith("Speed against accuracy: bf16_softmax, sdpa and sdpa_flash lead at N = "), said
    assert "the most accurate variant is among them: sdpa (rel_err 4e-07)" in said, said


def test_a_drifted_point_is_ringed_as_the_time_figure_rings_it(tmp_path):
    """Trial: the speed-accuracy figure drew a point measured while the machine drifted unmarked, where the
    time figure rings it. It is ringed the same way now (plots.ring_cells: the one set of rings, named in
    the figure's own legend), and only it."""
    from matplotlib.collections import PathCollection

    from attnbench import results
    from attnbench.reports import plots

    rows = _rows()
    point = ("sdpa", "float32", 1024)  # half the run's usual speed probe there: measured during drift
    for r in rows:
        r["speed_tflops"] = 0.5 if (r["variant"], r["dtype"], r["seq_len"]) == point else 1.0
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    assert df["drift"].fillna(False).astype(bool).sum() == 1
    fig, pts = accuracy.accuracy_figure(df, "t")
    rings = [c for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)]
    (ring,) = rings
    drifted = pts[(pts["variant"] == "sdpa") & (pts["dtype"] == "float32")].iloc[0]
    assert ring.get_offsets().tolist() == [[pytest.approx(6e-7), pytest.approx(float(drifted["tflops"]))]]
    assert plots.DRIFT_LABEL in {t.get_text() for leg in fig.legends for t in leg.get_texts()}


def test_an_emulations_speed_is_said_once_to_say_nothing_of_real_kernels(tmp_path):
    """An outside trial's FP8 run ranked fp8_emulated 'at 1.08× the TFLOP/s of the fastest' (the fastest
    that does not round) and said nowhere what variants.md says: an emulation's speed says nothing of FP8
    kernels. The variants' capability records in meta.json (the registry's own: a recipe, and a description
    that says 'emulated') make the panel's findings say it once, after the sentences that rank them; a
    panel without an emulation says nothing of it."""
    import json

    import pandas as pd

    from attnbench.variants import registry

    rows = _rows()
    for v, recipe, f in (("fp8_emulated", "e4m3fn:tensor", 0.25), ("fp8_emulated_head", "e4m3fn:head", 0.3)):
        rows += [synthetic.cell(
            v, n, time_ms=f * (n / 256) ** 2, rel_err=1e-7, quant_recipe=recipe, quant_rel_err=0.031,
            sqnr_db=30.0,
        ) for n in SEQ]  # fmt: skip
    run = synthetic.write_run(tmp_path / "run", rows)
    meta = json.loads((run / "meta.json").read_text())
    for v in ("fp8_emulated", "fp8_emulated_head", "sdpa"):
        meta["variant_capabilities"][v] = registry.get(v).record()
    (run / "meta.json").write_text(json.dumps(meta))
    inputs = prepare([run])
    assert accuracy.emulations(inputs.metas) == {"fp8_emulated", "fp8_emulated_head"}
    found = findings.build(
        inputs.df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]),
        emulated=accuracy.emulations(inputs.metas),
    )  # fmt: skip
    said = {p.title: " ".join(p.sentences) for p in found.panels}
    caution = (
        "fp8_emulated and fp8_emulated_head emulate FP8 (the inputs rounded, then float32 math): an "
        "emulation's speed, and its place in any ranking here, says nothing of real FP8 kernels"
    )
    assert said["float32"].count(caution) == 1, said["float32"]
    assert "emulat" not in said["float16"], said["float16"]
    # the page says it too, as render's findings are built from the same records
    assert caution.replace("_", "\\_") in render(inputs, tmp_path / "report").readme.read_text()


def test_an_fp8_speed_read_off_drifted_cells_opens_as_a_ranking_does(tmp_path):
    """Trial V: 'fp8_emulated_head rounds its inputs ... at 0.262× the TFLOP/s of ... sdpa' quoted a speed
    ratio read off drifted cells without the 'Read off drifted or noisy cells:' every ranking sentence
    opens with there. The FP8 sentence compares its cell with the fastest exact one's: the same rule."""
    import pandas as pd

    def fp8_said(run: str, drifted: bool) -> str:
        rows = []
        for v, t, extra in (
            ("naive", 1.0, {}),
            ("sdpa", 0.2, {}),
            ("fp8_emulated", 0.5, dict(quant_recipe="e4m3fn:tensor", quant_rel_err=0.031, sqnr_db=30.0)),
        ):
            rows += [synthetic.cell(
                v, n, time_ms=t * (n / 256) ** 2, rel_err=1e-7,
                speed_tflops=0.5 if drifted and n == 1024 else 1.0, **extra,  # the N its point is at
            ) for n in (256, 512, 1024)]  # fmt: skip
        df = prepare([synthetic.write_run(tmp_path / run, rows)]).df
        found = findings.build(df, pd.DataFrame(), lambda gkey, group: str(gkey["dtype"]))
        (said,) = [s for p in found.panels for s in p.sentences if "rounds its inputs" in s]
        assert "× the TFLOP/s of the fastest that does not round, sdpa" in said, said
        return said

    assert findings.SHAKY + "fp8_emulated rounds" not in fp8_said("calm", False)
    assert findings.SHAKY + "fp8_emulated rounds its inputs" in fp8_said("busy", True)
