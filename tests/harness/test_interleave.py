"""`attnbench interleave`: runs of two or more set-ups made interleaved (harness.run.interleave): the order,
the sides, what is refused before anything is written, and a real set of runs that compare pairs."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import run_cli

from attnbench.harness.run import interleave

TINY = ["--variants", "naive", "--seq-len", "32", "--heads", "1", "--d-k", "8", "--threads", "1",
        "--warmup-ms", "1", "--budget-ms", "3", "--min-ms", "1", "--calibrate-ms", "0"]  # fmt: skip


def test_run_i_of_every_side_is_back_to_back_and_the_sides_alternate(tmp_path):
    plan = interleave.Plan(tmp_path, 3, (("a", ""), ("b", "env X=1 python -m attnbench")), ("--heads", "1"))
    assert plan.order() == [(1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b")]
    assert plan.run_dir(2, "b") == tmp_path / "b" / "run2"
    assert plan.command("b") == ["env", "X=1", "python", "-m", "attnbench"]
    assert plan.command("a")[1:] == ["-m", "attnbench"]  # this interpreter's attnbench
    assert json.loads(plan.to_json()) == {"runs": 3, "sides": [["a", ""], ["b", plan.sides[1][1]]],
                                          "args": ["--heads", "1"]}  # fmt: skip


@pytest.mark.parametrize(
    "sides, words",
    [
        (["a"], "--side needs two or more sides to interleave"),
        (["a", "a"], "--side names 'a' twice"),
        (["a", "b c"], "--side 'b c': a side is NAME or NAME=COMMAND"),
        (["a", "b="], "--side 'b=': the command after '=' is empty"),
    ],
)
def test_bad_sides_are_one_line(sides, words):
    with pytest.raises(ValueError, match=f"^{words}"):
        interleave.parse_sides(sides)


def test_what_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "set"
    cases = [
        (["--runs", "2", "--side", "a", "--side", "b", "--", *TINY], "--runs 2: compare judges"),
        (["--runs", "3", "--side", "a", "--side", "b", "--", "--out", "x"], "--out is the set's to give"),
        (["--side", "a", "--side", "b"], "--runs K: how many runs of each side"),
        (
            ["--runs", "3", "--side", "a", "--side", "b", "--", "--variants", "nope"],
            "side a: attnbench: error",
        ),
        (["--resume"], f"{str(out)!r} holds no interleaved runs"),
    ]
    for argv, words in cases:
        p = run_cli("interleave", str(out), *argv)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert words in p.stderr, (argv, p.stderr)
        assert not out.exists()


FAKE = """
import sys
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("--out") + 1])
with open(Path(__file__).parent / "made.log", "a") as log:
    log.write(str(out.relative_to(Path(__file__).parent)) + "\\n")
"""


def test_the_runs_are_made_in_order_by_each_sides_command(tmp_path):
    """make() with a side command that only logs what it was asked (a real set: the environments story of
    tests/frontends/test_false_alarm.py): run i of every side back to back, each with RUN_ARGS and its
    own --out, and interleave.json written first."""
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    command = f"{sys.executable} {fake}"
    plan = interleave.Plan(tmp_path / "set", 3, (("a", command), ("b", command)), ("--heads", "1"))
    said: list[str] = []
    assert interleave.make(plan, said.append) == 0
    made = (tmp_path / "made.log").read_text().split()
    assert made == ["set/a/run1", "set/b/run1", "set/b/run2", "set/a/run2", "set/a/run3", "set/b/run3"]
    assert json.loads((tmp_path / "set" / interleave.RECORD).read_text())["args"] == ["--heads", "1"]
    assert said[0] == f"run 1 of 3, side a: {tmp_path / 'set' / 'a' / 'run1'}"
    assert interleave.read(tmp_path / "set") == plan


def test_sides_with_one_command_are_dry_run_once(tmp_path):
    """An A/A check (two sides, one command) checks ARGS once; a side with another command checks it too."""
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    same, other = f"{sys.executable} {fake}", f"env X=1 {sys.executable} {fake}"
    plan = interleave.Plan(tmp_path / "set", 3, (("a", same), ("b", same), ("c", other)), ("--heads", "1"))
    interleave.dry_runs(plan)
    assert (tmp_path / "made.log").read_text().split() == ["set/a/run1", "set/c/run1"]


SLOW_TO_STOP = """
import signal, sys, time
from pathlib import Path

def stop(signum, frame):
    time.sleep(1.0)  # a run closing its directory after a Ctrl-C
    Path(sys.argv[1]).write_text("closed")
    sys.exit(130)

signal.signal(signal.SIGINT, stop)
Path(sys.argv[1] + ".ready").write_text("")
time.sleep(60)
"""


def test_a_ctrl_c_lets_the_sides_run_close_before_the_set_stops(tmp_path, ctrl_c_raises):
    """subprocess.run killed the side's run 0.25 s after the parent's KeyboardInterrupt, in the middle of its
    own stopping, and the interrupt left the command as a bare 'interrupted'. The run is handed the SIGINT
    and waited for; a second Ctrl-C meanwhile is ignored; the set's status is 130. Ctrl-C is Python's
    KeyboardInterrupt here (ctrl_c_raises), as in a terminal, even in a suite started in the background
    (`nox -s tests &`: SIGINT ignored, and this test waited out the side's 60 s and failed)."""
    import os
    import signal
    import threading
    import time

    script, marker = tmp_path / "side.py", tmp_path / "closed"
    script.write_text(SLOW_TO_STOP)

    def ctrl_c_twice():
        while not (tmp_path / "closed.ready").exists():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_twice, daemon=True).start()
    assert interleave.run_side([sys.executable, str(script), str(marker)]) == 130
    assert marker.read_text() == "closed"
