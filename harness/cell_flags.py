"""The one cell `attnbench profile` measures, from run-style flags that each take one value.

Only the flag names live here: parsing and range checks are harness.spec's (sweep_from_text), so a
profile refuses exactly what `attnbench run` refuses, in the same words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .spec import CellSpec, sweep_field, sweep_from_text

DEFAULT_SEQ_LEN = 1024  # a sweep's default is four lengths; a profile needs one

# CLI dest -> (flag, axis of harness.spec.sweep_from_text); the values are parsed and validated there
CELL_FLAGS: dict[str, tuple[str, str]] = {
    "device": ("--device", "device"),
    "dtype": ("--dtype", "dtype"),
    "batch": ("--batch", "batch"),
    "heads": ("--heads", "heads"),
    "seq_len": ("--seq-len", "seq_len"),
    "d_k": ("--d-k", "d_k"),
    "d_v": ("--d-v", "d_v"),
    "causal": ("--causal", "causal"),
    "padding": ("--padding", "padding"),
    "pass_": ("--pass", "pass"),
    "kv_heads": ("--kv-heads", "kv_heads"),
    "seq_k": ("--seq-k", "seq_k"),
    "window": ("--window", "window"),
    "dropout": ("--dropout", "dropout"),
    "mod": ("--mod", "mod"),
    "model": ("--model", "model"),
}


def single_cell(variant: str, given: Mapping[str, str | Sequence[str] | None], threads: int = 0) -> CellSpec:
    """The one cell named by run-style flags (dest -> the text given, None = default); ValueError naming
    the bad value, or the flag given more than one value. Parsing and range checks are harness.spec's."""
    texts: dict[str, Any] = {"seq_len": str(DEFAULT_SEQ_LEN), "threads": threads}
    for dest, value in given.items():
        if value is None:
            continue
        flag, axis = CELL_FLAGS[dest]
        values = [value] if isinstance(value, str) else list(value)
        if len(values) != 1:
            raise ValueError(f"{flag} takes one value (profile runs one cell), got {' and '.join(values)}")
        texts[axis] = values[0]
    spec = sweep_from_text(texts)  # errors name the axis as `attnbench run` names its flag
    for flag, axis in CELL_FLAGS.values():
        if len(getattr(spec, sweep_field(axis))) > 1:
            raise ValueError(f"{flag} takes one value (profile runs one cell), got {texts[axis]!r}")
    (cell,) = spec.cells([variant])
    return cell
