"""The flex variant: flex_attention under torch.compile against float64, its setup and compile caches, the
score mods, what it refuses on CPU, and a real run's rows."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
import tensors
import torch
from conftest import ROOT, run_cli

from attnbench import variants
from attnbench.harness.measure import attention64, correctness
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.variants import Problem, UnsupportedError
from attnbench.variants import flex as flex_mod
from attnbench.variants.mods import apply_mod

FLEX = variants.get("flex")
needs_flex = pytest.mark.skipif(
    FLEX.availability("cpu") is not None, reason=f"flex cannot run here: {FLEX.availability('cpu')}"
)


def _qkv(h_kv=2, **shape):
    return tensors.qkv(h_kv=h_kv, **shape)


def _reference(q, k, v, *, causal=False, key_lengths=None, causal_align="top-left", window=0, mod="none"):
    """float64 attention with the mod of variants.mods (apply_mod on the scaled scores, before the masks);
    the masks from the gate's index rules; rows that see no key are 0."""
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    b, h, n_q, d_k = q64.shape
    n_k, group = k64.shape[2], h // k64.shape[1]
    k64, v64 = k64.repeat_interleave(group, dim=1), v64.repeat_interleave(group, dim=1)
    s = apply_mod(q64 @ k64.transpose(-2, -1) * d_k**-0.5, mod, causal=causal, causal_align=causal_align)
    lo, hi = attention64.key_interval(
        torch.arange(n_q), n_q, n_k, causal=causal, causal_align=causal_align, window=window
    )
    j = torch.arange(n_k)
    visible = ((j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None]))[None, None]  # (1, 1, N_q, N_k)
    if key_lengths is not None:
        visible = visible & (j[None, :] < key_lengths[:, None])[:, None, None, :]
    p = torch.softmax(s.masked_fill(~visible, -math.inf), dim=-1).nan_to_num(0.0)  # empty rows: 0
    return p @ v64


# name -> (qkv shape, options): each is one compilation (4 to 30 s on this 2-core machine), so each case
# exercises several features at once. Key lengths are multiples of 16: torch 2.13's CPU template gave wrong
# rows with a mask_mod at N_k = 24 and 40 (see variants/flex.py), which the harness's gate reports as
# `wrong`; these tests check flex's own masks and mods.
CASES = {
    # top-left causal with a window that runs past the keys (rows 38-47 see none), d_v != d_k, GQA, ALiBi
    "gqa-top-left-window-past-the-keys-dv-ne-dk-alibi": (
        dict(h=4, h_kv=2, n_q=48, n_k=32, d_v=24), dict(causal=True, window=6, mod="alibi"),
    ),
    # no mod, no padding: the plan compiled with symbolic sizes
    "more-queries-lower-right": (
        dict(h=4, h_kv=4, n_q=48, n_k=32), dict(causal=True, causal_align="lower-right"),
    ),
    "decode-1-lower-right-alibi": (
        dict(h=4, h_kv=2, n_q=1, n_k=256), dict(causal=True, causal_align="lower-right", mod="alibi"),
    ),
    # key padding inside the window (100) and a sequence with no key at all (0), softcap, bfloat16
    "decode-4-mqa-window-padding-softcap-bf16": (
        dict(b=3, h=4, h_kv=1, n_q=4, n_k=256, dtype="bfloat16"),
        dict(causal=True, causal_align="lower-right", window=16, key_lengths=torch.tensor([256, 100, 0]),
             mod="softcap:5"),
    ),
}  # fmt: skip


@needs_flex
@pytest.mark.slow  # compiles one kernel per case
@pytest.mark.parametrize("case", list(CASES))
def test_flex_matches_float64(case):
    shape, opts = CASES[case][0], dict(CASES[case][1])
    q, k, v = _qkv(**shape)
    with torch.no_grad():
        out = FLEX.fn(q, k, v, **opts)
    mod = opts.pop("mod", "none")
    ref = _reference(q, k, v, mod=mod, **opts)
    r = correctness.gate(out, q, k, v, ref=ref, **opts)
    assert r.passed, r.describe()
    empty = correctness.empty_rows(q.shape[2], opts.get("key_lengths"), n_k=k.shape[2], **_rules(opts))
    assert r.masked_rows == ("n/a" if empty is None else "zeros")  # rows that see no key: exactly zeros
    assert out.shape == (*q.shape[:3], v.shape[3]) and out.dtype == q.dtype


def _rules(opts):
    return {a: opts[a] for a in ("causal", "causal_align", "window") if a in opts}


def test_the_cases_cover_what_they_say():
    """Empty rows exist where the cases claim them, so the zeros assertion above is not vacuous."""
    for case in CASES:
        if case == "decode-1-lower-right-alibi":  # its one query sees every key
            continue
        shape, opts = CASES[case]
        rules = _rules(opts)
        assert (
            correctness.empty_rows(shape["n_q"], opts.get("key_lengths"), n_k=shape["n_k"], **rules)
            is not None
        )


def test_the_reference_mods_differ_from_none():
    """The mods change the answer (a flex that ignored them would fail the cases above)."""
    q, k, v = _qkv(n_q=8, n_k=8)
    plain = _reference(q, k, v, causal=True)
    for mod in ("alibi", "softcap:1"):
        assert (plain - _reference(q, k, v, causal=True, mod=mod)).abs().max() > 1e-3


# key padding with full blocks of 128 x 128 where nothing else masks (2 x 2 of them), GQA: the problem of
# the tests of a plan's reuse, of the recompile limit and of the folded block mask (which then reuses the
# kernel compiled here: the same shapes, and a block mask of the same structure)
PADDED = dict(h=2, h_kv=1, n_q=256, n_k=256)


@needs_flex
@pytest.mark.slow  # one compilation
def test_same_shape_reuses_plan_and_kernel_and_follows_key_lengths():
    """A second call of the same shape and options, with other values and other key lengths, compiles
    nothing and builds no block mask, and its answer follows the values it is given."""
    from torch._dynamo.utils import counters

    q, k, v = _qkv(**PADDED, seed=1)
    with torch.no_grad():
        t0 = time.perf_counter()
        FLEX.fn(q, k, v, key_lengths=torch.tensor([256, 100]))
        first = time.perf_counter() - t0
    graphs, plans = counters["stats"]["unique_graphs"], len(flex_mod._PLANS)
    q2, k2, v2 = _qkv(**PADDED, seed=2)
    kl2 = torch.tensor([5, 256])  # other lengths: the block mask must not have remembered the first ones
    with torch.no_grad():
        t0 = time.perf_counter()
        out = FLEX.fn(q2, k2, v2, key_lengths=kl2)
        second = time.perf_counter() - t0
    assert counters["stats"]["unique_graphs"] == graphs and len(flex_mod._PLANS) == plans
    r = correctness.gate(out, q2, k2, v2, key_lengths=kl2)
    assert r.passed, r.describe()
    assert second * 10 < first  # compiled once: the second call is the kernel alone


def test_recompile_limit_is_raised_and_reaching_it_fails_loudly():
    cfg = torch._dynamo.config
    flex_mod._compiled()
    assert cfg.recompile_limit >= flex_mod.RECOMPILE_LIMIT
    assert cfg.accumulated_recompile_limit >= flex_mod.RECOMPILE_LIMIT
    assert cfg.fail_on_recompile_limit_hit  # never the unfused eager path, silently


@needs_flex
@pytest.mark.slow  # at most one compilation (none when another test compiled flex in this process)
def test_past_the_recompile_limit_a_call_raises_instead_of_running_eager():
    q, k, v = _qkv(**PADDED)  # test_same_shape_reuses_plan_and_kernel_...'s problem: compiled
    opts = dict(key_lengths=torch.tensor([256, 100]))
    with torch.no_grad():
        FLEX.fn(q, k, v, **opts)  # at least one compiled version of flex_attention exists now
        # a new shape of the same kind of plan (static: padded keys), so that it is a recompile whatever
        # this process compiled before (a symbolic plan's first shape was not, when no test had made one)
        q, k, v = _qkv(h=2, h_kv=1, n_q=257, n_k=257)
        opts["key_lengths"] = torch.tensor([257, 100])
        with torch._dynamo.config.patch(recompile_limit=1), pytest.raises(Exception, match="recompile"):
            FLEX.fn(q, k, v, **opts)  # past the limit: an error (the cell's row), no compile, no eager


def test_only_cpu_plans_without_a_mod_or_padding_compile_with_symbolic_sizes():
    """dynamic=True served every length with one compile on CPU at no loss; on an H100 the symbolic Triton
    kernel was 8% slower forward and 17% forward+backward (benchmarks/flex_options.py), so CUDA plans are
    static, whatever their mask."""

    def plan(device, score_mod=None, padding=False):
        key = (device, torch.float32, (1, 2, 64, 16), (1, 2, 64, 16), (1, 2, 64, 16), False, "top-left", 0,
               padding, "none")  # fmt: skip
        return flex_mod._Plan(key, None, None, padding, score_mod, False)

    assert plan("cpu").dynamic
    assert not plan("cpu", padding=True).dynamic and not plan("cpu", score_mod=lambda s, *i: s).dynamic
    assert not plan("cuda:0").dynamic and not plan("cuda:1").dynamic
    packed = flex_mod._Plan(plan("cpu").key, None, None, False, None, False, packed=True)
    assert not packed.dynamic  # torch 2.13's CPU template does not compile a packed causal mask symbolically


def test_cpu_backward_is_unsupported_with_torchs_reason():
    reason = FLEX.check(Problem(device="cpu", d_k=16, d_v=16, pass_="fwdbwd"))
    assert reason and "does not support backward on CPU" in reason and reason.startswith("torch refused")
    q, k, v = (t.requires_grad_(True) for t in _qkv(n_q=8, n_k=8))
    with pytest.raises(UnsupportedError, match="does not support backward on CPU"):
        FLEX.fn(q, k, v)
    cell = CellSpec("flex", "cpu", "float32", 1, 2, 16, 16, 16, True, 0.0, "fwdbwd")
    row = measure_cell(cell, Settings(warmup_ms=1, budget_ms=5, min_ms=0.1))
    assert row["status"] == "unsupported" and "does not support backward on CPU" in row["message"]


def test_capability_declares_what_flex_takes():
    cap = FLEX.cap
    assert (
        cap.memory == "linear" and cap.gqa and cap.lower_right and cap.window and cap.causal and cap.padding
    )
    assert not cap.dropout and cap.setup is not None
    assert "float64" not in cap.dtypes and {"float32", "float16", "bfloat16"} <= set(cap.dtypes)
    assert "float64" in FLEX.check(Problem(dtype="float64", d_k=16, d_v=16))
    assert "does not support dropout" in FLEX.check(Problem(dropout=0.1))
    assert FLEX.check(Problem(device="cpu", heads=4, kv_heads=1, seq_len=1, seq_k=256, d_k=8, d_v=24)) is None
    assert set(flex_mod.MODS) <= {"alibi", "softcap"}
    with pytest.raises(UnsupportedError, match="no dropout"):
        FLEX.fn(*_qkv(n_q=4, n_k=4), dropout_p=0.1)
    assert FLEX.source == "builtin"


def test_cuda_head_dims_below_16_are_refused_with_the_reason():
    if FLEX.availability("cuda") is not None:  # the capability check stops at "no CUDA device" first
        assert flex_mod._supports(Problem(device="cuda", d_k=8, d_v=64)) is not None
        return
    assert "head dims >= 16" in FLEX.check(Problem(device="cuda", d_k=8, d_v=64))


@needs_flex
@pytest.mark.slow  # one compilation
def test_measure_cell_records_setup_and_first_call_apart_from_the_steady_state():
    cell = CellSpec("flex", "cpu", "float32", 1, 4, 48, 16, 16, False, 0.25, "fwd", kv_heads=2)
    row = measure_cell(cell, Settings(warmup_ms=1, budget_ms=20, min_ms=0.1))
    assert row["status"] == "ok", row["message"]
    assert row["setup_ms"] > 0 and row["first_call_ms"] > 0
    # compilation is in the first call only: it holds Dynamo's trace and the kernel's load even where
    # Inductor's on-disk cache is warm (137 ms against a 7.9 ms median on a loaded 2-core CI worker)
    assert row["time_ms_median"] * 3 < row["first_call_ms"]
    assert row["fresh_rel_err"] <= 1e-4  # the answer follows fresh inputs


@needs_flex
@pytest.mark.slow  # a real run: worker, calibration, the numerics probe and one compilation
def test_cli_run_writes_ok_rows_with_setup_and_first_call(tmp_path):
    out = tmp_path / "r"
    # the cell of test_measure_cell_records_setup_... above, padded: a kernel of its own shape, which the
    # worker compiles (or loads from Inductor's cache) in the cell's first call. Without a causal mask the
    # numerics probe's gate at N = 300 runs the kernel its probe compiled (symbolic sizes, the probe's shape
    # but N), not one of its own: one compilation less on a machine whose cache starts cold, as CI's
    run_cli(
        "run", "--variants", "flex,sdpa", "--batch", "1", "--heads", "4", "--kv-heads", "2",
        "--seq-len", "48", "--d-k", "16", "--causal", "no", "--padding", "0.25", "--pass", "fwd",
        "--budget-ms", "5", "--warmup-ms", "1", "--out", str(out), check=True,
    )  # fmt: skip
    rows = {
        r["variant"]: r
        for r in json.loads(run_cli("export", str(out), "--format", "json", check=True).stdout)
    }
    for name in ("flex", "sdpa"):
        assert rows[name]["status"] == "ok", rows[name]["message"]
    r = rows["flex"]
    assert r["setup_ms"] > 0 and r["first_call_ms"] > r["time_ms_median"]
    assert json.loads((out / "meta.json").read_text())["variant_capabilities"]["flex"]["memory"] == "linear"


@pytest.mark.slow
def test_the_harness_hands_flex_its_mod_and_the_float64_gate_checks_it():
    """flex declares alibi and softcap: a cell with a mod reaches its setup and call as mod=, and the gate
    holds the answer to the modded float64 reference (a GQA, lower-right cell; N_k a multiple of 16). The
    problem of test_flex_matches_float64[decode-1-lower-right-alibi]: its kernel, where that test compiled
    it in this process (what is checked here is the harness's path, not a compile)."""
    from attnbench.harness.measure import cell
    from attnbench.harness.sweep.settings import Settings
    from attnbench.harness.sweep.spec import CellSpec

    quick = Settings(warmup_ms=1, budget_ms=2, min_samples=5, min_ms=0.5)
    c = CellSpec("flex", "cpu", "float32", 2, 4, 1, 16, 16, True, 0.0, "fwd", kv_heads=2, seq_k=256,
                 causal_align="lower-right", mod="alibi")  # fmt: skip
    assert variants.get("flex").check(c.problem()) is None
    ready = cell.prepare(c, quick)
    assert ready.verdict() == ("ok", ""), ready.verdict()


@needs_flex
@pytest.mark.parametrize(
    "n_q, n_k, causal, window", [(300, 300, True, 0), (200, 520, False, 0), (384, 384, True, 130)]
)
def test_without_separate_full_blocks_the_block_mask_is_the_same(monkeypatch, n_q, n_k, causal, window):
    """On a torch whose create_block_mask has no separate_full_blocks= (the GPU image's 2.11), key padding's
    block mask folds the full blocks into the partial ones: the very mask torch 2.13 makes with
    separate_full_blocks=False (same blocks, same order, none full)."""
    fa = flex_mod._flex_module()
    structure = flex_mod._structure_mask(n_q, n_k, causal, "top-left", window) or fa.noop_mask
    wanted = flex_mod._block_mask(structure, n_q, n_k, "cpu", every_block_partial=True)
    monkeypatch.setattr(flex_mod, "_has_separate_full_blocks", lambda: False)
    folded = flex_mod._block_mask(structure, n_q, n_k, "cpu", every_block_partial=True)
    assert folded.full_kv_num_blocks is None and wanted.full_kv_num_blocks is None
    assert torch.equal(folded.kv_num_blocks, wanted.kv_num_blocks)
    assert torch.equal(folded.to_dense(), wanted.to_dense())
    for row in range(wanted.kv_num_blocks.shape[-1]):  # each row's visited blocks, in the same order
        n = int(wanted.kv_num_blocks[0, 0, row])
        assert torch.equal(folded.kv_indices[0, 0, row, :n], wanted.kv_indices[0, 0, row, :n])
    assert folded.seq_lengths == wanted.seq_lengths and folded.BLOCK_SIZE == wanted.BLOCK_SIZE


@needs_flex
@pytest.mark.slow  # at most one compilation (none after test_same_shape_... in this process)
def test_key_padding_through_the_folded_block_mask_passes_the_gate(monkeypatch):
    """Key padding through a block mask whose full blocks are folded into its partial ones (2 x 2 blocks, all
    full without the padding): PADDED's problem, so the kernel test_same_shape_... compiled in this process
    runs it (a fresh plan, and so a fresh block mask)."""
    monkeypatch.setattr(flex_mod, "_has_separate_full_blocks", lambda: False)
    monkeypatch.setattr(flex_mod, "_PLANS", {})
    q, k, v = _qkv(**PADDED, seed=3)
    kl = torch.tensor([256, 100])
    with torch.no_grad():
        out = FLEX.fn(q, k, v, key_lengths=kl)
    r = correctness.gate(out, q, k, v, key_lengths=kl)
    assert r.passed, r.describe()


def test_availability_is_decided_without_importing_dynamo():
    """`attnbench list` asks every variant's availability; importing flex_attention pulls in torch._dynamo,
    3 s of the 8 s `list` took (issue 26). The check reads where the module is and dynamo's Python rule from
    its source, in a fresh interpreter that never imports dynamo; the worker asks torch itself, and here
    the two agree."""
    code = (
        "import sys; from attnbench.variants import flex; "
        "print(flex._available('cpu'), 'torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{flex_mod._available('cpu')} False", out.stdout + out.stderr
    assert (flex_mod._import_reason() is None) == (flex_mod._compile_reason() is None)
    assert (3, 11) < flex_mod._dynamo_python_limit()


@pytest.mark.parametrize("causal", [False, True])
def test_a_packed_batch_is_exact_under_its_document_block_mask(causal):
    """Sequences 5, 1, 124 and 70 long in one pack: blocks of other sequences skipped, straddling ones
    masked; causal is the case torch 2.13's CPU template fails to compile with symbolic sizes."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 200, 16, generator=g) for _ in range(3))
    cu = torch.tensor([0, 5, 6, 130, 200], dtype=torch.int32)
    r = correctness.check(variants.get("flex"), q, k, v, causal=causal, cu_seqlens=cu)
    assert r.ok, r.describe()
    rules = dict(causal=causal, padding=False, causal_align="top-left", window=0, mod="none")
    plan = flex_mod._plan(q, k, v, cu_seqlens=cu, **rules)
    assert plan.packed and not plan.dynamic
