"""The pytest-benchmark plugin (benchmarks/) in a real pytest subprocess, and `attnbench import-benchmark`."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import DATA, FAULTS, run_cli, run_pytest_benchmarks

from attnbench.cli import main
from attnbench.harness.measure import correctness, timing
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results import load, read_meta, read_rows
from attnbench.results import pytest_benchmark as pb
from attnbench.results.formulas import attention_flops
from attnbench.results.store import RunWriter

TINY = ["--attn-seq-len", "64", "--attn-heads", "2", "--attn-d-k", "16", "--attn-pass", "both"]
PACKED = DATA / "packed_variants.py"
VARIANTS = ["naive", "chunked", "sdpa", "sdpa_cudnn"]  # sdpa_cudnn has no CPU kernel: skipped with its reason


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory):
    """(completed process, path, parsed JSON) of one tiny benchmark run; the session is also saved, as
    --benchmark-autosave saves it (no --benchmark-save-data), under `storage/` beside the JSON file."""
    out = tmp_path_factory.mktemp("pytest-benchmark") / "out.json"
    proc = run_pytest_benchmarks(
        "--benchmark-only",
        "--benchmark-json",
        str(out),
        "--benchmark-save",
        "saved",
        "--benchmark-storage",
        f"file://{out.parent / 'storage'}",
        "-q",
        "--attn-variants",
        ",".join(VARIANTS),
        *TINY,
        "--benchmark-min-rounds",
        "5",
        "--benchmark-max-time",
        "0.01",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, out, json.loads(out.read_text())


@pytest.mark.slow
def test_plugin_writes_cells_with_memory_throughput_and_error(bench_json):
    proc, _, data = bench_json
    assert "6 passed, 2 skipped" in proc.stdout
    assert "sdpa_cudnn: torch has no CPU kernel" in proc.stdout  # the skip names its reason
    assert "attnbench: throughput, peak memory" in proc.stdout  # our summary after pytest-benchmark's table
    benches = data["benchmarks"]
    assert sorted((b["extra_info"]["variant"], b["extra_info"]["pass"]) for b in benches) == sorted(
        (v, p) for v in VARIANTS[:3] for p in ("fwd", "fwdbwd")
    )
    for b in benches:
        info = b["extra_info"]
        spec = CellSpec.from_dict(info)
        assert info["cell_id"] == spec.cell_id
        assert b["param"] == spec.cell_id.replace("|", "-")
        assert info["status"] == "ok" and info["attnbench_format"] == 1
        assert info["flops"] == attention_flops(1, 2, 64, 64, 16, 16, causal=False, pass_=spec.pass_)
        assert info["peak_mem_bytes"] > 0
        assert info["tflops"] > 0
        assert info["tflops"] == pytest.approx(info["flops"] / b["stats"]["median"] / 1e12)
        assert 0 <= info["rel_err"] <= correctness.TOLERANCE["float32"]
        assert 0 <= info["max_abs_err"] < 1e-4
        if spec.pass_ == "fwdbwd":
            grad_tol = correctness.TOLERANCE["float32"] * correctness.GRAD_TOLERANCE_FACTOR
            assert 0 <= info["grad_rel_err"] <= grad_tol
        assert b["stats"]["rounds"] >= 5 and len(b["stats"]["data"]) == b["stats"]["rounds"]
    block = data["attnbench"]
    assert block["format"] == 1 and block["fingerprint"]["torch"]
    assert [(r["variant"], r["status"]) for r in block["untimed"]] == [("sdpa_cudnn", "unsupported")] * 2
    assert "no CPU kernel" in block["untimed"][0]["message"]


@pytest.mark.slow
def test_import_benchmark_gives_a_run_the_loader_export_and_report_read(bench_json, tmp_path, capsys):
    _, json_path, data = bench_json
    run = tmp_path / "run"
    proc = run_cli("import-benchmark", str(json_path), "--out", str(run), check=True)
    assert proc.stdout.strip() == str(run)
    assert "6 ok, 2 unsupported" in proc.stderr

    meta = read_meta(run)
    assert meta["machine_info"] == data["machine_info"]
    assert meta["commit_info"] == data["commit_info"]
    assert meta["fingerprint"] == data["attnbench"]["fingerprint"]
    assert meta["imported_from"]["format"] == "pytest-benchmark"
    assert meta["sweep"]["seq_len"] == [64] and meta["sweep"]["passes"] == ["fwd", "fwdbwd"]

    df = load(run)
    assert len(df) == 8
    assert (df["run_id"] == meta["run_id"]).all()
    ok = df[df["status"] == "ok"]
    assert sorted(ok["variant"].unique()) == sorted(VARIANTS[:3]) and len(ok) == 6
    by_cell = {b["extra_info"]["cell_id"]: b for b in data["benchmarks"]}
    for _, row in ok.iterrows():
        stats = by_cell[row["cell_id"]]["stats"]
        assert row["time_ms_median"] == pytest.approx(stats["median"] * 1e3)
        assert row["time_ms_p25"] <= row["time_ms_median"] <= row["time_ms_p75"]
        assert row["n_samples"] == stats["rounds"] == len(row["samples_ms"])
        m = timing.Measurement(tuple(row["samples_ms"]))  # quantiles as the harness computes them
        assert (row["time_ms_p25"], row["time_ms_p75"]) == pytest.approx((m.p25, m.p75), rel=1e-6)
        assert row["peak_mem_bytes"] > 0 and row["tflops"] > 0 and row["flops"] > 0
        assert row["rel_err"] <= correctness.TOLERANCE["float32"]
    skipped = df[df["status"] == "unsupported"]
    assert list(skipped["variant"]) == ["sdpa_cudnn"] * 2
    assert skipped["time_ms_median"].isna().all()

    assert "raw timings" not in proc.stderr  # --benchmark-json keeps every timed call
    # pytest timed the cells in its own process, with its own set-up: no run goes on from them
    for command in (["collect", str(run)], ["run", "--resume", "--redo-drift", "--out", str(run)]):
        capsys.readouterr()
        assert main(command) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "unknown variant" not in err, err
        assert "imported from a pytest-benchmark file" in err and "cannot be resumed or collected" in err
        assert "run the pytest session again" in err
    assert len(read_rows(run)) == 8

    exported = run_cli("export", str(run), check=True).stdout
    assert exported.splitlines()[0].startswith("run_id,machine,cell_id") and len(exported.splitlines()) == 9
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").is_file()


@pytest.mark.slow
def test_the_sessions_saved_file_says_it_has_no_raw_timings_and_is_the_same_session(bench_json, tmp_path):
    """The file --benchmark-autosave writes has pytest-benchmark's statistics only: its import says so in one
    line, with the option that keeps them; compared with the session's own --benchmark-json file (two
    imports, each file's own datetime, the same timings) it is refused as one session, as a run with its
    copy is."""
    _, json_path, _ = bench_json
    (saved,) = (json_path.parent / "storage").rglob("*.json")
    assert not any("data" in b["stats"] for b in json.loads(saved.read_text())["benchmarks"])
    proc = run_cli("import-benchmark", str(saved), "--out", str(tmp_path / "saved"), check=True)
    (line,) = [x for x in proc.stderr.splitlines() if "raw timings" in x]
    assert line.startswith(f"attnbench: warning: {saved} has no raw timings for 6 of its timed cells")
    assert "save the session with --benchmark-save-data" in line
    assert main(["import-benchmark", str(json_path), "--out", str(tmp_path / "json")]) == 0
    # each file has its own datetime: two runs by run_id and created, one session by what it measured
    assert read_meta(tmp_path / "json")["created"] != read_meta(tmp_path / "saved")["created"]
    args = ["compare", str(tmp_path / "json"), str(tmp_path / "saved"), "--out", str(tmp_path / "cmp")]
    proc = run_cli(*args, "--fail-above", "median:5%")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "were imported from one pytest-benchmark session" in proc.stderr
    assert not (tmp_path / "cmp").exists()


@pytest.mark.slow
def test_failures_stay_per_cell_and_import_with_their_status(tmp_path):
    """Wrong answers and errors fail untimed; OOM and refusals skip: every one is a row. The session's last
    cell is cut by a Ctrl-C in its timed rounds (the plugin had written its status `ok` before timing):
    pytest-benchmark still writes the file, without that cell, and the import has no row of it, as a run
    has none of the cell its Ctrl-C cuts."""
    out = tmp_path / "faults.json"
    proc = run_pytest_benchmarks(
        "--benchmark-only",
        "--benchmark-json",
        str(out),
        "-q",
        "--attn-variant-file",
        str(FAULTS),
        "--attn-variant-file",
        str(DATA / "interrupt_variants.py"),
        "--attn-variants",
        "fault_wrong,fault_raise,fault_oom,fault_unsupported,ctrl_c_while_timed",
        "--attn-seq-len",
        "64,512",
        "--attn-heads",
        "1",
        "--attn-d-k",
        "16",
        "--attn-pass",
        "fwd",
        "--benchmark-max-time",
        "0.01",
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]  # pytest's status for a Ctrl-C
    assert "KeyboardInterrupt" in proc.stdout and "4 failed, 2 passed, 3 skipped" in proc.stdout
    assert "oom: fault_oom: deliberate out-of-memory" in proc.stdout
    timed = {
        (b["extra_info"]["variant"], b["extra_info"]["seq_len"])
        for b in json.loads(out.read_text())["benchmarks"]
    }
    assert timed == {("fault_oom", 64), ("ctrl_c_while_timed", 64)}  # the cut cell is in no file
    # trial W L7: failing a cell untimed is the plugin's choice, not the test's unused fixture
    assert "fixture was not used" not in proc.stdout + proc.stderr
    run = tmp_path / "run"
    assert main(["import-benchmark", str(out), "--out", str(run)]) == 0
    got = {(r["variant"], r["seq_len"]): r["status"] for r in read_rows(run)}
    assert got == {
        ("ctrl_c_while_timed", 64): "ok",
        ("fault_wrong", 64): "wrong",
        ("fault_wrong", 512): "wrong",
        ("fault_oom", 64): "ok",
        ("fault_raise", 64): "error",
        ("fault_raise", 512): "error",
        ("fault_oom", 512): "oom",
        ("fault_unsupported", 64): "unsupported",
        ("fault_unsupported", 512): "unsupported",
    }
    wrong = [r for r in read_rows(run) if r["status"] == "wrong"]
    assert len(wrong) == 2 and all("float64 gate" in r["message"] for r in wrong)
    # failed at the gate, so never timed: not in pytest-benchmark's file (nor its table, its "(1.0)" best)
    assert all(r.get("time_ms_median") is None for r in wrong)
    assert "fault_wrong" not in {
        b["extra_info"]["variant"] for b in json.loads(out.read_text())["benchmarks"]
    }


@pytest.mark.slow
def test_bad_grid_option_is_a_usage_error():
    """An unknown variant (known only once collection has imported the variants a test module registers)
    is said as a bad option is: one `ERROR: attnbench: ...` line, not pytest.exit's `! ... Exit:` banner."""
    proc = run_pytest_benchmarks("--benchmark-only", "--attn-variants", "naive,nope", timeout=120)
    assert proc.returncode == 4  # pytest's usage error
    said = proc.stdout + proc.stderr
    assert "ERROR: attnbench: unknown variant 'nope'; known: naive, " in proc.stderr, said
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "Exit" not in proc.stdout + proc.stderr


def test_the_plugin_builds_no_grid_in_the_test_suite(request):
    # loaded through the pytest11 entry point where attnbench is installed with it: options only, no grid
    from attnbench.harness.tools import pytest_plugin

    if request.config.pluginmanager.has_plugin("attnbench.harness.tools.pytest_plugin"):
        assert request.config.stash[pytest_plugin._KEY].cells is None


@pytest.mark.parametrize("spread", [0.09, 0.11])
def test_noisy_flag_agrees_with_the_harness(tmp_path, spread):
    """Cells just under and just over the noisy threshold are flagged alike by harness and importer."""
    data = tuple(1e-3 * (1 + spread * x) for x in (-0.5, -0.5, 0.0, 0.5, 0.5))  # p25, p75 = -/+ spread/2
    harness = timing.Measurement(tuple(s * 1e3 for s in data))
    out, _ = pb.import_file(_file(tmp_path, [_benchmark(data=data)]), tmp_path / "run")
    (row,) = read_rows(out)
    assert harness.rel_iqr == pytest.approx(spread) and row["rel_iqr"] == pytest.approx(spread)
    assert row["noisy"] == harness.noisy == (spread > 0.10)


# ---- the importer on hand-written files -----------------------------------------------------------


def _benchmark(variant: str = "naive", pass_: str = "fwd", data=(1.0e-3, 1.1e-3, 1.2e-3, 1.3e-3, 2.0e-3)):
    """One benchmark as pytest-benchmark writes it, with the attnbench plugin's extra_info."""
    spec = CellSpec(variant, "cpu", "float32", 1, 2, 64, 16, 16, False, 0.0, pass_)
    flops = attention_flops(1, 2, 64, 64, 16, 16, causal=False, pass_=pass_)
    med = statistics.median(data)
    q1, _, q3 = statistics.quantiles(data, n=4)  # pytest-benchmark's own quartiles differ: not used with data
    info = {**spec.to_dict(), "cell_id": spec.cell_id, "status": "ok", "message": "", "flops": flops}
    info.update(peak_mem_bytes=4096, rel_err=1e-7, max_abs_err=1e-6, tflops=flops / med / 1e12)
    info["attnbench_format"] = 1
    stats = {"min": min(data), "max": max(data), "median": med, "q1": q1, "q3": q3, "rounds": len(data)}
    stats.update(data=list(data), iterations=1)
    name = f"test_attention[{spec.cell_id.replace('|', '-')}]"
    return {"group": "g", "name": name, "fullname": f"benchmarks/test_attention.py::{name}", "params": {},
            "param": spec.cell_id.replace("|", "-"), "extra_info": info, "options": {"max_time": 1.0},
            "stats": stats}  # fmt: skip


def _file(tmp_path, benchmarks, name: str = "bench.json", **top) -> str:
    data = {"machine_info": {"node": "box.example", "cpu": {"brand_raw": "Some CPU", "count": 4}},
            "commit_info": {"id": "abc", "dirty": False}, "benchmarks": benchmarks,
            "datetime": "2026-11-23T10:00:00.5+00:00", "version": "5.2.3", **top}  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_import_uses_raw_samples_as_the_harness_would(tmp_path):
    path = _file(tmp_path, [_benchmark("naive"), _benchmark("sdpa", "fwdbwd")])
    out, counts = pb.import_file(path, tmp_path / "run")
    assert counts == {"ok": 2}
    rows = read_rows(out)
    m = timing.Measurement(tuple(s * 1e3 for s in (1.0e-3, 1.1e-3, 1.2e-3, 1.3e-3, 2.0e-3)))
    assert rows[0]["samples_ms"] == pytest.approx(list(m.samples_ms))
    assert (rows[0]["time_ms_p25"], rows[0]["time_ms_median"], rows[0]["time_ms_p75"]) == pytest.approx(
        (m.p25, m.median, m.p75)
    )
    assert rows[0]["rel_iqr"] == pytest.approx(m.rel_iqr) and rows[0]["noisy"] == m.noisy
    assert rows[0]["stop_reason"] == "pytest-benchmark" and rows[0]["n_samples"] == 5
    meta = read_meta(out)
    assert meta["run_id"] == "20261123-100000-box-pytest"
    assert meta["fingerprint"]["cpu_model"] == "Some CPU"  # rebuilt from machine_info: no attnbench block
    assert meta["commit_info"] == {"id": "abc", "dirty": False}


def test_import_of_a_saved_file_without_raw_data_uses_pytest_benchmarks_quartiles(tmp_path):
    bench = _benchmark()
    del bench["stats"]["data"]  # saved to storage without --benchmark-save-data
    bench["stats"].update(q1=0.001, median=0.0012, q3=0.0014)
    out, _ = pb.import_file(_file(tmp_path, [bench]), tmp_path / "run")
    (row,) = load(out).to_dict("records")
    assert (row["time_ms_p25"], row["time_ms_median"], row["time_ms_p75"]) == pytest.approx((1.0, 1.2, 1.4))
    assert row["samples_ms"] == [] and row["n_samples"] == 5
    assert row["tflops"] == pytest.approx(row["flops"] / 1.2e-3 / 1e12)


def _saved(tmp_path, name: str, median_s: float, when: str) -> str:
    """A session's file as --benchmark-autosave writes it: pytest-benchmark's statistics, no raw timings."""
    bench = _benchmark()
    del bench["stats"]["data"]
    bench["stats"].update(q1=median_s * 0.9, median=median_s, q3=median_s * 1.1)
    return _file(tmp_path, [bench], name, datetime=when)


def test_a_gate_on_imports_without_raw_timings_is_refused_not_passed(tmp_path, capsys):
    """Two saved sessions, B 3x slower: with no raw timings compare can judge no cell, so `--fail-above`
    is refused in one line naming the option that keeps the timings, exit 2, as a comparison of no common
    cell is, never a silent `no regression` and exit 0."""
    for side, median_s, when in (("a", 1.2e-3, "2026-11-23T10:00:00"), ("b", 3.6e-3, "2026-11-24T10:00:00")):
        path = _saved(tmp_path, f"{side}.json", median_s, when)
        assert main(["import-benchmark", path, "--out", str(tmp_path / side)]) == 0
        (line,) = [x for x in capsys.readouterr().err.splitlines() if "raw timings" in x]
        assert "--benchmark-save-data" in line
    args = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]
    assert main([*args, "--fail-above", "median:5%"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnbench: error: compare can judge none of the 1 cells ok in both runs: A and B ")
    assert "no raw timings" in err and "--benchmark-save-data" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cmp").exists()


def test_cells_without_raw_timings_beside_judged_ones_are_counted_in_a_warning(tmp_path, capsys):
    """Where some cells ok in both can be judged and some cannot, compare judges those it can and says how
    many it could not, on stderr before the report."""
    for side, scale, when in (("a", 1.0, "2026-11-23T10:00:00"), ("b", 1.5, "2026-11-24T10:00:00")):
        bare = _benchmark("sdpa")
        del bare["stats"]["data"]
        data = tuple(x * scale for x in (1.0e-3, 1.1e-3, 1.2e-3, 1.3e-3, 2.0e-3))
        path = _file(tmp_path, [_benchmark("naive", data=data), bare], f"{side}.json", datetime=when)
        assert main(["import-benchmark", path, "--out", str(tmp_path / side)]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    assert (
        "attnbench: warning: compare cannot judge 1 of the 2 cells ok in both runs: A and B have no raw"
        in err
    )


def test_a_cell_cut_short_in_an_older_file_is_left_out_and_named(tmp_path):
    """A file from a plugin that saved a cell a Ctrl-C cut (its status ok, its elapsed_s never filled): the
    import leaves it out with one line, as a run keeps no row of its interrupted cell."""
    cut = _benchmark("sdpa")
    cut["extra_info"].update(elapsed_s=None, rel_iqr=None, tflops=None)
    whole = _benchmark("naive")
    whole["extra_info"]["elapsed_s"] = 0.5
    said: list[str] = []
    out, counts = pb.import_file(_file(tmp_path, [whole, cut]), tmp_path / "run", on_warning=said.append)
    assert counts == {"ok": 1} and [r["variant"] for r in read_rows(out)] == ["naive"]
    (line,) = said
    assert line.startswith("left out sdpa|cpu|") and "cut short" in line


def _no_extra_info(tmp_path):
    bench = _benchmark()
    bench["extra_info"] = {}
    return _file(tmp_path, [bench])


def _missing_keys(tmp_path):
    bench = _benchmark()
    bench["extra_info"] = {"attnbench_format": 1}
    return _file(tmp_path, [bench])


def _bad_status(tmp_path):
    bench = _benchmark()
    bench["extra_info"]["status"] = "great"
    return _file(tmp_path, [bench])


def _seq_len_text(tmp_path):
    bench = _benchmark()
    bench["extra_info"]["seq_len"] = "big"
    return _file(tmp_path, [bench])


def _twice(tmp_path):
    return _file(tmp_path, [_benchmark(), _benchmark()])


def _text(tmp_path, text: str, name: str = "bad.json") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


BAD_FILES = {
    "missing": (lambda t: str(t / "nope.json"), "does not exist"),
    "directory": (lambda t: str(t), "is a directory"),
    "not JSON": (lambda t: _text(t, "{not json"), "is not valid JSON"),
    "JSON list": (lambda t: _text(t, "[1, 2]"), "is not a pytest-benchmark JSON file"),
    "other JSON": (lambda t: _text(t, '{"benchmarks": 3}'), "is not a pytest-benchmark JSON file"),
    "no benchmarks": (lambda t: _file(t, []), "holds no benchmarks"),
    # trial W L7: the way to write one is the user's test with the fixture, not attnbench's own benchmarks/
    "no extra_info": (
        _no_extra_info,
        "only 1 other benchmark (no attnbench extra_info); write the grid with a "
        "test that uses attnbench's `attn_cell` fixture",
    ),  # fmt: skip
    "extra_info without keys": (_missing_keys, "has no attnbench extra_info (missing"),
    "axis of another type": (_seq_len_text, "extra_info seq_len = 'big' is not an integer"),  # not 'a int'
    "bad status": (_bad_status, "unknown status 'great'"),
    "cell twice": (_twice, "appears twice"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_is_one_line_exit_2_nothing_written(case, tmp_path, capsys):
    make, words = BAD_FILES[case]
    src = tmp_path / "src"
    src.mkdir()
    path = make(src)
    out = tmp_path / "run"
    assert main(["import-benchmark", path, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnbench: error: ") and words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "benchmarks/" not in err
    assert not out.exists()


def _existing_run(path) -> None:
    writer = RunWriter(path)
    writer.write_meta({"run_id": "old"})
    writer.close()


BAD_OUTS = {
    "a run": (_existing_run, "already holds an attnbench run"),
    "a non-empty directory": (lambda p: (p.mkdir(), (p / "x.txt").write_text("keep")), "is not empty"),
    "a file": (lambda p: p.write_text("keep"), "is not a directory"),
}


@pytest.mark.parametrize("case", list(BAD_OUTS))
def test_out_that_exists_is_refused_and_left_alone(case, tmp_path, capsys):
    make, words = BAD_OUTS[case]
    src = tmp_path / "src"
    src.mkdir()
    path = _file(src, [_benchmark()])
    out = tmp_path / "out"
    make(out)
    before = sorted((p.name, p.read_bytes()) for p in ([out] if out.is_file() else out.iterdir()))
    assert main(["import-benchmark", path, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnbench: error: ") and words in err and len(err.strip().splitlines()) == 1
    assert sorted((p.name, p.read_bytes()) for p in ([out] if out.is_file() else out.iterdir())) == before


def test_import_into_an_empty_directory_is_fine(tmp_path):
    (tmp_path / "run").mkdir()
    out, counts = pb.import_file(_file(tmp_path, [_benchmark()]), tmp_path / "run")
    assert counts == {"ok": 1} and len(read_rows(out)) == 1


def test_bad_input_as_a_real_process(tmp_path):
    args = ("import-benchmark", str(tmp_path / "missing.json"), "--out", str(tmp_path / "run"))
    proc = run_cli(*args, process=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("attnbench: error: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def _ordinary() -> dict:
    """An ordinary `benchmark(fn)` test of the same session, as pytest-benchmark writes it: no extra_info."""
    bench = _benchmark()
    bench.update(name="test_sum", fullname="tests/test_speed.py::test_sum", param=None, extra_info={})
    return bench


def test_ordinary_benchmarks_are_skipped_with_one_line_each_and_old_files_get_known_capabilities(
    tmp_path, capsys
):
    path = _file(tmp_path, [_ordinary(), _benchmark("naive"), _benchmark("mine_unregistered")])
    run = tmp_path / "run"
    assert main(["import-benchmark", path, "--out", str(run)]) == 0
    err = capsys.readouterr().err.splitlines()
    skipped = "skipped benchmark tests/test_speed.py::test_sum: not an attnbench grid cell"
    assert [line for line in err if line.startswith("skipped")] == [f"{skipped} (no attnbench extra_info)"]
    assert [r["variant"] for r in read_rows(run)] == ["naive", "mine_unregistered"]
    meta = read_meta(run)
    # a file without the plugin's capability records: the registry's, for the variants it knows
    assert set(meta["variant_capabilities"]) == {"naive"}
    assert meta["variant_capabilities"]["naive"]["memory"] == "quadratic" and meta["calibration"] == {}


def test_an_imported_runs_report_names_no_option_that_cannot_apply_to_it(tmp_path):
    """A pytest-benchmark file's report said `attnbench run --rounds 3` ranks across visits, as if the
    import could be given visits: it says a pytest-benchmark session visits each cell once, and where the
    rounds would come from (measuring the cells again); an attnbench run's report says what it said."""
    import synthetic

    from attnbench.reports.notebook import run_blocks
    from attnbench.reports.page import Page, to_markdown
    from attnbench.reports.render import findings_of, prepare

    out, _ = pb.import_file(_file(tmp_path, [_benchmark("naive"), _benchmark("sdpa")]), tmp_path / "run")
    said = " ".join(findings_of(prepare([out])).trust)
    notebook = Page("run")
    notebook.add(*run_blocks(out))  # a notebook's view of the run says it too
    assert "a pytest-benchmark session visits each cell once" in said, said
    assert "(measuring the cells again)" in said and "pytest-benchmark session" in to_markdown(notebook)
    rows = [synthetic.cell(v, n, time_ms=0.01 * n) for v in ("naive", "sdpa") for n in (64, 128, 256)]
    own = " ".join(findings_of(prepare([synthetic.write_run(tmp_path / "own", rows)])).trust)
    assert "`attnbench run --rounds 3` ranks across visits." in own and "pytest-benchmark" not in own


def test_a_timing_session_announces_itself_and_is_told_of_a_run_measuring_beside_it(tmp_path, monkeypatch):
    """A pytest-benchmark session that times the grid is one of the runs on this machine
    (harness.run.neighbours): it is told after collection that another one is measuring, names it in its
    summary, and leaves its own session for the runs beside it; one that times nothing announces nothing."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from attnbench.harness.run import neighbours

    monkeypatch.setenv(neighbours.ENV, str(tmp_path))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        ticks = Path(f"/proc/{live.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        entry = {"pid": live.pid, "ticks": ticks, "out": "runs/nightly", "began": time.time()}
        (tmp_path / "nightly.json").write_text(json.dumps(entry))
        grid = ["--attn-variants", "naive", "--attn-seq-len", "64", "--attn-heads", "1", "--attn-d-k", "16"]
        quick = ["--benchmark-min-rounds", "1", "--benchmark-max-time", "0.001"]
        disabled = run_pytest_benchmarks("--benchmark-disable", *grid)
        assert disabled.returncode == 0, disabled.stdout[-3000:]
        assert "measuring on this machine" not in disabled.stdout and len(list(tmp_path.iterdir())) == 1
        proc = run_pytest_benchmarks("--benchmark-only", *grid, *quick)
    finally:
        live.kill()
        live.wait()
    assert proc.returncode == 0, proc.stdout[-3000:]
    told = "attnbench: warning: another attnbench run is measuring on this machine: runs/nightly (pid"
    named = "attnbench: warning: another attnbench run measured on this machine during this one: runs/nightly"
    assert told in proc.stdout and named in proc.stdout
    assert proc.stdout.index(told) < proc.stdout.index("test_attention") < proc.stdout.index(named)
    (own,) = [json.loads(p.read_text()) for p in tmp_path.iterdir() if p.name != "nightly.json"]
    assert own["out"].startswith("pytest-benchmark in ") and own["ended"] >= own["began"]


@pytest.mark.slow
def test_a_packed_grid_keeps_its_padding_tax_and_times_no_wrong_kernel(tmp_path):
    """A pack's executed work is in each cell's extra_info as in a run's row, so the imported run's varlen
    table has its executed TFLOP/s and padding tax; a kernel that attends across sequences fails the gate and
    is neither timed nor in the file pytest-benchmark compares later sessions against."""
    out = tmp_path / "packed.json"
    proc = run_pytest_benchmarks(
        "--benchmark-only", "--benchmark-json", str(out), "-q", "--attn-variant-file", str(PACKED),
        "--attn-variants", "naive,sdpa_loop,attends_across_sequences", "--attn-lengths", "longtail",
        "--attn-batch", "4", "--attn-seq-len", "32", "--attn-heads", "1", "--attn-d-k", "16",
        "--attn-causal", "yes", "--benchmark-min-rounds", "3", "--benchmark-max-time", "0.01",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 failed, 2 passed" in proc.stdout
    data = json.loads(out.read_text())
    info = {b["extra_info"]["variant"]: b["extra_info"] for b in data["benchmarks"]}
    assert set(info) == {"naive", "sdpa_loop"}  # the wrong kernel is not timed
    (untimed,) = data["attnbench"]["untimed"]
    assert untimed["variant"] == "attends_across_sequences" and untimed["status"] == "wrong"
    assert "float64 gate" in untimed["message"]
    lengths = info["naive"]["seq_lens"]
    # naive scores the whole pack, T x T, before its mask hides pairs; sdpa_loop each sequence alone
    total, useful = sum(lengths), sum(n * (n + 1) // 2 for n in lengths)
    assert info["naive"]["executed_flops"] / info["naive"]["flops"] == pytest.approx(total**2 / useful)
    assert info["sdpa_loop"]["executed_flops"] == info["sdpa_loop"]["flops"]
    for e in info.values():
        assert e["executed_tflops"] == pytest.approx(e["tflops"] * e["executed_flops"] / e["flops"])
    run = tmp_path / "run"
    assert main(["import-benchmark", str(out), "--out", str(run)]) == 0
    rows = {r["variant"]: r for r in read_rows(run)}
    assert rows["attends_across_sequences"]["status"] == "wrong"
    assert rows["attends_across_sequences"].get("time_ms_median") is None
    for name in ("naive", "sdpa_loop"):
        r = rows[name]
        assert r["executed_tflops"] == pytest.approx(
            r["executed_flops"] / (r["time_ms_median"] * 1e-3) / 1e12
        )
        assert r["speed_tflops"] > 0  # the probe the drift rule reads


class _Lines:
    """A terminal reporter that keeps what the plugin's summary writes."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str, **_) -> None:
        self.lines.append(line)

    def section(self, title: str, **_) -> None:
        self.lines.append(f"== {title}")


def _summary(cells: list[dict]) -> list[str]:
    """The plugin's terminal summary of timed cells given as (extra_info + median_s), through its hook."""
    from types import SimpleNamespace

    from attnbench.harness.tools import pytest_plugin as plugin

    benches = [
        SimpleNamespace(
            extra_info={"attnbench_format": 1, "status": "ok", "rel_err": 1e-7, "peak_mem_bytes": 2**20, **c},
            stats=SimpleNamespace(median=c["median_s"]),
            has_error=False,
            param=c["cell_id"],
            name=c["cell_id"],
        )
        for c in cells
    ]
    stash = pytest.Stash()
    stash[plugin._KEY] = plugin._Session(cells={c["cell_id"]: None for c in cells})
    config = SimpleNamespace(stash=stash, _benchmarksession=SimpleNamespace(benchmarks=benches))
    out = _Lines()
    plugin.pytest_terminal_summary(out, config)
    return out.lines


def _line(lines: list[str], cell: str) -> str:
    (line,) = [x for x in lines if x.startswith(cell + " ")]
    return line


def test_the_summary_gives_a_decode_cells_kv_bandwidth_and_flags_noise_and_drift():
    """A paged decode cell (one query against 4,096 keys) is read by its K/V GB/s, not a TFLOP/s that rounds
    to 0; a cell spread past NOISY_REL_IQR says noisy, one whose speed probe ran 2x off the session's median
    says drift, by the rules a run's cells are flagged by; three such of four make a busy machine."""
    kv = 33_554_432  # bytes of K and V read once
    cells = [
        {"cell_id": "decode", "seq_len": 1, "seq_k": 4096, "median_s": 11.6e-3, "tflops": 3e-6,
         "kv_gbps": kv / 11.6e-3 / 1e9, "rel_iqr": 0.04, "noisy": False, "speed_tflops": 1.0},
        {"cell_id": "calm", "seq_len": 64, "seq_k": 64, "median_s": 1e-3, "tflops": 0.5, "kv_gbps": 1.0,
         "rel_iqr": 0.04, "noisy": False, "speed_tflops": 1.0},
        {"cell_id": "spread", "seq_len": 64, "seq_k": 64, "median_s": 1e-3, "tflops": 0.5, "kv_gbps": 1.0,
         "rel_iqr": 3.18, "noisy": True, "speed_tflops": 1.0},
        {"cell_id": "slowed", "seq_len": 64, "seq_k": 64, "median_s": 2e-3, "tflops": 0.25, "kv_gbps": 0.5,
         "rel_iqr": 0.05, "noisy": False, "speed_tflops": 0.5},
    ]  # fmt: skip
    lines = _summary(cells)
    decode = _line(lines, "decode")
    assert "2.893 K/V GB/s" in decode and "TFLOP/s" not in decode, decode
    assert "0.5 TFLOP/s" in _line(lines, "calm") and not _line(lines, "calm").endswith(("noisy", "drift"))
    assert _line(lines, "spread").endswith("  noisy") and " 318% " in _line(lines, "spread")  # its IQR
    assert _line(lines, "slowed").endswith("  drift")
    assert not any("machine was busy" in line for line in lines)  # 2 of 4: fewer than BUSY_MIN
    more = [{**cells[2], "cell_id": f"spread{i}", "speed_tflops": 1.0 + 0.3 * (i % 2)} for i in range(3)]
    assert any("the machine was busy during this session" in line for line in _summary(cells + more))
    threaded = [{**c, "threads": 2} for c in cells + more]  # trial W M1: torch's default threads
    said = [line for line in _summary(threaded) if "machine was busy" in line]
    assert said and "on a quiet machine or with `--attn-threads 1`, which other load" in said[0], said
