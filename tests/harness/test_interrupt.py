"""Ctrl-C never leaves a worker behind, nor the run without its resume line, however the SIGINTs fall.

`timeout -s INT T attnbench run ...` once printed a bare `interrupted` and then waited 17 minutes: timeout
signals the command, then its whole process group, so the run got a second SIGINT while it was killing its
worker; that KeyboardInterrupt cut harness.workers.children.kill_tree between its SIGSTOP and its SIGKILL,
and multiprocessing's exit handler waited for the stopped worker forever. Each SIGINT here is a real one,
sent by the process to itself at the exact point under test (os.kill to oneself is handled before the next
line runs), so nothing depends on timing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, cli_env, ctrl_c_reaches_it

from attnbench.harness.workers import children, interrupts
from attnbench.results import read_rows

RUN = ("run", "--heads", "2", "--budget-ms", "5", "--warmup-ms", "1", "--min-ms", "1", "--calibrate-ms", "0")


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


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_are_held_and_dropped_as_ctrl_c_is_within_a_run(signame):
    """Where they would end the process at once, a run (first_only) takes SIGTERM and SIGHUP as Ctrl-C: the
    first raises, one inside a held block (a row being written, a worker being killed) comes after it,
    later ones are dropped; both are put back after; the command line's exit status names the first."""
    sig = getattr(signal, signame)
    before = signal.signal(sig, signal.SIG_DFL)
    try:
        done = []
        interrupts.STOPPED.clear()
        with interrupts.first_only() as came:
            with pytest.raises(KeyboardInterrupt):
                with interrupts.held():
                    os.kill(os.getpid(), sig)
                    done.append("the rest of the block")
            os.kill(os.getpid(), sig)  # the second: dropped
        assert done == ["the rest of the block"] and came == [sig, sig]
        assert signal.getsignal(sig) == signal.SIG_DFL and interrupts.stop_signal() == sig
        interrupts.STOPPED.clear()
    finally:
        signal.signal(sig, before)


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


# A real `attnbench run`: SIGINT after its first row, then again inside every kill_tree, after the worker was
# stopped (as `timeout -s INT` sends two: to the command, then to its group)
CTRL_C_TWICE = """
import os, signal, sys
from attnbench.harness.workers import children
from attnbench.results import store

write, stop = store.RunWriter.append, children.descendants

def append(self, row):
    write(self, row)
    os.kill(os.getpid(), signal.SIGINT)

def descendants(pid, *found):
    os.kill(os.getpid(), signal.SIGINT)
    return stop(pid, *found)

store.RunWriter.append, children.descendants = append, descendants
from attnbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_second_ctrl_c_while_the_worker_is_killed_leaves_nothing_stopped(tmp_path):
    out = tmp_path / "run"
    args = (*RUN, "--variants", "naive,sdpa", "--seq-len", "32,64", "-q", "--out", str(out))
    done = _script(CTRL_C_TWICE, *args)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert f"interrupted: finished rows are kept in {out} (1 ok); finish with: attnbench run --resume" in (
        done.stderr
    )
    assert len(read_rows(out)) == 1
    log = (out / "worker.log").read_text().splitlines()
    pids = [int(line.split()[2]) for line in log if line.startswith("attnbench worker")]
    assert pids and all(_dead(pid) for pid in pids)


# SIGINT once a resume has written its line in resumes.jsonl (before its worker starts), or as a run closes
CTRL_C_AT = """
import os, signal, sys
from attnbench.harness.run import runner
from attnbench.results import store

where = {where!r}
patched = store.RunWriter if where == "log_resume" else runner.Progress
real = getattr(patched, where)

def then_ctrl_c(self, *args):
    real(self, *args)
    os.kill(os.getpid(), signal.SIGINT)

setattr(patched, where, then_ctrl_c)
from attnbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_ctrl_c_as_a_run_starts_or_closes_says_how_to_finish_it(tmp_path):
    """The run directory exists: `finish with: attnbench run --resume`, exit 130, whether the Ctrl-C came as
    a resume started or as a finished run closed (they used to reach the command's bare `interrupted`)."""
    out = tmp_path / "run"
    args = (*RUN, "--variants", "naive", "--seq-len", "32,64", "-q", "--out", str(out))
    done = _script(CTRL_C_AT.format(where="stop"), *args)
    assert done.returncode == 130, done.stderr
    assert f"interrupted: finished rows are kept in {out} (2 ok); finish with: attnbench run --resume" in (
        done.stderr
    )
    (out / "rows.jsonl").write_text((out / "rows.jsonl").read_text().splitlines()[0] + "\n")  # one to do

    done = _script(CTRL_C_AT.format(where="log_resume"), "run", "--resume", "--out", str(out))
    assert done.returncode == 130, done.stderr
    # this session's cells, and the visit of the cell whose row was cut (a resume makes its row of it)
    said = (
        f"interrupted: finished rows are kept in {out} (no cells run; 1 visit of 1 cell not finished); finish"
    )
    assert said in done.stderr, done.stderr
    assert len(read_rows(out)) == 1
    assert len((out / "resumes.jsonl").read_text().splitlines()) == 1


# Ctrl-C at the last moment before a new run's meta.json, once every file a start may write was made: its
# variants shipped by value (variants.pkl), its worker's log, its lock, and another run measuring beside it;
# then the same call again, into the folder it left
STOPPED_BEFORE_META = """
import json, os, signal, sys
import attnbench
from attnbench.results import store

def attn(q, k, v, *, scale=None):
    return ((q @ k.transpose(-2, -1)) * (scale or q.shape[-1] ** -0.5)).softmax(-1) @ v

write = store.RunWriter.write_meta

def ctrl_c_instead(self, meta):
    os.kill(os.getpid(), signal.SIGINT)

out = sys.argv[1]
kw = dict(variants=[attn], seq_len="32", heads=2, budget_ms=5, warmup_ms=1, min_ms=1, calibrate_ms=0,
          out=out, progress=False)
store.RunWriter.write_meta = ctrl_c_instead
try:
    attnbench.run(**kw)
except KeyboardInterrupt as exc:
    said = str(exc)
left = sorted(os.listdir(out))
store.RunWriter.write_meta = write
again = attnbench.run(**kw)
print(json.dumps({"said": said, "left": left, "again": again.counts}))
"""


def test_a_start_stopped_before_meta_json_leaves_only_what_the_same_command_reuses(tmp_path, monkeypatch):
    """Every file a run's start writes before its meta.json is one of store.START_LEFTOVERS, which the same
    command reuses: another run measuring on the machine made the start leave its neighbours.jsonl, which
    the list lacked, so the folder was refused as 'not empty', and as 'no meta.json' by --resume."""
    from attnbench.harness.run import neighbours
    from attnbench.results import store

    monkeypatch.setenv(neighbours.ENV, str(tmp_path / "announced"))
    beside = neighbours.announce(tmp_path / "other")  # this test's process: a live run beside it
    try:
        done = _script(STOPPED_BEFORE_META, str(tmp_path / "run"), timeout=180)
    finally:
        beside.end(None)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["said"].startswith("interrupted while starting, before the run's meta.json was written")
    # the start got as far as it goes before meta.json: every writer before it wrote its file
    assert {store.LOCK, store.SHIPPED, "worker.log"} <= set(got["left"]), got["left"]
    left_over = [n for n in got["left"] if not any(Path(n).match(p) for p in store.START_LEFTOVERS)]
    assert left_over == [], got["left"]
    assert got["again"] == {"ok": 1}


API_LOOP = """
import json, os, signal, sys
import attnbench
from attnbench.results import store

write = store.RunWriter.append

def append(self, row):
    write(self, row)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C once the first row is written

store.RunWriter.append = append
started = []
try:
    for n in ("32,64", "128"):
        out = os.path.join(sys.argv[1], n)
        started.append(out)
        attnbench.run(variants="naive", seq_len=n, heads=2, budget_ms=5, warmup_ms=1, min_ms=1,
                      calibrate_ms=0, out=out)
except KeyboardInterrupt as exc:
    print(json.dumps({"type": type(exc).__name__, "said": str(exc), "path": str(exc.run.path),
                      "counts": exc.run.counts, "interrupted": exc.run.interrupted, "started": started,
                      "missing": exc.run.missing}))
"""


def test_an_interrupted_api_run_raises_keyboard_interrupt_after_keeping_its_rows(tmp_path):
    """attnbench.run stopped by Ctrl-C raises (a script's loop of runs stops), once its finished rows are
    written; the exception says how to finish the run and carries it, with its `missing` the cells it
    planned that have no row (it said 0: counted only where the executor returned)."""
    done = _script(API_LOOP, str(tmp_path))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    first = str(tmp_path / "32,64")
    assert got["started"] == [first]  # the loop stopped
    assert got["type"] == "RunInterrupted" and got["interrupted"] and got["counts"] == {"ok": 1}
    assert got["path"] == first and len(read_rows(first)) == 1
    planned = json.loads((Path(first) / "meta.json").read_text())["planned_cells"]
    assert planned > 1 and got["missing"] == planned - 1, (got, planned)
    assert f"finish with: attnbench.run(out={first!r}, resume=True)" in got["said"]


SERVER_SIGNALLED = """
import multiprocessing as mp, multiprocessing.forkserver as fs, os, signal, sys, time
from attnbench.harness.workers import isolation

def hello(q):
    q.put(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)

if __name__ == "__main__":
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(isolation._FORKSERVER_PRELOAD)
    fs.ensure_running()
    pid, start = fs._forkserver._forkserver_pid, time.monotonic()
    while "libtorch" not in open(f"/proc/{pid}/maps").read():  # the server is importing torch
        assert time.monotonic() - start < 60
        time.sleep(0.01)
    os.kill(pid, signal.SIGINT)
    q = ctx.Queue()
    p = ctx.Process(target=hello, args=(q,))
    p.start()
    print("ignored" if q.get(timeout=60) else "handled")
    p.join()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's /proc/PID/maps")
def test_a_ctrl_c_while_the_forkserver_imports_torch_neither_kills_it_nor_prints_a_traceback(tmp_path):
    """A terminal's Ctrl-C reaches the forkserver too; while it imported torch it was Python's, and a run's
    first seconds printed the server's KeyboardInterrupt traceback (and lost the server). The first preload
    ignores it, and the workers forked from the server start with it ignored."""
    script = tmp_path / "server.py"
    script.write_text(SERVER_SIGNALLED)
    p = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=cli_env()
    )
    assert p.returncode == 0 and p.stdout.strip() == "ignored", p.stdout + p.stderr
    assert "KeyboardInterrupt" not in p.stderr, p.stderr


SERVER_STARTED = """
import json, multiprocessing.forkserver as fs, os, signal, time
from attnbench.harness.workers import isolation

SIGINT = 1 << (signal.SIGINT - 1)

def bits(pid, *fields):  # read in one go: two reads could straddle the server's ignore-then-unblock
    status = {k: v for k, _, v in (line.partition(":") for line in open(f"/proc/{pid}/status"))}
    got = tuple(int(status[f].split()[0], 16) for f in fields)
    return got if len(got) > 1 else got[0]

isolation.prestart()
pid, start, handled = fs._forkserver._forkserver_pid, time.monotonic(), 0
os.kill(pid, signal.SIGINT)  # at once: the server is starting Python, or importing attnbench
while "libtorch" not in open(f"/proc/{pid}/maps").read():  # until it imports torch
    caught, blocked_now = bits(pid, "SigCgt", "SigBlk")  # one moment's state, both fields
    handled += bool(caught & SIGINT and not blocked_now & SIGINT)
    assert time.monotonic() - start < 60
blocked = {"parent": bool(bits(os.getpid(), "SigBlk") & SIGINT)}
for name, config in (("forked", {}), ("spawned", {"cpu_affinity": [min(os.sched_getaffinity(0))]})):
    worker = isolation.Worker({"log_path": os.devnull, **config})
    blocked[name] = bool(bits(worker.pid, "SigBlk") & SIGINT)
    worker.kill()
print(json.dumps({"handled": handled, "server": fs._forkserver._forkserver_pid == pid, "blocked": blocked}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's /proc/PID/status")
def test_the_forkserver_never_handles_a_ctrl_c_from_its_start(tmp_path):
    """The server's first preload ignores Ctrl-C; before it (Python starting, attnbench imported for that
    preload) a Ctrl-C in a run's first second printed the server's KeyboardInterrupt traceback under the
    run's 'interrupted' line. It starts with SIGINT blocked, so that one sent at once waits and is dropped;
    the parent and every worker, forked or spawned, have it unblocked after."""
    p = subprocess.run(
        [sys.executable, "-c", SERVER_STARTED], capture_output=True, text=True, timeout=180, env=cli_env()
    )
    assert p.returncode == 0, p.stderr
    assert "KeyboardInterrupt" not in p.stderr, p.stderr
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["handled"] == 0 and got["server"], got  # never Python's to handle, and the server lived
    assert got["blocked"] == {"parent": False, "forked": False, "spawned": False}


BENCH_STOPPED = """
import json, os, signal, sys
import attnbench
from attnbench.harness.tools import check
from attnbench.harness.workers import isolation
from attnbench.interrupted import RunInterrupted
from attnbench.results import visits

def attn(q, k, v, *, scale=None):
    return ((q @ k.transpose(-2, -1)) * (scale or q.shape[-1] ** -0.5)).softmax(-1) @ v

def ctrl_c_after(cls, name, n):
    real, calls = getattr(cls, name), []

    def then_ctrl_c(self, *args, **kwargs):
        got = real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGINT)
        return got

    setattr(cls, name, then_ctrl_c)
    return lambda: setattr(cls, name, real)

out, said = sys.argv[1], {}
undo = ctrl_c_after(visits.VisitLog, "append", 3)  # in the sweep's first round: no cell has its row yet
try:
    attnbench.bench(attn, out=out, seq_len="64", dtype="float32", causal="no", padding="0", budget_ms=5,
                    warmup_ms=1, min_ms=1, calibrate_ms=0, progress=False)
except RunInterrupted as exc:
    said["sweep"] = str(exc)
undo()
gates = check.bench_gates

def gates_stopped(*args, **kwargs):  # Ctrl-C while a gate's worker is awaited (isolation._receive)
    ctrl_c_after(isolation.Worker, "_receive", 1)
    return gates(*args, **kwargs)

check.bench_gates = gates_stopped
try:
    attnbench.bench(attn, out=out, resume=True, progress=False)
except RunInterrupted as exc:
    said["gate"] = str(exc)
check.bench_gates = gates
ran = attnbench.bench(attn, out=out, resume=True, progress=False)
said["answer"], said["counts"] = str(ran).splitlines()[0], ran.counts
print(json.dumps(said))
"""


def test_a_bench_stopped_in_its_sweep_or_its_gate_is_finished_and_answered_by_benchs_resume(tmp_path):
    """Ctrl-C in bench's sweep pointed at run's resume, which left the run without its answer (and bench's
    own resume was refused: "drop preset"); with rounds it said "no cells run" beside visits kept; in the
    gate at N = 100 after the sweep it raised a bare KeyboardInterrupt. Each says bench's resume now, which
    finishes the run and answers, with every cell of the run counted."""
    out = tmp_path / "b"
    done = _script(BENCH_STOPPED, str(out), timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    again = f"attnbench.bench(attn, out={str(out)!r}, resume=True)"
    assert said["sweep"].startswith(f"interrupted: finished rows are kept in {out} (no cell finished; ")
    assert re.search(r"; \d+ visits? of \d cells? not finished\); finish with: ", said["sweep"]), said[
        "sweep"
    ]
    assert said["sweep"].endswith(again), said["sweep"]
    assert said["gate"] == (
        f"interrupted during the gate at N = 100 and 300, after the sweep: rows kept in {out} (2 ok); "
        f"answer with: {again}"
    )
    assert said["answer"].startswith("attn against sdpa: "), said["answer"]
    assert said["counts"] == {"ok": 2}


def test_a_stopped_runs_visits_are_said_and_bench_on_the_command_line_says_its_own_resume(tmp_path):
    """What a stopped run kept, from its files: cells by status, and the visits of cells without a row yet;
    `attnbench bench`'s Ctrl-C says its own --resume, which answers (run's would not)."""
    from synthetic import cell, write_run

    from attnbench.api import Run
    from attnbench.interrupted import bench_interrupted, kept_text
    from attnbench.results.visits import VisitLog

    path = write_run(tmp_path / "r", [cell("mine", 64)])
    log = VisitLog(path)
    for cell_id, visit in (("a", 1), ("b", 1), ("a", 2)):
        log.append(cell_id, visit, {"status": "ok"})
    log.close()
    assert kept_text(path, {"ok": 1}) == "1 ok; 3 visits of 2 cells not finished"
    assert kept_text(path, {}) == "no cell finished; 3 visits of 2 cells not finished"
    said = str(bench_interrupted(Run(path, {"ok": 1}), "mine", None, flags=True))
    assert said.endswith(f"finish with: attnbench bench mine --resume --out {path}"), said


def test_benchs_resume_of_a_run_of_other_variants_is_refused_before_any_work(tmp_path):
    from synthetic import cell, write_run

    import attnbench

    path = write_run(tmp_path / "r", [cell("mine", 64), cell("sdpa", 64)])
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(
        ValueError, match=r"^bench: the run in .* measured 'mine' and 'sdpa', not 'other': resume"
    ):
        attnbench.bench("other", out=path, resume=True)
    with pytest.raises(ValueError, match=r"measured 'mine' and 'sdpa', not 'mine' against 'naive'"):
        attnbench.bench("mine", baseline="naive", out=path, resume=True)
    with pytest.raises(
        ValueError,
        match=r"^resume=True takes the sweep and its settings from the run's meta.json; drop seq_len",
    ):
        attnbench.bench("mine", out=path, resume=True, seq_len=64)
    assert sorted(p.name for p in path.iterdir()) == before


HANGS = """
import time
from pathlib import Path
from attnbench import register

@register("hangs", description="a kernel that never returns")
def hangs(q, k, v):
    Path(__file__).with_suffix(".busy").touch()
    while True:
        time.sleep(0.05)
"""


def _until(done, what: str, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, f"still waiting after {deadline_s} s: {what}"
        time.sleep(0.1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; Linux's death signal")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGKILL"])
def test_a_run_stopped_by_a_signal_while_a_kernel_hangs_leaves_no_process_behind(tmp_path, signame):
    """`timeout` (SIGTERM), a closed terminal or lost ssh session (SIGHUP) stop a run as Ctrl-C does: the
    interrupted line, exit 128 + the signal, its worker killed. A run killed outright (kill -9, the OOM
    killer) cannot kill it: its forkserver ends with it and takes the worker along, where both used to
    live on for good beside a hung kernel (the worker held the server's "alive" pipe; the server was the
    worker's parent, which its death signal is tied to)."""
    plugin = tmp_path / "hangs.py"
    plugin.write_text(HANGS)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "run", "--variant-file", str(plugin), "--variants", "hangs",
         "--seq-len", "32", "--heads", "1", "--calibrate-ms", "0", "-q", "--out", str(out)],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    left: list[int] = []
    try:
        _until(lambda: plugin.with_suffix(".busy").exists() or proc.poll() is not None, "the kernel to start")
        assert proc.poll() is None, proc.communicate()
        log = (out / "worker.log").read_text().splitlines()
        workers = [int(line.split()[2]) for line in log if line.startswith("attnbench worker")]
        servers = [
            p for p in children.children(proc.pid) if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        left = [*workers, *servers]
        assert workers and servers
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=180)
        if signame != "SIGKILL":
            assert proc.returncode == 128 + getattr(signal, signame), err
            assert f"interrupted: finished rows are kept in {out}" in err and "Traceback" not in err
        _until(lambda: all(_dead(pid) for pid in left), "the forkserver and worker to end", 60)
    finally:
        for pid in [proc.pid, *left]:
            if not _dead(pid):
                children._signal(pid, signal.SIGKILL)
        proc.communicate()


@pytest.mark.parametrize(
    "command, signame",
    [("bench", "SIGINT"), ("bench", "SIGTERM"), ("run", "SIGINT"), ("run", "SIGTERM"), ("check", "SIGINT")],
)
def test_a_command_stopped_while_a_variant_file_imports_says_so_with_the_signals_status(
    tmp_path, command, signame
):
    """A plug-in that hangs at import: Ctrl-C and SIGTERM stop the command as at any other moment (130,
    143) with one line. `bench` took them for the file's failure and went on (only SIGKILL ended it);
    `run` said 'failed to import: KeyboardInterrupt' and exited 2, as if the file were broken."""
    marker = tmp_path / "importing"
    hangs = tmp_path / "hangs.py"
    hangs.write_text(f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(600)\n")
    argv = {
        "run": ("run", "--variants", "naive", "--seq-len", "32", "--out", str(tmp_path / "r")),
        "check": ("check", "--seq-len", "32"),
        "bench": ("bench", "hangs", "--out", str(tmp_path / "r")),
    }[command]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", *argv, "--variant-file", str(hangs)], cwd=ROOT, env=cli_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + getattr(signal, signame), err
    assert err.strip().splitlines() == [
        f"interrupted while importing the variant file {str(hangs)!r}: nothing was measured"
    ]
    assert not (tmp_path / "r").exists()
