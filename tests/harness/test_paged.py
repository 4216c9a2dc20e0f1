"""Paged-KV decode (the page_size axis, variants/paged.py): the page table, the flags' bad input, the float64
reference read page by page, the variants against it, a kernel that reads past a context caught, and a
real run's bytes and report."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import run_cli

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import measure_cell
from attnbench.harness.measure.inputs import block_table, make_inputs
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results import load
from attnbench.results.formulas import DTYPE_BYTES
from attnbench.variants.lengths import draw_lengths, page_table
from attnbench.variants.paged import gather_pages

QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)


def cell(
    variant: str, *, n_q: int = 4, n_k: int = 96, page: int = 16, causal: bool = True, kv_heads: int = 2
):
    base = CellSpec(variant, "cpu", "float32", 3, 4, n_q, 16, 16, causal, 0.0, "fwd")
    align = "lower-right" if causal else "top-left"
    return dataclasses.replace(
        base, seq_k=n_k, kv_heads=kv_heads, lengths="uniform", page_size=page, causal_align=align
    )


def test_each_sequence_gets_its_own_scattered_pages_from_a_pool_of_exactly_those_needed():
    lengths = draw_lengths("uniform", 6, 100, least=4)
    table = page_table(lengths, 16)
    used = [row[: -(-n // 16)] for row, n in zip(table, lengths, strict=True)]
    flat = [p for row in used for p in row]
    assert sorted(flat) == list(range(len(flat)))  # every pool page once
    assert any(b - a != 1 for row in used for a, b in zip(row, row[1:], strict=False))  # scattered
    assert page_table(lengths, 16) == table and min(lengths) >= 4


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--page-size", "0"], "--page-size must be positive"),
        (["--page-size", "16", "--seq-len", "8", "--seq-k", "4"], "more query tokens than the context"),
        (["--page-size", "16", "--seq-len", "1", "--seq-k", "64", "--causal", "yes"], "--causal yes"),
        (["--page-size", "16", "--seq-len", "1", "--seq-k", "64", "--pass", "fwdbwd"], "--pass fwdbwd"),
    ],
)
def test_bad_paged_cells_are_one_line_and_exit_2_with_nothing_written(tmp_path, flags, says):
    out = tmp_path / "run"
    proc = run_cli("run", "--variants", "paged_gather", *flags, "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


def test_without_seq_k_each_paged_cell_is_its_own_context_so_no_pair_is_refused():
    """--seq-len 256,512 --page-size 16 was refused ('more query tokens than the context (--seq-k 256)'):
    the check crossed each seq_len with every seq_len, while the cells pair each with itself."""
    from attnbench.harness.sweep.sweeps import build_sweep

    spec = build_sweep({"variants": "paged_gather", "page_size": "16", "seq_len": "256,512"})
    pairs = {(c.seq_len, c.seq_k or c.seq_len) for c in spec.cells(["paged_gather"])}
    assert pairs == {(256, 256), (512, 512)}
    with pytest.raises(ValueError, match="--seq-len 512 is more query tokens than the context .--seq-k 256."):
        build_sweep({"variants": "paged_gather", "page_size": "16", "seq_len": "1,512", "seq_k": "256"})


def test_a_sweep_with_nothing_to_measure_is_refused_before_a_worker_starts(tmp_path):
    """A paged variant on a packed sweep, and a packed-only one on a paged sweep, were run: a worker
    started, calibrated and wrote a run of one unsupported row, exit 0. Now one line, exit 2, nothing
    written, from `attnbench run` and attnbench.run alike; a sweep with some cells to measure still runs."""
    import attnbench

    out = tmp_path / "run"
    proc = run_cli(
        "run", "--variants", "paged_gather", "--lengths", "uniform", "--seq-len", "16", "--batch", "2",
        "--heads", "1", "--d-k", "8", "--out", str(out),
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "attnbench: error: nothing to measure: every cell is unsupported (paged_gather "
    )
    assert not out.exists() and "starting a worker" not in proc.stderr
    with pytest.raises(ValueError, match=r"^nothing to measure: .*sdpa_loop does not read a paged K/V cache"):
        attnbench.run(
            variants="sdpa_loop", page_size=16, seq_len=1, seq_k=32, batch=2, heads=1, d_k=8, out=out
        )
    assert not out.exists()
    dry = run_cli("run", "--variants", "sdpa_loop", "--page-size", "16", "--seq-len", "1", "--seq-k", "32",
                  "--out", str(out), "--dry-run", check=True)  # fmt: skip
    assert "0 to measure" in dry.stdout and not out.exists()  # the dry run says so, as before


@pytest.mark.parametrize("page_size", [0, [0], "0", 16.0, True, [16, 0]])
def test_the_api_refuses_a_page_size_as_the_cli_does_in_its_words(tmp_path, page_size):
    """page_size=0 ran (one unsupported row written) where --page-size 0 is refused; page_size=16.0 was
    told 'positive numbers of tokens per page (0: contiguous)'. Both now say what --page-size says."""
    import attnbench

    out = tmp_path / "run"
    with pytest.raises(ValueError) as err:
        attnbench.run(variants="paged_gather", page_size=page_size, seq_len=1, seq_k=256, batch=2, out=out)
    assert str(err.value).startswith("page_size must be positive integers, tokens per page, got "), err.value
    assert not out.exists()
    if page_size == 16.0:  # the same words as the flag's
        proc = run_cli("run", "--variants", "paged_gather", "--page-size", "16.0", "--out", str(out))
        said = "attnbench: error: --page-size must be positive integers, tokens per page, got '16.0'"
        assert proc.returncode == 2 and proc.stderr.strip() == said and not out.exists(), proc.stderr


def test_the_reference_reads_each_context_in_table_order_with_its_queries_at_the_end():
    spec = cell("paged_gather")
    q, k, v, contexts = (t.to(torch.float64) if t.is_floating_point() else t for t in make_inputs(spec, 0))
    table = block_table(spec)
    paged = correctness.reference(q, k, v, causal=True, key_lengths=contexts, block_table=table)
    for b, n in enumerate(contexts.tolist()):
        kb, vb = (gather_pages(t, table[b : b + 1], n) for t in (k, v))  # (1, H_kv, L, d)
        alone = correctness.reference(q[b : b + 1], kb, vb, causal=True, causal_align="lower-right")
        assert torch.allclose(paged[b : b + 1], alone, atol=1e-12)


# decode of one token over grouped heads, 4 causal queries over 2 K/V heads, 3 over one (MQA) in pages of 32;
# flex compiles a kernel for each (about 6 CPU-s): it takes the first and the last, which between them hold
# every feature of the middle one
SHAPES = [(1, False, 4, 16), (4, True, 2, 16), (3, True, 1, 32)]


@pytest.mark.parametrize(
    ("variant", "n_q", "causal", "kv_heads", "page"),
    [
        (variant, *shape)
        for variant in ("paged_gather", "paged_chunked", "paged_flex")
        for shape in SHAPES
        if variant != "paged_flex" or shape != SHAPES[1]
    ],
)
def test_the_paged_variants_pass_the_gate(variant, n_q, causal, kv_heads, page):
    row = measure_cell(cell(variant, n_q=n_q, causal=causal, kv_heads=kv_heads, page=page), QUICK)
    assert row["status"] == "ok", row["message"]


def test_a_kernel_that_reads_past_a_context_is_wrong():
    """Every slot of a sequence's pages, its last page's tail too: the values past L_b are not its keys."""

    def whole_pages(q, k, v, *, causal=False, key_lengths=None, block_table=None, **_):
        longest = block_table.shape[1] * k.shape[1]
        kb, vb = gather_pages(k, block_table, longest), gather_pages(v, block_table, longest)
        return torch.nn.functional.scaled_dot_product_attention(q, kb, vb, enable_gqa=True)

    spec = cell("paged_gather", n_q=1, causal=False)
    q, k, v, contexts = make_inputs(spec, 0)
    r = correctness.check(whole_pages, q, k, v, key_lengths=contexts, block_table=block_table(spec))
    assert not r.ok
    honest = correctness.check(
        variants.get("paged_gather"), q, k, v, key_lengths=contexts, block_table=block_table(spec)
    )
    assert honest.ok, honest.describe()


def test_a_paged_run_counts_its_bytes_and_its_report_draws_the_decode_panel(tmp_path):
    """... and an FP8 K/V cache's rows (fp8_paged_emulated_head) carry its recipe, the rounding's error apart
    from the kernel's and the SQNR, which the report's findings say."""
    out = tmp_path / "run"
    proc = run_cli(
        "run", "--variants", "paged_gather,paged_chunked,fp8_paged_emulated_head,naive", "--batch", "3",
        "--heads", "4", "--kv-heads", "2", "--d-k", "16", "--seq-len", "1", "--seq-k", "64,128",
        "--lengths", "uniform", "--page-size", "16,32", "--causal", "lower-right", "--warmup-ms", "2",
        "--budget-ms", "10", "--min-ms", "2", "--out", str(out), "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    df = load(out)
    naive = df[df["variant"] == "naive"]
    assert set(naive["status"]) == {"unsupported"} and "paged K/V cache" in naive["message"].iloc[0]
    ok = df[df["status"] == "ok"]
    assert len(ok) == 12
    fp8 = ok[ok["variant"] == "fp8_paged_emulated_head"]
    assert set(fp8["quant_recipe"]) == {"e4m3fn:head"} and (fp8["rel_err"] <= 1e-4).all()
    assert fp8["quant_rel_err"].between(1e-3, 1e-1).all()  # the cache's rounding, far past the kernel's error
    assert ok[ok["variant"] != "fp8_paged_emulated_head"]["sqnr_db"].isna().all()
    for _, r in ok.iterrows():
        contexts = draw_lengths("uniform", 3, int(r["seq_k"]), least=1)
        assert list(r["seq_lens"]) == contexts
        kv = sum(contexts) * 2 * (16 + 16) * DTYPE_BYTES["float32"]
        table = 3 * max(-(-n // int(r["page_size"])) for n in contexts)
        assert r["kv_bytes"] == kv and r["io_bytes"] == kv + 3 * 4 * 1 * 32 * 4 + 4 * table
        assert r["io_gbps"] == pytest.approx(r["io_bytes"] / (r["time_ms_median"] * 1e-3) / 1e9)
    report = tmp_path / "report"
    assert run_cli("report", str(out), "--out", str(report)).returncode == 0
    assert list(report.glob("kv-bandwidth*.png")) or list(report.glob("decode*.png"))
    said = " ".join((report / "README.md").read_text().replace("\\_", "_").split())
    assert "fp8_paged_emulated_head rounds its inputs (e4m3fn:head): rel_err" in said
    assert "its kernel alone errs" in said and "SQNR" in said
