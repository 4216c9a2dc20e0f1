"""Shared test helpers: run the real CLI (in this process, or as a subprocess where a test is about the
process), skip CUDA tests without a GPU."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import traceback
import warnings
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

# Inductor checks that each vector ISA /proc/cpuinfo lists really builds and loads before its first CPU
# kernel: four g++ builds once per machine, then five Python subprocesses in every process that compiles (a
# cold machine's first flex compile 43-49 -> 34-43 CPU-s, a later process's about 0.8 CPU-s less). The
# tests' processes (and their children, which inherit it) trust cpuinfo; attnbench leaves torch's default.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

# pytest-xdist's test processes (`nox -s tests`: two on the 2-core VM) share the machine's cores: each torch
# (this process's, its workers', its commands') sizes its pool to its share of them. With a pool of every
# core in each, OpenMP threads spun at every op's barrier while the other process's waited for a core:
# tests/harness with -n 2 took 474 s, and 327 s with a share. A test that is about the threads names
# --threads; a test process that is no xdist worker keeps torch's default.
_SHARING = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
if _SHARING.isdigit():
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // int(_SHARING))))

# Each run tells the runs measuring beside it on this machine (harness.run.neighbours), and pytest-xdist's two
# test processes measure at once by design: each announces its runs in a folder of its own (made here in
# each process, the workers' too, and inherited by the commands it starts); tests/harness/test_neighbours.py
# gives its runs one they share.
os.environ["ATTNBENCH_NEIGHBOURS_DIR"] = __import__("tempfile").mkdtemp(prefix="attnbench-runs-tests-")

# Where the environment asks Python to write no bytecode (PYTHONDONTWRITEBYTECODE), every interpreter the
# tests start (a command, its forkserver, a spawned worker, a notebook's kernel: hundreds in a suite) compiled
# the attnbench modules it imports from source again, 0.2-0.3 CPU-s each. The tests' children keep their
# bytecode in a cache of their own outside the checkout instead (PYTHONPYCACHEPREFIX): the checkout, and the
# folders of the variant files tests write, stay as clean. Its first suite fills it (about 5 CPU-s).
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    _pycache = Path(__import__("tempfile").gettempdir()) / f"attnbench-tests-pycache-{os.getuid()}"
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(_pycache))

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
FAULTS = DATA / "fault_variants.py"


def load_benchmark(name: str):
    """benchmarks/NAME.py imported as a module (benchmarks/ is no package), for tests of its pure parts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_plugin(path: Path):
    """A plug-in file loaded as `--variant-file` loads it; returns its module (for its counters and state)."""
    from attnbench import variants

    variants.load_variant_file(path)
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path))


# Module-scoped fixtures run their commands before any function's fixture: none of them sees a $COLUMNS either
# (pytest-xdist's workers have one).
os.environ.pop("COLUMNS", None)


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """Tests read the CLI's output as a log: no $COLUMNS from the shell that started pytest (a test that is
    about the width sets its own)."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _young_heap():
    """What this process held before the test is frozen out of the collector's lists while it runs
    (gc.freeze): harness.measure.memory.live_tensors, which a cell measured in this process calls twice,
    then walks the test's own objects, not the whole session's (pytest, torch, pandas and matplotlib: about
    0.1 s a walk). Unfrozen afterwards, so that what an earlier test left in a cycle is still collected."""
    import gc

    gc.freeze()
    yield
    gc.unfreeze()


def ctrl_c_reaches_it() -> None:
    """preexec_fn of a command that a test stops with SIGINT: Ctrl-C's default disposition in the child.
    A shell starts a background job (`pytest ... &`) with SIGINT ignored, every child inherits that, and
    Python then installs no KeyboardInterrupt handler: the command would run on as if never stopped."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process for the test's length, as in a terminal (a test
    process started as a background job has it ignored: see ctrl_c_reaches_it)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def cli_env() -> dict[str, str]:
    """This process's environment for a child, less pytest-xdist's worker variables: a child pytest is a
    session of its own (pytest-benchmark disables itself where PYTEST_XDIST_WORKER is set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_pytest_benchmarks(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m pytest benchmarks/ ARGS` from the repository root, as a real subprocess; its calibration
    is TEST_CALIBRATE_MS unless ARGS name one (test_pytest_entry_point's session keeps a real one)."""
    if not any(a.startswith("--attn-calibrate-ms") for a in args):
        args = (*args, "--attn-calibrate-ms", TEST_CALIBRATE_MS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def on_a_pty(args: tuple[str, ...], cwd) -> tuple[int, str]:
    """`python -m attnbench ARGS` with stdin, stdout and stderr on a fresh pty, which has no window size (0
    columns, as under `script`, `docker exec -t` or some CI runners): (exit status, what it printed)."""
    import pty
    import threading

    master, slave = pty.openpty()
    assert os.get_terminal_size(slave).columns == 0
    chunks: list[bytes] = []

    def drain() -> None:  # a pty holds a few KiB: the child would block on a full one
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the slave closed: the child ended
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {k: v for k, v in cli_env().items() if k != "COLUMNS"}
    try:
        proc = subprocess.run([sys.executable, "-m", "attnbench", *args], stdin=slave, stdout=slave,
                              stderr=slave, env=env, cwd=cwd, timeout=300)  # fmt: skip
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


# The tests' runs take no calibration (--calibrate-ms 0) unless they name one: a calibration of 50 ms still
# cost a tiny run 1.7 of its 4.4 CPU-s (the 256 MiB copy's pages), about 90 CPU-s over the suite. The
# calibration itself is tested in tests/harness/test_timing.py, ceilings and the suspect rule on written runs
# in tests/results/test_suspect.py, and a real run's in the runs that name --calibrate-ms.
TEST_CALIBRATE_MS = "0"


def _quick_calibration(args: tuple[str, ...]) -> tuple[str, ...]:
    """A fresh `run` or `bench` gets --calibrate-ms TEST_CALIBRATE_MS unless it names one (bench's preset
    calibrates for 300 ms: 4-8 s of a small bench on the 2-core VM); a resume or rerun takes the settings of
    the run it finishes (adding a flag there would be refused)."""
    if args[:1] not in (("run",), ("bench",)) or any(
        a.startswith(("--calibrate-ms", "--resume", "--rerun")) for a in args
    ):
        return args
    return (*args, "--calibrate-ms", TEST_CALIBRATE_MS)


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, check: bool = False, process: bool = False
) -> subprocess.CompletedProcess:
    """`attnbench ARGS`; returns a CompletedProcess with text output. A fresh run or bench calibrates
    for TEST_CALIBRATE_MS (see _quick_calibration).

    By default the command runs in this process (`attnbench.cli.main(ARGS)`, stdout and stderr captured, the
    exit status as returncode, an uncaught exception as its traceback on stderr and status 1): that saves
    the 1-3 s a fresh interpreter spends importing torch (and pandas, matplotlib), and what the command
    does (the workers it starts, the files it writes) is the same; a worker's own output goes to its log
    either way. process=True runs `python -m attnbench ARGS` as a real
    subprocess, for tests about the process itself (its pid, its environment, signals, a second live
    writer); tests/frontends/test_packaging.py starts every command that way once. timeout applies to a
    subprocess only."""
    args = _quick_calibration(args)
    if not process:
        proc = _run_in_process(args, cwd)
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "attnbench", *args],
            cwd=cwd,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"attnbench {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def _run_in_process(args: tuple[str, ...], cwd: Path | None) -> subprocess.CompletedProcess:
    from attnbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with as_a_fresh_process(cwd), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors (2) and --help (0)
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except Exception:  # what the interpreter would do with it
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["attnbench", *args], code, out.getvalue(), err.getvalue())


@contextmanager
def as_a_fresh_process(cwd: Path | None):
    """What a command may change in its process, put back afterwards: the working directory, os.environ
    (a worker's environment is set there while it spawns), the variants a --variant-file registered (and
    the module it was imported as, so that a later load registers it again), and warnings: the command sees
    Python's default filters and prints a warning to its stderr, as a fresh interpreter would."""
    from attnbench.variants import registry

    registry.all_variants()  # builtins and entry points loaded first: what is put back includes them
    here, environ = os.getcwd(), dict(os.environ)
    saved = dict(registry._REGISTRY), list(registry._LOAD_ERRORS)
    modules = set(sys.modules)
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()  # the defaults of `python` without -W (PEP 565)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=category, append=True)
            warnings.showwarning = _print_warning
            if cwd is not None:
                os.chdir(cwd)
            yield
    finally:
        os.chdir(here)
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved[0])
        registry._LOAD_ERRORS[:] = saved[1]
        for name in set(sys.modules) - modules:
            if name.startswith("attnbench_variant_file_"):
                del sys.modules[name]


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


MINE = """
from attnbench import variants


@variants.register("mine", description="naive under another name, from a variant file")
def mine(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)
"""


@pytest.fixture(scope="session")
def carried_run(tmp_path_factory) -> Path:
    """One small real run (naive and a variant file's `mine`, N 32 and 64: four ok rows) with everything a
    run carries: the variant file, --env variables (two of them allocator settings), the worker pinned to
    one CPU, and non-default sampling settings. Made once for the session (a worker start, a calibration
    and a probe) and only read: tests that change a run copy it first. Its folder holds the variant file
    (mine.py) beside the run (old/); tests that write new runs write them into that folder."""
    root = tmp_path_factory.mktemp("carried")
    (root / "mine.py").write_text(MINE)
    cpu = str(min(os.sched_getaffinity(0)))
    run_cli(
        "run", "--variants", "naive,mine", "--seq-len", "32,64", "--heads", "2", "--warmup-ms", "1",
        "--budget-ms", "5", "--min-ms", "2", "--seed", "3", "--env", "ATTNBENCH_TEST_ENV=1",
        "--env", "THP_MEM_ALLOC_ENABLE=1", "--env", "MALLOC_ARENA_MAX=2", "--cpu-affinity", cpu,
        "--variant-file", str(root / "mine.py"), "--out", str(root / "old"), "-q", cwd=root, check=True,
    )  # fmt: skip
    return root / "old"


@pytest.fixture(scope="session", autouse=True)
def _forkserver_under_the_suites_environment():
    """Each test process starts its forkserver before any test sets a variable of its own: workers fork from
    it only while os.environ is the one it started under, and are spawned otherwise (a fresh torch import:
    harness.workers.isolation._context). Started by the first run of a test that had set ATTNBENCH_PLANT,
    it made every later run of that test process spawn its workers (35 spawns in a suite)."""
    from attnbench.harness.workers import isolation

    isolation.prestart()


def process_gone(pid: int, wait_s: float = 2.0) -> bool:
    """The process has ended within `wait_s` (a zombie waiting for init to collect it counts as ended)."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[-1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def wait_while_running(cond, proc, what: str, timeout: float = 240) -> None:
    """Poll cond() until it holds, failing at once (with its output) if proc exits first, or after timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        assert proc.poll() is None, (what, proc.communicate())
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stopped_by_ctrl_c(argv: list[str], ready, what: str, settle: float = 0.0) -> tuple[int, str]:
    """(exit status, stderr) of `python -m attnbench ARGV` sent Ctrl-C once ready(process) holds and
    `settle` s more have passed; killed, with every process below it, if it outlives the test."""
    import signal

    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", *argv],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    try:
        wait_while_running(lambda: ready(proc), proc, what)
        time.sleep(settle)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.communicate()
    return proc.returncode, err


# The test files that cost most (busy CPU-s each, run alone on the 2-core VM: 88, 57, 52, 49, 38, 37, 35, 34,
# 33, 28, 28, 26, 25), first. `nox -s tests` hands whole files to its two test processes in collection order
# (--no-loadscope-reorder; xdist's own order is by number of tests, which put these last), so the files handed
# out last are short ones, and neither process waits long at the end for the other.
HEAVY_FIRST = tuple(
    f"tests/{name}.py"
    for name in (
        "variants/test_flex", "frontends/test_false_alarm", "harness/test_paged", "harness/test_isolation",
        "harness/test_ray_executor", "reports/test_report_render", "reports/test_report_workloads",
        "frontends/test_api_callables", "frontends/test_pytest_benchmark", "frontends/test_packaging",
        "harness/test_taint", "variants/test_chunked_compiled", "harness/test_faults",
    )
)  # fmt: skip


def _heavy_first(item) -> int:
    path = item.path.relative_to(ROOT).as_posix() if item.path.is_relative_to(ROOT) else ""
    return HEAVY_FIRST.index(path) if path in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(config, items):
    import torch

    items.sort(key=_heavy_first)  # stable: a file's tests, and the other files, keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """What a measuring worker does after its imports (harness.measure.timing.freeze_imports), done for the
    test process once every test module is imported, since measure_cell also runs in-process here: the
    collections of retained-memory accounting (harness.measure.memory) then scan what the tests make, not
    torch's, pandas' and matplotlib's module state (about 0.1 s less a collection, two or three per
    measure_cell)."""
    from attnbench.harness.measure.timing import freeze_imports

    freeze_imports()
