"""Test-only variants for the executors (loaded with --variant-file): which worker ran a cell, a cell that
waits without using the CPU, and one that kills the Ray actor it runs under."""

import multiprocessing
import os
import signal
import time
from pathlib import Path

from attnbench import variants


def _fine(q, k, v):
    return variants.get("naive").fn(q, k, v)


@variants.register("pin_probe", description="fails with the CUDA_VISIBLE_DEVICES its worker was given")
def pin_probe(q, k, v, **kw):
    pin = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    meet = os.environ.get("ATTNBENCH_TEST_PIN_MEET")
    if meet and pin != "unset":  # a folder: wait (at most 120 s) until workers of two pins have called here
        Path(meet, pin).touch()  # (an unpinned worker, the run's own, probes numerics before the pool starts)
        deadline = time.time() + 120
        while len(os.listdir(meet)) < 2 and time.time() < deadline:
            time.sleep(0.05)
    else:
        time.sleep(0.3)  # long enough that the pool's workers overlap
    raise RuntimeError(f"pinned CUDA_VISIBLE_DEVICES={pin} pid={os.getpid()} t={time.time():.3f}")


@variants.register("instant", description="answers at once (scheduling overhead)")
def instant(q, k, v, **kw):
    return _fine(q, k, v)


_waited: set = set()


@variants.register("sleep_1s", description="waits 1 s without using the CPU, once per shape, then answers")
def sleep_1s(q, k, v, **kw):
    key = tuple(q.shape)
    if key not in _waited:  # the first call of each cell: the cell then costs ~1 s however often it is timed
        _waited.add(key)
        time.sleep(float(os.environ.get("ATTNBENCH_TEST_SLEEP_S", "1")))
    return _fine(q, k, v)


@variants.register("kill_actor", description="once (marker file), SIGKILLs its parent: the Ray actor")
def kill_actor(q, k, v, **kw):
    marker = Path(os.environ["ATTNBENCH_TEST_KILL_MARKER"])
    if q.shape[2] == int(os.environ.get("ATTNBENCH_TEST_KILL_AT", "64")) and not marker.exists():
        # the process that started this worker (the actor; its parent process is the forkserver the actor
        # forks workers from): the forkserver ends with the actor, and the worker with it (PR_SET_PDEATHSIG)
        actor = multiprocessing.parent_process().pid
        marker.write_text(str(actor))
        os.kill(actor, signal.SIGKILL)
        time.sleep(60)
    return _fine(q, k, v)
