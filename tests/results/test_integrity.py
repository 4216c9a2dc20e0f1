"""A run's files against what attnbench wrote into them (results.integrity): a line appended, cut or rewritten
by anything else is named by the writer, by load and by the report; a repeated cell is named unless a
`--resume --redo-drift` explains it; a write a kill cut short is no change."""

from __future__ import annotations

import json
import warnings

import pytest

from attnbench.results import RowWarning, RunWriter, load
from attnbench.results.integrity import WRITTEN, ChangedWarning, changed_files
from attnbench.results.load import changes
from attnbench.results.visits import VISITS, VisitLog

ROW = {"variant": "naive", "device": "cpu", "dtype": "float32", "batch": 1, "heads": 1, "seq_len": 8,
       "d_k": 8, "d_v": 8, "causal": False, "padding": 0.0, "pass": "fwd", "status": "ok", "message": "",
       "time_ms_median": 1.5, "samples_ms": [1.4, 1.5, 1.6]}  # fmt: skip


def _writer(tmp_path) -> RunWriter:
    w = RunWriter(tmp_path / "run")
    w.write_meta({"run_id": "r1", "sweep": {"devices": ["cpu"]}})
    return w


def _clean_load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load(path)


def test_rows_appended_behind_the_writers_back_are_named_by_the_writer_load_and_changes(tmp_path):
    w = _writer(tmp_path)
    w.append({**ROW, "cell_id": "c0"})
    with open(w.path / "rows.jsonl", "a") as fh:  # what the forging plug-in did: a copy, its times tripled
        fh.write(json.dumps({**ROW, "cell_id": "c0", "time_ms_median": 4.5}) + "\n")
    w.append({**ROW, "cell_id": "c1"})
    w.close()
    assert w.changes == ["rows.jsonl: 1 line was appended by something other than attnbench (cells c0)"]
    with pytest.warns(ChangedWarning) as said:
        df = load(w.path)
    text = [str(s.message) for s in said]
    assert any("1 line was appended" in t for t in text), text
    assert any("repeats 1 cell that no `--resume --redo-drift` measured again (c0)" in t for t in text), text
    assert df.set_index("cell_id").loc["c0", "time_ms_median"] == 4.5  # read, and said to be read
    assert len(changes(w.path)) == 2
    assert json.loads((w.path / WRITTEN).read_text())["changed"][0]["file"] == "rows.jsonl"


def test_a_same_size_rewrite_after_the_run_closed_is_found_when_loaded(tmp_path):
    w = _writer(tmp_path)
    w.append({**ROW, "cell_id": "c0"})
    w.close()
    _clean_load(w.path)
    rows = w.path / "rows.jsonl"
    rows.write_text(rows.read_text().replace('"time_ms_median":1.5', '"time_ms_median":4.5'))  # same size
    assert changed_files(w.path) == ["rows.jsonl was changed after attnbench last wrote it"]
    with pytest.warns(ChangedWarning, match="changed after attnbench last wrote it"):
        load(w.path)
    resumed = RunWriter(w.path, resume=True)  # a resume says it too, and records it
    resumed.close()
    assert resumed.changes == [
        "rows.jsonl differs from what attnbench last wrote there, since that session ended"
    ]


def test_a_redo_drift_resume_explains_a_second_row_and_a_plain_resume_does_not(tmp_path):
    w = _writer(tmp_path)
    w.append({**ROW, "cell_id": "c0"})
    w.append({**ROW, "cell_id": "c1"})
    w.close()
    again = RunWriter(w.path, resume=True)
    again.log_resume({"at": "now", "redo_drift": True})
    again.append({**ROW, "cell_id": "c0", "time_ms_median": 1.4})
    again.close()
    assert _clean_load(w.path).set_index("cell_id").loc["c0", "time_ms_median"] == 1.4
    plain = RunWriter(w.path, resume=True)
    plain.log_resume({"at": "later", "redo_drift": False})
    plain.append({**ROW, "cell_id": "c0"})
    plain.close()
    with pytest.warns(ChangedWarning, match=r"repeats 1 cell .*\(c0\)"):
        load(w.path)


def test_an_append_a_kill_cut_short_or_a_failed_one_is_no_change(tmp_path):
    w = _writer(tmp_path)
    w.append({**ROW, "cell_id": "c0"})
    line = (json.dumps({**ROW, "cell_id": "c1"}, separators=(",", ":")) + "\n").encode()
    w._rows.before(w._fh.fileno(), line)  # recorded, then killed before the write
    assert changed_files(w.path) == []
    with open(w.path / "rows.jsonl", "ab") as fh:  # ... or in the middle of it
        fh.write(line[:20])
    assert changed_files(w.path) == []
    w._fh.close()  # the kill: nothing of the writer's own closing runs
    w._fh = None
    w.close()
    with pytest.warns(RowWarning, match="torn"):
        resumed = RunWriter(w.path, resume=True)  # the next session cuts the fragment off, and is clean
    resumed.append({**ROW, "cell_id": "c1"})
    resumed.close()
    assert resumed.changes == [] and changed_files(w.path) == []
    assert list(_clean_load(w.path)["cell_id"]) == ["c0", "c1"]


def test_visits_appended_by_something_else_are_noted(tmp_path):
    w = _writer(tmp_path)
    log = VisitLog(w.path)
    log.append("c0", 1, {**ROW, "cell_id": "c0"})
    with open(w.path / VISITS, "a") as fh:
        fh.write(json.dumps({"cell_id": "c0", "visit": 2, "row": {**ROW, "cell_id": "c0"}}) + "\n")
    log.append("c0", 3, {**ROW, "cell_id": "c0"})
    log.close()
    w.close()
    assert changed_files(w.path) == [
        "visits.jsonl: 1 line was appended by something other than attnbench (cells c0)"
    ]
