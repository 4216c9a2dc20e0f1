"""The cost of a sweep before it runs (harness.run.estimate) and the busy-machine rule (results.drift)."""

from __future__ import annotations

import dataclasses

import pytest

from attnbench.harness.run import estimate
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results import drift


@pytest.fixture(autouse=True)
def _reference_machine(monkeypatch):
    """The estimate reads this machine: its core count (the CPU throughput assumed) and whether workers
    ask for huge pages (THP_MEM_ALLOC_ENABLE in this environment, else harness.measure.allocator's default).
    Pinned to the 2-core reference VM's, with the default, so that every machine gets the same numbers."""
    monkeypatch.setattr(estimate.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)


def _cell(n: int, variant: str = "naive") -> CellSpec:
    return CellSpec(variant, "cpu", "float32", batch=1, heads=8, seq_len=n, d_k=64, d_v=64, causal=False,
                    padding=0.0, pass_="fwd")  # fmt: skip


def test_a_cell_costs_its_overhead_and_budget_and_more_as_it_grows():
    s = Settings()
    small, large = estimate.cell_seconds(_cell(64), s), estimate.cell_seconds(_cell(16384), s)
    floor = estimate.VISIT_OVERHEAD_S + s.warmup_ms / 1e3 + s.budget_ms / 1e3
    assert floor <= small < floor + 0.1  # a tiny call: the overhead and the sampling budget
    assert large > 10 * small  # 8 heads x 16384^2 x 128 x 2 FLOPs a call, at least 5 calls sampled
    assert estimate.run_seconds([], s) == 0
    assert estimate.run_seconds([_cell(64)], s) == estimate.RUN_OVERHEAD_S["cpu"] + small


def test_forecast_sorts_cells_as_the_run_would():
    cells = [_cell(64), _cell(4096), _cell(64, variant="flash")]
    f = estimate.forecast(
        cells,
        Settings(),
        unsupported=lambda c: "CUDA only" if c.variant == "flash" else None,
        free_memory=lambda device: 2**30,  # 1 GiB: naive at N = 4096 (8 heads of 4096^2 fp32 scores) skips
        memory_class=lambda name: "quadratic",
    )
    assert [c.seq_len for c in f.measured] == [64] and f.unsupported == {"CUDA only": 1}
    assert sum(f.guarded.values()) == 1 and f.guarded_from == {"naive": "N = 4096"}
    assert f.lines()[0] == "3 cells: 1 to measure, 1 the memory guard would skip, 1 unsupported here"
    assert f.seconds == estimate.run_seconds(f.measured, Settings(), lambda name: "quadratic")
    unknown = estimate.forecast(
        cells[:2], Settings(), unsupported=lambda c: None, free_memory=lambda d: None,
        memory_class=lambda name: "quadratic", done=3,
    )  # fmt: skip
    assert len(unknown.measured) == 2  # free memory unknown here (a GPU): the worker's guard decides
    assert unknown.lines()[0].startswith("5 cells, 3 measured already: 2 to measure")


def test_settle_rounds_are_said_beside_the_estimate_and_left_out_of_it():
    kw = dict(unsupported=lambda c: None, free_memory=lambda d: None, memory_class=lambda name: "linear")
    plain = estimate.forecast([_cell(1024)], Settings(rounds=3), **kw)
    settled = estimate.forecast([_cell(1024)], Settings(rounds=3, settle_rounds=2), **kw)
    assert settled.seconds == plain.seconds
    assert not any("settle" in line for line in plain.lines())
    assert settled.lines()[-1].startswith("  and up to 2 settle rounds, not in the estimate")


def test_the_runs_measuring_beside_a_dry_run_are_said_after_its_estimate():
    """One run is named by its pid; seven by the first five pids, the other two counted."""
    kw = dict(unsupported=lambda c: None, free_memory=lambda d: None, memory_class=lambda name: "linear")
    alone = estimate.forecast([_cell(1024)], Settings(), **kw)
    assert not any("other attnbench" in line for line in alone.lines())
    one = dataclasses.replace(alone, beside=(4242,))
    assert one.lines()[-1] == (
        "1 other attnbench run is measuring on this machine now (pid 4242): the estimate assumes a quiet "
        "machine, and each run's times would be the others' too"
    )
    many = dataclasses.replace(alone, beside=tuple(range(106, 99, -1)))
    assert many.lines()[-1].startswith(
        "7 other attnbench runs are measuring on this machine now (pids 100, 101, 102, 103, 104 and 2 more): "
    )


def test_duration_text():
    assert [estimate.duration_text(s) for s in (40, 720, 3.5 * 3600)] == ["40 s", "12 min", "3.5 h"]


def _row(i: int, speed: float | None = None, noisy: bool = False, status: str = "ok") -> dict:
    """A row whose speed probe wanders within 3% (a shared machine's, never drift) unless `speed` is given."""
    speed = 1.0 + 0.03 * (i % 3 - 1) if speed is None else speed
    return {"cell_id": f"c{i}", "run_id": "r", "device": "cpu", "host": "h", "status": status,
            "speed_tflops": speed, "noisy": noisy}  # fmt: skip


def test_a_busy_run_is_said_in_one_sentence_from_a_tenth_of_its_ok_cells():
    quiet = [_row(i) for i in range(20)]
    assert drift.busy_cells(quiet) == (0, 20) and drift.busy_sentence(quiet, "runs/x") is None
    one = [*quiet[:19], _row(19, noisy=True)]
    assert drift.busy_sentence(one, "runs/x") is None  # 1 of 20: under a tenth
    two = [*quiet[:18], _row(18, noisy=True), _row(19, speed=0.5)]
    assert drift.busy_cells(two) == (2, 20) and drift.busy_sentence(two, "runs/x") is None  # fewer than 3
    busy = [*quiet[:17], _row(17, noisy=True), _row(18, noisy=True), _row(19, speed=0.5)]
    busy.append(_row(20, status="unsupported"))
    assert drift.busy_cells(busy) == (3, 20)
    assert drift.busy_sentence(busy, "runs/x") == (
        "the machine was busy during this run (3 of 20 cells drifted or were noisy); rerun on a quiet "
        "machine or `attnbench run --resume --redo-drift --out runs/x`"
    )
    assert drift.busy_sentence([_row(0, status="error")], "runs/x") is None
    in_rounds = [{**r, "visit_medians_ms": [1.0, 1.2, 1.0]} for r in busy]  # one sentence, rounds or not
    assert drift.busy_sentence(in_rounds, "runs/x") == drift.busy_sentence(busy, "runs/x")
    threaded = [{**r, "threads": 2} for r in busy]  # trial W M1: torch's default threads on a loaded machine
    assert drift.busy_sentence(threaded, "runs/x") == (
        "the machine was busy during this run (3 of 20 cells drifted or were noisy); rerun on a quiet "
        "machine or with `--threads 1`, which other load slows far less than the worker's 2 threads or "
        "`attnbench run --resume --redo-drift --out runs/x`"
    )


def test_noisy_cells_on_a_machine_whose_speed_held_are_their_own_spread_not_a_busy_machine():
    """An H200's speed probes held within 0.1% through a run whose Python page loop's cells spread by 12-42%:
    their spread is theirs, and `rerun on a quiet machine` would be wrong advice."""
    held = [_row(i, speed=50.4 + 0.01 * (i % 3), noisy=i < 3) for i in range(20)]
    assert drift.steady(held) and not drift.steady([_row(i) for i in range(20)])
    assert drift.busy_cells(held) == (0, 20)
    assert drift.busy_sentence(held, "runs/x") == (
        "3 of 20 cells were noisy while the machine held its speed (the speed probe steady all run): their "
        "spread is their own calls', not the machine's; a larger --budget-ms samples more of it"
    )
    assert drift.busy_sentence(held[2:], "runs/x") is None  # 1 noisy cell: nothing to say
    moved = [*held[:17], *(_row(i, speed=40.0) for i in range(17, 20))]  # three cells drifted: busy after all
    assert drift.busy_cells(moved)[0] >= 3 and drift.busy_sentence(moved, "runs/x").startswith("the machine")


def test_rounds_pay_each_visit_and_a_warm_up_from_the_third_and_huge_pages_speed_quadratic_cells():
    cell = _cell(4096)
    one, three = Settings(min_samples=9), Settings(min_samples=9, rounds=3)
    call = estimate.cell_seconds(cell, Settings(min_samples=10)) - estimate.cell_seconds(cell, one)
    assert call > 0  # 9 calls outlast the sampling budget here, so a tenth sample costs one call more
    extra = estimate.cell_seconds(cell, three) - estimate.cell_seconds(cell, one)
    # two more visits' overhead, and one warm-up call: the second visit's is its fresh-input check
    assert extra == pytest.approx(2 * estimate.VISIT_OVERHEAD_S + call)
    thp = Settings(env={"THP_MEM_ALLOC_ENABLE": "1"})
    assert estimate.cell_seconds(cell, thp, "quadratic") == pytest.approx(estimate.cell_seconds(cell, thp))
    four_k = Settings(env={"THP_MEM_ALLOC_ENABLE": "0"})
    slow = estimate.cell_seconds(cell, four_k, "quadratic") - estimate.cell_seconds(cell, four_k)
    assert slow > 0  # 4 KiB pages: N x N scores faulted in every call


def _cuda(n: int, **kw) -> CellSpec:
    shape = {"batch": 1, "heads": 16, **kw}
    return CellSpec("sdpa", "cuda", "bfloat16", seq_len=n, d_k=128, d_v=128, causal=False, padding=0.0,
                    pass_="fwd", **shape)  # fmt: skip


def test_a_cuda_cell_stops_at_min_ms_and_a_decode_cell_is_paid_for_its_bytes():
    # a GPU's spread is stable: a cell samples min_ms (and its timer's choice), not the whole budget
    s, longer = Settings(budget_ms=200, min_ms=20), Settings(budget_ms=2000, min_ms=20)
    assert estimate.cell_seconds(_cuda(1024), s) == estimate.cell_seconds(_cuda(1024), longer)
    assert estimate.cell_seconds(_cuda(1024), s) < s.budget_ms / 1e3
    # one query token against 32 sequences of 32,768 keys: 4 GiB of K and V a call, whatever its FLOPs
    decode = _cuda(1, batch=32, heads=32, kv_heads=8, seq_k=32768)
    call = 32 * 8 * 32768 * 256 * 2 / (estimate.ASSUMED_GBPS["cuda"] * 1e9)
    fifty, forty_nine = Settings(min_samples=50, min_ms=1), Settings(min_samples=49, min_ms=1)
    one_more = estimate.cell_seconds(decode, fifty) - estimate.cell_seconds(decode, forty_nine)
    assert one_more == pytest.approx(call, rel=0.01)
    both = estimate.cell_seconds(_cuda(1024), s) + estimate.cell_seconds(_cell(64), s)
    assert estimate.run_seconds([_cuda(1024), _cell(64)], s) == pytest.approx(
        estimate.RUN_OVERHEAD_S["cuda"] + both
    )


def test_a_compiling_variant_pays_one_compile_a_kernel_its_cells_share():
    from attnbench import variants

    s, flex, paged = Settings(), variants.get("flex").cap, variants.get("paged_flex").cap
    key = lambda spec: estimate.compile_key(variants.get(spec.variant).cap.compiles, spec)  # noqa: E731
    plain = [_cell(n, "flex") for n in (256, 512, 1024)]
    base = estimate.run_seconds(plain, s)
    # flex on CPU without padding: one symbolic kernel serves every length, so three lengths compile once
    assert estimate.run_seconds(plain, s, compile_key=key) == base + estimate.COMPILE_S["cpu"]
    assert len({estimate.compile_key(flex.compiles, c) for c in plain}) == 1
    # key padding gives every shape its own static kernel; a variant that compiles per shape (True) as well
    padded = [dataclasses.replace(c, padding=0.5) for c in plain]
    assert len({estimate.compile_key(flex.compiles, c) for c in padded}) == 3
    assert paged.compiles is True and estimate.compile_key(paged.compiles, plain[0]) == plain[0].problem()
    assert estimate.compile_key(variants.get("sdpa").cap.compiles, plain[0]) is None
    # the lower-right diagonal's offset is a constant of the compiled kernel: one compile per offset
    decode = [dataclasses.replace(c, seq_len=1, seq_k=k, causal=True, causal_align="lower-right")
              for c in plain for k in (1024, 2048)]  # fmt: skip
    assert len({estimate.compile_key(flex.compiles, c) for c in decode}) == 2
    with pytest.raises(variants.VariantError, match="compiles must be True, False or a function"):
        variants.Capability("mine", compiles="yes")


def test_the_guards_line_names_the_axes_that_grew_in_a_decode_sweep():
    """A decode sweep's skipped cells are its batch-16, long-N_k ones, N_q being 1 throughout: the dry run
    said 'sdpa from N = 1', which names neither; it names N_k and the batch."""
    cells = [
        dataclasses.replace(_cell(1, variant), batch=b, seq_k=k)
        for variant in ("sdpa", "chunked") for b in (1, 16) for k in (1024, 2048, 4096, 8192)
    ]  # fmt: skip
    from attnbench.harness.measure.guard import predict_peak_bytes

    s = Settings()
    kw = dict(unsupported=lambda c: None, memory_class=lambda name: "linear")
    peaks = [predict_peak_bytes(c, "linear", s, "masked") for c in cells[5:7]]  # batch 16, N_k 2048, 4096
    room = sum(peaks) / 2 / s.memory_guard  # every batch-1 cell fits, and batch 16 up to N_k = 2048
    f = estimate.forecast(cells, s, free_memory=lambda d: int(room), **kw)
    assert f.guarded_from == {"sdpa": "N_k = 4096 at batch 16", "chunked": "N_k = 4096 at batch 16"}
    assert "sdpa from N_k = 4096 at batch 16, chunked from N_k = 4096 at batch 16;" in f.lines()[1]
    every = estimate.forecast([c for c in cells if c.batch == 16], s, free_memory=lambda d: int(room), **kw)
    assert every.guarded_from["sdpa"] == "N_k = 4096"  # every batch skips: no batch to name


def test_a_sweep_is_empty_only_where_every_cell_left_is_unsupported():
    """A run refuses a sweep with nothing to measure (harness.run.runner.run); the guard's predicted skips
    are not 'unsupported': a run predicts them again from the peaks it measures."""
    cells = [_cell(64), _cell(4096), _cell(64, variant="flash")]
    kw = dict(free_memory=lambda device: 2**30, memory_class=lambda name: "quadratic")
    every = estimate.forecast(cells, Settings(), unsupported=lambda c: f"{c.variant}: CUDA only", **kw)
    said = every.nothing_to_measure()
    assert said and said.startswith("nothing to measure: every cell is unsupported (naive: CUDA only; flash")
    some = estimate.forecast(
        cells, Settings(), unsupported=lambda c: "no" if c.variant == "flash" else None, **kw
    )
    assert some.nothing_to_measure() is None  # one cell measured, one guarded: it runs
    guarded = estimate.forecast(
        cells,
        Settings(),
        unsupported=lambda c: "no" if c.variant == "flash" or c.seq_len == 64 else None,
        **kw,
    )
    assert not guarded.measured and sum(guarded.guarded.values()) == 1
    assert guarded.nothing_to_measure() is None  # the guard's skip is decided in the run
    nothing = estimate.forecast([], Settings(), unsupported=lambda c: None, **kw)
    assert nothing.nothing_to_measure() is None
