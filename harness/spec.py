"""Sweeps as data: a frozen SweepSpec (from a preset, a TOML file and flags) expands into hashable CellSpecs.

A CellSpec holds one value per axis and is the identity of a measurement: resume, merge and compare
match cells by `cell_id`. Every value is validated here, before any cell runs, with ValueErrors that
name the bad value.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from attnbench.results.formulas import cell_id
from attnbench.variants.mods import NONE, parse_mod
from attnbench.variants.problem import DTYPES, Problem, extra_options

from .models import ModelShape, model
from .timing import Budget

PRESET_DIR = Path(__file__).parent / "presets"
DEVICES = ("cpu", "cuda")
PASSES = ("fwd", "fwdbwd")
LOWER_RIGHT = "lower-right"  # a causal value of a sweep: causal, aligned lower-right (CellSpec.causal_align)
CAUSAL_CHOICES = {"no": (False,), "yes": (True,), "both": (False, True), LOWER_RIGHT: (LOWER_RIGHT,)}
PASS_CHOICES = {"fwd": ("fwd",), "fwdbwd": ("fwdbwd",), "both": ("fwd", "fwdbwd")}
MAX_SEQ_LEN = 1 << 24
MODEL_AXES = ("heads", "kv_heads", "d_k", "window")  # what a model (harness.models) gives, together
# How CUDA cells are timed (harness.timing): chosen per cell (auto), CUDA events around each call, or replays
# of a CUDA graph; CPU cells are always timed with perf_counter.
TIMINGS = ("auto", "events", "graph")


@dataclass(frozen=True, order=True)
class CellSpec:
    """One measurement: a value for every axis."""

    variant: str
    device: str
    dtype: str
    batch: int
    heads: int
    seq_len: int
    d_k: int
    d_v: int
    causal: bool
    padding: float  # fraction of keys masked at the end of the last batch element (0 = no key padding)
    pass_: str  # "fwd" or "fwdbwd"
    # Axes added later (AXES.md): at their defaults they change nothing, the cell_id included.
    kv_heads: int | None = None  # key/value heads (grouped-query attention when < heads); None: = heads
    seq_k: int | None = None  # keys N_k (seq_len is N_q, the queries); None: = seq_len
    causal_align: str = "top-left"  # "lower-right" (only when causal): query i sees keys j <= i + N_k - N_q
    window: int = 0  # sliding window (with causal): query i sees the W keys up to its diagonal; 0 = none
    dropout: float = 0.0  # training-mode dropout probability of the attention weights (0 = none)
    mod: str = NONE  # score modification (variants.mods): "none", "alibi", "softcap:C"
    # Not an axis: the published model(s) whose shape this is ('Llama-3-8B', joined by ', ' when two models
    # share it), for reading only. Left out of eq, hash, order and cell_id: a cell rebuilt without it (a
    # resume, a repro) is the same measurement.
    model: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mod", parse_mod(self.mod))  # canonical text: one cell_id per meaning
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.seq_k is None:
            object.__setattr__(self, "seq_k", self.seq_len)

    @property
    def cell_id(self) -> str:
        return cell_id(
            self.variant, self.device, self.dtype, self.batch, self.heads, self.seq_len, self.d_k, self.d_v,
            self.causal, self.padding, self.pass_, kv_heads=self.kv_heads, seq_k=self.seq_k,
            causal_align=self.causal_align, window=self.window, dropout=self.dropout, mod=self.mod,
        )  # fmt: skip

    @property
    def shape_key(self) -> tuple:
        """Everything but the variant: cells with one shape_key share inputs and reference."""
        return (
            self.device,
            self.dtype,
            self.batch,
            self.heads,
            self.seq_len,
            self.d_k,
            self.d_v,
            self.causal,
            self.padding,
            self.kv_heads,
            self.seq_k,
            self.causal_align,
            self.window,
            self.dropout,
            self.mod,
        )

    @property
    def group_key(self) -> tuple:
        """Everything but the two lengths, seq_len and seq_k: a scaling series (one line on a plot), which
        grows N_q and N_k together, or either alone (a decode series grows seq_k at a fixed seq_len)."""
        return (
            self.variant,
            self.device,
            self.dtype,
            self.batch,
            self.heads,
            self.d_k,
            self.d_v,
            self.causal,
            self.padding,
            self.pass_,
            self.kv_heads,
            self.causal_align,
            self.window,
            self.dropout,
            self.mod,
        )

    def problem(self) -> Problem:
        return Problem(
            device=self.device,
            dtype=self.dtype,
            batch=self.batch,
            heads=self.heads,
            seq_q=self.seq_len,
            seq_k=self.seq_k,
            d_k=self.d_k,
            d_v=self.d_v,
            causal=self.causal,
            padding=self.padding > 0,
            dropout=self.dropout > 0,
            dropout_p=self.dropout,
            backward=self.pass_ == "fwdbwd",
            kv_heads=self.kv_heads,
            causal_align=self.causal_align,
            window=self.window,
            mod=self.mod,
        )

    def key_lengths(self) -> list[int] | None:
        """Valid keys per batch element: element b keeps N_k - round(p * N_k * (b + 1) / B), at least 1."""
        if self.padding <= 0:
            return None
        n, b = self.seq_k, self.batch
        return [max(1, n - round(self.padding * n * (i + 1) / b)) for i in range(b)]

    def options(self) -> dict[str, Any]:
        """The keyword arguments of the added axes this cell passes to a variant (and the float64 gate),
        only those not at their default: causal_align="lower-right", window=W, mod="alibi"."""
        return extra_options(causal_align=self.causal_align, window=self.window, mod=self.mod)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CellSpec:
        """A cell from its row or dict; a row written before an axis existed gets that axis's default."""
        d = dict(d)
        d["pass_"] = d.pop("pass")
        # a row written before an axis existed lacks its key: the field's default is what it measured
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d or f.default is MISSING})


_BUDGET = Budget()


@dataclass(frozen=True)
class Settings:
    """How each cell is measured (not part of its identity). The sampling budget's fields and defaults are
    harness.timing.Budget's (warm-up and sampling ms, sample counts, the IQR stop), kept flat here so that a
    sweep file's [settings] table and meta.json list them beside the others."""

    warmup_ms: float = _BUDGET.warmup_ms
    budget_ms: float = _BUDGET.budget_ms
    min_samples: int = _BUDGET.min_samples
    max_samples: int = _BUDGET.max_samples
    target_rel_iqr: float = _BUDGET.target_rel_iqr
    min_ms: float = _BUDGET.min_ms  # sampled time needed before a stable IQR may stop sampling early
    cell_timeout: float = 600.0  # seconds for a whole cell: gate, timing and memory
    calibrate_ms: float = 1000.0  # the run's calibration: sampling ms for each matmul dtype and for the copy
    threads: int = 0  # CPU threads for torch; 0 = torch's default
    check_rows: int = 1024  # query rows checked against float64 (all rows when N is at most this)
    grad_check_elems: int = 1 << 24  # gradients are checked when B*H*N_q*N_k is at most this
    seed: int = 0
    flush_l2: bool = True
    # CUDA cells: "auto" (per cell, harness.timing.choose_timing), "events" or "graph"; CPU: perf_counter
    timing: str = "auto"
    memory_guard: float = 0.9  # skip cells whose predicted peak exceeds this fraction of free memory
    # Environment variables set in the worker processes before they start (allocator and threading knobs
    # that are read once at start-up); sorted (name, value) pairs, recorded in meta.json.
    env: tuple[tuple[str, str], ...] = ()
    # CPUs the worker processes are pinned to (os.sched_setaffinity before torch starts its threads);
    # empty: wherever the OS puts them. Recorded with what the worker reports in meta.json.
    cpu_affinity: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", normalise_env(self.env))
        object.__setattr__(self, "cpu_affinity", normalise_cpus(self.cpu_affinity))
        for name in ("warmup_ms", "budget_ms", "min_ms", "cell_timeout", "target_rel_iqr", "calibrate_ms"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name} must be a positive number, got {getattr(self, name)!r}")
        if self.threads < 0:
            raise ValueError(f"threads must be 0 (default) or positive, got {self.threads}")
        if self.min_samples < 5 or self.max_samples < self.min_samples:
            raise ValueError(
                f"need 5 <= min_samples <= max_samples, got {self.min_samples}, {self.max_samples}"
            )
        if not 0 < self.memory_guard <= 1:
            raise ValueError(f"memory_guard must lie in (0, 1], got {self.memory_guard}")
        if self.timing not in TIMINGS:
            raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, got {self.timing!r}")


@dataclass(frozen=True)
class SweepSpec:
    """The axes of a sweep; `cells()` is their product. Empty `variants` means every default variant."""

    variants: tuple[str, ...] = ()
    devices: tuple[str, ...] = ("cpu",)
    dtypes: tuple[str, ...] = ("float32",)
    batch: tuple[int, ...] = (1,)
    heads: tuple[int, ...] = (8,)
    seq_len: tuple[int, ...] = (256, 512, 1024, 2048)
    d_k: tuple[int, ...] = (64,)
    d_v: tuple[int, ...] = ()  # empty: d_v = d_k
    causal: tuple[bool | str, ...] = (False,)  # False, True (top-left) or "lower-right"
    padding: tuple[float, ...] = (0.0,)
    passes: tuple[str, ...] = ("fwd",)
    kv_heads: tuple[int, ...] = ()  # empty: kv_heads = heads; each must divide every heads value
    seq_k: tuple[int, ...] = ()  # empty: seq_k = seq_len
    window: tuple[int, ...] = (0,)  # 0 = none; W > 0 needs causal
    dropout: tuple[float, ...] = (0.0,)  # training-mode dropout probabilities, each in [0, 1)
    mod: tuple[str, ...] = (NONE,)  # score modifications: "none", "alibi", "softcap:C" (variants.mods)
    # names of harness.models: each gives heads, kv_heads, d_k and window together (in place of those four
    # axes, which then stay at their defaults); empty: no model, the four axes are a product as usual
    model: tuple[str, ...] = ()
    settings: Settings = field(default_factory=Settings)

    def __post_init__(self) -> None:
        _positive_ints("seq_len", self.seq_len, hi=MAX_SEQ_LEN)
        _positive_ints("seq_k", self.seq_k, hi=MAX_SEQ_LEN, allow_empty=True)
        for name in ("batch", "heads", "d_k", "d_v", "kv_heads"):
            _positive_ints(name, getattr(self, name), allow_empty=name in ("d_v", "kv_heads"))
        for kv in self.kv_heads:
            for h in self.heads:
                if h % kv:
                    raise ValueError(
                        f"kv_heads {kv} does not divide heads {h}: each k/v head serves heads / kv_heads "
                        "query heads"
                    )
        if not self.window:
            raise ValueError("window needs at least one value (0 = none)")
        for w in self.window:
            if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                raise ValueError(f"window must be 0 (none) or a positive number of keys, got {w!r}")
        _known("device", self.devices, DEVICES)
        _known("dtype", self.dtypes, DTYPES)
        _known("pass", self.passes, PASSES)
        for p in self.padding:
            if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1):
                raise ValueError(f"padding must be a fraction in [0, 1), got {p!r}")
        if not self.dropout:
            raise ValueError("dropout needs at least one value")
        for p in self.dropout:
            if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1):
                raise ValueError(f"dropout must be a probability in [0, 1), got {p!r}")
        if len(set(map(float, self.dropout))) != len(self.dropout):
            raise ValueError(f"dropout lists a value twice: {list(self.dropout)}")
        if isinstance(self.mod, str) or not self.mod:
            raise ValueError(f"mod needs a list of one or more values, got {self.mod!r}")
        object.__setattr__(self, "mod", tuple(parse_mod(m) for m in self.mod))  # canonical texts
        if len(set(self.mod)) != len(self.mod):
            raise ValueError(f"mod lists a value twice: {list(self.mod)}")
        for c in self.causal:
            if not isinstance(c, bool) and c != LOWER_RIGHT:
                raise ValueError(f"causal values must be booleans or {LOWER_RIGHT!r}, got {c!r}")
        windows = [w for w in self.window if w > 0]
        if windows and False in self.causal:
            raise ValueError(
                f"window {windows[0]} needs causal masking (it counts back from the diagonal); give --causal "
                "yes or lower-right, not no or both"
            )
        self._check_models()
        if self.settings.timing != "auto" and "cuda" not in self.devices:
            raise ValueError(
                f"timing {self.settings.timing!r} chooses how CUDA cells are timed, but the sweep has no "
                "cuda device: CPU cells are always timed with perf_counter; drop --timing or add --device "
                "cuda"
            )
        for name in ("variants", "devices", "dtypes", "passes", "causal", "model"):
            vals = getattr(self, name)
            if len(set(vals)) != len(vals):
                raise ValueError(f"{name} lists a value twice: {list(vals)}")

    def models(self) -> list[ModelShape]:
        """The records of harness.models the sweep names, in its order."""
        return [model(name) for name in self.model]

    def _check_models(self) -> None:
        for name in self.model:
            if not isinstance(name, str):
                raise ValueError(f"model must be names, got {name!r}")
            model(name)  # ValueError listing the known names
        if not self.model:
            return
        default = SweepSpec.__dataclass_fields__
        given = [a for a in MODEL_AXES if getattr(self, a) != default[a].default]
        if given:  # the text front ends say this first, by the flag's name (build_sweep)
            raise ValueError(
                f"{given[0]} {list(getattr(self, given[0]))} conflicts with model {', '.join(self.model)}: a "
                "model gives heads, kv_heads, d_k and window together"
            )
        windowed = [m for m in self.models() if m.window]
        if windowed and False in self.causal:
            m = windowed[0]
            raise ValueError(
                f"model {m.name} has a sliding window of {m.window} keys, which needs causal masking; give "
                "--causal yes or lower-right, not no or both"
            )

    def cells(self, variant_names: list[str]) -> list[CellSpec]:
        """All cells, grouped so that each shape runs every variant back to back (interleaved,
        fair under drifting machine noise) and seq_k, then seq_len, ascend in a series (OOM skip-ahead).

        With models, each model's (heads, kv_heads, d_k, window) stands in for the product of those four
        axes, and its cells carry its label; two models of one shape give one cell with both labels."""
        d_vs = self.d_v or (None,)
        kvs = self.kv_heads or (None,)
        n_ks = sorted(self.seq_k) or (None,)
        # (heads, kv_heads, d_k, window or None: the window axis's, label) per head shape
        if self.model:
            shapes = [(m.heads, m.kv_heads, m.d_k, m.window, m.label) for m in self.models()]
            windows: tuple = (None,)
        else:
            shapes = [(h, kv, dk, None, "") for h, kv, dk in itertools.product(self.heads, kvs, self.d_k)]
            windows = self.window
        out: dict[str, CellSpec] = {}
        for device, dtype, b, (
            h,
            kv,
            dk,
            mw,
            label,
        ), dv, causal, w, pad, drop, mod, pas, nk, n in itertools.product(
            self.devices,
            self.dtypes,
            self.batch,
            shapes,
            d_vs,
            self.causal,
            windows,
            self.padding,
            self.dropout,
            self.mod,
            self.passes,
            n_ks,
            sorted(self.seq_len),
        ):
            align = "lower-right" if causal == LOWER_RIGHT else "top-left"
            w = mw if w is None else w
            for name in variant_names:
                dv_ = dk if dv is None else dv
                cell = CellSpec(
                    name, device, dtype, b, h, n, dk, dv_, bool(causal), float(pad), pas, kv_heads=kv,
                    seq_k=nk, causal_align=align, window=w, dropout=float(drop), mod=mod,
                    model=label,
                )  # fmt: skip
                known = out.get(cell.cell_id)
                if known is None:
                    out[cell.cell_id] = cell
                elif label and label not in known.model.split(", "):  # one shape, two models: one cell
                    out[cell.cell_id] = replace(known, model=f"{known.model}, {label}")
        return list(out.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["settings"] = asdict(self.settings)
        d["settings"]["env"] = dict(self.settings.env)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown sweep key(s) {sorted(unknown)}; known: {sorted(known)}")
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "settings"}
        settings = d.get("settings") or {}
        unknown = set(settings) - {f.name for f in fields(Settings)}
        if unknown:
            raise ValueError(
                f"unknown setting(s) {sorted(unknown)}; known: {sorted(f.name for f in fields(Settings))}"
            )
        return cls(**kw, settings=Settings(**settings))

    @classmethod
    def from_meta(cls, d: dict[str, Any]) -> SweepSpec:
        """The sweep a run's meta.json recorded (its "sweep"). A run written before the timing setting
        existed timed its CUDA cells with events, the one CUDA mode then: its resume, rerun and repro line
        keep events rather than take today's default (auto), so that its rows stay comparable."""
        d = dict(d)
        settings = dict(d.get("settings") or {})
        if "timing" not in settings and "cuda" in (d.get("devices") or ()):
            settings["timing"] = "events"
        return cls.from_dict({**d, "settings": settings})


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def normalise_env(env) -> tuple[tuple[str, str], ...]:
    """A mapping or (name, value) pairs -> sorted pairs of strings; ValueError naming a bad entry."""
    pairs = env.items() if isinstance(env, dict) else env
    out: dict[str, str] = {}
    for pair in pairs:
        if isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"env entries must be NAME = value pairs, got {pair!r}")
        name, value = pair
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ValueError(f"env name {name!r} is not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"env {name} must be a string or an integer, got {value!r}")
        out[name] = str(value)
    return tuple(sorted(out.items()))


def normalise_cpus(cpus) -> tuple[int, ...]:
    """CPU numbers (or the --cpu-affinity text '0,1' / '0-3') -> sorted unique ints; ValueError if bad."""
    if isinstance(cpus, str):
        return parse_cpu_list("cpu_affinity", cpus)
    out = set()
    for c in cpus:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"cpu_affinity takes CPU numbers (0, 1, ...), got {c!r}")
        out.add(c)
    return tuple(sorted(out))


def parse_cpu_list(name: str, text: str) -> tuple[int, ...]:
    """'0,1' or '0-3' or '0-3,6' (as taskset -c) -> (0, 1, 2, 3, 6); ValueError naming the bad part."""
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo_s, dash, hi_s = part.partition("-")
        try:
            lo, hi = int(lo_s), int(hi_s) if dash else int(lo_s)
        except ValueError:
            raise ValueError(f"{name} takes CPU numbers like 0,1 or 0-3, got {part!r}") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"{name} range {part!r} must go from a CPU number up to a larger one")
        out.update(range(lo, hi + 1))
    if not out:
        raise ValueError(f"{name} needs at least one CPU, got {text!r}")
    return tuple(sorted(out))


def cpus_allowed() -> set[int]:
    """The CPUs this process may run on (its affinity mask; every CPU where the OS has no such call)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def check_cpu_affinity(cpus: tuple[int, ...]) -> None:
    """ValueError when a requested CPU is not one this machine lets us run on."""
    if not cpus:
        return
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("cpu_affinity needs os.sched_setaffinity, which this OS does not have")
    allowed = cpus_allowed()
    missing = [c for c in cpus if c not in allowed]
    if missing:
        raise ValueError(
            f"cpu_affinity asks for CPU {', '.join(map(str, missing))}, but this process may run only on "
            f"CPUs {format_cpus(sorted(allowed))}"
        )


def format_cpus(cpus) -> str:
    """(0, 1, 2, 3, 6) -> '0-3,6': the form --cpu-affinity takes."""
    parts: list[str] = []
    cpus = sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def parse_env(items) -> dict[str, str]:
    """['NAME=value', ...] (the --env flag) -> {NAME: value}; ValueError naming a bad item."""
    out: dict[str, str] = {}
    for item in items or ():
        name, eq, value = str(item).partition("=")
        if not eq or not ENV_NAME.fullmatch(name):
            raise ValueError(f"--env takes NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def _positive_ints(name: str, values, *, hi: int | None = None, allow_empty: bool = False) -> None:
    if not values and not allow_empty:
        raise ValueError(f"{name} needs at least one value")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be positive integers, got {v!r}")
        if hi is not None and v > hi:
            raise ValueError(f"{name} {v} is larger than the supported maximum {hi}")


def _known(name: str, values, choices) -> None:
    if not values:
        raise ValueError(f"{name} needs at least one value")
    for v in values:
        if v not in choices:
            raise ValueError(f"unknown {name} {v!r}; known: {', '.join(choices)}")


# ---- parsing flag values and TOML files -------------------------------------------------------------


def parse_ints(name: str, text: str) -> tuple[int, ...]:
    """'512,1024' -> (512, 1024); 'a..b' -> powers-of-two steps from a to b ('256..4096')."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if ".." in part:
            lo_s, hi_s = part.split("..", 1)
            lo, hi = _int(name, lo_s), _int(name, hi_s)
            if lo < 1 or hi < lo:
                raise ValueError(f"{name} range {part!r} must go from a positive start up to its end")
            v = lo
            while v <= hi:
                out.append(v)
                v *= 2
        else:
            out.append(_int(name, part))
    if not out:
        raise ValueError(f"{name} needs at least one value, got {text!r}")
    return tuple(out)


def _int(name: str, s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise ValueError(f"{name} must be positive integers, got {s.strip()!r}") from None
    if v < 1:
        raise ValueError(f"{name} must be positive integers, got {v}")
    return v


def parse_window(name: str, text: str) -> tuple[int, ...]:
    """'0', '512' or '0,128,512' (0 = no window); a positive part takes parse_ints's forms ('128..1024')."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if part == "0":
            out.append(0)
        elif part:
            try:
                out += parse_ints(name, part)
            except ValueError:
                raise ValueError(
                    f"{name} must be 0 (none) or a positive number of keys, got {part!r}"
                ) from None
    if not out:
        raise ValueError(f"{name} needs at least one value, got {text!r}")
    return tuple(out)


def parse_causal(name: str, value) -> tuple[bool | str, ...]:
    """'no', 'yes', 'both', 'lower-right' or a comma list of them ('no,lower-right'), or a list of those
    words and booleans (a TOML array) -> the sweep's causal values: False, True (top-left), 'lower-right'."""
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out: list[bool | str] = []
    for part in parts:
        if isinstance(part, bool):
            values: tuple = (part,)
        else:
            word = str(part).strip()
            if word not in CAUSAL_CHOICES:
                choices = ", ".join(CAUSAL_CHOICES)
                raise ValueError(f"{name} must be one of {choices} (or a comma list of them), got {word!r}")
            values = CAUSAL_CHOICES[word]
        out += [v for v in values if v not in out]
    if not out:
        raise ValueError(f"{name} needs at least one value, got {value!r}")
    order = (False, True, LOWER_RIGHT)
    return tuple(sorted(out, key=lambda v: next(i for i, o in enumerate(order) if o is v or o == v)))


def parse_floats(name: str, text: str) -> tuple[float, ...]:
    out = []
    for part in str(text).split(","):
        if part.strip():
            try:
                out.append(float(part))
            except ValueError:
                raise ValueError(f"{name} must be numbers, got {part.strip()!r}") from None
    if not out:
        raise ValueError(f"{name} needs at least one value, got {text!r}")
    return tuple(out)


def parse_mods(name: str, text: str) -> tuple[str, ...]:
    """'none,alibi,softcap:30' -> the canonical texts (variants.mods.parse_mod); duplicates are SweepSpec's
    to refuse. ValueError naming the bad part (and the front end's flag when it is not 'mod')."""
    out = []
    for part in str(text).split(","):
        if part.strip():
            try:
                out.append(parse_mod(part))
            except ValueError as exc:
                raise ValueError(str(exc) if name == "mod" else f"{name}: {exc}") from None
    if not out:
        raise ValueError(f"{name} needs at least one value, got {text!r}")
    return tuple(out)


def parse_timing(name: str, text: str) -> str:
    """'auto', 'events' or 'graph' (TIMINGS); ValueError naming the front end's flag and the bad word."""
    word = str(text).strip()
    if word not in TIMINGS:
        raise ValueError(f"{name} must be one of {', '.join(TIMINGS)}, got {word!r}")
    return word


def parse_names(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in str(text).split(",") if p.strip())


def presets() -> dict[str, Path]:
    """Named presets shipped in harness/presets."""
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.toml"))}


def load_toml(path: str | Path) -> dict[str, Any]:
    """A sweep file's contents as SweepSpec.from_dict input (validated there)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    return toml_to_sweep(data, source=str(path))


def toml_to_sweep(data: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Translate the TOML layout ([sweep] with causal/pass words, [settings], [env]) into from_dict keys.

    A [sweep.cuda] table (keys as [sweep]) comes back under the key "cuda": build_sweep lays it over
    [sweep] when the sweep's devices are exactly cuda (GPU lengths and dtypes in a preset that also runs on
    CPU)."""
    unknown = set(data) - {"sweep", "settings", "env", "description"}
    if unknown:
        raise ValueError(
            f"{source}: unknown table(s) {sorted(unknown)}; expected [sweep], [settings] and [env]"
        )
    sweep = dict(data.get("sweep", {}))
    cuda = sweep.pop("cuda", None)
    out = _sweep_table(sweep, f"{source}: [sweep]")
    if cuda is not None:
        if not isinstance(cuda, dict):
            raise ValueError(f"{source}: [sweep] cuda must be a table, [sweep.cuda]")
        known = {f.name for f in fields(SweepSpec)} - {"settings", "devices"}
        out["cuda"] = _sweep_table(dict(cuda), f"{source}: [sweep.cuda]")
        unknown = set(out["cuda"]) - known
        if unknown:
            raise ValueError(
                f"{source}: unknown key(s) {sorted(unknown)} in [sweep.cuda] (it applies when the devices "
                f"are exactly cuda, so it cannot set them); known: {sorted(known)}"
            )
    if "settings" in data:
        out["settings"] = dict(data["settings"])
    if "env" in data:
        if not isinstance(data["env"], dict):
            raise ValueError(f"{source}: [env] must be a table of NAME = value")
        out.setdefault("settings", {})["env"] = dict(data["env"])
    return out


def _sweep_table(sweep: dict[str, Any], where: str) -> dict[str, Any]:
    """One [sweep] (or [sweep.cuda]) table's words and ranges as from_dict values."""
    if "causal" in sweep:
        sweep["causal"] = parse_causal("causal", sweep["causal"])
    if "pass" in sweep:
        sweep["passes"] = _choice("pass", sweep.pop("pass"), PASS_CHOICES)
    for axis in ("seq_len", "batch", "heads", "d_k", "d_v", "kv_heads", "seq_k"):
        if isinstance(sweep.get(axis), str):
            sweep[axis] = parse_ints(axis, sweep[axis])
    if isinstance(sweep.get("mod"), str):  # "none,alibi" as the flag takes it; a list goes to SweepSpec
        sweep["mod"] = parse_mods("mod", sweep["mod"])
    if isinstance(sweep.get("window"), (str, int)) and not isinstance(sweep.get("window"), bool):
        sweep["window"] = parse_window("window", str(sweep["window"]))
    if isinstance(sweep.get("model"), str):
        sweep["model"] = parse_names(sweep["model"])
    shape = [a for a in MODEL_AXES if a in sweep]
    if sweep.get("model") and shape:
        raise ValueError(
            f"{where} gives {shape[0]} and model: a model gives heads, kv_heads, d_k and window together; "
            "give one or the other"
        )
    return sweep


def _choice(name: str, value, choices: dict[str, tuple]) -> tuple:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return choices[value]


# The one translation from text to a sweep. Every front end (the CLI, `attnbench profile`, the pytest plugin,
# the Python API) maps its own option names onto these axis names and hands over the text it was given.
TEXT_AXES: dict[str, str] = {  # axis name -> what its text holds
    "variants": "names",
    "device": "names",
    "dtype": "names",
    "batch": "ints",
    "heads": "ints",
    "seq_len": "ints",
    "d_k": "ints",
    "d_v": "ints",
    "causal": "causal",
    "padding": "floats",
    "pass": "pass",
    "kv_heads": "ints",
    "seq_k": "ints",
    "window": "window",
    "dropout": "floats",
    "mod": "mods",
    "model": "names",
}
TEXT_SETTINGS: dict[str, Callable] = {  # settings given as text -> their type (or parser)
    "warmup_ms": float,
    "budget_ms": float,
    "min_samples": int,
    "max_samples": int,
    "min_ms": float,
    "target_rel_iqr": float,
    "threads": int,
    "cell_timeout": float,
    "calibrate_ms": float,
    "seed": int,
    "cpu_affinity": parse_cpu_list,
    "timing": parse_timing,
}
_SWEEP_KEY = {"device": "devices", "dtype": "dtypes", "pass": "passes"}  # axis name -> SweepSpec field


def sweep_field(axis: str) -> str:
    """The SweepSpec field that holds an axis's values ('device' -> 'devices')."""
    return _SWEEP_KEY.get(axis, axis)


def _flag(axis: str) -> str:
    return axis.replace("_", "-")


def sweep_from_text(
    texts: Mapping[str, Any],
    *,
    preset: str | None = None,
    config: str | Path | None = None,
    flag: Callable[[str], str] = _flag,
) -> SweepSpec:
    """A validated SweepSpec from {axis or setting: text} over a preset or config file (not both).

    Axes are TEXT_AXES ('seq_len': '256..4096', 'causal': 'both', ...), settings TEXT_SETTINGS ('budget_ms':
    '200'; a number is taken as it is) and 'env' (['NAME=VALUE', ...]); None means "not given". Errors are
    ValueErrors that name the bad value by `flag(axis)`, the front end's own name for it.
    """
    unknown = set(texts) - set(TEXT_AXES) - set(TEXT_SETTINGS) - {"env"}
    if unknown:
        raise ValueError(f"unknown sweep axis or setting {sorted(unknown)}; known: {', '.join(TEXT_AXES)}")
    overrides: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for axis, text in texts.items():
        if text is None:
            continue
        name = flag(axis)
        if axis == "env":
            settings["env"] = parse_env(text)
        elif axis in TEXT_SETTINGS:
            settings[axis] = _setting(name, text, TEXT_SETTINGS[axis])
        else:
            kind = TEXT_AXES[axis]
            if kind == "names":
                value: tuple = parse_names(text)
            elif kind == "ints":
                value = parse_ints(name, text)
            elif kind == "floats":
                value = parse_floats(name, text)
            elif kind == "window":
                value = parse_window(name, text)
            elif kind == "causal":
                value = parse_causal(name, text)
            elif kind == "mods":
                value = parse_mods(name, text)
            else:
                value = _choice(name, text, PASS_CHOICES)
            overrides[sweep_field(axis)] = value
    if settings:
        overrides["settings"] = settings
    return build_sweep(preset, config, overrides, flag=flag)


def cell_texts(cell: CellSpec, settings: Settings) -> tuple[dict[str, Any], list[str]]:
    """sweep_from_text's input for exactly this one cell under these settings, and the names of settings
    that differ from their defaults but have no text form (the text cannot say them).

    sweep_from_text(texts) gives a sweep whose cells([cell.variant]) are [cell] and whose settings are
    `settings` when nothing is left over: every value is written out, defaults included, so that a later
    change of a default cannot change what the text measures. One exception: a CPU cell's timing is written
    as auto (CPU cells are timed with perf_counter whatever it says, and a CPU-only sweep takes no other).
    """
    texts: dict[str, Any] = {
        "variants": cell.variant,
        "device": cell.device,
        "dtype": cell.dtype,
        "batch": str(cell.batch),
        "heads": str(cell.heads),
        "seq_len": str(cell.seq_len),
        "d_k": str(cell.d_k),
        "d_v": str(cell.d_v),
        "causal": (LOWER_RIGHT if cell.causal_align == LOWER_RIGHT else "yes") if cell.causal else "no",
        "padding": repr(float(cell.padding)),  # repr: the shortest text that reads back as the same float
        "pass": cell.pass_,
        "kv_heads": str(cell.kv_heads),
        "seq_k": str(cell.seq_k),
        "window": str(cell.window),
        "dropout": repr(float(cell.dropout)),
        "mod": cell.mod,
    }
    for name in TEXT_SETTINGS:
        value = getattr(settings, name)
        if name == "cpu_affinity":
            if value:
                texts[name] = format_cpus(value)
        elif name == "timing":
            # a CPU cell is timed with perf_counter whatever the run's timing said (a cpu,cuda sweep may say
            # graph), and a sweep of that CPU cell alone refuses any other value than auto
            texts[name] = value if cell.device == "cuda" else "auto"
        else:
            texts[name] = repr(value)
    if settings.env:
        texts["env"] = [f"{k}={v}" for k, v in settings.env]
    default = Settings()
    left = [
        f.name
        for f in fields(Settings)
        if f.name not in TEXT_SETTINGS
        and f.name != "env"
        and getattr(settings, f.name) != getattr(default, f.name)
    ]
    return texts, left


def _setting(name: str, text: Any, kind: Callable) -> Any:
    if not isinstance(text, str):
        return text  # already a number (argparse typed it); Settings validates its range
    if kind not in (int, float):
        return kind(name, text)
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{name} must be {what}, got {text!r}") from None


def build_sweep(
    preset: str | None = None,
    config: str | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    flag: Callable[[str], str] = _flag,
) -> SweepSpec:
    """Preset or config file (not both), its [sweep.cuda] when the devices are exactly cuda, then flag
    overrides; validated SweepSpec. `flag` names an override as the front end does ('heads' -> 'heads' for
    the CLI's --heads)."""
    if preset and config:
        raise ValueError("give --preset or --config, not both")
    base: dict[str, Any] = {}
    source = ""
    if preset:
        known = presets()
        if preset not in known:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(known)}")
        base, source = load_toml(known[preset]), f"preset {preset}"
    elif config:
        base, source = load_toml(config), f"config {config}"
    overrides = {k: v for k, v in dict(overrides or {}).items() if v is not None}
    base_settings = base.pop("settings", {}) or {}
    over_settings = overrides.pop("settings", {}) or {}
    settings = {**base_settings, **over_settings}
    if "env" in base_settings and "env" in over_settings:  # --env adds to (or overrides) the file's [env]
        settings["env"] = {**dict(normalise_env(base_settings["env"])), **over_settings["env"]}
    cuda = base.pop("cuda", None)
    devices = overrides.get("devices", base.get("devices", SweepSpec.devices))
    if cuda and tuple(devices) == ("cuda",):
        base = _layer(base, cuda, name=lambda a: f"[sweep.cuda] {a}", below=f"the {source}'s [sweep]")
    given = [a for a in MODEL_AXES if a in overrides]
    if overrides.get("model") and given:
        raise ValueError(
            f"--{flag(given[0])} conflicts with --{flag('model')}: a model gives heads, kv_heads, d_k and "
            "window together; give one or the other"
        )
    merged = _layer(base, overrides, name=lambda a: f"--{flag(a)}", below=f"the {source}")
    merged["settings"] = settings
    return SweepSpec.from_dict(merged)


def _layer(lower: dict[str, Any], upper: dict[str, Any], *, name: Callable[[str], str], below: str) -> dict:
    """upper's keys over lower's. Models in upper replace lower's head shape (heads, kv_heads, d_k,
    window); a head-shape axis in upper over models in lower is refused (which model would it change?)."""
    shape = [a for a in MODEL_AXES if a in upper]
    if shape and lower.get("model") and "model" not in upper:
        raise ValueError(
            f"{name(shape[0])} conflicts with the models of {below} ({', '.join(lower['model'])}): a model "
            f"gives heads, kv_heads, d_k and window together; choose models with {name('model')}, or drop "
            f"{name(shape[0])}"
        )
    merged = {**lower, **upper}
    if upper.get("model"):
        for axis in MODEL_AXES:
            if axis not in upper:
                merged.pop(axis, None)
    return merged
