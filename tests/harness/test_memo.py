"""An answer remembered for the tensor objects a cell is timed on is caught, and memory a variant holds
between calls is measured (retained_mem_bytes) and counted in its peak.

The variants are real plug-in files (tests/data/memo_variants.py): a setup hook that answers for the very
tensors it was handed (also in (B, N, H, d) memory), a variant that remembers answers by id() and
data_ptr() in a module dict, one that keeps a 16 MiB workspace made on its first call, and an honest setup
hook that plans from shapes only.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest
from conftest import DATA, ROOT, load_plugin, run_cli
from fakes import calling_timer, tiny_cell

from attnbench.harness.measure import correctness, memory
from attnbench.harness.measure.cell import InputCache, harness_tensors, measure_cell
from attnbench.harness.measure.outcomes import (
    HOLDS,
    NOT_FOLLOWING,
    REFILLED,
    RETAINED_METHOD,
    RETAINED_MIN_BYTES,
)
from attnbench.harness.measure.varied import VARIED
from attnbench.harness.sweep.settings import Settings
from attnbench.results import load, read_rows

MEMOS = DATA / "memo_variants.py"
QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)
TOL = correctness.TOLERANCE["float32"]


spec, fake = tiny_cell, calling_timer


@pytest.fixture(scope="module")
def plugin():
    """The plug-in file, loaded as `--variant-file` loads it; its module, for its state."""
    return load_plugin(MEMOS)


@pytest.mark.parametrize("name", ["memo_setup", "memo_setup_bnhd", "memo_id"])
@pytest.mark.parametrize("causal", [False, True])
def test_an_answer_remembered_for_the_timed_tensors_is_wrong(plugin, name, causal):
    """Right on the gated inputs and on fresh tensors (the memo never saw them): only the timed tensors,
    refilled in place, give the remembered answer away, in either memory layout."""
    row = measure_cell(spec(name, causal=causal), QUICK, timer=fake())
    assert row["rel_err"] <= TOL and row["fresh_rel_err"] <= TOL
    assert row["refill_rel_err"] > 0.1
    assert row["status"] == "wrong"
    assert row["message"].startswith(f"{NOT_FOLLOWING}: {REFILLED} (seed {QUICK.seed + 1}) rel_err")
    assert row["layout"] == ("bnhd" if name.endswith("bnhd") else "bhnd")


def test_an_answer_remembered_by_a_fingerprint_of_values_is_wrong(plugin):
    """Issue 40: a memo keyed on a few sampled values is right on the gated inputs, on fresh ones and on
    the refill (each new values: a new key), and was `ok`, flagged only by its throughput. With q multiplied
    by a random sign vector before each timed call (harness.measure.varied) its timed answers are older
    ones: unchanged, or changed but off float64."""
    row = measure_cell(spec("memo_fingerprint"), QUICK)  # the real timer: it flips between calls
    assert row["rel_err"] <= TOL and row["fresh_rel_err"] <= TOL and row["refill_rel_err"] <= TOL
    assert row["status"] == "wrong" and row["message"].startswith(VARIED), row["message"]
    honest = measure_cell(spec("naive"), QUICK)
    assert honest["status"] == "ok", honest["message"]  # its inputs put back: not "modifies its inputs"


def test_a_decode_cells_timed_calls_cannot_be_answered_from_a_few_remembered_ones(plugin):
    """A decode cell has one query row: flipping its sign between calls gave two states, and a memo of the
    last two answers by exact value answered every timed call after the second from memory, each answer
    changed from the one before and right. The row multiplied by 16 random sign vectors that compose
    leaves it almost nothing to remember: it computes."""
    decode = dataclasses.replace(spec("memo_recent"), seq_len=1, seq_k=256)
    plugin.RECENT_HITS[:] = [0, 0]
    # at least 40 timed calls whatever the machine or its clock: a count of calls, not of milliseconds (CI
    # twice stopped after 8 and 9 calls on a time budget)
    row = measure_cell(decode, Settings(warmup_ms=5, budget_ms=60, min_ms=60, min_samples=40))
    assert row["status"] == "ok", row["message"]  # right, and it computed: nothing for the checks to catch
    hits, calls = plugin.RECENT_HITS
    assert calls > 20 and hits < 0.2 * calls, (hits, calls, row["n_samples"], row["stop_reason"])


def test_the_refill_reaches_key_lengths_in_a_padded_cell(plugin):
    padded = dataclasses.replace(spec("memo_setup"), batch=2, padding=0.25)
    row = measure_cell(padded, QUICK, timer=fake())
    assert row["status"] == "wrong" and REFILLED in row["message"]
    honest = measure_cell(dataclasses.replace(padded, variant="naive"), QUICK, timer=fake())
    assert honest["status"] == "ok" and honest["refill_rel_err"] <= TOL


@pytest.mark.parametrize("name", ["naive", "sdpa", "chunked", "shape_setup"])
@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_honest_variants_follow_the_refill_and_hold_nothing(plugin, name, pass_):
    cache = InputCache()
    for causal in (False, True):
        row = measure_cell(spec(name, pass_=pass_, causal=causal), QUICK, cache, timer=fake())
        assert (row["status"], row["message"]) == ("ok", ""), row
        assert row["refill_rel_err"] <= TOL
        assert 0 <= row["retained_mem_bytes"] < RETAINED_MIN_BYTES  # the plan: a 128 x 128 mask at most
        assert RETAINED_METHOD not in row["mem_method"]


def test_a_workspace_kept_between_calls_is_counted_in_the_peak(plugin):
    plugin.WORKSPACE.clear()
    row = measure_cell(spec("held_workspace"), QUICK, timer=fake())
    assert row["status"] == "ok" and row["rel_err"] <= TOL and row["refill_rel_err"] <= TOL
    held = plugin.WORKSPACE_BYTES
    assert row["retained_mem_bytes"] == held  # exactly its storage: nothing of the harness's is counted
    assert row["peak_mem_bytes"] > held and row["mem_method"].endswith(RETAINED_METHOD)
    assert row["message"] == f"{HOLDS} 16 MiB between calls (retained_mem_bytes), counted in peak_mem_bytes"
    again = measure_cell(spec("held_workspace", n=64), QUICK, timer=fake())
    # made once and kept: every later cell of the variant counts it too, not only the one that made it
    assert again["status"] == "ok" and again["retained_mem_bytes"] == held and HOLDS in again["message"]
    assert again["peak_mem_bytes"] > held
    plugin.WORKSPACE.clear()  # given back: held no more
    assert memory.HOLDINGS.held("held_workspace", "cpu") == 0


def test_holdings_count_what_a_variant_made_and_keeps_and_nothing_of_the_harness():
    """The tensors alive after a variant ran that were not before it are its own, for as long as they
    live; views share one storage; the harness's tensors are never counted."""
    import torch

    holdings, cache = memory.Holdings(), InputCache()
    kept = []
    before = holdings.mark()
    cache.get(spec("naive", n=512), QUICK.seed)  # 3 x 64 KiB of inputs: the harness's, not the variant's
    kept += [torch.zeros(1 << 18), None]  # 1 MiB the variant keeps
    kept[1] = kept[0][:10]  # and a view of it
    holdings.attribute("v", before, harness_tensors(cache))
    assert holdings.held("v", "cpu", harness_tensors(cache)) == 1 << 20
    assert holdings.held("w", "cpu") == 0  # nobody else's
    before = holdings.mark()
    holdings.attribute("v", before)  # a later cell: it made nothing new, and still holds the MiB
    assert holdings.held("v", "cpu") == 1 << 20
    kept.clear()
    assert holdings.held("v", "cpu") == 0


def test_the_memory_walk_costs_little_in_a_frozen_process():
    """A worker freezes its imports (timing.freeze_imports): then a cell's two looks at the live tensors
    cost well under a ms each. Timed in a fresh interpreter, as a worker is."""
    code = (
        "import time, torch\n"
        "from attnbench.harness.measure import memory, timing\n"
        "timing.freeze_imports()\n"
        "x = [torch.randn(64) for _ in range(100)]\n"
        "t = time.perf_counter()\n"
        "for _ in range(20): memory.HOLDINGS.attribute('v', memory.HOLDINGS.mark())\n"
        "print((time.perf_counter() - t) / 20 * 1e3)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert float(out.stdout.split()[-1]) < 5.0  # ms a cell, with a margin for a busy machine


@pytest.mark.slow
def test_attnbench_run_catches_the_memo_and_counts_the_workspace(tmp_path, plugin):
    out = tmp_path / "r"
    t0 = time.perf_counter()
    run_cli(
        "run", "--variant-file", str(MEMOS),
        "--variants", "naive,memo_setup,memo_id,held_workspace,shape_setup",
        "--seq-len", "64,128", "--heads", "2", "--d-k", "16",
        "--budget-ms", "20", "--warmup-ms", "5", "--out", str(out),
        timeout=300, check=True,
    )  # fmt: skip
    assert time.perf_counter() - t0 < 300
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(out)}
    assert len(rows) == 10
    for n in (64, 128):
        for name in ("memo_setup", "memo_id"):
            assert rows[(name, n)]["status"] == "wrong" and REFILLED in rows[(name, n)]["message"], rows[
                (name, n)
            ]
        for name in ("naive", "shape_setup", "held_workspace"):
            assert rows[(name, n)]["status"] == "ok", rows[(name, n)]
            assert rows[(name, n)]["refill_rel_err"] <= TOL
    for n in (64, 128):  # the numerics probe made its workspace: every cell of it counts it
        held = rows[("held_workspace", n)]
        assert held["retained_mem_bytes"] == plugin.WORKSPACE_BYTES and HOLDS in held["message"]
        assert held["peak_mem_bytes"] > plugin.WORKSPACE_BYTES
    df = load(out)
    assert df["retained_mem_bytes"].notna().all() and df["refill_rel_err"].notna().all()
    assert (df[df["variant"] != "held_workspace"]["retained_mem_bytes"] < RETAINED_MIN_BYTES).all()
