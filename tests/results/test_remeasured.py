"""A cell measured more than once (`--resume --redo-drift` appends a row; the last row of a cell is the one
read): the loader counts its measurements and the spread of their medians, and flags it drift where an
earlier answer lies beyond the last one's own spread other than as the speed probe saw the machine move; the
report says how many cells were measured again and names those whose answer moved, and a finding read off
one is marked as one read off a drifted cell."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import synthetic

from attnbench import results
from attnbench.reports import compare_load
from attnbench.reports.busy import SHAKY
from attnbench.reports.render import findings_of, prepare, render
from attnbench.results import RunWriter, history


def _cell(variant: str, n: int, median: float, speed: float = 0.2, spread: float = 0.01, **axes) -> dict:
    """An ok row whose median is `median` exactly, its p25-p75 about ±spread/2 around it, and its probe;
    `axes`: its other axes (synthetic.cell's)."""
    ms = [
        median * (1 - spread),
        median * (1 - spread / 2),
        median,
        median * (1 + spread / 2),
        median * (1 + spread),
    ]
    return synthetic.cell(variant, n, sample_ms=ms, speed_tflops=speed, **axes)


def _run(path, first: list[dict], *again: list[dict], run_id: str = "synthetic"):
    """A run of `first`, then per list of `again` a `--resume --redo-drift` that appended it: as the writer
    does it."""
    synthetic.write_run(path, first, run_id=run_id)
    for rows in again:
        w = RunWriter(path, resume=True)
        w.log_resume({"at": "later", "redo_drift": True})
        for row in rows:
            w.append({**row, "run_id": run_id})
        w.close()
    return path


def _flag(value) -> bool:
    """A loaded boolean flag as a bool: NA (not judged) is not set."""
    return False if pd.isna(value) else bool(value)


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a redo-drift's second row is no repeat to warn of
        return results.load(path).set_index("cell_id")


def test_a_cell_whose_answer_moved_between_its_measurements_is_flagged_drift(tmp_path):
    # the reference run's flex cell: 8.945, 6.345 then 4.645 ms, its probes saying the machine was faster
    # when the cell was slower, the last one's IQR 7.7%
    flex = [
        _cell("flex", 256, 8.945, 0.24),
        _cell("flex", 256, 6.345, 0.25),
        _cell("flex", 256, 4.645, 0.2, 0.08),
    ]
    run = _run(tmp_path / "run", [flex[0], _cell("sdpa", 256, 5.358)], [flex[1]], [flex[2]])
    df = _load(run)
    f, s = df.loc[flex[0]["cell_id"]], df.loc[_cell("sdpa", 256, 1)["cell_id"]]
    assert f["time_ms_median"] == pytest.approx(4.645)  # the last row is still the one read
    assert (f["measured_times"], s["measured_times"]) == (3, 1)
    assert f["medians_spread"] == pytest.approx(8.945 / 4.645) and pd.isna(s["medians_spread"])
    assert _flag(f["drift"]) and not _flag(s["drift"])
    assert f["speed_factor"] == pytest.approx(1.0)  # its last probe saw nothing
    assert f["drift_reason"].startswith("measured 3 times: 8.945, 6.345 then 4.645 ms (1.93× apart)")
    assert pd.isna(s["drift_reason"])


@pytest.mark.parametrize(
    ("earlier", "last", "moved"),
    [
        ((2.0, 0.1), (1.0, 0.2), False),  # the machine at half speed, the cell twice as slow: the redo's work
        ((0.5, 0.3), (1.0, 0.2), False),  # the machine faster, the cell faster
        ((0.5, 0.1), (1.0, 0.2), True),  # the machine slower, yet the cell faster
        ((1.05, 0.2), (1.0, 0.2), False),  # 5% apart: within the noisy threshold
        ((1.3, 0.2), (1.0, 0.2), True),  # 30% apart, the same machine speed
        ((1.15, None), (1.0, None), True),  # no probe to account for it
    ],
)
def test_only_a_move_beyond_the_cells_spread_that_the_probe_does_not_explain_is_drift(
    tmp_path, earlier, last, moved
):
    run = _run(tmp_path / "run", [_cell("sdpa", 256, earlier[0], earlier[1])], [_cell("sdpa", 256, *last)])
    row = _load(run).iloc[0]
    assert row["measured_times"] == 2
    assert row["medians_spread"] == pytest.approx(max(earlier[0], 1) / min(earlier[0], 1))
    assert _flag(row["drift"]) == moved


def test_an_earlier_median_within_the_last_measurements_own_spread_is_not_drift(tmp_path):
    # 15% apart, but the last row's p25-p75 (a noisy cell: flagged noisy already) holds the earlier median
    run = _run(tmp_path / "run", [_cell("sdpa", 256, 1.15)], [_cell("sdpa", 256, 1.0, spread=0.4)])
    row = _load(run).iloc[0]
    assert row["measured_times"] == 2 and row["medians_spread"] == pytest.approx(1.15)
    assert _flag(row["noisy"]) and not _flag(row["drift"])


def test_a_cell_whose_last_measurement_failed_is_not_drift_and_counts_every_row(tmp_path):
    err = synthetic.cell("sdpa", 256, status="error", message="boom", speed_tflops=0.2)
    run = _run(tmp_path / "run", [_cell("sdpa", 256, 3.0)], [_cell("sdpa", 256, 1.0)], [err])
    row = _load(run).iloc[0]
    assert row["status"] == "error" and row["measured_times"] == 3 and not _flag(row["drift"])


def _busy_only_with_the_moved_cell(tmp_path):
    """Six cells, two caught by the speed probe (at half speed), and flex at N = 256 measured again: 9 then
    4.6 ms, the machine faster at the first (more than 10%) and the cell slower. Two unsettled cells of six
    are no busy machine; three are."""
    first = [
        _cell("flex", 256, 9.0, 0.24),
        _cell("sdpa", 256, 5.4),
        _cell("chunked", 256, 7.0),
        _cell("flex", 512, 30.0),
        _cell("sdpa", 512, 20.0, 0.1),
        _cell("chunked", 512, 25.0, 0.1),
    ]
    return _run(tmp_path / "busy", first, [_cell("flex", 256, 4.6)])


def test_the_report_names_the_moved_cell_and_marks_the_finding_read_off_it(tmp_path):
    run = _busy_only_with_the_moved_cell(tmp_path)
    rep = render(prepare([run]), tmp_path / "report")
    (again,) = rep.findings.remeasured
    assert again.startswith("1 cell was measured more than once")
    assert "flex at N = 256, measured 2 times: 9 then 4.6 ms (1.96× apart)" in again
    (busy,) = rep.findings.busy
    assert busy.startswith("The machine was busy while this ran: 3 of 6 ok cells drifted or were noisy")
    sentences = [s for p in rep.findings.panels for s in p.sentences]
    (lead,) = [s for s in sentences if "flex is fastest at N = 256" in s]
    assert lead.startswith(SHAKY)
    md = rep.readme.read_text()
    assert md.index("The machine was busy") < md.index("1 cell was measured more than once") < md.index(lead)
    assert "measured 2 times: 9 then 4.6 ms" in md.split("## Cells measured while the machine drifted")[1]
    assert "Trust: 6 of 6 cells ran ok; flagged: 3 drifted" in md


def test_a_moved_decode_cell_is_named_at_its_n_k_with_its_n_q(tmp_path):
    """A decode run of N_q 1 and 4 against one N_k (a real `--seq-len 1,4 --seq-k 256` run, resumed with
    `--redo-drift`, said 'sdpa at N = 1, measured 2 times'): the cell is named at its N_k, its N_q after
    it."""
    decode = {"seq_k": 256, "causal": True, "causal_align": "lower-right"}
    first = [_cell(v, n_q, t * n_q, **decode) for v, t in (("sdpa", 1.3), ("naive", 2.0)) for n_q in (1, 4)]
    run = _run(tmp_path / "run", first, [_cell("sdpa", 1, 1.0, **decode)])
    (again,) = findings_of(prepare([run])).remeasured
    assert "sdpa at N_k = 256 (N_q=1), measured 2 times: 1.3 then 1 ms" in again, again
    assert "N = 1" not in again


def test_a_busy_machine_of_moved_and_noisy_cells_is_not_told_to_redo_drift(tmp_path):
    # no cell's probe drifted (all within 5% of the median, not steady either): `--redo-drift` would measure
    # nothing again, and the moved cell would stay moved however often it is measured
    first = [
        _cell("flex", 256, 9.0),
        _cell("sdpa", 256, 5.4, 0.19, spread=0.4),
        _cell("chunked", 256, 7.0, 0.21),
        _cell("flex", 512, 30.0),
        _cell("sdpa", 512, 20.0, 0.21, spread=0.4),
        _cell("chunked", 512, 25.0, 0.19),
    ]
    run = _run(tmp_path / "run", first, [_cell("flex", 256, 4.6)])
    (busy,) = findings_of(prepare([run])).busy
    assert busy.startswith("The machine was busy while this ran: 3 of 6 ok cells drifted or were noisy")
    assert "--redo-drift" not in busy and "Rerun the sweep on a quiet machine." in busy


def test_compare_counts_the_moved_cell_toward_a_busy_machine(tmp_path):
    run = _busy_only_with_the_moved_cell(tmp_path)
    df = results.load(run)
    (line,) = compare_load.busy_lines(("A", run, df, results.load_meta(run)["synthetic"], None))
    assert "3 of 6 cells drifted or were noisy" in line


def test_the_history_store_keeps_the_moved_cell_as_drifted(tmp_path):
    run = _busy_only_with_the_moved_cell(tmp_path)
    store = tmp_path / "history.sqlite"
    history.add(store, [run])
    stored = history.frame(store).set_index("variant")
    at_256 = stored[stored["seq_len"] == 256]
    assert bool(at_256.loc["flex", "drift"]) and not bool(at_256.loc["sdpa", "drift"])


def test_cells_measured_again_that_did_not_move_are_counted_and_mark_nothing(tmp_path):
    # one re-measured as the probe saw the machine move (half speed, twice as slow), one within 5%
    first = [_cell("sdpa", 256, 2.0, 0.1), _cell("flex", 256, 3.15), _cell("chunked", 256, 4.0)]
    run = _run(tmp_path / "run", first, [_cell("sdpa", 256, 1.0), _cell("flex", 256, 3.0)])
    f = findings_of(prepare([run]))
    assert f.remeasured == (
        "2 cells were measured more than once (`--resume --redo-drift` measures a drifted cell again), and "
        "the last measurement of each is the one shown; none moved beyond its own spread other than as the "
        "speed probe saw the machine move.",
    )
    assert not f.busy and not any(SHAKY in s for p in f.panels for s in p.sentences)


def test_a_run_measured_once_says_nothing_of_it(tmp_path):
    run = synthetic.write_run(tmp_path / "run", [_cell("sdpa", 256, 1.0), _cell("flex", 256, 2.0)])
    assert findings_of(prepare([run])).remeasured == ()
    assert _load(run)["measured_times"].tolist() == [1, 1]


def test_a_moved_baseline_judges_no_neighbour_too_fast(tmp_path):
    # naive at 50 ms after 100 ms at the same machine speed: its answer moved, so it says how busy the
    # machine was, not how fast naive is; sdpa 12.5x faster is not suspect by it (results.suspect)
    run = _run(
        tmp_path / "run", [_cell("naive", 256, 100.0), _cell("sdpa", 256, 4.0)], [_cell("naive", 256, 50.0)]
    )
    df = results.load(run).set_index("variant")
    assert _flag(df.loc["naive", "drift"]) and not _flag(df.loc["sdpa", "suspect"])
