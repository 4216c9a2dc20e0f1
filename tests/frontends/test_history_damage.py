"""`attnbench history` on a shared box: adds at once into one new store (real processes), a folder of runs
with a damaged one in it, two copies of one run, and a damaged store that `rebuild` makes again."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import DATA, cli_env, run_cli
from synthetic import run_series

import attnbench
from attnbench.results import history

BASE = DATA / "runs" / "cpu-small"
CELLS = sum(1 for line in (BASE / "rows.jsonl").read_text().splitlines() if line.strip())


def test_adds_at_once_into_one_new_store_all_succeed_and_record_every_run(tmp_path):
    """Two CI jobs sending runs to one fresh store raced: one made the tables after the other had, and
    failed with an internal error ("table info already exists"). Six real processes, three times over."""
    runs = run_series(BASE, tmp_path / "runs", [1.0] * 6)
    for attempt in range(3):
        store = tmp_path / f"h{attempt}.sqlite"
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "attnbench", "history", "add", str(run), "--store", str(store)],
                env=cli_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for run in runs
        ]
        said = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * len(runs), said
        df = history.frame(store)
        assert df["run_id"].nunique() == len(runs) and len(df) == len(runs) * CELLS


def test_a_folder_with_a_damaged_run_is_refused_in_one_line_naming_it_and_nothing_is_added(tmp_path):
    runs = run_series(BASE, tmp_path / "runs", [1.0] * 3)
    meta = runs[1] / "meta.json"
    meta.write_text(meta.read_text()[:500])
    store = tmp_path / "h.sqlite"
    p = run_cli("history", "add", str(tmp_path / "runs"), "--store", str(store))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert f"{meta} is not valid JSON" in p.stderr and "nothing was added" in p.stderr
    assert not store.exists()


def test_a_run_that_lost_its_meta_json_is_refused_not_skipped(tmp_path):
    """Its 80 finished rows were left out without a word."""
    runs = run_series(BASE, tmp_path / "runs", [1.0] * 3)
    (runs[2] / "meta.json").unlink()
    store = tmp_path / "h.sqlite"
    history.add(store, runs[:1])
    before = store.read_bytes()
    p = run_cli("history", "add", str(tmp_path / "runs"), "--store", str(store))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert f"{runs[2]} holds rows.jsonl but no meta.json" in p.stderr and "nothing was added" in p.stderr
    assert store.read_bytes() == before


def test_a_folder_below_that_holds_no_run_is_said(tmp_path):
    runs = run_series(BASE, tmp_path / "runs", [1.0] * 2)
    notes = tmp_path / "runs" / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("look at sdpa\n")
    (tmp_path / "runs" / "empty").mkdir()  # holds nothing: nothing to say
    store = tmp_path / "h.sqlite"
    p = run_cli("history", "add", str(tmp_path / "runs"), "--store", str(store), check=True)
    lines = p.stderr.strip().splitlines()
    assert lines[0] == (  # the notes are no run: counted apart ('3 runs (2 added, 1 holding no run ...')
        f"history: 2 runs (2 added; {2 * CELLS} cells read) in {store}; 1 folder holding no run left out"
    )
    assert lines[1:] == [f"{notes} holds no run (no meta.json in it or below it): left out"]
    assert history.frame(store)["run_id"].nunique() == len(runs)


def test_of_two_copies_with_the_same_rows_the_intact_one_is_kept_whatever_the_path_order(tmp_path):
    """The store kept the copy whose rows.jsonl had garbage appended, because its path came first."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(BASE, runs / "a-tampered")
    shutil.copytree(BASE, runs / "b-clean")
    with (runs / "a-tampered" / "rows.jsonl").open("a") as fh:
        fh.write("garbage{\n")
    store = tmp_path / "h.sqlite"
    added = history.add(store, [runs])
    assert sorted(a.state for a in added) == ["added", "unchanged"]
    assert set(history.frame(store)["path"]) == {str(runs / "b-clean")}
    (note,) = [n for a in added for n in a.notes]
    assert note.startswith(f"{runs / 'a-tampered'} is the same run as {runs / 'b-clean'}, but its rows.jsonl")
    assert note.endswith(f"recorded once, from {runs / 'b-clean'}")


def test_two_copies_with_different_rows_one_of_them_damaged_are_refused_naming_both(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(BASE, runs / "a")
    shutil.copytree(BASE, runs / "b")
    lines = (runs / "b" / "rows.jsonl").read_text().splitlines(keepends=True)
    (runs / "b" / "rows.jsonl").write_text("".join(lines[:-1]) + "garbage{\n")  # a row less, and garbage
    p = run_cli("history", "add", str(runs), "--store", str(tmp_path / "h.sqlite"))
    *warned, said = p.stderr.strip().splitlines()  # the warning reading b's rows names its line
    assert p.returncode == 2 and len(warned) <= 1
    assert f"{runs / 'b'} and {runs / 'a'} are both run" in said and "add only the one to keep" in said
    assert not (tmp_path / "h.sqlite").exists()


@pytest.mark.parametrize("where", [0, 4096])  # the header (not a database), a page (malformed)
def test_a_damaged_store_says_rebuild_and_rebuild_makes_it_again_from_the_runs(tmp_path, where):
    runs = run_series(BASE, tmp_path / "runs", [1.0] * 3)
    store = tmp_path / "h.sqlite"
    history.add(store, runs[:2])
    with store.open("r+b") as fh:
        fh.seek(where)
        fh.write(b"\xff" * 4096)
    damaged = store.read_bytes()
    for args in (("add", str(runs[2])), ("check",)):
        p = run_cli("history", *args, "--store", str(store))
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert f"`attnbench history rebuild RUN... --store {store}`" in p.stderr
    p = run_cli("history", "rebuild", "--store", str(store))
    aside = tmp_path / "h.sqlite.damaged"
    if where == 0:  # what it recorded cannot be read: the runs are to be named
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
        assert "runs it recorded cannot be read from it: name them" in p.stderr
        assert store.read_bytes() == damaged
    else:  # its table of runs is whole: made again from them
        assert p.returncode == 0 and f"the damaged store was set aside as {aside}" in p.stderr
        assert attnbench.history(store=store)["run_id"].nunique() == 2
        aside.rename(tmp_path / "first.damaged")
        store.write_bytes(damaged)
    p = run_cli("history", "rebuild", str(tmp_path / "runs"), "--store", str(store), check=True)
    assert f"the damaged store was set aside as {aside}" in p.stderr
    assert aside.read_bytes() == damaged
    df = attnbench.history(store=store)
    assert df["run_id"].nunique() == 3 and len(df) == 3 * CELLS
