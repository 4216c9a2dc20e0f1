"""Capability.layout: every call of a cell (gated, timed, fresh-input) is handed q, k, v in the memory layout
its variant declares, made outside the timed calls; the float64 gate and the input checks hold as before,
and the row says which layout was measured.

The variants are a real plug-in file (tests/data/layout_variants.py) that records the strides of every call.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import DATA, load_plugin, run_cli
from fakes import FakeTimer

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import InputCache, measure_cell
from attnbench.harness.measure.outcomes import MUTATES
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results import load
from attnbench.results.schema import COLUMNS

LAYOUT_VARIANTS = DATA / "layout_variants.py"
QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)
B, H, N, D = 2, 3, 32, 8
BHND = (H * N * D, N * D, D, 1)  # strides of (B, H, N, d)-contiguous memory
BNHD = (N * H * D, D, H * D, 1)  # strides of the same shape over (B, N, H, d)-contiguous memory
TOL = correctness.TOLERANCE["float32"]


@pytest.fixture(scope="module")
def plugin():
    """The plug-in file, loaded as `--variant-file` loads it; its module, for what it recorded."""
    return load_plugin(LAYOUT_VARIANTS)


def spec(variant: str, **axes) -> CellSpec:
    return dataclasses.replace(CellSpec(variant, "cpu", "float32", B, H, N, D, D, False, 0.0, "fwd"), **axes)


def fake() -> FakeTimer:
    return FakeTimer(median_ms=1.0, seed=7, call=True)  # calls the cell: what it is handed is seen


CELLS = [{}, {"padding": 0.25}, {"causal": True, "padding": 0.25, "pass_": "fwdbwd"}]


@pytest.mark.parametrize("axes", CELLS, ids=["fwd", "padded", "causal-padded-fwdbwd"])
def test_a_bnhd_variant_gets_bnhd_memory_in_every_call_and_is_ok(plugin, axes):
    plugin.SEEN.clear()
    timer = fake()
    row = measure_cell(spec("layout_bnhd", **axes), QUICK, InputCache(), timer=timer)
    assert (row["status"], row["message"], row["layout"]) == ("ok", "", "bnhd"), row
    assert row["rel_err"] <= TOL and row["fresh_rel_err"] <= TOL
    if axes.get("pass_") == "fwdbwd":
        assert row["grad_rel_err"] <= TOL * correctness.GRAD_TOLERANCE_FACTOR
    # the gated call, every timed call, the peak-memory call and the fresh-input call: (B, H, N, d) tensors
    # over (B, N, H, d) memory, so that xformers' packing of the batch is a view, no copy
    assert len(plugin.SEEN) >= timer.calls + 3
    assert set(plugin.SEEN) == {("layout_bnhd", (B, H, N, D), BNHD, BNHD, BNHD, True)}


def test_variants_that_declare_no_layout_still_get_contiguous_bhnd_inputs(plugin):
    plugin.SEEN.clear()
    cache = InputCache()
    row = measure_cell(spec("layout_default", padding=0.25), QUICK, cache, timer=fake())
    assert (row["status"], row["layout"]) == ("ok", "bhnd")
    # the (B, H, N, d)-contiguous inputs of before; on these the packing reshape copies
    assert set(plugin.SEEN) == {("layout_default", (B, H, N, D), BHND, BHND, BHND, False)}
    for name in ("naive", "chunked", "sdpa"):  # the default variants: bhnd, and their rows say so
        assert variants.get(name).cap.layout == "bhnd"
        row = measure_cell(spec(name, padding=0.25), QUICK, cache, timer=fake())
        assert (row["status"], row["layout"]) == ("ok", "bhnd"), row
    assert variants.get("layout_bnhd").record()["layout"] == "bnhd"  # meta.json's capability record


def test_a_bnhd_variant_that_writes_into_its_input_is_wrong_and_harms_no_later_cell(plugin):
    cache = InputCache()
    row = measure_cell(spec("layout_bnhd_mutate"), QUICK, cache, timer=fake())
    assert (row["status"], row["message"]) == ("wrong", f"{MUTATES} (v changed)")
    for name in ("layout_bnhd", "naive"):  # the same shape and cache right after it: pristine inputs
        assert measure_cell(spec(name), QUICK, cache, timer=fake())["status"] == "ok"


def test_a_bad_layout_is_refused_at_registration_in_one_line(tmp_path):
    bad = tmp_path / "bad_layout.py"
    bad.write_text(
        "import attnbench\n\n"
        "@attnbench.register('bad_layout', layout='nhwc')\n"
        "def bad_layout(q, k, v, **kw):\n    return q\n"
    )
    message = "variant bad_layout: layout must be one of ('bhnd', 'bnhd'), not 'nhwc'"
    with pytest.raises(variants.VariantError) as info:
        variants.load_variant_file(bad)
    assert str(info.value) == message
    p = run_cli("list", "--variant-file", str(bad))
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [f"attnbench: error: {message}"], p.stderr


def test_in_layout_always_copies_and_keeps_values():
    # where H or N is 1, .contiguous() of the transpose would hand back the same memory: no copy
    for shape in ((2, 3, 5, 4), (2, 1, 5, 4), (2, 3, 1, 4)):
        t = torch.randn(*shape)
        for layout in variants.LAYOUTS:
            u = variants.in_layout(t, layout)
            assert u.shape == t.shape and torch.equal(u, t) and u.data_ptr() != t.data_ptr()
        assert variants.in_layout(t, "bnhd").transpose(1, 2).is_contiguous()
    with pytest.raises(ValueError, match="unknown layout 'nhwc'"):
        variants.in_layout(t, "nhwc")


def test_the_profiled_call_is_handed_the_variants_layout(plugin):
    from attnbench.harness.tools.profiled_child import make_call

    q, k, v, _ = make_call(spec("layout_bnhd"), seed=0)[0].inputs
    assert q.stride() == k.stride() == v.stride() == BNHD


def test_runs_written_before_the_layout_column_load():
    assert COLUMNS["layout"] == "string"
    df = load(DATA / "runs" / "cpu-small")  # its rows have no layout
    assert str(df["layout"].dtype) == "string" and df["layout"].isna().all()
