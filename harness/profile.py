"""Profile one cell: a child process loops it under py-spy (flame graph, speedscope), then torch.profiler
records a few calls of it (Chrome trace, top operators by self time).

Order of events: validate the cell flags (harness.spec), the variant and its support for the cell ->
find py-spy -> (out directory) -> start the child, which imports torch, builds the inputs and warms up
-> py-spy attaches to the warm child twice (flame graph, then speedscope), so neither the torch import
nor the warm-up is in the samples -> the child stops looping and runs torch.profiler -> profile.json.

The child is a separate process so that py-spy samples only the cell, and so that the `USDT: ...
profiler_start/stop` lines torch.profiler prints on stderr can be filtered out of the user's terminal.
Nothing here imports torch at module level; the child does.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .spec import CellSpec, sweep_field, sweep_from_text

SCHEMA = 1
DEFAULT_SEQ_LEN = 1024  # a sweep's default is four lengths; a profile needs one
PY_SPY_ENV = "ATTNBENCH_PY_SPY"  # names the py-spy executable to use (tests point it at nothing)
INSTALL_HINT = "pip install 'attnbench[profile]'"
PROTOCOL = "attnbench-profile:"  # prefix of the child's stdout lines meant for the parent
USDT = re.compile(r"^USDT:")  # torch.profiler's start/stop chatter on stderr
SPY_START_S = 60.0  # py-spy's longest start (attach, read symbols) before it counts as failed
WARMUP_S = 0.3  # warm-up before sampling: first calls pay one-time costs (allocator, kernels, caches)
FILES = {
    "flame": "flame.svg",
    "speedscope": "profile.speedscope.json",
    "trace": "trace.json",
    "top_ops_csv": "top_ops.csv",
    "meta": "profile.json",
}

# CLI dest -> (flag, axis of harness.spec.sweep_from_text); the values are parsed and validated there
CELL_FLAGS: dict[str, tuple[str, str]] = {
    "device": ("--device", "device"),
    "dtype": ("--dtype", "dtype"),
    "batch": ("--batch", "batch"),
    "heads": ("--heads", "heads"),
    "seq_len": ("--seq-len", "seq_len"),
    "d_k": ("--d-k", "d_k"),
    "d_v": ("--d-v", "d_v"),
    "causal": ("--causal", "causal"),
    "padding": ("--padding", "padding"),
    "pass_": ("--pass", "pass"),
}


@dataclass(frozen=True)
class Plan:
    """Everything `profile_cell` needs, validated."""

    cell: CellSpec
    threads: int = 0  # 0 = torch's default
    seconds: float = 5.0  # total py-spy time, split between the flame graph and the speedscope recording
    rate: int = 100
    iters: int = 5  # calls recorded by torch.profiler
    native: bool = False
    py_spy: str | None = None  # the executable; None: no py-spy part
    py_spy_note: str = ""  # why there is no py-spy part
    variant_files: tuple[str, ...] = ()
    seed: int = 0

    @property
    def shape(self) -> str:
        c = self.cell
        text = f"{c.device}-{c.dtype}-b{c.batch}-h{c.heads}-n{c.seq_len}-dk{c.d_k}"
        text += f"-dv{c.d_v}" if c.d_v != c.d_k else ""
        text += f"-{'causal' if c.causal else 'full'}"
        text += f"-pad{c.padding:g}" if c.padding else ""
        return f"{text}-{c.pass_}"

    def default_dir_name(self) -> str:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return re.sub(r"[^A-Za-z0-9._-]+", "-", f"profile-{self.cell.variant}-{self.shape}-{stamp}")

    def command(self) -> str:
        """The attnbench command line that profiles this cell again."""
        c = self.cell
        parts = ["attnbench", "profile", "--variant", c.variant, "--device", c.device, "--dtype", c.dtype]
        parts += ["--batch", str(c.batch), "--heads", str(c.heads), "--seq-len", str(c.seq_len)]
        parts += ["--d-k", str(c.d_k), "--d-v", str(c.d_v), "--causal", "yes" if c.causal else "no"]
        parts += ["--padding", f"{c.padding:g}"] if c.padding else []
        parts += ["--pass", c.pass_, "--seconds", f"{self.seconds:g}", "--rate", str(self.rate)]
        parts += ["--iters", str(self.iters)] + (["--threads", str(self.threads)] if self.threads else [])
        parts += ["--native"] if self.native else []
        parts += ["--no-py-spy"] if self.py_spy is None else []
        for path in self.variant_files:
            parts += ["--variant-file", path]
        return " ".join(parts)


def single_cell(variant: str, given: Mapping[str, str | Sequence[str] | None], threads: int = 0) -> CellSpec:
    """The one cell named by run-style flags (dest -> the text given, None = default); ValueError naming
    the bad value, or the flag given more than one value. Parsing and range checks are harness.spec's."""
    texts: dict[str, Any] = {"seq_len": str(DEFAULT_SEQ_LEN), "threads": threads}
    for dest, value in given.items():
        if value is None:
            continue
        flag, axis = CELL_FLAGS[dest]
        values = [value] if isinstance(value, str) else list(value)
        if len(values) != 1:
            raise ValueError(f"{flag} takes one value (profile runs one cell), got {' and '.join(values)}")
        texts[axis] = values[0]
    spec = sweep_from_text(texts)  # errors name the axis as `attnbench run` names its flag
    for flag, axis in CELL_FLAGS.values():
        if len(getattr(spec, sweep_field(axis))) > 1:
            raise ValueError(f"{flag} takes one value (profile runs one cell), got {texts[axis]!r}")
    (cell,) = spec.cells([variant])
    return cell


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
    return None, f"py-spy not found ({where}): install it with {INSTALL_HINT}"


def prepare(
    variant: str,
    given: Mapping[str, str | Sequence[str] | None],
    *,
    threads: int | None = None,
    seconds: float = 5.0,
    rate: int = 100,
    iters: int = 5,
    native: bool = False,
    use_py_spy: bool = True,
    variant_files: Sequence[str] = (),
) -> Plan:
    """Validate everything before any work: cell flags first (cheap), then the variant (imports torch)."""
    cell = single_cell(variant, given, threads or 0)
    if not seconds > 0 or seconds > 3600:
        raise ValueError(f"--seconds must be a number of seconds in (0, 3600], got {seconds!r}")
    if not 1 <= rate <= 10_000:
        raise ValueError(f"--rate must be samples per second in 1..10000, got {rate!r}")
    if not 1 <= iters <= 1000:
        raise ValueError(f"--iters must be calls in 1..1000, got {iters!r}")
    from attnbench import variants

    for path in variant_files:
        variants.load_variant_file(path)
    reason = variants.get(variant).check(cell.problem())  # VariantError (a ValueError) when unknown
    if reason:
        raise ValueError(f"{variant} cannot run this cell here: {reason}")
    exe, note = find_py_spy() if use_py_spy else (None, "skipped (--no-py-spy)")
    return Plan(cell, threads or 0, seconds, rate, iters, native, exe, note, tuple(variant_files))


# ---- the parent: the child, py-spy, and what they leave -------------------------------------------------


@dataclass
class Outcome:
    """What a profile produced: profile.json's contents, the messages printed, the error if it failed."""

    out: Path
    plan: Plan
    meta: dict[str, Any] = field(default_factory=dict)  # what profile.json holds
    messages: list[str] = field(default_factory=list)  # one line each, also printed on stderr
    error: str = ""  # the torch.profiler part failed (exit status 1)


class _Child:
    """The profiled process: protocol lines on stdout, stderr forwarded without torch's USDT lines."""

    def __init__(self, plan: Plan, out: Path, loop: bool) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "attnbench.harness.profile", "--cell", json.dumps(plan.cell.to_dict())]
        cmd += ["--out", str(out), "--iters", str(plan.iters), "--threads", str(plan.threads)]
        cmd += ["--seed", str(plan.seed)] + (["--loop", str(plan.seconds + 120)] if loop else [])
        for path in plan.variant_files:
            cmd += ["--variant-file", path]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.tail: list[str] = []
        self._err = threading.Thread(target=self._forward_stderr, daemon=True)
        self._err.start()

    def _forward_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if USDT.match(line):
                continue
            self.tail = (self.tail + [line.rstrip()])[-20:]
            sys.stderr.write(line)

    def read(self) -> tuple[str, Any]:
        """The next protocol message (name, data); ("exit", code) when the child is gone."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                name, _, data = line[len(PROTOCOL) :].strip().partition(" ")
                return name, json.loads(data) if data else None
            sys.stderr.write(line)  # a variant that prints
        code = self.proc.wait()
        self._err.join(timeout=5)
        return "exit", code

    def failure(self, code: int) -> str:
        last = next((line for line in reversed(self.tail) if line.strip()), "")
        return f"the profiled cell failed (exit status {code}): {last}".rstrip(": ")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _record(plan: Plan, pid: int, path: Path, fmt: str, seconds: float) -> tuple[dict[str, Any], str]:
    """py-spy attached to `pid` for `seconds`, then Ctrl-C, on which it writes `path`: (info, error).

    The clock starts at py-spy's "Sampling process" line: before it, py-spy is still reading the target's
    symbols (over a second with --native and libtorch), and a Ctrl-C then kills it without output."""
    assert plan.py_spy is not None
    cmd = [plan.py_spy, "record", "--pid", str(pid), "--output", str(path), "--format", fmt]
    cmd += ["--rate", str(plan.rate)] + (["--native"] if plan.native else [])
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
    reader.join(timeout=5)
    samples = re.search(r"Samples: (\d+) Errors: (\d+)", "\n".join(lines))
    if samples:
        info["samples"], info["errors"] = int(samples[1]), int(samples[2])
    if proc.returncode != 0 or not path.is_file():
        said = [ln for ln in lines if ln]
        return info, f"py-spy failed ({said[-1] if said else f'exit status {proc.returncode}'})"
    return info, ""


def profile_cell(plan: Plan, out: Path, say: Callable[[str], None] | None = None) -> Outcome:
    """Run the child (py-spy part when plan.py_spy, then torch.profiler) and write profile.json in `out`."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    res = Outcome(out, plan)
    if plan.py_spy is None and plan.py_spy_note.startswith("py-spy not found"):
        res.messages.append(f"{plan.py_spy_note}; writing the torch.profiler part only")
        say(res.messages[-1])
    py_spy: dict[str, Any] = {"used": plan.py_spy is not None, "note": plan.py_spy_note, "records": []}
    loop_stats = None
    child = _Child(plan, out, loop=plan.py_spy is not None)
    try:
        name, data = child.read()
        if name == "ready" and plan.py_spy is not None:
            half = plan.seconds / 2
            say(f"py-spy: sampling {plan.cell.variant} at {plan.rate} Hz, 2 x {half:g} s (pid {data['pid']})")
            for kind, fmt in (("flame", "flamegraph"), ("speedscope", "speedscope")):
                info, err = _record(plan, data["pid"], out / FILES[kind], fmt, half)
                info["file"] = FILES[kind]
                py_spy["records"].append(info)
                if err:
                    py_spy["error"] = err
                    res.messages.append(
                        f"{err}: it needs root or ptrace permission (Linux: "
                        f"sysctl kernel.yama.ptrace_scope=0 or CAP_SYS_PTRACE); install or upgrade it with "
                        f"{INSTALL_HINT}; going on with torch.profiler"
                    )
                    say(res.messages[-1])
                    break
            child.proc.send_signal(signal.SIGUSR1)  # stop looping, go on to torch.profiler
            name, data = child.read()
        if name == "looped":
            loop_stats = data
            name, data = child.read()
        if name == "started_profiler":
            say(f"torch.profiler: recording {plan.iters} call(s)")
            name, data = child.read()
        if name == "done":
            res.meta = data
        else:
            res.error = child.failure(data if name == "exit" else -1)
    finally:
        child.stop()
    res.meta = {
        "schema": SCHEMA,
        "kind": "attnbench profile",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cell": plan.cell.to_dict(),
        "cell_id": plan.cell.cell_id,
        "command": plan.command(),
        "py_spy": py_spy,
        "loop": loop_stats,
        **res.meta,
        "error": res.error,
    }
    (out / FILES["meta"]).write_text(json.dumps(res.meta, indent=1, default=str) + "\n")
    return res


# ---- the child: one cell, looped, then torch.profiler ----------------------------------------------------


def make_call(cell: CellSpec, seed: int) -> Callable[[], None]:
    """The cell's call exactly as harness.cell times it, on harness.cell.make_inputs' inputs."""
    from attnbench import variants

    from .cell import make_inputs, timed_call

    q, k, v, kl = make_inputs(cell, seed)  # (B, H, N, d_k), (B, H, N, d_k), (B, H, N, d_v), (B,)
    fn = variants.get(cell.variant).fn
    return timed_call(fn, q, k, v, backward=cell.pass_ == "fwdbwd", causal=cell.causal, key_lengths=kl)


def _send(name: str, data: Any = None) -> None:
    print(f"{PROTOCOL} {name} {json.dumps(data) if data is not None else ''}".rstrip(), flush=True)


def _allow_any_tracer() -> None:
    """prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): under Yama ptrace_scope=1 a non-root py-spy may then
    attach to this process although it is not its parent. A no-op where Yama is absent."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(
                0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF), 0, 0, 0
            )
        except (OSError, AttributeError):
            pass


def top_ops(prof, device: str) -> list[dict[str, Any]]:
    """torch.profiler's operators, biggest self time first (self CUDA time on cuda), times in ms."""
    cuda = device == "cuda"
    rows = []
    for e in prof.key_averages():
        row = {
            "name": e.key,
            "calls": int(e.count),
            "self_cpu_ms": e.self_cpu_time_total / 1e3,  # the profiler counts microseconds
            "total_cpu_ms": e.cpu_time_total / 1e3,
            "self_cpu_mem_bytes": int(e.self_cpu_memory_usage),
        }
        if cuda:
            row["self_cuda_ms"] = getattr(e, "self_device_time_total", 0) / 1e3
            row["total_cuda_ms"] = getattr(e, "device_time_total", 0) / 1e3
        rows.append(row)
    key = "self_cuda_ms" if cuda else "self_cpu_ms"
    total = sum(r[key] for r in rows) or 1.0
    for r in rows:
        r[key.replace("_ms", "_pct")] = 100.0 * r[key] / total
    return sorted(rows, key=lambda r: -r[key])


def child_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m attnbench.harness.profile", description="the profiled cell (internal)"
    )
    ap.add_argument("--cell", required=True, help="CellSpec.to_dict() as JSON")
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loop", type=float, default=0.0, help="loop until SIGUSR1, at most this many seconds")
    ap.add_argument("--variant-file", action="append", default=[])
    a = ap.parse_args(argv)

    from .worker import _die_with_parent

    _die_with_parent()
    _allow_any_tracer()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import torch

    from attnbench import variants

    for path in a.variant_file:
        variants.load_variant_file(path)
    if a.threads:
        torch.set_num_threads(a.threads)
    cell = CellSpec.from_dict(json.loads(a.cell))
    out = Path(a.out)
    sync = torch.cuda.synchronize if cell.device == "cuda" else (lambda: None)
    t0, n = time.perf_counter(), 0
    try:
        call = make_call(cell, a.seed)
        while n < 2 or time.perf_counter() - t0 < WARMUP_S:
            call()
            n += 1
        sync()
    except variants.UnsupportedError as exc:  # the backend refused this shape: a reason, not a traceback
        print(f"{cell.variant} refused this cell: {exc}", file=sys.stderr, flush=True)
        return 3

    if a.loop > 0:
        stop = []
        signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
        _send("ready", {"pid": os.getpid(), "warmup_calls": n})
        t0, n = time.perf_counter(), 0
        while not stop and time.perf_counter() - t0 < a.loop:
            call()
            n += 1
        sync()
        dt = time.perf_counter() - t0
        _send("looped", {"calls": n, "seconds": round(dt, 3), "ms_per_call": round(1e3 * dt / max(n, 1), 3)})

    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cell.device == "cuda" else [])
    _send("started_profiler")
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        t0 = time.perf_counter()
        for _ in range(a.iters):
            with record_function("attnbench.call"):  # one span per call in the trace
                call()
        sync()
        dt = time.perf_counter() - t0
    prof.export_chrome_trace(str(out / FILES["trace"]))
    rows = top_ops(prof, cell.device)
    with open(out / FILES["top_ops_csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["name"])
        w.writeheader()
        w.writerows(rows)

    from .fingerprint import collect

    _send(
        "done",
        {
            "torch_profiler": {
                "iterations": a.iters,
                "seconds": round(dt, 3),
                "ms_per_call": round(1e3 * dt / a.iters, 3),  # with the profiler's own overhead
                "activities": [str(x).split(".")[-1] for x in activities],
                "operators": len(rows),
            },
            "threads": torch.get_num_threads(),
            "fingerprint": collect(),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
