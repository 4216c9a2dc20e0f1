"""Faults stay per cell: every failure becomes its row, the sweep completes, a killed run resumes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAULTS, ROOT, TEST_CALIBRATE_MS, cli_env, ctrl_c_reaches_it, process_gone, run_cli

from attnbench.harness.workers import isolation
from attnbench.results import read_rows


def test_a_worker_unlinks_the_semaphores_made_in_it_as_it_ends(tmp_path):
    """A multiprocessing lock made in a worker (tqdm makes one while torch.compile traces) is a named
    semaphore, which the worker's os._exit would leave for the run's resource tracker to find, warning of
    "leaked semaphore objects" on the user's terminal as the run ends. Each worker unlinks its own."""
    out = tmp_path / "r"
    run_cli("run", "--variant-file", str(FAULTS), "--variants", "fault_print", "--seq-len", "64", "--heads",
            "1", "--budget-ms", "3", "--warmup-ms", "1", "--out", str(out), "-q", check=True)  # fmt: skip
    made = re.findall(r"made semaphore /(\S+)", (out / "worker.log").read_text())
    assert made and not [name for name in made if Path(f"/dev/shm/sem.{name}").exists()], made


@pytest.mark.slow
def test_every_fault_becomes_its_row(tmp_path):
    out = tmp_path / "r"
    faults = ["raise", "oom", "abort", "segv", "hang", "wrong", "print", "unsupported"]
    names = ",".join(["naive"] + [f"fault_{f}" for f in faults])
    p = run_cli(
        "run",
        "--variant-file",
        str(FAULTS),
        "--variants",
        names,
        "--seq-len",
        "256,512,1024",
        "--heads",
        "2",
        "--budget-ms",
        "20",
        "--warmup-ms",
        "5",
        "--cell-timeout",
        "5",  # the hang's cost; every other cell takes well under a second on a quiet machine (at 3 s, a
        # wrong cell, gated then timed, timed out on a runner loaded twice over)
        "--out",
        str(out),
        timeout=600,
        check=True,
    )
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(out)}
    assert len(rows) == 9 * 3  # the sweep completed
    st = {k: r["status"] for k, r in rows.items()}
    for n in (256, 512, 1024):
        assert st[("naive", n)] == "ok"  # good cells after every kind of failure
        assert st[("fault_raise", n)] == "error"
        assert st[("fault_abort", n)] == "crashed"
        assert st[("fault_segv", n)] == "crashed"
        assert st[("fault_wrong", n)] == "wrong"
        assert st[("fault_print", n)] == "ok"
        assert st[("fault_unsupported", n)] == "unsupported"
    assert "deliberate failure" in rows[("fault_raise", 256)]["message"]
    assert "SIGABRT" in rows[("fault_abort", 256)]["message"]
    assert "SIGSEGV" in rows[("fault_segv", 256)]["message"]
    assert st[("fault_hang", 256)] == "timeout"
    assert st[("fault_hang", 512)] == st[("fault_hang", 1024)] == "skipped"  # no second hang
    assert st[("fault_oom", 256)] == "ok" and st[("fault_oom", 512)] == "oom"
    assert (
        st[("fault_oom", 1024)] == "skipped"
        and "out of memory at seq_len 512" in rows[("fault_oom", 1024)]["message"]
    )
    wrong = rows[("fault_wrong", 256)]
    assert wrong["time_ms_median"] > 0 and "failed the float64 gate" in wrong["message"]  # measured, flagged
    assert "noise on stdout" in (out / "worker.log").read_text()  # variant output kept out of the protocol
    assert "run complete" in p.stderr
    again = f"again with: attnbench run --rerun {out} --status"
    assert f"6 cells crashed; measure them {again} crashed" in p.stderr
    assert f"1 cell timed out; measure it {again} timeout" in p.stderr
    # the numerics probe (N = 128, where fault_abort and fault_hang answer) lost fault_segv's worker: that
    # variant's records say so, and the variants after it were probed in a new worker
    probe = json.loads((out / "numerics.json").read_text())["probe"]
    (segv,) = [r for r in probe if r["variant"] == "fault_segv"]
    assert segv["status"] == "crashed" and "SIGSEGV" in segv["message"]
    for name in ("naive", "fault_abort", "fault_hang", "fault_print"):  # 3 scales each, before it and after
        assert [r["status"] for r in probe if r["variant"] == name] == ["ok"] * 3, name


def test_a_probe_that_hangs_or_kills_its_worker_costs_only_its_own_records():
    """runner._numerics asks for one variant at a time, and for its gate at N = TILE_N apart: a timeout or a
    dead worker becomes that variant's record of that part and the probe goes on (the real crash is
    test_every_fault_becomes_its_row's fault_segv, and fault_abort's at N = 300; the real timeout, a
    cell's: fault_hang)."""
    from attnbench.harness.run import runner
    from attnbench.harness.sweep.spec import Settings, SweepSpec
    from attnbench.harness.workers.cellrunner import CellRunner
    from attnbench.harness.workers.isolation import WorkerDied, WorkerTimeout

    asked = []

    class Local:  # the runner's CellRunner as the probe uses it: its requests faked, its numerics real
        numerics = CellRunner.numerics

        def request(self, msg, timeout):
            asked.append((msg["op"], msg.get("variants"), timeout))
            if msg.get("variants") == ["hangs"]:
                raise WorkerTimeout("the worker did not answer within 7 s")
            tiles = msg.get("part") == "tiles"
            if msg.get("variants") == ["dies"] or (tiles and msg.get("variants") == ["dies_at_300"]):
                raise WorkerDied("worker killed by SIGSEGV (signal 11)")
            if msg["op"] == "example_weights":
                return {"value": {"seq_len": 1}}
            at = {"seq_len": 300} if tiles else {"dtype": "float32", "q_scale": 1.0}
            return {"value": [{"variant": msg["variants"][0], "status": "ok", **at}]}

    sweep = SweepSpec(variants=("naive",), settings=Settings(cell_timeout=7))
    value = runner._numerics(sweep, ["hangs", "dies", "dies_at_300", "naive"], Local())
    assert [(r["variant"], r["status"]) for r in value["probe"]] == [
        ("hangs", "timeout"), ("dies", "crashed"), ("dies_at_300", "ok"), ("naive", "ok"),
        ("unstable_softmax", "ok"),
    ]  # fmt: skip
    # the unstable twin is probed, never swept: no gate at N = 300
    assert [(r["variant"], r["status"], r["seq_len"]) for r in value["tiles"]] == [
        ("hangs", "timeout", 300), ("dies", "crashed", 300), ("dies_at_300", "crashed", 300),
        ("naive", "ok", 300),
    ]  # fmt: skip
    assert "did not answer" in value["probe"][0]["message"] and "SIGSEGV" in value["probe"][1]["message"]
    assert value["example_weights"] == {"seq_len": 1}
    assert {t for op, _, t in asked if op == "numerics"} == {7}  # each request under the cell timeout
    # and the terminal hears of both (issue 40: a probe's timeout was never shown)
    notes = runner._probe_notes(value["probe"], value["tiles"])
    assert notes[:2] == [
        "numerics probe: hangs: timeout (the worker did not answer within 7 s); the probe went on without "
        "it, and its cells are measured as usual",
        "numerics probe: dies: crashed (worker killed by SIGSEGV (signal 11)); the probe went on without it, "
        "and its cells are measured as usual",
    ]
    # the gate at N = 300 is said where it alone failed: the two above are said by their probe's notes
    assert [note.split(": ", 2)[1] for note in notes[2:]] == ["dies_at_300 crashes its worker at N 300"]


def test_a_timeout_says_how_long_the_request_went_unanswered_rounded():
    """'exceeded --cell-timeout 8 s: no answer after 7.80468 s': the marks a timing loop sends on the way
    are answered, and the wait after the last of them is what the timeout has left, which the message
    gave, unrounded, as if it were the whole wait. It gives the time since the request, rounded."""
    from attnbench.harness.measure.outcomes import MARK

    class Conn:  # one mark 0.3 s into the request, then nothing
        polls = 0

        def send(self, msg):
            pass

        def poll(self, timeout):
            self.polls += 1
            time.sleep(0.3 if self.polls == 1 else timeout)
            return self.polls == 1

        def recv(self):
            return {"op": MARK}

    class Proc:
        def is_alive(self):
            return True

    worker = object.__new__(isolation.Worker)
    worker.conn, worker.proc, worker.config, worker.kill = Conn(), Proc(), {}, lambda: None
    with pytest.raises(isolation.WorkerTimeout) as raised:
        worker.request({"op": "cell"}, timeout=1.0)
    said = str(raised.value)
    waited = float(re.search(r"no answer after (\d+\.\d) s \(cell\); worker killed", said)[1])
    assert 1.0 <= waited < 1.5, said


@pytest.fixture(scope="module")
def poison_and_guard_run(tmp_path_factory):
    """One real run for the two tests below (each was a worker start, a calibration and a probe of its
    own): fault_poison and naive at N 32 and 64, and at N 262144, which no machine here can hold."""
    out = tmp_path_factory.mktemp("poison") / "r"
    small = ("--heads", "2", "--budget-ms", "5", "--warmup-ms", "1", "-q")
    run_cli("run", "--variant-file", str(FAULTS), "--variants", "fault_poison,naive", "--seq-len",
            "32,64,262144", *small, "--out", str(out), check=True)  # fmt: skip
    return out


def test_a_poisoned_cuda_context_ends_its_worker_and_the_next_cells_run_in_a_new_one(poison_and_guard_run):
    """A cell whose CUDA error poisons the context (device-side assert, illegal address) is `crashed` with
    the reason, its worker exits instead of failing every later cell, and the next cell gets a new worker.
    On CPU the variant raises torch's exception for it; tests/harness/test_cuda.py triggers a real one."""
    out = poison_and_guard_run
    rows = [r for r in read_rows(out) if r["seq_len"] < 262144]  # the guard's cells: the next test
    status = {(r["variant"], r["seq_len"]): r["status"] for r in rows}
    assert status == {("fault_poison", 32): "crashed", ("fault_poison", 64): "crashed",
                      ("naive", 32): "ok", ("naive", 64): "ok"}  # fmt: skip
    for row in rows:
        if row["variant"] == "fault_poison":
            assert row["message"].startswith("CUDA context poisoned, worker replaced: AcceleratorError: CUDA")
    log = (out / "worker.log").read_text()
    assert log.count(" exiting: CUDA context poisoned") == 2  # each poisoned cell ended its worker
    assert log.count(" starting") >= 2  # and a fresh one measured what followed


def test_poisoned_errors_are_told_apart_from_oom_and_ordinary_ones():
    import torch

    from attnbench.harness.measure.failures import failure, is_poisoned

    assert is_poisoned(torch.AcceleratorError("CUDA error: an illegal memory access was encountered"))
    assert is_poisoned(RuntimeError("CUDA error: misaligned address"))
    assert is_poisoned(RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm"))
    assert not is_poisoned(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_poisoned(RuntimeError("CUDA error: out of memory"))  # an OOM: the context recovers
    assert not is_poisoned(ValueError("CUDA error"))  # not a torch error
    assert not is_poisoned(RuntimeError("shapes cannot be multiplied"))
    assert failure(RuntimeError("CUDA error: out of memory"), "cpu")[0] == "oom"
    status, message = failure(torch.AcceleratorError("CUDA error: device-side assert triggered"), "cuda")
    assert status == "crashed" and "worker replaced" in message


def test_memory_guard_skips_what_cannot_fit(poison_and_guard_run):
    rows = [r for r in read_rows(poison_and_guard_run) if r["seq_len"] == 262144]
    assert [r["variant"] for r in rows] == ["fault_poison", "naive"]
    for row in rows:  # skipped before the worker is asked to run it: fault_poison never ran there
        assert row["status"] == "skipped"
        assert "memory guard: predicted peak" in row["message"] and "GiB available" in row["message"]


def _start(out, *extra):
    """A real `attnbench run` of 18 cells (each up to ~0.1 s: the run lasts a few seconds, long enough to be
    killed or interrupted after its first rows, and its resume stays short). N at most 512: with N 1024
    and 2048 (their float64 gate, their 5 calls at least past the budget) a whole run took 17-19 CPU-s, not
    11."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnbench",
            "run",
            "--variants",
            "naive,chunked,sdpa",
            "--seq-len",
            "16..512",
            "--heads",
            "2",
            "--budget-ms",
            "100",
            "--warmup-ms",
            "10",
            "--calibrate-ms",
            TEST_CALIBRATE_MS,
            "--out",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )


def _wait_rows(out, n, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (out / "rows.jsonl").is_file() and len((out / "rows.jsonl").read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no rows appeared")


def _worker_pids(out):
    log = (out / "worker.log").read_text() if (out / "worker.log").is_file() else ""
    return [int(line.split()[2]) for line in log.splitlines() if line.startswith("attnbench worker")]


@pytest.mark.slow
def test_a_second_writer_is_refused_then_sigkill_and_resume_complete_without_duplicates(tmp_path):
    """Two `run --resume` of one directory once wrote 30 rows for 24 cells: now the second is refused while
    the first runs. Then the first is killed with SIGKILL (no cleanup at all): its workers die with it, its
    lock too, and a resume completes the sweep without duplicates. (One run for both: each is a worker
    start and a sweep.)"""
    out = tmp_path / "r"
    proc = _start(out)
    _wait_rows(out, 2, proc)
    before = (out / "rows.jsonl").read_bytes()
    p = run_cli("run", "--resume", "--out", str(out))
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert f"is being written by pid {proc.pid} on host" in p.stderr
    assert (out / "rows.jsonl").read_bytes().startswith(before)  # the refused writer wrote nothing

    _wait_rows(out, 4, proc)
    proc.kill()  # SIGKILL: no cleanup at all
    proc.wait()
    done = read_rows(out)
    assert len(done) >= 4 and all(r["status"] for r in done)
    for pid in _worker_pids(out):  # the worker died with its parent (PR_SET_PDEATHSIG), within 0.5 s
        assert process_gone(pid, 0.5), pid
    p = run_cli("run", "--resume", "--out", str(out), check=True)  # the lock died with its holder
    assert "cells already done" in p.stderr
    rows = read_rows(out)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 3 * 6
    assert {r["cell_id"]: r for r in done}.items() <= {
        r["cell_id"]: r for r in rows
    }.items()  # kept as they were
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sweep"]["seq_len"] == [16, 32, 64, 128, 256, 512]


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_rows(tmp_path):
    out = tmp_path / "r"
    proc = _start(out)
    _wait_rows(out, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted: finished rows are kept" in err and "--resume" in err
    assert "Traceback" not in err
    assert len(read_rows(out)) >= 2


def test_worker_environment_is_restored_in_the_parent(monkeypatch):
    from attnbench.harness.workers.isolation import _environment

    monkeypatch.setenv("ATTNBENCH_KEPT", "old")
    monkeypatch.delenv("ATTNBENCH_NEW", raising=False)
    with _environment({"ATTNBENCH_KEPT": "new", "ATTNBENCH_NEW": "1"}):
        assert os.environ["ATTNBENCH_KEPT"] == "new" and os.environ["ATTNBENCH_NEW"] == "1"
    assert os.environ["ATTNBENCH_KEPT"] == "old" and "ATTNBENCH_NEW" not in os.environ


PRESTART = """
import json, multiprocessing.forkserver as fs, os, sys
from attnbench.harness.workers import isolation
from attnbench.harness.measure.allocator import worker_env

isolation.prestart({"ATTNBENCH_PRESTART": "1"})
started = fs._forkserver._forkserver_pid
torch_then = "torch" in sys.modules
import torch  # the parent's own import, while the forkserver makes its
worker = isolation.Worker({"env": {"ATTNBENCH_PRESTART": "1"}, "log_path": os.devnull})
with open(f"/proc/{worker.pid}/stat") as f:
    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
other = isolation.Worker({"env": {"ATTNBENCH_PRESTART": "2"}, "log_path": os.devnull})
with open(f"/proc/{other.pid}/stat") as f:
    other_ppid = int(f.read().rsplit(")", 1)[1].split()[1])
os.environ["PYTEST_CURRENT_TEST"] = "another test"  # what pytest changes from one test to the next
os.environ["_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"] = "1234"  # what torch sets once it has compiled
third = isolation.Worker({"env": {"ATTNBENCH_PRESTART": "1"}, "log_path": os.devnull})
with open(f"/proc/{third.pid}/stat") as f:
    third_ppid = int(f.read().rsplit(")", 1)[1].split()[1])
print(json.dumps({"started": started, "torch_then": torch_then, "ppid": ppid, "other_ppid": other_ppid,
                  "third_ppid": third_ppid, "me": os.getpid()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's here")
def test_the_forkserver_starts_before_the_parent_imports_torch_and_its_workers_fork_from_it():
    """A run starts its forkserver (harness.workers.isolation.prestart) before the parent imports torch, so
    that the two imports overlap; a worker of the same environment forks from it, one of another is
    spawned by the parent itself; one whose environment differs only in what pytest names the running test
    by and what torch sets once it has compiled (isolation.PER_CALL) still forks from it."""
    env = isolation._lasting(cli_env())
    out = subprocess.run(
        [sys.executable, "-c", PRESTART], capture_output=True, text=True, timeout=180, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["started"] and not got["torch_then"]
    assert got["ppid"] == got["third_ppid"] == got["started"] and got["other_ppid"] == got["me"]


PARENT = """
import json, sys
from attnbench.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


def test_a_run_of_built_in_variants_imports_torch_in_its_workers_only(tmp_path):
    """The parent of a run of built-in variants (their registration, the plan, the memory guard, the rows,
    the worker's fingerprint reply) never imports torch: the run's one torch import is its forkserver's. A
    bad variant name is refused without it too."""

    def parent(*argv: str) -> dict:
        done = subprocess.run([sys.executable, "-c", PARENT, *argv], capture_output=True, text=True,
                              timeout=180, env=cli_env())  # fmt: skip
        assert done.stdout, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])

    ran = parent("run", "--variants", "naive,chunked,sdpa", "--seq-len", "64", "-q", "--out",
                 str(tmp_path / "run"), "--heads", "2", "--budget-ms", "5", "--warmup-ms", "1",
                 "--calibrate-ms", str(TEST_CALIBRATE_MS))  # fmt: skip
    assert ran == {"code": 0, "torch": False}
    statuses = [json.loads(line)["status"] for line in (tmp_path / "run" / "rows.jsonl").open()]
    assert statuses == ["ok"] * 3
    assert parent("run", "--variants", "nosuch", "--seq-len", "64") == {"code": 2, "torch": False}


READS_AT_PRELOAD = """
import importlib, json, os, sys
from attnbench.harness.workers import isolation

read = set()
get, has = os._Environ.__getitem__, os._Environ.__contains__


def named(key):  # a read of that name, not a walk over every variable (tqdm looks for its TQDM_* so)
    caller = sys._getframe(2).f_code
    if not (caller.co_name == "__iter__" and caller.co_filename.endswith("_collections_abc>")):
        read.add(key)


os._Environ.__getitem__ = lambda self, key: named(key) or get(self, key)
os._Environ.__contains__ = lambda self, key: named(key) or has(self, key)
for name in isolation._FORKSERVER_PRELOAD:
    importlib.import_module(name)
print(json.dumps({"read": sorted(read), "inductor": "torch._inductor" in sys.modules}))
"""


def test_nothing_the_forkserver_imports_reads_a_per_call_variable():
    """The variables a forked worker sets for itself (isolation.PER_CALL, RAY_*) are read by nothing its
    forkserver imported first: a worker forked from it sees their new values as a spawned one would."""
    out = subprocess.run(
        [sys.executable, "-c", READS_AT_PRELOAD], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["read"] and not got["inductor"]  # it saw torch's own reads; the compiler is not imported
    assert not [name for name in got["read"] if isolation._per_call(name)]


def test_what_ray_leaves_set_still_forks_and_reaches_the_worker(monkeypatch):
    """ray.init leaves RAY_* variables and PYTHONBREAKPOINT in its process (tests/harness/test_ray_executor.py
    checks which): a later local worker still forks from the forkserver, and sets them as its parent has
    them; one the forkserver started with and the parent has unset since is unset in the worker."""
    monkeypatch.setenv("RAY_SEEN_AT_START", "1")
    monkeypatch.setattr(isolation, "_FORKSERVER_ENVIRON", [dict(os.environ)])
    monkeypatch.delenv("RAY_SEEN_AT_START")
    for name, value in {"RAY_AUTH_MODE": "token", "RAY_CLIENT_MODE": "0", "PYTHONBREAKPOINT": "0"}.items():
        monkeypatch.setenv(name, value)
    assert isolation._context({}).get_start_method() == "forkserver"
    sent = isolation.per_call_values()
    assert sent["RAY_AUTH_MODE"] == "token" and sent["PYTHONBREAKPOINT"] == "0"
    assert (
        sent["RAY_SEEN_AT_START"] is None and sent["PYTEST_CURRENT_TEST"] == os.environ["PYTEST_CURRENT_TEST"]
    )
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")  # a lasting variable: the worker must start under it
    assert isolation._context({}).get_start_method() == "spawn"


TELLS_ITS_TEST = """
import os
from attnbench import variants


@variants.register("tells_its_test", description="notes the PYTEST_CURRENT_TEST its call sees")
def tells_its_test(q, k, v, **kw):
    with open({path!r}, "a") as f:
        print(os.environ.get("PYTEST_CURRENT_TEST"), file=f)
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_a_worker_sees_the_per_call_variables_its_parent_has_now(tmp_path, monkeypatch):
    """A worker forked from a forkserver started under another PYTEST_CURRENT_TEST still sees its parent's
    (harness.workers.worker._start sets them): the two runs' calls note the values set before each."""
    seen = tmp_path / "seen.txt"
    plugin = tmp_path / "tells.py"
    plugin.write_text(TELLS_ITS_TEST.format(path=str(seen)))
    for name in ("first", "second"):
        monkeypatch.setenv("PYTEST_CURRENT_TEST", name)
        run_cli("run", "--variant-file", str(plugin), "--variants", "tells_its_test", "--seq-len", "32",
                "--heads", "1", "--budget-ms", "2", "--warmup-ms", "1", "-q", "--out", str(tmp_path / name),
                check=True)  # fmt: skip
        assert set(seen.read_text().split()) == {name}
        seen.unlink()


def test_the_forkserver_freezes_its_imports_once_for_every_worker():
    """preload comes last in what the forkserver imports, and freezing there moves torch's and the harness's
    objects into the collector's permanent generation, which a forked worker inherits (its own
    freeze_imports then has only its own objects left to collect)."""
    assert isolation._FORKSERVER_PRELOAD[-1] == "attnbench.harness.workers.preload"
    code = (
        "import gc, json, os\n"
        "import torch\n"
        "from attnbench.harness.workers import preload\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print(json.dumps([preload.FROZEN, gc.get_freeze_count()]), flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=cli_env()
    )
    frozen, in_child = json.loads(out.stdout)
    # torch's objects, frozen in the server, still frozen in its child (a few freed since by refcount)
    assert frozen > 50_000 and in_child > 0.99 * frozen


def test_variants_the_worker_cannot_load_are_one_line_and_leave_nothing(tmp_path):
    """A variant file that imports in this process but not in a fresh worker (here: it refuses to import in
    a child process; in a notebook, a function of a module whose package imports what only the notebook has)
    ended the run with WorkerDied's traceback and a run directory of a pickle, a log and a lock."""
    (tmp_path / "mine.py").write_text(
        "import multiprocessing\n"
        "if multiprocessing.parent_process() is not None:\n"
        "    raise ImportError('only in the notebook')\n"
        "from attnbench import register\n"
        "register('mine')(lambda q, k, v: q)\n"
    )
    out = tmp_path / "r"
    p = run_cli("run", "--variant-file", str(tmp_path / "mine.py"), "--variants", "mine", "--seq-len", "64",
                "--out", str(out), "-q")  # fmt: skip
    assert p.returncode == 2 and not out.exists(), (p.stderr, list(out.iterdir()) if out.exists() else None)
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("attnbench: error: the worker process cannot load the variants: variant file ")
    assert line.endswith("mine.py' failed to import: ImportError: only in the notebook"), line


def test_a_callable_the_worker_cannot_import_is_one_error_naming_why(tmp_path, monkeypatch):
    """A notebook's function from a module of its own reaches the workers by reference; where that module
    does not import in a fresh process, run() raises one VariantError saying so, and leaves no directory."""
    import attnbench
    from attnbench.variants import VariantError
    from tests.conftest import as_a_fresh_process

    (tmp_path / "notebook_only.py").write_text(
        "import multiprocessing\n"
        "if multiprocessing.parent_process() is not None:\n"
        "    raise ImportError('only in the notebook')\n"
        "def mine(q, k, v):\n"
        "    return q\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from notebook_only import mine

    with as_a_fresh_process(tmp_path), pytest.raises(VariantError) as said:
        attnbench.run(variants=[mine], seq_len=[64], out=tmp_path / "r", calibrate_ms=0)
    assert str(said.value) == (
        "the worker process cannot load the variants: ImportError: only in the notebook (a function defined "
        "in a module reaches the workers by reference: they import its module afresh)"
    )
    assert not (tmp_path / "r").exists()


def test_a_run_killed_outright_leaves_no_process_its_variant_detached(tmp_path):
    """kill -9 of the run while a cell hangs after starting a sleeper in a session of its own: the worker died
    with the forkserver, and the sleeper, the worker's child, was re-parented to init and ran on for good.
    The forkserver now kills its workers' trees as it ends."""
    from conftest import DATA

    pids = tmp_path / "pids"
    pids.mkdir()
    args = ["run", "--variant-file", str(DATA / "taint_variants.py"), "--variants", "taint_child_hang",
            "--seq-len", "32", "--heads", "2", "--budget-ms", "5", "--warmup-ms", "1", "--calibrate-ms",
            TEST_CALIBRATE_MS, "--cell-timeout", "300", "-q", "--env", f"ATTNBENCH_TEST_PIDS={pids}", "--out",
            str(tmp_path / "r")]  # fmt: skip
    env = {**cli_env(), "ATTNBENCH_TEST_PIDS": str(pids)}
    proc = subprocess.Popen([sys.executable, "-m", "attnbench", *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    started: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not started and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            started = [int(p.stem) for p in pids.iterdir()]
        assert started, proc.stderr.read() if proc.poll() is not None else "no sleeper started in 120 s"
        proc.kill()  # SIGKILL: the run's own clean-up never runs
        proc.wait()
        for pid in started:
            assert process_gone(pid, 10), f"pid {pid} ran on after its run was killed"
    finally:
        proc.kill()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
