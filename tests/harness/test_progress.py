"""The line a finished cell prints while a sweep runs: what it keeps as the terminal narrows."""

from __future__ import annotations

import pytest

from attnbench.harness.run.progress import cell_line

ROW = {
    "status": "ok", "variant": "naive", "device": "cpu", "dtype": "float32", "batch": 1, "heads": 2,
    "seq_len": 64, "d_k": 16, "d_v": 16, "causal": False, "padding": 0.0, "pass": "fwd",
    "time_ms_median": 0.062, "rel_iqr": 0.06, "peak_mem_bytes": 72 * 1024, "tflops": 0.0081,
    "rel_err": 1.9e-7,
}  # fmt: skip


def test_without_a_width_every_number_is_on_one_line():
    line = cell_line(ROW)
    assert "\n" not in line
    for part in ("ok", "naive", "cpu f32 b1 h2 n64 d16 fwd", "0.062 ms", "IQR 6%", "72 KiB", "0.0081 TFLOP/s",
                 "rel_err 1.9e-07"):  # fmt: skip
        assert part in line


@pytest.mark.parametrize(
    "width, kept, left_out",
    [
        (130, ("72 KiB", "TFLOP/s", "rel_err"), ()),
        (100, ("72 KiB", "TFLOP/s"), ("rel_err",)),  # an ok cell's rel_err goes first: the gate passed
        (80, ("72 KiB",), ("rel_err", "TFLOP/s")),
        (72, (), ("rel_err", "TFLOP/s", "KiB")),
    ],
)
def test_the_line_fits_and_keeps_time_and_spread(width, kept, left_out):
    line = cell_line(ROW, width)
    assert len(line) <= width and "0.062 ms" in line and "IQR 6%" in line
    assert all(k in line for k in kept) and not any(x in line for x in left_out)


def test_a_wrong_cells_error_outlasts_its_memory_and_a_long_message_goes_below():
    wrong = {**ROW, "status": "wrong", "rel_err": 0.5, "message": "rel_err 5.0e-01 > tolerance 1e-05 " * 3}
    lines = cell_line(wrong, 90).splitlines()
    assert "rel_err 5.0e-01" in lines[0] and "KiB" not in lines[0]
    assert all(len(line) <= 90 for line in lines) and lines[1].startswith("        rel_err")
    why = "xformers is not installed (pip install 'attnbench[xformers]')"
    unsupported = {**ROW, "status": "unsupported", "time_ms_median": None, "message": why}
    lines = cell_line(unsupported, 72).splitlines()
    assert lines[0].startswith("unsupported naive") and "xformers is not installed" in lines[1]


CAUSAL = {**ROW, "variant": "plug_new", "dtype": "bfloat16", "heads": 8, "seq_len": 4096, "d_k": 64,
          "d_v": 64,
          "causal": True, "time_ms_median": 6.786, "rel_iqr": 2.74, "noisy": True,
          "tflops": 0.012, "message": "noisy: IQR/median 34%"}  # fmt: skip


def test_a_causal_line_keeps_its_tflops_in_100_columns():
    """'ok plug_new ... causal fwd 6.786 ms IQR 274% noisy 646 KiB': a causal shape is 7 columns longer,
    pushed out of line already; it drops its padding before a number, and its TFLOP/s stays."""
    line = cell_line(CAUSAL, 100)
    assert len(line) <= 100 and "causal fwd" in line and "TFLOP/s" in line and "KiB" in line, line


def test_the_spread_is_said_once_from_the_row():
    """'IQR 274%' (the row's rel_iqr) with 'noisy: IQR/median 34%' (one visit's) under it: the line gives
    the row's spread once, and says noisy beside it where the row is flagged noisy."""
    line = cell_line(CAUSAL)
    assert "IQR 274% noisy" in line and "IQR/median" not in line, line
    calm = cell_line({**CAUSAL, "rel_iqr": 0.04, "noisy": False, "message": ""})
    assert "IQR 4%" in calm and "noisy" not in calm, calm
    kept = cell_line({**CAUSAL, "message": "noisy: IQR/median 34%; a note of its own"}, 100)
    assert "a note of its own" in kept and "IQR/median" not in kept, kept


@pytest.mark.parametrize("rel_iqr", [0.1065, 0.1004, 0.0996, 0.0951, 0.5, 0.02])
def test_the_spread_and_the_noisy_word_read_by_one_rule(rel_iqr):
    """Trial U: the README's '0.363 ms ±5% noisy' showed half the IQR (5%) beside 'noisy', which means an IQR
    over 10% of the median. The line shows the IQR over the median the noisy rule judges, with the digits
    that keep it off the rule's 10% (10.04%, 9.96%), so that 'noisy' stands beside a number over 10% only."""
    import re

    from attnbench.results.formulas import NOISY_REL_IQR

    noisy = rel_iqr > NOISY_REL_IQR  # the row's flag, by results.formulas.summarize's rule
    line = cell_line({**ROW, "rel_iqr": rel_iqr, "noisy": noisy})
    shown = float(re.search(r"IQR (\d+(?:\.\d+)?)%", line).group(1))
    assert (shown > NOISY_REL_IQR * 100) == noisy == ("noisy" in line), line


def _printed(monkeypatch, row, columns: str | None) -> str:
    """What Progress prints for a finished cell into a log (stderr redirected), or a terminal of `columns`."""
    import io
    import sys

    from rich.console import Console

    from attnbench.harness.run.progress import Progress

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # no terminal
    out = io.StringIO()
    Progress(console=Console(file=out, width=100, highlight=False)).cell_done(row)
    return out.getvalue()


def test_a_long_message_stays_one_line_in_a_log(monkeypatch):
    """docs/cli.md: a message stays one line whatever its length, so that grep finds it whole; a terminal's
    line is still wrapped to its width."""
    long = "RuntimeError: " + "the plug-in could not find its kernel for this shape " * 5
    error = {**ROW, "status": "error", "time_ms_median": None, "message": long.strip()}
    logged = _printed(monkeypatch, error, None)
    assert logged.count("\n") == 1 and long.strip() in logged, logged
    shown = _printed(monkeypatch, error, "100")
    assert shown.count("\n") > 1 and all(len(line) <= 100 for line in shown.splitlines()), shown


def test_an_unsupported_line_is_printed_once_per_variant_and_reason_and_the_rest_counted():
    """The quick preset on a CPU printed one unsupported line per cell of its four CUDA-only variants (24),
    among the results; each is said once per variant, device and reason, and the end counts the others."""
    import io

    from rich.console import Console

    from attnbench.harness.run.progress import Progress

    out = io.StringIO()
    progress = Progress(console=Console(file=out, width=200))
    why = "torch has no CPU kernel for the cuDNN SDPA backend (CUDA only)"
    other = "the run's memory guard: too large"
    for n in (64, 128, 256):
        progress.cell_done({**ROW, "seq_len": n})
        progress.cell_done(
            {**ROW, "variant": "sdpa_cudnn", "seq_len": n, "status": "unsupported", "message": why}
        )
    progress.cell_done(
        {**ROW, "variant": "sdpa_cudnn", "seq_len": 512, "status": "unsupported", "message": other}
    )
    progress.stop()
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["ok", "unsupported", "ok", "ok", "unsupported"]
    assert lines[-1] == "and 2 more unsupported cells (2 of sdpa_cudnn), each for the reason said above"


def test_a_quantising_cells_line_says_its_error_end_to_end_and_keeps_it():
    """'ok fp8_emulated cpu f32 ... rel_err 3.9e-07' read as if FP8 cost nothing: its rel_err is against
    float64 of its rounded inputs. The line says its error end to end too (from its sqnr_db, as the report's
    speed-accuracy panel reads it), kept while the terminal narrows; a cell that does not round has none."""
    fp8 = {**ROW, "variant": "fp8_emulated", "rel_err": 3.9e-7, "quant_recipe": "e4m3fn:tensor",
           "quant_rel_err": 0.046, "sqnr_db": 26.4}  # fmt: skip
    assert "rel_err 3.9e-07 e2e_rel_err 4.8e-02" in cell_line(fp8)  # 10^(-26.4 / 20)
    narrow = cell_line(fp8, 100)
    assert len(narrow) <= 100 and "e2e_rel_err 4.8e-02" in narrow and " rel_err 3.9e-07" not in narrow
    assert "e2e" not in cell_line(ROW) and "e2e" not in cell_line({**ROW, "quant_recipe": None})


def test_a_decode_cell_shows_its_kv_read_bandwidth_not_tflops():
    """A decode step (one query against 4,096 keys) reads its K/V cache: 33.55 MB in 11.60 ms is 2.89 GB/s,
    while its TFLOP/s rounds to 0.000; its line gives the GB/s the report's decode panel reads it by."""
    kv_bytes = 4096 * 2 * 2 * 64 * 4 * 8  # 8 sequences' K and V, 2 heads, d 64, float32
    decode = {**ROW, "seq_len": 1, "seq_k": 4096, "time_ms_median": 11.60, "kv_bytes": kv_bytes,
              "kv_gbps": kv_bytes / 11.60e-3 / 1e9, "tflops": 2e-5}  # fmt: skip
    line = cell_line(decode)
    assert "2.89 K/V GB/s" in line and "TFLOP/s" not in line, line
    assert "K/V GB/s" in cell_line(decode, 100) and len(cell_line(decode, 100)) <= 100
    assert "0.0081 TFLOP/s" in cell_line(ROW) and "GB/s" not in cell_line(ROW)  # N_q = N_k: TFLOP/s


def test_a_small_or_packed_cells_tflops_keeps_its_digits_and_says_useful_where_its_kernel_does_more():
    """Trial V: a packed cell's line printed '0.000 TFLOP/s' where a paged one's says '0.0839 K/V GB/s'.
    Below 0.01 TFLOP/s the line keeps three significant figures (three decimals above, as the README's
    sample lines are); a cell whose kernel executes more than the useful FLOPs its TFLOP/s counts (a pack
    padded: executed_flops) says "useful TFLOP/s", as the report does; one that executes just them, not."""
    packed = {**ROW, "tflops": 0.000142, "flops": 134217728, "executed_flops": 4 * 134217728}
    assert "0.000142 useful TFLOP/s" in cell_line(packed), cell_line(packed)
    exact = {**packed, "executed_flops": 134217728}
    assert "0.000142 TFLOP/s" in cell_line(exact) and "useful" not in cell_line(exact)
    assert "0.160 TFLOP/s" in cell_line({**ROW, "tflops": 0.16})  # three decimals where they show three
    assert " TFLOP/s" in cell_line({**ROW, "executed_flops": None}) and "useful" not in cell_line(ROW)
    assert len(cell_line(packed, 100)) <= 100
