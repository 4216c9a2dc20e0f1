"""What a front end asks of a run, and the run-mode rules, in one place for `attnbench run` and attnbench.run.

A RunRequest holds what was given: the sweep's options (or a whole SweepSpec), where the run goes, its modes
(--resume, --redo-drift, --force-resume, --dry-run), a rerun's choice of cells, the variant files and where
the cells are measured. `check()` says whether they go together before anything is read or written and
before the sweep is built, so that a mode error comes before any sweep error; `resolve()` then builds what
the runner measures (the sweep, or a rerun's cells, and the executor's keywords). Every message names the
options as the CLI's flags; a front end that spells them otherwise respells the message where its user
reads it (harness.sweep.sweeps.respell).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.harness.run import executor_choice, rerun
from attnbench.harness.sweep.grammar import split
from attnbench.harness.sweep.settings import BY_NAME, REMOVED_OPTIONS
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep, flag_name
from attnbench.results.store import being_written, is_unstarted, writer_holder
from attnbench.results.writable import why_unwritable
from attnbench.variants.registry import not_a_file

# the settings a resume may give again: the cell timeout decides only when a cell is given up on, never what
# a row measures (a sweep started with the default 600 s and a hanging kernel would cost 10 minutes on every
# resume); recorded in resumes.jsonl. Every other setting changes the rows: the run's own is kept
RESUME_SETTINGS = ("cell_timeout",)


@dataclass(frozen=True)
class RunRequest:
    """One `attnbench run` (or attnbench.run call), as given; see the module docstring."""

    options: Mapping[str, Any] = field(default_factory=dict)  # sweep axes and settings: key -> text/values
    preset: str | None = None
    config: str | Path | None = None
    sweep: SweepSpec | None = None  # a whole sweep (the API), instead of options, preset and config
    out: str | Path | None = None
    resume: bool = False
    redo_drift: bool = False
    force_resume: bool = False
    dry_run: bool = False
    variant_files: Sequence[str | Path] = ()
    rerun: str | Path | None = None  # measure this run's cells again, into `out`
    cells: str | Sequence[str] | None = None  # of the rerun: these cell_ids ('a,b' or a list)
    status: str | None = None  # of the rerun: the cells whose row has this status
    # the run whose cell this new run measures again, as `attnbench repro`'s line says it (its run_id):
    # meta.json `repro_of`, by which `history add FOLDER` leaves the run out of the nightly's series
    repro_of: str | None = None
    executor: str = "local"
    executor_options: Mapping[str, Any] = field(default_factory=dict)  # devices, ray_address, slurm_*
    # attnbench.bench's (fn, baseline): the baseline measured only in the cells fn runs (runner.raced)
    race: tuple[str, str] | None = None
    # False for a look at what a resume has left (the CLI's, before it resumes): the executor is not asked to
    # check its cluster (a Ray address joined in a child, `sbatch --test-only`); the run that follows asks
    check_executor: bool = True

    def given(self) -> list[str]:
        """The option keys of the sweep given beside the modes (preset, config, the axes and settings with
        a value), in the order given; 'sweep' for a whole SweepSpec."""
        named = [k for k, v in (("preset", self.preset), ("config", self.config)) if v]
        options = [k for k, v in self.options.items() if v is not None]
        return [*named, *options, *(["sweep"] if self.sweep is not None else [])]

    def check(self) -> None:
        """ValueError (one line, the options named as flags) when what was asked does not go together; reads
        nothing but a look at `out` and the variant files, writes nothing."""
        removed = [k for k, v in self.options.items() if v is not None and k in REMOVED_OPTIONS]
        if removed:
            raise ValueError(REMOVED_OPTIONS[removed[0]])
        given = self.given()
        if self.sweep is not None and len(given) > 1:
            raise ValueError("a SweepSpec is the whole sweep: give no --preset, --config or axes with it")
        if self.rerun is None and (self.cells is not None or self.status is not None):
            raise ValueError("--cells and --status choose cells of --rerun RUN_DIR; give --rerun too")
        if self.rerun is not None:
            self._check_rerun(given)
        if self.repro_of is not None and (self.resume or not str(self.repro_of).strip()):
            raise ValueError(
                "--repro-of names the run a new run measures a cell of again: give it a run_id, and not with "
                "--resume (a resume keeps what its run records)"
            )
        self._check_modes(given)
        for path in self.variant_files:
            why = not_a_file(path)
            if why:
                raise ValueError(f"variant file {why}")
        executor_choice.options(self.executor, self.executor_options)

    def _check_rerun(self, given: list[str]) -> None:
        sweep_given = given + (["variant_file"] if self.variant_files else [])
        if sweep_given:
            raise ValueError(
                "--rerun measures with the old run's sweep, settings and variant files; "
                f"drop {flag_name(sweep_given[0])}"
            )
        if self.resume:
            raise ValueError(
                "--rerun writes a new run; to finish an interrupted rerun use --resume --out DIR alone"
            )

    def _check_modes(self, given: list[str]) -> None:
        """A resume takes its sweep and settings from the run and needs `out`; --redo-drift and
        --force-resume change a resume only; a new run goes into no file and no non-empty directory."""
        if self.resume:
            fixed = [k for k in given if k not in RESUME_SETTINGS]
            if fixed:
                raise ValueError(
                    f"--resume takes the sweep and its settings from the run's meta.json; drop "
                    f"{flag_name(fixed[0])} (of its settings, a resume may give only --cell-timeout again)"
                )
            if self.out is None:
                raise ValueError("--resume needs --out DIR naming the run to finish")
        if self.redo_drift and not self.resume:
            raise ValueError(
                "--redo-drift measures a run's drifted cells again: give it with --resume --out DIR"
            )
        if self.force_resume and not self.resume:
            raise ValueError(
                "--force-resume finishes a run on another set-up: give it with --resume --out DIR"
            )
        if self.out is not None and not str(self.out).strip():
            raise ValueError("--out is empty: name the run's directory, such as --out runs/mine")
        why = why_unwritable(self.out) if self.out is not None else None
        if why:
            raise ValueError(f"--out {str(self.out)!r} {why}")
        if not self.resume and self.out is not None:
            target = Path(self.out)
            if target.is_dir() and not is_unstarted(target):  # what a stopped start left is reused
                holder = writer_holder(target)
                if holder:  # a live run's: resuming it would finish that run's sweep, not this one's
                    raise ValueError(being_written(self.out, holder, resume=False))
                raise ValueError(
                    f"{str(self.out)!r} already exists and is not empty; pass --resume or choose another "
                    "--out"
                )

    def resolve(self) -> Resolved:
        """What the runner measures: check() first, then the sweep (None for a resume: the run's own),
        or the rerun's cells, and the executor's keywords; ValueError naming a bad value."""
        self.check()
        files = [str(p) for p in self.variant_files]
        executor_kw = executor_choice.options(self.executor, self.executor_options)
        if self.rerun is not None:
            ids = split(self.cells) if isinstance(self.cells, str) else self.cells
            plan = rerun.plan(self.rerun, cell_ids=None if ids is None else list(ids), status=self.status)
            return Resolved(plan.sweep, list(plan.variant_files), executor_kw, list(plan.cells), plan.origin)
        if self.resume:
            timeout = self.options.get("cell_timeout")
            if timeout is not None:
                timeout = float(BY_NAME["cell_timeout"].read(timeout, "--cell-timeout"))
            return Resolved(None, files, executor_kw, cell_timeout=timeout)
        sweep = self.sweep or build_sweep(dict(self.options), preset=self.preset, config=self.config)
        return Resolved(sweep, files, executor_kw)


@dataclass(frozen=True)
class Resolved:
    """A checked request, as the runner takes it."""

    sweep: SweepSpec | None  # None: a resume (the run's own sweep)
    variant_files: list[str]
    executor_options: dict[str, Any]
    only: list[CellSpec] | None = None  # a rerun's cells
    rerun_of: dict[str, Any] | None = None  # a rerun's origin: {"run_dir", "run_id"}
    cell_timeout: float | None = None  # a resume's --cell-timeout, given again (RESUME_SETTINGS)
