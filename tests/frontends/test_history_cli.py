"""`attnbench history` through the real CLI (in this process, conftest.run_cli) and `attnbench.history`, on
copies of a real run whose times are edited: the store, bad input in one line, steps found and gated."""

from __future__ import annotations

import pytest
from conftest import DATA, run_cli
from synthetic import run_series

import attnbench

BASE = DATA / "runs" / "cpu-small"


@pytest.fixture
def runs(tmp_path):
    return run_series(BASE, tmp_path / "runs", [1.0] * 4)


def test_add_records_a_folder_once(tmp_path, runs):
    store = str(tmp_path / "h.sqlite")
    p = run_cli("history", "add", str(tmp_path / "runs"), "--store", store, check=True)
    assert p.stderr.strip() == f"history: 4 runs (4 added; 320 cells read) in {store}"
    p = run_cli("history", "add", str(runs[0]), str(runs[1]), "--store", store, check=True)
    assert p.stderr.strip() == f"history: 2 runs (2 unchanged; 0 cells read) in {store}"
    p = run_cli("history", "rebuild", "--store", store, check=True)
    assert p.stderr.strip() == f"rebuilt: 4 runs (4 added; 320 cells read) in {store}"
    df = attnbench.history(store=store)
    assert len(df) == 320 and df["run_id"].nunique() == 4


def test_the_api_adds_what_it_is_given(tmp_path, runs):
    store = tmp_path / "h.sqlite"
    df = attnbench.history(runs[:2], store=store, machine="EPYC")
    assert df["run_id"].nunique() == 2 and store.is_file()


@pytest.mark.parametrize("case", ["not a run", "corrupt store", "another schema version"])
def test_bad_input_is_one_line_and_the_store_is_unchanged(tmp_path, runs, case):
    store = tmp_path / "h.sqlite"
    run_cli("history", "add", str(runs[0]), "--store", str(store), check=True)
    target = str(runs[1])
    if case == "not a run":
        (tmp_path / "empty").mkdir()
        target = str(tmp_path / "empty")
    elif case == "corrupt store":
        store.write_bytes(b"garbage" * 50)
    else:
        meta = runs[1] / "meta.json"
        meta.write_text(meta.read_text().replace('"schema_version": 1', '"schema_version": 7'))
    data = store.read_bytes()
    p = run_cli("history", "add", target, "--store", str(store))
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("attnbench: error: "), p.stderr
    assert store.read_bytes() == data
