"""Tables for the terminal (rich): what `attnbench list` and `attnbench check` print, from plain records.

The front end gathers the records (the variant rows of `attnbench list --json`, harness.check's GateRows,
harness.numerics.probe's dicts) and prints what these functions return. Every string in a record is data:
a variant name, a reason or an error message from a plug-in may hold `[...]`, which rich would read as
markup, so each is escaped here before it enters a table; the styles are ours alone. GateRows are read by
attribute or key (this layer knows nothing of the harness's types), so dicts with the same fields work too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.results.formulas import SHORT_DTYPE, printable

MIN_WIDTH = 150  # the tables' columns fit without folding at this width; a wider terminal gets its own
LIST_TITLE = "attnbench variants (memory: how peak memory grows with N)"
LIST_COLUMNS = ("variant", "description", "memory", "dtypes", "head dim", "supports", "layout", "cpu", "cuda")
SHORT = {**SHORT_DTYPE, "padding": "pad", "dropout": "drop", "backward": "bwd"}  # dtypes and supports
GATE_COLUMNS = ("variant", "device", "dtype", "causal", "pad", "status", "rel_err", "grad_rel")
GATE_CAPTION = (
    "exit status 1 when a default variant FAILs or errors; demo-only and unsupported rows do not count"
)
NO_KEY_TITLE = "rows that see no key (a batch element with key length 0): what each variant returns there"
NO_KEY_CAPTION = (
    "no run makes this problem (every padded cell keeps at least one key), so it is shown and never gated"
)
NO_KEY_COLUMNS = ("variant", "device", "dtype", "status", "rel_err", "no-key rows return / reason")
PROBE_TITLE = "numerics probe: rel_err against float64 with q scaled by 1, 10, 100"
PROBE_COLUMNS = ("variant", "device", "dtype", "q scale", "status", "rel_err / message")


def _esc(text: Any) -> str:
    """Data as table text: control and bidi characters as escapes (printable), rich markup escaped."""
    return escape(printable(text))


def wide_console() -> Console:
    """A console at least MIN_WIDTH columns wide (the terminal's width when it is wider)."""
    return Console(width=max(MIN_WIDTH, Console().width))


# ---- attnbench list -----------------------------------------------------------------------------------


def _short(csv_text: str) -> str:
    """'float32,float16,padding' -> 'f32 f16 pad'."""
    return " ".join(_esc(SHORT.get(x, x)) for x in csv_text.split(","))


def variant_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """One line per variant, from the rows `attnbench list --json` prints (name, description, memory,
    dtypes, head_dim, supports, layout, default, available: {device: bool}): yes/no per device, and
    '(demo only)' under a variant that is not run by default."""
    table = Table(title=LIST_TITLE)
    for col in LIST_COLUMNS:
        table.add_column(
            col, overflow="fold", no_wrap=col in ("variant", "memory", "head dim", "layout", "cpu", "cuda")
        )
    for r in rows:
        marks = ["[green]yes[/]" if r["available"][d] else "[red]no[/]" for d in ("cpu", "cuda")]
        name = f"[bold]{_esc(r['name'])}[/]" + ("" if r["default"] else "\n[yellow](demo only)[/]")
        table.add_row(
            name,
            _esc(r["description"]),
            _esc(r["memory"]),
            _short(r["dtypes"]),
            _esc(r["head_dim"]),
            _short(r["supports"]),
            _esc(r["layout"]),
            *marks,
        )
    return table


def unavailable_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """'why not, on this machine:' and one line per variant and device it cannot run on, with the reason
    (the rows' `reasons`: {device: reason}); console markup, data escaped."""
    lines = ["[bold]why not, on this machine:[/]"]
    for r in rows:
        lines += [f"  {_esc(r['name'])} on {_esc(d)}: {_esc(reason)}" for d, reason in r["reasons"].items()]
    return lines


def plugin_error_lines(errors: Iterable[str]) -> list[str]:
    """One line per variant plug-in that failed to load (variants.load_errors()); console markup."""
    return [f"[red]plug-in error:[/] {_esc(err)}" for err in errors]


def print_variants(console: Console, rows: Sequence[Mapping[str, Any]], errors: Iterable[str] = ()) -> None:
    """What `attnbench list` prints: the table, why each unavailable variant is, and the plug-in errors.
    The reasons are printed unwrapped (soft_wrap), so that a long one stays one line to copy."""
    console.print(variant_table(rows))
    header, *reasons = unavailable_lines(rows)
    console.print(header)
    for line in reasons:
        console.print(line, soft_wrap=True)
    for line in plugin_error_lines(errors):
        console.print(line)


# ---- attnbench check ----------------------------------------------------------------------------------

_GATE_DEFAULTS = {
    "rel_err": None, "grad_rel_err": None, "masked_rows": "", "reason": "", "gating": True, "no_key": False,
}  # fmt: skip
_GATE_STYLE = {
    "pass": "[green]pass[/]", "FAIL": "[bold red]FAIL[/]", "error": "[bold red]error[/]",
    "unsupported": "[yellow]unsupported[/]",
}  # fmt: skip


def _field(row: Any, name: str) -> Any:
    """A GateRow's field, read from a dict or an object alike (defaults as harness.check.GateRow's)."""
    if isinstance(row, Mapping):
        return row[name] if name in row or name not in _GATE_DEFAULTS else _GATE_DEFAULTS[name]
    return getattr(row, name, _GATE_DEFAULTS.get(name))


def gate_table(rows: Iterable[Any], seq_len: int, *, batch: int, heads: int, head_dim: int) -> Table:
    """The float64 correctness gate, one line per GateRow (variant, device, dtype, causal, padding,
    status 'pass'/'FAIL'/'unsupported', rel_err, grad_rel_err, masked_rows, reason, gating), on inputs of
    shape (batch, heads, seq_len, head_dim) (harness.check's BATCH, HEADS, HEAD_DIM)."""
    table = Table(
        title=f"float64 correctness gate (B={batch}, H={heads}, N={seq_len}, d={head_dim})",
        caption=GATE_CAPTION,
    )
    for col in GATE_COLUMNS:
        table.add_column(col, no_wrap=True, justify="right" if col in ("rel_err", "grad_rel") else "left")
    table.add_column("reason", overflow="fold")
    for r in rows:
        if _field(r, "no_key"):
            continue  # no_key_table's
        status, rel_err, grad = _field(r, "status"), _field(r, "rel_err"), _field(r, "grad_rel_err")
        shown = _GATE_STYLE.get(status, f"[red]{_esc(status)}[/]")
        shown += "" if _field(r, "gating") or status not in ("FAIL", "error") else " (demo only)"
        measured = rel_err is not None
        table.add_row(
            _esc(_field(r, "variant")),
            _esc(_field(r, "device")),
            _esc(_field(r, "dtype")),
            "yes" if _field(r, "causal") else "no",
            "yes" if _field(r, "padding") else "no",
            shown,
            f"{rel_err:.1e}" if measured else "",
            f"{grad:.1e}" if grad is not None else "-" if measured else "",
            _esc(_field(r, "reason")),
        )
    return table


def no_key_table(rows: Iterable[Any]) -> Table | None:
    """The GateRows of the no-key problem (no_key True), apart from the gate: what each variant returns in
    rows that see no key (zeros, nan, other), and its status on the rows that do; None when there are none."""
    rows = [r for r in rows if _field(r, "no_key")]
    if not rows:
        return None
    table = Table(title=NO_KEY_TITLE, caption=NO_KEY_CAPTION)
    for col in NO_KEY_COLUMNS:
        table.add_column(col, no_wrap=col != NO_KEY_COLUMNS[-1], overflow="fold")
    for r in rows:
        status, rel_err = _field(r, "status"), _field(r, "rel_err")
        table.add_row(
            _esc(_field(r, "variant")),
            _esc(_field(r, "device")),
            _esc(_field(r, "dtype")),
            _GATE_STYLE.get(status, f"[red]{_esc(status)}[/]"),
            f"{rel_err:.1e}" if rel_err is not None else "",
            _esc("; ".join(x for x in (_field(r, "masked_rows"), _field(r, "reason")) if x)),
        )
    return table


def probe_table(records: Iterable[Mapping[str, Any]]) -> Table:
    """The numerics probe, one line per record of harness.numerics.probe (variant, device, dtype, q_scale,
    status, and rel_err when it ran, else message)."""
    table = Table(title=PROBE_TITLE)
    for col in PROBE_COLUMNS:
        table.add_column(col, overflow="fold", no_wrap=col != "rel_err / message")
    style = {"ok": "[green]ok[/]", "wrong": "[bold red]wrong[/]", "unsupported": "[yellow]unsupported[/]"}
    for rec in records:
        err = f"{rec['rel_err']:.1e}" if "rel_err" in rec else _esc(rec.get("message", ""))
        status = style.get(rec["status"], f"[red]{_esc(rec['status'])}[/]")
        table.add_row(
            _esc(rec["variant"]), _esc(rec["device"]), _esc(rec["dtype"]), f"x{rec['q_scale']:g}", status, err
        )
    return table
