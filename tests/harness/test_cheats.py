"""One variant never harms another, a remembered answer is caught, and setup is measured apart.

The variants are real plug-in files (tests/data/cheat_variants.py): one scales q in place after answering,
one adds to k only from its third call on, one returns its first answer forever, one initialises lazily,
one plans in a setup hook.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from conftest import DATA, load_plugin, run_cli, run_pytest_benchmarks
from fakes import calling_timer, tiny_cell

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import InputCache, make_inputs, measure_cell, prepare
from attnbench.harness.measure.outcomes import MUTATES, NOT_FOLLOWING
from attnbench.harness.sweep.settings import Settings
from attnbench.results import load, read_rows

CHEATS = DATA / "cheat_variants.py"
QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)


spec, fake = tiny_cell, calling_timer


@pytest.fixture(scope="module")
def plugin():
    """The plug-in file, loaded as `--variant-file` loads it; its module, for its counters."""
    return load_plugin(CHEATS)


def test_a_variant_that_scales_q_after_answering_is_wrong_and_harms_no_later_cell(plugin):
    cache = InputCache()
    pristine = make_inputs(spec("naive"), QUICK.seed)
    row = measure_cell(spec("cheat_mutate"), QUICK, cache, timer=fake())
    assert row["status"] == "wrong" and row["message"] == f"{MUTATES} (q changed)"
    assert row["rel_err"] <= correctness.TOLERANCE["float32"]  # its answer was right: only the check sees it
    for name in ("naive", "chunked", "stable_softmax"):  # the same shape, the same cache, right after it
        later = measure_cell(spec(name), QUICK, cache, timer=fake())
        assert (later["status"], later["message"]) == ("ok", ""), later
    q, k, v, kl = cache.get(spec("naive"), QUICK.seed)
    assert torch.equal(q, pristine[0]) and torch.equal(k, pristine[1]) and torch.equal(v, pristine[2])


def test_the_numerics_probe_hands_each_variant_its_own_inputs(plugin):
    """A variant that scales q in place after answering is `wrong` in the probe (as its cells are), and the
    variants probed after it get the records they get without it: the probe's inputs are not shared."""
    from attnbench.harness.measure import numerics

    alone = numerics.probe(["naive", "stable_softmax"], ["cpu"], ["float32"])
    after = numerics.probe(["cheat_mutate", "naive", "stable_softmax"], ["cpu"], ["float32"])
    cheat = [r for r in after if r["variant"] == "cheat_mutate"]
    assert len(cheat) == len(numerics.PROBE_SCALES)
    assert all(r["status"] == "wrong" and r["message"] == f"{MUTATES} (q changed)" for r in cheat)
    assert [r for r in after if r["variant"] != "cheat_mutate"] == alone


def test_key_lengths_are_inputs_too(plugin):
    cache = InputCache()
    padded = dict(batch=2, padding=0.25)
    row = measure_cell(
        dataclasses.replace(spec("cheat_mutate_lengths"), **padded), QUICK, cache, timer=fake()
    )
    assert row["status"] == "wrong" and row["message"] == f"{MUTATES} (key_lengths changed)"
    later = measure_cell(dataclasses.replace(spec("naive"), **padded), QUICK, cache, timer=fake())
    assert later["status"] == "ok" and later["masked_rows"] == "n/a"  # no batch lost all its keys


def test_a_change_made_only_by_the_timed_calls_is_found_after_timing(plugin):
    plugin.LATE_CALLS[0] = 0
    cache = InputCache()
    ready = prepare(spec("cheat_mutate_late"), QUICK, cache)
    assert ready.changed == () and ready.gate.passed  # the gate's call was clean
    row = measure_cell(spec("cheat_mutate_late"), QUICK, cache, timer=fake())
    assert row["status"] == "wrong" and row["message"] == f"{MUTATES} (k changed)"
    assert measure_cell(spec("naive"), QUICK, cache, timer=fake())["status"] == "ok"


def test_a_mutating_variant_is_wrong_in_a_fwdbwd_cell_too(plugin):
    """There autograd refuses its write into a leaf of the timed call: wrong all the same, saying why,
    and the cell after it is fine."""
    cache = InputCache()
    row = measure_cell(spec("cheat_mutate", pass_="fwdbwd"), QUICK, cache, timer=fake())
    assert row["status"] == "wrong" and row["message"].startswith(f"{MUTATES} (q changed); then RuntimeError")
    assert row["grad_rel_err"] is None  # the gradient check is not run on inputs the variant wrote into
    assert measure_cell(spec("naive", pass_="fwdbwd"), QUICK, cache, timer=fake())["status"] == "ok"


def test_a_remembered_answer_does_not_follow_the_inputs(plugin):
    plugin._REMEMBERED.clear()
    row = measure_cell(spec("cheat_cache"), QUICK, timer=fake())
    assert row["rel_err"] <= correctness.TOLERANCE["float32"]  # right on the gated inputs
    assert row["fresh_rel_err"] > 0.1  # and far off on fresh ones
    assert row["status"] == "wrong"
    assert row["message"].startswith(f"{NOT_FOLLOWING}: on fresh inputs (seed {QUICK.seed + 1}) rel_err")
    honest = measure_cell(spec("naive"), QUICK, timer=fake())
    assert honest["status"] == "ok" and honest["fresh_rel_err"] <= correctness.TOLERANCE["float32"]


def test_first_call_is_recorded_apart_from_the_steady_state(plugin):
    n = 96  # a shape no other test uses: lazy_init's first call on it initialises
    row = measure_cell(spec("lazy_init", n=n), QUICK, timer=fake())
    assert row["status"] == "ok" and row["setup_ms"] is None
    assert row["first_call_ms"] >= 0.9 * plugin.LAZY_SLEEP_S * 1e3  # the lazy init, in the first call
    again = measure_cell(spec("lazy_init", n=n), QUICK, timer=fake())
    assert again["first_call_ms"] < row["first_call_ms"]  # initialised already: nothing to pay again
    assert measure_cell(spec("naive"), QUICK, timer=fake())["first_call_ms"] > 0


def test_a_setup_hook_is_timed_apart_and_kept_out_of_the_timed_call(plugin):
    plugin.SETUP_CALLS.clear()
    timer = fake()
    row = measure_cell(spec("with_setup", causal=True), QUICK, timer=timer)
    assert row["status"] == "ok", row
    assert row["setup_ms"] >= 0.9 * plugin.SETUP_SLEEP_S * 1e3
    assert timer.calls > 5 and plugin.SETUP_CALLS == [(1, 2, 128, 16)]  # once, however many timed calls
    assert row["fresh_rel_err"] <= correctness.TOLERANCE["float32"]  # the plan holds for other values


def test_a_setup_hook_that_returns_no_callable_is_the_cells_error(plugin):
    row = measure_cell(spec("bad_setup"), QUICK, timer=fake())
    assert (row["status"], row["message"]) == (
        "error",
        "TypeError: setup of bad_setup returned int, not a callable",
    )


def test_setup_must_be_callable_at_registration():
    with pytest.raises(variants.VariantError, match="setup must be callable, not int"):
        variants.register("setup_not_callable", setup=3)(lambda q, k, v, **kw: q)


def test_a_function_that_cannot_take_q_k_v_is_refused_at_registration():
    """Not a row of errors per cell after the run began: `fn(q, k)` never takes the harness's call."""
    with pytest.raises(variants.VariantError, match=r"'two_args' is called as fn\(q, k, v, ...\), but"):
        variants.register("two_args")(lambda q, k: q)
    variants.register("star_args")(lambda *a, **kw: a[0])  # *args takes them: checked per cell
    names = set(variants.all_variants())
    assert "star_args" in names and "two_args" not in names
    variants.registry._REGISTRY.pop("star_args")


@pytest.mark.slow
def test_a_mutating_plugin_first_leaves_every_later_variant_ok_in_attnbench_run(tmp_path):
    out = tmp_path / "r"
    run_cli(
        "run", "--variant-file", str(CHEATS),
        "--variants", "cheat_mutate,naive,chunked,cheat_cache,with_setup",
        "--seq-len", "64,128", "--heads", "2", "--d-k", "16",
        "--budget-ms", "20", "--warmup-ms", "5", "--out", str(out),
        timeout=300, check=True,
    )  # fmt: skip
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(out)}
    assert len(rows) == 10
    for n in (64, 128):
        assert rows[("cheat_mutate", n)]["status"] == "wrong"
        assert rows[("cheat_mutate", n)]["message"] == f"{MUTATES} (q changed)"
        for name in ("naive", "chunked", "with_setup"):  # after it in the same worker, on the same shape
            assert rows[(name, n)]["status"] == "ok", rows[(name, n)]
        assert rows[("cheat_cache", n)]["status"] == "wrong"
        assert NOT_FOLLOWING in rows[("cheat_cache", n)]["message"]
    df = load(out)
    assert df["first_call_ms"].notna().all() and (df["first_call_ms"] > 0).all()
    with_setup = df[df["variant"] == "with_setup"]
    assert with_setup["setup_ms"].notna().all() and df[df["variant"] != "with_setup"]["setup_ms"].isna().all()


@pytest.mark.slow
def test_the_pytest_plugin_runs_the_same_checks(tmp_path):
    out = tmp_path / "out.json"
    proc = run_pytest_benchmarks(
        "-q", "--benchmark-only", "--benchmark-json", str(out), "--attn-variant-file", str(CHEATS),
        "--attn-variants", "cheat_mutate,naive,cheat_cache,with_setup", "--attn-seq-len", "64",
        "--attn-heads", "2", "--attn-d-k", "16", "--attn-pass", "fwd", "--benchmark-max-time", "0.01",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 failed, 2 passed" in proc.stdout
    assert f"cheat_mutate: {MUTATES} (q changed)" in proc.stdout
    assert f"cheat_cache: {NOT_FOLLOWING}" in proc.stdout
    data = json.loads(out.read_text())
    info = {b["extra_info"]["variant"]: b["extra_info"] for b in data["benchmarks"]}
    assert sorted(info) == ["naive", "with_setup"]  # a cheat is never a benchmark a later session compares to
    assert info["naive"]["status"] == "ok" and info["with_setup"]["status"] == "ok"
    assert {r["variant"]: r["status"] for r in data["attnbench"]["untimed"]} == {
        "cheat_mutate": "wrong", "cheat_cache": "wrong",
    }  # fmt: skip
    assert info["with_setup"]["setup_ms"] > 0 and info["naive"]["setup_ms"] is None
    assert all(i["first_call_ms"] > 0 and "fresh_rel_err" in i for i in info.values())
