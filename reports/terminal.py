"""Tables for the terminal (rich): what `attnbench list` and `attnbench check` print, from plain records.

The front end gathers the records (the variant rows of `attnbench list --json`, harness.tools.check's
GateRows, harness.measure.numerics.probe's dicts) and prints what these functions return. Every string in a
record is data: a variant name, a reason or an error message from a plug-in may hold `[...]`, which rich would
read as markup, so each is escaped here before it enters a table; the styles are ours alone. GateRows are read
by attribute or key (this layer knows nothing of the harness's types), so dicts with the same fields work too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.results.formulas import (
    COMPACT_BELOW,
    SHORT_DTYPE,
    printable,
    record_e2e_rel_err,
    sentence_columns,
    terminal_columns,
    wrap_text,
)

# Each table is laid out for the terminal's width (terminal_columns: 100 where the output is no terminal):
# from WIDE columns `list` keeps each description in its table (all its columns fit unfolded at 150); below,
# the descriptions follow the table, and below COMPACT_BELOW the table keeps the columns a newcomer needs.
WIDE = 140
LIST_TITLE = "attnbench variants (memory: how peak memory grows with N)"
LIST_COLUMNS = ("variant", "description", "memory", "dtypes", "head dim", "supports", "layout", "cpu", "cuda")
LIST_NARROW = ("variant", "cpu", "cuda", "memory", "dtypes", "head dim", "supports", "layout")
LIST_COMPACT = ("variant", "cpu", "cuda", "memory", "dtypes", "supports")
NOT_DEFAULT = "(not in default sweeps)"  # `list`'s mark of a variant a sweep runs only when named
LIST_LEFT_OUT = "head dims and layouts: attnbench list --json, or 100 columns"
SHORT = {**SHORT_DTYPE, "padding": "pad", "dropout": "drop", "backward": "bwd"}  # dtypes and supports
GATE_COLUMNS = ("variant", "device", "dtype", "causal", "pad", "status", "rel_err", "grad_rel")
# named: with --variants or registered by a --variant-file; unsupported rows never count
GATE_CAPTION = "exit status 1 when a variant named or in default sweeps FAILs, errors, crashes or times out"
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


class FittedConsole(Console):
    """A console for stdout as wide as the terminal (terminal_columns: $COLUMNS, the terminal's width, or
    100 where stdout is no terminal); `one_line` where stdout is a log (no terminal, no $COLUMNS: the rule
    of run's lines, results.formulas.sentence_columns, as harness.run.progress.Progress reads it), where a
    sentence (a table's title or caption, a note) stays one line, for grep to find whole."""

    def __init__(self, **kw) -> None:
        super().__init__(width=terminal_columns(), **kw)
        self.one_line = sentence_columns() is None


def fitted_console() -> Console:
    """A FittedConsole for stdout."""
    return FittedConsole()


def _fitted_table(**kw) -> Table:
    """A table for a terminal narrower than WIDE: a rule under the header and one column of space between
    columns, no frame (the frame and padding cost 3 columns a column)."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), **kw)


def _sentence_width(console: Console) -> int | None:
    """The columns a sentence (a caption, a note) may take on `console`: its width, or None (one line) on a
    FittedConsole of a log."""
    return None if getattr(console, "one_line", False) else console.width


def show(console: Console, table: Table) -> None:
    """`table` on `console`; in a log (no terminal, no $COLUMNS) its title and caption are each one line,
    above and below it, not wrapped and centred over the table's width on several lines."""
    title, caption = table.title, table.caption
    if _sentence_width(console) is not None:
        console.print(table)
        return
    table.title = table.caption = None
    if title is not None:
        console.print(title, style="italic", soft_wrap=True)
    console.print(table)
    if caption is not None:
        console.print(caption, style="dim", soft_wrap=True)
    table.title, table.caption = title, caption


def _wrapped(
    console: Console, text: str, first: str, indent: str, markup: str | None = None, whole: bool = False
) -> None:
    """Plain `text` after `first`, in lines of the console's width with `indent` before the others (words
    kept whole, so a path can be copied); whole: one line on a FittedConsole of a log (check's reasons),
    as a sentence is there. Every line escaped, `first` shown as `markup` (ours) if given."""
    width = _sentence_width(console) if whole else console.width
    for i, line in enumerate(wrap_text(printable(text), width, indent, printable(first))):
        if i == 0 and markup is not None:
            line = markup + escape(line[len(printable(first)) :])
        else:
            line = escape(line)
        console.print(line, soft_wrap=True)


# ---- attnbench list -----------------------------------------------------------------------------------


def _short(csv_text: str) -> str:
    """'float32,float16,padding' -> 'f32 f16 pad'."""
    return " ".join(_esc(SHORT.get(x, x)) for x in csv_text.split(","))


def variant_table(rows: Sequence[Mapping[str, Any]], width: int | None = None) -> Table:
    """One line per variant, from the rows `attnbench list --json` prints (name, description, memory,
    dtypes, head_dim, supports, layout, default, available: {device: bool}): yes/no per device, and
    '(not in default sweeps)' under a variant that a sweep runs only when named. For a terminal `width` below
    WIDE the description is left to print_variants, and below COMPACT_BELOW the head dims and layout too."""
    columns = LIST_COLUMNS if width is None or width >= WIDE else LIST_NARROW
    columns = LIST_COMPACT if width is not None and width < COMPACT_BELOW else columns
    table = Table(title=LIST_TITLE) if columns == LIST_COLUMNS else _fitted_table(title=LIST_TITLE)
    for col in columns:
        table.add_column(
            col, overflow="fold", no_wrap=col in ("variant", "memory", "head dim", "layout", "cpu", "cuda")
        )
    for r in rows:
        marks = ["[green]yes[/]" if r["available"][d] else "[red]no[/]" for d in ("cpu", "cuda")]
        cells = {
            "variant": f"[bold]{_esc(r['name'])}[/]"
            + ("" if r["default"] else f"\n[yellow]{NOT_DEFAULT}[/]"),
            "description": _esc(r["description"]),
            "memory": _esc(r["memory"]),
            "dtypes": _short(r["dtypes"]),
            "head dim": _esc(r["head_dim"]),
            "supports": _short(r["supports"]),
            "layout": _esc(r["layout"]),
            "cpu": marks[0],
            "cuda": marks[1],
        }
        table.add_row(*(cells[col] for col in columns))
    return table


def unavailable(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """{(device, reason): the variants that cannot run there for it}, from the rows' `reasons` ({device:
    reason}), in the rows' order: "no CUDA device" is said once for every variant it stops."""
    out: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        for device, reason in r["reasons"].items():
            out.setdefault((str(device), str(reason)), []).append(str(r["name"]))
    return out


def print_variants(console: Console, rows: Sequence[Mapping[str, Any]], errors: Iterable[str] = ()) -> None:
    """What `attnbench list` prints, in lines of the console's width: the table, what each variant is
    (where the table has no room for it), why each unavailable variant is, and the plug-in errors. The
    lines wrap at spaces with a hanging indent, a long word (a path) kept whole to be copied."""
    width = console.width
    table = variant_table(rows, width)
    console.print(table)
    if "description" not in [c.header for c in table.columns]:
        if width < COMPACT_BELOW:
            console.print(f"[dim]{escape(LIST_LEFT_OUT)}[/]")
        console.print("[bold]what each variant is:[/]")
        name_width = min(max((len(printable(r["name"])) for r in rows), default=0), 18)
        for r in rows:
            first = f"  {printable(r['name']):<{name_width}}  "
            _wrapped(console, str(r["description"]), first, " " * len(first))
    taking = workloads_taken(rows)
    if taking:
        console.print("[bold]workloads, and the variants that take them:[/]")
        for said, names in taking:
            _wrapped(console, f"{said}: {', '.join(names)}", "  ", "      ")
    console.print("[bold]why not, on this machine:[/]")
    for (device, reason), names in unavailable(rows).items():
        who = "every variant" if len(names) == len(rows) > 1 else ", ".join(names)
        _wrapped(console, f"{who} on {device}: {reason}", "  ", "      ")
    for err in errors:
        _wrapped(console, str(err), "plug-in error: ", "  ", "[red]plug-in error:[/] ")


# each workload of a Capability, as `list` names it with the flag that sweeps it
WORKLOADS = (
    ("gqa", "grouped k/v heads (--kv-heads)"), ("lower_right", "lower-right causal (--causal lower-right)"),
    ("window", "a sliding window (--window)"), ("mods", "score mods (--mod)"),
    ("varlen", "packed batches (--lengths), with the work each executes"),
    ("paged", "a paged K/V cache (--page-size)"),
)  # fmt: skip


# the capability flag of each workload a variant may run alone (variants.handed.only_workload's names)
ONLY_OF = {"window": "window", "varlen": "packed", "paged": "paged"}


def workloads_taken(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(workload, the variants that take it) for each workload some variant of `list`'s rows takes; a mod's
    kinds and a pack's work beside each name ('naive (alibi, softcap)', 'sdpa_loop (exact)'), and 'only'
    beside one that runs that workload alone (its row's `only`: 'sdpa_loop (exact, only)')."""
    out = []
    for key, said in WORKLOADS:
        names = []
        for r in rows:
            value = (r.get("workloads") or {}).get(key)
            if value:
                kinds = (
                    ", ".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""
                )
                alone = key in ONLY_OF and ONLY_OF[key] == r.get("only")
                kinds = ", ".join(filter(None, [kinds, "only" if alone else ""]))
                names.append(printable(r["name"]) + (f" ({kinds})" if kinds else ""))
        if names:
            out.append((said, names))
    return out


# ---- attnbench check ----------------------------------------------------------------------------------

_GATE_DEFAULTS = {
    "rel_err": None, "grad_rel_err": None, "masked_rows": "", "reason": "", "gating": True, "no_key": False,
    "workload": "", "implied": False, "grad_against": "", "n": 0, "quant": "", "sqnr_db": None,
    "kind": "dense", "baseline": "", "baseline_rel_err": None, "strides": "", "calls_differ": None,
}  # fmt: skip
_GATE_STYLE = {
    "pass": "[green]pass[/]", "FAIL": "[bold red]FAIL[/]", "error": "[bold red]error[/]",
    "crashed": "[bold red]crashed[/]", "timeout": "[bold red]timeout[/]",
    "unsupported": "[yellow]unsupported[/]",
}  # fmt: skip
# a row's verdicts that fail a check where it counts
GATE_FAILED = ("FAIL", "error", "crashed", "timeout")
NOT_COUNTED = " (not in default sweeps)"  # a failure of a variant check ran unnamed, which does not count


def _field(row: Any, name: str) -> Any:
    """A GateRow's field, read from a dict or an object alike (defaults as harness.tools.check.GateRow's)."""
    if isinstance(row, Mapping):
        return row[name] if name in row or name not in _GATE_DEFAULTS else _GATE_DEFAULTS[name]
    return getattr(row, name, _GATE_DEFAULTS.get(name))


def gate_table(
    rows: Iterable[Any], seq_len: int | Sequence[int], *, batch: int, heads: int, head_dim: int,
    width: int | None = None, workloads: bool = False, sequences: int | None = None,
) -> Table:  # fmt: skip
    """The float64 correctness gate, one line per GateRow (variant, device, dtype, causal, padding,
    status 'pass'/'FAIL'/'unsupported', rel_err, grad_rel_err, masked_rows, reason, gating), on inputs of
    shape (batch, heads, seq_len, head_dim) (harness.tools.check's BATCH, HEADS, HEAD_DIM). For a terminal
    `width` below WIDE the table is fitted: dtypes short, the device in the title when there is one, and a
    reason by its number among gate_notes, in the `why` column (print_gate prints them below). workloads:
    the rows of the workloads the variants declare instead, a `workload` column for causal and padding; its
    title says that a pack or a paged cache holds `sequences` sequences where a row is one. seq_len: the N
    the masks are gated at (several: an `N` column says each row's), the first the workloads'."""
    ns = (seq_len,) if isinstance(seq_len, int) else tuple(seq_len)
    every = list(rows)  # the notes number the reasons of both tables
    rows = [r for r in every if not _field(r, "no_key") and bool(_field(r, "workload")) == workloads]
    fitted = width is not None and width < WIDE
    devices = list(dict.fromkeys(str(_field(r, "device")) for r in rows))
    columns = list(GATE_COLUMNS)
    if len(ns) > 1 and not workloads:  # each row's N, after the mask it is gated on
        columns.insert(columns.index("pad") + 1, "N")
    title = f"float64 correctness gate (B={batch}, H={heads}, N={', '.join(map(str, ns))}, d={head_dim})"
    if workloads:
        columns[columns.index("causal") : columns.index("pad") + 1] = ["workload"]
        title = f"the workloads each variant declares, each a cell as a run makes it (N={ns[0]}"
        packs = any(_field(r, "kind") in ("packed", "paged") for r in rows)
        title += f"; a pack or a paged cache of {sequences} sequences)" if sequences and packs else ")"
    if fitted and len(devices) == 1:
        columns.remove("device")
        title += f" on {_esc(devices[0])}"
    table = (
        _fitted_table(title=title, caption=None if workloads else GATE_CAPTION)
        if fitted
        else Table(title=title, caption=None if workloads else GATE_CAPTION)
    )
    for col in columns:
        header = "grad" if fitted and col == "grad_rel" else col
        justify = "right" if col in ("rel_err", "grad_rel", "N") else "left"
        # the status never shrinks away (pass, FAIL: the row's verdict); a long workload wraps instead
        table.add_column(
            header, no_wrap=col != "workload", min_width=4 if col == "status" else None, justify=justify
        )
    table.add_column("why" if fitted else "reason", overflow="fold", no_wrap=fitted)
    notes = gate_notes(every)
    for r in rows:
        status, rel_err, grad = _field(r, "status"), _field(r, "rel_err"), _field(r, "grad_rel_err")
        shown = _GATE_STYLE.get(status, f"[red]{_esc(status)}[/]")
        shown += "" if _field(r, "gating") or status not in GATE_FAILED else NOT_COUNTED
        measured = rel_err is not None
        reason = str(_field(r, "reason") or "")
        cells = {
            "variant": _esc(_field(r, "variant")),
            "device": _esc(_field(r, "device")),
            "dtype": _esc(
                SHORT_DTYPE.get(_field(r, "dtype"), _field(r, "dtype")) if fitted else _field(r, "dtype")
            ),
            "causal": "yes" if _field(r, "causal") else "no",
            "pad": "yes" if _field(r, "padding") else "no",
            "N": str(_field(r, "n") or ""),
            "workload": _esc(_field(r, "workload")),
            "status": shown,
            "rel_err": f"{rel_err:.1e}" if measured else "",
            "grad_rel": f"{grad:.1e}" if grad is not None else "-" if measured else "",
        }
        note = (str(notes[reason]) if reason else "") if fitted else _esc(reason)
        table.add_row(*(cells[c] for c in columns), note)
    return table


def gate_notes(rows: Iterable[Any]) -> dict[str, int]:
    """{reason: number} for each distinct reason of the gate's rows (not the no-key ones), numbered in
    order of appearance, the causal x padding rows' before the workloads': a fitted gate_table shows a row's
    reason by its number."""
    rows = sorted((r for r in rows if not _field(r, "no_key")), key=lambda r: bool(_field(r, "workload")))
    reasons = (str(_field(r, "reason") or "") for r in rows)
    return {reason: n for n, reason in enumerate(dict.fromkeys(x for x in reasons if x), start=1)}


def print_gate(
    console: Console, rows: Sequence[Any], seq_len: int | Sequence[int], *, batch: int, heads: int,
    head_dim: int, sequences: int | None = None,
) -> dict[str, int]:  # fmt: skip
    """What `attnbench check` prints for the gate, in lines of the console's width: the table, and under
    a fitted one its numbered reasons (each said once, however many rows share it). Returns those notes
    ({} when the table has room for the reasons), for no_key_table and probe_table to refer to."""
    width = console.width
    show(console, gate_table(rows, seq_len, batch=batch, heads=heads, head_dim=head_dim, width=width))
    if any(_field(r, "workload") for r in rows):
        console.print()
        shape = dict(
            batch=batch, heads=heads, head_dim=head_dim, width=width, workloads=True, sequences=sequences
        )
        show(console, gate_table(rows, seq_len, **shape))
    notes = gate_notes(rows) if width < WIDE else {}
    if notes:
        console.print("[bold]why, by number:[/]")
    for reason, n in notes.items():
        _wrapped(console, reason, f"{n:>3}  ", "     ", whole=True)
    return notes


def _noted(text: str, notes: Mapping[str, int]) -> str:
    """`text` as table text, or 'why N' where it is the gate's note N."""
    return f"why {notes[text]}" if text in notes else _esc(text)


def no_key_table(
    rows: Iterable[Any], width: int | None = None, notes: Mapping[str, int] | None = None
) -> Table | None:
    """The GateRows of the no-key problem (no_key True), apart from the gate: what each variant returns in
    rows that see no key (zeros, nan, other), and its status on the rows that do; None when there are none.
    Unframed for a terminal `width` below WIDE, with dtypes short and a reason among the gate's `notes` by
    its number."""
    rows = [r for r in rows if _field(r, "no_key")]
    if not rows:
        return None
    fitted = width is not None and width < WIDE
    table = (_fitted_table if fitted else Table)(title=NO_KEY_TITLE, caption=NO_KEY_CAPTION)
    for col in NO_KEY_COLUMNS:
        table.add_column(col, no_wrap=col != NO_KEY_COLUMNS[-1], overflow="fold")
    for r in rows:
        status, rel_err, dtype = _field(r, "status"), _field(r, "rel_err"), str(_field(r, "dtype"))
        said = [_esc(_field(r, "masked_rows"))] if _field(r, "masked_rows") else []
        said += [_noted(str(_field(r, "reason")), notes or {})] if _field(r, "reason") else []
        table.add_row(
            _esc(_field(r, "variant")),
            _esc(_field(r, "device")),
            _esc(SHORT_DTYPE.get(dtype, dtype) if fitted else dtype),
            _GATE_STYLE.get(status, f"[red]{_esc(status)}[/]"),
            f"{rel_err:.1e}" if rel_err is not None else "",
            "; ".join(said),
        )
    return table


def probe_table(
    records: Iterable[Mapping[str, Any]], width: int | None = None, notes: Mapping[str, int] | None = None
) -> Table:
    """The numerics probe, one line per record of harness.measure.numerics.probe (variant, device, dtype,
    q_scale, status, and rel_err when it ran, with a rounding variant's end-to-end error beside as
    '(e2e 4.6e-02)', else message). Unframed for a terminal `width` below WIDE, with
    dtypes short and a message among the gate's `notes` by its number."""
    fitted = width is not None and width < WIDE
    table = (_fitted_table if fitted else Table)(title=PROBE_TITLE)
    for col in PROBE_COLUMNS:
        table.add_column(col, overflow="fold", no_wrap=col != "rel_err / message")
    style = {"ok": "[green]ok[/]", "wrong": "[bold red]wrong[/]", "unsupported": "[yellow]unsupported[/]"}
    for rec in records:
        err = (
            f"{rec['rel_err']:.1e}" if "rel_err" in rec else _noted(str(rec.get("message", "")), notes or {})
        )
        e2e = record_e2e_rel_err(rec)  # a rounding variant's error against the inputs as made, beside
        err += f" (e2e {e2e:.1e})" if e2e is not None else ""
        status = style.get(rec["status"], f"[red]{_esc(rec['status'])}[/]")
        dtype = str(rec.get("dtype", ""))  # a variant whose worker crashed or hung: one record, no dtype
        dtype = SHORT_DTYPE.get(dtype, dtype) if fitted else dtype
        scale = f"x{rec['q_scale']:g}" if "q_scale" in rec else ""
        table.add_row(_esc(rec["variant"]), _esc(rec.get("device", "")), _esc(dtype), scale, status, err)
    return table
