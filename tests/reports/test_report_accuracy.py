"""Speed against accuracy (issue 39): TFLOP/s against rel_err to float64, one point per variant and dtype,
each dtype's tolerance drawn, a cell that failed the gate drawn hollow; nothing in a run without an error."""

from __future__ import annotations

import pytest
import synthetic

from attnbench.reports import findings, page
from attnbench.reports.panels import accuracy
from attnbench.reports.render import prepare
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
