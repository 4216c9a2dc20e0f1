"""What a person sees while a sweep runs: a progress bar with ETA and one line per finished cell."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from attnbench.results.axes import IDENTITY, filled
from attnbench.results.formulas import (
    COMPACT_BELOW,
    NOISY_NOTE,
    bytes_text,
    end_to_end_rel_err,
    iqr_percent,
    printable,
    sentence_columns,
    short_dtype,
    speed,
    terminal_columns,
    wrap_text,
)

STATUS_STYLE = {
    "ok": "green",
    "wrong": "bold red",
    "unsupported": "dim",
    "oom": "magenta",
    "error": "red",
    "crashed": "bold red",
    "timeout": "yellow",
    "skipped": "dim yellow",
}


# the axes cell_line spells out in its own words, as it always has; any other axis of identity (one added to
# the table since) is shown by its cell_id part where it says something (Axis.id_part), before the pass
SPELLED = ("variant", "device", "dtype", "batch", "heads", "kv_heads", "seq_len", "seq_k", "d_k", "d_v",
           "causal", "causal_align", "window", "padding", "dropout", "mod", "pass")  # fmt: skip
MORE = tuple(a for a in IDENTITY if a.name not in SPELLED)


# (status, variant, shape) padded to these widths so that the numbers of most cells line up: a terminal of
# COMPACT_BELOW columns or more, a narrower one (a longer name or shape pushes its own line along). In 100
# columns a cell shows its time, spread, peak memory and TFLOP/s (99 columns); in 72, its time and spread.
PADDING = {"normal": (11, 16, 27), "compact": (7, 12, 26)}


def _shape(row: dict[str, Any]) -> str:
    """'cpu f32 b1 h2 n64 d16 causal fwd': the cell's axes as the line spells them."""
    values = filled(row)
    more = "".join(f" {p}" for a in MORE if (p := a.id_part(values)) is not None)
    kv, n_k = row.get("kv_heads", row["heads"]), row.get("seq_k", row["seq_len"])
    lower_right = row.get("causal_align") == "lower-right"
    return (
        f"{row['device']} {short_dtype(row['dtype'])} b{row['batch']} h{row['heads']}"
        f"{'' if kv == row['heads'] else '/kv' + str(kv)} "
        f"n{row['seq_len']}{'' if n_k == row['seq_len'] else '/nk' + str(n_k)} "
        f"d{row['d_k']}{'' if row['d_v'] == row['d_k'] else '/' + str(row['d_v'])}"
        f"{(' causal-lr' if lower_right else ' causal') if row['causal'] else ''}"
        f"{' w' + str(row['window']) if row.get('window') else ''}"
        f"{' pad' + format(row['padding'], 'g') if row['padding'] else ''}"
        f"{' drop' + format(row['dropout'], 'g') if row.get('dropout') else ''}"
        f"{' ' + row['mod'] if row.get('mod', 'none') != 'none' else ''}{more} "
        f"{row['pass']}"
    )


def _numbers(row: dict[str, Any], tight: bool) -> list[tuple[str, int]]:
    """A measured cell's numbers, each with when it is left out of a line too long (1 first; 0: kept): its
    median and spread ('IQR 7%': its IQR over its median, the row's rel_iqr, over every timed call of every
    visit, results.formulas.iqr_percent; 'noisy' beside it where that is over 10%, the row's `noisy` flag:
    the number and the word read by one rule), its peak
    memory, TFLOP/s (a decode step's K/V GB/s: results.formulas.speed; 'useful TFLOP/s' of a cell whose
    kernel executes more, _padded; three significant figures below 0.01) and rel_err, and a quantising
    variant's error end to end (e2e_rel_err: its rel_err is against float64 of its rounded inputs,
    results.formulas.end_to_end_rel_err; kept longest, since its rel_err alone reads as if the rounding cost
    nothing); `tight`: without the padding that lines the columns up."""
    spread = f"IQR {iqr_percent(row['rel_iqr'])}" if row.get("rel_iqr") is not None else ""
    spread += " noisy" if row.get("noisy") is True else ""
    time_ms, peak = f"{row['time_ms_median']:.3f}", bytes_text(row.get("peak_mem_bytes"))
    rate, unit = speed(row)  # a decode step's K/V GB/s (its TFLOP/s reads 0.000), else TFLOP/s
    rate_text = f"{rate:.3g}" if rate < 1000 else f"{rate:.0f}"
    if unit == "TFLOP/s":  # three decimals, or three significant figures where they would show one or none
        rate_text = f"{rate:.3f}" if not 0 < rate < 0.01 else rate_text
        unit = "useful TFLOP/s" if _padded(row) else unit
    if not tight:
        # 'IQR 9%' lines up: an IQR of 10% or more is a noisy cell's, pushed along by its word anyway
        time_ms, spread, peak = f"{time_ms:>8}", f"{spread:>6}", f"{peak:>9}"
    return [
        (f"{time_ms} ms {spread}".rstrip(), 0),
        (f" {peak}", 3),
        (f" {rate_text:>{0 if tight else 6}} {unit}", 2),
        (f" rel_err {row.get('rel_err', float('nan')):.1e}", 1 if row["status"] == "ok" else 4),
        *_end_to_end(row),
    ]


def _padded(row: dict[str, Any]) -> bool:
    """Whether the cell's kernel executes other FLOPs than the useful ones its TFLOP/s counts (a packed
    batch padded or run whole: executed_flops, results.formulas.executed_pairs), as the report says
    'useful TFLOP/s' of it."""
    try:
        return int(row["executed_flops"]) != int(row["flops"])
    except (KeyError, TypeError, ValueError):  # not a packed cell (no column, None, NA or NaN)
        return False


def _end_to_end(row: dict[str, Any]) -> list[tuple[str, int]]:
    """' e2e_rel_err 4.8e-02' of a cell whose variant rounds its inputs (a quant_recipe, an sqnr_db), as the
    report's speed-accuracy panel reads it; nothing for any other cell."""
    if not row.get("quant_recipe") or row.get("sqnr_db") is None:
        return []
    e2e = end_to_end_rel_err(row.get("rel_err"), row["sqnr_db"])
    return [(f" e2e_rel_err {e2e:.1e}", 4)] if e2e is not None else []


def _without_noisy_note(message: str) -> str:
    """A row's message without the note of its spread (NOISY_NOTE), which the line says beside its time."""
    parts = [p for p in message.split("; ") if not p.startswith(NOISY_NOTE)]
    return "; ".join(parts)


def cell_line(row: dict[str, Any], width: int | None = None) -> str:
    """A finished cell for a person watching the sweep, in lines of at most `width` columns (None: one
    line with every number). What is kept is what they watch for: status, variant, shape, time and spread;
    then, while the line is too long, rel_err (of an ok cell: the gate passed), TFLOP/s and peak memory
    are left out in that order (a quantising cell's error end to end, e2e_rel_err, after them); a line
    whose shape is already longer than its column (a causal cell's, a long name's: it is pushed along, out
    of line with the others) drops its columns' padding first. A message that does not fit goes on the
    lines below, indented."""
    form = "compact" if width is not None and width < COMPACT_BELOW else "normal"
    pad_status, pad_variant, pad_shape = PADDING[form]
    shape = _shape(row)
    head = f"{row['status']:<{pad_status}} {row['variant']:<{pad_variant}} {shape}"
    message = _without_noisy_note(str(row.get("message") or ""))
    if row.get("time_ms_median") is None:
        parts: list[str] = []
    else:
        pushed = len(head) > pad_status + pad_variant + pad_shape + 2
        head = f"{head:<{pad_status + pad_variant + pad_shape + 2}}"
        numbers = _numbers(row, tight=False)

        def fits(head: str, numbers: list[tuple[str, int]]) -> bool:
            return width is None or len(head) + 1 + sum(len(t) for t, _ in numbers) <= width

        for drop in (1, 2, 3, 4):
            if fits(head, numbers):
                break
            if drop == 2 and pushed:  # out of line already: its padding goes before a number does
                head = f"{row['status']} {row['variant']:<{pad_variant}} {shape}"
                numbers = [(t, d) for t, d in _numbers(row, tight=True) if d != 1]
                if fits(head, numbers):
                    break
            numbers = [(t, d) for t, d in numbers if d != drop]
        parts = [t for t, _ in numbers]
    line = f"{head} {''.join(parts)}" if parts else head
    if message and (width is None or len(line) + 2 + len(message) <= width):
        return f"{line}  {message}"
    indent = " " * min(pad_status + 1, 8)
    lines = [line] if width is None or len(line) <= width else wrap_text(line, width, indent)
    return "\n".join([*lines, *(wrap_text(message, width, indent, indent) if message else [])])


class Progress:
    """rich progress bar + per-cell lines; enabled=False prints nothing (library and test use). An
    unsupported cell's line is printed once per variant, device and reason: the quick preset's four
    CUDA-only variants said it 24 times on a CPU, among the results; stop() counts the others."""

    def __init__(self, enabled: bool = True, console=None) -> None:
        self.enabled = enabled
        self._console = console
        self._bar = None
        self._task = None
        self._unsupported: dict[tuple, int] = {}  # (variant, device, reason) -> its cells not listed

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, width=terminal_columns(sys.stderr))
        return self._console

    def _width(self) -> int | None:
        """The columns a line may take: a terminal's width; None in a log (stderr redirected), where every
        line stays whole, to grep (a long run directory once split "4 cells already done" over two lines,
        and a plug-in's long error a cell's line over three)."""
        return self.console.width if sentence_columns(sys.stderr) else None

    def message(self, text: str) -> None:
        if self.enabled:
            lines = wrap_text(printable(text), self._width(), "  ")
            self.console.print("\n".join(lines), markup=False, soft_wrap=True)

    def start(self, total: int, done_before: int, run_dir: Path) -> None:
        if not self.enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        if done_before:
            self.message(f"resuming {run_dir}: {done_before} cells already done, {total} to go")
        self._bar = RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task("cells", total=total)

    def cell_done(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        key, unsupported = (
            (row.get("variant"), row.get("device"), row.get("message")),
            row["status"] == "unsupported",
        )
        if unsupported and key in self._unsupported:
            self._unsupported[key] += 1
        else:
            if unsupported:
                self._unsupported[key] = 0
            style = STATUS_STYLE.get(row["status"], "")
            text = printable(cell_line(row, self._width()))
            self.console.print(text, style=style, markup=False, soft_wrap=True)
        if self._bar is not None:
            self._bar.advance(self._task)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        left: dict[str, int] = {}  # variant -> its unsupported cells not listed
        for (name, _device, _why), n in self._unsupported.items():
            if n:
                left[name] = left.get(name, 0) + n
        if left:
            said = ", ".join(f"{n} of {name}" for name, n in left.items())
            self.message(
                f"and {sum(left.values())} more unsupported cells ({said}), each for the reason said above"
            )
        self._unsupported.clear()


def in_notebook() -> bool:
    """True in a Jupyter kernel (ipykernel runs this process and its output is no terminal): there rich's
    live display needs ipywidgets (it warns without them) and prints each cell's line as its own output."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    shell = ipython.get_ipython()
    return getattr(shell, "kernel", None) is not None and not sys.stderr.isatty()


def progress_for(enabled: bool | None) -> Progress:
    """The progress an API call shows: in a notebook one updating display (NotebookProgress), elsewhere rich
    on stderr; enabled None: shown in a notebook only (a script or a library stays quiet)."""
    notebook = in_notebook()
    if enabled is None:
        enabled = notebook
    return NotebookProgress() if enabled and notebook else Progress(enabled=enabled)


class NotebookProgress(Progress):
    """One output of the notebook cell, redrawn in place (IPython's display_id) as cells finish: a bar with
    elapsed time and ETA, the cells by status, the runner's messages, the latest cell, and each cell that
    did not run ok (the first MAX_NOT_OK). Plain text, so nothing needs ipywidgets or trusts HTML. It is
    redrawn when something happens (a message, a finished cell): elapsed time and ETA are as of then."""

    WIDTH = 100  # columns of a cell's line (harness.run.progress.cell_line)
    BAR = 30  # characters of the bar
    MAX_NOT_OK = 10
    MAX_MESSAGES = 10  # the latest; a run that restarts many workers says so once per restart
    REDRAW_S = 0.2  # at most this often while cells finish; every message and the end are drawn at once

    def __init__(self) -> None:
        super().__init__(enabled=True)
        self._handle = None
        self._messages: list[str] = []
        self._counts: dict[str, int] = {}
        self._not_ok: list[str] = []
        self._latest = ""
        self._total = self._done = 0
        self._started: float | None = None
        self._drawn_at = 0.0

    def message(self, text: str) -> None:
        self._messages.append(printable(text))
        self._draw(force=True)

    def start(self, total: int, done_before: int, run_dir: Path) -> None:
        import time

        if done_before:
            self._messages.append(f"resuming {printable(str(run_dir))}: {done_before} cells already done")
        self._total, self._started = total, time.monotonic()
        self._draw(force=True)

    def cell_done(self, row: dict[str, Any]) -> None:
        status = str(row["status"])
        self._done += 1
        self._counts[status] = self._counts.get(status, 0) + 1
        self._latest = printable(cell_line(row, self.WIDTH))
        if status != "ok":
            self._not_ok.append(self._latest)
        self._draw()

    def stop(self) -> None:
        if self._handle is not None:
            self._draw(force=True)

    def text(self) -> str:
        """What the display shows now."""
        import time

        earlier = len(self._messages) - self.MAX_MESSAGES
        lines = [f"... {earlier} earlier messages"] if earlier > 0 else []
        lines += self._messages[-self.MAX_MESSAGES :]
        if self._started is not None:
            elapsed = time.monotonic() - self._started
            frac = self._done / self._total if self._total else 1.0
            fill = round(self.BAR * frac)
            left = elapsed / self._done * (self._total - self._done) if self._done else None
            eta = f" · ETA {_clock(left)}" if left is not None and self._done < self._total else ""
            counts = ", ".join(f"{s} {n}" for s, n in sorted(self._counts.items(), key=lambda kv: -kv[1]))
            lines.append(
                f"cells {'█' * fill}{'░' * (self.BAR - fill)} {self._done}/{self._total}"
                f" · elapsed {_clock(elapsed)}{eta}{' · ' + counts if counts else ''}"
            )
        if self._latest:
            lines += ["latest:", *_indented(self._latest)]
        if self._not_ok:
            lines.append("not ok:")
            lines += [line for entry in self._not_ok[: self.MAX_NOT_OK] for line in _indented(entry)]
            if len(self._not_ok) > self.MAX_NOT_OK:
                lines.append(
                    f"  ... and {len(self._not_ok) - self.MAX_NOT_OK} more (every one is in the run's rows)"
                )
        return "\n".join(lines)

    def _draw(self, force: bool = False) -> None:
        import time

        from IPython.display import display

        now = time.monotonic()
        if not force and now - self._drawn_at < self.REDRAW_S:
            return
        self._drawn_at = now
        shown = {"text/plain": self.text()}
        if self._handle is None:
            self._handle = display(shown, raw=True, display_id=True)
        else:
            self._handle.update(shown, raw=True)


def _indented(text: str) -> list[str]:
    return [f"  {line}" for line in text.split("\n")]


def _clock(seconds: float) -> str:
    """0:07, 1:02:03."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
