"""What a person sees while a sweep runs: a progress bar with ETA and one line per finished cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnbench.results.axes import IDENTITY, filled
from attnbench.results.formulas import bytes_text, printable, short_dtype

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


def cell_line(row: dict[str, Any]) -> str:
    """One plain-text line summarising a finished cell."""
    values = filled(row)
    more = "".join(f" {p}" for a in MORE if (p := a.id_part(values)) is not None)
    kv, n_k = row.get("kv_heads", row["heads"]), row.get("seq_k", row["seq_len"])
    lower_right = row.get("causal_align") == "lower-right"
    shape = (
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
    head = f"{row['status']:<11} {row['variant']:<16} {shape:<38}"
    if row.get("time_ms_median") is None:
        return f"{head} {row.get('message', '')}"
    spread = f"±{row['rel_iqr'] / 2:.0%}" if row.get("rel_iqr") is not None else ""
    text = (
        f"{head} {row['time_ms_median']:9.3f} ms {spread:>5}  {bytes_text(row.get('peak_mem_bytes')):>10}  "
        f"{row.get('tflops', float('nan')):7.3f} TFLOP/s  rel_err {row.get('rel_err', float('nan')):.1e}"
    )
    if row["status"] != "ok" or row.get("message"):
        text += f"  {row.get('message', '')}"
    return text


class Progress:
    """rich progress bar + per-cell lines; enabled=False prints nothing (library and test use)."""

    def __init__(self, enabled: bool = True, console=None) -> None:
        self.enabled = enabled
        self._console = console
        self._bar = None
        self._task = None

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)
        return self._console

    def message(self, text: str) -> None:
        if self.enabled:
            self.console.print(printable(text), markup=False, soft_wrap=True)

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
        style = STATUS_STYLE.get(row["status"], "")
        self.console.print(printable(cell_line(row)), style=style, markup=False, soft_wrap=True)
        if self._bar is not None:
            self._bar.advance(self._task)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
