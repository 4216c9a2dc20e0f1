"""One variant never changes another's result through the worker process itself, outside torch: signals, the
garbage collector, the interpreter's hooks, threads threading does not list, the threads' CPUs and priority,
the subreaper flag, the resource limits (harness.workers.process_state, harness.workers.children). The
offender is named in its own row; an honest neighbour measured after it in the same run is as in a clean run.

The hostile plug-ins are tests/data/process_taint_variants.py and, for imports, a file written here."""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import subprocess
import sys

import pytest
from conftest import DATA, process_gone, run_cli

from attnbench.results import read_rows

TAINTS = DATA / "process_taint_variants.py"
# each offender followed by an honest neighbour, so that what it left would land in a neighbour's cell
ORDER = ",".join(["ptaint_alarm", "naive", "ptaint_itimer", "ptaint_gc", "chunked", "ptaint_profile",
                  "ptaint_rawthread", "ptaint_affinity", "ptaint_nice", "ptaint_escape",
                  "ptaint_rlimit", "stable_softmax"])  # fmt: skip
SMALL = ("--seq-len", "32", "--heads", "2", "--threads", "2", "--budget-ms", "5", "--warmup-ms", "1",
         "--min-ms", "2", "-q")  # fmt: skip
NEIGHBOURS = ("naive", "chunked", "stable_softmax")


def _rows(out):
    return {r["variant"]: r for r in read_rows(out)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run of every offender with honest neighbours after them, and a clean run of the neighbours."""
    root = tmp_path_factory.mktemp("process_taint")
    pids = root / "pids"
    pids.mkdir()
    try:
        # a process of its own: its workers fork from its forkserver (in this test process, the one started
        # under the suite's environment, a worker with --env is spawned: the run's process is its parent)
        dirty = run_cli("run", "--variant-file", str(TAINTS), "--variants", ORDER, *SMALL, "--env",
                        f"ATTNBENCH_TEST_PIDS={pids}", "--out", str(root / "dirty"), check=True,
                        process=True)  # fmt: skip
        escaped = [int(p.name) for p in pids.iterdir()]
        alive = [
            pid for pid in escaped if not process_gone(pid, 3.0)
        ]  # read before the clean run: killed by the harness
        run_cli("run", "--variants", ",".join(NEIGHBOURS), *SMALL, "--out", str(root / "clean"), check=True)
        yield root, dirty, escaped, alive
    finally:
        for p in pids.iterdir():  # whatever the harness missed: never left behind by the tests
            try:
                os.kill(int(p.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


pytestmark = pytest.mark.slow  # a fresh worker after each offender (about 30 s)


def test_neighbours_after_an_offender_are_as_in_a_clean_run(runs):
    """Without the comparison, naive after ptaint_alarm was `crashed` (worker killed by SIGALRM), chunked
    after ptaint_gc timed a collection at every allocation, every row after ptaint_rawthread shared the CPU
    with its spinning thread."""
    root, _, _, _ = runs
    dirty, clean = _rows(root / "dirty"), _rows(root / "clean")
    for name in NEIGHBOURS:
        row, ref = dirty[name], clean[name]
        assert row["status"] == ref["status"] == "ok", row["message"]
        assert row["threads"] == ref["threads"] == 2
        assert "changed" not in row["message"] and "running" not in row["message"], row["message"]
    probe = json.loads((root / "dirty" / "numerics.json").read_text())["probe"]
    for name in NEIGHBOURS:
        assert {r["status"] for r in probe if r["variant"] == name} == {"ok"}


def test_each_offender_is_named_in_its_own_row(runs):
    root, _, _, _ = runs
    rows = _rows(root / "dirty")
    said = {
        "ptaint_alarm": "changed the worker process's state: ITIMER_REAL armed",
        "ptaint_itimer": "changed the worker process's state: SIGALRM handler SIG_DFL → "
        "ptaint_itimer.<locals>.<lambda>; ITIMER_REAL armed (every 0.01 s)",
        "ptaint_gc": "changed the worker process's state: gc.callbacks changed (0 → 1); gc threshold "
        f"{'/'.join(map(str, gc.get_threshold()))} → 1/1/1",
        "ptaint_profile": "changed the worker process's state: sys.profile none → ptaint_profile.<locals>."
        "<lambda>; sys.switchinterval 0.005 → 1e-06",
        "ptaint_nice": "changed the worker process's state: nice 0 → 19 on ",
        "ptaint_escape": "changed the worker process's state: child subreaper 1 → 0",
        # without the comparison, every later cell of its worker was `oom` (a trial's, at N = 4096)
        "ptaint_rlimit": "changed the worker process's state: RLIMIT_AS unlimited/unlimited → ",
    }
    if len(os.sched_getaffinity(0)) > 1:
        cpus = sorted(os.sched_getaffinity(0))  # contiguous on a test machine: '0-1'
        said["ptaint_affinity"] = (
            f"changed the worker process's state: CPU affinity {cpus[0]}-{cpus[-1]} → 0 on "
        )
    for name, words in said.items():
        assert rows[name]["status"] == "error" and rows[name]["message"].startswith(words), rows[name]
    raw = rows["ptaint_rawthread"]  # a thread is said, not blamed, and its worker replaced
    assert "left 1 thread running (_spin, started with _thread); its worker was replaced" in raw["message"]
    log = (root / "dirty" / "worker.log").read_text()
    assert "exiting: a variant changed this process's state" in log
    assert "exiting: a variant left threads running in this process" in log


def test_a_process_detached_with_the_subreaper_flag_off_is_killed(runs):
    """ptaint_escape switched its worker's subreaper flag off and double-forked a sleeper into a session of
    its own: it outlived the run (parent init). It lands on the forkserver, a subreaper too, and is killed
    with its worker."""
    root, _, escaped, alive = runs
    assert escaped, "the variant started no sleeper"
    assert alive == [], alive
    assert "detached from a worker by a variant" in (root / "dirty" / "worker.log").read_text()


IMPORT_TAINT = """
import gc, multiprocessing, threading, time

from attnbench import variants

if multiprocessing.parent_process() is not None:  # in the worker, not the test's process (the run imports it)
    gc.set_threshold(1, 1, 1)
    threading.Thread(target=lambda: time.sleep(300), daemon=True, name="innocent").start()


@variants.register("import_taint", description="naive; its file's import starts a thread and changes gc")
def import_taint(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_an_imports_change_is_put_back_and_its_thread_noted_in_every_row(tmp_path):
    """A thread started as a variant file is imported ran beside every cell of every worker, its variant
    listed or not, and no row said so; a changed gc threshold stayed. The threshold is put back and named in
    the file's variants' rows; the thread, which cannot be stopped, is named there too and noted in every
    other row (their status kept)."""
    (tmp_path / "imported.py").write_text(IMPORT_TAINT)
    run_cli("run", "--variant-file", str(tmp_path / "imported.py"), "--variants", "import_taint,naive",
            *SMALL, "--out", str(tmp_path / "r"), check=True)  # fmt: skip
    rows = _rows(tmp_path / "r")
    threshold = "/".join(map(str, gc.get_threshold()))
    assert rows["import_taint"]["status"] == "error"
    assert rows["import_taint"]["message"].startswith(
        f"changed the worker process's state: gc threshold {threshold} → 1/1/1 when imported (put back); "
        "left 1 thread running (innocent) when imported"
    )
    assert rows["naive"]["status"] == "ok", rows["naive"]["message"]
    assert (
        f"importing variant file {tmp_path / 'imported.py'} left 1 thread running (innocent), beside every "
        "cell" in rows["naive"]["message"]
    )
    assert "changed" not in rows["naive"]["message"]


SNAPSHOT = """
import ctypes, gc, json, os, resource, signal, sys, threading
from attnbench.harness.workers.children import become_subreaper
from attnbench.harness.workers.process_state import State

become_subreaper()
state = State()
before = state.take()
handler = lambda *a: None
signal.signal(signal.SIGUSR1, handler)
signal.setitimer(signal.ITIMER_PROF, 5.0)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
gc.callbacks.append(handler)
gc.disable()
sys.settrace(handler)
threading.setprofile(handler)
sys.setrecursionlimit(sys.getrecursionlimit() - 100)
cpus = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, cpus[:1])
os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 5)
ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))  # soft only: raised back without a privilege
changes = state.changes(before)
sys.settrace(None)
left = state.restore(before)
print(json.dumps({"changes": changes, "left": left, "after": state.changes(before),
                  "gc": gc.isenabled(), "timer": signal.getitimer(signal.ITIMER_PROF)[0],
                  "cpus": sorted(os.sched_getaffinity(0)) == cpus, "root": os.geteuid() == 0,
                  "nofile": resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)}))
"""


def test_the_snapshot_names_each_change_and_restore_puts_it_back():
    """In a process of its own (what it changes is process-wide)."""
    out = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    changes = got["changes"]
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft_text, hard_text = ("unlimited" if v == resource.RLIM_INFINITY else str(v) for v in limits)
    for words in ("SIGUSR1 handler SIG_DFL → <lambda>", "ITIMER_PROF armed", "blocked signals none → SIGUSR2",
                  "gc.callbacks changed (0 → 1)", "gc enabled True → False", "sys.trace none → <lambda>",
                  "threading.profile none → <lambda>", "nice 0 → 5 on 1 thread",
                  "child subreaper 1 → 0",
                  f"RLIMIT_NOFILE {soft_text}/{hard_text} → 64/{hard_text}"):  # fmt: skip
        assert words in changes, changes
    assert any(c.startswith("sys.recursionlimit ") for c in changes)
    if got["cpus"] is not None and len(os.sched_getaffinity(0)) > 1:
        assert any(c.startswith("CPU affinity ") for c in changes), changes
    # a raised priority needs the privilege to raise it back: without it, restore says so
    expected_left = [] if got["root"] else ["nice 0 → 5 on 1 thread"]
    assert got["left"] == expected_left and got["after"] == expected_left
    assert got["gc"] is True and got["timer"] == 0.0 and got["cpus"] is True and got["nofile"] is True


# a variant's 10 ms interval timer, its handler SIGALRM's: the clean state's SIG_DFL is put back with the
# process stopped 50 ms right after it (a loaded machine's preemption), before anything else restore does
TIMER_PUT_BACK = """
import signal, time
from attnbench.harness.workers.process_state import State

state = State()
clean = state.take()
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
put = signal.signal

def preempted(sig, handler):
    old = put(sig, handler)
    time.sleep(0.05)
    return old

signal.signal = preempted
left = state.restore(clean)
signal.signal = put
print(left, signal.getitimer(signal.ITIMER_REAL), signal.getsignal(signal.SIGALRM) is signal.SIG_DFL)
"""


def test_an_interval_timer_is_disarmed_before_its_signals_default_action_is_put_back():
    """ptaint_itimer's row read `crashed` on a machine loaded six times over: restore put SIGALRM's default
    action back (terminate) and then disarmed the variant's 10 ms timer, which fired between the two and
    ended the worker before its row was sent. The timer is disarmed first."""
    out = subprocess.run([sys.executable, "-c", TIMER_PUT_BACK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split("\n")[0] == "[] (0.0, 0.0) True"


IMPORT_ENV = """
import os

from attnbench import variants

os.environ["OMP_NUM_THREADS"] = "1"  # at import: every worker of the run starts with it


@variants.register("import_env", description="naive; its file's import sets OMP_NUM_THREADS=1")
def import_env(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_an_import_that_sets_a_variable_of_the_measurement_is_warned_about_as_the_run_starts(
    tmp_path, monkeypatch
):
    """A variant file setting OMP_NUM_THREADS=1 at import made every variant of the run measure on one
    thread: ok rows, and nothing said until compare read meta.json. A real process: the import changes
    the environment of the process that runs it, started without the variable (conftest gives an xdist
    test process's commands OMP_NUM_THREADS)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    plug = tmp_path / "envplug.py"
    plug.write_text(IMPORT_ENV)
    p = run_cli("run", "--variant-file", str(plug), "--variants", "import_env,naive", *SMALL, "--out",
                str(tmp_path / "r"), process=True, check=True)  # fmt: skip
    warned = [line for line in p.stderr.splitlines() if "OMP_NUM_THREADS" in line]
    assert warned == [
        f"attnbench: warning: importing variant file {plug} set OMP_NUM_THREADS=1 in the environment every "
        "worker of this run starts with: every variant is measured so (meta.json records it); give it with "
        "--env where it is meant"
    ]
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert "OMP_NUM_THREADS=1" in meta["fingerprint"]["allocator_env"]  # what it warns of is so
    plug.write_text(IMPORT_ENV.replace('os.environ["OMP_NUM_THREADS"] = "1"', "pass"))
    p = run_cli("run", "--variant-file", str(plug), "--variants", "import_env", *SMALL, "--out",
                str(tmp_path / "clean"), process=True, check=True)  # fmt: skip
    assert "OMP_NUM_THREADS" not in p.stderr
