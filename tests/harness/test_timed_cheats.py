"""Variants timed faster than the work they claim, each right wherever the harness used to look, are caught;
honest variants in the same runs stay ok.

The variants are a real plug-in file (tests/data/timed_cheats.py), adapted from a trial of hostile
plug-ins: one computes only the rows the checks after timing read (NaN or zeros elsewhere), one leaves NaN
in half its rows whenever only q changed, two return a tensor subclass that computes when read, two keep
their last answer and recompute only the query rows that changed, and three fwd+bwd ones remember their
output or gradients by a fingerprint of a few values (harness.measure.varied, contract, cell.fresh_inputs).
"""

from __future__ import annotations

import time

import pytest
import torch
from conftest import DATA, load_plugin, run_cli
from fakes import tiny_cell

from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.measure.contract import OutputContractError, check_output
from attnbench.harness.measure.inputs import timed_call
from attnbench.harness.measure.outcomes import NOT_FOLLOWING, REFILLED
from attnbench.harness.measure.varied import NONFINITE, VARIED
from attnbench.harness.sweep.settings import Settings
from attnbench.results import read_rows

CHEATS = DATA / "timed_cheats.py"
QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)
# at least 24 timed calls whatever the machine's clock: a count of calls, not of milliseconds
CALLS = Settings(warmup_ms=5, budget_ms=40, min_ms=40, min_samples=24)
spec = tiny_cell


@pytest.fixture(scope="module")
def plugin():
    """The plug-in file, loaded as `--variant-file` loads it; its module, for its counters."""
    return load_plugin(CHEATS)


def test_the_rows_the_checks_after_timing_read_cannot_be_predicted(plugin):
    """zero_rows computes, after its gated call, only the 64 rows sample_rows(n, 64, seed=1) gives (what
    the fresh and refill checks read when their rows were seeded by the run's seed) and zeros elsewhere:
    the checks' rows now come from os.urandom, and find the zeros."""
    row = measure_cell(spec("zero_rows"), QUICK)
    assert row["status"] == "wrong" and row["message"].startswith(NOT_FOLLOWING), row["message"]
    assert REFILLED in row["message"] and row["refill_rel_err"] > 0.1


@pytest.mark.parametrize("name", ["nan_rows", "nan_timed"])
def test_nan_left_in_the_rows_no_check_reads_is_wrong(plugin, name):
    """NaN != NaN, so NaN rows once counted as changed. nan_timed computes fully whenever k or v changed
    (the gate, the refill, the fresh inputs) and leaves NaN in half its rows in the timed calls, where only
    q changes: every timed answer is checked whole, outside the timed window."""
    row = measure_cell(spec(name), QUICK)
    assert row["status"] == "wrong", row["message"]
    if name == "nan_timed":  # right on every input the checks after timing gave it
        assert row["fresh_rel_err"] <= 1e-4 and row["refill_rel_err"] <= 1e-4
        assert row["message"].startswith(NONFINITE), row["message"]


@pytest.mark.parametrize("name", ["lazy_out", "lazy_timed"])
def test_a_tensor_subclass_that_computes_when_read_is_an_error(plugin, name):
    """Its timed calls only wrap the inputs; the attention ran when the harness read the answer, outside
    the timed window. lazy_timed returns plain tensors wherever k or v changed: the timed answers' type is
    what gives it away."""
    row = measure_cell(spec(name), QUICK)
    assert row["status"] == "error", row["message"]
    assert "returned a Lazy, a torch.Tensor subclass; expected a plain torch.Tensor" in row["message"]
    assert "\n" not in row["message"]


def test_the_contract_refuses_a_tensor_subclass():
    q, v = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)
    assert check_output(torch.zeros(1, 2, 8, 4), q, v) is not None
    with pytest.raises(OutputContractError, match="a Parameter, a torch.Tensor subclass"):
        check_output(torch.nn.Parameter(torch.zeros(1, 2, 8, 4)), q, v)


def test_every_query_row_changes_between_timed_calls(plugin):
    """incr_rows keeps its last inputs and answer and recomputes the query rows of q that changed: it
    recomputed one row per call when one row was flipped, and now recomputes all of them (it is honest,
    and ok). incr_one recomputes only the first row that changed: its other rows are older answers."""
    plugin.INCR[:] = [0, 0]
    row = measure_cell(spec("incr_rows"), CALLS)
    assert row["status"] == "ok", row["message"]
    recomputed, rows = plugin.INCR
    # every reuse recomputed every row, but for the fresh check's call (the refill's values again)
    assert rows >= 20 * 256 and recomputed >= rows - 256, (recomputed, rows)
    one = measure_cell(spec("incr_one"), CALLS)
    assert one["status"] == "wrong" and one["message"].startswith(VARIED), one["message"]


def test_fwdbwd_cells_vary_their_inputs_too(plugin):
    """memo_fwdbwd remembers its output by a fingerprint of q, k, v: with q varied it misses and computes.
    memo_kv remembers output and gradients by k and v (ok while q never changed in a fwd+bwd cell);
    memo_grad computes its output and remembers its gradients by k, v and dO: its output's row changes,
    q's gradient's does not."""
    plugin.MEMO_HITS[:] = [0, 0]
    row = measure_cell(spec("memo_fwdbwd", pass_="fwdbwd"), CALLS)
    assert row["status"] == "ok", row["message"]
    hits, calls = plugin.MEMO_HITS
    assert calls > 20 and hits < 0.2 * calls, (hits, calls)
    for name in ("memo_kv", "memo_grad"):
        bad = measure_cell(spec(name, pass_="fwdbwd"), CALLS)
        assert bad["status"] == "wrong" and bad["message"].startswith(VARIED), (name, bad["message"])
        assert bad["rel_err"] <= 1e-4 and bad["fresh_rel_err"] <= 1e-4  # right wherever else it was read


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
@pytest.mark.parametrize("causal", [False, True])
def test_honest_variants_stay_ok_with_padding_and_put_q_back(pass_, causal):
    """NaN in rows that see no key is an honest answer (naive's, where padding hides every key of a
    query); q is multiplied back to its own values after timing."""
    import dataclasses

    for name in ("naive", "sdpa", "chunked"):
        cell = dataclasses.replace(spec(name, pass_=pass_, causal=causal), batch=2, padding=0.25)
        row = measure_cell(cell, QUICK)
        assert row["status"] == "ok", (name, row["message"])


def test_q_is_put_back_exactly_and_the_variation_costs_little():
    """q's own values after the timed calls, in every dtype; the work between two calls (the last answer
    checked whole, a row copied and compared, q multiplied by a sign vector) is well under the call at the
    quick preset's smallest cells."""
    fn = lambda q, k, v, **_: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(1, 4, 64, 32).to(dtype) for _ in range(3))
        pristine = q.clone()
        call = timed_call(fn, q, k, v, backward=False, vary=True)
        for _ in range(50):
            call.between()
            call()
        result = call.varied.finish()
        assert result is not None and result.passed and result.checked == 49
        assert torch.equal(q, pristine)
    t_call = _best(lambda: call())
    t_between = _best(lambda: call.between())
    call.varied.finish()
    assert t_between < t_call, (t_between, t_call)


def _best(fn, n: int = 200) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.slow
def test_attnbench_run_catches_every_cheat_and_keeps_the_honest_ok(tmp_path, plugin):
    out = tmp_path / "r"
    run_cli(
        "run", "--variant-file", str(CHEATS),
        "--variants", "naive,zero_rows,nan_timed,lazy_timed,incr_one,memo_kv,memo_grad",
        "--seq-len", "128", "--heads", "2", "--d-k", "16", "--pass", "fwd,fwdbwd",
        "--budget-ms", "40", "--warmup-ms", "5", "--out", str(out),
        timeout=300, check=True,
    )  # fmt: skip
    rows = {(r["variant"], r["pass"]): r for r in read_rows(out)}
    for key, row in rows.items():
        if row["status"] == "unsupported":
            continue
        honest = key[0] == "naive" or key == ("memo_grad", "fwd")  # it remembers gradients only
        want = "ok" if honest else "error" if key[0] == "lazy_timed" else "wrong"
        assert row["status"] == want, (key, row["status"], row["message"])
    assert rows[("memo_kv", "fwdbwd")]["status"] == "wrong" and rows[("naive", "fwdbwd")]["status"] == "ok"
