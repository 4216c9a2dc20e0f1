"""The --mod axis (score modifications: none, alibi, softcap:C): parsing, identity, variants against float64,
capabilities, the dropout check with a mod, the CLI and old runs."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import DATA, run_cli

from attnbench import variants
from attnbench.harness.measure import cell, correctness, rows
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep, cell_given, sweep_file_layer
from attnbench.results import load
from attnbench.results.store import read_rows
from attnbench.variants import mods
from attnbench.variants.registry import Capability, VariantError

QUICK = Settings(warmup_ms=1, budget_ms=5, min_ms=1)
MODS = ("alibi", "softcap:2.5", "softcap:30")


# ---- text and identity ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,canonical",
    [("none", "none"), (" ALiBi ", "alibi"), ("softcap:30.0", "softcap:30"), ("softcap:2.5", "softcap:2.5")],
)
def test_parse_mod_gives_the_canonical_text(text, canonical):
    assert mods.parse_mod(text) == canonical


@pytest.mark.parametrize(
    "text,message",
    [
        ("softcap:-1", "softcap needs a positive cap, as softcap:30, got 'softcap:-1'"),
        ("softcap", "softcap needs a positive cap"),
        ("softcap:inf", "softcap needs a positive cap"),
        ("bias", "mod must be none, alibi or softcap:C (C > 0), got 'bias'"),
    ],
)
def test_bad_mods_are_refused_with_the_value(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_sweep({"mod": f"none,{text}"})


def test_a_sweep_takes_a_comma_list_canonicalises_it_and_refuses_duplicates():
    sweep = build_sweep({"mod": "none,alibi,softcap:30.0", "seq_len": "16"})
    assert sweep.mod == ("none", "alibi", "softcap:30")
    assert [c.mod for c in sweep.cells(["naive"])] == ["none", "alibi", "softcap:30"]
    with pytest.raises(ValueError, match="mod lists a value twice"):
        build_sweep({"mod": "softcap:30,softcap:30.0"})
    with pytest.raises(ValueError, match="^--mod: softcap needs"):  # as the CLI's flag; front ends respell
        build_sweep({"mod": "softcap:0"})
    assert SweepSpec().mod == ("none",)


def test_toml_takes_a_list_or_a_string():
    assert sweep_file_layer({"sweep": {"mod": ["none", "alibi"]}})["mod"] == ("none", "alibi")
    assert sweep_file_layer({"sweep": {"mod": "softcap:50"}})["mod"] == ("softcap:50",)
    with pytest.raises(ValueError, match="got 30"):
        sweep_file_layer({"sweep": {"mod": [30]}})


def test_cell_id_is_unchanged_at_none_and_distinct_per_mod():
    base = ("naive", "cpu", "float32", 1, 8, 256, 64, 64, False, 0.0, "fwd")
    old = "naive|cpu|float32|b1|h8|n256|dk64|dv64|full|pad0|fwd"
    assert CellSpec(*base).cell_id == old
    ids = [CellSpec(*base, mod=m).cell_id for m in ("alibi", "softcap:2.5", "softcap:25", "softcap:30.0")]
    assert ids == [old + "|alibi", old + "|softcap2.5", old + "|softcap25", old + "|softcap30"]


def test_a_cell_round_trips_through_its_row_and_its_text():
    c = CellSpec("chunked", "cpu", "float32", 1, 4, 32, 8, 8, True, 0.0, "fwd", kv_heads=2, mod="softcap:30")
    assert CellSpec.from_dict(json.loads(json.dumps(rows.base_row(c)))) == c
    texts, left = cell_given(c, QUICK)
    assert not left and build_sweep(texts).cells([c.variant]) == [c]
    old_row = {k: v for k, v in c.to_dict().items() if k != "mod"}  # a row written before the axis
    assert CellSpec.from_dict(old_row).mod == "none"


# ---- variants against the float64 reference --------------------------------------------------------------

SHAPES = {  # (H, H_kv, N_q, N_k, causal, causal_align, window, padded)
    "gqa-4/2": (4, 2, 40, 40, False, "top-left", 0, False),
    "decode-lower-right": (4, 2, 3, 50, True, "lower-right", 0, False),
    "window-padding": (4, 4, 33, 33, True, "top-left", 9, True),
    "lower-right-nq>nk": (4, 1, 50, 20, True, "lower-right", 0, False),
}


def _chunked_small(q, k, v, **kw):
    return variants.get("chunked").fn(q, k, v, block_q=8, block_k=16, **kw)  # many blocks at small N


@pytest.mark.parametrize("mod", MODS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["naive", "stable_softmax", "chunked"])
def test_variants_match_float64_with_each_mod_forward_and_gradients(name, shape, mod):
    h, h_kv, n_q, n_k, causal, align, window, padded = SHAPES[shape]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, h, n_q, 16, generator=g)
    k, v = torch.randn(2, h_kv, n_k, 16, generator=g), torch.randn(2, h_kv, n_k, 8, generator=g)
    kl = torch.tensor([n_k, n_k // 2]) if padded else None
    fn = _chunked_small if name == "chunked" else variants.get(name)
    rules = dict(causal=causal, key_lengths=kl, causal_align=align, window=window, mod=mod)
    result = correctness.check(fn, q, k, v, backward=True, **rules)
    assert result.ok, result.describe()
    # the gate can fail: the answer without the mod is far from the modded reference
    plain = correctness.gate(fn(q, k, v, **{**rules, "mod": "none"}), q, k, v, **rules)
    assert not plain.passed


def test_alibi_slopes_follow_the_query_head_in_grouped_rows():
    slopes = mods.grouped_alibi_slopes(8, 2)  # (H_kv, G): query head kv * G + member
    assert slopes.shape == (2, 4)
    assert float(slopes[1, 2]) == pytest.approx(mods.alibi_slope(6, 8))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_cells_pass_the_gate_with_a_mod(dtype):
    for name in ("naive", "chunked"):
        for mod in ("alibi", "softcap:30"):
            c = CellSpec(name, "cpu", dtype, 1, 4, 64, 16, 16, True, 0.0, "fwdbwd", kv_heads=2, mod=mod)
            assert cell.prepare(c, QUICK).verdict()[0] == "ok"


def test_a_dropout_cell_with_a_mod_is_checked_against_the_modded_output():
    axes = dict(seq_k=40, causal_align="lower-right", dropout=0.3, mod="alibi")
    c = CellSpec("naive", "cpu", "float32", 2, 4, 24, 16, 16, True, 0.0, "fwd", **axes)
    ready = cell.prepare(c, QUICK)
    assert ready.verdict() == ("ok", ""), ready.verdict()
    assert abs(ready.dropout.drop_frac - 0.3) < 0.1


# ---- capabilities ---------------------------------------------------------------------------------------


def test_sdpa_cells_with_a_mod_are_unsupported_with_the_reason():
    sdpa = variants.get("sdpa")
    c = CellSpec("sdpa", "cpu", "float32", 1, 2, 16, 8, 8, False, 0.0, "fwd", mod="alibi")
    assert sdpa.check(c.problem()) == "sdpa does not support score modification alibi"
    assert sdpa.check(CellSpec("sdpa", "cpu", "float32", 1, 2, 16, 8, 8, False, 0.0, "fwd").problem()) is None
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="sdpa does not support score modification softcap:30"):
        sdpa(q, q, q, mod="softcap:30.0")
    with pytest.raises(ValueError, match="softcap needs a positive cap"):
        variants.get("naive")(q, q, q, mod="softcap:-1")


def test_capability_mods_are_validated_and_recorded():
    with pytest.raises(VariantError, match="mods must be a tuple"):
        Capability(name="x", mods=("bias",))
    with pytest.raises(VariantError, match="mods must be a tuple"):
        Capability(name="x", mods="alibi")
    assert variants.get("chunked").record()["mods"] == ["alibi", "softcap"]
    assert variants.get("sdpa").record()["mods"] == []


def test_an_old_variant_is_never_handed_mod_none():
    seen = {}

    def old(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
        seen["called"] = True
        return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths, scale=scale)

    from attnbench.variants.registry import Variant

    q = torch.randn(1, 2, 4, 8)
    Variant(fn=old, cap=Capability(name="old"))(q, q, q, mod="none")
    assert seen["called"]


# ---- the CLI and stored runs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_mod_sweep_from_the_cli(tmp_path):
    out = tmp_path / "r"
    run_cli(
        "run", "--variants", "naive,chunked,sdpa", "--seq-len", "16", "--heads", "2", "--d-k", "8",
        "--mod", "none,alibi,softcap:30", "--warmup-ms", "1", "--budget-ms", "5", "--min-ms", "1",
        "--out", str(out), check=True,
    )  # fmt: skip
    rows = read_rows(out)
    status = {(r["variant"], r["mod"]): r["status"] for r in rows}
    assert len(rows) == 9, status
    assert all(status[(v, m)] == "ok" for v in ("naive", "chunked") for m in ("none", "alibi", "softcap:30"))
    assert status[("sdpa", "none")] == "ok"
    bad = {r["mod"]: r["message"] for r in rows if r["variant"] == "sdpa" and r["mod"] != "none"}
    assert bad == {m: f"sdpa does not support score modification {m}" for m in ("alibi", "softcap:30")}
    assert all(r["status"] == "unsupported" for r in rows if r["variant"] == "sdpa" and r["mod"] != "none")
    assert {r["cell_id"].rsplit("|", 1)[1] for r in rows} == {"fwd", "alibi", "softcap30"}
    assert json.loads((out / "meta.json").read_text())["sweep"]["mod"] == ["none", "alibi", "softcap:30"]
    assert sorted(load(out)["mod"].unique().tolist()) == ["alibi", "none", "softcap:30"]


def test_a_bad_mod_from_the_cli_is_one_line_exit_2_nothing_written(tmp_path):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", "--mod", "none,softcap:-1", "--out", str(out), cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == ["attnbench: error: --mod: softcap needs a positive cap, as softcap:30, got 'softcap:-1'"]
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_an_old_run_loads_with_mod_none():
    df = load(DATA / "runs" / "cpu-small")
    assert len(df) and (df["mod"] == "none").all()
