"""Sweeps as data: a frozen SweepSpec expands into hashable CellSpecs, both made from the axis table.

A CellSpec holds one value per axis (results.axes.AXES) and is the identity of a measurement: resume,
merge and compare match cells by `cell_id`. A SweepSpec holds each axis's values and the Settings
(harness.sweep.settings); it checks every value when it is made, by the rules front ends check their options
with (harness.sweep.grammar), plus the rules that tie axes together. Where a sweep comes from (presets, sweep
files, flags, API keywords) is harness.sweep.sweeps.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from dataclasses import asdict, fields, replace
from typing import Any

from attnbench.harness.sweep.grammar import LOWER_RIGHT, check_axis
from attnbench.harness.sweep.models import MODEL_AXES, ModelShape, model, refuse_shape_beside_models
from attnbench.harness.sweep.settings import REMOVED_OPTIONS, Settings
from attnbench.results.axes import AXES, IDENTITY, SWEEP_AXES, cell_id
from attnbench.variants.lengths import check_holds, draw_lengths, page_table
from attnbench.variants.mods import parse_mod
from attnbench.variants.problem import Problem, extra_options

_TYPES = {"string": str, "Int64": int, "Float64": float, "boolean": bool}
LENGTHS = tuple(a.name for a in AXES if a.role == "length")  # what a series grows: seq_len, seq_k


def _made_here(cls: type, doc: str) -> type:
    """A class made by make_dataclass, named as if written here (pickle finds it; repr reads well)."""
    cls.__module__, cls.__qualname__, cls.__doc__ = __name__, cls.__name__, doc
    return cls


class _Cell:
    """What a CellSpec does; its fields are the axes (below)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mod", parse_mod(self.mod))  # canonical text: one cell_id per meaning
        for a in AXES:
            if a.follows and getattr(self, a.field) is None:  # kv_heads = heads, seq_k = seq_len, d_v = d_k
                object.__setattr__(self, a.field, getattr(self, AXES_BY_NAME[a.follows].field))

    def values(self) -> dict[str, Any]:
        """Its value per axis, by axis name ('pass', not the attribute pass_)."""
        return {a.name: getattr(self, a.field) for a in AXES}

    @property
    def cell_id(self) -> str:
        return cell_id(self.values())

    @property
    def shape_key(self) -> tuple:
        """Everything but the variant and the pass: cells with one shape_key share inputs and reference."""
        return tuple(getattr(self, a.field) for a in IDENTITY if a.name not in ("variant", "pass"))

    @property
    def rank_key(self) -> tuple:
        """Everything but the variant: the cells one ranking puts in order (reports.tables.ranking)."""
        return tuple(getattr(self, a.field) for a in IDENTITY if a.name != "variant")

    @property
    def group_key(self) -> tuple:
        """Everything but the two lengths, seq_len and seq_k: a scaling series (one line on a plot), which
        grows N_q and N_k together, or either alone (a decode series grows seq_k at a fixed seq_len)."""
        return tuple(getattr(self, a.field) for a in IDENTITY if a.name not in LENGTHS)

    def problem(self) -> Problem:
        """What its variant's capability check sees: the cell's axes, under their own names."""
        return Problem(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Problem)})

    @property
    def paged(self) -> bool:
        """A paged-KV decode cell (variants/paged.py)."""
        return bool(self.page_size)

    @property
    def dims(self) -> tuple[int, int, int]:
        """(B, N_q, N_k) of the tensors a variant is handed: a packed batch is one sequence of its T = B x N
        tokens (variants.lengths); a paged cell's keys, its contexts' mean."""
        if self.lengths == "none" or self.paged:
            return self.batch, self.seq_len, self.seq_k
        return 1, self.batch * self.seq_len, self.batch * self.seq_k

    def seq_lens(self) -> list[int] | None:
        """A packed batch's sequence lengths (variants.lengths: seeded by the pattern, B and N), a paged
        cell's context lengths (averaging N_k, each at least N_q: constant without a pattern), or None."""
        if self.paged:
            pattern = "constant" if self.lengths == "none" else self.lengths
            return draw_lengths(pattern, self.batch, self.seq_k, least=self.seq_len)
        return None if self.lengths == "none" else draw_lengths(self.lengths, self.batch, self.seq_len)

    def block_table(self) -> list[list[int]] | None:
        """A paged cell's page table (variants.lengths.page_table), or None."""
        return page_table(self.seq_lens(), self.page_size) if self.paged else None

    def key_lengths(self) -> list[int] | None:
        """Valid keys per batch element: element b keeps N_k - round(p * N_k * (b + 1) / B), at least 1."""
        return padded_lengths(self.seq_k, self.batch, self.padding)

    def options(self) -> dict[str, Any]:
        """The keyword arguments of the added axes this cell passes to a variant (and the float64 gate),
        only those not at their default: causal_align="lower-right", window=W, mod="alibi"."""
        return extra_options(causal_align=self.causal_align, window=self.window, mod=self.mod)

    def to_dict(self) -> dict[str, Any]:
        return self.values()

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        """A cell from its row or dict; a row written before an axis existed gets that axis's default."""
        return cls(**{a.field: d[a.name] for a in AXES if a.name in d or a.core})


def padded_lengths(n_k: int, batch: int, padding: float) -> list[int] | None:
    """The key lengths (B,) of every padded problem attnbench makes (a run's cells and `check`): batch
    element b keeps N_k - round(p * N_k * (b + 1) / B) keys, at least 1; None without padding."""
    if padding <= 0:
        return None
    return [max(1, n_k - round(padding * n_k * (i + 1) / batch)) for i in range(batch)]


def _cell_field(a) -> tuple:
    kind = _TYPES[a.dtype]
    if a.core:  # the first calling convention's axes: required, in this order
        return (a.field, kind)
    if not a.identity:  # a label (model): read, never compared
        return (a.field, kind, dataclasses.field(default=a.quiet, compare=False))
    return (
        a.field,
        kind | None if a.follows else kind,
        dataclasses.field(default=None if a.follows else a.quiet),
    )


AXES_BY_NAME = {a.name: a for a in AXES}
CellSpec = _made_here(
    dataclasses.make_dataclass(
        "CellSpec", [_cell_field(a) for a in AXES], bases=(_Cell,), frozen=True, order=True
    ),
    "One measurement: a value for every axis of results.axes.AXES (fields in its order; `pass_` for "
    "the pass; `model` is a label, not part of equality or cell_id).",
)


class _Sweep:
    """What a SweepSpec does; its fields are the axes' values (below) and its settings."""

    def __post_init__(self) -> None:
        if not isinstance(self.settings, Settings):
            raise ValueError(
                f"settings must be a harness.sweep.settings.Settings, got {type(self.settings).__name__}"
            )
        for (
            a
        ) in SWEEP_AXES:  # each axis's own rule: the one its options are read with (harness.sweep.grammar)
            value = getattr(self, a.sweep_field)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise ValueError(f"{a.name} needs a list of values, got {value!r}")
            object.__setattr__(self, a.sweep_field, check_axis(a, tuple(value)))
        self._check_together()

    def _check_together(self) -> None:
        """The rules that tie axes together."""
        for kv in self.kv_heads:
            for h in self.heads:
                if h % kv:
                    raise ValueError(
                        f"--kv-heads {kv} does not divide --heads {h}: each k/v head serves an equal share "
                        "of the query heads"
                    )
        windows = [w for w in self.window if w > 0]
        if windows and False in self.causal:
            raise ValueError(
                f"--window {windows[0]} needs causal masking (it counts back from the diagonal); give "
                "--causal yes or lower-right, not no or both"
            )
        windowed = [m for m in self.models() if m.window]
        if windowed and False in self.causal:
            m = windowed[0]
            raise ValueError(
                f"--model {m.name} has a sliding window of {m.window} keys, which needs causal masking; give "
                "--causal yes or lower-right, not no or both"
            )
        if self.model:
            default = {a.name: a.default for a in SWEEP_AXES}
            given = [a for a in MODEL_AXES if getattr(self, a) != default[a]]
            refuse_shape_beside_models(given)
        self._check_packed()
        if self.settings.timing != "auto" and "cuda" not in self.devices:
            raise ValueError(
                f"--timing {self.settings.timing!r} chooses how CUDA cells are timed, but the sweep has no "
                "cuda device: CPU cells are always timed with perf_counter; drop --timing or add --device "
                "cuda"
            )

    def _check_packed(self) -> None:
        """A packed batch (--lengths) is self-attention over whole sequences: its own pattern's lengths, no
        key padding, no separate key length, no positional mod or dropout; and its lengths must hold B x N."""
        packed = [p for p in self.lengths if p != "none"]
        if any(self.page_size):
            return self._check_paged(packed)
        if not packed:
            return
        clash = [
            flag
            for flag, given in (
                ("--padding", any(self.padding)),
                ("--seq-k", bool(self.seq_k)),
                ("--mod", any(m != "none" for m in self.mod)),
                ("--dropout", any(self.dropout)),
            )
            if given
        ]
        if clash:
            raise ValueError(
                f"--lengths {packed[0]} packs whole sequences of their own lengths; it does not go with "
                f"{clash[0]} (give --lengths none for that)"
            )
        _check_holds(packed, self.batch, self.seq_len)

    def _check_paged(self, patterns: list[str]) -> None:
        """A paged cell (--page-size) is a decode step: its queries sit at the end of their context
        (causal lower-right or none), never more of them than the context, forward only, and no key
        padding, window, mod or dropout; --lengths draws the contexts, averaging --seq-k."""
        clash = [
            flag
            for flag, given in (
                ("--padding", any(self.padding)),
                ("--window", any(self.window)),
                ("--mod", any(m != "none" for m in self.mod)),
                ("--dropout", any(self.dropout)),
                ("--pass fwdbwd", "fwdbwd" in self.passes),
                ("--causal yes", True in self.causal),
            )
            if given
        ]
        if clash:
            raise ValueError(
                f"--page-size reads a paged K/V cache in a decode step (forward, its queries at the end of "
                f"their context: --causal lower-right or no); it does not go with {clash[0]}"
            )
        # without --seq-k each cell's context is its own seq_len (seq_k follows seq_len), so no pair can clash
        for n_q, n_k in itertools.product(self.seq_len, self.seq_k):
            if n_q > n_k:
                raise ValueError(
                    f"--seq-len {n_q} is more query tokens than the context (--seq-k {n_k}) of a paged cell: "
                    f"every --seq-len meets every --seq-k, so give only lengths that fit or run them apart"
                )
        _check_holds(patterns, self.batch, self.seq_k or self.seq_len)

    def models(self) -> list[ModelShape]:
        """The records of harness.sweep.models the sweep names, in its order."""
        return [model(name) for name in self.model]

    def cells(self, variant_names: list[str]) -> list:
        """All cells, grouped so that each shape runs every variant back to back (interleaved, fair under
        drifting machine noise) and seq_k, then seq_len, ascend in a series (OOM skip-ahead): the axes loop
        in the table's order, the lengths innermost.

        With models, each model's (heads, kv_heads, d_k, window) stands in for the product of those four
        axes, and its cells carry its label; two models of one shape give one cell with both labels."""
        loops = self._loops()
        out: dict[str, Any] = {}
        for combo in itertools.product(*(values for _, values in loops)):
            given: dict[str, Any] = {}
            for (names, _), value in zip(loops, combo, strict=True):
                given.update(zip(names, value, strict=True))
            for name in variant_names:
                cell = CellSpec(**{AXES_BY_NAME[a].field: v for a, v in given.items()}, variant=name)
                known = out.get(cell.cell_id)
                if known is None:
                    out[cell.cell_id] = cell
                elif cell.model and cell.model not in known.model.split(", "):  # one shape, two models
                    out[cell.cell_id] = replace(known, model=f"{known.model}, {cell.model}")
        return list(out.values())

    def _loops(self) -> list[tuple[tuple[str, ...], list[tuple]]]:
        """(the axes a loop sets, its values as tuples of theirs), outermost first."""
        loops: list[tuple[tuple[str, ...], list[tuple]]] = []
        for a in SWEEP_AXES:
            values = getattr(self, a.sweep_field)
            if a.name in ("variant", "model") or a.name in LENGTHS:
                continue
            if a.name in MODEL_AXES and self.model:
                if a.name == MODEL_AXES[0]:  # one loop over the models' shapes in place of the four axes
                    shapes = [(m.heads, m.kv_heads, m.d_k, m.window, m.label) for m in self.models()]
                    loops.append(((*MODEL_AXES, "model"), shapes))
                continue
            if a.name == "causal":  # lower-right is a causal value of a sweep, and two fields of a cell
                loops.append((("causal", "causal_align"), [_causal(c) for c in values]))
            else:
                loops.append(((a.name,), [(v,) for v in values] or [(None,)]))  # (): follows its axis
        for name in reversed(LENGTHS):  # seq_k, then seq_len innermost: a series ascends
            values = sorted(getattr(self, AXES_BY_NAME[name].sweep_field))
            loops.append(((name,), [(v,) for v in values] or [(None,)]))
        return loops

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["settings"] = asdict(self.settings)
        d["settings"]["env"] = dict(self.settings.env)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown sweep key(s) {sorted(unknown)}; known: {sorted(known)}")
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "settings"}
        settings = d.get("settings") or {}
        names = sorted(f.name for f in fields(Settings))
        unknown = set(settings) - set(names)
        if unknown:
            raise ValueError(f"unknown setting(s) {sorted(unknown)}; known: {names}")
        return cls(**kw, settings=Settings(**settings))

    @classmethod
    def from_meta(cls, d: dict[str, Any], source: Any = "meta.json"):
        """The sweep a run's meta.json recorded (its "sweep"). A run written before the timing setting
        existed timed its CUDA cells with events, the one CUDA mode then: its resume, rerun and repro line
        keep events rather than take today's default (auto), so that its rows stay comparable; a setting
        removed since (REMOVED_OPTIONS) is left out. A sweep this
        attnbench cannot read is a RunDirError naming `source` (the file) and what is wrong."""
        try:
            d = dict(d)
            settings = dict(d.get("settings") or {})
            for old in REMOVED_OPTIONS:  # a setting this attnbench no longer has: its runs still read
                settings.pop(old, None)
            if "timing" not in settings and "cuda" in (d.get("devices") or ()):
                settings["timing"] = "events"
            return cls.from_dict({**d, "settings": settings})
        except (TypeError, ValueError) as exc:
            from attnbench.results.store import RunDirError

            raise RunDirError(f"{source} is damaged: its `sweep` cannot be read: {exc}") from None


def _check_holds(patterns, batches, means) -> None:
    """ValueError, as --lengths, where a pattern's longest sequence cannot hold B x mean tokens."""
    for pattern, batch, mean in itertools.product(patterns, batches, means):
        try:
            check_holds(pattern, batch, mean)
        except ValueError as exc:
            raise ValueError(f"--lengths {exc}") from None


def _causal(value: bool | str) -> tuple[bool, str]:
    """A sweep's causal value -> the cell's (causal, causal_align)."""
    return (True, "lower-right") if value == LOWER_RIGHT else (bool(value), "top-left")


SweepSpec = _made_here(
    dataclasses.make_dataclass(
        "SweepSpec",
        [(a.sweep_field, tuple, dataclasses.field(default=a.default)) for a in SWEEP_AXES]
        + [("settings", Settings, dataclasses.field(default_factory=Settings))],
        bases=(_Sweep,),
        frozen=True,
    ),
    "The axes of a sweep (one field of values per axis of results.axes, named by Axis.sweep_field) and its "
    "settings; `cells()` is their product. Empty `variants` means every default variant.",
)


def wide_windows(cells: Iterable[CellSpec]) -> list[str]:
    """A note per window at least as wide as some cells' keys, naming those N (N_k where the keys grow apart
    from the queries): each query of such a cell sees every key causal masking lets it, so the cell is the
    causal one without a window under another id (trial T: `--window 512` at N 128 and 256 ran as `w512`
    cells, read as a window's speed-up). The ids stay: a run and its dry run say it at the start."""
    wide: dict[int, set[int]] = {}
    apart = False
    for c in cells:
        if c.window and c.window >= c.seq_k:
            wide.setdefault(c.window, set()).add(c.seq_k)
            apart = apart or c.seq_len != c.seq_k
    n = "N_k" if apart else "N"
    return [
        f"note: window {w:,} ≥ {n} at {n} = {', '.join(f'{k:,}' for k in sorted(ks))}: those cells are the "
        "same as causal without a window"
        for w, ks in sorted(wide.items())
    ]
