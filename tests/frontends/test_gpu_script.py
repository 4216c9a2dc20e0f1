"""benchmarks/gpu_verify.sh rehearsed on the CPU: every command each mode would run on a GPU, with the
script's defaults expanded as bash expands them, is accepted today (a flag the CLI refuses, a preset, a
variant, module, attribute, script flag or test file that is gone fails here, not in a GPU session's scarce
minutes).

The script runs each mode with GPU_VERIFY_REHEARSE=1 and a `python3` first on PATH that records each argv
(running only the script's own `-c` plumbing); each recorded command is then rehearsed in this process by
benchmarks/gpu_rehearse.py, as `GPU_VERIFY_REHEARSE=1 bash benchmarks/gpu_verify.sh OUT MODE` does by hand."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_verify.sh"
ROUTED = "benchmarks/gpu_rehearse.py"  # what "${py[@]}" adds after python3 under GPU_VERIFY_REHEARSE=1
MODES = ("install", "checks", "suite", "flex", "session", "measure", "preset", "resume")
# the script's knobs: unset, so that each command is the one its defaults make
KNOBS = ("SESSION_SKIP", "SESSION_SECONDS", "PYTEST_K", "ENERGY_VARIANTS", "ENERGY_SEQ", "HC_VARIANTS",
         "HC_ROUNDS", "HC_SECONDS", "SUITE_PROCESSES", "SUITE_SECONDS", "CUDA_TESTS_K", "FLEX_LIMIT",
         "FLEX_SECONDS", "GPU_RUN_SECONDS", "VARLEN_SECONDS", "PAGED_SECONDS", "DEVICE_REPORTS",
         "GPU_VERIFY_REHEARSAL_LOG")  # fmt: skip
# each run measure reports under DEVICE_REPORTS=1 (made here, so that the reports are asked for)
MEASURED = ("gpu-run", "gpu-run-warm", "energy-run", "xformers-axes", "varlen-run", "paged-run")

# the script's own python3 (not "${py[@]}"): the stamp filter and the list of variants the gate takes, run as
# they are (CPU work) where the rest is recorded only
PLUMBING = ("import signal, sys, time", "variants.all_variants()")
RECORDER = """#!/bin/bash
# python3 as gpu_verify.sh calls it: each argv recorded (NUL-separated); only the script's own plumbing runs,
# anything else ends with exit status $GV_STATUS
printf '%s\\0' "$@" > "$(mktemp "$GV_CALLS/call.XXXXXX")"
case "$*" in
{plumbing}) exec {python} "$@" ;;
esac
exit "${{GV_STATUS:-0}}"
"""


@pytest.fixture(scope="module")
def rehearsal():
    return load_benchmark("gpu_rehearse")


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """script(mode, rehearse, status) -> (exit status, output, the python3 argvs the script gave): each mode
    run with a recording python3 first on PATH, its knobs unset (their defaults), under GPU_VERIFY_REHEARSE=1
    or as on a GPU, each command ending with `status`."""
    root = tmp_path_factory.mktemp("gpu-script")
    shims = root / "bin"
    shims.mkdir()
    plumbing = "|".join(f"*{shlex.quote(code)}*" for code in PLUMBING)
    (shims / "python3").write_text(RECORDER.format(python=shlex.quote(sys.executable), plumbing=plumbing))
    (shims / "python3").chmod(0o755)

    def script(mode: str, rehearse: bool, status: int = 0):
        out, where = root / mode, root / f"calls-{mode}-{rehearse}"
        where.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in KNOBS}
        env.update(GV_CALLS=str(where), GV_STATUS=str(status), PATH=f"{shims}{os.pathsep}{env['PATH']}")
        if rehearse:
            env["GPU_VERIFY_REHEARSE"] = "1"
        if mode == "measure":
            env["DEVICE_REPORTS"] = "1"
            for name in MEASURED:
                (out / name).mkdir(parents=True, exist_ok=True)
        extra = [str(root / "a-gpu-run")] if mode == "resume" else []
        done = subprocess.run(
            ["bash", str(SCRIPT), str(out), mode, *extra], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        argvs = [f.read_bytes().decode().split("\0")[:-1] for f in sorted(where.iterdir())]
        return done.returncode, done.stdout + done.stderr, argvs

    return script


@pytest.fixture(scope="module")
def calls(scripted) -> dict[str, list[list[str]]]:
    """Each mode's python3 argvs, as the script gives them under GPU_VERIFY_REHEARSE=1."""
    recorded = {}
    for mode in MODES:
        status, said, recorded[mode] = scripted(mode, rehearse=True)
        assert status == 0, f"gpu_verify.sh {mode}: exit {status}\n{said}"
    return recorded


def test_a_gpu_runs_the_commands_rehearsed(calls, scripted):
    """Without GPU_VERIFY_REHEARSE the script gives python3 the very argvs the rehearsal checks (less
    benchmarks/gpu_rehearse.py), and its exit status is still its mode's last command's."""
    for mode in MODES:
        status, said, argvs = scripted(mode, rehearse=False, status=3 if mode == "checks" else 0)
        assert status == (3 if mode == "checks" else 0), f"{mode}: exit {status}\n{said}"
        rehearsed = [argv[1:] if argv[:1] == [ROUTED] else argv for argv in calls[mode]]
        assert sorted(argvs) == sorted(rehearsed), mode
        assert not any(ROUTED in argv for argv in argvs)


def test_every_mode_of_the_script_is_rehearsed_and_a_misspelt_one_refused(tmp_path):
    """The modes here are the script's `case` labels (a new mode is rehearsed too); a misspelt mode says so
    with exit status 2 instead of a machine start that does nothing."""
    labels = re.findall(r"^([a-z-]+)\)$", SCRIPT.read_text(), flags=re.M)
    assert sorted(labels) == sorted(MODES)
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "sesion"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown mode 'sesion'" in done.stderr


def _plumbing(argv: list[str]) -> bool:
    return "-c" in argv and any(code in " ".join(argv) for code in PLUMBING)


def _routed(calls: list[list[str]]) -> list[list[str]]:
    return [argv[1:] for argv in calls if argv[:1] == [ROUTED]]


def test_every_gpu_command_runs_through_py(calls):
    """A python3 the script runs itself (not "${py[@]}") is only its `-c` plumbing: a GPU command added
    without py would run on the CPU in a rehearsal, and would not be rehearsed."""
    for mode, argvs in calls.items():
        unrouted = [argv for argv in argvs if argv[:1] != [ROUTED] and not _plumbing(argv)]
        assert not unrouted, f'{mode}: python3 not through "${{py[@]}}": {unrouted}'
        assert _routed(argvs), f"{mode}: no command recorded"


def test_each_kind_of_command_is_rehearsed(calls):
    routed = [argv for argvs in calls.values() for argv in _routed(argvs)]
    subcommands = {argv[2] for argv in routed if argv[:2] == ["-m", "attnbench"]}
    assert {"run", "check", "bench", "report", "env", "list"} <= subcommands
    scripts = {Path(argv[0]).name for argv in routed if argv[0].endswith(".py")}
    assert scripts == {"harness_check.py", "timing_modes.py", "flex_options.py"}
    assert any(argv[:2] == ["-m", "pytest"] for argv in routed)
    assert any(argv[:2] == ["-m", "pip"] for argv in routed)
    snippets = " ".join(argv[1] for argv in routed if argv[0] == "-c")
    assert "load_cuda_runtime_12" in snippets and "torch.zeros" in snippets
    # the defaults, expanded as bash expands them: the ax=(...) array, ${ENERGY_VARIANTS:-...}, "${@:3}" empty
    runs = [argv for argv in calls["measure"] if "run" in argv]
    assert any("--kv-heads" in argv and "16,4" in argv and "--window" in argv for argv in runs)
    assert any("--energy" in argv and "sdpa_cudnn,sdpa_flash,sdpa_efficient,xformers,naive,sdpa_math" in argv
               for argv in runs)  # fmt: skip
    assert any(argv[-2:] == ["--out", argv[-1]] and "gpu" in argv for argv in runs)


@pytest.mark.parametrize("mode", MODES)
def test_every_command_of_the_mode_is_accepted(calls, rehearsal, mode, monkeypatch):
    """Each command rehearsed as by hand: run and bench dry-run on the CPU (a CUDA-only variant is
    `unsupported` there, which is fine), check's plan, the parse of the rest, pytest's parse and paths, the
    scripts' parse, the snippets' imports and attributes (the plumbing's too)."""
    monkeypatch.chdir(ROOT)
    failed = []
    for argv in calls[mode]:
        routed = argv[1:] if argv[:1] == [ROUTED] else None
        if routed:
            ok, said = rehearsal.rehearse(routed)
        elif _plumbing(argv):  # its code is checked as a GPU command's is
            ok, said = rehearsal.snippet(argv[argv.index("-c") + 1])
        else:
            ok, said = False, 'not run through "${py[@]}", so not rehearsed'
        if not ok:
            failed.append(f"python3 {shlex.join(routed or argv)}: {said}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["-m", "attnbench", "run", "--preset", "gpu", "--out", "o", "--energyy"], "unrecognized arguments"),
        (["-m", "attnbench", "run", "--preset", "gpux", "--out", "o"], "unknown preset 'gpux'"),
        (["-m", "attnbench", "run", "--variants", "sdpa,xformer", "--device", "cuda"], "unknown variant"),
        (["-m", "attnbench", "bench", "xformerz", "--device", "cuda", "-q"], "xformerz"),
        (
            ["-m", "attnbench", "check", "--device", "cuda", "--variants", "flexx", "--probe"],
            "unknown variant",
        ),
        (["-m", "attnbench", "check", "--device", "cuda", "--seq-len", "200,200"], "lists a value twice"),
        (["-m", "attnbench", "report", "r", "--baselines", "sdpa"], "unrecognized arguments"),
        (["-c", "from attnbench.variants import xformers_mea as x; x.load_cuda_runtime_11()"], "x has no"),
        (["-c", "from attnbench.variants import xformers_meax as x"], "variants has no xformers_meax"),
        (["benchmarks/timing_modes.py", "--device", "cuda", "--budget-msx", "150"], "refused its flags"),
        (["benchmarks/harness_check.py", "--variants", "sdpa_flash,sdpa_cudnnn"], "sdpa_cudnnn"),
        (["benchmarks/flex_option.py", "--seconds", "110"], "no such script"),
        (["-m", "pytest", "tests/harness/test_kuda.py", "-q"], "not found"),
        (["-m", "pytest", "tests", "-q", "--ignore=tests/harness/test_kuda.py"], "--ignore names no file"),
        (["-m", "pytest", "tests/harness/test_cuda.py", "--junit-xml-x=o.xml"], "unrecognized arguments"),
    ],
)
def test_a_command_that_rotted_fails_its_rehearsal(rehearsal, argv, says, monkeypatch):
    monkeypatch.chdir(ROOT)
    ok, said = rehearsal.rehearse(argv)
    assert not ok and says in said, said


def test_cuda_is_read_as_cpu(rehearsal):
    on_cpu = rehearsal.on_cpu
    assert on_cpu(["run", "--device", "cuda", "--seq-len", "8"]) == [
        "run",
        "--device",
        "cpu",
        "--seq-len",
        "8",
    ]
    assert on_cpu(["run", "--preset", "gpu"]) == ["run", "--preset", "gpu", "--device", "cpu"]
    assert on_cpu(["run", "--device=cuda"]) == ["run", "--device=cpu"]
    assert on_cpu(["run", "--resume", "--out", "d"]) == ["run", "--resume", "--out", "d"]
    assert on_cpu(["report", "d"]) == ["report", "d"]
