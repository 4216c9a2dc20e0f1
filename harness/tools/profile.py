"""Profile one cell: a child process loops it under py-spy (flame graph, speedscope), then torch.profiler
records a few calls of it (Chrome trace, top operators by self time). This module plans and orchestrates;
each job is in its own module:

    harness.sweep.options         run-style flags -> the one cell (read and checked as `attnbench run` does)
    harness.tools.profile_plan    Plan: the cell and how to profile it, read by this module and the child's
    handle harness.tools.py_spy          find py-spy, record the looping child
    harness.tools.torch_trace     torch.profiler: trace.json, top_ops.csv
    harness.tools.profiled_child  the child process, and the parent's handle on it

Order of events: validate the cell flags, the variant and its support for the cell -> find py-spy ->
(out directory) -> start the child, which imports torch, builds the inputs and warms up -> py-spy attaches
to the warm child twice (flame graph, then speedscope), so neither the torch import nor the warm-up is in
the samples -> the child stops looping and runs torch.profiler -> profile.json.
Nothing here imports torch; the child does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnbench.harness.sweep import options
from attnbench.harness.sweep.affinity import warn_threads
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.tools import py_spy as spy
from attnbench.harness.tools import torch_trace
from attnbench.harness.tools.profile_plan import Plan
from attnbench.harness.tools.profiled_child import WARMUP, Child

SCHEMA = 1
# every file a profile leaves; py-spy and torch.profiler name their own, profile.json is this module's
FILES = {**spy.FILES, **torch_trace.FILES, "meta": "profile.json"}


DEFAULT_SEQ_LEN = 1024  # a sweep's default is four lengths; a profile needs one
# `attnbench profile`'s cell flags: every axis of `attnbench run` but --variants, one value each, as its help
# shows them (no comma list, range or 'both'), with a profile's seq_len default
CELL_OPTIONS = [
    o.one_value(str(DEFAULT_SEQ_LEN) if o.key == "seq_len" else None)
    for o in options.axis_options()
    if o.key != "variants"
]


# the cell of a kernel that runs packed batches, paged caches or sliding windows only
# (variants.handed.only_workload), where the flags name none: a pack of 8 long-tail sequences, a decode step
# against 8 contexts of 4,096 tokens on average in pages of 16, or a causal window of 256 keys
ONLY_CELL = {
    "window": {"causal": "yes", "window": "256"},
    "packed": {"lengths": "longtail", "batch": "8"},
    "paged": {"seq_len": "1", "seq_k": "4096", "lengths": "uniform", "page_size": "16", "batch": "8"},
}


def single_cell(variant: str, given: Mapping[str, str | Sequence[str] | None], threads: int = 0) -> CellSpec:
    """The one cell named by run-style flags (option key -> the text given, None = default); ValueError naming
    the bad value, or the flag given more than one value. A window given without --causal is causal
    (top-left), as bench makes it: a window counts back from the diagonal."""
    defaults = {"seq_len": str(DEFAULT_SEQ_LEN), "threads": threads}
    window = given.get("window")
    window = window[0] if isinstance(window, list | tuple) and len(window) == 1 else window
    if str(window).strip() not in ("None", "0", "") and given.get("causal") is None:
        defaults["causal"] = "yes"
    return options.single_cell(variant, given, defaults=defaults)


def prepare(
    variant: str,
    given: Mapping[str, str | Sequence[str] | None],
    *,
    threads: int | None = None,
    seconds: float = 5.0,
    rate: int = 100,
    iters: int = 5,
    native: bool = False,
    use_py_spy: bool = True,
    variant_files: Sequence[str] = (),
    need_py_spy: bool = False,
) -> Plan:
    """Validate everything before any work: cell flags first (cheap), then the variant (imports torch);
    `need_py_spy` (--py-spy): a py-spy not found is refused here, not profiled without."""
    cell = single_cell(variant, given, threads or 0)
    if not seconds > 0 or seconds > 3600:
        raise ValueError(f"--seconds must be a number of seconds in (0, 3600], got {seconds!r}")
    if not 1 <= rate <= 10_000:
        raise ValueError(f"--rate must be samples per second in 1..10000, got {rate!r}")
    if not 1 <= iters <= 1000:
        raise ValueError(f"--iters must be calls in 1..1000, got {iters!r}")
    from attnbench import variants
    from attnbench.variants.handed import only_workload

    for path in variant_files:
        variants.load_variant_file(path)
    only = only_workload(variants.get(variant))  # VariantError (a ValueError) when unknown
    if only:  # its workload's cell, where the flags leave an axis of it at its default
        cell = single_cell(
            variant, {**ONLY_CELL[only], **{k: v for k, v in given.items() if v is not None}}, threads or 0
        )
    reason = variants.get(variant).check(cell.problem())
    if reason:
        raise ValueError(f"{variant} cannot run this cell here: {reason}")
    exe, note = spy.find_py_spy() if use_py_spy else (None, "skipped (--no-py-spy)")
    if need_py_spy and exe is None:
        raise ValueError(f"--py-spy: {note}")
    warn_threads(threads or 0)
    files = tuple(os.path.abspath(path) for path in variant_files)  # its command runs from any folder
    return Plan(cell, threads or 0, seconds, rate, iters, native, exe, note, files)


# ---- the parent: the child, py-spy, and what they leave -------------------------------------------------


@dataclass
class Outcome:
    """What a profile produced: profile.json's contents, the messages printed, the error if it failed."""

    out: Path
    plan: Plan
    meta: dict[str, Any] = field(default_factory=dict)  # what profile.json holds
    messages: list[str] = field(default_factory=list)  # one line each, also printed on stderr
    error: str = ""  # the profiled cell failed, in the phase it names (exit status 1)

    @property
    def py_spy_failed(self) -> str:
        """py-spy's one-line reason where it ran and failed (it sampled nothing), else ''."""
        return str((self.meta.get("py_spy") or {}).get("error") or "")

    @property
    def profiled_nothing(self) -> bool:
        """Whether the cell failed before anything was profiled (in its warm-up call)."""
        return bool(self.error) and (self.meta.get("failed") or {}).get("phase") == WARMUP


@contextmanager
def removed_if_interrupted(out: Path) -> Iterator[None]:
    """Ctrl-C (KeyboardInterrupt) inside: what this profile wrote into `out` removed, the folder too where
    this profile made it, and KeyboardInterrupt raised again with one line saying so (`attnbench profile`
    prints it), so that the same command can be given again. The caller kills its processes first (the
    child and py-spy end in profile_cell's and py_spy.record's own `finally`)."""
    made = not out.exists()
    before = set() if made else set(out.iterdir())
    try:
        yield
    except KeyboardInterrupt:
        if made:
            shutil.rmtree(out, ignore_errors=True)
            said = f"interrupted: removed the unfinished profile {out}"
        else:
            for path in set(out.iterdir()) - before if out.is_dir() else ():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            said = f"interrupted: removed what the profile had written into {out}"
        raise KeyboardInterrupt(said) from None


def profile_cell(plan: Plan, out: Path, say: Callable[[str], None] | None = None) -> Outcome:
    """Run the child (py-spy part when plan.py_spy, then torch.profiler) and write profile.json in `out`.
    A profile is one of the attnbench runs on this machine, as a run is (harness.run.neighbours): it says
    first where another one is measuring, and last which ones measured during it (profile.json's
    `neighbours`): its calls' times and their share of the flame graph are theirs too."""
    from attnbench.harness.run import neighbours

    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    res = Outcome(out, plan)
    beside = neighbours.alongside()
    if beside:
        res.messages.append(f"warning: {beside}")
        say(res.messages[-1])
    announced = neighbours.announce(f"attnbench profile {out}")
    if plan.py_spy is None and plan.py_spy_note.startswith(spy.NOT_FOUND):
        res.messages.append(f"{plan.py_spy_note}; writing the torch.profiler part only")
        say(res.messages[-1])
    py_spy: dict[str, Any] = {"used": plan.py_spy is not None, "note": plan.py_spy_note, "records": []}
    seen: dict[str, Any] = {}  # the child's messages by name: warmed, looped, failed
    child = Child(plan, out, loop=plan.py_spy is not None)
    try:
        name, data = _warmed(child, plan, res, seen, say)
        if name == "ready" and plan.py_spy is not None:
            half = plan.seconds / 2
            say(f"py-spy: sampling {plan.cell.variant} at {plan.rate} Hz, 2 x {half:g} s (pid {data['pid']})")
            py_spy["records"], err = spy.sample(
                plan.py_spy, data["pid"], out, seconds_each=half, rate=plan.rate, native=plan.native
            )
            if err:
                py_spy["error"] = err
                res.messages.append(f"{spy.why_failed(err)}; going on with torch.profiler")
                say(res.messages[-1])
            child.proc.send_signal(signal.SIGUSR1)  # stop looping, go on to torch.profiler
            name, data = child.read()
        if name == "looped":
            seen["looped"] = data
            name, data = child.read()
        if name == "started_profiler":
            say(f"torch.profiler: recording {plan.iters} call(s)")
            name, data = child.read()
        if name == "done":
            res.meta = data
        else:
            res.error = _failure(child, plan, name, data, seen)
    finally:
        child.stop()
        notes = announced.end(None)  # no longer profiling; the runs that measured beside it
    for note in notes:
        res.messages.append(f"warning: {note}")
        say(res.messages[-1])
    res.meta = {
        "schema": SCHEMA,
        "kind": "attnbench profile",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cell": plan.cell.to_dict(),
        "cell_id": plan.cell.cell_id,
        "command": plan.command(),
        "py_spy": py_spy,
        "warmup": seen.get("warmed"),
        "loop": seen.get("looped"),
        **res.meta,
        "failed": seen.get("failed"),
        "error": res.error,
        "neighbours": [beside, *notes] if beside else notes,
    }
    if res.error and (seen.get("failed") or {}).get("log"):  # the line printed says where the traceback is
        res.error += f" (traceback in {out / seen['failed']['log']})"
    (out / FILES["meta"]).write_text(json.dumps(res.meta, indent=1, default=str) + "\n")
    return res


def _warmed(
    child: Child, plan: Plan, res: Outcome, seen: dict[str, Any], say: Callable[[str], None]
) -> tuple[str, Any]:
    """The child's first message, its warm-up's (the un-profiled time per call, and whether the answer
    passed the gate: a wrong one is said in one line and profiled anyway, as `attnbench run` measures a
    wrong cell); then the next message."""
    name, data = child.read()
    if name != "warmed":
        return name, data
    seen["warmed"] = data
    if data.get("wrong"):
        res.messages.append(
            f"warning: {plan.cell.variant}'s answer is wrong ({data['wrong']}); profiled anyway, as "
            "`attnbench run` measures a wrong cell and never ranks it"
        )
        say(f"attnbench: {res.messages[-1]}")
    return child.read()


def _failure(child: Child, plan: Plan, name: str, data: Any, seen: dict[str, Any]) -> str:
    """The one line of a profile whose cell failed: the phase and what the variant raised, as the child
    sent them, or the child's exit status and last line when it died."""
    if name != "failed":
        return child.failure(data if name == "exit" else -1)
    seen["failed"] = data
    phase = data["phase"] + (" (nothing was profiled)" if data["phase"] == WARMUP else "")
    if data.get("status") == "unsupported":
        return f"{plan.cell.variant} refused this cell in its {phase}: {data['message']}"
    return f"the profiled cell failed in its {phase}: {data['message']}"
