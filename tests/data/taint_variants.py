"""Test-only variants that leave something behind in the process that runs them (loaded with --variant-file):
torch's process-wide state changed, or a process left running. Each answers correctly itself; what it
leaves would change its neighbours' rows if the harness let it (tests/harness/test_taint.py)."""

import os
import subprocess
import time

import torch

from attnbench import variants


def _naive(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)


@variants.register("taint_threads", description="torch.set_num_threads(1)")
def taint_threads(q, k, v, **kw):
    torch.set_num_threads(1)
    return _naive(q, k, v, **kw)


@variants.register("taint_grad", description="answers, then leaves grad mode off")
def taint_grad(q, k, v, **kw):
    with torch.enable_grad():
        out = _naive(q, k, v, **kw)
    torch.set_grad_enabled(False)  # outside torch.no_grad (a fwd+bwd call) this outlives the call
    return out


_SOFTMAX = torch.softmax


def _halved_softmax(x, dim=None, **kw):
    return _SOFTMAX(x * 0.5, dim=dim, **kw)


@variants.register("taint_softmax", description="replaces torch.softmax with a wrong one")
def taint_softmax(q, k, v, **kw):
    torch.softmax = _halved_softmax
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return torch.matmul(_SOFTMAX(scores, dim=-1), v)  # its own answer uses the real one


@variants.register("taint_dtype", description="torch.set_default_dtype(float64)")
def taint_dtype(q, k, v, **kw):
    torch.set_default_dtype(torch.float64)
    return _naive(q, k, v, **kw)


_CHILD = []


@variants.register("taint_child", description="starts a detached sleeper once per process")
def taint_child(q, k, v, **kw):
    if not _CHILD or _CHILD[-1].poll() is not None:
        _CHILD.append(subprocess.Popen(["sleep", "300"], start_new_session=True))
    return _naive(q, k, v, **kw)


_ORPHANS = []


@variants.register("taint_orphan", description="double fork: a sleeper whose parent exits at once")
def taint_orphan(q, k, v, **kw):
    if not _ORPHANS:
        # sh starts sleep in the background and exits: sleep is orphaned (re-parented away from sh)
        out = subprocess.run(
            ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
        )
        _ORPHANS.append(int(out.stdout))
    return _naive(q, k, v, **kw)


# the numerics probe's N (harness.measure.numerics.PROBE_SHAPE) and its gate's (gate_rows.TILE_N): answered
# there, so the probe goes on
PROBE_NS = (128, 300)


@variants.register("taint_child_hang", description="starts a detached sleeper, then never returns")
def taint_child_hang(q, k, v, **kw):
    if q.shape[2] in PROBE_NS:
        return _naive(q, k, v, **kw)
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.path.join(os.environ["ATTNBENCH_TEST_PIDS"], f"{child.pid}.pid"), "w"):
        pass
    while True:
        time.sleep(0.05)
