"""Ctrl-C never leaves a worker behind, nor the run without its resume line, however the SIGINTs fall.

`timeout -s INT T attnbench run ...` once printed a bare `interrupted` and then waited 17 minutes: timeout
signals the command, then its whole process group, so the run got a second SIGINT while it was killing its
worker; that KeyboardInterrupt cut harness.workers.children.kill_tree between its SIGSTOP and its SIGKILL,
and multiprocessing's exit handler waited for the stopped worker forever. Each SIGINT here is a real one,
sent by the process to itself at the exact point under test (os.kill to oneself is handled before the next
line runs), so nothing depends on timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, cli_env, ctrl_c_reaches_it

from attnbench.harness.workers import children, interrupts


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process for the test's length (a test process started as a
    background job has it ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _dead(pid: int) -> bool:
    return children._state(pid) in ("", "Z")


def test_a_ctrl_c_while_a_tree_is_being_stopped_still_kills_all_of_it(ctrl_c_raises, monkeypatch):
    """The Ctrl-C comes after the worker was stopped and while its children are found: the whole tree is
    still killed (none is left stopped), and the Ctrl-C comes after."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(children.children(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        below = children.children(proc.pid)
        assert len(below) == 2
        real = children.children

        def children_then_ctrl_c(pid="self"):
            found = real(pid)
            _ctrl_c()  # the worker (pid) is stopped by now, and nothing is killed yet
            return found

        monkeypatch.setattr(children, "children", children_then_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            children.kill_tree(proc.pid, alive=True, group=False)
        monkeypatch.undo()
        assert proc.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while not all(_dead(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [children._state(pid) for pid in below if not _dead(pid)] == []
    finally:
        for pid in [proc.pid, *children.children(proc.pid)]:
            children._signal(pid, signal.SIGKILL)
        proc.wait()


def test_held_delivers_a_ctrl_c_after_the_block_and_first_only_drops_the_later_ones(ctrl_c_raises):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            _ctrl_c()
            done.append("the rest of the block")
    assert done == ["the rest of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    with interrupts.first_only() as came:
        with pytest.raises(KeyboardInterrupt):
            _ctrl_c()
            time.sleep(1)  # never reached: the first one raises
        with interrupts.held():
            _ctrl_c()  # the second, held, then handed to first_only: dropped
        _ctrl_c()  # the third: dropped
    assert len(came) == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _script(body: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`body` run by a fresh interpreter (`python -c` in the checkout: this checkout's attnbench) with
    Ctrl-C's default handling; a process still there after `timeout` (waiting for a stopped worker, say) is
    killed and the test fails."""
    proc = subprocess.Popen(
        [sys.executable, "-c", body, *args], cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # all of it: a stopped worker keeps its forkserver alive, and both hold the process's stdout
        children.kill_tree(proc.pid, alive=True, group=False)
        out, err = proc.communicate()
        pytest.fail(f"still running after {timeout} s (waiting for a stopped worker?)\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


EXIT_WITH_A_STOPPED_WORKER = """
import os, signal
from attnbench.harness.workers import isolation

worker = isolation.Worker({"log_path": os.devnull})
os.kill(worker.proc.pid, signal.SIGSTOP)  # as a kill cut short between its SIGSTOP and SIGKILL left it
print(worker.proc.pid, flush=True)
"""


def test_the_exit_does_not_wait_for_a_stopped_worker(tmp_path):
    """multiprocessing's exit handler waits for every child without a limit; a worker still there as the
    process exits is killed first, stopped or not."""
    done = _script(EXIT_WITH_A_STOPPED_WORKER, timeout=90)
    assert done.returncode == 0, done.stderr
    assert _dead(int(done.stdout.split()[0]))
