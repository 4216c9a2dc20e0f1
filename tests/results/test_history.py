"""The history store (results.history): real run directories (copies of tests/data/runs/cpu-small, their times
edited) recorded into a real SQLite file, read back as a DataFrame, rebuilt, and refused when bad."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import shutil
import sqlite3

import pytest
from conftest import DATA
from synthetic import run_series

from attnbench.reports.dashboard import steps_table
from attnbench.results import history, history_runs, steps, steps_text
from attnbench.results.identity import short_hash
from attnbench.results.store import RowWarning, RunDirError

BASE = DATA / "runs" / "cpu-small"
CELLS = sum(1 for line in (BASE / "rows.jsonl").read_text().splitlines() if line.strip())
MACHINE = "AMD EPYC (2 cores) on vm"


@pytest.fixture
def runs(tmp_path):
    return run_series(BASE, tmp_path / "runs", [1.0, 1.0, 1.1])


def test_a_folder_of_runs_is_one_frame_of_every_cell_of_every_run(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    added = history.add(store, [tmp_path / "runs"])
    assert [a.state for a in added] == ["added"] * 3 and {a.cells for a in added} == {CELLS}
    df = history.frame(store)
    assert len(df) == 3 * CELLS and set(df["machine"]) == {MACHINE}
    assert df["run_id"].nunique() == 3 and df["git_commit"].nunique() == 3
    assert list(df["torch"].unique()) == ["2.13.0+cpu"] and df["where_key"].iloc[0].endswith(":cpu")
    assert str(df["seq_len"].dtype) == "Int64" and str(df["time_ms_median"].dtype) == "Float64"
    assert df["cal_matmul_tflops"].iloc[0] == pytest.approx(0.20309249072702487)
    cell = df[df["cell_id"] == df["cell_id"].iloc[0]]  # one series, in the order the runs were made
    assert list(cell["created"]) == sorted(cell["created"])
    ratio = cell["time_ms_median"].iloc[2] / cell["time_ms_median"].iloc[0]
    assert 1.03 < ratio < 1.17  # the third run is 10% slower, within the cells' 1% jitter
    assert all(p.startswith(str(tmp_path)) for p in df["path"])


def test_the_store_keeps_the_code_sha256_that_tells_installs_without_a_commit_apart(tmp_path, runs):
    """Runs of a `pip install` of a folder record no commit; the store keeps their code's sha256, which a
    step's sides compare (results.steps.SIDES)."""
    for i, run in enumerate(runs):
        meta = json.loads((run / "meta.json").read_text())
        meta["fingerprint"].update(git_commit=None, code_sha256=f"{i // 2:016x}")
        (run / "meta.json").write_text(json.dumps(meta))
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    df = history.frame(store)
    assert df["git_commit"].isna().all()
    cell = df[df["cell_id"] == df["cell_id"].iloc[0]].reset_index(drop=True)
    assert list(cell["code_sha256"]) == [f"{0:016x}", f"{0:016x}", f"{1:016x}"]
    sides = [steps.run_fields(cell, i) for i in range(3)]
    assert steps.differ(sides[0], sides[1]) == {}
    assert steps.differ(sides[1], sides[2]) == {"code_sha256": (f"{0:016x}", f"{1:016x}")}


def test_the_store_keeps_which_sweep_each_run_is(tmp_path, runs):
    """MISSING compares a run with the run before it of its own sweep (results.breaks.missing), so the store
    keeps each run's sweep: one for runs of one sweep whatever their settings, or an axis at its quiet value
    that an older meta.json did not record; another for another value or a rerun's chosen cells; none for
    a meta.json without a sweep."""
    from attnbench.results.axes import sweep_identity

    edits = [
        lambda m: m["sweep"]["settings"].update(budget_ms=999),  # a longer budget: the same cells
        lambda m: m["sweep"].update(window=[0]),  # an axis recorded at its quiet value: the same cells
        lambda m: m["sweep"].update(heads=[2]),  # another sweep
    ]
    for run, edit in zip(runs, edits, strict=True):
        meta = json.loads((run / "meta.json").read_text())
        edit(meta)
        (run / "meta.json").write_text(json.dumps(meta))
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    sweeps = history.frame(store).drop_duplicates("run_key").sort_values("created")["sweep"].tolist()
    assert sweeps[0] == sweeps[1] != sweeps[2] and all(re.fullmatch("[0-9a-f]{16}", s) for s in sweeps)
    meta = json.loads((runs[0] / "meta.json").read_text())
    rerun = {**meta, "cells": [meta["sweep"]["variants"][0]]}
    assert sweep_identity(rerun) != sweep_identity(meta) and sweep_identity({"run_id": "r"}) is None


def test_adding_a_run_again_changes_nothing(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    before = history.frame(store).drop(columns="added_at")
    copy = tmp_path / "copy"
    shutil.copytree(runs[0], copy)  # the same run at another path is the same run
    again = history.add(store, [*runs, copy])
    assert [a.state for a in again] == ["unchanged"] * 4
    after = history.frame(store).drop(columns="added_at")
    assert len(after) == len(before) == 3 * CELLS


def test_a_resumed_run_replaces_its_cells(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    rows = (runs[0] / "rows.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    first["time_ms_median"] *= 3  # measured again (--redo-drift): the later row of a cell is its row
    with (runs[0] / "rows.jsonl").open("a") as fh:
        fh.write(json.dumps(first) + "\n")
    assert [a.state for a in history.add(store, [runs[0]])] == ["updated"]
    df = history.frame(store)
    assert len(df) == 3 * CELLS
    mine = df[(df["run_id"] == first["run_id"]) & (df["cell_id"] == first["cell_id"])]
    assert mine["time_ms_median"].tolist() == [pytest.approx(first["time_ms_median"])]


def test_rebuild_makes_the_same_store_from_the_runs(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    before = history.frame(store).drop(columns="added_at")
    assert [a.state for a in history.rebuild(store)] == ["added"] * 3
    assert history.frame(store).drop(columns="added_at").equals(before)
    shutil.rmtree(runs[1])
    data = store.read_bytes()
    with pytest.raises(RunDirError, match="1 run.* gone, e.g. .*run-001") as err:
        history.rebuild(store)
    assert "\n" not in str(err.value) and store.read_bytes() == data
    assert not store.with_name(store.name + ".rebuild").exists()


def test_bad_runs_are_refused_before_the_store_is_touched(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    history.add(store, runs[:1])
    data = store.read_bytes()
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    with pytest.raises(RunDirError, match="is not an attnbench run"):
        history.add(store, [runs[1], empty])  # a good run beside it is not added either
    newer = runs[2] / "meta.json"
    newer.write_text(newer.read_text().replace('"schema_version": 1', '"schema_version": 99'))
    with pytest.raises(RunDirError, match="schema version 99: a newer attnbench made it") as err:
        history.add(store, [runs[2]])
    assert "\n" not in str(err.value)
    assert store.read_bytes() == data and len(history.frame(store)) == CELLS


def test_a_store_that_is_not_one_is_refused_and_left_as_it_was(tmp_path, runs):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is no database" * 100)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    old = tmp_path / "old.sqlite"
    history.add(old, runs[:1])
    with sqlite3.connect(old) as con:
        con.execute("UPDATE info SET value = '0' WHERE key = 'version'")
    cases = [
        (corrupt, "not an attnbench history store"),
        (other, "not an attnbench history store"),
        (old, f"version 0; this attnbench reads version {history.VERSION}: make it again with"),
    ]
    for store, said in cases:
        data = store.read_bytes()
        for action, args in ((history.add, (store, runs)), (history.frame, (store,))):
            with pytest.raises(history.StoreError, match=said) as err:
                action(*args)
            assert "\n" not in str(err.value) and store.read_bytes() == data
    with pytest.raises(history.StoreError, match="no history store at"):
        history.frame(tmp_path / "missing.sqlite")


def _flag(runs) -> tuple[str, str]:
    """The latest run made to hold one cell of each flag: a probe at half the machine's speed (drift), a
    chunked cell at 100 TFLOP/s (suspect: above 1.25x its calibrated ceiling). Their cell_ids."""
    rows_file = runs[-1] / "rows.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    for row in rows:
        row["speed_tflops"] = 0.2
    rows[0]["speed_tflops"] = 0.1
    fast = next(r for r in rows if r["variant"] == "chunked" and r["status"] == "ok")
    fast["tflops"] = 100.0
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows[0]["cell_id"], fast["cell_id"]


def test_the_store_keeps_each_cells_trust_flags_as_the_loader_derives_them(tmp_path, runs):
    """The store kept no trust flags: the site ranked a cell the run's report refused to rank as suspect
    (trial S, M2). Each cell's suspect, drift, noisy and throttled flags, the speed factor and the reason are
    the loader's (results.load), kept per cell."""
    from attnbench.results import load
    from attnbench.results.load import TRUST_COLUMNS

    drifted, suspect = _flag(runs)
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    df = history.frame(store)
    assert df["suspect"].sum() == 1 and df["drift"].sum() == 1 and df["noisy"].sum() >= 3
    row = df[df["suspect"].fillna(False)].iloc[0]
    assert (
        row["cell_id"] == suspect and "is above 1.25x the calibrated matmul ceiling" in row["suspect_reason"]
    )
    assert df[df["drift"].fillna(False)].iloc[0]["cell_id"] == drifted
    assert str(df["speed_factor"].dtype) == "Float64" and str(df["suspect"].dtype) == "boolean"
    for run in runs:
        loaded = load(run).set_index("cell_id")[list(TRUST_COLUMNS)]
        mine = df[df["path"] == str(run)].set_index("cell_id")[list(TRUST_COLUMNS)].loc[loaded.index]
        same = loaded.astype("object").fillna("NA") == mine.astype("object").fillna("NA")  # NA: unknown
        assert same.all().all(), (run, mine[~same.all(axis=1)])


def test_a_store_made_before_it_kept_trust_flags_is_read_and_rebuild_fills_them(tmp_path, runs):
    """A store of version 7 (no trust flags) is read as it is, its flags unknown, with a note saying what that
    costs; `add` writes only this version (one line saying to rebuild), and `rebuild` reads the flags from
    the runs."""
    from attnbench.results import load
    from attnbench.results.load import TRUST_COLUMNS

    _flag(runs)
    store = tmp_path / "h.sqlite"
    history.add(store, runs[:2])
    with sqlite3.connect(store) as con:
        for column in TRUST_COLUMNS:
            con.execute(f"ALTER TABLE cells DROP COLUMN {column}")
        con.execute("UPDATE info SET value = '7' WHERE key = 'version'")
    con.close()
    df = history.frame(store)
    assert len(df) == 2 * CELLS and all(df[c].isna().all() for c in TRUST_COLUMNS)
    note = history.older_note(store)
    said = "version 7, which does not record the cells' trust flags (suspect, drift, noisy, throttled): the "
    assert said + "site cannot leave a suspect cell out of who leads; `attnbench history rebuild" in note, (
        note
    )
    with pytest.raises(history.StoreError, match="version 7, which this attnbench reads but adds no run to"):
        history.add(store, runs[2:])
    history.rebuild(store, runs=runs[2:])
    df = history.frame(store)
    known = sum(int(load(run)["noisy"].notna().sum()) for run in runs)
    assert df["suspect"].notna().all() and df["noisy"].notna().sum() == known and df["suspect"].sum() == 1
    assert history.older_note(store) is None


def test_a_store_of_an_older_version_is_rebuilt_as_its_refusal_says(tmp_path, runs):
    """The refusal says `attnbench history rebuild`; rebuild read the recorded runs through the same check,
    and so refused too: a store of an older version could not be made again but by hand."""
    old = tmp_path / "old.sqlite"
    history.add(old, runs)
    with sqlite3.connect(old) as con:
        con.execute("DROP TABLE cells")  # an older layout: only its runs table is read
        con.execute("UPDATE info SET value = '1' WHERE key = 'version'")
    with pytest.raises(history.StoreError, match="version 1; this attnbench reads"):
        history.frame(old)
    assert [a.state for a in history.rebuild(old)] == ["added"] * len(runs)
    assert len(history.frame(old)) == len(runs) * CELLS


def test_a_machine_is_named_by_a_part_of_its_name(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    assert history.machines(store) == [MACHINE]
    assert len(history.frame(store, machine="epyc")) == 3 * CELLS
    with pytest.raises(ValueError, match=r"--machine 'H100' is no machine of the store; the store has: AMD"):
        history.frame(store, machine="H100")


def test_a_machine_the_runs_given_lack_is_said_of_those_runs(runs):
    """attnbench.history(RUN, machine=...) without a store reads the runs alone: its error names the runs
    given, not a store the caller never gave."""
    import attnbench

    assert len(attnbench.history(runs[0], machine="epyc")) == CELLS
    said = r"^machine='H100' is no machine of the runs given; they have: AMD"
    with pytest.raises(ValueError, match=said) as e:
        attnbench.history(runs[0], machine="H100")
    assert "store" not in str(e.value)


# ---- steps: ruptures' PELT over each series of the store ---------------------------------------------------


def _torch_after(at: int, version: str = "2.14.0+cpu"):
    def edit(i, meta):
        if i >= at:
            meta["fingerprint"]["torch"] = version

    return edit


# what a run's fingerprint records of the settings that move its times, as the store keeps them
SETTINGS = ("sweep_env", "allocator_env", "torch_threads", "transparent_hugepages", "thp_mem_alloc_enable")


def _settings_after(at: int, before: dict, after: dict):
    """Run i's fingerprint with `before`'s settings before run `at` and `after`'s from it, on one commit."""

    def edit(i, meta):
        meta["fingerprint"].update(git_commit="1a2b3c4d5e" * 4, **(after if i >= at else before))

    return edit


def test_a_step_across_a_change_of_the_runs_settings_says_it(tmp_path):
    """An outside trial's nightly ran `--env MINE_EXTRA=0`, then `=3` from its 4th night, on one commit: the
    step was found, and its line said `same commit` and nothing else, so that its reader went bisecting code
    that never changed. The store keeps the settings the fingerprint records, and a step's sides compare
    them: the sweep's --env, the allocator and thread variables, torch's threads, transparent huge pages."""
    env = _settings_after(8, {"sweep_env": "MINE_EXTRA=0"}, {"sweep_env": "MINE_EXTRA=3"})
    paths = run_series(BASE, tmp_path / "runs", [1.0] * 8 + [1.1] * 6, edit=env)
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    df = history.frame(store)
    assert set(df["sweep_env"]) == {"MINE_EXTRA=0", "MINE_EXTRA=3"} and set(df["torch_threads"]) == {2}
    step = steps.find(df)[0]
    assert step.at == 8 and step.changed() == {"sweep_env": ("MINE_EXTRA=0", "MINE_EXTRA=3")}
    said = "same commit, env MINE_EXTRA=0 -> MINE_EXTRA=3"
    assert f"; {said}; calibration" in steps_text.describe(step)
    assert steps_table([step], {}).rows[0][4] == said  # the site's Steps table says what the line says
    assert steps_text.as_frame([step])["changed"].tolist() == ["env MINE_EXTRA=0 -> MINE_EXTRA=3"]

    before = {"allocator_env": "none", "torch_threads": 2, "THP_MEM_ALLOC_ENABLE": None}
    after = {"allocator_env": "OMP_NUM_THREADS=1", "torch_threads": 1, "THP_MEM_ALLOC_ENABLE": "1",
             "transparent_hugepages": "[always] madvise never"}  # fmt: skip
    edit = _settings_after(8, before, after)
    paths = run_series(BASE, tmp_path / "runs2", [1.0] * 8 + [1.1] * 6, edit=edit)
    history.add(tmp_path / "h2.sqlite", paths)
    step = steps.find(history.frame(tmp_path / "h2.sqlite"))[0]
    assert set(step.changed()) == set(SETTINGS) - {"sweep_env"}
    said = (
        "same commit, allocator env none -> OMP_NUM_THREADS=1, torch threads 2 -> 1, THP madvise -> always, "
        "THP_MEM_ALLOC_ENABLE ? -> 1; calibration"
    )
    assert said in steps_text.describe(step)


def test_a_store_of_the_version_before_is_read_and_rebuilt_with_the_runs_settings(tmp_path):
    """Version 7 added the runs' settings (SETTINGS). A store of version 6 still loads, those columns empty
    (no change across any step), with a note saying what it does not record; `add` writes only this version
    (one line saying to rebuild), and `rebuild` reads each run's settings from its meta.json."""
    env = _settings_after(2, {"sweep_env": "MINE_EXTRA=0"}, {"sweep_env": "MINE_EXTRA=3"})
    paths = run_series(BASE, tmp_path / "runs", [1.0, 1.0, 1.1], edit=env)
    store = tmp_path / "h.sqlite"
    history.add(store, paths[:2])
    assert history.older_note(store) is None
    with sqlite3.connect(store) as con:
        for column in SETTINGS:
            con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        con.execute("UPDATE info SET value = '6' WHERE key = 'version'")
    con.close()
    df = history.frame(store)
    assert len(df) == 2 * CELLS and all(df[c].isna().all() for c in SETTINGS)
    assert len(history_runs.runs(store)) == 2 and history.machines(store) == [MACHINE]
    note = history.older_note(store)
    assert note.startswith(f"note: {store} is a history store of version 6, which does not record the runs'")
    rebuild = f"`attnbench history rebuild --store {store}` records them from each run's files"
    assert note.endswith(rebuild)
    data = store.read_bytes()
    with pytest.raises(history.StoreError, match="version 6, which this attnbench reads but adds no run to"):
        history.add(store, paths[2:])
    assert store.read_bytes() == data
    assert [a.state for a in history.rebuild(store, runs=paths[2:])] == ["added"] * 3
    df = history.frame(store)
    assert history.older_note(store) is None
    assert sorted(set(df["sweep_env"])) == ["MINE_EXTRA=0", "MINE_EXTRA=3"]
    assert set(df["transparent_hugepages"]) == {"always [madvise] never"}


def test_a_planted_step_is_found_at_its_run_with_what_changed(tmp_path):
    paths = run_series(BASE, tmp_path / "runs", [1.0] * 8 + [1.1] * 6, edit=_torch_after(8))
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    found = steps.find(history.frame(store))
    ok_series = 49  # the cells cpu-small measured ok
    assert len(found) == ok_series and {s.at for s in found} == {8} and all(s.latest for s in found)
    for s in found:
        assert 1.06 < s.ratio < 1.14 and s.low < s.ratio < s.high and s.low > 1.0
        assert s.after["run_id"] == "20261009-030000-synth" and s.before["run_id"] == "20261008-030000-synth"
        assert s.changed()["torch"] == ("2.13.0+cpu", "2.14.0+cpu") and "git_commit" in s.changed()
        assert not s.calibration_moved and s.calibration == pytest.approx(1.0)
    line = steps_text.describe(found[0])
    assert line.startswith(f"{found[0].cell_id} on {MACHINE}: +")
    assert "at run 20261009-030000-synth (2026-10-09; run 9 of 14)" in line
    assert "torch 2.13.0+cpu -> 2.14.0+cpu" in line and "calibration steady (x1.00)" in line
    # a 10% step in 1% noise: most series pin it to its run; each range holds it
    assert all(s.first[0] <= 8 <= s.first[1] for s in found), [s.first for s in found]
    assert sum(s.first == (8, 8) for s in found) >= 0.8 * len(found), [s.first for s in found]


def test_a_step_the_noise_cannot_pin_to_one_run_says_the_runs_and_commits_to_bisect(tmp_path):
    """The least-cost run is where a step is said to be; where a run beside it costs within LOCATION_SLACK x
    the noise (a run halfway between the two levels), the step says every such run and the commits of the
    last run surely before and the first surely after, the range to bisect."""
    times = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.05, 1.1, 1.11, 1.09, 1.1, 1.12, 1.1]
    at = steps.breakpoints(times)
    assert len(at) == 1 and at[0] in (7, 8)
    assert steps.location(times, at[0], 0, len(times)) == (7, 8)
    assert steps.location([1.0] * 7 + [1.1] * 7, 7, 0, 14) == (7, 7)
    paths = run_series(BASE, tmp_path / "runs", times, noise=0.0)
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    found = steps.find(history.frame(store))
    assert found and {s.first for s in found} == {(7, 8)}
    s = found[0]
    assert s.since["run_id"] == "20261007-030000-synth" and s.until["run_id"] == "20261009-030000-synth"
    line = steps_text.describe(s)
    commits = f"{short_hash(s.since['git_commit'])}..{short_hash(s.until['git_commit'])}"
    assert f", or any run from 8 to 9 (bisect commits {commits})" in line
    one_commit = dataclasses.replace(s, until={**s.until, "git_commit": s.since["git_commit"]})
    line = steps_text.describe(one_commit)  # the runs measured one commit: nothing to bisect
    assert ", or any run from 8 to 9" in line and "bisect" not in line, line


def test_a_flat_series_has_no_step(tmp_path):
    paths = run_series(BASE, tmp_path / "runs", [1.0] * 14, noise=0.02, seed=3)
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    assert steps.find(history.frame(store)) == []


def _calibration_down_from_run_6(i, meta):
    """run_series' edit: the machine's matmul calibration 20% lower from the seventh run on."""
    if i >= 6:
        meta["calibration"]["cpu"]["matmul_tflops"]["float32"] *= 0.8


def test_a_step_where_the_calibration_moved_says_so(tmp_path):
    paths = run_series(BASE, tmp_path / "runs", [1.0] * 6 + [1.25] * 6, edit=_calibration_down_from_run_6)
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    found = steps.find(history.frame(store))
    assert found and all(s.calibration_moved and s.calibration == pytest.approx(0.8) for s in found)
    assert "calibration moved too (x0.80 [0.80, 0.80]: the machine changed)" in steps_text.describe(found[0])
    assert "same commit" not in steps_text.describe(found[0])


def test_a_long_series_is_searched_coarsely_then_placed_at_the_exact_run():
    rng = random.Random(1)
    times = [(1.0 if i < 237 else 1.1) * (1 + rng.gauss(0, 0.01)) for i in range(400)]
    assert steps.breakpoints(times) == [237]  # jump 4: 237 is no multiple of it
    assert steps.breakpoints([2.0] * 30) == [] and steps.breakpoints([1.0, 2.0, 3.0]) == []


def test_a_calibration_that_moves_within_its_own_noise_is_no_machine_change(tmp_path):
    """Two cold calibrations before a step put the medians 25% apart; the runs around them spread over no
    change, so the step is the code's, as the line says."""
    cold = {0: 0.6, 1: 0.6, 2: 0.6, 4: 1.05, 5: 1.05}

    def cold_start(i, meta):
        meta["calibration"]["cpu"]["matmul_tflops"]["float32"] *= cold.get(i, 1.0)

    paths = run_series(BASE, tmp_path / "runs", [1.0] * 6 + [1.25] * 6, edit=cold_start)
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    found = steps.find(history.frame(store))
    low, high = found[0].calibration_interval
    assert found[0].calibration == pytest.approx(1.25) and low <= 1.0 <= high
    assert not any(s.calibration_moved for s in found)
    assert "calibration steady within its own noise (x1.25 [" in steps_text.describe(found[0])


# ---- a run's identity, runs still being written, store versions ------------------------------------------


def _rewrite(run, *, meta=None, rows=None, keep=None):
    """Edit a run directory's files: meta(dict) and rows(row) in place; keep the first `keep` rows only."""
    if meta is not None:
        data = json.loads((run / "meta.json").read_text())
        meta(data)
        (run / "meta.json").write_text(json.dumps(data))
    lines = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    for row in lines if rows is not None else ():
        rows(row)
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:keep]))


def _other_machine(meta):
    meta["fingerprint"]["cpu_model"] = "Intel Xeon"


def _later(row):
    row["finished_at"] = row["finished_at"].replace("T13:", "T14:")  # measured an hour apart
    if isinstance(row.get("time_ms_median"), float):
        row["time_ms_median"] *= 1.1


def test_two_runs_of_one_run_id_are_both_kept_and_a_copy_is_the_same_run(tmp_path):
    """CI containers of one hostname started in the same second make one run_id: `add` said '2 added' and kept
    only the last; a shorter copy of a run replaced its cells. A run is its run_id, created time, origin."""
    a, b = tmp_path / "coll" / "machineA", tmp_path / "coll" / "machineB"
    shutil.copytree(BASE, a)
    shutil.copytree(BASE, b)
    _rewrite(b, meta=_other_machine, rows=_later)
    store = tmp_path / "h.sqlite"
    added = history.add(store, [tmp_path / "coll"])
    assert [x.state for x in added] == ["added", "added"] and added[0].notes == ()
    assert added[1].notes == (
        f"{b} is another run than {a} with the same run_id 20261122-135800-vm and created time (made in the "
        "same second on a host of the same name): both are kept",
    )
    df = history.frame(store)
    assert len(df) == 2 * CELLS and df["machine"].nunique() == 2
    assert [x.state for x in history.add(store, [b, a])] == ["unchanged", "unchanged"]
    moved = tmp_path / "moved"
    a.rename(moved)  # a moved run is the same run, at its new path
    assert [x.state for x in history.add(store, [moved])] == ["unchanged"]
    assert set(history.frame(store)["path"]) == {str(moved), str(b)}
    short = tmp_path / "short"
    shutil.copytree(moved, short)
    _rewrite(short, keep=2)  # a copy made while it ran, say
    data = store.read_bytes()
    (older,) = history.add(store, [short])
    assert older.state == "older" and older.cells == 0 and store.read_bytes() == data
    assert older.notes[0].startswith(
        f"{short} is an older copy of run 20261122-135800-vm (2 cells of the {CELLS}"
    )
    assert len(history.frame(store)) == 2 * CELLS


def test_copies_given_together_are_recorded_once_and_the_fullest_is_kept(tmp_path):
    full, short, same = tmp_path / "full", tmp_path / "short", tmp_path / "same"
    for p in (full, short, same):
        shutil.copytree(BASE, p)
    _rewrite(short, keep=3)
    store = tmp_path / "h.sqlite"
    added = history.add(store, [short, full, same])
    assert [x.state for x in added] == ["older", "added", "unchanged"]
    assert added[0].notes[0].endswith(f"not added, the store keeps {full}'s")
    assert added[2].notes == (f"{same} is the same run as {full}: recorded once",)
    assert sum(x.cells for x in added) == CELLS and len(history.frame(store)) == CELLS


def test_two_runs_that_cannot_be_told_apart_are_refused_naming_both(tmp_path):
    """Same run_id, created time and rows but an edited meta.json, or two copies that each lack rows the
    other has: one line naming both paths, the store unchanged."""
    a, edited, diverged = tmp_path / "a", tmp_path / "edited", tmp_path / "diverged"
    for p in (a, edited, diverged):
        shutil.copytree(BASE, p)
    _rewrite(a, keep=CELLS - 1)
    _rewrite(edited, meta=_other_machine)
    _rewrite(diverged, rows=lambda r: r.update(finished_at="2026-11-22T15:00:00.000+00:00") if "naive" in
             r["cell_id"] else None)  # fmt: skip
    store = tmp_path / "h.sqlite"
    history.add(store, [a])
    data = store.read_bytes()
    for other, said in ((edited, "but their meta.json differ"), (diverged, "each has cells the other lacks")):
        with pytest.raises(RunDirError, match=f"^{other} and {a} are both run 20261122-135800-vm") as err:
            history.add(store, [other])
        assert said in str(err.value) and "\n" not in str(err.value) and store.read_bytes() == data


def test_a_copy_with_a_corrupt_line_and_the_same_rows_is_unchanged(tmp_path, runs):
    """An outside trial: a copy of a run with a garbage line in the middle of rows.jsonl, added over the
    clean run, read '1 updated' though not a row changed (the digest was the file's bytes). The lines a
    reader skips add no row: 'unchanged', said with the skipped line's warning; a changed row updates."""
    store = tmp_path / "h.sqlite"
    history.add(store, [runs[0]])
    copy = tmp_path / "copy"
    shutil.copytree(runs[0], copy)
    lines = (copy / "rows.jsonl").read_text().splitlines(keepends=True)
    (copy / "rows.jsonl").write_text("".join(lines[:2] + ["garbage{not json\n"] + lines[2:]))
    with pytest.warns(RowWarning, match=r"rows.jsonl:3: skipped an unreadable row \(corrupt"):
        (added,) = history.add(store, [copy])
    assert added.state == "unchanged"
    row = json.loads(lines[2])
    edited = json.dumps({**row, "time_ms_median": 2 * row["time_ms_median"]}) + "\n"
    (copy / "rows.jsonl").write_text("".join(lines[:2] + ["garbage{not json\n", edited] + lines[3:]))
    with pytest.warns(RowWarning):
        assert [a.state for a in history.add(store, [copy])] == ["updated"]


def test_a_run_still_being_written_is_refused_and_an_unfinished_one_says_so(tmp_path, runs):
    from attnbench.results.store import RunWriter

    store = tmp_path / "h.sqlite"
    history.add(store, [runs[0]])
    data = store.read_bytes()
    writer = RunWriter(runs[1], resume=True)  # a live writer holds its writer.lock
    try:
        with pytest.raises(RunDirError, match=f"^{runs[1]} is still being written \\(by pid ") as err:
            history.add(store, [runs[1], runs[2]])
        assert "\n" not in str(err.value) and store.read_bytes() == data
    finally:
        writer.close()
    _rewrite(runs[1], meta=lambda m: m.update(planned_cells=CELLS + 2), keep=CELLS - 1)  # killed mid-way
    _rewrite(runs[2], meta=lambda m: m.update(planned_cells=1), keep=0)  # killed before its first row
    unfinished, stopped = history.add(store, [runs[1], runs[2]])  # the lock a dead writer left holds nothing
    assert (unfinished.state, unfinished.cells, stopped.state, stopped.cells) == (
        "added",
        CELLS - 1,
        "stopped",
        0,
    )
    assert unfinished.notes == (
        f"{runs[1]} is unfinished: {CELLS - 1} of {CELLS + 2} planned cells (`attnbench run --resume --out "
        f"{runs[1]}` finishes it; add it again then)",
    )
    assert stopped.notes == (
        f"{runs[2]} has no measured cells (unfinished: 0 of 1 planned): recorded as a run with no cells "
        f"(`attnbench run --resume --out {runs[2]}` measures them; add it again then)",
    )
    assert history.frame(store)["run_key"].nunique() == 2  # cells: the stopped run has none
    assert history_runs.runs(store)["run_key"].nunique() == 3  # runs: what check counts, and MISSING orders


def test_a_run_stopped_before_its_first_row_is_recorded_on_its_machine_and_updated_by_its_resume(
    tmp_path, runs
):
    """A nightly in rounds writes a cell's row only once all its visits are done: stopped half-way it has
    meta.json and no row. `add` left it out, so `history check` judged the night before as the latest: green.
    Now it is recorded with no cells, on the machine its meta.json plans (the machine its cells would have),
    adding it again changes nothing, its resume updates it, and rebuild records it again."""
    store = tmp_path / "h.sqlite"
    rows = (runs[2] / "rows.jsonl").read_text()
    _rewrite(runs[2], meta=lambda m: m.update(planned_cells=CELLS), keep=0)
    assert [a.state for a in history.add(store, runs)] == ["added", "added", "stopped"]
    on = history_runs.runs(store)
    assert list(on["machine"]) == [MACHINE] * 3
    assert on["run_id"].iloc[-1] == json.loads((runs[2] / "meta.json").read_text())["run_id"]
    assert [a.state for a in history.add(store, [runs[2]])] == ["unchanged"]
    assert [(a.state, a.cells) for a in history.rebuild(store)][-1] == ("stopped", 0)
    (runs[2] / "rows.jsonl").write_text(rows)  # `attnbench run --resume` measured them
    ((state, cells),) = [(a.state, a.cells) for a in history.add(store, [runs[2]])]
    assert (state, cells) == ("updated", CELLS) and len(history.frame(store)) == 3 * CELLS
    assert history_runs.runs(store)["run_key"].nunique() == 3


def test_a_run_s_planned_machines_are_its_cells_machines():
    """A run with no rows is on the machines of its meta.json's device records (a GPU by its name), else of
    its sweep's device kinds on the fingerprint's host: named as its rows' would be (devices.machine_of)."""
    from attnbench.results import devices, read_meta

    meta = read_meta(BASE)
    assert devices.planned_machines(meta) == [MACHINE]
    where = "h1:cuda:GPU-1"
    meta["devices"] = {
        where: {"host": "h1", "device": "cuda", "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1"}
    }
    row = {"host": "h1", "device": "cuda", "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1"}
    assert devices.planned_machines(meta) == [devices.machine_of(meta, where, row)] == ["NVIDIA H200 on h1"]


def test_a_run_stopped_before_its_meta_json_is_named_as_one_without_cells(tmp_path, runs):
    """A directory a run stopped while starting left (its lock and worker log, no meta.json) is no run and
    has no cells: named in one note as a run without cells is, not an error; an empty folder is nothing."""
    stopped = tmp_path / "runs" / "stopped"
    stopped.mkdir()
    (stopped / "writer.lock").write_text("")
    (stopped / "worker.log").write_text("starting\n")
    (tmp_path / "runs" / "nothing").mkdir()
    added = history.add(tmp_path / "h.sqlite", [tmp_path / "runs"])
    assert [a.state for a in added] == ["added"] * 3 + ["empty"]
    assert added[-1].notes == (
        f"{stopped} has no cells (stopped before its meta.json was written): not added",
    )
    assert history.frame(tmp_path / "h.sqlite")["run_key"].nunique() == 3


def _older_store(tmp_path, runs):
    """A store of version 2, the layout before runs kept their origin."""
    store = tmp_path / "old.sqlite"
    history.add(store, runs)
    with sqlite3.connect(store) as con:
        con.execute("ALTER TABLE runs DROP COLUMN origin")
        con.execute("UPDATE info SET value = '2' WHERE key = 'version'")
    con.close()
    return store


@pytest.mark.parametrize("gone", ["keep", "drop"])
def test_an_older_store_whose_runs_are_partly_gone_is_rebuilt_with_gone(tmp_path, runs, gone):
    """rebuild refused while any recorded run was gone: with a retention policy, an older store could never
    be read again. --gone keep keeps what the store holds of them, --gone drop leaves them out."""
    store = _older_store(tmp_path, runs)
    shutil.rmtree(runs[0])
    data = store.read_bytes()
    with pytest.raises(RunDirError, match="1 run the store recorded is gone, e.g. .*run-000: .* --gone keep"):
        history.rebuild(store)
    assert store.read_bytes() == data
    added = history.rebuild(store, gone=gone)
    assert [x.state for x in added] == ["added", "added", "kept" if gone == "keep" else "dropped"]
    df = history.frame(store)
    assert len(df) == (3 if gone == "keep" else 2) * CELLS
    if gone == "keep":
        assert str(runs[0]) in set(df["path"]) and df["time_ms_median"].notna().any()
        assert [x.state for x in history.add(store, runs[1:])] == ["unchanged", "unchanged"]


def test_a_store_of_a_newer_version_says_to_upgrade_attnbench(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    with sqlite3.connect(store) as con:
        con.execute("UPDATE info SET value = '99' WHERE key = 'version'")
    con.close()
    data = store.read_bytes()
    # Not "version N and older": an older store is refused too (rebuild it). attnbench is installed from a
    # clone, not PyPI: the hint was `pip install -U attnbench`, which fails.
    said = "made by a newer attnbench (a history store of version 99; this attnbench reads version "
    said += f"{history.VERSION})"
    said = re.escape(said) + ": update attnbench: `git pull`"
    for action in (history.frame, history.rebuild, lambda s: history.add(s, runs)):
        with pytest.raises(history.StoreError, match=said) as err:
            action(store)
        assert "rebuild" not in str(err.value) and store.read_bytes() == data
        assert "pip install -U" not in str(err.value) and "pip install -e ." in str(err.value)


def test_an_empty_file_is_no_store_to_read_and_a_new_store_to_add_to(tmp_path, runs):
    """A touched store said '(no such table: info)'. It holds nothing to lose: add makes a store in it."""
    store = tmp_path / "h.sqlite"
    store.touch()
    with pytest.raises(history.StoreError, match="h.sqlite is an empty file, not a history store yet"):
        history.frame(store)
    assert store.read_bytes() == b""
    assert [x.state for x in history.add(store, runs[:1])] == ["added"]
    assert len(history.frame(store)) == CELLS


def test_a_calibration_judged_on_too_few_runs_after_the_step_is_not_said_to_be_a_machine_change(tmp_path):
    """A PENDING step (2 runs after it) with the calibration 20% down across it: a VM's own calibration moves
    that much between two runs, and with no interval on that side the line cannot tell; it says so instead of
    'the machine changed'."""
    paths = run_series(BASE, tmp_path / "runs", [1.0] * 6 + [1.25] * 2, edit=_calibration_down_from_run_6)
    store = tmp_path / "h.sqlite"
    history.add(store, paths)
    found = steps.find(history.frame(store))
    assert found and all(s.runs_after == 2 and not s.calibration_moved for s in found)
    line = steps_text.describe(found[0])
    assert "calibration x0.80: too few runs after the step to tell" in line and "machine changed" not in line
