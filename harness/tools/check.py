"""`attnbench check`: the float64 gate for every variant over causal x key padding, as plain records.

`prepare` refuses unknown variants, dtypes and devices (ValueError naming them) before any tensor is made;
`Isolated.gates` yields one GateRow per (device, dtype, causal, padding, variant), then one per workload each
variant declares (GateRow.workload), each problem gated in a worker process as `attnbench run` measures a
cell (harness.workers.cellrunner.CellRunner): a variant that crashes its worker (os._exit, a segfault) or
hangs past --cell-timeout is that problem's `crashed` or `timeout` row, the worker is replaced, and the
other variants are still gated; after a timeout, that variant's later problems on that device are not run.
`exit_status` is the verdict. Rendering is the front end's: this module prints nothing. It does not announce
itself to the other attnbench runs on the machine (harness.run.neighbours), as a run and the pytest plugin
do: it times nothing, and no gate's verdict depends on what else runs beside it.

What each problem is and how it is gated (the no-key problem, the declared workloads) is
harness.measure.gate_rows'; `gate_all` gates a plan's problems in this process, for tests.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnbench.harness.measure.gate_rows import (  # noqa: F401  (check's names, as its callers know them)
    BATCH,
    HEAD_DIM,
    HEADS,
    MASKS,
    NO_KEY,
    PADDING,
    SEQUENCES,
    TILE_N,
    TOP_LEFT,
    WORKLOADS,
    GateProblem,
    GateRow,
    gate_request,
    implied,
    problems,
    span,
    unavailable,
    workload_cells,
)
from attnbench.results.causes import pointed, reads_bnhd

DEVICES = ("cpu", "cuda")
# the N the masks are gated at, the one source of check's and bench's default: no power of two, so that a
# kernel's bug at a block's edge shows; 100 is short of one tile of 128 or 256, and TILE_N (300) leaves a
# partial last block after full ones of 64, 128 and 256 (a kernel that counts its key blocks as N // 128
# passes N = 100; a run gates its variants there too). The no-key problem and the declared workloads are
# gated at the first alone (SEQ_LEN).
SEQ_LENS = (100, TILE_N)
SEQ_LEN = SEQ_LENS[0]


@dataclass(frozen=True)
class CheckPlan:
    """What a check gates, validated by `prepare`: `named` the variants whose failures count whether or not
    they are in default sweeps (those named with --variants, or registered by a --variant-file);
    `variant_files` the files the worker loads (absolute paths); `seq_lens` the N the masks are gated at, the
    first the no-key problem's and the workloads' too."""

    names: tuple[str, ...]
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    seq_lens: tuple[int, ...] = SEQ_LENS
    named: tuple[str, ...] = ()
    variant_files: tuple[str, ...] = ()
    left_out: str = ""  # the variants the files' imports registered, not gated (`left_out`), in one line

    def counted(self, name: str) -> bool:
        """Whether a failure of variant `name` fails the check: one named, or one in default sweeps."""
        from attnbench import variants

        return name in self.named or variants.get(name).cap.default

    def problems(self) -> Iterator[GateProblem]:
        return problems(self.names, self.devices, self.dtypes, self.seq_lens, counted=self.counted)


def prepare(
    names: Sequence[str] | None,
    devices: Sequence[str],
    dtypes: Sequence[str],
    seq_len: int | Sequence[int] = SEQ_LENS,
    *,
    variant_files: Sequence[str] = (),
) -> CheckPlan:
    """Validate everything before any work; names None: the variants of `variant_files`, or every registered
    variant when none is given; seq_len one N or several (the masks gated at each). ValueError (VariantError
    is one) naming the bad value."""
    seq_lens = (seq_len,) if isinstance(seq_len, int) else tuple(seq_len)
    if not seq_lens:
        raise ValueError("--seq-len needs at least one length")
    for n in seq_lens:
        if n < 1:
            raise ValueError(f"--seq-len must be a positive integer, got {n}")
    from attnbench import variants
    from attnbench.variants.problem import known_dtype

    added, imported = _files_variants(variant_files)
    named = [*(names or []), *added]  # what the user named or wrote: its failures count
    left = ""
    if names is None:  # the files' own variants where files are given: the kernel being written
        names = added or list(variants.all_variants())
        left = left_out(imported, added)
    names = list(names)
    variants.resolve(names)
    for d in dtypes:
        known_dtype(d)  # its parent needs no torch: the gates run in workers
    for d in devices:
        if d not in DEVICES:
            raise ValueError(f"unknown device {d!r}; known: {', '.join(DEVICES)}")
        if d == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("device cuda was asked for, but torch sees no CUDA device on this machine")
    files = tuple(str(Path(path).resolve()) for path in variant_files)
    return CheckPlan(
        tuple(names), tuple(devices), tuple(dtypes), seq_lens, tuple(dict.fromkeys(named)), files, left
    )


def _files_variants(paths: Sequence[str]) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """(the variants the files register in their own code, {name: (the file that registered it, the named
    file whose imports ran it)} for the others): trial T's bug file, importing its kernel from tiled.py,
    re-registered tiled, and check gated both. A file that registers nothing in its own code (it only
    imports a module of kernels) has all it registers as its own."""
    from attnbench import variants
    from attnbench.variants import registry

    own: list[str] = []
    imported: dict[str, tuple[str, str]] = {}
    for path in paths:
        added = variants.load_variant_file(path)
        others = registry.imported_by(path, added)
        if len(others) == len(added):
            others = {}
        own += [n for n in added if n not in others]
        imported.update({n: (where, str(path)) for n, where in others.items()})
    return own, {n: where for n, where in imported.items() if n not in own}


def left_out(imported: dict[str, tuple[str, str]], own: Sequence[str]) -> str:
    """'left out: tiled (registered by tiled.py, which bug_window.py imports): name it with --variants
    bug_window,tiled to gate it too'; '' where the files' imports registered nothing else."""
    if not imported:
        return ""
    said = ", ".join(
        f"{n} (registered by {Path(by).name}, which {Path(path).name} imports)"
        for n, (by, path) in imported.items()
    )
    it = "it" if len(imported) == 1 else "them"
    return f"left out: {said}: name {it} with --variants {','.join([*own, *imported])} to gate {it} too"


def gate_all(plan: CheckPlan) -> Iterator[GateRow]:
    """Every problem of the plan (gate_rows.problems) gated in this process, in the check's order: for tests
    of the gate itself (`attnbench check` gates each in a worker: Isolated)."""
    for problem in plan.problems():
        yield gate_request(problem)


STATUSES_FAILED = ("FAIL", "error", "crashed", "timeout")  # a gating row of one of these fails the check


class Isolated:
    """The check's worker process (a CellRunner, with the variant files and entry points loaded) and each
    problem asked of it with the deadline `cell_timeout`; its log in a folder of its own, removed on close.
    A worker that cannot start at all makes every problem `crashed`, saying why (`unstarted`)."""

    def __init__(self, variant_files: Sequence[str], cell_timeout: float) -> None:
        from attnbench.harness.sweep.settings import Settings
        from attnbench.harness.workers.cellrunner import CellRunner
        from attnbench.harness.workers.isolation import WorkerDied, WorkerTimeout

        self.timeout, self.runner, self.unstarted = cell_timeout, None, ""
        self.folder = Path(tempfile.mkdtemp(prefix="attnbench-check-"))
        config = {"variant_files": list(variant_files), "log_path": str(self.folder / "worker.log")}
        try:
            self.runner = CellRunner(config, Settings(cell_timeout=cell_timeout))
        except (WorkerDied, WorkerTimeout) as exc:  # the files loaded here: one the worker cannot load, say
            self.unstarted = f"the check's worker process did not start: {exc}"
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.runner is not None:
                self.runner.close(kill=True)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def gates(self, todo: Iterable[GateProblem]) -> Iterator[GateRow]:
        """Each problem's GateRow from the worker; a worker that dies on one makes it `crashed` (with how it
        ended and what it last logged), one that misses the deadline `timeout`, and the variant's later
        problems on that device are then left out (each would wait as long)."""
        from attnbench.harness.workers.isolation import WorkerDied, WorkerTimeout

        hung: set[tuple[str, str]] = set()
        for problem in todo:
            if (problem.variant, problem.device) in hung:
                continue
            if self.runner is None:
                yield problem.row("crashed", self.unstarted)
                continue
            try:
                asked = {"op": "gate", "problem": dataclasses.asdict(problem)}
                reply = self.runner.request(asked, self.timeout)
            except WorkerTimeout as exc:
                hung.add((problem.variant, problem.device))
                said = f"exceeded --cell-timeout {self.timeout:g} s: {exc}"
                yield problem.row("timeout", f"{said}; its later problems on {problem.device} were not run")
                continue
            except WorkerDied as exc:
                yield problem.row("crashed", str(exc))
                continue
            yield GateRow(**reply["value"])

    def probe(self, names: Sequence[str], devices: Sequence[str], dtypes: Sequence[str]) -> list[dict]:
        """The large-logit numerics probe of each variant in the worker (CellRunner.numerics)."""
        if self.runner is None:
            return [{"variant": name, "status": "crashed", "message": self.unstarted} for name in names]
        return self.runner.numerics(names, devices, dtypes, self.timeout)


def measured(run_dir: str | Path, name: str) -> tuple[list[str], list[str]]:
    """The devices and dtypes (float32 first) the run at run_dir measured variant `name` on."""
    from attnbench.results import load

    rows = load(run_dir)
    mine = rows[rows["variant"] == name]
    dtypes = sorted(set(mine["dtype"].astype(str)), key=lambda d: (d != "float32", d))
    return sorted(set(mine["device"].astype(str))), dtypes


def bench_gates(
    run_dir: str | Path, name: str, devices: Sequence[str], dtypes: Sequence[str]
) -> tuple[tuple[GateRow, ...], tuple[GateRow, ...]]:
    """What attnbench.bench gates of variant `name` beside the sweep of its run at run_dir (whose N are powers
    of two, and whose calls are forward only), on each device and dtype the run measured it (`measured`):
    (each workload it declares, at N = SEQ_LEN, on every device; every mask, forward and backward, at each N
    of SEQ_LENS, on the devices it can run on here). Each problem in a worker that loads the run's variant
    files, with the run's --cell-timeout, as check gates it (Isolated): a kernel that exits, crashes or
    hangs there is its row."""
    from attnbench import variants
    from attnbench.harness.sweep.spec import SweepSpec
    from attnbench.results import read_meta
    from attnbench.results.store import SHIPPED
    from attnbench.variants import shipped

    here = [device for device in devices if unavailable(variants.get(name), device) is None]
    meta = read_meta(run_dir)
    timeout = SweepSpec.from_meta(meta["sweep"], Path(run_dir) / "meta.json").settings.cell_timeout
    files = shipped.relocated(meta.get("variant_files", []), Path(run_dir) / SHIPPED)
    every = lambda _: True  # noqa: E731  (bench's fn: its every failure counts)
    # the masks first, as check orders them: a kernel that hangs there leaves its workloads out
    masks, workloads = dict(parts=(MASKS,), notes=False), dict(parts=(WORKLOADS,), notes=False)
    todo = [*problems([name], here, dtypes, SEQ_LENS, counted=every, **masks),
            *problems([name], devices, dtypes, SEQ_LEN, counted=every, **workloads)]  # fmt: skip
    if not todo:
        return (), ()
    with Isolated(files, timeout) as isolated:
        gated = list(isolated.gates(todo))
    return tuple(r for r in gated if r.workload), tuple(r for r in gated if not r.workload)


def exit_status(rows: Iterable[GateRow], named: Sequence[str] = ()) -> int:
    """1 when a counted row (GateRow.gating: a variant named, or one in default sweeps) FAILed, errored,
    crashed or timed out on a problem a run makes, or when a variant `named` was gated on nothing (ungated),
    else 0 (unsupported and the no-key rows do not count)."""
    rows = list(rows)
    return 1 if any(r.status in STATUSES_FAILED and r.gating for r in rows) or ungated(rows, named) else 0


def ungated(rows: Iterable[GateRow], named: Sequence[str]) -> dict[str, str]:
    """The variants `named` (--variants, a --variant-file's) that no problem gated, each with the reason its
    first problem gave: every one of theirs unsupported (a kernel limited to N its tile divides, at check's
    N of 100 and 300), so that a check of nothing is never 'passed'."""
    rows = [r for r in rows if not r.no_key]
    mine = {name: [r for r in rows if r.variant == name] for name in named}
    return {
        name: got[0].reason
        for name, got in mine.items()
        if got and all(r.status == "unsupported" for r in got)
    }


def same_cause(rows: Iterable[GateRow]) -> list[GateRow]:
    """The rows with each failure of a variant found to read (B, N, H, d) elsewhere pointing to that cause
    (results.causes.pointed: a bare error or a shape mismatch, not a failure of its own), so that one layout
    bug reads as one cause, not as a wrong line, a bare error and an exception of shapes apart."""
    rows = list(rows)
    bnhd = {r.variant for r in rows if reads_bnhd([r.reason])}
    return [
        dataclasses.replace(r, reason=pointed(r.reason))
        if r.variant in bnhd and r.status in ("FAIL", "error") and not reads_bnhd([r.reason])
        else r
        for r in rows
    ]


TILE_ONLY = f"at N {TILE_N} only, where its last tile of 64, 128 or 256 keys is partial"


def tile_only(rows: Iterable[GateRow], name: str) -> bool:
    """Whether variant `name` failed at TILE_N alone and passed the same masks at a smaller N: the likely
    cause of a kernel right at every N its tile divides (TILE_ONLY says it, in check's verdict and in
    bench's answer)."""
    mine = [r for r in rows if r.variant == name and not r.no_key and not r.workload]
    bad = [r for r in mine if r.status in STATUSES_FAILED]
    passed = {(r.dtype, r.causal, r.padding) for r in mine if r.status == "pass" and r.n < TILE_N}
    return bool(bad) and all(r.n == TILE_N and (r.dtype, r.causal, r.padding) in passed for r in bad)


def verdict(rows: Iterable[GateRow], named: Sequence[str] = ()) -> str:
    """check's closing line, one line whatever its length (as bench's): the variants that failed, each with
    its failed problems by status, and those `named` that nothing gated (ungated), or that every counted
    variant passed, and the exit status exit_status gives (`check: mine FAILED (8 FAIL); exit status 1`)."""
    rows = list(rows)
    failed: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.gating and r.status in STATUSES_FAILED:
            by_status = failed.setdefault(r.variant, {})
            by_status[r.status] = by_status.get(r.status, 0) + 1
    code = exit_status(rows, named)
    why = {name: f"; {TILE_ONLY}" if tile_only(rows, name) else "" for name in failed}
    said = [
        f"{name} FAILED ({', '.join(f'{n} {s}' for s, n in by_status.items())}{why[name]})"
        for name, by_status in failed.items()
    ] + [
        f"nothing gated for {name} (unsupported in every problem: {why})"
        for name, why in ungated(rows, named).items()
    ]
    if said:
        return f"check: {', '.join(said)}; exit status {code}"
    gated = [r for r in rows if r.gating and not r.no_key and r.status != "unsupported"]
    names = list(dict.fromkeys(r.variant for r in gated))
    ignored = len({r.variant for r in rows if not r.gating and r.status in STATUSES_FAILED and not r.no_key})
    more = f"; {ignored} not in default sweeps failed, not counted" if ignored else ""
    return (
        f"check: passed ({len(names)} variant{'' if len(names) == 1 else 's'}, {len(gated)} problems{more}); "
        f"exit status {code}"
    )


# how far over the baseline's error a variant's worst error at a low-precision dtype must be for check to say
# so: on check's problems (forward, CPU, bfloat16 and float16), kernels that keep their softmax and
# accumulator in float32 (sdpa_math, flex, a tiled online softmax) err 0.7x to 1.0x sdpa's, and the
# built-ins that round their scores or weights to the dtype (naive, chunked, stable_softmax) up to 2.4×;
# the same tiled kernel accumulating in bfloat16 errs 2.9× (docs/experiments/check-notes.md)
ABOVE_BASELINE = 2.5


def baseline_lines(rows: Iterable[GateRow]) -> list[str]:
    """What check says below its tables of the baseline (gate_rows.baseline_for) at each low-precision
    dtype: its own forward rel_err on the same problems, 'sdpa's forward error on the same problems (the
    dtype's own rounding, beside which each variant's is read): bfloat16 4.7e-04..2.2e-03'; one line per
    device and baseline, the device named where the rows hold several."""
    rows = [r for r in rows if r.baseline and r.baseline_rel_err is not None]
    devices = {r.device for r in rows}
    out = []
    for device, base in dict.fromkeys((r.device, r.baseline) for r in rows):
        mine = [r for r in rows if (r.device, r.baseline) == (device, base)]
        ranges = []
        for dtype in dict.fromkeys(r.dtype for r in mine):
            errs = [r.baseline_rel_err for r in mine if r.dtype == dtype]
            ranges.append(f"{dtype} {min(errs):.1e}..{max(errs):.1e}")
        on = f" on {device}" if len(devices) > 1 else ""
        out.append(f"{base}'s forward error on the same problems{on} (the dtype's own rounding, beside which "
                   f"each variant's is read): {', '.join(ranges)}")  # fmt: skip
    return out


def above_baseline(rows: Iterable[GateRow]) -> list[str]:
    """A note for each variant that passes every problem of a low-precision dtype on a device, but whose
    worst forward rel_err there is ABOVE_BASELINE times or more the baseline's worst on the same problems:
    'mine passes, but its bfloat16 error is 3.4× sdpa's on the same problems (6.5e-03 against 1.9e-03: does
    it accumulate in bfloat16?)'. A note, never a failure: the dtype's tolerance is the gate."""
    rows = [r for r in rows if not r.no_key]
    out = []
    for name, device, dtype in dict.fromkeys((r.variant, r.device, r.dtype) for r in rows):
        mine = [r for r in rows if (r.variant, r.device, r.dtype) == (name, device, dtype)]
        paired = [r for r in mine if r.baseline_rel_err is not None and r.rel_err is not None]
        if not paired or any(r.status in STATUSES_FAILED for r in mine):
            continue
        worst, theirs = max(r.rel_err for r in paired), max(r.baseline_rel_err for r in paired)
        if theirs > 0 and worst >= ABOVE_BASELINE * theirs:
            on = f" on {device}" if len({r.device for r in rows}) > 1 else ""
            base = paired[0].baseline
            out.append(
                f"{name} passes, but its {dtype} error{on} is {worst / theirs:.2g}× {base}'s on the same "
                f"problems ({worst:.1e} against {theirs:.1e}: does it accumulate in {dtype}?)"
            )
    return out


def not_deterministic(rows: Iterable[GateRow]) -> list[str]:
    """A note for each variant whose two calls on the same inputs differed where check compared them
    (gate_rows.repeated_at): 'mine is not deterministic: two calls on the same inputs differ by up to 1.2e-07
    (rel), in 3 of 4 problems compared'."""
    rows = [r for r in rows if r.calls_differ is not None]
    out = []
    for name in dict.fromkeys(r.variant for r in rows):
        compared = [r.calls_differ for r in rows if r.variant == name]
        differ = [d for d in compared if d > 0]
        if differ:
            out.append(
                f"{name} is not deterministic: two calls on the same inputs differ by up to "
                f"{max(differ):.1e} (rel), in {len(differ)} of {len(compared)} problems compared"
            )
    return out


def noncontiguous(rows: Iterable[GateRow]) -> list[str]:
    """A note for each variant whose output was not contiguous in its layout (contract.strided): 'mine
    returns a non-contiguous output (strides (25600, 64, 256, 1) for (2, 4, 100, 64), (B, N, H, d) memory;
    in 14 of 14 problems): the next op may copy it', the first such problem's strides."""
    rows = [r for r in rows if r.rel_err is not None]  # the problems whose output was read
    out = []
    for name in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == name]
        strided = [r.strides for r in mine if r.strides]
        if strided:
            out.append(
                f"{name} returns a non-contiguous output ({strided[0]}; in {len(strided)} of {len(mine)} "
                "problems): the next op may copy it"
            )
    return out


def notes(rows: Iterable[GateRow]) -> list[str]:
    """What check notes below its tables, never a failure: the baseline's own error at each low-precision
    dtype (baseline_lines), each variant that passes well above it (above_baseline), and each whose calls
    differ on the same inputs (not_deterministic) or whose output is not contiguous (noncontiguous); of the
    variants whose failures count (GateRow.gating: named, or in default sweeps), as the verdict counts them,
    so that a check of every variant says nothing of transformers' wrappers, which return (B, N, H, d)
    memory by design."""
    rows = list(rows)
    counted = {r.variant for r in rows if r.gating}
    mine = [r for r in rows if r.variant in counted]
    return [*baseline_lines(rows), *above_baseline(mine), *not_deterministic(mine), *noncontiguous(mine)]
