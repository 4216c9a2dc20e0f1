"""The CLI as users meet it: real subprocesses, exit statuses, one-line errors, no writes on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA, FAULTS, run_cli

from attnbench.results.formulas import where_key


def test_list_shows_every_variant_with_reasons():
    p = run_cli("list", "--json", check=True)
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    assert {
        "naive",
        "stable_softmax",
        "unstable_softmax",
        "chunked",
        "sdpa",
        "sdpa_math",
        "sdpa_flash",
        "sdpa_efficient",
        "sdpa_cudnn",
        "xformers",
    } <= set(rows)
    for name in ("naive", "chunked", "sdpa", "sdpa_flash"):
        assert rows[name]["available"]["cpu"]
    for name in ("sdpa_efficient", "sdpa_cudnn", "xformers"):
        assert not rows[name]["available"]["cpu"] and rows[name]["reasons"]["cpu"]
    assert rows["chunked"]["memory"] == "linear" and rows["naive"]["memory"] == "quadratic"
    table = run_cli("list", check=True).stdout
    assert "sdpa_cudnn" in table and "CUDA only" in table
    # which variants take each workload, with the flag that sweeps it
    assert rows["sdpa_loop"]["workloads"]["varlen"] == "exact" and rows["naive"]["workloads"]["gqa"]
    assert "workloads, and the variants that take them:" in table
    # and 'only' beside a variant that runs that workload alone (its other cells are unsupported)
    assert rows["sdpa_loop"]["only"] == "packed" and rows["naive"]["only"] is None
    said = " ".join(table.split())
    assert (
        "a paged K/V cache (--page-size): paged_gather (only), paged_chunked (only), paged_flex (only)"
        in said
    )
    assert "sdpa_loop (exact, only)" in said and "naive (only)" not in said


def test_list_with_a_variant_file():
    p = run_cli("list", "--json", "--variant-file", str(FAULTS), check=True)
    assert "fault_segv" in {r["name"] for r in json.loads(p.stdout)}


def test_env_prints_the_fingerprint():
    fp = json.loads(run_cli("env", "--json", check=True).stdout)
    for key in ("torch", "python", "cpu_model", "physical_cores", "hostname", "transparent_hugepages"):
        assert key in fp


def test_version_is_the_one_runs_record():
    """`attnbench --version` and `attnbench.__version__` say the version every run's fingerprint records."""
    import attnbench
    from attnbench.harness.measure.fingerprint import attnbench_version, code_sha256

    out = run_cli("--version", check=True).stdout
    assert out.startswith(f"attnbench {attnbench_version()}") and len(out.splitlines()) == 1
    assert f"code sha256 {code_sha256()}" in out  # what tells two installs of one version apart
    assert attnbench.__version__ == attnbench_version() and attnbench.__version__.count(".") == 2
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnbench.nope  # noqa: B018


def test_env_records_allocator_settings(monkeypatch):
    """Allocator and threading variables change timings (page faults, threads): the fingerprint keeps them."""
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = run_cli("env", "--json", check=True).stdout
    recorded = json.loads(out)["allocator_env"]
    assert "MALLOC_ARENA_MAX=2" in recorded.split() and "OMP_NUM_THREADS=1" in recorded.split()


def test_env_shows_the_allocator_environment_a_run_records(monkeypatch):
    """A run's fingerprint is taken in its workers, which start with MALLOC_MMAP_MAX_=0 and
    THP_MEM_ALLOC_ENABLE=1 where unset (harness.measure.allocator); `attnbench env` showed this process's
    own (THP None, allocator_env none) while every run recorded 1 and MALLOC_MMAP_MAX_=0. What the
    environment sets itself holds, in env as in a run."""
    from attnbench.harness.measure.fingerprint import resume_identity

    for name in ("THP_MEM_ALLOC_ENABLE", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    fp = json.loads(run_cli("env", "--json", check=True).stdout)
    assert fp["THP_MEM_ALLOC_ENABLE"] == "1" and "MALLOC_MMAP_MAX_=0" in fp["allocator_env"].split()
    run = resume_identity()  # what a run started now records (and a resume must share)
    assert (fp["THP_MEM_ALLOC_ENABLE"], fp["allocator_env"]) == (
        run["THP_MEM_ALLOC_ENABLE"],
        run["allocator_env"],
    )
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    assert json.loads(run_cli("env", "--json", check=True).stdout)["THP_MEM_ALLOC_ENABLE"] == "0"


BAD_RUNS = [
    (["--variants", "naive,nope"], "unknown variant 'nope'"),
    (["--variants", "naiv,sdpa_mth"], "unknown variants 'naiv' (did you mean 'naive'?), 'sdpa_mth' (did you"),
    (["--seq-len", "0"], "seq-len must be positive integers, got 0"),
    (["--seq-len", "-5"], "seq-len must be positive integers"),
    (["--seq-len", "abc"], "seq-len must be positive integers, got 'abc'"),
    (["--batch", "1.5"], "batch must be positive integers"),
    (["--dtype", "float8"], "--dtype 'float8': float8 is not a dtype of a sweep's cells; FP8 is"),
    (["--dtype", "float61"], "unknown dtype 'float61'"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--padding", "1.5"], "padding must be a fraction"),
    (["--preset", "nope"], "unknown preset 'nope'"),
    (["--preset", "quik"], "unknown preset 'quik' (did you mean 'quick'?); known: bench, cpu"),
    (["--config", "/nonexistent.toml"], "does not exist"),
    (["--variant-file", "/nonexistent/mine.py"], "variant file '/nonexistent/mine.py' does not exist"),
    (["--variant-file", "/"], "variant file '/' is a directory, not a file"),
    (["--config", "/"], "config file '/' is a directory, not a file"),
    (["--warmup-ms", "nan"], "--warmup-ms must be 0 or a positive number, got nan"),
    (["--calibrate-ms", "-1"], "calibrate-ms must be 0 (none) or a positive number, got -1"),
    (["--resume"], "does not exist"),
    (["--env", "NO_EQUALS_SIGN"], "--env takes NAME=VALUE, got 'NO_EQUALS_SIGN'"),
    (["--env", "1BAD=x"], "--env takes NAME=VALUE, got '1BAD=x'"),
    (["--cpu-affinity", "4096"], "--cpu-affinity asks for CPU 4096, but this process may run only on CPUs"),
    (["--cpu-affinity", "3-1"], "cpu-affinity range '3-1' must go from a CPU number up to a larger one"),
    (["--cpu-affinity", "one"], "cpu-affinity takes CPU numbers like 0,1 or 0-3, got 'one'"),
    (["--max-samples", "2"], "--max-samples must be at least 5 (samples), got 2"),
    (["--min-samples", "600"], "--min-samples 600 is more than --max-samples 500"),
    (["--budget-ms", "-5"], "--budget-ms must be a positive number, got -5.0"),
    (["--target-rel-iqr", "0"], "--target-rel-iqr must be a positive number, got 0.0"),
    # past poll()'s longest wait: an OverflowError with a traceback once the run's folder was half-written
    (["--cell-timeout", "3000000"], "--cell-timeout must be a positive number of seconds up to 2000000"),
    (["--cell-timeout", "1e12"], "--cell-timeout must be a positive number of seconds up to 2000000"),
    (["--cell-timeout", "inf"], "got inf, not a finite number"),
    (["--executor", "nope"], "unknown executor 'nope'; known: local, ray"),
    (["--timing", "graph"], "--timing 'graph' chooses how CUDA cells are timed, but the sweep has no cuda"),
    (["--timing", "events"], "--timing 'events' chooses how CUDA cells are timed"),
]


@pytest.mark.parametrize("command", [["run", "--variants"], ["bench"], ["check", "--variants"]])
def test_an_unknown_variant_says_a_files_variant_needs_the_file(tmp_path, command):
    """Trial L: `bench flash_v1` (registered in a file) said "unknown variant 'flash_v1'; known: ..." and
    nothing of --variant-file. Said where none was given; not where one was (the name is not in it)."""
    said = "unknown variant 'flash_v1' (a variant defined in a file needs --variant-file FILE); known: "
    out = [] if command[0] == "check" else ["--out", str(tmp_path / "r")]
    p = run_cli(*command, "flash_v1", *out)
    assert p.returncode == 2 and p.stderr.startswith(f"attnbench: error: {said}"), p.stderr
    p = run_cli(*command, "flash_v1", "--variant-file", str(FAULTS), *out)
    assert p.returncode == 2 and p.stderr.startswith(
        "attnbench: error: unknown variant 'flash_v1'; known:"
    ), p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args,message", BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_bad_run_input_is_one_line_exit_2_nothing_written(tmp_path, args, message):
    out = tmp_path / "run"
    base = [] if {"--preset", "--config", "--resume"} & set(args) else ["--preset", "quick"]
    p = run_cli("run", *base, *args, "--out", str(out), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnbench: error:"), p.stderr
    assert message in lines[0]
    assert not out.exists()
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["compare", "runs/a"], "attnbench compare: error: the following arguments are required: RUN_B"),
        (["run", "--variant", "naive"], "attnbench run: error: ambiguous option: --variant could match"),
        (["rnu"], "attnbench: error: argument COMMAND: invalid choice: 'rnu'"),
        (["run", "--seq-len"], "attnbench run: error: argument --seq-len: expected one argument"),
        (["history", "add"], "attnbench history add: error: the following arguments are required: RUN"),
        # a misspelt option: said by its command, with the option it most likely meant
        (
            ["run", "--varaints", "naive"],
            "attnbench run: error: unrecognized arguments: --varaints naive (did you mean --variants?)",
        ),
        # a .py file after an option nobody knows is a file of variants: --variant-file, not --variants
        (
            ["run", "--variants-from", "kvars.py"],
            "attnbench run: error: unrecognized arguments: --variants-from kvars.py (did you mean "
            "--variant-file?)",
        ),
        (
            ["check", "--variants-from=kvars.py"],
            "attnbench check: error: unrecognized arguments: --variants-from=kvars.py (did you mean "
            "--variant-file?)",
        ),
        (
            ["history", "check", "--fail-on-stp", "5%"],
            "attnbench history check: error: unrecognized "
            "arguments: --fail-on-stp 5% (did you mean --fail-on-step?)",
        ),
    ],
)
def test_argparses_own_errors_are_one_line_too(capsys, argv, says):
    """A missing argument, an unknown command or an ambiguous option: one line that says where the usage
    is, not argparse's usage block first."""
    from attnbench import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith(says), err
    assert err.rstrip().endswith(f"(`{says.split(': error')[0]} -h` for usage)"), err


REFERENCE_RUN = str(Path(__file__).resolve().parents[2] / "results" / "reference" / "quick-epyc-2core")


def test_check_given_a_run_says_check_gates_variants_and_report_reads_runs(capsys, tmp_path):
    """Trial U: `attnbench check results/reference/cpu-epyc-2core` said only "unrecognized arguments". A run
    directory, a folder of runs or a file of variants given to check: one line, exit 2, that says what check
    takes and which command reads the run."""
    from attnbench import cli

    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "meta.json").write_text(Path(REFERENCE_RUN, "meta.json").read_text())
    said = {}
    for word in (REFERENCE_RUN, str(runs), "mine.py"):
        with pytest.raises(SystemExit) as exc:
            cli.main(["check", word])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1, err
        said[word] = err
    assert (
        f"{REFERENCE_RUN} is a run directory: check gates variants, a --variant-file's or a plug-in "
        in said[REFERENCE_RUN]
    )
    assert (
        f"are read by `attnbench report {REFERENCE_RUN}`) (`attnbench check -h` for usage)"
        in said[REFERENCE_RUN]
    )
    assert (
        f"{runs} is a folder of runs" in said[str(runs)]
        and f"`attnbench report {runs}/RUN`" in said[str(runs)]
    )
    assert (
        "unrecognized arguments: mine.py (a file of variants is given as --variant-file mine.py)"
        in said["mine.py"]
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "meta.json", "runs"]  # nothing written


OUT_COMMANDS = {
    "run": ["run", "--variants", "naive", "--seq-len", "64"],
    "report": ["report", REFERENCE_RUN],
    "compare": ["compare", REFERENCE_RUN, REFERENCE_RUN],
    "profile": ["profile", "--variant", "naive", "--seq-len", "64"],
}


@pytest.mark.parametrize("command", OUT_COMMANDS)
def test_an_out_that_cannot_be_written_is_one_line_exit_2_before_any_work(tmp_path, command):
    """--out under a file, or in a directory nobody may write in (sysfs refuses root too), is refused up
    front: one line naming --out and why, exit 2, nothing printed on stdout and nothing written."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [(a_file / "out", "which is a file, not a directory")]
    if Path("/sys/kernel").is_dir():  # Linux
        cases.append((Path("/sys/kernel/attnbench-out"), "cannot be written"))
    # a path the OS cannot take (a traceback and exit 70 once, or the folders above it made first)
    long_name = "is too long a path for this system: a name in it has 300 bytes, over 255"
    cases += [(tmp_path / ("x" * 300), long_name), (tmp_path / "new" / ("x" * 300), long_name)]
    cases.append((tmp_path.joinpath(*["y" * 200] * 25), "is too long a path for this system: it has "))
    for out, why in cases:
        p = run_cli(*OUT_COMMANDS[command], "--out", str(out), cwd=tmp_path)
        assert p.returncode == 2, (command, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and f"--out {str(out)!r}" in lines[0] and why in lines[0], p.stderr
        assert p.stdout == "" and (out.is_relative_to(tmp_path) or not out.exists())
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a-file"]


def test_a_path_too_long_for_the_os_is_one_line_exit_2_wherever_it_is_given(tmp_path):
    """A run, a store or a variant file named by a path the OS refuses as too long: one line naming it,
    exit 2, nothing written (each was an OSError's traceback and exit 70)."""
    long = str(tmp_path / ("x" * 300))
    for argv in (["report", long], ["export", long], ["compare", REFERENCE_RUN, long],
                 ["history", "add", REFERENCE_RUN, "--store", long + ".sqlite"],
                 ["history", "add", REFERENCE_RUN, "--store", str(tmp_path / "new" / ("x" * 300))],
                 ["check", "--variant-file", long + ".py"]):  # fmt: skip
        p = run_cli(*argv, cwd=tmp_path)
        assert p.returncode == 2 and p.stdout == "", (argv, p.stderr)
        (line,) = p.stderr.strip().splitlines()  # the file the OS refused, in the path given
        assert line.startswith(
            (f"attnbench: error: '{argv[-1]}", f"attnbench: error: --store '{argv[-1]}")
        ), line
        name = len(Path(argv[-1]).name)
        assert line.endswith(f"' is too long a path for this system: a name in it has {name} bytes, over 255")
    assert list(tmp_path.iterdir()) == []


PAGE_COMMANDS = {"report": ("report", "README.md"), "compare": ("compare", "compare.html"),
                 "profile": ("profile", "index.md")}  # fmt: skip


@pytest.mark.parametrize("command", PAGE_COMMANDS)
def test_an_out_beside_your_own_page_is_refused_and_the_page_kept(tmp_path, command):
    """`--out .` in a project: a README.md (or index.md, compare.html) that attnbench did not write is never
    written over; a page attnbench wrote there before is (tests/reports/test_page.py: its own pages)."""
    kind, name = PAGE_COMMANDS[command]
    (tmp_path / name).write_text("# My project\n\nmine, by hand\n")
    p = run_cli(*OUT_COMMANDS[command], "--out", str(tmp_path), cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    a = {"README.md": "a", "compare.html": "a"}.get(name, "an")  # an index.md
    said = f"--out {str(tmp_path)!r} holds {a} {name} that attnbench did not write, and the {kind} writes"
    assert p.stderr.strip().splitlines() == [
        f"attnbench: error: {said} its own {name} there; write it elsewhere"
    ]
    assert [x.name for x in tmp_path.iterdir()] == [name]
    assert (tmp_path / name).read_text() == "# My project\n\nmine, by hand\n"


def test_cuda_without_a_gpu_is_refused(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = run_cli("run", "--device", "cuda", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "no CUDA device" in p.stderr and not (tmp_path / "r").exists()


def test_variant_file_that_raises_on_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import attnbench\nraise ImportError('needs a package you lack')\n")
    p = run_cli("run", "--variant-file", str(bad), "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "failed to import: ImportError: needs a package you lack" in p.stderr
    assert not (tmp_path / "r").exists()
    p = run_cli("list", "--variant-file", str(bad))
    assert p.returncode == 2 and "failed to import" in p.stderr


@pytest.mark.parametrize("command", ["run", "check", "bench"])
def test_a_variant_file_that_ends_the_process_at_import_fails_the_command(tmp_path, command):
    """os._exit(0) at import ended attnbench there with status 0 and no word: `check` and `bench`, CI's
    gates, passed having checked nothing. It is the file's failure to import, in one line, exit 2."""
    gone = tmp_path / "gone.py"
    gone.write_text("import os\nos._exit(0)\n")
    argv = {
        "run": ("run", "--variants", "naive", "--seq-len", "32", "--out", str(tmp_path / "r")),
        "check": ("check", "--seq-len", "32"),
        "bench": ("bench", "gone", "--out", str(tmp_path / "r")),
    }[command]
    p = run_cli(*argv, "--variant-file", str(gone), process=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == [
        f"attnbench: error: variant file {str(gone)!r} failed to import: it called os._exit(0), which would "
        "have ended attnbench there"
    ]
    assert not (tmp_path / "r").exists()


def test_a_keyboard_interrupt_a_variant_file_raises_itself_is_its_failure(tmp_path):
    """Only a Ctrl-C the user sends stops the command (exit 130); one the file's code raises is the file's."""
    bad = tmp_path / "bad.py"
    bad.write_text("raise KeyboardInterrupt\n")
    p = run_cli("check", "--variant-file", str(bad), "--seq-len", "32")
    assert p.returncode == 2 and "failed to import: KeyboardInterrupt" in p.stderr, p.stderr


def test_existing_output_is_never_overwritten(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    p = run_cli("run", "--seq-len", "64", "--out", str(out))
    assert p.returncode == 2 and "already exists" in p.stderr
    assert (out / "precious.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1


def test_resume_needs_out_and_refuses_sweep_flags(tmp_path):
    p = run_cli("run", "--resume")
    assert p.returncode == 2 and "--resume needs --out" in p.stderr
    p = run_cli("run", "--resume", "--out", str(tmp_path), "--seq-len", "64")
    assert p.returncode == 2 and "drop --seq-len" in p.stderr
    p = run_cli("run", "--resume", "--out", str(tmp_path), "--env", "A=1")
    assert p.returncode == 2 and "drop --env" in p.stderr


def test_env_reaches_the_worker_and_the_record(carried_run):
    """--env is set in the worker process (its fingerprint, taken there, sees it) and kept in meta.json."""
    meta = json.loads((carried_run / "meta.json").read_text())
    fp = meta["fingerprint"]
    assert fp["THP_MEM_ALLOC_ENABLE"] == "1" and "MALLOC_ARENA_MAX=2" in fp["allocator_env"].split()
    assert fp["sweep_env"] == "ATTNBENCH_TEST_ENV=1 MALLOC_ARENA_MAX=2 THP_MEM_ALLOC_ENABLE=1"
    env = {"ATTNBENCH_TEST_ENV": "1", "MALLOC_ARENA_MAX": "2", "THP_MEM_ALLOC_ENABLE": "1"}
    assert meta["sweep"]["settings"]["env"] == env


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # torch sizes its pool from these where set


def test_cpu_affinity_pins_the_worker_and_meta_records_timing_hygiene(carried_run, tmp_path, monkeypatch):
    """--cpu-affinity CPU (conftest's carried_run pins its worker to the lowest CPU this process may use):
    the worker reports that CPU only, torch sizes its pool from that one CPU (so the pinning happened
    before torch started), and meta.json keeps what was asked, what the worker saw and that the garbage
    collector was off while timing. Where the worker had OMP_NUM_THREADS or MKL_NUM_THREADS (as pytest-xdist
    workers on a many-core machine may), torch took its pool size from them, so the pool is checked on a
    pinned run of its own, started without them."""
    import os

    cpu = min(os.sched_getaffinity(0))
    out = carried_run
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sweep"]["settings"]["cpu_affinity"] == [cpu]
    assert meta["cpu_affinity"] == {"requested": [cpu], "worker": [cpu]}
    assert meta["gc_disabled"] is True
    assert meta["gc_frozen_objects"] > 50_000  # torch's import alone leaves more; frozen, not rescanned
    if {v.partition("=")[0] for v in meta["fingerprint"]["allocator_env"].split()} & set(THREAD_VARIABLES):
        for name in THREAD_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        out = tmp_path / "pinned"
        run_cli("run", "--variants", "naive", "--seq-len", "32", "--heads", "2", "--warmup-ms", "1",
                "--budget-ms", "5", "--min-ms", "2", "--cpu-affinity", str(cpu), "--out", str(out), "-q",
                check=True)  # fmt: skip
        meta = json.loads((out / "meta.json").read_text())
        assert meta["cpu_affinity"] == {"requested": [cpu], "worker": [cpu]}
    assert meta["worker_threads"] == 1
    row = json.loads((out / "rows.jsonl").read_text().splitlines()[0])
    assert row["status"] == "ok" and row["threads"] == 1


def test_export_of_a_missing_run(tmp_path):
    p = run_cli("export", str(tmp_path / "nope"))
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


CPU_SMALL = DATA / "runs" / "cpu-small"


def test_export_into_a_file_is_written_whole_or_not_at_all(tmp_path):
    """`export --out x.json` was an unknown option, and an export into a missing folder the shell's error:
    --out FILE holds what stdout would, written through a temporary file beside it renamed into place, so
    that a failed write (here the file size limit, as a full disk) leaves the file as it was and no temporary
    file; a place it cannot be written is one line and exit 2 before the run is read, nothing made."""
    import resource
    import subprocess
    import sys

    from conftest import cli_env

    out = tmp_path / "hud.json"
    p = run_cli("export", str(CPU_SMALL), "--format", "hud", "--out", str(out), check=True)
    whole = run_cli("export", str(CPU_SMALL), "--format", "hud", check=True).stdout
    assert p.stdout == "" and out.read_text(encoding="utf-8") == whole
    assert p.stderr.strip() == f"export: {out}"
    out.write_text("last night's\n")
    args = [sys.executable, "-m", "attnbench", "export", str(CPU_SMALL), "--format", "hud", "--out", str(out)]

    def small_files():  # a file may grow to 4 KiB only: the export's write fails as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    p = subprocess.run(
        args, env=cli_env(), capture_output=True, text=True, timeout=300, preexec_fn=small_files
    )
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"attnbench: error: cannot write --out {str(out)!r}: file too large; ")
    assert out.read_text() == "last night's\n" and sorted(tmp_path.iterdir()) == [out]
    (tmp_path / "afile").write_text("mine")
    for where, said in [
        (tmp_path / "nope" / "x.csv", f"is in a folder that does not exist ({str(tmp_path / 'nope')!r})"),
        (tmp_path, "is a directory, not a file: give a file's path, such as --out "),
        (tmp_path / "afile" / "x.csv", f"is under {str(tmp_path / 'afile')!r}, which is a file"),
        (CPU_SMALL / "x.csv", "is inside the run directory"),
        (Path("/proc/x.csv"), "cannot be written"),
    ]:
        p = run_cli("export", str(tmp_path / "no-such-run"), "--out", str(where))
        assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
        assert p.stderr.startswith(f"attnbench: error: --out {str(where)!r} {said}"), p.stderr
    assert sorted(tmp_path.iterdir()) == [tmp_path / "afile", out] and not (CPU_SMALL / "x.csv").exists()


@pytest.mark.slow
def test_small_run_and_export(tmp_path):
    out = tmp_path / "r"
    p = run_cli(
        "run",
        "--variants",
        "naive,chunked,sdpa_efficient",
        "--seq-len",  # one N: each axis below still doubles the cells, and every cell costs its overhead
        "64",
        "--heads",
        "2",
        "--budget-ms",
        "5",
        "--warmup-ms",
        "1",
        "--causal",
        "both",
        "--pass",
        "both",
        "--padding",
        "0,0.25",
        "--batch",
        "2",
        "--calibrate-ms",  # a real calibration, recorded below (the tests' other runs take none)
        "50",
        "--out",
        str(out),
        check=True,
    )
    assert str(out) in p.stdout
    csv = run_cli("export", str(out), "--format", "csv", check=True).stdout.splitlines()
    assert len(csv) == 1 + 3 * 2 * 2 * 2  # variants x causal x pass x padding
    rows = json.loads(run_cli("export", str(out), "--format", "json", check=True).stdout)
    status = {(r["variant"], r["pass"]): r["status"] for r in rows}
    assert status[("naive", "fwdbwd")] == "ok" and status[("chunked", "fwd")] == "ok"
    assert status[("sdpa_efficient", "fwd")] == "unsupported"
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(r["n_samples"] >= 5 and r["peak_mem_bytes"] > 0 and r["tflops"] > 0 for r in ok)
    assert all(r["grad_rel_err"] is not None for r in ok if r["pass"] == "fwdbwd")
    assert (out / "numerics.json").is_file() and (out / "meta.json").is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["calibration"]["cpu"]["matmul_tflops"]["float32"] > 0
    assert meta["fingerprint"]["torch"]
    # the device that measured the rows is described once, keyed as the rows' where_key
    assert meta["executor"] == "local"
    keys = {where_key(r["host"], r["device"], r["gpu_uuid"]) for r in ok}
    assert keys == set(meta["devices"]) == {f"{ok[0]['host']}:cpu"}
    assert meta["devices"][keys.pop()]["calibration"] == meta["calibration"]["cpu"]


BENCHED = """
import torch
from attnbench import register


@register("right_attn")
def right_attn(q, k, v, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


@register("unscaled_attn")
def unscaled_attn(q, k, v, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1.0)
"""
QUICK_BENCH = ("--seq-len", "64", "--dtype", "float32", "--budget-ms", "5", "--min-ms", "1", "-q")


def test_bench_on_the_command_line_answers_and_fails_a_wrong_variant(tmp_path):
    """`attnbench bench VARIANT`: attnbench.bench's answer on stdout, exit status 0 when right, 1 when wrong
    in a cell (a CI gate on a kernel)."""
    mine = tmp_path / "mine.py"
    mine.write_text(BENCHED)
    right = run_cli(
        "bench", "right_attn", "--variant-file", str(mine), *QUICK_BENCH, "--out", str(tmp_path / "r")
    )
    assert right.returncode == 0, right.stderr
    lines = right.stdout.splitlines()
    assert lines[0].startswith("right_attn against sdpa: 4 cells of right_attn"), lines
    assert any(line.startswith("correct at N 100 and 300 too, forward and backward") for line in lines), lines
    assert (
        f"the full report: attnbench report {tmp_path / 'r'}" in right.stdout
    )  # the commands, not run.report()
    wrong = run_cli(
        "bench", "unscaled_attn", "--variant-file", str(mine), *QUICK_BENCH, "--out", str(tmp_path / "w")
    )
    assert wrong.returncode == 1, wrong.stderr
    assert any(
        line.startswith("WRONG float32 (causal; no mask; at N = 64)") for line in wrong.stdout.splitlines()
    )
    assert "it left out the scale" in wrong.stdout  # the numerics probe's WRONG: test_api_callables.py


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--variants", "a,b"], "bench measures VARIANT against --baseline: give no --variants"),
        (["--seq-len", "0"], "--seq-len must be positive integers, got 0"),
        (["--baseline", "nope"], "unknown variant 'nope'"),
    ],
)
def test_bench_refuses_bad_input_in_one_line_before_any_work(tmp_path, flags, said):
    p = run_cli("bench", "sdpa_math", *flags, "--out", str(tmp_path / "b"))
    assert p.returncode == 2 and p.stderr.startswith(f"attnbench: error: {said}"), p.stderr
    assert len(p.stderr.splitlines()) == 1 and not (tmp_path / "b").exists()


def test_bench_says_what_the_run_refuses_with_its_flags(tmp_path):
    """The API it calls says `out=`, `resume=True`; on the command line it is the flags' names."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("not a run")
    p = run_cli("bench", "sdpa_math", "--out", str(tmp_path / "full"), "-q")
    assert p.returncode == 2 and p.stderr.rstrip().endswith("pass --resume or choose another --out"), p.stderr


def test_bench_help_shows_the_bench_presets_defaults(monkeypatch):
    """`bench --help` showed run's defaults (--seq-len 256,512,1024,2048, --dtype float32) for a command
    whose sweep is the bench preset (N = 64..512, float32 and bfloat16): every default it shows is the
    sweep bench builds when the flag is not given, and the settings the preset sets are named."""
    import re

    from attnbench.harness.sweep.options import axis_options
    from attnbench.harness.sweep.sweeps import AXIS_KEYS, build_sweep

    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag
    text = run_cli("bench", "--help", check=True).stdout
    bench = build_sweep(preset="bench")
    checked = 0
    for option in axis_options():
        shown = re.search(rf"^  {option.flag()} \S+ .*\(default: ([^=)][^)]*)\)$", text, re.M)
        if shown:
            field = AXIS_KEYS[option.key].sweep_field
            given = {} if shown.group(1) == option.default else {option.key: shown.group(1)}  # page size 0
            said = getattr(build_sweep(given), field)
            assert said == getattr(bench, field), (option.key, shown.group(1))
            checked += 1
    assert checked >= 8 and "(default: 64,128,256,512)" in text and "(default: float32,bfloat16)" in text
    for flag, value in re.findall(r"(--[a-z-]+) (\d+)[,;]", text.split("preset sets", 1)[1]):
        assert float(value) == getattr(bench.settings, flag[2:].replace("-", "_")), flag
    assert "--rounds 3" in " ".join(text.split())


def test_a_flags_default_in_help_is_a_value_it_takes_or_says_what_no_flag_means(monkeypatch):
    """`--help` showed `--page-size ... (default: 0)` while `--page-size 0` is refused: a default its flag
    refuses is said in the axis's words (what no flag means), for every axis, and for the pytest plugin."""
    from attnbench.harness.sweep.grammar import read_axis
    from attnbench.harness.sweep.options import axis_options
    from attnbench.harness.sweep.sweeps import AXIS_KEYS

    for option in axis_options():
        axis = AXIS_KEYS[option.key]
        if option.default is None or option.default.startswith("= "):
            continue
        try:
            assert read_axis(axis, option.default, option.flag()) == axis.default, option.key
        except ValueError:
            assert option.default == ", ".join(axis.text(v) for v in axis.default), option.key
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag
    text = run_cli("run", "--help", check=True).stdout
    page = next(line for line in text.splitlines() if line.lstrip().startswith("--page-size"))
    assert page.endswith("(its length from --lengths) (default: contiguous K/V)"), page


def test_a_command_printed_to_paste_quotes_a_path_as_a_shell_reads_it(tmp_path, capsys):
    """`finish with:`, bench's resume and `measure them again with:` name the run as one word of the shell:
    pasted as shown, a path with a space (or a $) was two words, or another one."""
    import shlex

    from attnbench import cli_run
    from attnbench.harness.run.runner import RunSummary
    from attnbench.interrupted import RunInterrupted, bench_interrupted

    run = tmp_path / "my runs" / "a b$x"
    run.mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    stopped = RunSummary(path=run, counts={"ok": 1}, interrupted=True)
    said = [
        str(RunInterrupted(stopped, flags=True)).split("finish with: ")[1],
        str(bench_interrupted(stopped, "mine", None, flags=True)).split("finish with: ")[1],
        cli_run._finish(stopped),
    ]
    cli_run._again([{"status": "timeout"}], run)
    said.append(capsys.readouterr().err.split("again with: ")[1].replace("\n  ", " ").strip())
    for line in said:
        words = shlex.split(line)
        assert words[:2] == ["attnbench", words[1]] and str(run) in words, line


def test_a_ctrl_c_while_the_command_line_is_read_is_said_in_one_line(monkeypatch, capsys):
    """Building the parser imports each command's modules (a few tenths of a second): a Ctrl-C then printed
    Python's traceback and ended the process by SIGINT, not the command's 'interrupted' and status 130."""
    from attnbench import cli

    def stopped():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", stopped)
    assert cli.main(["list"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_ctrl_c_while_the_commands_modules_import_is_said_in_one_line(monkeypatch, capsys):
    """The console script's first code imports the command line's modules (a few tenths of a second): a
    Ctrl-C then printed Python's traceback and ended the process by SIGINT."""
    import sys

    from attnbench import entry

    class Stopped:  # the import system asks it first: a Ctrl-C as attnbench.cli imports
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "attnbench.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "attnbench.cli")
    monkeypatch.setattr(sys, "meta_path", [Stopped, *sys.meta_path])
    assert entry.main() == 130
    assert capsys.readouterr().err == "interrupted\n"
