"""The terminal tables of `attnbench list` and `attnbench check`: every column, data escaped (a name or a
reason with rich markup in it is shown as written), GateRows read from objects and dicts alike."""

from __future__ import annotations

import dataclasses
import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from attnbench.reports import terminal

HOSTILE = "[bold red]evil[/] [/] [link=https://x.example]x[/link]"


def _text(*renderables, width: int = 200, **print_kw) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, no_color=True)
    for r in renderables:
        console.print(r, **print_kw)
    return console.export_text()


def _styled(*renderables, width: int = 200) -> str:
    console = Console(
        file=io.StringIO(), width=width, record=True, force_terminal=True, color_system="truecolor"
    )
    for r in renderables:
        console.print(r)
    return console.export_text(styles=True)


def _variant(name: str = "naive", **kw) -> dict:
    row = {
        "name": name,
        "memory": "quadratic",
        "dtypes": "float32,float16,bfloat16",
        "head_dim": "1..any",
        "supports": "causal,padding,dropout,backward",
        "layout": "bhnd",
        "default": True,
        "source": "builtin",
        "description": "matmul, softmax, matmul",
        "available": {"cpu": True, "cuda": False},
        "reasons": {"cuda": "no CUDA device on this machine"},
    }
    return {**row, **kw}


def _gate(**kw) -> SimpleNamespace:
    row = {"variant": "naive", "device": "cpu", "dtype": "float32", "causal": False, "padding": False,
           "status": "pass", "rel_err": 1.5e-7, "grad_rel_err": 2.5e-7, "masked_rows": "zeros", "reason": "",
           "gating": True}  # fmt: skip
    return SimpleNamespace(**{**row, **kw})


def test_variant_table_shows_every_column_and_marks():
    optional = _variant("optional", default=False, available={"cpu": False, "cuda": True}, supports="")
    rows = [_variant(), optional]
    table = terminal.variant_table(rows)
    assert [c.header for c in table.columns] == list(terminal.LIST_COLUMNS)
    assert table.row_count == 2
    text = _text(table)
    for header in terminal.LIST_COLUMNS:
        assert header in text
    # default=False is "not in default sweeps" (docs/variants.md), never "demo only": hf_* are no demos
    assert "(not in default sweeps)" in text and "demo only" not in text
    assert "f32 f16 bf16" in text and "causal pad drop bwd" in text
    naive_line = next(line for line in text.splitlines() if "naive" in line)
    assert naive_line.split("│")[-3:-1] == [" yes ", " no   "]  # cpu, cuda


def test_variant_table_escapes_data():
    rows = [
        _variant(HOSTILE, description=HOSTILE, memory="[i]linear", layout="[u]bhnd", reasons={"cpu": HOSTILE})
    ]
    text = _text(terminal.variant_table(rows))  # unescaped, "[/]" alone would raise MarkupError
    assert "[bold red]evil[/]" in text and "[i]linear" in text and "[u]bhnd" in text
    styled = _styled(terminal.variant_table(rows))
    assert "\x1b]8;" not in styled  # no hyperlink from the [link=...] in the name
    # a trailing backslash would escape the closing tag of the bold name: shown as written, tag intact
    assert "│ back\\ " in _text(terminal.variant_table([_variant("back\\")]))


def test_print_variants_reasons_and_plugin_errors():
    long_reason = "needs " + "x" * 300
    rows = [_variant(reasons={"cuda": HOSTILE, "cpu": long_reason})]
    console = Console(file=io.StringIO(), width=150, record=True, no_color=True)
    terminal.print_variants(console, rows, [f"bad.py: {HOSTILE}"])
    lines = console.export_text().splitlines()
    assert "why not, on this machine:" in lines
    assert f"  naive on cuda: {HOSTILE}" in lines
    # wrapped at its spaces to the width, a word longer than the width kept whole (a path to copy)
    assert "  naive on cpu: needs" in lines and "      " + "x" * 300 in lines
    assert lines[-1] == f"plug-in error: bad.py: {HOSTILE}"


def test_a_reason_many_variants_share_is_said_once():
    rows = [_variant(reasons={}), _variant("flash", reasons={"cpu": "CUDA only", "cuda": "no GPU"}),
            _variant("mem", reasons={"cpu": "CUDA only", "cuda": "no GPU"})]  # fmt: skip
    assert terminal.unavailable(rows) == {
        ("cpu", "CUDA only"): ["flash", "mem"],
        ("cuda", "no GPU"): ["flash", "mem"],
    }
    console = Console(file=io.StringIO(), width=100, record=True, no_color=True)
    terminal.print_variants(console, rows[1:])
    text = console.export_text()
    assert "  every variant on cpu: CUDA only" in text and text.count("no GPU") == 1


@pytest.mark.parametrize(
    "width, columns",
    [(None, terminal.LIST_COLUMNS), (150, terminal.LIST_COLUMNS), (100, terminal.LIST_NARROW),
     (72, terminal.LIST_COMPACT)],
)  # fmt: skip
def test_the_list_fits_the_terminal(width, columns):
    """Issue 26: `list` was 150 columns whatever the terminal. Below WIDE the descriptions follow the
    table, and below 100 columns the head dims and layouts are left to --json."""
    rows = [_variant(description="a description long enough to wrap " * 4), _variant("chunked_compiled")]
    assert tuple(c.header for c in terminal.variant_table(rows, width).columns) == columns
    console = Console(file=io.StringIO(), width=width or 200, record=True, no_color=True)
    terminal.print_variants(console, rows, ["bad.py: " + "a long plug-in error " * 10])
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= (width or 200)
    assert ("what each variant is:" in lines) == (width is not None and width < terminal.WIDE)
    assert (terminal.LIST_LEFT_OUT in lines) == (width == 72)


def test_gate_table_columns_statuses_and_shape():
    rows = [
        _gate(),
        _gate(causal=True, padding=True, grad_rel_err=None, masked_rows="nan"),
        _gate(variant="fault_wrong", status="FAIL", rel_err=0.5, gating=False),
        _gate(variant="sdpa", status="FAIL", rel_err=0.02, grad_rel_err=None),
        _gate(variant="flash", status="unsupported", rel_err=None, grad_rel_err=None, reason="needs CUDA"),
    ]
    table = terminal.gate_table(rows, 100, batch=2, heads=4, head_dim=64)
    assert [c.header for c in table.columns] == [*terminal.GATE_COLUMNS, "reason"]
    text = _text(table)
    assert "float64 correctness gate (B=2, H=4, N=100, d=64)" in text and terminal.GATE_CAPTION in text
    lines = [line for line in text.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in lines]
    # what a variant returns in rows that see no key is no_key_table's: the gate shows reasons only
    assert cells[0] == ["naive", "cpu", "float32", "no", "no", "pass", "1.5e-07", "2.5e-07", ""]
    assert cells[1][3:] == ["yes", "yes", "pass", "1.5e-07", "-", ""]  # measured, no backward: "-"
    assert cells[2][5] == "FAIL (not in default sweeps)" and cells[3][5] == "FAIL"
    assert cells[4][5:] == ["unsupported", "", "", "needs CUDA"]


def test_a_gate_at_several_n_says_each_rows_n():
    """check gates the masks at N 100 and 300 (harness.tools.check.SEQ_LENS): the title names both, an N
    column each row's, and the workloads' table the first N alone."""
    rows = [_gate(n=100), _gate(n=300, status="FAIL", rel_err=0.5), _gate(n=100, workload="window 16")]
    table = terminal.gate_table(rows, (100, 300), batch=2, heads=4, head_dim=64)
    assert [c.header for c in table.columns] == ["variant", "device", "dtype", "causal", "pad", "N", "status",
                                                 "rel_err", "grad_rel", "reason"]  # fmt: skip
    text = _text(table)
    assert "(B=2, H=4, N=100, 300, d=64)" in text
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if "│" in line]
    assert [row[5:7] for row in cells if row[0] == "naive"] == [["100", "pass"], ["300", "FAIL"]]
    workloads = terminal.gate_table(rows, (100, 300), batch=2, heads=4, head_dim=64, workloads=True)
    assert "N" not in [c.header for c in workloads.columns] and "(N=100)" in _text(workloads)


def test_no_key_rows_have_their_own_table_and_errors_show_their_reason():
    rows = [
        _gate(variant="boom", status="error", rel_err=None, grad_rel_err=None, reason="ValueError: no"),
        _gate(variant="mha", padding=True, masked_rows="nan", gating=False, no_key=True),
        _gate(variant="bad", padding=True, status="FAIL", rel_err=0.5, masked_rows="other", gating=False,
              no_key=True, reason="output rel_err 5.0e-01 > tolerance 1e-05"),
    ]  # fmt: skip
    gate = _text(terminal.gate_table(rows, 100, batch=2, heads=4, head_dim=64))
    assert "ValueError: no" in gate and "mha" not in gate and "bad" not in gate
    assert [line for line in gate.splitlines() if "boom" in line][0].split("│")[6].strip() == "error"
    no_key = _text(terminal.no_key_table(rows), width=300)
    flat = " ".join(no_key.split())  # the caption wraps at the table's width
    assert terminal.NO_KEY_TITLE in no_key and terminal.NO_KEY_CAPTION in flat and "boom" not in no_key
    assert "nan" in no_key and "other; output rel_err 5.0e-01 > tolerance 1e-05" in no_key
    assert terminal.no_key_table(rows[:1]) is None


def test_workload_rows_have_their_own_table_and_the_notes_number_both(tmp_path):
    """The workloads a variant declares are a second table, a `workload` column for causal and padding;
    a fitted terminal numbers the reasons of both tables in one list, the gate's first."""
    why_gate, why_window = "needs CUDA", "its window holds 5 keys, its own and 4 before it"
    rows = [
        _gate(variant="w", workload="window 4", status="FAIL", rel_err=0.2, reason=why_window),
        _gate(variant="w", status="unsupported", rel_err=None, grad_rel_err=None, reason=why_gate),
        _gate(variant="naive", workload="packed, uniform lengths", kind="packed"),
    ]
    plain = _text(terminal.gate_table(rows, 24, batch=2, heads=4, head_dim=64))
    assert "window 4" not in plain and "packed" not in plain and why_gate in plain
    table = terminal.gate_table(rows, 24, batch=2, heads=4, head_dim=64, workloads=True)
    headers = [c.header for c in table.columns]
    assert "workload" in headers and "causal" not in headers and "pad" not in headers
    text = _text(table, width=300)
    assert "window 4" in text and "packed, uniform lengths" in text and why_gate not in text
    console = Console(file=io.StringIO(), width=80, record=True, no_color=True)
    notes = terminal.print_gate(console, rows, 24, batch=2, heads=4, head_dim=64, sequences=8)
    assert notes == {why_gate: 1, why_window: 2}
    out = console.export_text()
    assert "(N=24; a pack or a paged cache of 8 sequences)" in " ".join(out.split())  # what N is of a pack
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("w ")] == ["1", "2"]


def test_gate_table_reads_dicts_as_objects_and_escapes():
    rows = [
        _gate(variant=HOSTILE, reason=HOSTILE),
        _gate(status="unsupported", rel_err=None, reason="[b]no[/b]"),
    ]
    as_dicts = [vars(r) for r in rows]
    short = [{k: v for k, v in d.items() if k not in ("masked_rows", "reason", "gating", "grad_rel_err")}
             for d in as_dicts]  # fmt: skip
    draw = lambda rs: _styled(terminal.gate_table(rs, 8, batch=1, heads=1, head_dim=8))  # noqa: E731
    assert draw(rows) == draw(as_dicts)
    text = _text(terminal.gate_table(rows, 8, batch=1, heads=1, head_dim=8))
    assert HOSTILE.split()[0] in text and "[b]no[/b]" in text
    assert "│" in _text(terminal.gate_table(short, 8, batch=1, heads=1, head_dim=8))  # the defaults fill in


def test_gate_defaults_follow_the_harness_gaterow():
    """The fields a dict may leave out default as harness.tools.check.GateRow's do (a contract, read here
    only)."""
    from attnbench.harness.tools.check import GateRow

    defaults = {
        f.name: f.default for f in dataclasses.fields(GateRow) if f.default is not dataclasses.MISSING
    }
    assert defaults == terminal._GATE_DEFAULTS
    row = GateRow("naive", "cpu", "float32", True, False, "FAIL", 0.1, gating=False)
    shown = _text(terminal.gate_table([row], 8, batch=1, heads=1, head_dim=8))
    assert "FAIL (not in default sweeps)" in shown


def test_probe_table_escapes_messages_and_statuses():
    records = [
        {"variant": "naive", "device": "cpu", "dtype": "float32", "q_scale": 1, "status": "ok",
         "rel_err": 1e-7},
        {"variant": "naive", "device": "cpu", "dtype": "float16", "q_scale": 100.0, "status": "wrong",
         "rel_err": float("inf")},
        {"variant": HOSTILE, "device": "cuda", "dtype": "float16", "q_scale": 10, "status": "unsupported",
         "message": HOSTILE},
        {"variant": "x", "device": "cpu", "dtype": "float32", "q_scale": 0.5, "status": "odd[/]"},
    ]  # fmt: skip
    table = terminal.probe_table(records)
    assert [c.header for c in table.columns] == list(terminal.PROBE_COLUMNS)
    text = _text(table, width=300)
    assert terminal.PROBE_TITLE in text
    assert "x1 " in text and "x100 " in text and "x0.5 " in text and "1.0e-07" in text and "inf" in text
    assert text.count("[bold red]evil[/]") == 2 and "odd[/]" in text


@pytest.mark.parametrize("width", [72, 100, 400])
def test_the_console_is_as_wide_as_the_terminal(monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    assert terminal.fitted_console().width == width


def test_output_to_no_terminal_is_laid_out_100_wide(monkeypatch):
    from attnbench.results.formulas import DEFAULT_COLUMNS, terminal_columns

    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_columns(io.StringIO()) == DEFAULT_COLUMNS == 100


@pytest.mark.parametrize("width", [100, 72])
def test_check_tables_fit_with_reasons_by_number(width):
    """A fitted gate shows each reason once, below it, by number; the no-key and probe tables refer to the
    gate's numbers for the same text."""
    why = "torch has no CPU kernel for the memory-efficient SDPA backend (CUDA only)"
    rows = [_gate(), *(_gate(variant="sdpa_efficient", status="unsupported", rel_err=None, grad_rel_err=None,
                             reason=why, causal=c) for c in (False, True)),
            _gate(variant="sdpa_efficient", status="unsupported", rel_err=None, reason=why, no_key=True,
                  masked_rows="")]  # fmt: skip
    probe = [{"variant": "sdpa_efficient", "device": "cpu", "dtype": "bfloat16", "q_scale": 1,
              "status": "unsupported", "message": why}]  # fmt: skip
    console = Console(file=io.StringIO(), width=width, record=True, no_color=True)
    notes = terminal.print_gate(console, rows, 16, batch=2, heads=4, head_dim=64)
    console.print(terminal.no_key_table(rows, width, notes))
    console.print(terminal.probe_table(probe, width, notes))
    text = console.export_text()
    assert notes == {why: 1} and max(map(len, text.splitlines())) <= width
    assert " ".join(text.split()).count("backend (CUDA only)") == 1 and text.count("why 1") == 2
    assert "on cpu" in text.splitlines()[0] and " bf16 " in text
    wide = _text(terminal.gate_table(rows, 16, batch=2, heads=4, head_dim=64, width=200), width=200)
    assert wide.count(why) == 2  # a wide terminal keeps the reasons in their rows


@pytest.mark.parametrize("width", [60, 70, 80])
def test_a_narrow_workloads_table_keeps_each_rows_verdict_and_wraps_the_workload(width):
    """At 70 columns a long workload ("causal top-left, N_q 25 of N_k 100") once squeezed the status column
    out of the table: a failing row read as the passing ones."""
    rows = [
        _gate(variant="wrong", workload="causal top-left, N_q 25 of N_k 100", status="FAIL", rel_err=1.2),
        _gate(variant="wrong", workload="window 4"),
    ]
    console = Console(file=io.StringIO(), width=width, record=True, no_color=True)
    terminal.print_gate(console, rows, 100, batch=2, heads=4, head_dim=64)
    lines = console.export_text().splitlines()
    table = lines[[i for i, line in enumerate(lines) if line.startswith("variant")][-1] :]
    assert "status" in table[0] and table[2].split()[:2] == ["wrong", "f32"] and " FAIL " in table[2]
    assert "1.2e+00" in table[2] and max(map(len, lines)) <= width
