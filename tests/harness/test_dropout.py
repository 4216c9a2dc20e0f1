"""Dropout as a sweep axis: the spec and identity, the statistical dropout check (honest built-ins pass,
cheats fail with a readable reason), and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from conftest import DATA, ROOT, run_cli

from attnbench import variants
from attnbench.harness.measure import attention64, correctness, dropout_check
from attnbench.harness.measure.cell import InputCache, make_inputs, prepare
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep, cell_given
from attnbench.results import load, read_rows
from attnbench.variants import Problem
from attnbench.variants.masks import attention_mask

CHEATS = DATA / "dropout_cheats.py"
QUICK = Settings(warmup_ms=1, budget_ms=5, min_ms=1)
REFERENCE_RUN = ROOT / "results" / "reference" / "quick-epyc-2core"


def spec(variant: str, p: float, *, causal: bool = True, padding: float = 0.0, pass_: str = "fwd"):
    return CellSpec(variant, "cpu", "float32", 2, 2, 64, 16, 16, causal, padding, pass_, dropout=p)


def measure(cell: CellSpec) -> dict:
    """The gate's part of a cell's row: what prepare found (the dropout check among it) and its verdict.
    (Timing and memory are measure_cell's, exercised end to end by the CLI test below.)"""
    row = {**cell.to_dict(), "cell_id": cell.cell_id}
    ready = prepare(cell, QUICK, InputCache())
    status, message = ready.verdict()
    return {**row, **ready.fields(), "status": status, "message": message}


@pytest.fixture(scope="module")
def cheats():
    variants.load_variant_file(CHEATS)
    return CHEATS


# ---- the axis: spec, identity, rows --------------------------------------------------------------------


def test_ids_without_dropout_are_byte_identical_to_before():
    """A cell at dropout 0 has the id it had before the axis existed: every row of a published run."""
    rows = read_rows(REFERENCE_RUN)
    assert rows and all("dropout" not in r for r in rows)  # written before the axis
    for row in rows:
        assert CellSpec.from_dict(row).cell_id == row["cell_id"]
    c = CellSpec("naive", "cpu", "float32", 1, 8, 2048, 64, 64, False, 0.0, "fwd")
    assert c.cell_id == "naive|cpu|float32|b1|h8|n2048|dk64|dv64|full|pad0|fwd" and c.dropout == 0.0


def test_dropout_cells_have_their_own_id_and_series():
    a, b = spec("naive", 0.0), spec("naive", 0.2)
    assert b.cell_id == a.cell_id + "|drop0.2"
    assert a.shape_key != b.shape_key and a.group_key != b.group_key
    assert CellSpec.from_dict(b.to_dict()) == b and b.to_dict()["dropout"] == 0.2
    assert b.problem().dropout and b.problem().dropout_p == 0.2 and not a.problem().dropout
    cells = SweepSpec(seq_len=(64,), dropout=(0.0, 0.1), passes=("fwd", "fwdbwd")).cells(["naive", "sdpa"])
    assert len({c.cell_id for c in cells}) == len(cells) == 8
    assert [c.dropout for c in cells] == ([0.0] * 2 + [0.1] * 2) * 2  # per pass: no dropout, then 0.1


def test_cell_given_say_the_dropout_too():
    cell = spec("chunked", 0.25, pass_="fwdbwd")
    texts, left = cell_given(cell, QUICK)
    assert left == [] and build_sweep(texts).cells(["chunked"]) == [cell]


@pytest.mark.parametrize(
    "text, message",
    [
        ("1", "--dropout must be a probability in [0, 1), got 1.0"),
        ("-0.1", "--dropout must be a probability in [0, 1), got -0.1"),
        ("x", "--dropout must be numbers, got 'x'"),
        ("0.1,0.1", "--dropout lists a value twice: [0.1, 0.1]"),
    ],
)
def test_bad_dropout_is_a_one_line_error(text, message):
    with pytest.raises(ValueError) as info:
        build_sweep({"dropout": text})
    assert str(info.value) == message


def test_an_old_run_loads_with_dropout_0():
    df = load(REFERENCE_RUN)
    assert len(df) and (df["dropout"] == 0.0).all()


# ---- the check -----------------------------------------------------------------------------------------


def test_bernstein_bound():
    """Simulated fractions of Bernoulli(p) draws stay within the bound, and it narrows as n grows."""
    g = torch.Generator().manual_seed(0)
    for p, n in ((0.1, 400), (0.5, 2000)):
        t = dropout_check.bernstein(n, p * (1 - p))
        fracs = (torch.rand(20_000, n, generator=g) < p).double().mean(1)
        assert float((fracs - p).abs().max()) < t
    assert dropout_check.bernstein(4000, 0.09) < dropout_check.bernstein(400, 0.09) / 3


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_mean_rule_is_calibrated(p):
    """Honest dropout simulated in float64 (500 x K masks): the mean's error over its expected size, the
    rule's statistic, is about 1 and far below MEAN_Z (harness/measure/dropout_check.py states the larger
    study)."""
    cell = spec("naive", p, padding=0.25)
    q, k, v, kl = make_inputs(dataclasses.replace(cell, dtype="float64"), 0)
    visible = attention_mask(64, 64, causal=True, key_lengths=kl, device="cpu")
    weights = torch.softmax(((q @ k.transpose(-2, -1)) * 16**-0.5).masked_fill(~visible, -math.inf), -1)
    ref = weights @ v
    var = attention64.second_moment(q, k, v, causal=True, key_lengths=kl) * p / (1 - p)
    expected = math.sqrt(float(var.sum()) / dropout_check.RUNS)
    g = torch.Generator().manual_seed(0)
    keep = (torch.rand(500, dropout_check.RUNS, *weights.shape, generator=g, dtype=torch.float64) >= p) / (
        1 - p
    )
    mean = ((weights * keep) @ v).mean(1)
    z = ((mean - ref) ** 2).flatten(1).sum(1).sqrt() / expected
    assert 0.8 < float(z.mean()) < 1.1 and float(z.max()) < dropout_check.MEAN_Z / 2


def cpu_dropout_variants() -> list[str]:
    """Every built-in variant that declares dropout and runs here."""
    problem = Problem(dropout=0.1, causal=True)
    return [
        name
        for name, v in variants.all_variants().items()
        if v.source == "builtin" and v.check(problem) is None
    ]


def test_every_builtin_that_runs_here_declares_dropout_and_the_rest_say_why():
    names = cpu_dropout_variants()
    assert {"naive", "stable_softmax", "chunked", "sdpa", "sdpa_math"} <= set(names)
    reason = variants.get("sdpa_flash").check(spec("sdpa_flash", 0.1).problem())
    assert reason == "the CPU flash kernel does not implement dropout"


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("name", cpu_dropout_variants())
def test_builtins_pass_the_dropout_check(name, p):
    row = measure(spec(name, p, padding=0.25))
    assert (row["status"], row["message"]) == ("ok", ""), row
    assert row["dropout"] == p and abs(row["drop_frac"] - p) < 0.1 and row["drop_mean_z"] < 3
    assert row["cell_id"].endswith(f"|fwd|drop{p:g}")


def test_builtins_pass_in_low_precision_and_with_backward():
    for name, dtype in (("naive", "bfloat16"), ("stable_softmax", "float16"), ("sdpa", "bfloat16")):
        cell = CellSpec(name, "cpu", dtype, 1, 2, 64, 16, 16, False, 0.0, "fwdbwd", dropout=0.1)
        row = measure(cell)
        assert row["status"] == "ok", row
        assert row["grad_rel_err"] is not None  # gradients gated exactly, without dropout


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
def test_chunked_passes_the_dropout_check_on_grouped_query_blocks(kv_heads, pass_):
    """chunked's tiles on the folded grouped-query rows, a real cell through prepare (the check's mask
    rate, scaling, independence across heads, rows and keys, repeatability and mean; fwdbwd's gradients
    gated at p = 0)."""
    cell = CellSpec(
        "chunked", "cpu", "float32", 2, 4, 64, 16, 16, True, 0.25, pass_, kv_heads=kv_heads, dropout=0.2
    )
    row = measure(cell)
    assert (row["status"], row["message"]) == ("ok", ""), row
    assert abs(row["drop_frac"] - 0.2) < 0.1 and row["drop_mean_z"] < 3
    assert pass_ == "fwd" or row["grad_rel_err"] is not None


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
@pytest.mark.parametrize(
    "axes",
    [
        dict(seq_k=96, causal_align="lower-right"),  # a chunked prefill: 64 queries at the end of 96 keys
        dict(window=24),
        dict(seq_k=48, causal_align="lower-right", window=16, mod="alibi"),
    ],
    ids=["lower-right", "window", "lower-right-window-alibi"],
)
def test_chunked_passes_the_dropout_check_with_lower_right_windows_and_mods(axes, pass_):
    """The tiles on their fixed grid under lower-right alignment and sliding windows (where the forward's
    first key block and the backward's first query block start off the grid), and with a score mod: the
    statistical check through prepare, on GQA rows."""
    cell = CellSpec("chunked", "cpu", "float32", 2, 4, 64, 16, 16, True, 0.0, pass_, kv_heads=2, dropout=0.2,
                    **axes)  # fmt: skip
    row = measure(cell)
    assert (row["status"], row["message"]) == ("ok", ""), row
    assert abs(row["drop_frac"] - 0.2) < 0.1 and row["drop_mean_z"] < 3


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_chunked_small_blocks_pass_the_dropout_check(p):
    """Many tiles per call (16 x 11 blocks, 64 queries on 48 keys, GQA, causal, padding): the check through
    chunked's public calling convention with its block sizes bound."""
    chunked = variants.get("chunked").fn

    def small(q, k, v, **kw):
        return chunked(q, k, v, block_q=16, block_k=11, **kw)

    g = torch.Generator().manual_seed(0)
    q, (k, v) = torch.randn(2, 4, 64, 16, generator=g), torch.randn(2, 2, 2, 48, 16, generator=g)
    kl = torch.tensor([48, 30])
    result = dropout_check.check(small, q, k, v, p=p, causal=True, key_lengths=kl)
    assert result.passed, result.describe()
    assert abs(result.drop_frac - p) < 0.1 and result.deterministic


@pytest.mark.parametrize(
    "name, reason",
    [
        ("drop_ignored", "attention weights, expected p = 0.1 (± 3.7%) (is dropout_p ignored?)"),
        ("drop_unscaled", "kept weights are scaled by 1, expected 1/(1 - p) = 1.111"),
        ("drop_renormalised", "expected 1/(1 - p) = 1.111"),
        ("drop_shared_heads", "drops are not independent across heads"),
        ("drop_fixed_mask", "8 calls with different seeds returned the same output"),
        ("drop_own_rng_promised", "the same torch.manual_seed gave a different output"),
    ],
)
def test_cheats_are_wrong_with_a_readable_reason(cheats, name, reason):
    row = measure(spec(name, 0.1))
    assert row["status"] == "wrong", row
    message = row["message"]
    assert message.startswith("failed the dropout check: ") and reason in message, message
    assert row["rel_err"] <= correctness.TOLERANCE["float32"]  # right without dropout: only the check sees it
    assert measure(spec("naive", 0.1))["status"] == "ok"  # and the next variant is unharmed


def test_a_cheat_is_fine_at_dropout_0_and_wrong_at_0_5(cheats):
    assert measure(spec("drop_unscaled", 0.0))["status"] == "ok"
    row = measure(spec("drop_unscaled", 0.5))
    assert row["status"] == "wrong" and "expected 1/(1 - p) = 2" in row["message"]


def test_a_variant_with_its_own_rng_that_says_so_is_not_held_to_determinism(cheats):
    assert not variants.get("drop_own_rng").cap.dropout_deterministic
    assert variants.get("drop_own_rng").record()["dropout_deterministic"] is False
    row = measure(spec("drop_own_rng", 0.1))
    assert (row["status"], row["message"]) == ("ok", ""), row


def test_the_check_costs_a_fixed_number_of_calls():
    calls = []

    def counting(q, k, v, **kw):
        calls.append(kw["dropout_p"])
        return variants.get("naive").fn(q, k, v, **kw)

    q, k, v, kl = make_inputs(spec("naive", 0.1), 0)
    result = dropout_check.check(counting, q, k, v, p=0.1, causal=True, key_lengths=kl)
    assert result.passed and calls == [0.1] * (dropout_check.RUNS + 2)


# ---- the CLI -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_dropout_sweep_from_the_cli(tmp_path):
    out = tmp_path / "r"
    run_cli(
        "run", "--variants", "naive,stable_softmax", "--seq-len", "32", "--heads", "2", "--d-k", "16",
        "--dropout", "0,0.2", "--pass", "both", "--warmup-ms", "1", "--budget-ms", "5", "--min-ms", "1",
        "--out", str(out), check=True,
    )  # fmt: skip
    rows = read_rows(out)
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows), [r["message"] for r in rows]
    assert sorted({r["dropout"] for r in rows}) == [0.0, 0.2]
    dropped = [r for r in rows if r["dropout"] == 0.2]
    assert all(r["cell_id"].endswith("|drop0.2") and r["drop_frac"] > 0 for r in dropped)
    assert all(r.get("drop_frac") is None for r in rows if r["dropout"] == 0)
    assert json.loads((out / "meta.json").read_text())["sweep"]["dropout"] == [0.0, 0.2]
    df = load(out)
    assert sorted(df["dropout"].unique().tolist()) == [0.0, 0.2]


@pytest.mark.parametrize("value", ["1", "-0.1"])
def test_bad_dropout_from_the_cli_is_refused_before_anything_is_written(tmp_path, value):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", "--dropout", value, "--out", str(out), cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == [f"attnbench: error: --dropout must be a probability in [0, 1), got {float(value)}"]
    assert not out.exists() and not (tmp_path / "runs").exists()
