"""One variant never changes another's result: what a variant leaves in its worker (torch's global state, a
process running) is named in its own row, and its neighbours' rows are as in a clean run, whatever the order.

The hostile plug-ins are tests/data/taint_variants.py (each answers correctly itself) and, for an import
that changes torch's state, a file written here."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import DATA, process_gone, run_cli

from attnbench.results import read_rows

TAINTS = DATA / "taint_variants.py"
IMPORT_TAINT = """
import multiprocessing

import torch
from attnbench import variants

if multiprocessing.parent_process() is not None:  # in the worker, not the test's process (the run imports it)
    torch.set_num_threads(1)  # at import: every later variant would run on one thread


@variants.register("import_threads", description="sets one thread when its file is imported")
def import_threads(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)
"""
# the offenders first, between and last; the neighbours naive and chunked; every cell fwd+bwd (grad mode)
ORDER = ",".join(["taint_softmax", "taint_threads", "naive", "taint_grad", "taint_child", "taint_orphan",
                  "chunked", "import_threads", "taint_dtype"])  # fmt: skip
SMALL = ("--seq-len", "32", "--heads", "2", "--pass", "fwdbwd", "--threads", "2", "--budget-ms", "5",
         "--warmup-ms", "1", "--min-ms", "2", "-q")  # fmt: skip


pytestmark = pytest.mark.slow  # the module's run restarts its worker after each offender (about 40 s)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run of every offender with two honest neighbours, and a clean run of the neighbours alone."""
    root = tmp_path_factory.mktemp("taint")
    (root / "import_taint.py").write_text(IMPORT_TAINT)
    dirty = run_cli("run", "--variant-file", str(TAINTS), "--variant-file", str(root / "import_taint.py"),
                    "--variants", ORDER, *SMALL, "--out", str(root / "dirty"), check=True)  # fmt: skip
    run_cli("run", "--variants", "naive,chunked", *SMALL, "--out", str(root / "clean"), check=True)
    return root, dirty


def _rows(out):
    return {r["variant"]: r for r in read_rows(out)}


def test_neighbours_rows_are_as_in_a_clean_run(runs):
    """Without the snapshot, naive after taint_softmax was `wrong`, every fwd+bwd cell after taint_grad
    `error`, and every row after taint_threads said threads 1 (meta.json: 2)."""
    root, _ = runs
    dirty, clean = _rows(root / "dirty"), _rows(root / "clean")
    for name in ("naive", "chunked"):
        row, ref = dirty[name], clean[name]
        assert row["status"] == ref["status"] == "ok", row["message"]
        assert row["threads"] == ref["threads"] == 2
        for column in ("rel_err", "grad_rel_err", "fresh_rel_err"):  # the same inputs, the same answer
            assert row[column] == ref[column], column
        assert "changed torch" not in row["message"] and "running" not in row["message"]
    probe = json.loads((root / "dirty" / "numerics.json").read_text())["probe"]
    for name in ("naive", "chunked"):
        assert {r["status"] for r in probe if r["variant"] == name} == {"ok"}
    assert json.loads((root / "dirty" / "meta.json").read_text())["worker_threads"] == 2


def test_the_offender_is_named_in_its_own_row(runs):
    root, _ = runs
    rows = _rows(root / "dirty")
    said = {
        "taint_threads": "changed torch's global state: num_threads 2 → 1",
        "taint_grad": "changed torch's global state: grad_enabled True → False",
        "taint_softmax": "changed torch's global state: torch.softmax replaced",
        "taint_dtype": "changed torch's global state: default_dtype float32 → float64",
        "import_threads": "changed torch's global state: num_threads 2 → 1 when imported (put back)",
    }
    for name, words in said.items():
        assert rows[name]["status"] == "error" and rows[name]["message"].startswith(words), rows[name]
        assert rows[name]["threads"] == 2  # it started, as every cell, on the threads the run asked for
    log = (root / "dirty" / "worker.log").read_text()
    assert "exiting: a variant changed torch's global state" in log  # a fresh worker after each offender


def test_the_probes_offender_is_named_in_its_records_and_by_run(runs):
    root, dirty = runs
    probe = json.loads((root / "dirty" / "numerics.json").read_text())["probe"]
    for name in ("taint_threads", "taint_softmax", "import_threads"):
        records = [r for r in probe if r["variant"] == name]
        assert records and all(r["status"] == "error" for r in records), name
        assert all(r["message"].startswith("changed torch's global state") for r in records)
    softmax = "taint_softmax: changed torch's global state: torch.softmax replaced"
    assert f"note: numerics probe: {softmax}" in dirty.stderr
    assert "note: numerics probe: taint_child: left 1 process running (pid" in dirty.stderr


def test_a_process_left_running_is_killed_and_its_cell_named(runs):
    """taint_child starts a sleeper in a session of its own; taint_orphan's sleeper loses its parent (a
    double fork), once per worker process. Without the worker as their subreaper both outlived the run."""
    root, _ = runs
    probe = json.loads((root / "dirty" / "numerics.json").read_text())["probe"]
    for name in ("taint_child", "taint_orphan"):
        said = [
            r for r in [*probe, *read_rows(root / "dirty")] if r["variant"] == name and r["status"] == "error"
        ]
        assert said, name
        for record in said:
            message = record["message"]
            assert message.startswith("left 1 process running (pid ") and "sleep 300) — killed" in message
            assert process_gone(int(message.split("(pid ")[1].split(":")[0]))
    assert _rows(root / "dirty")["taint_child"]["status"] == "error"


def test_a_killed_worker_takes_its_childrens_processes_with_it(tmp_path):
    """A cell that starts a detached sleeper and hangs: the timeout kills the worker and the sleeper."""
    pids = tmp_path / "pids"
    pids.mkdir()
    run_cli("run", "--variant-file", str(TAINTS), "--variants", "taint_child_hang", "--seq-len", "32",
            "--heads", "2", "--budget-ms", "5", "--warmup-ms", "1", "--cell-timeout", "2", "-q",
            "--env", f"ATTNBENCH_TEST_PIDS={pids}", "--out", str(tmp_path / "r"), check=True)  # fmt: skip
    (row,) = read_rows(tmp_path / "r")
    assert row["status"] == "timeout"
    started = [int(p.stem) for p in pids.iterdir()]
    assert started
    for pid in started:
        assert process_gone(pid), pid


def test_a_row_on_other_threads_than_asked_is_flagged():
    """The threads column is checked against what the cell asked for: a worker started on one thread
    measuring a cell of a run that asked for two."""
    from attnbench.harness.sweep.settings import Settings
    from attnbench.harness.sweep.spec import CellSpec
    from attnbench.harness.workers.cellrunner import CellRunner

    settings = Settings(threads=2, budget_ms=5, warmup_ms=1, min_ms=2)
    runner = CellRunner({"threads": 1}, settings)
    try:
        row = runner.run(CellSpec("naive", "cpu", "float32", 1, 2, 32, 16, 16, False, 0.0, "fwd"))
    finally:
        runner.close()
    assert row["threads"] == 1 and row["status"] == "error"
    assert row["message"].startswith("ran on 1 threads, the run asked for 2")


def test_state_snapshot_names_every_change_and_restore_puts_it_back():
    import torch

    from attnbench.harness.measure import correctness
    from attnbench.harness.workers.torch_state import State

    state = State()
    before = state.take()
    softmax, gate = torch.softmax, correctness.gate
    threads = 2 if before.values[0] == 1 else 1  # a change wherever this process starts (OMP_NUM_THREADS)
    try:
        torch.set_num_threads(threads)
        torch.set_default_dtype(torch.float64)
        torch.backends.cuda.enable_math_sdp(False)
        torch.softmax = lambda *a, **k: None
        correctness.gate = lambda *a, **k: None  # the harness's own gate
        assert state.changes(before) == [
            f"num_threads {before.values[0]} → {threads}", "default_dtype float32 → float64",
            "sdp.math True → False", "torch.softmax replaced",
            "attnbench.harness.measure.correctness.gate replaced",
        ]  # fmt: skip
        assert state.restore(before) == []
    finally:
        torch.softmax, correctness.gate = softmax, gate
        state.restore(before)
    assert state.changes(before) == [] and torch.get_default_dtype() == torch.float32


def test_a_flash_implementation_a_variant_activates_is_named_and_put_back():
    """SDPA's flash backend runs the FlashAttention implementation activated process-wide (FA3 or FA4
    through torch.nn.attention): a variant that activates one changes every later sdpa_flash cell's kernel.
    The snapshot names it and restore puts torch's built-in back."""
    import torch

    from attnbench.harness.workers.torch_state import State

    attention, removed = torch.nn.attention, []

    class Handle:
        def remove(self) -> None:
            removed.append(True)

    impls = attention.register_flash_attention_impl.__globals__["_FLASH_ATTENTION_IMPLS"]
    state = State()
    before = state.take()
    attention.register_flash_attention_impl("attnbench-test", register_fn=Handle)
    try:
        attention.activate_flash_attention_impl("attnbench-test")
        assert state.changes(before) == ["sdp.flash_impl None → attnbench-test"]
        assert state.restore(before) == [] and removed == [True]
        assert attention.current_flash_attention_impl() is None
    finally:
        impls.pop("attnbench-test", None)
        state.restore(before)


LEFTOVERS = """
import json, subprocess, sys, time
from attnbench.harness.workers import children
from torch._inductor import async_compile

print(children.become_subreaper())
quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
# torch's own: a child its pool registry names
helper = subprocess.Popen(["sleep", "300"], **quiet)
class Pool:  # as inductor's SubprocPool records the process it started
    process = helper
async_compile._pool_set.add(Pool())
# a variant's, named like torch's compile worker (issue 40: spared for its command line)
mimic = subprocess.Popen(["sh", "-c", "sleep 300; :", "torch._inductor.compile_worker"], **quiet)
subprocess.run(["sh", "-c", "sleep 300 &"], **quiet)  # a double fork: orphaned, re-parented here
time.sleep(0.2)
killed = children.kill_leftovers()
print(json.dumps({"killed": killed, "left": children.children(), "helper": helper.pid, "mimic": mimic.pid}))
children.kill_leftovers(spare_helpers=False)  # as a worker ends: the helper too
print(json.dumps(children.children()))
"""


def test_kill_leftovers_kills_what_a_variant_left_and_spares_torchs_helpers():
    """In a process of its own (becoming a subreaper is process-wide): the orphaned sleeper and the child
    named like torch's compile worker are found and killed; the child torch's pool records is left to
    torch until the worker ends."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", LEFTOVERS], capture_output=True, text=True, timeout=120)
    subreaper, report, at_end = out.stdout.splitlines()
    got = json.loads(report)
    assert subreaper == "True"
    lines = sorted(k.split(": ", 1)[1] for k in got["killed"])  # the mimic, its sleep, the orphan
    assert lines == ["sh -c sleep 300; : torch._inductor.compile_worker", "sleep 300", "sleep 300"], got
    assert f"pid {got['mimic']}: sh -c" in " ".join(got["killed"])
    assert got["left"] == [got["helper"]] and json.loads(at_end) == []
    for k in got["killed"]:
        assert process_gone(int(k.split()[1].rstrip(":")))


COMPILE_POOL = """
import json, threading, time
import torch._inductor.config as config
from torch._inductor import async_compile
from attnbench.harness.workers import children

before = set(children.python_threads())
config.compile_threads, config.worker_start_method = 2, "subprocess"  # as on a GPU machine's many cores
pool = async_compile.AsyncCompile.process_pool()
mimic = threading.Thread(target=time.sleep, args=(30,), name="InductorSubproc", daemon=True)
mimic.start()
print(json.dumps({"left": children.threads_left(before), "reader": pool.read_thread.is_alive(),
                  "helpers": sorted(children.torch_helpers()), "pid": pool.process.pid}))
async_compile.shutdown_compile_workers()
"""


def test_the_threads_of_torchs_compile_workers_are_torchs_and_a_namesake_is_not():
    """On a GPU machine's many cores inductor compiles in a SubprocPool, whose reader thread
    ("InductorSubproc") and quiesce timer stay for every later compile: torch's, known from its records,
    so a flex cell is not taken for leaving a thread (each replaced its worker on an H200). A thread a
    variant names so is still its own."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", COMPILE_POOL], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["reader"] and got["left"] == ["InductorSubproc"], got  # the mimic alone
    assert got["pid"] in got["helpers"]


BLAS_POOL = """
import ctypes, json
import torch
from attnbench.harness.workers import children

loaded = children.start_blas_pools()  # as a worker starts
before = children.os_threads()
import scipy.linalg  # as transformers' modeling_utils imports it, in an hf cell: its OpenBLAS starts a pool
blas = children.native_threads_left(before, 0)
libc, tid = ctypes.CDLL(None), ctypes.c_ulong()  # a plug-in's native thread: no Python, the process's name
assert libc.pthread_create(ctypes.byref(tid), None, libc.sleep, ctypes.c_void_p(30)) == 0
print(json.dumps({"loaded": loaded, "blas": blas, "plugin": children.native_threads_left(before, 0)}))
"""


def test_the_pool_scipys_openblas_starts_is_the_workers_and_a_plugins_native_thread_is_not():
    """transformers imports scipy, whose OpenBLAS starts a native thread pool as it is loaded: every hf cell
    and probe was taken for leaving a thread, and replaced its worker. The worker loads that OpenBLAS as it
    starts (children.start_blas_pools), so the pool is born before any snapshot; a native thread a plug-in
    starts, named as the pool's threads are, is still its own."""
    import subprocess
    import sys

    pytest.importorskip("scipy")
    out = subprocess.run([sys.executable, "-c", BLAS_POOL], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert any("scipy.libs" in path for path in got["loaded"]), got
    assert got["blas"] == [] and len(got["plugin"]) == 1, got


NATIVE_THREADS = """
import ctypes
import numpy as np
from attnbench import variants

@variants.register("numpy_product", description="naive, after a threaded numpy product")
def numpy_product(q, k, v, **kw):
    a = np.ones((256, 256))
    a @ a
    return variants.get("naive").fn(q, k, v, **kw)

@variants.register("native_sleeper", description="naive, that starts a native thread (no Python) once")
def native_sleeper(q, k, v, **kw):
    if not hasattr(native_sleeper, "tid"):
        libc, native_sleeper.tid = ctypes.CDLL(None), ctypes.c_ulong()
        libc.pthread_create(ctypes.byref(native_sleeper.tid), None, libc.sleep, ctypes.c_void_p(300))
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_a_numpy_product_leaves_no_thread_and_a_plugins_native_thread_is_caught(tmp_path):
    """OpenBLAS stops its pool as a process forks: a worker forked from the server (which imported numpy
    with torch) started numpy's pool in the first cell that multiplied arrays, and was replaced for it. The
    worker starts it as it starts; a native thread a plug-in starts in a cell is still caught."""
    (tmp_path / "native.py").write_text(NATIVE_THREADS)
    names = "numpy_product,native_sleeper"
    run_cli("run", "--variant-file", str(tmp_path / "native.py"), "--variants", names, "--seq-len", "32",
            "--budget-ms", "5", "--warmup-ms", "1", "--min-ms", "1", "-q", "--out", str(tmp_path / "run"),
            check=True)  # fmt: skip
    rows = {r["variant"]: r["message"] for r in read_rows(tmp_path / "run")}
    assert "thread" not in rows["numpy_product"], rows
    assert "left 1 thread running (thread " in rows["native_sleeper"], rows
    assert "its worker was replaced" in rows["native_sleeper"], rows


ATEXIT_CHILD = """
import atexit, subprocess
from attnbench import variants

def _start_sleeper():  # as the worker's interpreter ends: after its last sweep, in a session of its own
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open({pids!r} + "/" + str(child.pid), "w").close()

@variants.register("atexit_child", description="naive, that registers an atexit hook starting a sleeper")
def atexit_child(q, k, v, **kw):
    atexit.register(_start_sleeper)
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_a_worker_ends_without_running_a_variants_atexit_hook(tmp_path):
    """Issue 40: a child started from an atexit hook survived the worker's normal exit."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "hook.py").write_text(ATEXIT_CHILD.format(pids=str(pids)))
    run_cli("run", "--variant-file", str(tmp_path / "hook.py"), "--variants", "atexit_child", "--seq-len",
            "32", "--budget-ms", "5", "--warmup-ms", "1", "--min-ms", "1", "-q", "--out",
            str(tmp_path / "run"), check=True)  # fmt: skip
    assert list(pids.iterdir()) == []  # no hook ran: no sleeper was started


LATE_THREAD = """
import subprocess, threading, time
from attnbench import variants

_STARTED = []

def _later():  # after its cell: in the next one, were the worker kept
    time.sleep(3)
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open({pids!r} + "/" + str(child.pid), "w").close()

@variants.register("late_thread", description="naive; its first call starts a thread that starts a sleeper")
def late_thread(q, k, v, **kw):
    if not _STARTED:
        _STARTED.append(threading.Thread(target=_later, daemon=True, name="late"))
        _STARTED[0].start()
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_a_thread_a_variant_leaves_running_acts_in_no_neighbours_cell(tmp_path):
    """Issue 40: a thread late_thread left running started a sleeper during chunked's cell, and chunked's row
    took the blame. The thread is late_thread's: its row (and its probe record) say so, and its worker is
    replaced after it, so the thread acts in no later cell; chunked's row is clean and nothing outlives the
    run."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "late.py").write_text(LATE_THREAD.format(pids=str(pids)))
    run_cli("run", "--variant-file", str(tmp_path / "late.py"), "--variants", "late_thread,chunked",
            *SMALL, "--out", str(tmp_path / "r"), check=True)  # fmt: skip
    rows = _rows(tmp_path / "r")
    assert rows["late_thread"]["status"] == "ok", rows["late_thread"]["message"]
    assert "left 1 thread running (late); its worker was replaced" in rows["late_thread"]["message"]
    assert rows["chunked"]["status"] == "ok" and "running" not in rows["chunked"]["message"]
    probe = json.loads((tmp_path / "r" / "numerics.json").read_text())["probe"]
    assert all("left 1 thread running (late)" in r["message"] for r in probe if r["variant"] == "late_thread")
    log = (tmp_path / "r" / "worker.log").read_text()
    assert "exiting: a variant left threads running in this process" in log
    for pid in [int(p.name) for p in pids.iterdir()]:
        assert process_gone(pid), pid


INTEROP_TAINT = """
import multiprocessing

import torch
from attnbench import variants

# at import, before any parallel work: it cannot be set back afterwards. Only in the worker (a spawned
# process), never in the test's own process, which the run's checks import it into too
if multiprocessing.parent_process() is not None:
    torch.set_num_interop_threads(1)


@variants.register("interop_one", description="one interop thread, set when its file is imported")
def interop_one(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_an_import_that_cannot_be_put_back_is_named_in_every_row(tmp_path):
    """The worker puts back what an import changed; interop threads cannot be set twice in a process, so
    every cell runs so: each row says which file did it (none is blamed), and the worker is not replaced
    after every cell for it."""
    (tmp_path / "interop.py").write_text(INTEROP_TAINT)
    run_cli("run", "--variant-file", str(tmp_path / "interop.py"), "--variants", "interop_one,naive", *SMALL,
            "--out", str(tmp_path / "r"), check=True)  # fmt: skip
    rows = _rows(tmp_path / "r")
    # the worker's default: torch's, which follows the machine's cores (not OMP_NUM_THREADS, nor the CPUs
    # this process may use), as in this process, where nothing sets it
    default = torch.get_num_interop_threads()
    assert rows["interop_one"]["message"].startswith(
        f"changed torch's global state: num_interop_threads {default} → 1 when imported (not all put back)"
    )
    assert rows["naive"]["status"] == "error" and rows["naive"]["message"].startswith(
        f"importing variant file {tmp_path / 'interop.py'} changed torch's global state: "
        f"num_interop_threads {default} → 1 for good (it cannot be put back)"
    )
    assert (tmp_path / "r" / "worker.log").read_text().count(" starting") == 1
