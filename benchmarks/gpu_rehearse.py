"""gpu_verify.sh's GPU commands rehearsed on the CPU: each `python3 ARGV` the script would run, checked here.

`GPU_VERIFY_REHEARSE=1 bash benchmarks/gpu_verify.sh OUT MODE` runs `python3 benchmarks/gpu_rehearse.py ARGV`
where a GPU session runs `python3 ARGV`, so that a flag, a preset, a variant, a module or a file the script
names and the code no longer has is found here, not in a GPU session's scarce minutes. Nothing is measured:
  -m attnbench run|bench   a dry run (--dry-run) with --device cuda read as cpu (a preset's cuda too): the
                           flags, the preset and every variant name are checked; a CUDA-only variant is
                           `unsupported` here, which is fine (bench's "every one unsupported" too)
  -m attnbench check       its flags and its plan (harness.tools.check.prepare), --device cuda read as cpu
  -m attnbench run --resume, report, env, list, ...: the CLI's argument parse (a resume's sweep, a report's
                           runs are the device's)
  -m pytest                pytest parses the options and finds the paths (--ignore's too), collects nothing
  -m pip                   not rehearsed (installs are the device's)
  -c CODE                  every module the code imports, and every attribute it reads of one, exists (no
                           call is made: the calls need CUDA); a module not installed here (xformers) is said
  SCRIPT.py ARGS           the script's own argparse parse, stopped there (nothing of it runs), and each
                           name of a --variants value registered
Each rehearsal says `ok` or `FAIL` on stderr, with the argv, and appends that line to
$GPU_VERIFY_REHEARSAL_LOG where set; exit status 0 or 2. tests/frontends/test_gpu_script.py rehearses
every mode's commands in one process with `rehearse` (and runs this file as a pytest plug-in, -p).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import os
import runpy
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRY_RUN = ("run", "bench")  # the subcommands with a dry run
_NONE = object()


def rehearse(argv: list[str]) -> tuple[bool, str]:
    """(accepted, what was checked) for `python3 ARGV` as gpu_verify.sh would run it on a GPU."""
    try:
        if argv[:2] == ["-m", "attnbench"]:
            return _attnbench(argv[2:])
        if argv[:2] == ["-m", "pytest"]:
            return _pytest(argv[2:])
        if argv[:2] == ["-m", "pip"]:
            return True, "not rehearsed: pip installs on the device only"
        if argv[:1] == ["-c"] and len(argv) == 2:
            return snippet(argv[1])
        if argv and argv[0].endswith(".py"):
            return _script(argv[0], argv[1:])
    except Exception:  # a crash of what is rehearsed: the rehearsal's finding, with its traceback
        return False, "crashed:\n" + traceback.format_exc()
    return False, "no rehearsal for this argv (gpu_rehearse.py knows -m attnbench|pytest|pip, -c, SCRIPT.py)"


def on_cpu(words: list[str]) -> list[str]:
    """attnbench's words with --device cuda read as cpu; a run or bench that names no device (a preset's may
    say cuda) put on cpu, unless it resumes (a resume's sweep is its run's own)."""
    out = ["cpu" if w == "cuda" and i and words[i - 1] == "--device" else w for i, w in enumerate(words)]
    out = ["--device=cpu" if w == "--device=cuda" else w for w in out]
    named = any(w == "--device" or w.startswith("--device=") for w in words)
    if words[:1] in (["run"], ["bench"]) and not named and "--resume" not in words:
        out += ["--device", "cpu"]
    return out


def _attnbench(words: list[str]) -> tuple[bool, str]:
    from attnbench.cli import build_parser, main
    from attnbench.cli_common import BadInput

    words = on_cpu(words)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(words)
    except SystemExit:
        return False, f"refused: {err.getvalue().strip()}"
    sub = words[0]
    if sub in DRY_RUN and not getattr(args, "resume", False):
        with contextlib.redirect_stderr(err):
            rc = main([*words, "--dry-run"])
        said = err.getvalue().strip().removeprefix("attnbench: error: ")
        if rc == 0:
            return True, f"a dry run of attnbench {shlex.join(words)}"
        if sub == "bench" and rc == 2 and "every one unsupported" in said:  # xformers not installed here
            return True, f"accepted, every cell unsupported here: {said}"
        return False, f"exit {rc}: {said}"
    if sub == "check":
        from attnbench.cli_tools import check_plan

        try:
            plan, _ = check_plan(args)
        except BadInput as exc:
            return False, f"refused: {exc}"
        lengths = ", ".join(map(str, plan.seq_lens))
        return True, f"check's plan: {len(plan.names)} variants, {', '.join(plan.dtypes)}, N = {lengths}"
    return True, f"parsed: attnbench {shlex.join(words)}"


def _pytest(words: list[str]) -> tuple[bool, str]:
    """pytest's own parse of the options, this file as a plug-in that collects nothing (-p gpu_rehearse)."""
    dropped = []
    if importlib.util.find_spec("xdist") is None:  # the device image has it; this machine may not
        words, dropped = _without(words, ("-n", "--dist", "--numprocesses"))
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))  # -p gpu_rehearse: this
    env = {**os.environ, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "pytest", *words, "--collect-only", "-q", "-p", "gpu_rehearse"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    said = "; ".join(line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower())
    if done.returncode not in (0, 5):  # 5: no tests collected, as asked
        return False, f"pytest exit {done.returncode}: {said or done.stdout[-500:] + done.stderr[-500:]}"
    note = f" (pytest-xdist not installed here: {' '.join(dropped)} not checked)" if dropped else ""
    return True, f"pytest parsed the options and found the paths{note}"


def _without(words: list[str], flags: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """words less each of flags and its value (`-n 8`, `--dist=loadfile`, `-n8`); and what was taken out."""
    kept, dropped, skip = [], [], False
    for word in words:
        if skip:
            dropped.append(word)
            skip = False
        elif word in flags:
            dropped.append(word)
            skip = True
        elif word.startswith(tuple(f"{f}=" for f in flags)) or (word.startswith("-n") and word[2:].isdigit()):
            dropped.append(word)
        else:
            kept.append(word)
    return kept, dropped


def pytest_configure(config) -> None:
    """As a pytest plug-in: the files --ignore names must exist (a moved test file is run twice, else)."""
    import pytest

    missing = [path for path in config.getoption("ignore") or [] if not Path(path).exists()]
    if missing:
        raise pytest.UsageError(f"--ignore names no file: {', '.join(missing)}")


def pytest_collection(session) -> bool:
    """As a pytest plug-in: each path pytest was given exists, and nothing is collected (the tests, and -k's
    choice among them, are the device's)."""
    import pytest

    missing = [arg for arg in session.config.args if not Path(arg.split("::")[0]).exists()]
    if missing:
        raise pytest.UsageError(f"file or directory not found: {', '.join(missing)}")
    return True


def snippet(code: str) -> tuple[bool, str]:
    """Every module `code` imports, and every attribute chain it reads of one, exists; nothing is called."""
    tree = ast.parse(code)
    names: dict[str, object] = {}  # a name the code binds by import -> the module (None: not installed here)
    absent, checked = set(), 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module = _module(alias.name, absent)
                top = alias.name.split(".")[0]
                names[alias.asname or top] = module if alias.asname else _module(top, absent)
        elif isinstance(node, ast.ImportFrom):
            base = _module(node.module, absent)
            for alias in node.names:
                value = None if base is None else getattr(base, alias.name, _NONE)
                if value is _NONE:  # a submodule not imported yet, or nothing of that name
                    if importlib.util.find_spec(f"{node.module}.{alias.name}") is None:
                        return False, f"{node.module} has no {alias.name}"
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                names[alias.asname or alias.name] = value
    for node in ast.walk(tree):
        chain = _chain(node)
        if not chain or chain[0] not in names or names[chain[0]] is None:
            continue
        value = names[chain[0]]
        for i, attr in enumerate(chain[1:], 1):
            if not hasattr(value, attr):
                return False, f"{'.'.join(chain[:i])} has no {attr}"
            value, checked = getattr(value, attr), checked + 1
    note = f" ({', '.join(sorted(absent))} not installed here: not checked)" if absent else ""
    return True, f"{len(names)} imports and {checked} attributes found{note}"


def _module(name: str, absent: set[str]):
    """The module `name`, imported; None, noted in `absent`, where its top package is not installed here."""
    top = name.split(".")[0]
    if top in absent or importlib.util.find_spec(top) is None:
        absent.add(top)
        return None
    return importlib.import_module(name)


def _chain(node: ast.AST) -> list[str]:
    """`a.b.c` read as ['a', 'b', 'c'] where node is such an attribute chain on a name; [] otherwise."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.insert(0, node.attr)
        node = node.value
    return [node.id, *chain] if chain and isinstance(node, ast.Name) else []


class _Parsed(Exception):
    """The script's parse_args returned: it accepted its argv, and nothing more of it runs."""


def _script(path: str, words: list[str]) -> tuple[bool, str]:
    """The script's own argparse parse of `words`, stopped as soon as it returns; each --variants name
    registered."""
    if not Path(path).is_file():
        return False, f"no such script: {path}"
    if "parse_args(" not in Path(path).read_text():  # it would run on: not rehearsed
        return False, f"{path} has no parse_args call to stop at: not rehearsed"
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    argv, path_was, err = sys.argv, sys.path[:], io.StringIO()
    sys.argv = [path, *words]
    argparse.ArgumentParser.parse_args = parse_only
    try:
        with contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except _Parsed as parsed:
        return _named_variants(path, vars(parsed.args[0]))
    except SystemExit as exc:
        return False, f"{path} refused its flags (exit {exc.code}): {' '.join(err.getvalue().split())}"
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv, sys.path[:] = argv, path_was  # flex_options.py puts benchmarks/ first
    return False, f"{path} ended without calling parse_args: its flags were not checked"


def _named_variants(path: str, parsed: dict) -> tuple[bool, str]:
    from attnbench import variants

    names = [n for n in str(parsed.get("variants") or "").split(",") if n]
    try:
        variants.resolve(names)
    except ValueError as exc:  # VariantError is one
        return False, f"{path} --variants: {exc}"
    registered = f"; {len(names)} variants registered" if names else ""
    return True, f"{Path(path).name} parsed its flags{registered}"


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    ok, said = rehearse(argv)
    line = f"{'ok' if ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s) python3 {shlex.join(argv)}: {said}"
    print(f"rehearse: {line}", file=sys.stderr, flush=True)
    log = os.environ.get("GPU_VERIFY_REHEARSAL_LOG")
    if log:
        with open(log, "a") as f:  # one write per line: the steps that run side by side append whole lines
            f.write(line.splitlines()[0] + "\n")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
