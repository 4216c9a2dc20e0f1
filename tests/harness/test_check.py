"""harness.tools.check, the gate behind `attnbench check`: plain records and an exit status, no printing."""

from __future__ import annotations

import dataclasses
import json
import re
import sys

import pytest
from conftest import DATA, FAULTS, run_cli

from attnbench import variants
from attnbench.harness.tools import check
from attnbench.reports import terminal
from attnbench.variants import registry


@pytest.fixture
def isolated_registry(monkeypatch):
    """Variants loaded by the test are gone afterwards (the registry and the loaded files are global)."""
    variants.all_variants()  # the builtins, before the copy
    registry._load_builtins()  # a copy made before they load would be empty later
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
    every = list(check.gate_all(plan))
    rows = [r for r in every if not r.workload]  # the workloads naive declares come last, after both dtypes
    assert every[: len(rows)] == rows and {r.dtype for r in every[len(rows) :]} == {"float32", "bfloat16"}
    assert len(rows) == 3 * 2 * (2 * 2 + 1)  # variants x dtypes x (causal x padding, and the no-key problem)
    by = {(r.variant, r.dtype, r.causal, r.padding): r for r in rows if not r.no_key}
    no_key = {(r.variant, r.dtype): r for r in rows if r.no_key}

    assert {r.status for r in rows if r.variant == "naive"} == {"pass"}
    assert all(r.rel_err < 1e-2 and r.grad_rel_err is not None for r in by.values() if r.variant == "naive")
    assert by[("naive", "float32", False, True)].masked_rows == "n/a"  # a run's padding: every row sees a key
    assert no_key[("naive", "float32")].masked_rows == "zeros"  # batch 1 sees no key
    assert not any(r.gating for r in no_key.values())

    wrong = [r for r in by.values() if r.variant == "fault_wrong"]
    assert {r.status for r in wrong} == {"FAIL"} and all(r.gating and r.rel_err > 0.1 for r in wrong)
    assert all(r.reason.startswith("output rel_err ") and "> tolerance" in r.reason for r in wrong)
    assert check.exit_status(rows) == 1
    assert check.exit_status([r for r in rows if r.variant != "fault_wrong"]) == 0

    refused = by[("fault_unsupported", "float32", True, False)]  # refused at call time
    assert refused.status == "unsupported" and refused.reason == "this backend refuses odd sequence lengths"
    assert refused.rel_err is None and refused.grad_rel_err is None
    by_dtype = by[("fault_unsupported", "bfloat16", False, False)]  # refused by its capability record
    assert by_dtype.status == "unsupported" and "does not support bfloat16" in by_dtype.reason


def test_a_failure_says_its_likely_cause_first_and_where_a_nan_is():
    """As a run's row says it: a NaN or inf answer is non-finite (rel_err inf passes no tolerance), with its
    rows; inputs written in place come first."""
    from attnbench.harness.measure.correctness import GateResult
    from attnbench.harness.measure.gate_rows import fail_reason

    said = "it ignored causal=True: its answer is attention over every key"
    result = GateResult(0.9, 0.5, 1e-4, False, "n/a", 16, hint=said)
    assert fail_reason(result) == f"{said}; output rel_err 5.0e-01 > tolerance 1e-04"
    nan = GateResult(float("inf"), float("inf"), 1e-4, False, "n/a", 16, where="at query row 0 only")
    assert fail_reason(nan) == "non-finite output (NaN or inf); at query row 0 only"
    bf16 = GateResult(0.9, 0.5, 2.5e-2, False, "n/a", 16)  # bfloat16's tolerance, exactly
    assert fail_reason(bf16) == "output rel_err 5.0e-01 > tolerance 2.5e-02"
    assert bf16.describe().startswith("rel_err 5.00e-01 (tol 2.5e-02)"), bf16.describe()
    wrote = GateResult(0.0, 0.0, 1e-4, True, "n/a", 16, changed=("q",))
    assert not wrote.ok and fail_reason(wrote) == "modifies its inputs in place (q changed)"


def test_a_variant_file_without_variants_checks_that_files_variants_alone(isolated_registry):
    """`attnbench check --variant-file mine.py` is about mine.py's kernels: the built-in ones are checked
    only when named (or when no file is given)."""
    plan = check.prepare(None, ["cpu"], ["float32"], 16, variant_files=[str(FAULTS)])
    assert set(plan.names) == set(registry.load_variant_file(FAULTS)) and "naive" not in plan.names
    assert "naive" in check.prepare(None, ["cpu"], ["float32"], 16).names


FORWARD_ONLY = """
import torch
from attnbench.variants import register

@register("forward_only", backward=False)
def forward_only(q, k, v, *, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""


def test_a_variant_without_a_backward_is_gated_forward_only(isolated_registry, tmp_path):
    """Its capability refuses the backward pass: the check gates its forward (flex, the paged variants and
    the FP8 recipes on CPU among the built-ins), never an error of check's own."""
    (tmp_path / "fwd.py").write_text(FORWARD_ONLY)
    rows = list(
        check.gate_all(
            check.prepare(None, ["cpu"], ["float32"], 16, variant_files=[str(tmp_path / "fwd.py")])
        )
    )
    plain = [r for r in rows if not r.padding and not r.no_key]
    assert [r.status for r in plain] == ["pass", "pass"] and all(r.grad_rel_err is None for r in plain)
    assert check.exit_status(rows) == 0


WORKLOADS = """
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa
from attnbench.variants import register

@register("window_one_wider", window=True)
def window_one_wider(q, k, v, *, causal=False, window=0):
    i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
    hidden = (j > i) | (j < i - window)  # flash-attn's window_size=(W, 0): W keys before, and its own
    return sdpa(q, k, v, attn_mask=~hidden) if window else sdpa(q, k, v, is_causal=causal)

@register("across_sequences", varlen="masked")
def across_sequences(q, k, v, *, causal=False, cu_seqlens=None):
    return sdpa(q, k, v, is_causal=causal)  # one causal attention over the whole pack

def flash_causal(q, k, v, *, causal=False):  # FlashAttention's causal: the last query sees the last key
    n_q, n_k = q.shape[2], k.shape[2]
    seen = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + (n_k - n_q)
    return sdpa(q, k, v, attn_mask=seen if causal else None)

register("lower_right_causal")(flash_causal)
register("lower_right_declared", causal="lower-right")(flash_causal)
"""


def test_each_declared_workload_is_one_cell_as_a_run_makes_it(isolated_registry, tmp_path):
    """A variant is checked on each workload it declares; one that runs packed batches or paged caches
    only has them checked there; a kernel wrong on its workload FAILs with the likely cause."""
    (tmp_path / "w.py").write_text(WORKLOADS)
    names = ["naive", "sdpa_loop", "paged_gather", "window_one_wider", "across_sequences", "sdpa_efficient"]
    plan = check.prepare(names, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "w.py")])
    rows = list(check.gate_all(plan))
    by = {(r.variant, r.workload): r for r in rows if r.workload}
    assert not [w for v, w in by if v == "sdpa_efficient"]  # CUDA only: its gate rows say so, once each
    naive = {"2 k/v heads for 4", "lower-right, N_q 6 of N_k 24", "causal top-left, N_q 6 of N_k 24",
             "window 4", "alibi", "softcap:5", "packed, uniform lengths"}  # fmt: skip
    assert {w for v, w in by if v == "naive"} == naive
    assert {w for v, w in by if v == "sdpa_loop"} == {"packed, 2 k/v heads for 4", "packed, window 4",
                                                      "packed, uniform lengths"}  # fmt: skip
    assert {w for v, w in by if v == "paged_gather"} == {
        "paged, causal lower-right, 2 k/v heads for 4",
        "paged, causal lower-right, pages of 4",
        "paged decode step, N_q 1 of N_k 24, causal lower-right, pages of 4",  # what a paged run measures
        "paged decode step, N_q 1 of N_k 24, pages of 4",  # and bench's non-causal cells
    }
    # each row's kind is its cell's (workload_kind), as a crashed or hung problem's row says it too
    words = {"paged": "paged", "packed": "packed", "window": "window"}
    for (v, w), r in by.items():
        assert r.kind == words.get(w.split(",")[0].split()[0], "dense"), (v, w, r.kind)
    assert {(p.variant, p.workload): p.row("crashed", "").kind for p in plan.problems() if p.workload} == {
        key: r.kind for key, r in by.items()
    }
    honest = [r for r in by.values() if r.variant in names[:3]]
    assert {r.status for r in honest} == {"pass"}, [r for r in honest if r.status != "pass"]
    assert all(r.grad_rel_err is None for r in honest if r.variant == "paged_gather")  # a decode step
    wider, across = by[("window_one_wider", "window 4")], by[("across_sequences", "packed, uniform lengths")]
    assert wider.status == "FAIL" and wider.reason.startswith("its window holds 5 keys, its own and 4 before")
    assert across.status == "FAIL" and across.reason.startswith("it ignored the packed batch's boundaries")
    assert check.exit_status(rows) == 1


def test_a_causal_aligned_lower_right_fails_top_left_with_fewer_queries_than_keys(
    isolated_registry, tmp_path
):
    """causal=True is top-left: a kernel whose causal is FlashAttention's lower-right one passes every square
    cell and FAILs the cell with N_q < N_k, saying how to declare it; so declared, it has no such cell."""
    (tmp_path / "w.py").write_text(WORKLOADS)
    names = ["lower_right_causal", "lower_right_declared"]
    rows = list(
        check.gate_all(check.prepare(names, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "w.py")]))
    )
    square = {(r.causal, r.status) for r in rows if not r.workload and not r.no_key}  # no padding taken
    assert square == {(False, "pass"), (True, "pass"), (False, "unsupported"), (True, "unsupported")}
    by = {(r.variant, r.workload): r for r in rows if r.workload}
    assert set(by) == {("lower_right_causal", "causal top-left, N_q 6 of N_k 24"),
                       ("lower_right_declared", "lower-right, N_q 6 of N_k 24")}  # fmt: skip
    top = by[("lower_right_causal", "causal top-left, N_q 6 of N_k 24")]
    assert top.status == "FAIL" and top.reason.startswith(
        "its causal mask is aligned lower-right where the cell asks top-left (if its causal=True is always "
        'lower-right, declare causal="lower-right")'
    ), top.reason
    assert by[("lower_right_declared", "lower-right, N_q 6 of N_k 24")].status == "pass"
    assert check.exit_status(rows) == 1


@pytest.mark.parametrize("n", [1, 3])
def test_the_workloads_fit_the_shortest_sequences(n):
    """At --seq-len 1 or 3 every workload cell is one a run could make: at least one query for lower-right
    causal, no more queries than a paged context holds."""
    rows = list(check.gate_all(check.prepare(["naive", "paged_gather"], ["cpu"], ["float32"], n)))
    assert {r.status for r in rows if r.workload} == {"pass"}, [r for r in rows if r.status != "pass"]


def test_the_docs_varlen_example_passes_its_pack(isolated_registry, tmp_path):
    """docs/presets-and-workloads.md's kernel in flash-attn's layout passes the packed workload, forward and
    backward; the same kernel over the whole pack at once would not (test_each_declared_workload_...)."""
    from tests.frontends.test_readme import example

    (tmp_path / "my_varlen.py").write_text(example("<!-- varlen-example"))
    plan = check.prepare(None, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "my_varlen.py")])
    rows = list(check.gate_all(plan))
    packed = [r for r in rows if r.workload]
    assert [(r.workload, r.status) for r in packed] == [("packed, uniform lengths", "pass")], packed
    assert packed[0].grad_rel_err is not None and check.exit_status(rows) == 0
    assert {r.status for r in rows if not r.workload} == {"unsupported"}  # packed only; no padding


MIDDLE = """
import torch, torch.nn.functional as F
from attnbench import register

@register("middle", varlen="exact")
def middle(q, k, v, *, causal=False, cu_seqlens):  # only the first and the last sequence: zeros between
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
    b = cu_seqlens.tolist()
    for i, (a, e) in enumerate(zip(b[:-1], b[1:])):
        if 0 < i < len(b) - 2:
            continue
        one = (t[:, :, a:e] for t in (q, k, v))
        out[:, :, a:e] = F.scaled_dot_product_attention(*one, is_causal=causal)
    return out
"""


def test_a_pack_holds_middle_sequences_and_a_kernel_that_skips_them_fails(isolated_registry, tmp_path):
    """check's pack (and paged cache) holds more than a first and a last sequence: a kernel that writes
    only those two FAILs, naming a middle sequence."""
    from attnbench.harness.measure.gate_rows import workload_cells

    cells = dict(workload_cells(variants.get("sdpa_loop"), "cpu", "float32", 24))
    cells.update(workload_cells(variants.get("paged_gather"), "cpu", "float32", 24))
    assert all(
        cells[w].batch >= 4 for w in ("packed, uniform lengths", "paged, causal lower-right, pages of 4")
    )
    (tmp_path / "middle.py").write_text(MIDDLE)
    plan = check.prepare(None, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "middle.py")])
    rows = list(check.gate_all(plan))
    (packed,) = [r for r in rows if r.workload]
    assert packed.status == "FAIL" and "worst: sequence " in packed.reason, packed
    worst = int(packed.reason.split("worst: sequence ")[1].split(" of ")[0])
    assert 1 < worst < cells["packed, uniform lengths"].batch  # numbered from 1: a middle one
    assert check.exit_status(rows) == 1


NO_GQA = """
import torch
from attnbench import register

@register("no_gqa", gqa=True, padding=False, dropout=False)
def no_gqa(q, k, v, *, causal=False, scale=None):  # declares gqa, repeats no k/v head
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, -1) @ v
"""


def test_a_declared_workload_that_raises_names_its_declaration(isolated_registry, tmp_path):
    """Trial L: check's row of a kernel declared gqa=True that repeats no k/v head said only "RuntimeError:
    The size of tensor a (4) must match ...": it says which declaration the problem exercised too."""
    (tmp_path / "no_gqa.py").write_text(NO_GQA)
    plan = check.prepare(None, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "no_gqa.py")])
    rows = [r for r in check.gate_all(plan) if r.workload]
    (grouped,) = [r for r in rows if "k/v heads" in r.workload]
    assert grouped.status == "error", grouped
    assert grouped.reason.startswith("RuntimeError: The size of tensor"), grouped
    assert grouped.reason.endswith("; in a cell of its declared gqa=True (2 k/v heads for 4)"), grouped.reason
    assert all("declared" not in r.reason for r in rows if r is not grouped)


UNMASKED_PAGED = """
import torch
from attnbench.variants import register
from attnbench.variants.paged import gather_pages

@register("unmasked_paged", paged=True, causal=False)
def unmasked_paged(q, k, v, *, key_lengths, block_table):  # no causal masking at all
    out = q.new_empty(*q.shape[:3], v.shape[-1])
    for b, n in enumerate(key_lengths.tolist()):
        kb, vb = (gather_pages(t, block_table[b : b + 1], n)[0] for t in (k, v))  # (H_kv, n, d)
        out[b] = torch.nn.functional.scaled_dot_product_attention(q[b], kb, vb)
    return out
"""


def test_a_paged_kernel_without_causal_masking_is_gated_on_its_pages_unmasked(isolated_registry, tmp_path):
    """The paged workload's cell is a causal decode step (lower-right): a kernel that declares paged=True
    and no causal masking was 'declared paged, but refused it' for a mask it never claimed."""
    (tmp_path / "p.py").write_text(UNMASKED_PAGED)
    plan = check.prepare(["unmasked_paged"], ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "p.py")])
    rows = [(r.workload, r.causal, r.status) for r in check.gate_all(plan) if r.workload]
    step = "paged decode step, N_q 1 of N_k 24, pages of 4"  # its decode step unmasked alone
    assert rows == [("paged, pages of 4", False, "pass"), (step, False, "pass")], rows


FAST_PATH_PAGED = """
import torch
from attnbench.variants import register
from attnbench.variants.paged import gather_pages, visible_keys

@register("fast_path_paged", paged=True, lower_right=True, backward=False)
def fast_path_paged(q, k, v, *, causal=False, causal_align="top-left", key_lengths, block_table):
    n_q, page = q.shape[2], k.shape[1]
    if n_q == 1:  # a decode step's fast path: no mask, so every slot of each last page is read
        out = q.new_empty(*q.shape[:3], v.shape[-1])
        for b, n in enumerate(key_lengths.tolist()):
            whole = -(-n // page) * page
            kb, vb = (gather_pages(t, block_table[b : b + 1], whole)[0] for t in (k, v))
            out[b] = torch.nn.functional.scaled_dot_product_attention(q[b], kb, vb)
        return out
    n = int(key_lengths.max())
    kb, vb = (gather_pages(t, block_table, n) for t in (k, v))
    mask = visible_keys(key_lengths, n_q, n, causal)
    return torch.nn.functional.scaled_dot_product_attention(q, kb, vb, attn_mask=mask)
"""


def test_a_paged_kernel_wrong_on_its_decode_step_alone_fails_check(isolated_registry, tmp_path):
    """check's one paged cell had N_q 4 under lower-right causal, whose mask hides the slots past each
    context: a kernel whose one-query fast path reads them passed check and was wrong in every cell of a
    paged run (N_q 1). The decode step is gated now, causal lower-right and unmasked, as runs measure it."""
    (tmp_path / "f.py").write_text(FAST_PATH_PAGED)
    plan = check.prepare(None, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "f.py")])
    rows = {r.workload: r for r in check.gate_all(plan) if r.workload}
    assert rows["paged, causal lower-right, pages of 4"].status == "pass", rows
    steps = [r for w, r in rows.items() if w.startswith("paged decode step, N_q 1 of N_k 24")]
    assert {r.causal for r in steps} == {True, False}, rows
    said = "it read every slot of each sequence's last page"
    assert all(r.status == "FAIL" and r.reason.startswith(said) for r in steps), steps
    assert check.exit_status(rows.values(), plan.named) == 1


UNDECLARED = """
import torch
from attnbench.variants import register

@register("takes_a_window")
def takes_a_window(q, k, v, *, causal=False, window=0):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""


def test_a_workload_keyword_taken_undeclared_is_named_with_its_declaration(tmp_path):
    """A kernel that takes window= but registers no window=True is never handed one: check says so, and
    how to declare it, below its table."""
    plugin = tmp_path / "undeclared.py"
    plugin.write_text(UNDECLARED)
    proc = run_cli("check", "--variant-file", str(plugin), "--seq-len", "16", "--dtype", "float32")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "note: takes_a_window takes window= but declares no such workload, so no check hands it one: "
        "register it with window=True to gate it"
    ) in " ".join(proc.stdout.split())


TILED_HELPER = """
import torch
from attnbench.variants import register

def tiled_core(q, k, v, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

@register("l1_tiled")
def l1_tiled(q, k, v, *, causal=False):
    return tiled_core(q, k, v, causal)
"""

BUG_FILE = """
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from attnbench.variants import register
from l1_tiled_helper import tiled_core

@register("l1_bug")
def l1_bug(q, k, v, *, causal=False):
    return tiled_core(q, k, v, causal)

register("l1_library")(torch.nn.functional.scaled_dot_product_attention)  # defined elsewhere, registered here
"""


def test_a_variant_file_gates_its_own_variants_not_those_its_imports_register(tmp_path):
    """Trial T (L1): a bug file that imports its kernel from tiled.py re-registers tiled there, and check
    gated both, doubling the time. It gates the variants the named file registers (a library's function
    registered in it among them), and says in one line which its imports registered and how to gate them
    too; named with --variants, they are gated."""
    (tmp_path / "l1_tiled_helper.py").write_text(TILED_HELPER)
    (tmp_path / "l1_bug.py").write_text(BUG_FILE)
    try:
        proc = run_cli("check", "--variant-file", str(tmp_path / "l1_bug.py"), "--seq-len", "16",
                       "--dtype", "float32")  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        said = " ".join((proc.stdout + proc.stderr).split())
        assert (
            "left out: l1_tiled (registered by l1_tiled_helper.py, which l1_bug.py imports): name it with "
            "--variants l1_bug,l1_library,l1_tiled to gate it too"
        ) in said, said
        assert "check: passed (2 variants," in said and "l1_tiled f32" not in said and "l1_bug f32" in said
        sys.modules.pop("l1_tiled_helper", None)  # in this process, its import registers it again
        named = run_cli("check", "--variant-file", str(tmp_path / "l1_bug.py"), "--seq-len", "16",
                        "--dtype", "float32", "--variants", "l1_bug,l1_tiled")  # fmt: skip
        assert named.returncode == 0 and "left out" not in named.stdout + named.stderr
        assert "check: passed (2 variants," in " ".join(named.stdout.split() + named.stderr.split())
    finally:
        sys.modules.pop("l1_tiled_helper", None)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


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
    assert set(plan.names) == set(variants.all_variants()) and plan.seq_lens == check.SEQ_LENS


CHECK_VARIANTS = DATA / "check_variants.py"


def test_a_partial_last_tile_of_128_fails_the_default_check(isolated_registry):
    """A kernel whose 128-wide key tiles are counted as N // 128 reads every key at N = 100 (one tile holds
    them all) and at every power of two, and drops keys at N = 300: check's default N gates the masks there
    too (a partial last block after full ones of 64, 128 and 256), the no-key problem at the first N alone."""
    assert all(300 % tile and 300 > tile for tile in (64, 128, 256)) and 300 in check.SEQ_LENS
    plan = check.prepare(["tail_128"], ["cpu"], ["float32"], variant_files=[str(CHECK_VARIANTS)])
    rows = [r for r in check.gate_all(plan) if not r.workload]
    # the padded rows at 300 pass: their keys past 256 are padding (key_lengths [150, 1])
    by_n = {
        n: {r.status for r in rows if r.n == n and not r.no_key and not r.padding} for n in check.SEQ_LENS
    }
    assert by_n == {100: {"pass"}, 300: {"FAIL"}} and check.exit_status(rows) == 1
    # the verdict names the likely cause: right at N 100, wrong at 300 alone
    assert check.verdict(rows) == (
        "check: tail_128 FAILED (2 FAIL; at N 300 only, where its last tile of 64, 128 or 256 keys is "
        "partial); exit status 1"
    )
    # and bench's WRONG line, from the same rows and the same rule (attnbench.api._declared builds it so)
    from attnbench.reports.answer import Declared, at_n

    masks = tuple(r for r in rows if not r.no_key)
    said = at_n(Declared(masks=masks, n=check.SEQ_LEN, mask_ns=check.SEQ_LENS, tile_only=check.TILE_ONLY))
    assert said[0].startswith("WRONG at N 300 only, where its last tile of 64, 128 or 256 keys is partial (")
    assert check.tile_only(rows, "tail_128") and not check.tile_only(
        [r for r in rows if r.n == 300], "tail_128"
    )
    assert len([r for r in rows if not r.no_key]) == 2 * 2 * len(check.SEQ_LENS)  # causal x padding at each N
    assert [r.n for r in rows if r.no_key] == [check.SEQ_LEN]


def test_a_run_gates_its_variants_where_their_last_tile_is_partial_and_says_who_fails(
    isolated_registry, tmp_path
):
    """A run whose N are all multiples of 128 measures tail_128 ok in every cell; the run's gate at N = TILE_N
    (with the numerics probe, under the sweep's masks) finds it wrong: numerics.json's tiles, the run's
    closing note, and the report's first finding and its table of what is not ok say it; naive passes."""
    import attnbench
    from attnbench.harness.measure.gate_rows import TILE_N
    from attnbench.results import read_rows

    out = tmp_path / "run"
    proc = run_cli("run", "--variants", "tail_128,naive", "--variant-file", str(CHECK_VARIANTS), "--seq-len",
                   "128,256", "--heads", "1", "--causal", "both", "--warmup-ms", "1", "--budget-ms", "2",
                   "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {r["status"] for r in read_rows(out)} == {"ok"}
    tiles = json.loads((out / "numerics.json").read_text())["tiles"]
    assert {(r["variant"], r["causal"], r["status"], r["seq_len"]) for r in tiles} == {
        ("tail_128", False, "wrong", TILE_N), ("tail_128", True, "wrong", TILE_N),
        ("naive", False, "ok", TILE_N), ("naive", True, "ok", TILE_N),
    }  # fmt: skip
    said = f"tail_128 answers wrong at N {TILE_N} (no mask and causal; float32): output rel_err "
    assert said in proc.stderr and "naive answers" not in proc.stderr
    rep = attnbench.report(out, out=tmp_path / "rep")
    assert rep.findings.wrong == (rep.findings.wrong[0],) and rep.findings.wrong[0].startswith(said)
    readme = rep.readme.read_text().replace("\\_", "_")
    assert readme.index("tail_128 answers wrong at N") < readme.index("Trust:")
    assert f"| N {TILE_N}, causal | wrong |" in readme
    assert repr(rep).count("(wrong at another N)") == 1
    # wherever the findings rank or fit it, tail_128 is named wrong at TILE_N; naive never is
    said = [s for p in rep.findings.panels for s in p.sentences]
    for sentence in said:
        assert sentence.count("tail_128") == sentence.count(f"tail_128 (wrong at N {TILE_N})"), sentence
        assert "naive (wrong" not in sentence
    ranked = [p.sentences[0] for p in rep.findings.panels]  # with two variants it names both
    fitted = [s for s in said if "grows as" in s or "Memory wall" in s or "growth not measured" in s]
    assert all("tail_128 (wrong at N" in s for s in ranked) and any("tail_128 (wrong" in s for s in fitted)


def test_a_variant_that_raises_at_the_tile_n_is_told_how_to_say_its_limit_not_that_it_drops_a_tile():
    """A kernel that raises for an N its tile does not divide is limited, not wrong: the run's sentence says
    how to declare that (attnbench.UnsupportedError), and only a wrong answer is told of a dropped tile (a
    trial's limited kernel read as broken as its wrong twin)."""
    from attnbench.results import tile_failed, tile_sentences, tile_wrong

    right = {"dtype": "float32", "q_scale": 1.0, "status": "ok"}
    at = {"dtype": "float32", "seq_len": 300, "causal": False}
    tiles = [
        {"variant": "strict", **at, "status": "error", "message": "ValueError: needs N divisible by 128"},
        {"variant": "drop", **at, "status": "wrong", "message": "output rel_err 4.0e-01 > tolerance 1e-04"},
    ]
    failed = tile_failed(tiles, [{"variant": v, **right} for v in ("strict", "drop")])
    strict, drop = tile_sentences(failed)
    assert strict.startswith(
        "strict raises at N 300 (no mask; float32): ValueError: needs N divisible by 128."
    )
    assert "attnbench.UnsupportedError" in strict and "drops or misreads" not in strict
    assert drop.startswith("drop answers wrong at N 300") and "drops or misreads" in drop
    assert "UnsupportedError" not in drop
    # only the wrong one is marked where the findings rank and fit it: the limited one is not wrong
    assert tile_wrong(failed) == {"drop": 300}


def test_a_named_variant_that_no_problem_gated_is_never_passed():
    """A kernel limited to N its tile divides, declared the documented way (UnsupportedError), is unsupported
    in every problem at check's N of 100 and 300: check said 'passed (0 variants, 0 problems)', exit 0, of a
    kernel it never gated (trial). Named, it is 'nothing gated', exit 1; a variant not named (a default
    sweep's, unsupported on this device) is not counted so."""
    from attnbench.harness.measure.gate_rows import GateRow

    limited = "needs N divisible by 128, got N_q=100 N_k=100"
    rows = [GateRow("mine", "cpu", "float32", c, p, "unsupported", reason=limited, n=100)
            for c in (False, True) for p in (False, True)]  # fmt: skip
    rows += [GateRow("sdpa_cudnn", "cpu", "float32", False, False, "unsupported", reason="CUDA only", n=100)]
    assert check.exit_status(rows, ["mine"]) == 1 and check.exit_status(rows) == 0
    assert check.verdict(rows, ["mine"]) == (
        f"check: nothing gated for mine (unsupported in every problem: {limited}); exit status 1"
    )
    assert check.verdict(rows).startswith("check: passed (0 variants, 0 problems)")


def test_the_padded_problems_are_the_ones_a_run_makes():
    """check pads by the run's own rule (harness.sweep.spec.padded_lengths): every batch element keeps a
    key."""
    from attnbench.harness.sweep.spec import padded_lengths

    assert padded_lengths(100, check.BATCH, check.PADDING) == [50, 1]
    assert min(padded_lengths(16, check.BATCH, check.PADDING)) == 1


def test_a_paged_kernel_masking_top_left_is_named_and_its_label_says_the_alignment(isolated_registry):
    """A paged kernel that declares causal="lower-right" and masks top-left fails each paged cell: the
    reason names the alignment (as a square cell's names the opposite mistake), and the label says the
    cell's causal alignment, so that its grouped heads' cell does not read as a GQA fault."""
    plan = check.prepare(["top_left_paged"], ["cpu"], ["float32"], 24, variant_files=[str(CHECK_VARIANTS)])
    rows = {r.workload: r for r in check.gate_all(plan) if r.workload}
    step = "paged decode step, N_q 1 of N_k 24"
    assert set(rows) == {
        "paged, causal lower-right, 2 k/v heads for 4",
        "paged, causal lower-right, pages of 4",
        f"{step}, causal lower-right, pages of 4",
        f"{step}, pages of 4",  # no causal mask: nothing to align, right
    }
    said = "its causal mask is aligned top-left where the cell asks lower-right (its queries end the context)"
    masked = [r for w, r in rows.items() if w != f"{step}, pages of 4"]
    assert all(r.status == "FAIL" and r.reason.startswith(said) for r in masked), rows
    assert rows[f"{step}, pages of 4"].status == "pass", rows


@pytest.mark.parametrize(
    "variant, said",
    [
        ("sorted_pages_paged", "it read each sequence's own pages in ascending pool order (its row of"),
        ("one_past_paged", "it read one slot past each context in its last, partial page: L + 1 keys"),
    ],
)  # fmt: skip
def test_a_paged_kernel_reading_its_pages_in_pool_order_or_one_slot_past_is_named_in_checks_line(
    isolated_registry, variant, said
):
    """Pages read in physical order, and a partly filled last page read one slot past its context, fail
    check's paged problems with the cause named before the worst sequence, not a bare rel_err."""
    plan = check.prepare([variant], ["cpu"], ["float32"], 24, variant_files=[str(CHECK_VARIANTS)])
    paged = [r for r in check.gate_all(plan) if r.workload and "paged" in r.workload]
    failed = [r for r in paged if r.status == "FAIL"]
    assert failed and all(r.reason.startswith(said) and "worst: sequence" in r.reason for r in failed), paged


def test_nan_in_rows_without_a_key_passes_check_as_it_passes_run(isolated_registry, tmp_path):
    """A variant that returns NaN only in rows that see no key (the -inf mask then softmax of transformers'
    and multi_head_attention_forward's adapters) is ok in every run cell; check gates the same problems, and
    shows the NaN in the no-key table without failing it."""
    plan = check.prepare(["nan_no_key"], ["cpu"], ["float32"], 16, variant_files=[str(CHECK_VARIANTS)])
    rows = list(check.gate_all(plan))
    gated = [r for r in rows if not r.no_key]
    assert len(gated) == 5 and {r.status for r in gated} == {"pass"} and check.exit_status(rows) == 0
    (extra,) = [r for r in rows if r.no_key]
    assert extra.status == "pass" and extra.masked_rows == "nan" and not extra.gating

    run = run_cli(
        "run", "--variant-file", str(CHECK_VARIANTS), "--variants", "nan_no_key,check_supports_raise",
        "--seq-len", "32",
        "--heads", "2", "--batch", "2", "--padding", "0.99", "--pass", "both", "--warmup-ms", "1",
        "--budget-ms", "5", "--min-ms", "1", "--out", str(tmp_path / "run"), "-q",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows if r["variant"] == "nan_no_key"] == ["ok", "ok"]
    raised = [r for r in rows if r["variant"] == "check_supports_raise"]  # the run goes on past it
    assert len(raised) == 2 and {r["status"] for r in raised} == {"error"}
    assert {r["message"] for r in raised} == {
        "its capability check raised RuntimeError: a supports() hook that raises"
    }


def test_a_plugin_that_raises_or_returns_garbage_is_a_row_with_its_reason(isolated_registry):
    names = ["naive", "check_raise", "check_garbage", "check_supports_raise"]
    plan = check.prepare(names, ["cpu"], ["float32"], 16, variant_files=[str(CHECK_VARIANTS)])
    rows = [r for r in check.gate_all(plan) if not r.workload]  # naive's workloads: test_each_declared_...
    assert len(rows) == 4 * 5
    for name, reason in [
        ("check_raise", "ValueError: deliberate failure with a second line"),
        ("check_garbage", "output contract: returned a str; expected a (2, 4, 16, 64) float32 tensor on cpu"),
        ("check_supports_raise", "RuntimeError: a supports() hook that raises"),
    ]:
        mine = [r for r in rows if r.variant == name]
        assert {r.status for r in mine} == {"error"} and all(r.reason.startswith(reason) for r in mine)
        assert all("\n" not in r.reason for r in mine)
    assert check.exit_status(rows) == 1
    assert check.exit_status([r for r in rows if r.variant == "naive"]) == 0


@pytest.mark.parametrize(
    "given, said",
    [
        ("100,100", "--seq-len lists a value twice: [100, 100]"),
        ("abc", "--seq-len must be positive integers, got 'abc'"),
    ],
)
def test_check_refuses_a_seq_len_in_the_projects_words(given, said):
    """Not argparse's "invalid int value": one line, as `run` says a bad --seq-len, exit 2."""
    proc = run_cli("check", "--variants", "naive", "--dtype", "float32", "--seq-len", given)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == f"attnbench: error: {said}\n"


def test_check_cli_never_crashes_and_says_why(tmp_path):
    """The CLI: a table row per failure with its reason, no traceback, exit 1 (a default variant errored);
    a variant that passes on the run's problems and NaNs where no key is visible exits 0."""
    proc = run_cli(
        "check", "--variant-file", str(CHECK_VARIANTS), "--variants", "naive,check_raise,check_garbage",
        "--seq-len", "16", "--dtype", "float32",
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "ValueError: deliberate failure with a second line" in proc.stdout
    assert "output contract: returned a str; expected a (2, 4, 16, 64) float32 tensor on cpu" in proc.stdout
    probe = run_cli(
        "check", "--variant-file", str(CHECK_VARIANTS), "--variants", "check_supports_raise,check_raise",
        "--seq-len", "16", "--dtype", "float32", "--probe",
    )  # fmt: skip
    assert probe.returncode == 1 and "Traceback" not in probe.stderr + probe.stdout, probe.stderr
    # every gate, no-key and probe row of the variant is an error naming its reason by number; the reason is
    # written once, below the gate table
    assert probe.stdout.count("RuntimeError: a supports() hook that raises") == 1
    rows = [line.split() for line in probe.stdout.splitlines() if line.startswith("check_supports_raise ")]
    assert len(rows) == 5 + 3 and all("error" in r and r[-1] == "1" for r in rows), rows
    ok = run_cli(
        "check", "--variant-file", str(CHECK_VARIANTS), "--variants", "naive,nan_no_key", "--seq-len", "16",
        "--dtype", "float32",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "rows that see no key" in ok.stdout and "nan" in ok.stdout
    assert ok.stdout.splitlines()[-1].startswith("check: passed (2 variants, "), ok.stdout


def test_list_and_check_show_an_availability_check_that_raises():
    listed = run_cli("list", "--variant-file", str(CHECK_VARIANTS))
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    reason = "check_available_raise on cpu: its availability check raised RuntimeError: an available() hook"
    assert reason in listed.stdout
    checked = run_cli(
        "check", "--variant-file", str(CHECK_VARIANTS), "--variants", "check_available_raise",
        "--seq-len", "16", "--dtype", "float32",
    )  # fmt: skip
    assert checked.returncode == 1 and "RuntimeError: an available() hook that raises" in checked.stdout


WAITS = """
import os, time
from pathlib import Path
from attnbench import variants

@variants.register("check_waits", description="tells the test it runs, then waits for Ctrl-C")
def check_waits(q, k, v, **kw):
    Path(os.environ["CHECK_MARK"]).write_text("running")
    time.sleep(120)
"""


def test_an_interrupted_check_shows_what_it_checked(tmp_path):
    """A check cut short (Ctrl-C, or a time limit's SIGINT: a GPU session's check with flex's compiles
    printed only 'interrupted' after 195 s) prints the table of the checks made before it, exit 130; the
    Ctrl-C reaches the check's own process, never the worker, which is killed."""
    import signal
    import subprocess

    from conftest import cli_env, ctrl_c_reaches_it, wait_while_running

    plugin, mark = tmp_path / "waits.py", tmp_path / "mark"
    plugin.write_text(WAITS)
    args = ["check", "--variant-file", str(plugin), "--variants", "naive,check_waits", "--seq-len", "16",
            "--dtype", "float32"]  # fmt: skip
    env = {**cli_env(), "CHECK_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "attnbench", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it)  # fmt: skip
    wait_while_running(mark.exists, proc, "check_waits to start")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    assert "naive" in out and "pass" in out and "check_waits" not in out
    assert err.strip() == "interrupted: the table holds the 1 check made before it"


ISOLATED = """
import os, time
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa
from attnbench import register

@register("m_exit")
def m_exit(q, k, v, *, causal=False, scale=None):
    raise SystemExit(0)

@register("m_crash")
def m_crash(q, k, v, *, causal=False, scale=None):
    if k.shape[2] >= 24:
        os._exit(3)
    return sdpa(q, k, v, is_causal=causal, scale=scale)

@register("m_hang")
def m_hang(q, k, v, *, causal=False, scale=None):
    while q.shape[2] % 8:  # a ragged last block: never leaves
        time.sleep(0.05)
    return sdpa(q, k, v, is_causal=causal, scale=scale)

@register("m_ok")
def m_ok(q, k, v, *, causal=False, scale=None):
    return sdpa(q, k, v, is_causal=causal, scale=scale)

@register("m_wrong_nondefault", default=False)
def m_wrong_nondefault(q, k, v, *, causal=False, scale=None):
    return sdpa(q, k, v, is_causal=causal, scale=1.0)

def blocked_v1(q, k, v, *, causal=False, scale=None):
    return sdpa(q, k, v, is_causal=causal, scale=scale)

register("blocked_v1")(blocked_v1)
"""


@pytest.fixture
def isolated_file(tmp_path):
    path = tmp_path / "blocked.py"
    path.write_text(ISOLATED)
    return str(path)


STATUS_WORDS = {"pass", "FAIL", "error", "crashed", "timeout", "unsupported"}


def _statuses(stdout: str, name: str) -> list[str]:
    """The status of each table row of variant `name` in check's output (fitted or framed), in order."""
    rows = [line.replace("│", " ").split() for line in stdout.splitlines()]
    return [next(w for w in r if w in STATUS_WORDS) for r in rows if r[:1] == [name]]


def test_a_kernel_that_exits_or_crashes_is_its_rows_and_the_check_fails(isolated_file):
    """`check` gates each problem in a worker, as `run` measures a cell: SystemExit is the variant's error
    (it printed nothing and exited 0), os._exit its crash (it printed nothing and exited 3), and the other
    variants are still gated."""
    exits = run_cli("check", "--variant-file", isolated_file, "--variants", "m_exit", "--dtype", "float32",
                    "--seq-len", "16")  # fmt: skip
    assert exits.returncode == 1 and "Traceback" not in exits.stdout + exits.stderr, exits.stderr
    said = _statuses(exits.stdout, "m_exit")  # it takes no key_lengths: its padded problems are unsupported
    assert said.count("error") == 3 and set(said) == {"error", "unsupported"}, exits.stdout
    assert "SystemExit: 0" in exits.stdout
    crash = run_cli("check", "--variant-file", isolated_file, "--variants", "m_crash,m_ok", "--dtype",
                    "float32", "--seq-len", "24")  # fmt: skip
    assert crash.returncode == 1 and "Traceback" not in crash.stdout + crash.stderr, crash.stderr
    assert set(_statuses(crash.stdout, "m_crash")) == {"crashed", "unsupported"}, crash.stdout
    assert "worker exited with status 3" in crash.stdout
    assert set(_statuses(crash.stdout, "m_ok")) == {"pass", "unsupported"}, crash.stdout


def test_a_kernel_that_hangs_times_out_under_cell_timeout(isolated_file):
    """A hang is a timeout row after --cell-timeout (run's flag, its default and rule), and that variant's
    later problems on the device are left out; the others are gated."""
    import time

    t0 = time.monotonic()
    hung = run_cli("check", "--variant-file", isolated_file, "--variants", "m_hang,m_ok", "--dtype",
                   "float32", "--seq-len", "12", "--cell-timeout", "3")  # fmt: skip
    assert time.monotonic() - t0 < 60
    assert hung.returncode == 1 and "Traceback" not in hung.stdout + hung.stderr, hung.stderr
    assert _statuses(hung.stdout, "m_hang") == ["timeout"], hung.stdout  # its later problems: not run
    assert "exceeded --cell-timeout 3 s" in " ".join(hung.stdout.split())
    assert set(_statuses(hung.stdout, "m_ok")) == {"pass", "unsupported"}
    bad = run_cli("check", "--variants", "naive", "--cell-timeout", "0")
    assert bad.returncode == 2 and "--cell-timeout must be a positive number" in bad.stderr, bad.stderr


def test_a_wrong_kernel_named_fails_the_check_though_not_in_default_sweeps(isolated_file):
    """default=False keeps a variant out of default sweeps; a check that names it (--variants, or its
    --variant-file) counts its failures: it FAILed and exited 0. No row says "demo only"."""
    named = run_cli("check", "--variant-file", isolated_file, "--variants", "m_wrong_nondefault", "--dtype",
                    "float32", "--seq-len", "16")  # fmt: skip
    assert named.returncode == 1, named.stdout
    assert "demo" not in named.stdout and "(not in default sweeps)" not in named.stdout
    # a log (stdout no terminal) ends on the verdict in one line, as bench's does, and each caption and
    # title is one line whole, to grep, not wrapped and centred over the table
    failed = _statuses(named.stdout, "m_wrong_nondefault").count("FAIL")
    lines = named.stdout.splitlines()
    assert lines[-1] == f"check: m_wrong_nondefault FAILED ({failed} FAIL); exit status 1", named.stdout
    assert terminal.GATE_CAPTION in lines and terminal.NO_KEY_CAPTION in lines, named.stdout
    plan = check.prepare(None, ["cpu"], ["float32"], 16)  # every variant: one not named does not count
    assert not plan.counted("sdpa_loop") and plan.counted("naive")


def test_a_variant_files_function_without_a_docstring_names_the_file(isolated_file):
    listed = run_cli("list", "--variant-file", isolated_file, "--json")
    (row,) = [r for r in json.loads(listed.stdout) if r["name"] == "blocked_v1"]
    assert row["description"] == "blocked_v1 from blocked.py"


WORKER_REFUSES = """
import multiprocessing
from attnbench import register

if multiprocessing.current_process().name == "attnbench-worker":
    raise ImportError("this file imports in the check's process only")

@register("parent_only")
def parent_only(q, k, v, *, causal=False):
    return q
"""


def test_a_worker_that_cannot_start_is_every_rows_crash_not_a_traceback(tmp_path):
    plugin = tmp_path / "parent_only.py"
    plugin.write_text(WORKER_REFUSES)
    proc = run_cli("check", "--variant-file", str(plugin), "--seq-len", "16", "--dtype", "float32")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert set(_statuses(proc.stdout, "parent_only")) == {"crashed"}, proc.stdout
    assert "the check's worker process did not start" in " ".join(proc.stdout.split())


BNHD = """
import torch
from attnbench import register


@register("bnhd_attn", backward=True)
def bnhd_attn(q, k, v, *, causal=False, scale=None):  # written for (B, N, H, d) inputs
    n, d = q.shape[1], q.shape[-1]
    s = torch.einsum("bnhd,bmhd->bhnm", q, k) * (scale or d**-0.5)
    if causal:
        s = s.masked_fill(torch.ones(n, k.shape[1], dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhnm,bmhd->bnhd", s.softmax(-1), v)
"""


def test_a_layout_bug_is_one_cause_its_other_failures_point_to(tmp_path):
    """Trial: a kernel written for (B, N, H, d) read as three bugs: the no-mask problem named the layout, the
    causal one was a bare rel_err and the N_q < N_k workload an exception of tensor sizes. Each of those
    points to the layout now; a failure of its own, or another variant's, is left as it is."""
    path = tmp_path / "bnhd.py"
    path.write_text(BNHD)
    done = run_cli("check", "--variant-file", str(path), "--dtype", "float32", "--seq-len", "24")
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stdout.split())
    pointer = "(likely the same cause: it reads (B, N, H, d))"
    assert 'inputs: declare takes="bnhd"' in said, done.stdout
    assert f"dq, dk and dv {pointer}" in said and f"seen size 6 {pointer}" in said, done.stdout
    bare, bnhd = "output rel_err 2.6e+00 > tolerance 1e-04", "it computed attention over (B, N, H, d) inputs"
    rows = [
        check.GateRow("a", "cpu", "float32", False, False, "FAIL", reason=f"{bnhd}; {bare}"),
        check.GateRow("a", "cpu", "float32", True, False, "FAIL", reason=bare),
        check.GateRow("a", "cpu", "float32", True, True, "FAIL", reason="it ignored key_lengths="),
        check.GateRow("a", "cpu", "float32", True, True, "error", reason="ValueError: no head dim 7"),
        check.GateRow("b", "cpu", "float32", True, False, "FAIL", reason=bare),
    ]  # fmt: skip
    pointed = [pointer in r.reason for r in check.same_cause(rows)]
    assert pointed == [False, True, False, False, False]


def test_a_rounding_variants_gate_rows_carry_its_recipe_and_sqnr():
    """bench's gate lines say a rounding variant's error end to end, as its cells' rows do: its GateRows carry
    the recipe and the output's SQNR against float64 of the inputs it was given; a plain variant's none."""
    plan = check.prepare(["fp8_emulated", "naive"], ["cpu"], ["float32"], 16)
    rows = [r for r in check.gate_all(plan) if r.status == "pass" and not r.no_key and not r.workload]
    fp8 = [r for r in rows if r.variant == "fp8_emulated"]
    assert fp8 and all(r.quant == "e4m3fn:tensor" and 0 < r.sqnr_db < 60 for r in fp8), fp8
    assert all(r.quant == "" and r.sqnr_db is None for r in rows if r.variant == "naive"), rows


ACCUMULATORS = """
import torch
from attnbench import register

def _summed(q, k, v, causal, acc):
    s = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    p = s.softmax(-1)  # float32 weights either way
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=acc)
    for j in range(k.shape[2]):  # P @ V summed key by key in `acc`
        out = out + (p[..., j : j + 1] * v[:, :, j : j + 1].float()).to(acc)
    return out.to(q.dtype)

@register("sums_in_dtype")
def sums_in_dtype(q, k, v, *, causal=False):
    return _summed(q, k, v, causal, q.dtype)

@register("sums_in_float32")
def sums_in_float32(q, k, v, *, causal=False):
    return _summed(q, k, v, causal, torch.float32)
"""


def test_a_low_precision_pass_is_read_beside_sdpas_error_and_one_well_above_it_noted(
    isolated_registry, tmp_path
):
    """Trial: a kernel accumulating in bfloat16 passed with 3-4x the error of the same kernel accumulating in
    float32, and nothing showed a baseline's error. Each bfloat16 problem now measures sdpa's forward on the
    same inputs beside it; check shows sdpa's error and notes the variant whose worst error is
    ABOVE_BASELINE times sdpa's or more, its verdict unchanged; float32 has no baseline."""
    (tmp_path / "acc.py").write_text(ACCUMULATORS)
    plan = check.prepare(
        None, ["cpu"], ["float32", "bfloat16"], 100, variant_files=[str(tmp_path / "acc.py")]
    )
    rows = list(check.gate_all(plan))
    gated = [r for r in rows if r.status == "pass" and not r.no_key]
    assert {(r.dtype, r.baseline) for r in gated} == {("float32", ""), ("bfloat16", "sdpa")}
    assert all(0 < r.baseline_rel_err < 1e-2 for r in gated if r.dtype == "bfloat16")
    assert check.exit_status(rows) == 0 and check.verdict(rows).startswith("check: passed (2 variants")
    said = check.notes(rows)
    assert len(said) == 2 and said[0].startswith("sdpa's forward error on the same problems"), said
    assert said[0].endswith(f"bfloat16 {min(r.baseline_rel_err for r in gated if r.baseline):.1e}.."
                            f"{max(r.baseline_rel_err for r in gated if r.baseline):.1e}")  # fmt: skip
    note = re.fullmatch(
        r"sums_in_dtype passes, but its bfloat16 error is ([\d.]+)× sdpa's on the same problems "
        r"\(\S+ against \S+: does it accumulate in bfloat16\?\)",
        said[1],
    )
    assert note and float(note[1]) >= check.ABOVE_BASELINE, said
    assert not any("sums_in_float32" in line for line in said)
    assert check.notes([r for r in rows if r.dtype == "float32"]) == []


REPEATS = """
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa
from attnbench import register

@register("varies")
def varies(q, k, v, *, causal=False):  # right to 1e-7, never the same twice
    out = sdpa(q, k, v, is_causal=causal)
    return out + torch.randn_like(out) * 1e-7 * out.abs().mean()

@register("grad_path")
def grad_path(q, k, v, *, causal=False):  # another path where its inputs need grad: other bits, every time
    out = sdpa(q, k, v, is_causal=causal)
    return out + 1e-6 * out if q.requires_grad else out

@register("own_rng", dropout_deterministic=False)
def own_rng(q, k, v, *, causal=False, dropout_p=0.0):  # its randomness declared its own: not compared
    out = sdpa(q, k, v, is_causal=causal)
    return out + torch.randn_like(out) * 1e-7 * out.abs().mean()

@register("strided_out")
def strided_out(q, k, v, *, causal=False):  # (B, H, N, d) in (B, N, H, d) memory
    return sdpa(q, k, v, is_causal=causal).transpose(1, 2).contiguous().transpose(1, 2)

@register("in_bnhd", takes="bnhd")
def in_bnhd(q, k, v, *, causal=False):  # its own layout, (B, N, H, d), contiguous: nothing to say
    return sdpa(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal).transpose(1, 2).contiguous()
"""


def test_calls_that_differ_and_a_strided_output_are_noted_never_failed(isolated_registry, tmp_path):
    """Trial: a kernel adding noise to each call and one returning (B, H, N, d) in (B, N, H, d) memory passed
    every problem without a word. check compares two calls on the same inputs at N without padding, causal
    and not (the gradient check's forward is the second call where there is one; a kernel that takes another
    path under grad is called once more, not called non-deterministic), and notes an output not contiguous
    in the variant's own layout (its four mask problems and causal top-left's); neither fails."""
    (tmp_path / "r.py").write_text(REPEATS)
    plan = check.prepare(None, ["cpu"], ["float32"], (16, 24), variant_files=[str(tmp_path / "r.py")])
    rows = list(check.gate_all(plan))
    assert check.exit_status(rows) == 0, [r for r in rows if r.status != "pass"]
    compared = {(r.variant, r.causal, r.n) for r in rows if r.calls_differ is not None}
    mine = {"varies", "grad_path", "strided_out", "in_bnhd"}
    assert compared == {(name, causal, 16) for name in mine for causal in (False, True)}
    assert all(r.calls_differ > 0 for r in rows if r.variant == "varies" and r.calls_differ is not None)
    assert all(r.calls_differ == 0 for r in rows if r.variant == "grad_path" and r.calls_differ is not None)
    said = check.notes(rows)
    assert len(said) == 2, said
    assert re.fullmatch(
        r"varies is not deterministic: two calls on the same inputs differ by up to \S+ \(rel\), in 2 of 2 "
        r"problems compared",
        said[0],
    ), said
    assert said[1] == (
        "strided_out returns a non-contiguous output (strides (4096, 64, 256, 1) for (2, 4, 16, 64), "
        "(B, N, H, d) memory; in 5 of 5 problems): the next op may copy it"
    ), said
    # a variant not in default sweeps, checked unnamed (hf_sdpa returns (B, N, H, d) memory by design): its
    # notes are not said, as its failures are not counted
    unnamed = [dataclasses.replace(r, gating=False) if r.variant == "strided_out" else r for r in rows]
    assert check.notes(unnamed) == said[:1]


def test_check_prints_its_notes_below_its_tables_and_its_verdict_last(tmp_path):
    """`attnbench check` prints each note as a line of its own, `note: ...`, after its tables and before its
    verdict, which they leave as it was."""
    (tmp_path / "r.py").write_text(REPEATS)
    done = run_cli("check", "--variant-file", str(tmp_path / "r.py"), "--variants", "varies,strided_out",
                   "--dtype", "float32,bfloat16", "--seq-len", "16")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    noted = [line for line in lines if line.startswith("note: ")]
    assert [line.split(" ")[1] for line in noted] == ["sdpa's", "varies", "strided_out"], noted
    assert lines[-len(noted) - 1 :] == [*noted, "check: passed (2 variants, 12 problems); exit status 0"]


DIAGONAL = """
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa
from attnbench import register

@register("diag_hidden", gqa=True, window=True)
def diag_hidden(q, k, v, *, causal=False, window=0):  # masks j >= i where j > i is meant
    i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
    hidden = (j >= i) if causal else torch.zeros(1, 1, dtype=torch.bool)
    hidden = hidden | (j <= i - window) if window else hidden
    return sdpa(q, k, v, attn_mask=~hidden, enable_gqa=True).nan_to_num(0.0)
"""


def test_a_causal_diagonal_hidden_is_named_in_every_row_it_fails(isolated_registry, tmp_path):
    """Trial: a kernel masking j >= i was named in the square causal rows, and its `causal top-left, N_q 25
    of N_k 100` and `window 16` rows said only 'it left query rows unwritten'; each names the cause now."""
    (tmp_path / "d.py").write_text(DIAGONAL)
    rows = list(
        check.gate_all(check.prepare(None, ["cpu"], ["float32"], 24, variant_files=[str(tmp_path / "d.py")]))
    )
    failed = {r.workload or f"causal, N {r.n}": r.reason for r in rows if r.status == "FAIL"}
    assert set(failed) == {
        "causal, N 24",
        "2 k/v heads for 4",
        "causal top-left, N_q 6 of N_k 24",
        "window 4",
    }
    said = "its causal mask hides each query's own key: query i saw keys "
    assert failed["causal top-left, N_q 6 of N_k 24"].startswith(
        f"{said}0..i-1 where it sees 0..i (it masked"
    ), failed
    assert failed["window 4"].startswith(f"{said}i-3..i-1 where it sees i-3..i (it masked triu(0), where"), (
        failed
    )
    assert all(reason.startswith(said) for reason in failed.values()), failed
