"""What the worker's snapshot (harness.workers.torch_state) reaches beyond torch's settings: the tables the
gate and the timers read, the built-in variants' own modules, torch's mode stacks and aten's kernels. A
variant that changes one is named in its own row, and its neighbour measured after it in the same run gets
the row it gets in a clean run (tests/data/reach_variants.py: the hostile plug-ins of a trial)."""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from conftest import DATA, run_cli

from attnbench.results import formulas, read_rows

REACH = DATA / "reach_variants.py"
# each offender, then the neighbour it would have changed
ORDER = "evil_tol,buggy_noscale,evil_helper,naive,evil_mode,honest_too,evil_kernel,honest"
NEIGHBOURS = "buggy_noscale,naive,honest_too,honest"
SMALL = ("--seq-len", "32", "--heads", "2", "--pass", "fwd", "--threads", "2", "--budget-ms", "5",
         "--warmup-ms", "1", "--min-ms", "2", "-q")  # fmt: skip


@pytest.fixture
def state():
    from attnbench.harness.workers.torch_state import State

    state = State()
    before = state.take()
    yield state, before
    state.restore(before)


def test_the_tables_the_gate_reads_are_read_only():
    from attnbench.harness.measure import calibrate, correctness, own_gradient

    for table in (formulas.TOLERANCE, correctness.TOLERANCE, formulas.DTYPE_BYTES, formulas.PASS_FACTOR,
                  calibrate.MATMUL_N, calibrate.PROBE_N, own_gradient.STEP):  # fmt: skip
        with pytest.raises(TypeError):
            table["float32"] = 100.0


def test_a_table_changed_in_place_or_rebound_is_named(state):
    from attnbench.harness.measure import correctness

    state, before = state
    (table,) = gc.get_referents(formulas.TOLERANCE)  # the dict behind the read-only view
    kept, tolerance = dict(table), correctness.TOLERANCE
    try:
        table["float32"] = 100.0
        correctness.TOLERANCE = {"float32": 100.0}
        assert state.changes(before) == [
            "attnbench.harness.measure.correctness.TOLERANCE replaced",
            "attnbench.results.formulas.TOLERANCE changed",  # once, by its own module's name
        ]
    finally:
        table.update(kept)
        correctness.TOLERANCE = tolerance
    assert state.changes(before) == []


def test_a_builtin_variants_helper_replaced_is_named_and_put_back(state):
    from attnbench.variants import grouped

    state, before = state
    scores = grouped.scores
    grouped.scores = lambda q, k: scores(q, k) * 1.001
    assert state.changes(before) == ["attnbench.variants.grouped.scores replaced"]
    assert state.restore(before) == [] and grouped.scores is scores


class _Passing(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_a_mode_left_entered_is_named_and_put_back(state):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    state, before = state
    _Passing().__enter__()
    Passing().__enter__()
    assert state.changes(before) == ["torch_function_modes 0 → 1", "torch_dispatch_modes 0 → 1"]
    assert state.restore(before) == []
    assert torch._C._len_torch_function_stack() == 0 and state.changes(before) == []


def test_an_aten_kernel_registered_over_is_named(state):
    state, before = state
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # torch warns of the override once a process, so not asserted
            warnings.simplefilter("ignore")
            lib.impl("_softmax", lambda x, dim, half: x, "CPU")
        assert state.changes(before) == ["aten::_softmax kernel for CPU replaced"]
    finally:
        lib._destroy()
    assert state.changes(before) == []


def _rows(out):
    return {r["variant"]: r for r in read_rows(out)}


@pytest.mark.slow
def test_each_offender_is_named_and_its_neighbour_is_as_in_a_clean_run(tmp_path):
    """Without the snapshot's reach, buggy_noscale after evil_tol was `ok` (the gate loosened to 100),
    naive after evil_helper `wrong` (its scores times 1.001), honest after evil_kernel `wrong` (softmax
    rounded to bfloat16), and every cell after evil_mode ran through its mode."""
    run_cli("run", "--variant-file", str(REACH), "--variants", ORDER, *SMALL, "--out",
            str(tmp_path / "dirty"), check=True)  # fmt: skip
    run_cli("run", "--variant-file", str(REACH), "--variants", NEIGHBOURS, *SMALL, "--out",
            str(tmp_path / "clean"), check=True)  # fmt: skip
    dirty, clean = _rows(tmp_path / "dirty"), _rows(tmp_path / "clean")
    said = {
        "evil_tol": "changed attnbench's measuring code: attnbench.results.formulas.TOLERANCE changed",
        "evil_helper": "changed attnbench's measuring code: attnbench.variants.grouped.scores replaced",
        "evil_mode": "changed torch's global state: torch_function_modes 0 → ",  # one a call
        "evil_kernel": "changed torch's global state: aten::_softmax kernel for CPU replaced",
    }
    for name in NEIGHBOURS.split(","):
        row, ref = dirty[name], clean[name]
        assert row["status"] == ref["status"] == ("wrong" if name == "buggy_noscale" else "ok"), row
        assert row["rel_err"] == ref["rel_err"], name  # the same inputs, the same kernels, the same answer
        assert "changed" not in row["message"], row["message"]
    for name, words in said.items():
        assert dirty[name]["status"] == "error" and words in dirty[name]["message"], dirty[name]
