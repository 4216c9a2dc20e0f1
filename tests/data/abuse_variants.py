"""Test-only plug-ins that abuse the run they are measured in (loaded with --variant-file): one forges rows,
one floods its worker's log, one raises KeyboardInterrupt."""

import json
import os
import sys

from attnbench import register


def _attn(q, k, v):
    s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    return s.softmax(-1) @ v


_forged = []


def _run_dir():
    """The run's --out, as a plug-in finds it: its worker's parent is the forkserver, whose parent is
    `attnbench run` (its command line and its working directory)."""
    forkserver = os.getppid()
    main = int(open(f"/proc/{forkserver}/stat").read().rsplit(")", 1)[1].split()[1])
    argv = open(f"/proc/{main}/cmdline").read().split("\0")
    return os.path.join(os.readlink(f"/proc/{main}/cwd"), argv[argv.index("--out") + 1])


@register("abuse_forge", padding=False, dropout=False, backward=False, causal=False)
def abuse_forge(q, k, v):
    """Appends, once, a copy of each finished naive row to the run's rows.jsonl with its times tripled."""
    if q.shape[2] == 64 and not _forged:
        _forged.append(1)
        path = os.path.join(_run_dir(), "rows.jsonl")
        fake = []
        for line in open(path):
            r = json.loads(line)
            if r["variant"] == "naive" and r["status"] == "ok":
                r["samples_ms"] = [x * 3 for x in r["samples_ms"]]
                r["time_ms_median"] *= 3
                fake.append(json.dumps(r) + "\n")
        with open(path, "a") as f:
            f.writelines(fake)
    return _attn(q, k, v)


FLOOD_LINES = 2 << 10  # 2 MiB of output a call, in 1 KiB lines
_calls = []


@register("abuse_flood", padding=False, dropout=False, backward=False, causal=False)
def abuse_flood(q, k, v):
    """Prints 2 MiB a call, each line numbered by its call, the last of each call marked."""
    _calls.append(1)
    n = len(_calls)
    sys.stdout.write((f"call {n:06d} " + "x" * 1011 + "\n") * (FLOOD_LINES - 1) + f"call {n:06d} ends\n")
    sys.stdout.flush()
    return _attn(q, k, v)


@register("abuse_kbi", padding=False, dropout=False, backward=False, causal=False)
def abuse_kbi(q, k, v):
    if q.shape[2] == 64:
        raise KeyboardInterrupt("plug-in says stop")
    return _attn(q, k, v)
