"""Measuring a run's cells again: `attnbench repro` (one self-contained command line per cell) and
`attnbench run --rerun` (chosen cells of a run into a new run), through the real CLI and real runs."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from conftest import DATA, run_cli

FIXTURE = DATA / "runs" / "cpu-small"
CELL = "naive|cpu|float32|b1|h8|n256|dk64|dv64|full|pad0|fwd"  # a cell of FIXTURE


@pytest.fixture(scope="module")
def old_run(carried_run):
    """conftest's carried_run (a variant file, --env variables, CPU pinning and non-default sampling settings:
    everything the repro line and --rerun have to carry over); its folder, where the new runs go."""
    return carried_run.parent


def _rows(path):
    return [json.loads(line) for line in (path / "rows.jsonl").read_text().splitlines()]


def _meta(path):
    return json.loads((path / "meta.json").read_text())


@pytest.mark.slow
def test_repro_line_measures_exactly_that_cell_again(old_run):
    old = old_run / "old"
    cell_id = "mine|cpu|float32|b1|h2|n64|dk64|dv64|full|pad0|fwd"
    p = run_cli("repro", str(old), cell_id, cwd=old_run, check=True)
    lines = p.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnbench run "), p.stdout
    argv = shlex.split(lines[0])
    assert str(old_run / "mine.py") in argv and "ATTNBENCH_TEST_ENV=1" in argv  # self-contained
    new = old_run / argv[argv.index("--out") + 1]
    done = run_cli(*argv[1:], cwd=old_run, check=True)
    assert str(new.relative_to(old_run)) in done.stdout
    assert [r["cell_id"] for r in _rows(new)] == [cell_id] and _rows(new)[0]["status"] == "ok"
    before, after = _meta(old), _meta(new)
    assert after["sweep"]["settings"] == before["sweep"]["settings"]  # seed, budgets, env, CPUs
    assert after["variant_files"] == before["variant_files"]
    assert after["cpu_affinity"] == before["cpu_affinity"]
    # the new run says it is a repro: `history add` of the folder the nightly's runs are in leaves it out
    # of the series (it landed in runs/ and was drawn as a night: trial S, L2), and adds it by its name
    assert after["repro_of"] == before["run_id"] and argv[argv.index("--repro-of") + 1] == before["run_id"]
    store = str(old_run / "history.sqlite")
    p = run_cli("history", "add", str(old_run), "--store", store, check=True)
    assert f"left out: {new.resolve()} is a repro of run {before['run_id']} " in p.stderr, p.stderr
    assert "add it by name to keep it" in p.stderr and "1 repro left out" in p.stderr.splitlines()[0]
    from attnbench.results import history

    assert before["run_id"] in set(history.frame(store)["run_id"])
    assert after["run_id"] not in set(history.frame(store)["run_id"])
    p = run_cli("history", "add", str(new), "--store", store, check=True)
    assert p.stderr.startswith("history: 1 run (1 added;"), p.stderr
    assert after["run_id"] in set(history.frame(store)["run_id"])


@pytest.mark.slow
def test_rerun_chosen_cells_into_a_new_run_then_compare(old_run):
    old = old_run / "old"
    ok = [r["cell_id"] for r in _rows(old) if r["status"] == "ok"]
    assert len(ok) == 4
    p = run_cli("run", "--rerun", str(old), "--status", "ok", "--out", str(old_run / "all"), cwd=old_run)
    assert p.returncode == 0, p.stderr
    assert f"attnbench compare {old} {old_run / 'all'}" in p.stderr
    assert sorted(r["cell_id"] for r in _rows(old_run / "all")) == sorted(ok)
    meta = _meta(old_run / "all")
    assert meta["rerun_of"] == {"run_dir": str(old.resolve()), "run_id": _meta(old)["run_id"]}
    assert meta["sweep"] == _meta(old)["sweep"] and sorted(meta["cells"]) == sorted(ok)

    two = [ok[0], ok[-1]]
    out = old_run / "two"
    run_cli("run", "--rerun", str(old), "--cells", ",".join(two), "--out", str(out), check=True)
    assert [r["cell_id"] for r in _rows(out)] == two
    assert run_cli("run", "--resume", "--out", str(out), check=True).returncode == 0
    assert len(_rows(out)) == 2  # a resumed rerun keeps to its cells

    cmp = run_cli("compare", str(old), str(out), "--out", str(old_run / "cmp"), cwd=old_run)
    assert cmp.returncode == 0, cmp.stderr
    assert "cells matched by cell_id" in cmp.stdout
    from attnbench.reports.compare import compare_runs

    assert len(compare_runs(str(old), str(out)).cells) == 2  # the two re-measured cells, matched


BAD = [
    (["run", "--rerun", "NOPE"], "does not exist"),
    (["run", "--rerun", str(FIXTURE), "--cells", "naive|cpu|nope"], "no cell 'naive|cpu|nope' in"),
    (["run", "--rerun", str(FIXTURE), "--status", "fine"], "unknown status 'fine'; known: ok,"),
    (["run", "--rerun", str(FIXTURE), "--status", "timeout"], "has status 'timeout'"),
    (["run", "--rerun", str(FIXTURE), "--status", "ok", "--cells", CELL], "not both"),
    (["run", "--rerun", str(FIXTURE), "--seq-len", "64"], "drop --seq-len"),
    (["run", "--rerun", str(FIXTURE), "--resume"], "--rerun writes a new run"),
    (["run", "--cells", CELL], "give --rerun too"),
    (["run", "--resume", "--repro-of", "20261001-030000-vm"], "--repro-of names the run a new run measures"),
    (["run", "--variants", "naive", "--repro-of", " "], "give it a run_id"),
    (["repro", "NOPE", CELL], "does not exist"),
    (["repro", str(FIXTURE), "naive|nope"], "no cell 'naive|nope' in"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a[:2] + a[3:]) for a, _ in BAD])
def test_bad_rerun_or_repro_is_one_line_exit_2_nothing_written(tmp_path, args, message):
    p = run_cli(*args, "--out", str(tmp_path / "new"), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnbench: error:") and message in lines[0], p.stderr
    assert p.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_built_in_cells_repro_carries_no_variant_file(old_run):
    """naive beside a variant file's mine: naive's line named mine.py (or a notebook's variants.pkl) too,
    so that it failed, and warned, wherever that file was gone; mine's keeps it."""
    old = old_run / "old"
    naive = run_cli("repro", str(old), "naive|cpu|float32|b1|h2|n64|dk64|dv64|full|pad0|fwd", check=True)
    mine = run_cli("repro", str(old), "mine|cpu|float32|b1|h2|n64|dk64|dv64|full|pad0|fwd", check=True)
    assert "--variant-file" not in shlex.split(naive.stdout) and not naive.stderr, naive
    assert str(old_run / "mine.py") in shlex.split(mine.stdout)


def test_repro_of_the_published_run_writes_every_setting_out():
    ref = DATA.parent.parent / "results" / "reference" / "cpu-epyc-2core"
    cell = "sdpa|cpu|float32|b1|h8|n4096|dk64|dv64|causal|pad0|fwd"
    p = run_cli("repro", str(ref), cell, check=True)
    argv = shlex.split(p.stdout)
    flags = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert flags["--variants"] == "sdpa" and flags["--seq-len"] == "4096" and flags["--causal"] == "yes"
    assert flags["--env"] == "THP_MEM_ALLOC_ENABLE=1" and flags["--budget-ms"] == "1000"
    assert "--cpu-affinity" not in flags  # the run was not pinned
    assert flags["--out"] == f"runs/repro-20261123-122155-vm-{cell.replace('|', '-')}"


def test_api_rerun_refuses_what_it_would_ignore():
    import attnbench

    with pytest.raises(ValueError, match="choose cells of rerun=RUN_DIR; give rerun too"):
        attnbench.run(cells=CELL)
    with pytest.raises(ValueError, match="drop seq_len"):
        attnbench.run(rerun=FIXTURE, seq_len=64)
    with pytest.raises(ValueError, match=re.escape("no cell 'naive|nope' in")):
        attnbench.run(rerun=FIXTURE, cells="naive|nope")


@pytest.mark.parametrize(
    "run,cell",
    [
        ("varlen-epyc-2core", "sdpa_loop|cpu|float32|b8|h4|n128|dk64|dv64|causal|pad0|fwd|len-longtail"),
        ("paged-epyc-2core", None),
    ],
)
def test_the_repro_line_of_a_packed_or_paged_cell_is_one_run_accepts(run, cell, tmp_path):
    """A packed cell's line said --seq-k, which --lengths refuses there (a pack's sequences hold their own
    keys); a paged cell's keeps it (its context length): the line must run as printed."""
    ref = DATA.parent.parent / "results" / "reference" / run
    cell = cell or json.loads((ref / "rows.jsonl").read_text().splitlines()[0])["cell_id"]
    argv = shlex.split(run_cli("repro", str(ref), cell, check=True).stdout)
    assert ("--seq-k" in argv) == ("--page-size" in argv), argv
    dry = run_cli(*argv[1:], "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "1 cell: 1 to measure" in dry.stdout, dry.stderr


def test_a_rerun_of_cells_not_ok_before_points_at_its_report_not_at_compare(tmp_path):
    """`--rerun RUN --status crashed` said `compare with: attnbench compare RUN NEW`, which judges nothing
    (`crashed -> ok; verdicts: no cell ok in both runs`): the line names what reads the new rows instead."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(FIXTURE, old)
    rows = _rows(old)
    for row in rows:
        if row["cell_id"] == CELL:
            row.update(status="crashed", message="the worker died (signal 9)")
    (old / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    new = tmp_path / "new"
    p = run_cli("run", "--rerun", str(old), "--status", "crashed", "--out", str(new), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "attnbench compare" not in p.stderr, p.stderr
    assert (
        f"no cell measured again was ok in {old} (crashed there): compare would judge none; read the new "
        f"rows with: attnbench report {new}"
    ) in p.stderr, p.stderr
