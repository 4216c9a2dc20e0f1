"""How each cell is measured, declared once: the settings table, and `Settings`, checked in one place.

Settings are not part of a cell's identity. Each `Setting` gives its default, how its value is read
(harness.sweep.grammar), its rule, and its flag's help; the `attnbench run` flags, a sweep file's [settings]
keys, the API's keywords and meta.json's "settings" all derive from SETTINGS, in its order. The sampling
budget's fields (warm-up and sampling ms, sample counts, the IQR stop) are Budget's, with Budget's
defaults and Budget's rules: one rule for each, whoever gives the value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnbench.harness.sweep.grammar import SETTING_READERS


def number_rule(ok: Callable[[float], bool], must: str, types: tuple[type, ...] = (int, float)):
    """A setting's rule: its value is a finite number of `types` (not a bool) for which ok() holds; else
    ValueError "{name} must {must}, got {value!r}". A NaN or an infinity is refused whatever ok() says, and
    said to be one ("got inf, not a finite number")."""

    def rule(name: str, value: Any) -> None:
        number = isinstance(value, types) and not isinstance(value, bool)
        if number and not math.isfinite(value):
            raise ValueError(f"{name} must {must}, got {value!r}, not a finite number")
        if not (number and ok(value)):
            raise ValueError(f"{name} must {must}, got {value!r}")

    return rule


positive = number_rule(lambda v: v > 0, "be a positive number")
at_least_5 = number_rule(lambda v: v >= 5, "be at least 5 (samples)", types=(int,))
not_negative = number_rule(lambda v: v >= 0, "be 0 (default) or positive", types=(int,))
none_or_positive = number_rule(lambda v: v >= 0, "be 0 (none) or a positive number")
fraction_up_to_one = number_rule(lambda v: 0 < v <= 1, "lie in (0, 1]")
_unsigned = number_rule(lambda v: v >= 0, "be 0 or a positive number")
# the longest a cell may run: the parent waits for its worker's answer with poll(), which takes at most
# 2**31 - 1 ms (about 24.8 days); longer raised OverflowError after the run's folder was started
MAX_CELL_TIMEOUT_S = 2_000_000
_cell_timeout = number_rule(
    lambda v: 0 < v <= MAX_CELL_TIMEOUT_S,
    f"be a positive number of seconds up to {MAX_CELL_TIMEOUT_S} (about 23 days, the longest wait the "
    "OS's poll() takes)",
)


@dataclass(frozen=True)
class Budget:
    """How long to sample: warm-up and measurement budgets in ms, adaptive stop on a stable IQR."""

    warmup_ms: float = 50.0
    budget_ms: float = 1000.0
    min_samples: int = 5
    max_samples: int = 500
    target_rel_iqr: float = 0.05
    min_ms: float = (
        100.0  # an early (stable) stop still needs this much sampled time: cheap calls get more samples
    )

    def __post_init__(self) -> None:
        """The one rule for these fields, wherever they come from (flags, a sweep file, the API, calibration):
        each field's (BUDGET_RULES, which the settings table reads each value with too, naming its flag),
        then the two sample counts together (named as flags: the front ends respell them)."""
        for name, rule in BUDGET_RULES.items():
            rule(name, getattr(self, name))
        lo, hi = self.min_samples, self.max_samples
        if lo > hi:
            raise ValueError(f"--min-samples {lo} is more than --max-samples {hi}")


# each sampling budget field's own rule (Budget's, and its setting's, so that a flag's error names the flag)
BUDGET_RULES = {
    "warmup_ms": _unsigned, "budget_ms": positive, "min_samples": at_least_5, "max_samples": at_least_5,
    "target_rel_iqr": positive, "min_ms": _unsigned,
}  # fmt: skip
_BUDGET = Budget()
BUDGET_FIELDS = tuple(f.name for f in dataclasses.fields(Budget))


@dataclass(frozen=True)
class Setting:
    """One setting: its default, how it is read, its rule, and its flag."""

    name: str  # the Settings field, sweep-file key and API keyword; the flag --name with '-' for '_'
    default: Any
    grammar: str  # harness.sweep.grammar.SETTING_READERS: 'float', 'int', 'cpus', 'timing', 'env', 'bool'
    help: str
    metavar: str | None = None
    rule: Callable[[str, Any], None] | None = None  # one value's rule (budget fields: BUDGET_RULES')
    flag: bool = True  # has a flag and a text form; False: a sweep file's [settings] and the API only

    def read(self, value: Any, name: str | None = None) -> Any:
        """The value from text or a Python value, checked (ValueError naming `name`)."""
        name = name or self.name
        value = SETTING_READERS[self.grammar](name, value)
        if self.rule is not None:
            self.rule(name, value)
        return value


SETTINGS: tuple[Setting, ...] = (
    Setting("warmup_ms", _BUDGET.warmup_ms, "float", "warm-up budget per cell (ms)", "MS", _unsigned),
    Setting("budget_ms", _BUDGET.budget_ms, "float", "sampling budget per cell (ms)", "MS", positive),
    Setting("min_samples", _BUDGET.min_samples, "int", "fewest timed calls per cell (>= 5)", "N", at_least_5),
    Setting("max_samples", _BUDGET.max_samples, "int", "most timed calls per cell", "N", at_least_5),
    Setting(
        "target_rel_iqr", _BUDGET.target_rel_iqr, "float", "stop sampling once IQR/median is under this", "F",
        positive,
    ),
    Setting(
        "min_ms", _BUDGET.min_ms, "float",
        "sampled time needed before a stable spread may stop sampling (ms)", "MS", _unsigned,
    ),
    Setting(
        "cell_timeout", 600.0, "float",
        f"kill a cell after this long (gate, timing and memory; at most {MAX_CELL_TIMEOUT_S})", "SECONDS",
        rule=_cell_timeout,
    ),
    Setting(
        "calibrate_ms", 1000.0, "float",
        "the run's calibration: sampling time for each dtype's matmul and for the copy (default 1000; 0: "
        "none, a quick look without ceilings)", "MS",
        rule=none_or_positive,
    ),
    Setting("threads", 0, "int", "CPU threads for torch (default: torch's choice)", "N", not_negative),
    # the visits of each cell (harness.run.plan): R rounds over the whole sweep in alternating order, each
    # visit with 1/R of the budget; then up to S settle rounds of the pairs the ranking cannot yet tell apart
    Setting(
        "rounds", 1, "int",
        "visit every cell R times, round-robin over the whole sweep in alternating order, each visit with "
        "1/R of its budget, into one row (default 1; local executor only)", "R", rule=positive,
    ),
    # where a visit is made: visit i of every cell in worker process (i - 1) mod K, so that what a process's
    # history leaves in a variant's time (where its memory landed) varies from visit to visit instead of
    # biasing every visit of one run alike; a worker is where a visit runs, not a level of repetition
    Setting(
        "workers", 1, "int",
        "the worker processes the visits rotate over: visit i of every cell in worker (i - 1) mod K "
        "(default 1; at most --rounds; local executor)", "K", rule=positive,
    ),
    Setting(
        "settle_rounds", 0, "int",
        "after the rounds, visit again (at most S more times) the variants of a shape 1.1x or more apart "
        "that the ranking cannot yet tell apart (default 0; needs --rounds 2 or more)", "S",
        rule=not_negative,
    ),
    Setting(
        "check_rows", 1024, "int", "query rows checked against float64 (all rows when N is at most this)",
        rule=positive, flag=False,
    ),
    Setting(
        "grad_check_elems", 1 << 24, "int", "gradients are checked when B*H*N_q*N_k is at most this",
        rule=positive, flag=False,
    ),
    # not how a cell is measured but how its run is read: the report's time exponents are fitted from this
    # seq_len up (0: the top two octaves of the run's lengths, reports.fit.asymptotic_points); a preset sets
    # it where smaller lengths are already asymptotic (quick.toml says why, with the measurement)
    Setting(
        "time_fit_from", 0, "int",
        "the smallest seq_len the report's time exponents are fitted from (default 0: the top two octaves)",
        rule=not_negative, flag=False,
    ),
    Setting("seed", 0, "int", "input seed", "N"),
    Setting("flush_l2", True, "bool", "flush the GPU's L2 cache between timed CUDA calls", flag=False),
    # off by default: a CUDA cell's window is at least 1 s, and the worker's first one measures the idle
    # draw for as long again (harness.measure.energy)
    Setting(
        "energy", False, "bool",
        "read the GPU's energy counter over >= 1 s of repeated calls after each CUDA cell's timing: J per "
        "call above the idle draw and TFLOP/s per W (default no)", "yes|no",
    ),
    Setting(
        "timing", "auto", "timing",
        "how CUDA cells are timed: events (CUDA events around each call), graph (replays of a CUDA graph "
        "of several calls, for launch-bound cells) or auto (per cell, the default; each row says which "
        "and why); CPU cells always use perf_counter", "auto|events|graph",
    ),
    Setting(
        "memory_guard", 0.9, "float", "skip cells whose predicted peak exceeds this fraction of free memory",
        rule=fraction_up_to_one, flag=False,
    ),
    # 0: off. A slow reference at its largest lengths can hold a sweep for minutes (chunked's Python block
    # loop on a GPU took 56 s for one N = 32,768 cell) while its exponent is settled lengths before
    # (harness.workers.cellrunner.SkipAhead predicts from the series' ok cell so far with the most work, its
    # fastest evidence: results.visits.fastest_ms, scaled by the FLOPs counted, which under a window grow
    # with N, not N^2)
    Setting(
        "max_call_ms", 0, "int",
        "skip a cell whose call is predicted to take longer than this (ms), from its series' largest ok "
        "cell's fastest call scaled by the FLOPs each counts (default 0: never)", "MS", rule=not_negative,
    ),
    # environment variables set in the worker processes before they start (allocator and threading knobs
    # read once at start-up): sorted (name, value) pairs, recorded in meta.json
    Setting(
        "env", (), "env",
        "environment variable for the worker processes (repeatable; adds to the preset's [env], e.g. "
        "--env THP_MEM_ALLOC_ENABLE=0)", "NAME=VALUE",
    ),
    # CPUs the worker processes are pinned to (os.sched_setaffinity before torch starts its threads);
    # empty: wherever the OS puts them. Recorded with what the worker reports in meta.json
    Setting(
        "cpu_affinity", (), "cpus",
        "pin the worker processes to these CPUs, e.g. 0,1 or 0-3 (default: wherever the OS puts them)",
        "LIST",
    ),
)  # fmt: skip
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

# options that are no longer, each with the one line that says what replaced it: `attnbench run`'s flags, a
# sweep file's [settings] and attnbench.run's keywords refuse them with it; a run's meta.json that has one
# still reads (SweepSpec.from_meta leaves it out)
REMOVED_OPTIONS: dict[str, str] = {
    "processes": "--processes was removed: a worker process is where a visit runs, not a level of its own; "
    "visit every cell several times with --rounds R (3 or more: compare judges by the visits)",
    "repeat": "--repeat was removed: runs made one after another share the machine's drift; make runs of "
    "two set-ups interleaved with `attnbench interleave`, or compare two kernels in one run "
    "(docs/reports-and-compare.md)",
}


class _Checked:
    """The one validation of Settings: each field by its Setting's rule (read through its grammar, so a
    sweep file's text and an API value are taken as a flag's), the budget fields by
    harness.measure.timing.Budget."""

    def __post_init__(self) -> None:
        for s in SETTINGS:
            object.__setattr__(self, s.name, s.read(getattr(self, s.name)))
        self.budget()  # Budget's rules: positive budgets, 5 <= min_samples <= max_samples

    def budget(self, share: int = 1) -> Budget:
        """The sampling budget these settings give harness.measure.timing.measure; share k: one of k visits
        of a cell (Settings.rounds), with 1/k of the warm-up, sampling and min_ms budgets and of
        min_samples and max_samples (rounded up). A share may then take fewer than 5 samples: the cell's
        row pools every visit's (at least min_samples), which is what Budget's rule is about, so the
        share is made without it."""
        whole = Budget(**{name: getattr(self, name) for name in BUDGET_FIELDS})
        if share <= 1:
            return whole
        part = object.__new__(Budget)  # frozen, and its rule is the cell's: set the fields as __init__ would
        fields = {
            **whole.__dict__,
            "warmup_ms": whole.warmup_ms / share,
            "budget_ms": whole.budget_ms / share,
            "min_ms": whole.min_ms / share,
            "min_samples": math.ceil(whole.min_samples / share),
            "max_samples": math.ceil(whole.max_samples / share),
        }
        for name, value in fields.items():
            object.__setattr__(part, name, value)
        return part


Settings = dataclasses.make_dataclass(
    "Settings", [(s.name, Any, dataclasses.field(default=s.default)) for s in SETTINGS], bases=(_Checked,),
    frozen=True,
)  # fmt: skip
# named as if written here, so that pickle finds it (make_dataclass takes `module` only from Python 3.12)
Settings.__module__, Settings.__qualname__ = __name__, "Settings"
Settings.__doc__ = "How each cell is measured (not part of its identity): one field per SETTINGS entry."
