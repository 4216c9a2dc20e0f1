"""harness.check, the gate behind `attnbench check`: plain records and an exit status, no printing."""

from __future__ import annotations

import sys

import pytest
from conftest import FAULTS

from attnbench import variants
from attnbench.harness import check
from attnbench.variants import registry


@pytest.fixture
def isolated_registry(monkeypatch):
    """Variants loaded by the test are gone afterwards (the registry and the loaded files are global)."""
    variants.all_variants()  # the builtins, before the copy
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    before = {m for m in sys.modules if m.startswith("attnbench_variant_file_")}
    yield
    for name in {m for m in sys.modules if m.startswith("attnbench_variant_file_")} - before:
        del sys.modules[name]


def test_a_wrong_plugin_fails_and_unsupported_cells_say_why(isolated_registry):
    plan = check.prepare(
        ["naive", "fault_wrong", "fault_unsupported"], ["cpu"], ["float32", "bfloat16"], 16,
        variant_files=[str(FAULTS)],
    )  # fmt: skip
    rows = list(check.gate_all(plan))
    assert len(rows) == 3 * 2 * 2 * 2  # variants x dtypes x causal x padding
    by = {(r.variant, r.dtype, r.causal, r.padding): r for r in rows}

    assert {r.status for r in rows if r.variant == "naive"} == {"pass"}
    assert all(r.rel_err < 1e-2 and r.grad_rel_err is not None for r in rows if r.variant == "naive")
    assert by[("naive", "float32", False, True)].masked_rows == "zeros"  # batch 1 sees no key

    wrong = [r for r in rows if r.variant == "fault_wrong"]
    assert {r.status for r in wrong} == {"FAIL"} and all(r.gating and r.rel_err > 0.1 for r in wrong)
    assert check.exit_status(rows) == 1
    assert check.exit_status([r for r in rows if r.variant != "fault_wrong"]) == 0

    refused = by[("fault_unsupported", "float32", True, False)]  # refused at call time
    assert refused.status == "unsupported" and refused.reason == "this backend refuses odd sequence lengths"
    assert refused.rel_err is None and refused.grad_rel_err is None
    by_dtype = by[("fault_unsupported", "bfloat16", False, False)]  # refused by its capability record
    assert by_dtype.status == "unsupported" and "does not support bfloat16" in by_dtype.reason


def test_a_demo_only_failure_does_not_fail_the_check():
    row = check.GateRow("unstable_softmax", "cpu", "float32", False, True, "FAIL", 1e-7, float("inf"),
                        "nan", gating=False)  # fmt: skip
    assert check.exit_status([row]) == 0


@pytest.mark.parametrize(
    "names, devices, dtypes, seq_len, message",
    [
        (["naive", "nope"], ["cpu"], ["float32"], 16, "unknown variant 'nope'"),
        (None, ["cpu"], ["float8"], 16, "unknown dtype 'float8'"),
        (None, ["tpu"], ["float32"], 16, "unknown device 'tpu'; known: cpu, cuda"),
        (None, ["cpu"], ["float32"], 0, "--seq-len must be a positive integer, got 0"),
    ],
)
def test_bad_input_is_refused_before_any_work(names, devices, dtypes, seq_len, message):
    with pytest.raises(ValueError) as err:
        check.prepare(names, devices, dtypes, seq_len)
    assert message in str(err.value)


def test_every_registered_variant_by_default():
    plan = check.prepare(None, ["cpu"], ["float32"])
    assert set(plan.names) == set(variants.all_variants()) and plan.seq_len == 100
