"""attnbench.bench(fn) for a kernel of packed batches or paged caches: the sweep and the baseline its
workload needs (bench_sweep.bench_plan), and what the answer says of a decode kernel's bandwidth."""

from __future__ import annotations

import pytest

import attnbench
from attnbench.bench_sweep import bench_plan
from attnbench.results.store import read_rows
from tests.conftest import as_a_fresh_process, run_cli

VARLEN = """
import torch
import torch.nn.functional as F

def my_varlen(q, k, v, *, causal=False, cu_seqlens):  # no default: packed cells only
    out = torch.empty_like(q)
    for a, b in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        out[:, :, a:b] = F.scaled_dot_product_attention(
            q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=causal)
    return out
"""

PAGED = """
import torch
import torch.nn.functional as F

def my_paged(q, k, v, *, causal=False, key_lengths, block_table):  # pools of pages: paged cells only
    out = q.new_empty(*q.shape[:3], v.shape[-1])
    page = k.shape[1]
    for b in range(q.shape[0]):
        n = int(key_lengths[b])
        pages = block_table[b, : (n + page - 1) // page].long()
        kb, vb = (t[pages].flatten(0, 1)[:n].transpose(0, 1) for t in (k, v))  # (H_kv, n, d)
        keys = torch.arange(n) <= torch.arange(q.shape[2])[:, None] + n - q.shape[2]
        out[b] = F.scaled_dot_product_attention(q[b], kb, vb, attn_mask=keys if causal else None)
    return out
"""

WINDOW = """
import torch
import torch.nn.functional as F

def my_window(q, k, v, *, causal=True, window):  # no default: sliding-window cells only
    i = torch.arange(q.shape[2])[:, None]
    j = torch.arange(k.shape[2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & (j > i - window))
"""

QUICK = dict(heads=1, seq_len="64", dtype="float32", budget_ms=3, warmup_ms=1, min_ms=1, calibrate_ms=0)


def _fn(source: str, name: str, **capability):
    namespace = {"__name__": "__main__"}
    exec(source, namespace)
    return attnbench.variant(namespace[name], **capability)


def test_the_plan_follows_the_workload_and_the_caller_wins():
    """A pack or a paged cache, from fn's own refusal of everything else or from the caller's lengths= or
    page_size=, gets its axes and baseline; what the caller gives stays as given."""
    against, axes = bench_plan("sdpa_padded", None, {})
    assert against == "sdpa_loop" and axes["lengths"] == "uniform,longtail" and axes["padding"] == 0.0
    against, axes = bench_plan("paged_chunked", "paged_flex", {"seq_k": "512"})
    assert (against, axes["seq_k"], axes["page_size"], axes["seq_len"]) == ("paged_flex", "512", "16,128", 1)
    # Trial V (L4): at N_q = 1 causal lower-right and no mask are one problem, raced once; not at N_q 4, and
    # never where the caller names the masks
    assert axes["causal"] == "no"
    assert bench_plan("naive", None, {"seq_len": 1, "seq_k": 64})[1]["causal"] == "no"
    assert bench_plan("paged_flex", None, {"seq_len": "1,4"})[1]["causal"] == "no,lower-right"
    assert bench_plan("naive", None, {"seq_len": 4, "seq_k": 64})[1]["causal"] == "no,lower-right"
    assert bench_plan("paged_flex", None, {"causal": "no,lower-right"})[1]["causal"] == "no,lower-right"
    assert bench_plan("naive", None, {"lengths": "longtail", "batch": 4})[1]["batch"] == 4
    assert bench_plan("naive", None, {"page_size": [32]})[0] == "paged_gather"
    assert bench_plan("naive", None, {"lengths": "none"}) == ("sdpa", {"lengths": "none"})
    assert bench_plan("paged_flex", None, {"page_size": 0}) == ("sdpa", {"page_size": 0})  # plain, as asked
    assert bench_plan("naive", None, {}) == ("sdpa", {})
    assert bench_plan("naive", None, {"window": 32}) == ("sdpa", {"causal": "yes", "window": 32})
    assert bench_plan("naive", None, {"window": 0}) == ("sdpa", {"window": 0})  # the caller's plain cells
    # a preset of the caller's keeps its own axes; its workload still picks the baseline
    assert bench_plan("naive", None, {"preset": "paged"}) == ("paged_gather", {"preset": "paged"})
    assert bench_plan("sdpa_loop", None, {"preset": "varlen"}) == ("sdpa_loop", {"preset": "varlen"})


def test_a_packed_only_kernel_is_benched_on_packs_against_sdpa_loop(tmp_path):
    """A kernel whose cu_seqlens= has no default ran none of bench's cells (all 'unsupported': packed
    batches only) and raced sdpa, which takes no pack: now it is benched on packs against sdpa_loop."""
    fn = _fn(VARLEN, "my_varlen", varlen="exact")
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "v", **QUICK)
    rows = read_rows(tmp_path / "v")
    assert {(r["variant"], r["lengths"], r["status"]) for r in rows if not r["causal"]} == {
        (v, p, "ok") for v in ("my_varlen", "sdpa_loop") for p in ("uniform", "longtail")}  # fmt: skip
    lines = str(bench).splitlines()
    assert lines[0].startswith("my_varlen against sdpa_loop: 4 cells of my_varlen"), lines
    assert lines[1].startswith("correct in 4 of 4 cells gated against float64"), lines
    assert any(line.startswith("float32 longtail lengths: ") for line in lines), lines
    assert not any(line.startswith("reads its K/V cache") for line in lines), lines  # no decode step


def test_a_paged_only_kernel_is_benched_on_decode_steps_and_its_bandwidth_said(tmp_path):
    """A kernel that reads paged caches only is benched on decode steps against paged_gather, and the
    answer says how fast it reads its cache at the longest context, against the calibrated copy."""
    fn = _fn(PAGED, "my_paged", paged=True, causal="lower-right")
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "p", **{**QUICK, "seq_k": "128", "calibrate_ms": 50})
    rows = [r for r in read_rows(tmp_path / "p") if r["variant"] == "my_paged"]
    assert {(r["page_size"], r["causal"], r["status"]) for r in rows} == {
        (p, c, "ok") for p in (16, 128) for c in (False, True)}  # fmt: skip
    lines = str(bench).splitlines()
    assert lines[0].startswith("my_paged against paged_gather: 4 cells of my_paged"), lines
    read = next(line for line in lines if line.startswith("reads its K/V cache at "))
    assert " GB/s at N_k 128 (pages of " in read and "of the calibrated cpu copy bandwidth (" in read, read
    assert read.endswith(" GB/s there") and "; paged_gather " in read, read


def test_the_command_benches_a_variant_files_pack_against_sdpa_loop(tmp_path):
    """`attnbench bench NAME --variant-file F`: the name is registered by the file, read before the plan;
    a flag that a pack refuses is said in one line, before anything runs."""
    (tmp_path / "mine.py").write_text(f"{VARLEN}\nimport attnbench\nattnbench.register('my_varlen', "
                                      "varlen='exact')(my_varlen)\n")  # fmt: skip
    args = ["bench", "my_varlen", "--variant-file", str(tmp_path / "mine.py"), "--seq-len", "64"]
    dry = run_cli(*args, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and dry.stdout.startswith("bench my_varlen against sdpa_loop: a dry run"), dry
    bad = run_cli(*args, "--padding", "0.25", "--out", str(tmp_path / "b"), cwd=tmp_path)
    assert bad.returncode == 2 and "does not go with --padding" in bad.stderr, bad
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"page_size": 16}, "my_varlen does not read a paged K/V cache (a variant that does declares paged="),
        ({"window": 8}, "my_varlen does not support a sliding window (window 8; declare window=True"),
    ],
)
def test_a_workload_fn_cannot_run_is_refused_before_any_work(tmp_path, given, why):
    """A kernel of packs only, given page_size= (or window=), had every cell unsupported and raced nothing:
    bench planned 16 baseline cells beside 16 unsupported ones. It is refused in one line, saying why."""
    fn = _fn(VARLEN, "my_varlen", varlen="exact")
    with as_a_fresh_process(tmp_path), pytest.raises(ValueError) as err:
        attnbench.bench(fn, out=tmp_path / "b", **given, **QUICK)
    said = str(err.value)
    assert said.startswith("bench: my_varlen would measure none of its "), said
    assert "cells, every one unsupported: " in said
    assert why in said and "\n" not in said and not (tmp_path / "b").exists(), said


def test_benching_the_default_baseline_asks_for_another(tmp_path):
    """bench("paged_gather") would race paged_gather against itself: one line asking for a baseline, in the
    API's words and in the command's, before anything runs."""
    with pytest.raises(ValueError, match=r"^bench: paged_gather is bench's default baseline here: race it "
                       r"against baseline=VARIANT$"):  # fmt: skip
        attnbench.bench("paged_gather", dry_run=True)
    said = run_cli("bench", "sdpa", "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert said.returncode == 2 and not (tmp_path / "s").exists(), said
    assert said.stderr.strip() == (
        "attnbench: error: bench: sdpa is bench's default baseline here: race it against --baseline VARIANT"
    )


def test_a_sliding_window_only_kernel_is_benched_on_causal_windows_and_its_growth_said(tmp_path):
    """A kernel whose window= has no default errored in every bench cell (a TypeError each, no window
    given): it is benched on causal windows of 16 and 64 keys against sdpa, and its growth is fitted over
    its causal series, as it has no unmasked one."""
    fn = _fn(WINDOW, "my_window", window=True)
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "w", **{**QUICK, "seq_len": "64,128", "padding": 0.0})
    rows = [r for r in read_rows(tmp_path / "w") if r["variant"] == "my_window"]
    assert {(r["window"], r["causal"], r["status"]) for r in rows} == {(16, True, "ok"), (64, True, "ok")}
    lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 4 of 4 cells gated against float64"), lines
    assert any(line.startswith("float32 window 16: ") and "than sdpa (causal)" in line for line in lines)
    assert any(
        line.startswith("grows with N (float32, window 16, causal, fitted over N 64, 128)") for line in lines
    )


def test_one_window_given_is_said_beside_the_mask(tmp_path):
    """bench(fn, window=32) fills in causal masking, which a window needs, and with one window (no shape line
    names it) the race and the growth say it beside the mask."""
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            "naive", window=32, out=tmp_path / "n", **{**QUICK, "seq_len": "64,128", "padding": 0.0}
        )
    lines = str(bench).splitlines()
    assert any(line.startswith("float32: ") and "than sdpa (causal, window 32)" in line for line in lines), (
        lines
    )
    assert any(line.startswith("grows with N (float32, causal, window 32, fitted") for line in lines), lines
