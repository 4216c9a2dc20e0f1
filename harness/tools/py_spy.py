"""py-spy for `attnbench profile`: find the executable, and record a flame graph and a speedscope profile
of the profiled child while it loops the cell.

py-spy attaches from outside (ptrace), so it samples only the child's Python (and with --native, C/C++)
stacks; what it needs from the machine (ptrace permission) is named in the message when it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PY_SPY_ENV = "ATTNBENCH_PY_SPY"  # names the py-spy executable to use (tests point it at nothing)
INSTALL_HINT = "pip install 'attnbench[profile]'"
NOT_FOUND = "py-spy not found"  # how find_py_spy's reason starts (the parent says it once, on stderr)
SPY_START_S = 60.0  # py-spy's longest start (attach, read symbols) before it counts as failed
# (kind, file, py-spy --format): the two recordings, in the order they are taken
RECORDINGS = (
    ("flame", "flame.svg", "flamegraph"),
    ("speedscope", "profile.speedscope.json", "speedscope"),
)
FILES = {kind: name for kind, name, _ in RECORDINGS}


def find_py_spy() -> tuple[str | None, str]:
    """(the py-spy executable, "") or (None, a one-line reason naming how to install it)."""
    named = os.environ.get(PY_SPY_ENV)
    if named is not None:
        found = shutil.which(named) if named else None
        where = f"{PY_SPY_ENV}={named!r} names no executable"
    else:
        beside = Path(sys.executable).parent / "py-spy"  # a venv's bin/ that is not on PATH
        found = shutil.which("py-spy") or (str(beside) if os.access(beside, os.X_OK) else None)
        where = f"not on PATH and not beside {sys.executable}"
    if found:
        return found, ""
    return None, f"{NOT_FOUND} ({where}): install it with {INSTALL_HINT}"


def why_failed(err: str) -> str:
    """`err` from record(), with what py-spy usually lacks when it cannot attach."""
    return (
        f"{err}: it needs root or ptrace permission (Linux: "
        f"sysctl kernel.yama.ptrace_scope=0 or CAP_SYS_PTRACE); install or upgrade it with {INSTALL_HINT}"
    )


def sample(
    exe: str, pid: int, out: Path, *, seconds_each: float, rate: int, native: bool
) -> tuple[list[dict[str, Any]], str]:
    """The RECORDINGS of process `pid`, one after the other, into `out`: (one info per recording, error).
    Stops at the first error: a py-spy that cannot attach once will not the second time."""
    records = []
    for _, name, fmt in RECORDINGS:
        info, err = record(exe, pid, out / name, fmt, seconds_each, rate=rate, native=native)
        info["file"] = name
        records.append(info)
        if err:
            return records, err
    return records, ""


def record(
    exe: str, pid: int, path: Path, fmt: str, seconds: float, *, rate: int, native: bool
) -> tuple[dict[str, Any], str]:
    """py-spy attached to `pid` for `seconds`, then Ctrl-C, on which it writes `path`: (info, error).

    The clock starts at py-spy's "Sampling process" line: before it, py-spy is still reading the target's
    symbols (over a second with --native and libtorch), and a Ctrl-C then kills it without output."""
    cmd = [exe, "record", "--pid", str(pid), "--output", str(path), "--format", fmt]
    cmd += ["--rate", str(rate)] + (["--native"] if native else [])
    info: dict[str, Any] = {"command": " ".join(cmd), "seconds": seconds}
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:
        return info, f"py-spy could not start ({exc})"
    lines: list[str] = []
    sampling = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if "Sampling process" in line:
                sampling.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _stopped(proc, sampling, seconds)
    except BaseException:  # Ctrl-C in the parent: py-spy (which a terminal's Ctrl-C reached too) goes now,
        proc.kill()  # before the caller removes what the profile wrote, so that it writes nothing after
        proc.wait()
        raise
    reader.join(timeout=5)
    samples = re.search(r"Samples: (\d+) Errors: (\d+)", "\n".join(lines))
    if samples:
        info["samples"], info["errors"] = int(samples[1]), int(samples[2])
    if proc.returncode != 0 or not path.is_file():
        said = [ln for ln in lines if ln]
        return info, f"py-spy failed ({said[-1] if said else f'exit status {proc.returncode}'})"
    return info, ""


def _stopped(proc: subprocess.Popen, sampling: threading.Event, seconds: float) -> None:
    """Wait for py-spy's "Sampling process" line, give it `seconds`, then Ctrl-C, on which it writes."""
    deadline = time.monotonic() + SPY_START_S
    while not sampling.wait(0.05) and proc.poll() is None and time.monotonic() < deadline:
        pass
    if sampling.is_set():
        time.sleep(0.05)  # py-spy installs its Ctrl-C handler right after that line
        try:
            proc.wait(timeout=seconds)  # returns early only when py-spy gave up
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
