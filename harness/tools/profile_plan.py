"""The plan of `attnbench profile`: the one cell and how to profile it, as harness.tools.profile.prepare
checked it.

In its own module so that harness.tools.profile (which plans and orchestrates) and
harness.tools.profiled_child (whose parent's handle starts the child from the plan) both import it, and
neither imports the other's back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.sweep.sweeps import cell_given, flag_name
from attnbench.results.axes import BY_NAME, IDENTITY, Axis

# The order in which the shape and the command have always named the axes they named before they were
# derived from the table: pinned, so that both read as before. An axis not here (a new one) goes just before
# the pass. Whether an axis is written, and how, comes from the table (_quiet; Axis.id_part; its flag and
# grammar through harness.sweep.sweeps.cell_given).
ORDER = ("device", "dtype", "batch", "heads", "seq_len", "d_k", "d_v", "kv_heads", "seq_k", "causal",
         "window", "padding", "dropout", "mod", "pass")  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """Everything `profile_cell` needs, validated."""

    cell: CellSpec
    threads: int = 0  # 0 = torch's default
    seconds: float = 5.0  # total py-spy time, split between the flame graph and the speedscope recording
    rate: int = 100
    iters: int = 5  # calls recorded by torch.profiler
    native: bool = False
    py_spy: str | None = None  # the executable; None: no py-spy part
    py_spy_note: str = ""  # why there is no py-spy part
    variant_files: tuple[str, ...] = ()
    seed: int = 0

    @property
    def shape(self) -> str:
        """The cell in a directory name: its cell_id parts (Axis.id_part) but the variant's, joined by '-',
        those of axes that say nothing here left out (_quiet): 'cpu-float32-b1-h8-n1024-dk64-full-fwd',
        'cuda-bfloat16-b1-h32-n1-dk128-kv8-nk4096-causal-fwd'."""
        values = self.cell.values()
        return "-".join(p for a in _axes(values, "shape") if (p := a.id_part(values)) is not None)

    def default_dir_name(self) -> str:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return re.sub(r"[^A-Za-z0-9._-]+", "-", f"profile-{self.cell.variant}-{self.shape}-{stamp}")

    def command(self) -> str:
        """The attnbench command line that profiles this cell again: its axes (_axes), each value as
        `attnbench run` reads it (harness.sweep.sweeps.cell_given), then how to profile it."""
        c = self.cell
        given, _ = cell_given(c, Settings())
        parts = ["attnbench", "profile", "--variant", c.variant]
        for a in _axes(c.values(), "command"):
            parts += [flag_name(a.option), given[a.option]]
        parts += ["--seconds", f"{self.seconds:g}", "--rate", str(self.rate)]
        parts += ["--iters", str(self.iters)] + (["--threads", str(self.threads)] if self.threads else [])
        parts += ["--native"] if self.native else []
        parts += ["--no-py-spy"] if self.py_spy is None else []
        for path in self.variant_files:
            parts += ["--variant-file", path]
        return " ".join(parts)


def _quiet(axis: Axis, values: Mapping[str, Any]) -> bool:
    """Whether an axis says nothing at this cell's value: one that follows another at that one's value (d_v =
    d_k, kv_heads = heads), one added after the first calling convention at its quiet value, or no padding.
    The other axes of the first convention always say something."""
    if axis.follows:
        return values[axis.name] == values[axis.follows]
    if axis.name == "padding":  # of the first convention (pad0 in cell_id), but left out here at 0, as ever
        return not values["padding"]
    return not axis.core and values[axis.name] == axis.quiet


def _axes(values: Mapping[str, Any], where: str) -> list[Axis]:
    """The axes a profile's shape or command names for a cell, in the order it names them: of the axes of
    identity with a cell_id part of their own (not causal_align, said by causal's word) but the variant (said
    apart), the shape names those that say something; the command names the first convention's always (but
    padding), so that it gives the cell's shape in full, then those that say something, then the pass."""
    axes = sorted((a for a in IDENTITY if a.name != "variant" and a.id is not None), key=_place)
    if where == "shape":
        return [a for a in axes if not _quiet(a, values)]
    axes = [a for a in axes if a.sweep_field]  # a cell-only axis has no flag: the command cannot say it
    always = [a for a in axes if a.core and a.name not in ("padding", "pass")]
    said = [a for a in axes if a not in always and a.name != "pass" and not _quiet(a, values)]
    return [*always, *said, BY_NAME["pass"]]


def _place(axis: Axis) -> float:
    """An axis's place in ORDER; one that is not there goes just before the pass, in the table's order (sorted
    is stable)."""
    return ORDER.index(axis.name) if axis.name in ORDER else ORDER.index("pass") - 0.5
