"""`attnbench interleave`: runs of two or more set-ups (torch versions, drivers' environments, allocator
settings), made interleaved, so that compare can pair run i of one with run i of the other.

Two runs made minutes apart on a shared machine differ as wholes (its speed drifts over minutes, and every
cell of the later run moves with it); runs of one set-up made one after another share that drift, so a
comparison of two such sets still sees it as a difference. Made interleaved (run i of every side back to
back, the sides' order alternating from one round to the next: A B, B A, A B, ...), run i of each side met
the same stretch of the drift, and compare pairs them (results.judge: the run level, paired by run index).

Each side is a name and the command that runs its attnbench (default: this one): OUT/NAME/run1 ..
OUT/NAME/runK are made by `COMMAND run ARGS --out OUT/NAME/runI`. OUT/interleave.json records the sides, K
and ARGS, written once every side's command has checked ARGS (a dry run) and before the first run starts,
so that `attnbench interleave OUT --resume` finishes the run that stopped and makes the rest.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnbench.harness.sweep.spec import SweepSpec
from attnbench.results.store import is_run_dir, is_unstarted, latest_rows, read_meta
from attnbench.results.writable import why_unwritable

RECORD = "interleave.json"
MIN_RUNS = 3  # compare judges by the runs with 3 or more a side
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
SIDE_GRACE_S = 60.0  # what a side's run has to stop in after a Ctrl-C (run_side)
OWN = ("--out", "--resume", "--rerun", "--dry-run", "--force-resume", "--redo-drift", "--repeat")


def this_attnbench() -> list[str]:
    """The command of the attnbench running now."""
    return [sys.executable, "-m", "attnbench"]


@dataclass(frozen=True)
class Plan:
    """What an interleaved set makes: K runs of each side, in order."""

    out: Path
    runs: int
    sides: tuple[tuple[str, str], ...]  # (name, command); command '' is this attnbench
    args: tuple[str, ...]

    def command(self, side: str) -> list[str]:
        text = dict(self.sides)[side]
        return shlex.split(text) if text else this_attnbench()

    def order(self) -> list[tuple[int, str]]:
        """(run index from 1, side) in the order they are made: the sides forward, then backward, ..."""
        names = [name for name, _ in self.sides]
        return [(i, name) for i in range(1, self.runs + 1) for name in (names if i % 2 else names[::-1])]

    def run_dir(self, index: int, side: str) -> Path:
        return self.out / side / f"run{index}"

    def to_json(self) -> str:
        sides = [list(side) for side in self.sides]
        return json.dumps({"runs": self.runs, "sides": sides, "args": list(self.args)})


def parse_sides(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--side NAME[=COMMAND]` values as (name, command); ValueError (one line) for a bad one."""
    sides: list[tuple[str, str]] = []
    for text in texts:
        name, _, command = text.partition("=")
        name = name.strip()
        if not _NAME.match(name):
            raise ValueError(
                f"--side {text!r}: a side is NAME or NAME=COMMAND, NAME of letters, digits, '_', '.' or '-'"
            )
        if "=" in text and not command.strip():
            raise ValueError(
                f"--side {text!r}: the command after '=' is empty (leave out '=' for this attnbench)"
            )
        sides.append((name, command.strip()))
    names = [n for n, _ in sides]
    if len(sides) < 2:
        raise ValueError(
            "--side needs two or more sides to interleave, e.g. --side old=/envs/old/bin/attnbench --side new"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--side names {twice[0]!r} twice")
    return tuple(sides)


def check_new(out: Path, runs: int, sides: tuple[tuple[str, str], ...], args: Sequence[str]) -> Plan:
    """A new set's Plan, checked before anything is written: K, the sides, ARGS (no option of a run's own
    place or mode), OUT empty."""
    if runs < MIN_RUNS:
        raise ValueError(f"--runs {runs}: compare judges interleaved runs by their pairs, {MIN_RUNS} or more")
    own = [a for a in args if a.split("=")[0] in OWN]
    if own:
        raise ValueError(f"{own[0]} is the set's to give (each run's --out is OUT/SIDE/runI): drop it")
    why = why_unwritable(out)
    if why:
        raise ValueError(f"OUT {str(out)!r} {why}")
    if out.is_dir() and not is_unstarted(out):
        raise ValueError(f"{str(out)!r} already exists and is not empty; pass --resume or choose another OUT")
    return Plan(out, runs, sides, tuple(args))


def read(out: Path) -> Plan:
    """The set in OUT (its interleave.json); ValueError (one line) when missing or damaged."""
    path = out / RECORD
    try:
        record = json.loads(path.read_text())
        sides = tuple((str(n), str(c)) for n, c in record["sides"])
        return Plan(out, int(record["runs"]), sides, tuple(str(a) for a in record["args"]))
    except FileNotFoundError:
        raise ValueError(f"{str(out)!r} holds no interleaved runs ({RECORD} is missing)") from None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path} is damaged: {exc}") from None


def dry_runs(plan: Plan) -> None:
    """Every side's attnbench checks ARGS (`run ARGS --dry-run`): ValueError with the first refusal's line.
    Sides with the same command (an A/A check) are checked once: the same program reads the same ARGS."""
    checked: set[tuple[str, ...]] = set()
    for name, _ in plan.sides:
        command = tuple(plan.command(name))
        if command in checked:
            continue
        checked.add(command)
        argv = [*command, "run", *plan.args, "--dry-run", "--out", str(plan.run_dir(1, name))]
        try:
            done = subprocess.run(argv, capture_output=True, text=True)
        except OSError as exc:
            raise ValueError(f"side {name}: cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise ValueError(f"side {name}: {lines[-1] if lines else f'exit status {done.returncode}'}")


def make(plan: Plan, say: Callable[[str], None], resume: bool = False) -> int:
    """Make (or finish) every run in order, each in its own process; the first non-zero exit status of a
    run stops the set and is returned (130: interrupted), else 0."""
    if not resume:
        plan.out.mkdir(parents=True, exist_ok=True)
        (plan.out / RECORD).write_text(plan.to_json() + "\n")
    for index, name in plan.order():
        target = plan.run_dir(index, name)
        again = is_run_dir(target)
        if again and _complete(target):
            continue
        say(f"run {index} of {plan.runs}, side {name}: {target}" + (" (finishing it)" if again else ""))
        argv = [*plan.command(name), "run", "-q"]
        argv += ["--resume", "--out", str(target)] if again else [*plan.args, "--out", str(target)]
        code = run_side(argv)
        if code != 0:
            return code
    return 0


def run_side(argv: Sequence[str], grace_s: float = SIDE_GRACE_S) -> int:
    """One side's run to its end, its exit status. A Ctrl-C stops it by its own handling (its finished rows
    kept, its directory closed): where subprocess.run would kill it 0.25 s after this process's
    KeyboardInterrupt, in the middle of that, the run is handed the SIGINT (a terminal's Ctrl-C reached it
    already, and a run drops a second) and waited for, `grace_s` at most, further Ctrl-Cs ignored; then
    130."""
    proc = subprocess.Popen(list(argv))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while True:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            return 130
        except KeyboardInterrupt:
            continue  # the run is stopping already
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return 130


def _complete(run_dir: Path) -> bool:
    """Whether every cell of the run's sweep has a row."""
    meta = read_meta(run_dir)
    sweep = SweepSpec.from_meta(meta["sweep"], run_dir / "meta.json")
    done = {r["cell_id"] for r in latest_rows(run_dir)}
    return all(c.cell_id in done for c in sweep.cells(list(meta.get("variants") or sweep.variants)))
