"""CUDA paths: event and graph timing, allocator peaks, every CUDA variant against float64 (skipped without a
GPU)."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from attnbench import variants
from attnbench.harness.measure import correctness, energy, memory, timing
from attnbench.harness.measure.cell import InputCache, measure_cell, prepare
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.schema import PHASE_COLUMNS
from attnbench.variants import Problem, UnsupportedError

pytestmark = pytest.mark.cuda


def test_event_timer_scales_with_the_work():
    t = timing.CudaTimer()
    one = sorted(t.time_calls(lambda: torch.cuda._sleep(2_000_000), 7))[3]
    two = sorted(t.time_calls(lambda: torch.cuda._sleep(4_000_000), 7))[3]
    assert 1.6 < two / one < 2.4  # events time the kernel, not the (asynchronous) launch


def test_events_cover_an_honest_loop_and_not_a_side_streams_work():
    """Issue 40 on a GPU: work launched on a side stream joined by nothing runs outside the timed stream's
    events; each loop's closing device sync waits for it, so the events cover a sliver of the host's time."""
    from attnbench.harness.measure.outcomes import EVENT_MIN_COVER

    honest, cheat = timing.CudaTimer(flush_l2=False), timing.CudaTimer(flush_l2=False)
    side = torch.cuda.Stream()

    def on_the_side():
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)

    honest.time_calls(lambda: torch.cuda._sleep(2_000_000), 10)
    cheat.time_calls(on_the_side, 10)
    assert timing.event_cover(honest) >= 0.95
    assert timing.event_cover(cheat) < EVENT_MIN_COVER


def test_cuda_peak_is_the_allocation():
    nbytes = 64 << 20

    def alloc():
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        del x

    assert memory.peak_cuda(alloc) == nbytes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padding", [False, True], ids=["nopad", "pad"])
@pytest.mark.parametrize("name", [n for n, v in variants.all_variants().items() if v.cap.default])
def test_every_cuda_variant_passes_the_gate(name, dtype, causal, padding):
    b, h, n, d = 2, 4, 200, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, n, d, generator=g, device="cuda").to(getattr(torch, dtype)) for _ in range(3)
    )
    lengths = torch.tensor([150, n], device="cuda") if padding else None
    var = variants.get(name)
    prob = Problem(
        device="cuda",
        dtype=dtype,
        batch=b,
        heads=h,
        seq_len=n,
        seq_k=n,
        d_k=d,
        d_v=d,
        causal=causal,
        padding=0.25 if padding else 0.0,
        pass_="fwdbwd" if var.cap.backward else "fwd",
    )
    reason = var.check(prob)
    if reason:
        pytest.skip(reason)
    try:
        r = correctness.check(var, q, k, v, causal=causal, key_lengths=lengths, backward=var.cap.backward)
    except UnsupportedError as exc:
        pytest.skip(str(exc))
    assert r.ok, r.describe()


def test_measure_cell_on_cuda():
    spec = CellSpec("sdpa", "cuda", "bfloat16", 1, 8, 1024, 64, 64, True, 0.0, "fwdbwd")
    row = measure_cell(spec, Settings(budget_ms=50, warmup_ms=10, min_ms=5))
    assert row["status"] == "ok", row["message"]
    assert row["peak_mem_bytes"] > 0 and row["tflops"] > 0 and row["mem_method"] == memory.CUDA_METHOD
    assert row["event_cover"] >= 0.95


def test_a_device_side_assert_ends_its_worker_and_the_next_cells_run(tmp_path):
    """A real device-side assert poisons the worker's CUDA context: that cell is `crashed` with the
    reason, its worker exits, and the cells after it (sdpa, same lengths) run in a new worker."""
    from conftest import FAULTS, run_cli

    from attnbench.results import read_rows

    out = tmp_path / "r"
    # a real CLI process, as everywhere in this file: the CLI's parent never initialises CUDA, and this
    # process may have (the tests above), which would make the parent take paths it never takes
    run_cli("run", "--device", "cuda", "--dtype", "float16", "--variant-file", str(FAULTS),
            "--variants", "fault_device_assert,sdpa", "--seq-len", "64,128", "--heads", "2",
            "--budget-ms", "20", "--warmup-ms", "5", "-q", "--out", str(out), check=True,
            process=True)  # fmt: skip
    rows = read_rows(out)
    status = {(r["variant"], r["seq_len"]): r["status"] for r in rows}
    assert status == {("fault_device_assert", 64): "crashed", ("fault_device_assert", 128): "crashed",
                      ("sdpa", 64): "ok", ("sdpa", 128): "ok"}, [r["message"] for r in rows]  # fmt: skip
    poisoned = [r["message"] for r in rows if r["variant"] == "fault_device_assert"]
    assert all(m.startswith("CUDA context poisoned, worker replaced:") for m in poisoned), poisoned
    assert (out / "worker.log").read_text().count(" exiting: CUDA context poisoned") == 2


@pytest.mark.parametrize("n", [4096, 16384])
def test_naive_cuda_peak_is_two_score_tensors_plus_output(n):
    """The measured CUDA peak (max_memory_allocated above the baseline) within 2% of the analytic bytes."""
    b, h, d = 1, 8, 128
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    naive = variants.get("naive").fn
    with torch.no_grad():
        naive(q, k, v)  # cuBLAS's workspace is allocated (and kept) by the first call, not counted after
        got = memory.peak_cuda(lambda: naive(q, k, v))
    scores, out = b * h * n * n * 2, b * h * n * d * 2
    assert got == pytest.approx(2 * scores + out, rel=0.02), (got, 2 * scores + out)


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_torchs_cublas_workspaces_are_not_the_variants_memory(pass_):
    """On an H200, measure_cell said naive, stable_softmax, chunked and sdpa_math held 32-96 MiB between
    calls (a cuBLAS workspace per thread and stream, the backward's too) and added it to their peaks:
    naive's fp32 forward read 306,184,192 B against the analytic 272,629,760."""
    spec = CellSpec("naive", "cuda", "float32", 1, 8, 2048, 64, 64, False, 0.0, pass_)
    row = measure_cell(spec, Settings(warmup_ms=5, budget_ms=20, min_ms=5), InputCache())
    assert row["status"] == "ok" and not row["retained_mem_bytes"], row["message"]
    assert "between calls" not in row["message"]
    if pass_ == "fwd":
        analytic = 2 * (8 * 2048 * 2048 * 4) + 8 * 2048 * 64 * 4
        assert row["peak_mem_bytes"] == pytest.approx(analytic, rel=0.02), (row["peak_mem_bytes"], analytic)


@pytest.mark.parametrize("n", [4096, 16384])
def test_sdpa_flash_cuda_peak_is_linear(n):
    """Within 2x of linear: the output and its log-sum-exp (B, H, N) in float32."""
    b, h, d = 1, 8, 128
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flash = variants.get("sdpa_flash").fn
    with torch.no_grad():
        flash(q, k, v)
        got = memory.peak_cuda(lambda: flash(q, k, v))
    linear = b * h * n * d * 2 + b * h * n * 4
    assert 0 < got <= 2 * linear, (got, linear)


def test_cuda_rows_carry_the_gpus_telemetry():
    """NVML read during the timed calls of the GPU torch uses (found by its UUID)."""
    spec = CellSpec("sdpa", "cuda", "bfloat16", 1, 16, 4096, 128, 128, False, 0.0, "fwd")
    row = measure_cell(spec, Settings(budget_ms=200, warmup_ms=20, min_ms=100))
    assert row["status"] == "ok", row["message"]
    assert row["telemetry_samples"] >= 2 and row["sm_clock_max_mhz"] > 0 and row["timed_power_w_max"] > 0
    assert row["throttled"] in (True, False) and row["sm_clock_min_mhz"] <= row["sm_clock_max_mhz"]


def test_energy_per_call_from_the_boards_counter():
    """energy=True: NVML's energy counter over >= 1 s of the timed call, the idle draw subtracted; without
    it no window is run (harness.measure.energy)."""
    spec = CellSpec("sdpa", "cuda", "bfloat16", 1, 16, 4096, 128, 128, False, 0.0, "fwd")
    row = measure_cell(spec, Settings(budget_ms=100, warmup_ms=20, min_ms=50, energy=True))
    assert row["status"] == "ok", row["message"]
    if row["energy_j_per_call"] is None:
        pytest.skip(row["energy_note"])  # a GPU or container without the counter
    assert row["energy_window_s"] >= 1.0 and row["energy_calls"] > 10 and row["energy_ms"] > 1000
    assert 0 < row["idle_power_w"] < row["energy_power_w"] and row["energy_j_per_call"] > 0
    assert 0.01 < row["tflops_per_w"] < 10, row  # an H100 at 700 W and ~700 TFLOP/s is about 1 TFLOP/J
    off = measure_cell(spec, Settings(budget_ms=100, warmup_ms=20, min_ms=50))
    assert not any(c in off for c in energy.COLUMNS)


def test_the_fingerprint_describes_the_gpu_torch_uses():
    from attnbench.harness.measure import fingerprint

    info = fingerprint.gpu_info()
    props = torch.cuda.get_device_properties(0)
    assert info["name"] == props.name and info["nvml_uuid"].endswith(str(props.uuid))
    assert info["sm_clock_max"].endswith(" MHz") and info["driver"]


@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_efficient", "sdpa_cudnn"])
def test_every_pinned_backend_runs_a_cell_on_an_sm80_plus_gpu(name):
    """A pinned backend that refuses every shape must not pass as green by skipping: on an sm80+ GPU each
    runs the plainest cell (bf16, d=64, no mask) through the gate, forward and forward+backward."""
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("flash and cuDNN attention need an sm80+ GPU")
    var = variants.get(name)
    for backward in (False, True):
        prob = Problem(device="cuda", dtype="bfloat16", batch=1, heads=4, seq_len=256, seq_k=256, d_k=64,
                       d_v=64, causal=False, padding=0.0, pass_="fwdbwd" if backward else "fwd")  # fmt: skip
        assert var.check(prob) is None
        q, k, v = (torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        r = correctness.check(var, q, k, v, causal=False, key_lengths=None, backward=backward)
        assert r.ok, r.describe()


def test_a_refusal_on_cuda_carries_torchs_reason():
    """An UnsupportedError from a pinned backend quotes torch's own words, not only 'unsupported'."""
    q, k, v = (torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.float32) for _ in range(3))
    with pytest.raises(UnsupportedError, match="torch refused the FLASH_ATTENTION backend: .+"):
        variants.get("sdpa_flash").fn(q, k, v)  # the raw fn: the capability would refuse float32 first


def _allocated_during(call, *, forbid_sync: bool = False) -> int:
    """Bytes the CUDA caching allocator handed out during one call (all of them, not the peak); with
    forbid_sync, any device->host synchronisation in the call raises (torch's sync debug mode)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocated_bytes.all.allocated"]
    if forbid_sync:
        torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["allocated_bytes.all.allocated"] - before


@pytest.mark.parametrize("axes", [{}, {"causal": True}, {"padding": 0.25}], ids=["full", "causal", "padded"])
def test_xformers_timed_call_makes_no_host_sync_and_no_copy_of_its_inputs(axes):
    """The GPU issue's "no extra work in the timed call": no .tolist() sync (the padded-keys bias is made in
    setup) and no copy of q, k, v (they come in xformers' (B, N, H, K) memory, layout="bnhd"). B*H*N/128
    = 512 query blocks, well above an H100's SMs, so that no split-KV workspace enters the byte count."""
    pytest.importorskip("xformers")
    spec = CellSpec("xformers", "cuda", "bfloat16", 4, 16, 1024, 128, 128, False, 0.0, "fwd")
    spec = dataclasses.replace(spec, **axes)
    settings = Settings(budget_ms=50, warmup_ms=10, min_ms=5)
    row = measure_cell(spec, settings)
    if row["status"] == "unsupported" and "CUDA operators did not load" in row["message"]:
        pytest.skip(row["message"])  # a wheel built for another torch (the GPU image's, 2026-11-25)
    assert row["status"] == "ok", row["message"]
    assert row["layout"] == "bnhd" and row["setup_ms"] is not None
    assert row["fresh_rel_err"] <= correctness.TOLERANCE["bfloat16"]  # follows fresh inputs, new key_lengths

    ready = prepare(spec, settings, InputCache())  # the timed call exactly as measure_cell times it
    q, k, v, kl = ready.call.inputs
    assert all(t.transpose(1, 2).is_contiguous() for t in (q, k, v))
    ready.call()  # warm: lazy initialisation, workspaces
    allocated = _allocated_during(ready.call, forbid_sync=True)  # raises on a device->host sync
    q_bytes = q.numel() * q.element_size()  # = the output's bytes (d_v = d_k); a copy of q, k or v adds this
    assert allocated < 2 * q_bytes, f"{allocated} B allocated in one call: more than the output + workspace"
    if kl is not None:
        # the same call on (B, H, N, K)-contiguous inputs, as before the layout: the packing copies q, k, v,
        # and the byte count sees it
        bhnd = [t.contiguous() for t in (q, k, v)]
        with torch.no_grad():
            copied = _allocated_during(lambda: ready.fn(*bhnd, causal=False, key_lengths=kl))
        assert copied - allocated >= 3 * q_bytes, (copied, allocated)
        # other key lengths: the bound callable makes their bias, never the stale one
        other = torch.tensor([spec.seq_len // 2, spec.seq_len, 1, spec.seq_len], device="cuda")
        with torch.no_grad():
            out = ready.fn(q, k, v, causal=False, key_lengths=other)
        rows = correctness.sample_rows(spec.seq_len, 64, seed=0)
        result = correctness.gate(out, q, k, v, key_lengths=other, rows=rows)
        assert result.passed, result.describe()


# ---- --timing graph (harness.measure.timing.CudaGraphTimer): written without a GPU, first run by a GPU
# session -----

QUICK = dict(budget_ms=50, warmup_ms=10, min_ms=5)


def small(variant: str = "sdpa", pass_: str = "fwd") -> CellSpec:
    """The launch-bound cell of the issue: B=1, H=8, N=256, d=64, bf16."""
    return CellSpec(variant, "cuda", "bfloat16", 1, 8, 256, 64, 64, False, 0.0, pass_)


def test_graph_timer_scales_with_the_work_and_agrees_with_events_on_one_kernel():
    def one():
        torch.cuda._sleep(2_000_000)

    def two():
        torch.cuda._sleep(4_000_000)

    g1, g2 = timing.CudaGraphTimer(one, 4), timing.CudaGraphTimer(two, 4)
    a = sorted(g1.time_calls(one, 7))[3]
    b = sorted(g2.time_calls(two, 7))[3]
    assert 1.6 < b / a < 2.4  # replays time the kernels, per call (4 calls, the flush subtracted)
    events = sorted(timing.CudaTimer().time_calls(one, 7))[3]
    assert 0.9 < a / events < 1.1  # one long kernel has no launch gaps for a graph to remove
    unflushed = timing.CudaGraphTimer(one, 4, flush_l2=False)
    assert unflushed.flush_only is None and 0.9 < sorted(unflushed.time_calls(one, 7))[3] / a < 1.1
    for g in (g1, g2, unflushed):
        g.close()
    with pytest.raises(ValueError, match="times the call it captured"):
        timing.CudaGraphTimer(one, 1).time_calls(two, 1)


def test_events_graph_and_auto_on_the_small_cell_give_ok_rows_that_say_how():
    rows = {
        mode: measure_cell(small(), Settings(timing=mode, **QUICK)) for mode in ("events", "graph", "auto")
    }
    for mode, row in rows.items():
        assert row["status"] == "ok", (mode, row["message"])
    ev, gr, auto = rows["events"], rows["graph"], rows["auto"]
    assert (ev["timing_mode"], ev["timing_reason"], ev["graph_calls_per_replay"]) == ("events", "given", None)
    assert (gr["timing_mode"], gr["timing_reason"]) == ("graph", "given"), gr["timing_reason"]
    assert 1 <= gr["graph_calls_per_replay"] <= timing.GRAPH_MAX_CALLS
    assert auto["timing_mode"] in ("events", "graph") and auto["timing_reason"].startswith("auto: ")
    assert (auto["graph_calls_per_replay"] is not None) == (auto["timing_mode"] == "graph")
    # a graph removes the launch gaps between kernels, never adds any: not slower than events (+ noise)
    assert gr["time_ms_median"] <= 1.25 * ev["time_ms_median"], (gr["samples_ms"], ev["samples_ms"])


def test_fwd_bwd_is_captured_and_its_graph_freed_after_the_cell():
    cell = small(pass_="fwdbwd")
    assert measure_cell(cell, Settings(timing="events", **QUICK))["status"] == "ok"  # lazy set-up done
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    row = measure_cell(cell, Settings(timing="graph", **QUICK))
    assert row["status"] == "ok", row["message"]
    assert (row["timing_mode"], row["timing_reason"]) == ("graph", "given"), row["timing_reason"]
    gc.collect()
    torch.cuda.empty_cache()
    # the graph's private memory pool (its captured calls' activations and gradients) is given back
    assert torch.cuda.memory_reserved() - before < 1 << 20


def test_a_call_that_synchronises_falls_back_to_events_and_says_why():
    from conftest import DATA

    variants.load_variant_file(DATA / "sync_variants.py")
    given = measure_cell(small("sync_item"), Settings(timing="graph", **QUICK))
    assert given["status"] == "ok", given["message"]  # never a failed cell for a capture that failed
    assert given["timing_mode"] == "events" and given["graph_calls_per_replay"] is None
    assert given["timing_reason"].startswith("graph capture failed: "), given["timing_reason"]
    auto = measure_cell(small("sync_item"), Settings(timing="auto", **QUICK))
    assert auto["status"] == "ok" and auto["timing_mode"] == "events", auto["message"]
    # auto finds the sync under torch's sync debug mode first, and never tries the capture
    why = auto["timing_reason"]
    assert why.startswith("auto: the call synchronises with the host (") and "synchronizing CUDA" in why, why
    assert torch.cuda.get_sync_debug_mode() == 0  # put back
    # (the worker that measured the `graph` cell exits after it, harness.measure.cell.exit_reason: the run
    # below)


def test_host_sync_finds_a_sync_and_passes_other_errors_through():
    from attnbench.harness.measure.timing import host_sync

    x = torch.ones(4, device="cuda")
    assert host_sync(lambda: x * 2) is None
    assert "synchronizing CUDA operation" in host_sync(lambda: x.sum().item())
    with pytest.raises(RuntimeError, match="shape"):
        host_sync(lambda: x.view(3))
    assert torch.cuda.get_sync_debug_mode() == 0


def test_a_graph_run_records_each_rows_mode_and_replaces_the_worker_after_a_failed_capture(tmp_path):
    import json

    from conftest import DATA, run_cli

    from attnbench.results import read_rows

    out = tmp_path / "r"
    syncs = str(DATA / "sync_variants.py")
    run_cli("run", "--device", "cuda", "--dtype", "bfloat16", "--variant-file", syncs, "--variants",
            "sync_item,sdpa", "--seq-len", "256", "--pass", "both", "--timing", "graph", "--budget-ms", "20",
            "--warmup-ms", "5", "-q", "--out", str(out), check=True, process=True)  # fmt: skip
    assert json.loads((out / "meta.json").read_text())["sweep"]["settings"]["timing"] == "graph"
    rows = read_rows(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [r["message"] for r in rows]
    modes = {(r["variant"], r["pass"]): r["timing_mode"] for r in rows}
    expected = {("sync_item", "fwd"): "events", ("sync_item", "fwdbwd"): "events",
                ("sdpa", "fwd"): "graph", ("sdpa", "fwdbwd"): "graph"}  # fmt: skip
    assert modes == expected, [r["timing_reason"] for r in rows]
    # each sync_item cell's worker exited after its row; the sdpa cell after it got a fresh one, and captured
    assert (out / "worker.log").read_text().count("exiting: a CUDA graph capture failed") == 2


def test_profile_on_cuda_records_the_gpus_kernels(tmp_path):
    """`attnbench profile --device cuda`: the Chrome trace holds CUDA kernel events and top_ops ranks the
    operators by their CUDA time."""
    import csv
    import json

    from conftest import run_cli

    out = tmp_path / "prof"
    run_cli("profile", "--variant", "sdpa", "--device", "cuda", "--dtype", "bfloat16", "--seq-len", "1024",
            "--heads", "8", "--seconds", "1", "--out", str(out), check=True, process=True)  # fmt: skip
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events), "no CUDA kernel in the trace"
    with open(out / "top_ops.csv", newline="") as f:
        ops = list(csv.DictReader(f))
    assert "self_cuda_ms" in ops[0] and float(ops[0]["self_cuda_ms"]) > 0


def test_the_pytest_plugin_times_cuda_cells(tmp_path):
    """The pytest-benchmark plugin on CUDA: synchronised calls, CUDA peaks, cells gated as on CPU."""
    import json

    from conftest import run_pytest_benchmarks

    out = tmp_path / "bench.json"
    proc = run_pytest_benchmarks("--benchmark-only", "--benchmark-json", str(out), "-q",
                                 "--attn-device", "cuda", "--attn-dtype", "bfloat16",
                                 "--attn-variants", "sdpa_flash,naive", "--attn-seq-len", "1024",
                                 "--attn-pass", "both", "--attn-heads", "8", "--benchmark-min-rounds", "5",
                                 "--benchmark-max-time", "0.05")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    benches = json.loads(out.read_text())["benchmarks"]
    assert len(benches) == 4  # two variants, fwd and fwd+bwd
    for b in benches:
        info = b["extra_info"]
        assert info["device"] == "cuda" and info["status"] == "ok", info.get("message")
        assert info["mem_method"] == memory.CUDA_METHOD and info["peak_mem_bytes"] > 0 and info["tflops"] > 0


# ---- the GPU issue's accounting: phases, the kernel that ran (first run by a GPU session) ----------------


def test_cuda_cells_phase_columns_add_up_to_their_wall_time(tmp_path):
    """In `attnbench run`'s own workers (fresh processes: an earlier test's failed graph capture leaves this
    one's CUDA generator unusable), every second of a CUDA cell is in a phase column."""
    from conftest import run_cli

    from attnbench.results import read_rows

    out = tmp_path / "run"
    done = run_cli("run", "--variants", "sdpa_flash,naive,chunked", "--device", "cuda", "--dtype", "bfloat16",
                   "--heads", "16", "--seq-len", "2048", "--d-k", "128", "--pass", "both",
                   "--budget-ms", "50", "--out", str(out), "-q", process=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for row in read_rows(out):
        assert row["status"] == "ok", row["message"]
        wall = row["elapsed_s"] * 1e3
        phases = sum(row.get(col) or 0.0 for col in PHASE_COLUMNS)
        assert abs(phases - wall) <= 0.05 * wall + 2, {c: row.get(c) for c in PHASE_COLUMNS}


def test_cuda_rows_name_the_kernel_that_ran():
    settings = Settings(budget_ms=30, warmup_ms=5, min_ms=5)
    flash = measure_cell(
        CellSpec("sdpa_flash", "cuda", "bfloat16", 1, 8, 1024, 64, 64, False, 0.0, "fwd"), settings
    )
    assert flash["kernel"].startswith("FLASH_ATTENTION (FA"), flash["kernel"]
    picked = measure_cell(
        CellSpec("sdpa", "cuda", "bfloat16", 1, 8, 1024, 64, 64, False, 0.0, "fwd"), settings
    )
    assert picked["kernel"].split(" ")[0] in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"), (
        picked
    )
    math = measure_cell(CellSpec("sdpa", "cuda", "float64", 1, 8, 256, 64, 64, False, 0.0, "fwd"), settings)
    assert math["kernel"] == "MATH", math["kernel"]  # no fused kernel takes float64


def test_a_plugin_that_slows_the_cuda_events_is_named_and_its_neighbours_are_untouched(tmp_path):
    """The instrument issue's clock check on CUDA: a plug-in that makes torch.cuda.Event.elapsed_time report
    0.8x of the time changes nothing the CUDA timers read (they hold the methods pinned before plug-ins
    load), its row is refused with the replacement named, and the cells after it run in a fresh worker."""
    from conftest import DATA, run_cli

    from attnbench.results import read_rows

    out = tmp_path / "run"
    done = run_cli("run", "--device", "cuda", "--dtype", "bfloat16", "--variant-file",
                   str(DATA / "clock_variants.py"), "--variants", "clock_events,naive,sdpa",
                   "--seq-len", "1024", "--heads", "8", "--budget-ms", "50", "--warmup-ms", "5",
                   "--out", str(out), "-q", process=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {r["variant"]: r for r in read_rows(out)}
    offender = rows["clock_events"]
    assert offender["status"] == "error", offender
    assert "torch.cuda.Event.elapsed_time replaced" in offender["message"], offender["message"]
    for name in ("naive", "sdpa"):
        row = rows[name]
        assert row["status"] == "ok" and "replaced" not in row["message"], row
        assert row["clock_ratio"] == 1.0
