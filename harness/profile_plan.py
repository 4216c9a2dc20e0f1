"""The plan of `attnbench profile`: the one cell and how to profile it, as harness.profile.prepare checked it.

In its own module so that harness.profile (which plans and orchestrates) and harness.profiled_child (whose
parent's handle starts the child from the plan) both import it, and neither imports the other's back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from .spec import CellSpec


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
        c = self.cell
        text = f"{c.device}-{c.dtype}-b{c.batch}-h{c.heads}-n{c.seq_len}-dk{c.d_k}"
        text += f"-dv{c.d_v}" if c.d_v != c.d_k else ""
        text += f"-kv{c.kv_heads}" if c.kv_heads != c.heads else ""
        text += f"-nk{c.seq_k}" if c.seq_k != c.seq_len else ""
        text += f"-{('causal-lr' if c.causal_align == 'lower-right' else 'causal') if c.causal else 'full'}"
        text += f"-w{c.window}" if c.window else ""
        text += f"-pad{c.padding:g}" if c.padding else ""
        text += f"-drop{c.dropout:g}" if c.dropout else ""
        text += f"-{c.mod.replace(':', '')}" if c.mod != "none" else ""
        return f"{text}-{c.pass_}"

    def default_dir_name(self) -> str:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return re.sub(r"[^A-Za-z0-9._-]+", "-", f"profile-{self.cell.variant}-{self.shape}-{stamp}")

    def command(self) -> str:
        """The attnbench command line that profiles this cell again."""
        c = self.cell
        parts = ["attnbench", "profile", "--variant", c.variant, "--device", c.device, "--dtype", c.dtype]
        parts += ["--batch", str(c.batch), "--heads", str(c.heads), "--seq-len", str(c.seq_len)]
        causal = ("lower-right" if c.causal_align == "lower-right" else "yes") if c.causal else "no"
        parts += ["--d-k", str(c.d_k), "--d-v", str(c.d_v), "--causal", causal]
        parts += ["--kv-heads", str(c.kv_heads)] if c.kv_heads != c.heads else []
        parts += ["--seq-k", str(c.seq_k)] if c.seq_k != c.seq_len else []
        parts += ["--window", str(c.window)] if c.window else []
        parts += ["--padding", f"{c.padding:g}"] if c.padding else []
        parts += ["--dropout", f"{c.dropout:g}"] if c.dropout else []
        parts += ["--mod", c.mod] if c.mod != "none" else []
        parts += ["--pass", c.pass_, "--seconds", f"{self.seconds:g}", "--rate", str(self.rate)]
        parts += ["--iters", str(self.iters)] + (["--threads", str(self.threads)] if self.threads else [])
        parts += ["--native"] if self.native else []
        parts += ["--no-py-spy"] if self.py_spy is None else []
        for path in self.variant_files:
            parts += ["--variant-file", path]
        return " ".join(parts)
