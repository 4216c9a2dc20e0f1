"""Run directories on real files: append-only rows, torn lines, no overwrite, versions, the loader."""

from __future__ import annotations

import json
import os
import warnings

import pytest

from attnbench.results import (
    RowWarning,
    RunDirError,
    RunWriter,
    UncollectedWarning,
    export,
    load,
    merge_shards,
    read_meta,
    read_rows,
)
from attnbench.results.schema import COLUMNS, SCHEMA_VERSION

ROW = {
    "cell_id": "naive|cpu|float32|b1|h1|n8|dk8|dv8|full|pad0|fwd",
    "variant": "naive",
    "device": "cpu",
    "dtype": "float32",
    "batch": 1,
    "heads": 1,
    "seq_len": 8,
    "d_k": 8,
    "d_v": 8,
    "causal": False,
    "padding": 0.0,
    "pass": "fwd",
    "status": "ok",
    "message": "",
    "time_ms_median": 1.5,
    "samples_ms": [1.4, 1.5, 1.6],
    "peak_mem_bytes": 1024,
    "rel_err": float("inf"),
}


def _run(tmp_path, n=3, run_id="r1"):
    w = RunWriter(tmp_path / "run")
    w.write_meta(
        {
            "run_id": run_id,
            "sweep": {"devices": ["cpu"]},
            "fingerprint": {"cpu_model": "X", "physical_cores": 2},
        }
    )
    for i in range(n):
        w.append({**ROW, "cell_id": f"c{i}", "seq_len": 8 * (i + 1)})
    w.close()
    return tmp_path / "run"


def test_rows_roundtrip_and_meta_has_version(tmp_path):
    path = _run(tmp_path)
    assert read_meta(path)["schema_version"] == SCHEMA_VERSION
    rows = read_rows(path)
    assert [r["cell_id"] for r in rows] == ["c0", "c1", "c2"]
    assert rows[0]["rel_err"] == float("inf")


def test_torn_last_line_is_skipped_and_repaired_on_resume(tmp_path):
    path = _run(tmp_path)
    with open(path / "rows.jsonl", "ab") as fh:
        fh.write(b'{"cell_id": "c3", "status": "o')  # the kill landed mid-write
    with pytest.warns(UserWarning, match="torn"):
        assert len(read_rows(path)) == 3
    with pytest.warns(UserWarning, match="torn"):
        w = RunWriter(path, resume=True)
    assert set(w.done) == {"c0", "c1", "c2"}
    w.append({**ROW, "cell_id": "c3"})
    w.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fragment was cut off: the file reads clean again
        assert [r["cell_id"] for r in read_rows(path)] == ["c0", "c1", "c2", "c3"]


def test_a_complete_row_missing_only_its_newline_is_kept(tmp_path):
    path = _run(tmp_path)
    with open(path / "rows.jsonl", "ab") as fh:
        fh.write(json.dumps({**ROW, "cell_id": "c3"}).encode())  # killed before the newline
    w = RunWriter(path, resume=True)
    assert "c3" in w.done
    w.append({**ROW, "cell_id": "c4"})
    w.close()
    assert [r["cell_id"] for r in read_rows(path)] == ["c0", "c1", "c2", "c3", "c4"]


def test_no_silent_overwrite(tmp_path):
    path = _run(tmp_path)
    with pytest.raises(RunDirError, match="already exists"):
        RunWriter(path)
    w = RunWriter(path, resume=True)
    with pytest.raises(RunDirError, match="written once"):
        w.write_meta({"run_id": "again"})


def test_unknown_schema_version_is_refused(tmp_path):
    path = _run(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    meta["schema_version"] = 99
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match="schema version 99: a newer attnbench made it") as err:
        load(path)
    assert "update attnbench: `git pull`" in str(err.value)
    meta["schema_version"] = 0
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match=r"schema version 0: an older attnbench made it \(this attnbench"):
        load(path)
    del meta["schema_version"]  # read as "has schema version None"
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match="has no schema_version, which every run attnbench writes") as err:
        load(path)
    assert "None" not in str(err.value)
    meta["schema_version"] = "1"  # issue 40: read as "has schema version '1'; this attnbench reads [1]"
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        RunDirError, match=r'schema_version "1", a string; attnbench writes it as a number \(1\)'
    ):
        load(path)


def test_not_a_run(tmp_path):
    with pytest.raises(RunDirError, match="does not exist"):
        load(tmp_path / "nope")
    with pytest.raises(RunDirError, match="not an attnbench run"):
        load(tmp_path)


def csv_rows(text: str) -> list[dict[str, str]]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def test_loader_types_and_merge(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", n=2, run_id="r2")
    df = load(a, b)
    assert len(df) == 5
    assert load([a, b]).equals(df)  # a list of runs is the same as several arguments
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert str(df["seq_len"].dtype) == "Int64" and str(df["causal"].dtype) == "boolean"
    assert df["machine"].iloc[0] == "X (2 cores) on ?"  # the device's model on its host (none recorded)
    assert df["samples_ms"].iloc[0] == [1.4, 1.5, 1.6]
    csv = export(df, "csv")
    assert csv.splitlines()[0].startswith("run_id,machine,cell_id,variant")
    assert "samples_ms" not in csv.splitlines()[0]
    # a computed float is written as the number it is, not its binary noise (0.1 + 0.2: 0.30000000000000004),
    # and every digit a double holds survives
    noisy = df.assign(time_ms_median=0.1 + 0.2, rel_err=1 / 3, tflops=1.0)
    (row,) = csv_rows(export(noisy.head(1), "csv"))
    assert row["time_ms_median"] == "0.3" and row["tflops"] == "1.0"
    assert row["rel_err"] == "0.333333333333333"
    assert json.loads(export(df, "json"))[0]["samples_ms"] == [1.4, 1.5, 1.6]


def test_the_same_run_given_twice_is_refused_in_one_line(tmp_path):
    """Its rows would be in the frame twice (a later pivot fails): the same folder however spelled, or a copy
    of it (the same run_id in meta.json), is refused as report and compare refuse it."""
    import shutil

    a = _run(tmp_path / "a")
    assert len(load(a)) == 3
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    for twice in ((a, a), (a, f"{a}/"), (a, tmp_path / "a" / ".." / "a" / "run"), (a, copy)):
        with pytest.raises(ValueError, match=r"^the same run is given twice.*: give each run once$") as e:
            load(*twice)
        assert "\n" not in str(e.value) and str(twice[1]).rstrip("/") in str(e.value)
    with pytest.raises(ValueError, match="run_id r1"):
        load([a, copy])
    import attnbench

    with pytest.raises(ValueError, match="the same run is given twice"):
        attnbench.load(a, a)


def test_committed_fixture_loads():
    from conftest import DATA

    df = load(DATA / "runs" / "cpu-small")
    assert set(df["status"]) >= {"ok", "wrong", "oom", "skipped", "unsupported"}
    assert df["time_ms_median"][df["status"] == "ok"].notna().all()


def test_one_writer_per_run_directory(tmp_path):
    first = RunWriter(tmp_path / "run")
    first.write_meta({"run_id": "x", "sweep": {}})
    with pytest.raises(RunDirError, match=rf"being written by pid {os.getpid()} on host"):
        RunWriter(tmp_path / "run", resume=True)
    first.close()
    second = RunWriter(tmp_path / "run", resume=True)  # free again once the first writer closed
    second.close()


def test_a_new_run_into_a_folder_another_run_writes_is_told_to_go_elsewhere(tmp_path):
    """A second sweep into the --out of a live run was told to 'resume it', which would have finished the
    first person's sweep and never measured its own: it is told to choose another --out, whether the first
    run is still starting (no meta.json) or measuring; a second resume still waits and resumes."""
    from attnbench.harness.run.request import RunRequest

    first = RunWriter(tmp_path / "run")  # starting: its lock, no meta.json yet
    for stage in ("starting", "measuring"):
        with pytest.raises(RunDirError) as refused:
            RunWriter(tmp_path / "run")
        said = str(refused.value)
        assert f"being written by pid {os.getpid()} on host" in said, stage
        assert said.endswith("another run is writing it, so choose another --out for this one"), stage
        assert "resume" not in said, stage
        if stage == "measuring":
            with pytest.raises(ValueError, match="another run is writing it, so choose another --out"):
                RunRequest(out=str(tmp_path / "run")).check()
        else:
            first.write_meta({"run_id": "x", "sweep": {}})
    with pytest.raises(RunDirError, match="wait for it to finish \\(or stop it\\), then resume it$"):
        RunWriter(tmp_path / "run", resume=True)
    first.close()


def test_published_reference_run_loads():
    """The run committed in results/reference (linked from the README) stays loadable."""
    from conftest import ROOT

    # every run directory (a folder of a benchmark's logs, such as a GPU session's checks, is none)
    runs = sorted(p for p in (ROOT / "results" / "reference").iterdir() if (p / "meta.json").is_file())
    assert runs, "no published reference run"
    df = load(runs)
    assert (df["status"] == "ok").sum() >= 10
    ok = df[df["status"] == "ok"]
    assert ok["peak_mem_bytes"].notna().all() and (ok["tflops"] > 0).all()


def test_rows_of_a_run_before_per_row_hosts_are_where_its_fingerprint_was_taken(tmp_path):
    """quick-epyc-2core's rows carry no `host`: `where` read '?:cpu' while `machine` read '... on vm' from
    the fingerprint. A run without meta.json `devices` ran on one host, the fingerprint's: both name it.
    A run that lists its devices keeps a host-less row's '?'."""
    import shutil

    from conftest import ROOT

    run = ROOT / "results" / "reference" / "quick-epyc-2core"
    assert all("host" not in json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines())
    df = load(run)
    assert set(df["where"]) == {"vm:cpu"} and set(df["host"]) == {"vm"}
    assert all(m.endswith(" on vm") for m in df["machine"])
    listed = tmp_path / "listed"
    shutil.copytree(run, listed)
    meta = json.loads((listed / "meta.json").read_text())
    meta["devices"] = {"other:cpu": {"host": "other", "device": "cpu"}}
    (listed / "meta.json").write_text(json.dumps(meta))
    assert set(load(listed)["where"]) == {"?:cpu"}


def test_cli_reports_a_skipped_row_as_one_line_without_python_source(tmp_path):
    import shutil

    from conftest import DATA, run_cli

    path = tmp_path / "run"
    shutil.copytree(DATA / "runs" / "cpu-small", path)
    rows = (path / "rows.jsonl").read_text().splitlines()
    rows.insert(3, '{"cell_id": "x", "status": "o')  # a torn line in the middle
    rows.insert(5, "[1, 2]")  # JSON, but no row
    (path / "rows.jsonl").write_text("\n".join(rows) + "\n")
    p = run_cli("export", str(path), check=True)
    assert len(p.stdout.splitlines()) == 1 + 80  # every real row still there
    lines = p.stderr.splitlines()
    assert lines == [
        f"attnbench: warning: {path / 'rows.jsonl'}:4: skipped an unreadable row (corrupt: not the last "
        "line, so no torn write)",
        f"attnbench: warning: {path / 'rows.jsonl'}:6: skipped a line that is not a result row (no cell_id)",
    ], p.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(read_rows(path)) == 80
    assert [w.category for w in caught] == [RowWarning, RowWarning]


def test_a_report_says_a_skipped_row_once_and_names_it_in_its_findings(tmp_path):
    """An outside trial: a garbage line in the middle of rows.jsonl, or its last line cut short, and report
    warned twice (read for the rows, then for what changed them), called a middle line a torn write, and its
    page had no trace of the lost row ("30 of 44 cells" and nothing else). Once each, a torn write only at
    the end, and a findings sentence on the page naming the line."""
    import shutil

    from conftest import DATA, run_cli

    from attnbench.results.store import RowWarning, read_rows

    for where in ("middle", "end"):
        path = tmp_path / where
        shutil.copytree(DATA / "runs" / "cpu-small", path)
        rows = (path / "rows.jsonl").read_text().splitlines()
        if where == "middle":
            rows.insert(3, "garbage{not json")
        else:
            rows[-1] = rows[-1][:-30]  # cut short, as a kill mid-write leaves it
        (path / "rows.jsonl").write_text("\n".join(rows) + ("\n" if where == "middle" else ""))
        line = 4 if where == "middle" else len(rows)
        why = "corrupt: not the last line, so no torn write" if where == "middle" else "torn write?"
        said = f"{path / 'rows.jsonl'}:{line}: skipped an unreadable row ({why})"
        with pytest.warns(RowWarning) as caught:
            read_rows(path)
        assert [str(w.message) for w in caught] == [said]
        if where == "end":
            continue  # the whole report once, for the middle line: its page and its one warning
        p = run_cli("report", str(path), "--out", str(tmp_path / f"rep-{where}"), check=True)
        assert [ln for ln in p.stderr.splitlines() if "warning" in ln] == [f"attnbench: warning: {said}"]
        readme = (tmp_path / f"rep-{where}" / "README.md").read_text().replace("\\_", "_")
        assert f"Not read: {said}; any cell it held is in no count of this report." in readme


def _shard(run, name, rows, tail=b""):
    """shards/NAME.jsonl as one executor task writes it, optionally ending in a torn fragment."""
    (run / "shards").mkdir(exist_ok=True)
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows) + tail
    (run / "shards" / f"{name}.jsonl").write_bytes(data)


def _at(cell_id, finished_at, **kw):
    return {**ROW, "cell_id": cell_id, "finished_at": finished_at, **kw}


def test_merge_shards_keeps_the_first_finished_row_and_says_which_it_dropped(tmp_path):
    from attnbench.results.store import Duplicate

    run = _run(tmp_path, n=1)  # rows.jsonl holds c0
    _shard(run, "task-0", [_at("s1", "2026-01-01T10:00:05+00:00", time_ms_median=9.0),
                           _at("s2", "2026-01-01T10:00:01+00:00")])  # fmt: skip
    _shard(
        run,
        "task-1",
        [
            _at("s1", "2026-01-01T10:00:02+00:00", time_ms_median=1.0),  # finished first
            _at("c0", "2026-01-01T09:00:00+00:00"),
        ],  # fmt: skip
        tail=b'{"cell_id": "s3", "status": "o',
    )  # the task was killed mid-write
    with pytest.warns(RowWarning, match=r"task-1.jsonl:3: skipped an unreadable row \(torn write\?\)"):
        merged = merge_shards(run)
    assert merged.added == ["s1", "s2"]
    assert merged.duplicates == [
        Duplicate("s1", kept="shards/task-1.jsonl:1", dropped="shards/task-0.jsonl:1"),
        Duplicate("c0", kept="rows.jsonl", dropped="shards/task-1.jsonl:2"),  # collected rows stay
    ]
    rows = {r["cell_id"]: r for r in read_rows(run)}
    assert list(rows) == ["c0", "s1", "s2"] and rows["s1"]["time_ms_median"] == 1.0
    with pytest.warns(RowWarning):
        again = merge_shards(run)  # merging twice adds nothing; the true duplicates are named again
    assert again.added == [] and [d.cell_id for d in again.duplicates] == ["s1", "c0"]
    assert len(read_rows(run)) == 3


def test_a_shard_row_already_collected_is_no_duplicate_even_with_nan(tmp_path):
    """A CPU row carries NaN (executed_tflops, io_gbps): the driver collected it into rows.jsonl, and a later
    collect finds the same row in its shard. NaN is the same NaN there, not a second measurement."""
    from attnbench.results.store import same_row, shard_rows_to_add

    row = _at("s1", "2026-01-01T10:00:05+00:00", executed_tflops=float("nan"), io_gbps=float("nan"))
    assert same_row({**row, "run_id": "other"}, row)  # the collector sets run_id
    assert not same_row({**row, "time_ms_median": 2.0}, {**row, "time_ms_median": 1.0})
    assert not same_row({**row, "io_gbps": 1.0}, row)
    run = _run(tmp_path, n=1)
    _shard(run, "task-0", [row])
    assert merge_shards(run).added == ["s1"]
    again = merge_shards(run)
    assert again.added == [] and again.duplicates == []
    _, duplicates = shard_rows_to_add(run, {"s1": {**row, "time_ms_median": 99.0}})
    assert [(d.cell_id, d.kept) for d in duplicates] == [("s1", "rows.jsonl")]  # a different row is named


def test_a_run_still_in_shards_loads_with_a_warning(tmp_path):
    run = _run(tmp_path, n=1)
    _shard(run, "task-0", [_at("s1", "2026-01-01T10:00:05+00:00"), _at("s2", "2026-01-01T10:00:06+00:00")])
    with pytest.warns(UncollectedWarning, match=r"2 cells are only in shards/\*.jsonl, not yet collected"):
        df = load(run)
    assert sorted(df["cell_id"]) == ["c0", "s1", "s2"]
    merge_shards(run)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # collected: nothing to warn about
        assert sorted(load(run)["cell_id"]) == ["c0", "s1", "s2"]


def test_merge_shards_waits_for_the_runs_writer(tmp_path):
    run = _run(tmp_path, n=1)
    _shard(run, "task-0", [_at("s1", "2026-01-01T10:00:05+00:00")])
    writer = RunWriter(run, resume=True)
    with pytest.raises(RunDirError, match="being written by"):
        merge_shards(run)
    writer.close()
    assert merge_shards(run).added == ["s1"]


def test_printable_escapes_what_a_terminal_or_browser_would_obey_and_nothing_else():
    from attnbench.results.formulas import printable

    assert printable("naive n=64 ±3% µs → ok\ttab\nline") == "naive n=64 ±3% µs → ok\ttab\nline"
    assert printable("a\x1b[2Jb\rc\x00d\x7f\x9b") == "a\\x1b[2Jb\\x0dc\\x00d\\x7f\\x9b"
    assert printable("\u202eevil\u202c \u2066x\u2069 zw\u200bj \ufeff") == (
        "\\u202eevil\\u202c \\u2066x\\u2069 zw\\u200bj \\ufeff"
    )
    assert printable("no\u00a0break") == "no\u00a0break" and printable(3) == "3"


def test_runs_before_the_visit_columns_names_are_read_into_them(tmp_path):
    """round_medians_ms and round_samples (runs in rounds before the rename) load as visit_medians_ms and
    visit_samples; --processes K's process_medians_ms (2 or more) as visit medians without counts where a
    row has none (replicates that never pair: results.judge); a row's own visit columns win."""
    import synthetic

    rows = [
        synthetic.cell(
            "naive", 16, sample_ms=[1.0, 1.1, 1.2], round_medians_ms=[1.0, 1.2], round_samples=[1, 2]
        ),
        synthetic.cell("naive", 32, sample_ms=[2.0, 2.1], process_medians_ms=[2.0, 2.1]),
        synthetic.cell("naive", 64, sample_ms=[3.0, 3.1], process_medians_ms=[3.0]),  # one process: none
        synthetic.cell("naive", 128, sample_ms=[4.0], visit_medians_ms=[4.0], round_medians_ms=[9.0]),
        synthetic.cell("naive", 256, status="oom"),
    ]
    df = load(synthetic.write_run(tmp_path / "old", rows)).set_index("seq_len")
    assert not {"round_medians_ms", "round_samples", "process_medians_ms"} & set(df.columns)
    assert df.loc[16, "visit_medians_ms"] == [1.0, 1.2] and df.loc[16, "visit_samples"] == [1, 2]
    assert df.loc[32, "visit_medians_ms"] == [2.0, 2.1] and df.loc[32, "visit_samples"] == []
    assert df.loc[64, "visit_medians_ms"] == [] and df.loc[128, "visit_medians_ms"] == [4.0]
    assert df.loc[256, "visit_medians_ms"] == [] and df.loc[256, "visit_samples"] == []
    assert "visit_medians_ms" not in export(df.reset_index(), "csv").splitlines()[0]


def test_a_torn_or_corrupt_line_of_visits_jsonl_is_warned_of_once_as_rows_jsonls_is(tmp_path):
    """An outside trial cut 300 bytes off visits.jsonl: neither report nor resume said a word, while the same
    cut in rows.jsonl is warned of. A run's reading (the loader: report, export, compare) and a resume now
    name each line they skip, once."""
    import json
    import shutil

    from conftest import DATA, run_cli

    path = tmp_path / "run"
    shutil.copytree(DATA / "runs" / "cpu-small", path)
    meta = json.loads((path / "meta.json").read_text())
    meta["variant_files"] = [str(DATA / "fault_variants.py")]  # where they live in this checkout, loaded once
    (path / "meta.json").write_text(json.dumps(meta, indent=2))
    rows = [json.loads(line) for line in (path / "rows.jsonl").read_text().splitlines()]
    lines = [json.dumps({"cell_id": r["cell_id"], "visit": 1, "row": r}) for r in rows[:3]]
    (path / "visits.jsonl").write_text("\n".join(["garbage{", *lines]) + "\n" + lines[0][:-40])
    said = [
        f"attnbench: warning: {path / 'visits.jsonl'}:1: skipped an unreadable row (corrupt: not the last "
        "line, so no torn write)",
        f"attnbench: warning: {path / 'visits.jsonl'}:5: skipped an unreadable row (torn write?)",
    ]
    p = run_cli("export", str(path), check=True)
    assert p.stderr.splitlines() == said
    p = run_cli("run", "--resume", "--force-resume", "--out", str(path), check=True)
    assert [line for line in p.stderr.splitlines() if "visits.jsonl" in line] == said


def test_the_timed_calls_power_is_named_apart_from_the_energy_windows_mean():
    """Trial U: h200-energy-2026-11-27's sdpa_cudnn at N = 16384 read power_w_max 583 W beside energy_power_w
    686 W, a mean above its max, though the two are of different windows (the timing loop's NVML readings,
    the energy window after it). The timing loop's columns are timed_power_w_*, and a run written under the
    old names loads under today's."""
    from pathlib import Path

    from attnbench.harness.measure.telemetry import COLUMNS as TELEMETRY

    assert {"timed_power_w_mean", "timed_power_w_max"} <= set(TELEMETRY) & set(COLUMNS)
    assert not {"power_w_mean", "power_w_max"} & (set(TELEMETRY) | set(COLUMNS))
    run = Path(__file__).resolve().parents[2] / "results" / "reference" / "h200-energy-2026-11-27"
    df = load(run)
    assert not {"power_w_mean", "power_w_max"} & set(df.columns)
    cudnn = df[(df.variant == "sdpa_cudnn") & (df.seq_len == 16384)].iloc[0]
    assert (cudnn["timed_power_w_max"], cudnn["energy_power_w"]) == (582.65, 686.39)
