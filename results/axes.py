"""The axes of a measurement, declared once.

Each `Axis` is one entry of AXES, in the order of a cell's fields, its `cell_id` parts and its schema
columns. Everything that names an axis derives from its entry: the harness's SweepSpec and CellSpec fields,
the text grammar of its values, the `attnbench run` and `attnbench profile` flags and their help, the pytest
plugin's `--attn-*` options, sweep-file keys and API keywords (harness.sweep.options), its part of `cell_id`,
its column and what a row written before it existed measured (results.schema, results.load), and how reports
name it (reports.tables). ARCHITECTURE.md, "A new axis", says what else a new axis needs: its meaning in the
float64 reference, and a capability flag for the variants that support it.

This module is data and pure functions only (no torch, nothing of attnbench): the harness, results and
reports all read it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CORE = object()  # Axis.quiet of an axis of the first calling convention: always in cell_id, never quiet


@dataclass(frozen=True)
class Axis:
    """One axis: how it is given, checked, identified, stored and shown."""

    name: str  # column, sweep-file key, API keyword; flags --name and --attn-name with '-' for '_'
    dtype: str  # pandas dtype of its column (results.schema)
    grammar: str  # how its values are read and checked (harness.sweep.grammar): 'ints', 'causal', 'mods', ...
    help: str  # the flags' help text
    metavar: str  # the flags' value placeholder
    default: tuple = ()  # a sweep's values when none are given; () with `follows`: the followed axis's value
    # The value at which an axis added after the first calling convention says nothing: no cell_id part, left
    # out of report titles, and what a row written before the axis existed measured. CORE: an axis of the
    # first convention, a required cell field, always in cell_id.
    quiet: Any = CORE
    follows: str = ""  # the axis whose value it takes when not given (d_v = d_k, kv_heads = heads)
    # its part of cell_id: a format of its value ('b{}' -> 'b1'), or a function of the whole cell (by axis
    # name); None: no part of its own (causal_align is part of causal's mask word)
    id: str | Callable[[Mapping[str, Any]], str] | None = "{}"
    text: Callable[[Any], str] | None = None  # a value as a reader sees it; None: 'name=value'
    sweep: str = ""  # the SweepSpec field when it is not `name` ('devices'); '-' for a cell-only axis
    attr: str = ""  # the CellSpec attribute when it is not `name` ('pass_': `pass` is a Python keyword)
    role: str = "panel"  # in reports: 'variant', 'group', 'length', 'panel' (one panel per value) or 'label'
    order: int = 100  # position among the reports' panel axes and figure-CSV columns
    csv: bool = False  # every figure CSV names it; False: only where some row is off its quiet value
    identity: bool = True  # part of cell_id and of a cell's equality; False: a label (model)
    flag: str = ""  # the option's name when it is not `name` ('variants': --variants, --attn-variants)
    # the flags' help and placeholder where a front end takes one value (`attnbench profile`): '' = `help`,
    # and `metavar` with its ',...' dropped
    one_help: str = ""
    one_metavar: str = ""

    @property
    def field(self) -> str:
        """The CellSpec attribute."""
        return self.attr or self.name

    @property
    def sweep_field(self) -> str:
        """The SweepSpec field that holds its values ('' for a cell-only axis)."""
        return "" if self.sweep == "-" else self.sweep or self.name

    @property
    def option(self) -> str:
        """The front ends' name for it: the flag without its dashes ('seq_len' -> --seq-len)."""
        return self.flag or self.name

    @property
    def core(self) -> bool:
        return self.quiet is CORE

    def show(self, value: Any) -> str:
        """A value as a reader wants it: 'causal', 'H=8', 'window 512'."""
        return self.text(value) if self.text is not None else f"{self.name}={value}"

    def id_part(self, cell: Mapping[str, Any]) -> str | None:
        """Its part of cell_id for a cell's values (by axis name), or None: it says nothing here."""
        if self.id is None or not self.identity:
            return None
        value = cell[self.name]
        if not self.core and (value == self.quiet if not self.follows else value == cell[self.follows]):
            return None  # an axis added later says nothing at its default: older ids stay the same
        return self.id(cell) if callable(self.id) else self.id.format(value)


def _mask(cell: Mapping[str, Any]) -> str:
    if not cell["causal"]:
        return "full"
    return "causal-lr" if cell.get("causal_align") == "lower-right" else "causal"


def _mod_text(value: Any) -> str:
    kind, _, cap = str(value).partition(":")
    return {"none": "no score mod", "alibi": "ALiBi"}.get(kind, f"{kind} {cap}".strip())


PASS_NAMES = {"fwd": "forward", "fwdbwd": "forward+backward"}

AXES: tuple[Axis, ...] = (
    Axis("variant", "string", "variants", "variants to run (default: every default variant)", "A,B",
         sweep="variants", role="variant", flag="variants"),
    Axis("device", "string", "devices", "devices", "cpu,cuda", default=("cpu",), sweep="devices",
         role="group", text=str),
    Axis("dtype", "string", "dtypes", "element types",
         "float32,...", default=("float32",), sweep="dtypes", role="group", text=str),
    Axis("batch", "Int64", "ints", "batch sizes", "N,...", default=(1,), id="b{}", order=4, csv=True,
         text=lambda v: f"B={v}"),
    Axis("heads", "Int64", "ints", "head counts", "N,...", default=(8,), id="h{}", order=5, csv=True,
         text=lambda v: f"H={v}"),
    Axis("seq_len", "Int64", "lengths", "sequence lengths: 512,1024 or a doubling range 256..8192", "N,...",
         default=(256, 512, 1024, 2048), id="n{}", role="length", text=lambda v: f"N_q={v}",
         one_help="sequence length"),
    Axis("d_k", "Int64", "ints", "query/key head dims", "N,...", default=(64,), id="dk{}", order=2, csv=True),
    Axis("d_v", "Int64", "ints", "value head dims", "N,...", follows="d_k", id="dv{}",
         order=3, csv=True),
    Axis("causal", "boolean", "causal",
         "causal masking: yes is top-left (query i sees keys j <= i), lower-right aligns the last query with "
         "the last key (j <= i + N_k - N_q); a comma list takes several", "no|yes|both|lower-right",
         default=(False,), id=_mask, order=1, csv=True, text=lambda v: "causal" if v else "non-causal",
         one_help="causal masking: yes is top-left (query i sees keys j <= i), lower-right aligns the last "
         "query with the last key (j <= i + N_k - N_q)", one_metavar="no|yes|lower-right"),
    Axis("padding", "Float64", "fractions", "key padding fractions in [0, 1) (0 = none)", "F,...",
         default=(0.0,), id="pad{:g}", order=6, csv=True,
         text=lambda v: "no padding" if float(v) == 0 else f"padding {float(v):g}"),
    Axis("pass", "string", "passes", "forward or forward+backward", "fwd|fwdbwd|both", default=("fwd",),
         sweep="passes", attr="pass_", role="group", text=lambda v: PASS_NAMES.get(str(v), str(v)),
         one_metavar="fwd|fwdbwd"),
    # ---- axes added later: at their quiet value they add nothing to cell_id, so older ids stay the same
    Axis("kv_heads", "Int64", "ints",
         "key/value heads, each dividing every --heads value: grouped-query attention",
         "N,...", quiet=None, follows="heads", id="kv{}", order=7, text=lambda v: f"H_kv={v}"),
    Axis("seq_k", "Int64", "lengths",
         "key lengths N_k apart from the query lengths (--seq-len), e.g. decode: --seq-len 1 --seq-k "
         "1024..65536", "N,...", quiet=None, follows="seq_len", id="nk{}",
         role="length", text=lambda v: f"N_k={v}",
         one_help="key length N_k apart from the query length (--seq-len), e.g. decode: --seq-len 1 "
         "--seq-k 4096"),
    # lower-right is a value of the causal axis in a sweep; a cell holds it here (its mask word in cell_id)
    Axis("causal_align", "string", "-", "what causal means when N_q != N_k", "top-left|lower-right",
         quiet="top-left", id=None, sweep="-", order=8, text=lambda v: f"{v} causal"),
    Axis("window", "Int64", "window",
         "sliding window: each query sees the W keys up to its diagonal; needs --causal yes or lower-right "
         "(0 = none)", "W,...", default=(0,), quiet=0, id="w{}", order=9,
         text=lambda v: "no window" if int(v) == 0 else f"window {int(v)}"),
    Axis("dropout", "Float64", "probabilities",
         "training-mode dropout probabilities of the attention weights, in [0, 1) (0 = none)", "P,...",
         default=(0.0,), quiet=0.0, id="drop{:g}", order=10, csv=True,
         text=lambda v: "no dropout" if float(v) == 0 else f"dropout {float(v):g}"),
    Axis("mod", "string", "mods",
         "score modifications before masking: none, alibi (ALiBi's linear distance bias) or softcap:C "
         "(C * tanh(s / C), C > 0); a comma list takes several", "none|alibi|softcap:C,...",
         default=("none",), quiet="none", id=lambda c: str(c["mod"]).replace(":", ""), order=11,
         text=_mod_text, one_help="score modification before masking: none, alibi (ALiBi's linear distance "
         "bias) or softcap:C (C * tanh(s / C), C > 0)"),
    Axis("lengths", "string", "patterns",
         "packed variable-length batches: B sequences whose lengths follow a seeded pattern and average "
         "--seq-len (constant, uniform, bimodal, longtail; PATTERN:MAX caps the longest); none: one length",
         "none|constant|uniform|bimodal|longtail[:MAX],...", default=("none",), quiet="none",
         id=lambda c: "len-" + str(c["lengths"]).replace(":", ""), order=12,
         text=lambda v: "one length" if str(v) == "none" else f"{v} lengths"),
    Axis("page_size", "Int64", "page sizes",
         "paged-KV decode: K and V in pages of this many tokens, scattered through a page table; each of "
         "the --batch sequences has --seq-len query tokens and a context of --seq-k tokens on average (its "
         "length from --lengths)", "P,...", default=(0,), quiet=0, id="page{}",
         order=13,
         text=lambda v: "contiguous K/V" if int(v) == 0 else f"pages of {int(v)}"),
    # not an axis of identity but a label: the published model(s) whose shape a cell is (harness.sweep.models)
    Axis("model", "string", "models",
         "published models' attention shapes: each gives its heads, kv-heads, d-k and window together, and "
         "labels its cells (not with --heads, --kv-heads, --d-k or --window)", "NAME,...", quiet="",
         identity=False, role="label", text=str),
)  # fmt: skip

BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}
IDENTITY: tuple[Axis, ...] = tuple(a for a in AXES if a.identity)  # a cell's identity, in cell_id order
CELL_AXES: tuple[str, ...] = tuple(a.name for a in IDENTITY)
SWEEP_AXES: tuple[Axis, ...] = tuple(a for a in AXES if a.sweep_field)  # what a sweep gives values for
# what a row written before an axis existed measured (results.load fills it in): the quiet values
QUIET: dict[str, Any] = {a.name: a.quiet for a in AXES if not a.core and not a.follows}
FOLLOWS: dict[str, str] = {a.name: a.follows for a in AXES if a.follows}


def axis(name: str) -> Axis:
    """The axis called `name`; KeyError listing the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown axis {name!r}; known: {', '.join(BY_NAME)}") from None


def cell_id(cell: Mapping[str, Any]) -> str:
    """A cell's identity, for resume, merge and compare, from its values by axis name (a row, or
    CellSpec.to_dict()): 'variant|device|dtype|b1|h8|n256|dk64|dv64|full|pad0|fwd', then a part per axis
    added later that is not at its quiet value ('|kv2', '|nk4096', '|w512', '|drop0.1', '|alibi'). The mask
    word is 'full', 'causal' or 'causal-lr' (lower-right). An axis missing from `cell` is at its quiet value
    (or follows its axis)."""
    values = filled(cell)
    parts = (a.id_part(values) for a in IDENTITY)
    return "|".join(p for p in parts if p is not None)


def filled(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's values by axis name, an axis added later that is missing from it (or None) at its quiet value
    or its followed axis's: what a row written before the axis existed measured."""
    values = dict(cell)
    for a in IDENTITY:
        if not a.core and values.get(a.name) is None:
            values[a.name] = values[a.follows] if a.follows else a.quiet
    return values


def sweep_identity(meta: Mapping[str, Any]) -> str | None:
    """Which sweep a run is, from its meta.json: 16 hex digits of the sha256 of the cells it plans, its
    sweep's values per axis (an axis at none or its quiet value left out, so that a sweep recorded before the
    axis existed is the same sweep) and a rerun's chosen `cells`, never its settings (a longer budget
    measures the same cells). Two runs of one preset or sweep file are one sweep; a value added or dropped
    makes another. None where meta.json records no sweep (results.breaks: MISSING compares a run only with
    the run before it of its sweep)."""
    sweep = meta.get("sweep")
    if not isinstance(sweep, Mapping):
        return None
    quiet = {a.sweep_field: a.quiet for a in SWEEP_AXES if a.quiet is not CORE}
    values = {
        k: v for k, v in sweep.items()
        if k != "settings" and v not in ([], None) and not (k in quiet and v == [quiet[k]])
    }  # fmt: skip
    if isinstance(meta.get("cells"), list):
        values["cells"] = sorted(map(str, meta["cells"]))
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
