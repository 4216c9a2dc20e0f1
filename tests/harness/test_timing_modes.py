"""--timing auto|events|graph on CPU: the setting through text, TOML, meta.json and the CLI; the auto rule,
the calls per replay and the capture fallback's reason (pure functions); CPU rows record perf_counter; runs
written before the columns existed still load. The CUDA paths themselves are in tests/harness/test_cuda.py."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import build_parser
from attnbench.cli_common import BadInput
from attnbench.cli_run import sweep_from_args
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep, cell_given


def test_timing_defaults_to_auto_and_takes_its_three_words():
    assert Settings().timing == "auto" and build_sweep(preset="quick").settings.timing == "auto"
    for word in ("auto", "events", "graph"):
        assert build_sweep({"device": "cuda", "timing": word}).settings.timing == word
    with pytest.raises(ValueError, match=r"^timing must be one of auto, events, graph, got 'fast'$"):
        Settings(timing="fast")
    with pytest.raises(ValueError, match=r"^--timing must be one of auto, events, graph, got 'Graph'$"):
        build_sweep({"device": "cuda", "timing": "Graph"})


def test_events_or_graph_on_a_cpu_only_sweep_is_refused_with_one_line():
    for word in ("events", "graph"):
        with pytest.raises(ValueError) as exc:
            build_sweep({"device": "cpu", "timing": word})
        text = str(exc.value)
        assert "\n" not in text and text.startswith(f"--timing '{word}' chooses how CUDA cells are timed")
    # a sweep with a cuda device takes it (its CPU cells still use perf_counter); auto is fine anywhere
    assert build_sweep({"device": "cpu,cuda", "timing": "graph"}).settings.timing == "graph"
    assert build_sweep({"device": "cpu", "timing": "auto"}).settings.timing == "auto"


def test_the_cli_flag_reaches_the_settings_and_names_a_bad_word():
    parse = build_parser().parse_args
    sweep = sweep_from_args(parse(["run", "--device", "cuda", "--timing", "events"]))
    assert sweep.settings.timing == "events"
    with pytest.raises(BadInput, match="timing must be one of auto, events, graph, got 'fast'"):
        sweep_from_args(parse(["run", "--device", "cuda", "--timing", "fast"]))


def test_toml_settings_table_and_meta_round_trip(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\ndevices = ["cuda"]\nseq_len = [256]\n[settings]\ntiming = "graph"\n')
    sweep = build_sweep(config=str(f))
    assert sweep.settings.timing == "graph"
    kept = json.loads(json.dumps(sweep.to_dict()))  # as meta.json keeps the sweep
    assert kept["settings"]["timing"] == "graph" and SweepSpec.from_dict(kept) == sweep
    del kept["settings"]["timing"]  # a run written before the setting existed: auto (what it amounts to)
    assert SweepSpec.from_dict(kept).settings.timing == "auto"
    f.write_text('[sweep]\nseq_len = [256]\n[settings]\ntiming = "graph"\n')  # devices: cpu
    with pytest.raises(ValueError, match="--timing 'graph' chooses how CUDA cells are timed"):
        build_sweep(config=str(f))


def test_cell_given_carry_timing_for_cuda_cells_and_auto_for_cpu_ones():
    settings = Settings(timing="graph")
    gpu = CellSpec("sdpa", "cuda", "bfloat16", 1, 8, 256, 64, 64, False, 0.0, "fwd")
    texts, left = cell_given(gpu, settings)
    assert texts["timing"] == "graph" and left == []
    assert build_sweep(texts).settings == settings
    cpu = CellSpec("sdpa", "cpu", "float32", 1, 8, 256, 64, 64, False, 0.0, "fwd")
    texts, _ = cell_given(cpu, settings)  # a cpu,cuda run's CPU cell: its repro line must still parse
    assert texts["timing"] == "auto" and build_sweep(texts).cells(["sdpa"]) == [cpu]


# ---- the auto rule, calls per replay, the samples and the fallback: pure functions ---------------------


def test_auto_rule_picks_graph_for_launch_bound_calls_and_says_why():
    from attnbench.harness.measure.timing import choose_timing

    assert choose_timing("auto", 0.031, 0.040) == (
        "graph",
        "auto: launch-bound (host 0.031 ms >= 0.5x device 0.040 ms)",
    )
    assert choose_timing("auto", 0.030, 2.4) == (
        "events",
        "auto: device-bound (host 0.030 ms < 0.5x device 2.400 ms)",
    )
    assert choose_timing("auto", 0.5, 1.0)[0] == "graph"  # the boundary is launch-bound
    assert choose_timing("auto", 0.499, 1.0)[0] == "events"
    assert choose_timing("auto", 5.0, 5.0)[0] == "graph"  # launch-bound: host = device
    # a call host_sync found synchronising looks launch-bound too, but no graph can hold it: events, and why
    assert choose_timing("auto", syncs="called a synchronizing CUDA operation") == (
        "events",
        "auto: the call synchronises with the host (called a synchronizing CUDA operation): no CUDA graph "
        "can hold it",
    )
    for mode in ("events", "graph"):  # a mode the settings name is taken as it is
        assert choose_timing(mode) == (mode, "given") == choose_timing(mode, 1.0, 100.0)
    with pytest.raises(ValueError, match="got 'fast'"):
        choose_timing("fast", 1.0, 1.0)
    with pytest.raises(ValueError, match="needs the host and device ms"):
        choose_timing("auto")


def test_calls_per_replay_fill_about_a_millisecond_within_bounds():
    from attnbench.harness.measure.timing import GRAPH_MAX_CALLS, calls_per_replay

    assert calls_per_replay(0.04) == 25  # 25 x 0.04 ms = 1 ms
    assert calls_per_replay(0.3) == 4  # rounded up: at least the target
    assert calls_per_replay(2.0) == 1 and calls_per_replay(500.0) == 1
    assert calls_per_replay(0.001) == GRAPH_MAX_CALLS == 100  # capped
    assert calls_per_replay(0.0) == GRAPH_MAX_CALLS  # below the events' resolution: as many as allowed
    assert calls_per_replay(0.1, target_ms=5.0, most=20) == 20


def test_graph_samples_subtract_the_paired_flush_and_divide_by_the_calls():
    from attnbench.harness.measure.timing import graph_samples

    both, flush = [2.5, 2.6, 2.4], [1.5, 1.5, 1.4]  # 10 x [flush, call] against 10 x [flush]
    assert graph_samples(both, flush, 10) == pytest.approx([0.1, 0.11, 0.1])
    assert graph_samples([1.0, 1.2], None, 4) == pytest.approx([0.25, 0.3])  # flush_l2=False: calls alone
    with pytest.raises(ValueError):  # the pairs must match
        graph_samples([1.0, 1.2], [0.5], 4)


def test_a_graph_timers_budgets_count_the_calls_in_each_replay():
    """A sample that is the mean of k calls counts k times: the ms budgets and max_samples are divided by k
    (not under min_samples), so a graph-timed cell takes about an events-timed one's wall time."""
    from fakes import FakeTimer

    from attnbench.harness.measure.cell import time_call
    from attnbench.harness.measure.timing import Budget, replay_budget

    b = Budget(warmup_ms=50, budget_ms=1000, min_ms=100, max_samples=500)
    assert replay_budget(b, 1) is b
    r = replay_budget(b, 100)
    assert (r.warmup_ms, r.budget_ms, r.min_ms, r.max_samples, r.min_samples) == (0.5, 10.0, 1.0, 5, 5)
    assert replay_budget(b, 3).max_samples == 167

    class ReplayTimer(FakeTimer):  # 0.01 ms a call, one sample per replay of 50 calls
        calls_per_sample = 50

    noisy = dict(median_ms=0.01, rel_sigma=0.3, seed=1)  # never stable: the budgets alone stop it
    settings = Settings(budget_ms=100, warmup_ms=10, min_ms=5, max_samples=500)
    plain, replayed = FakeTimer(**noisy), ReplayTimer(**noisy)
    m_plain = time_call(lambda: None, settings, plain)
    m_replayed = time_call(lambda: None, settings, replayed)
    assert m_plain.n == 500 and m_replayed.n == 10  # 500 / 50 replays: the same 500 calls
    # warm-up and sampling together: calls of the same order as events take (counting samples, not calls,
    # the replays would make 50x as many)
    assert replayed.calls * 50 < 2 * plain.calls


def test_a_failed_capture_falls_back_to_events_naming_the_first_error():
    from attnbench.harness.measure.timing import GIVEN, graph_fallback

    def captured():  # as torch.cuda.graph ends a capture the call broke: a second error over the first
        try:
            raise RuntimeError("CUDA error: operation not permitted when\n stream is capturing")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")  # noqa: B904

    with pytest.raises(RuntimeError) as exc:
        captured()
    first = "graph capture failed: RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert graph_fallback(GIVEN, exc.value) == ("events", first)
    auto = "auto: launch-bound (host 0.031 ms >= 0.5x device 0.040 ms)"
    assert graph_fallback(auto, exc.value) == ("events", f"{auto}; {first}")
    long = ValueError("x" * 1000)
    mode, reason = graph_fallback(GIVEN, long)
    assert mode == "events" and reason.endswith("x...") and len(reason) < 400  # one readable line
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a  # a cycle cannot hang it
    assert graph_fallback(GIVEN, a)[1] == "graph capture failed: ValueError: b"


def test_timer_choice_fields_and_close():
    from fakes import FakeTimer

    from attnbench.harness.measure import timing

    closed = []

    class Holder:
        mode = "graph"

        def time_calls(self, fn, n):
            return [1.0] * n

        def close(self):
            closed.append(True)

    choice = timing.TimerChoice(Holder(), "graph", "given", 25)
    assert choice.fields() == {"timing_mode": "graph", "timing_reason": "given", "graph_calls_per_replay": 25}
    choice.close()
    assert closed == [True]
    timing.TimerChoice(timing.CpuTimer(), "perf_counter", "cpu").close()  # a timer without close: nothing
    assert timing.injected(FakeTimer()).fields() == {
        "timing_mode": "fake",
        "timing_reason": "injected timer",
        "graph_calls_per_replay": None,
    }


# ---- rows: CPU cells record perf_counter; runs written before the columns still load ---------------------

QUICK = Settings(warmup_ms=2, budget_ms=10, min_ms=2)


def _tiny(device: str = "cpu") -> CellSpec:
    return CellSpec("naive", device, "float32", 1, 2, 32, 16, 16, False, 0.0, "fwd")


def test_cpu_cells_time_with_perf_counter_whatever_timing_says():
    from attnbench.harness.measure import timing
    from attnbench.harness.measure.cell import cell_timer

    for word in ("auto", "events", "graph"):  # Settings alone takes them; the sweep refuses CPU-only ones
        choice = cell_timer(lambda: None, "cpu", Settings(timing=word))
        assert isinstance(choice.timer, timing.CpuTimer)
        assert choice.fields() == {
            "timing_mode": "perf_counter",
            "timing_reason": "cpu",
            "graph_calls_per_replay": None,
        }


def test_a_cpu_row_records_its_timing_mode_and_loads_beside_a_run_written_before_it(tmp_path):
    from conftest import DATA
    from fakes import FakeTimer

    from attnbench.harness.measure.cell import measure_cell
    from attnbench.results import RunWriter, load

    row = measure_cell(_tiny(), QUICK)
    assert row["status"] == "ok", row["message"]
    assert (row["timing_mode"], row["timing_reason"], row["graph_calls_per_replay"]) == (
        "perf_counter",
        "cpu",
        None,
    )
    assert row["cell_id"] == "naive|cpu|float32|b1|h2|n32|dk16|dv16|full|pad0|fwd"  # timing: no part of it
    fake = measure_cell(_tiny(), QUICK, timer=FakeTimer(median_ms=1.0))
    assert (fake["timing_mode"], fake["timing_reason"]) == ("fake", "injected timer")

    w = RunWriter(tmp_path / "run")
    w.write_meta({"run_id": "new", "sweep": {"devices": ["cpu"]}})
    w.append({**row, "run_id": "new"})
    w.close()
    old = DATA / "runs" / "cpu-small"
    assert "timing_mode" not in (old / "rows.jsonl").read_text()  # written before the columns existed
    df = load(old, tmp_path / "run")
    new = df["run_id"] == "new"
    assert new.sum() == 1 and (~new).sum() > 1 and (df.loc[~new, "status"] == "ok").any()
    assert df.loc[new, "timing_mode"].tolist() == ["perf_counter"]
    assert df.loc[new, "timing_reason"].tolist() == ["cpu"]
    for col, dtype in (
        ("timing_mode", "string"),
        ("timing_reason", "string"),
        ("graph_calls_per_replay", "Int64"),
    ):
        assert str(df[col].dtype) == dtype and df.loc[~new, col].isna().all()  # NA: not recorded then
    assert df["graph_calls_per_replay"].isna().all()


def test_the_syncing_variant_of_the_cuda_fallback_test_is_right_on_cpu():
    """tests/harness/test_cuda.py times sync_item (a .item() in every call) to see graph timing fall back to
    events; here, that the variant itself answers right, so that a GPU failure there can only be the
    fallback's."""
    from conftest import DATA

    from attnbench import variants
    from attnbench.harness.measure.cell import measure_cell

    variants.load_variant_file(DATA / "sync_variants.py")
    for pass_ in ("fwd", "fwdbwd"):
        cell = CellSpec("sync_item", "cpu", "float32", 1, 2, 32, 16, 16, True, 0.0, pass_)
        row = measure_cell(cell, QUICK)
        assert row["status"] == "ok" and row["timing_mode"] == "perf_counter", row["message"]


def test_a_failed_capture_sends_its_worker_away_after_the_row():
    """A failed capture can leave torch's allocator mid-capture: the worker exits after that cell's row (the
    parent starts another), as after a poisoned CUDA context; any other row keeps its worker."""
    from attnbench.harness.measure.outcomes import CAPTURE_EXIT, POISONED_PREFIX, exit_reason

    fell_back = {
        "status": "ok",
        "timing_reason": "auto: launch-bound (...); graph capture failed: RuntimeError: x",
    }
    assert exit_reason(fell_back) == CAPTURE_EXIT
    assert (
        exit_reason({"status": "ok", "timing_reason": "graph capture failed: RuntimeError: x"})
        == CAPTURE_EXIT
    )
    poisoned = {"status": "crashed", "message": POISONED_PREFIX + "AcceleratorError: x"}
    assert exit_reason(poisoned) == poisoned["message"]
    for row in (
        {"status": "ok", "timing_reason": "given"},
        {"status": "ok", "timing_reason": "cpu"},
        {"status": "ok", "timing_reason": None},  # a row from before the columns, or one never timed
        {"status": "error", "message": "ValueError: x"},
    ):
        assert exit_reason(row) is None


# ---- benchmarks/timing_modes.py: its pure parts, and its refusal without CUDA ----------------------------


@pytest.fixture(scope="module")
def tm():
    from conftest import load_benchmark

    return load_benchmark("timing_modes")


def test_benchmark_cells_rounds_and_ratio(tm):
    cells = list(tm.cells())
    assert (
        len(cells) == 8
        and {c.device for _, c in cells} == {"cuda"}
        and {c.dtype for _, c in cells} == {"bfloat16"}
    )
    small = [c for name, c in cells if name == "small"]
    assert {(c.batch, c.heads, c.seq_len, c.d_k) for c in small} == {(1, 8, 256, 64)}
    assert {(c.variant, c.pass_) for c in small} == {
        (v, p) for v in ("sdpa", "sdpa_flash") for p in ("fwd", "fwdbwd")
    }
    assert {(c.heads, c.seq_len, c.d_k) for name, c in cells if name == "large"} == {(16, 8192, 128)}
    assert [tm.round_order(r) for r in range(3)] == [
        ("events", "graph"),
        ("graph", "events"),
        ("events", "graph"),
    ]
    s = tm.ratio_summary([0.02, 0.03, 0.02, 0.025, 0.02], [0.01, 0.012, 0.011, 0.01, 0.01])
    assert s["events_ms_median"] == 0.02 and s["graph_ms_median"] == 0.01
    ratio = s["ratio_graph_over_events"]
    assert ratio["per_round"] == [0.5, 0.4, 0.55, 0.4, 0.5] and ratio["median"] == 0.5
    assert ratio["min"] == 0.4 and ratio["max"] == 0.55 and ratio["p25"] == 0.4 and ratio["p75"] == 0.5


def test_benchmark_refuses_too_few_rounds_and_a_machine_without_cuda(tm, tmp_path, capsys):
    import torch

    out = tmp_path / "t.json"
    assert tm.main(["--rounds", "3", "--json", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["timing_modes: error: need --rounds >= 5 and a positive --budget-ms, got 3 and 300"]
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal below is for one without")
    assert tm.main(["--device", "cuda", "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "timing_modes: error: no CUDA device here: the timing modes are CUDA's"
    ]
    assert captured.out == "" and not out.exists()


def test_benchmark_pairs_the_modes_of_each_round_and_names_a_fallback(tm):
    """The bookkeeping of measure() with rows as measure_cell writes them: a graph that fell back to events in
    one round is a problem, and that round's events row is left out of the paired ratio."""
    calls = []

    def rows(cell, settings, cache):
        calls.append((cell.cell_id, settings.timing))
        n = sum(1 for c in calls if c == calls[-1])  # this cell's n-th row in this mode
        mode, reason = settings.timing, "given"
        if (settings.timing, n) == ("graph", 2) and cell.seq_len == 256:  # round 2's graph fell back
            mode, reason = "events", "graph capture failed: RuntimeError: x"
        if settings.timing == "auto":
            mode, reason = "graph", "auto: launch-bound (host 0.030 ms >= 0.5x device 0.040 ms)"
        if cell.variant == "sdpa_flash" and cell.seq_len == 8192:  # as a GPU without the kernel answers
            return {"status": "unsupported", "message": "no flash kernel here"}
        t = {"events": 0.02, "graph": 0.01}[mode] * (1 + 0.1 * n)
        return {"status": "ok", "message": "", "timing_mode": mode, "timing_reason": reason,
                "time_ms_median": t, "graph_calls_per_replay": 25 if mode == "graph" else None}  # fmt: skip

    records = tm.measure(5, 100.0, measure_cell=rows)
    assert (
        len(records) == 8 and len(calls) == 6 * (1 + 2 * 5) + 2
    )  # an auto row per cell, then 5 rounds of two
    flash = [r for r in records if r["variant"] == "sdpa_flash" and r["shape"] == "large"]
    assert [r["unsupported"] for r in flash] == ["no flash kernel here"] * 2 and "events_ms" not in flash[0]
    small = next(
        r for r in records if r["shape"] == "small" and r["variant"] == "sdpa" and r["pass"] == "fwd"
    )
    assert len(small["events_ms"]) == len(small["graph_ms"]) == 4  # round 2 dropped from the pairing
    assert small["problems"] == ["round 2 graph: ok events graph capture failed: RuntimeError: x"]
    assert small["auto"]["timing_mode"] == "graph" and small["graph_calls_per_replay"] == [25] * 4
    assert small["ratio_graph_over_events"]["per_round"] == [0.5, 0.5, 0.5, 0.5]
    large = next(r for r in records if r["shape"] == "large" and r["variant"] == "sdpa")
    assert not large["problems"] and len(large["graph_ms"]) == 5
    orders = [t for cid, t in calls if cid == small["cell_id"] and t != "auto"]
    assert orders == [
        "events",
        "graph",
        "graph",
        "events",
        "events",
        "graph",
        "graph",
        "events",
        "events",
        "graph",
    ]


def test_a_run_written_before_the_setting_keeps_events_on_cuda_when_measured_again(tmp_path, capsys):
    """Old CUDA runs were timed with events (the one mode then): their resume, rerun and repro line say
    events, not today's default; old CPU runs and runs that recorded a timing keep what they say."""
    import shlex

    import synthetic
    from conftest import DATA

    from attnbench.cli import main
    from attnbench.harness.run import rerun

    old = {"devices": ["cuda"], "seq_len": [256], "settings": {"budget_ms": 50.0}}
    assert SweepSpec.from_meta(old).settings.timing == "events"
    assert SweepSpec.from_meta({**old, "devices": ["cpu", "cuda"]}).settings.timing == "events"
    assert SweepSpec.from_meta({**old, "devices": ["cpu"]}).settings.timing == "auto"
    new = {**old, "settings": {"timing": "graph"}}
    assert SweepSpec.from_meta(new).settings.timing == "graph" and new["settings"] == {"timing": "graph"}

    rows = [synthetic.cell("sdpa", 256, device="cuda", dtype="bfloat16", time_ms=0.02)]
    run = synthetic.write_run(tmp_path / "old-cuda", rows)
    assert rerun.plan(run).sweep.settings.timing == "events"
    assert main(["repro", str(run), rows[0]["cell_id"]]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv[argv.index("--timing") + 1] == "events"
    assert rerun.plan(DATA / "runs" / "cpu-small").sweep.settings.timing == "auto"


def test_the_python_api_takes_timing_and_refuses_it_on_a_cpu_sweep(tmp_path):
    import attnbench

    with pytest.raises(ValueError, match="^timing='graph' chooses how CUDA cells are timed"):
        attnbench.run(variants="naive", seq_len=64, timing="graph", out=tmp_path / "r")
    assert not (tmp_path / "r").exists()
