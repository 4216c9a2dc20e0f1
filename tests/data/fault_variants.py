"""Test-only variants that fail in every way a cell can fail (loaded with --variant-file)."""

import ctypes
import multiprocessing
import os
import time

import torch

from attnbench import variants


def _fine(q, k, v):
    return variants.get("naive").fn(q, k, v)


@variants.register("fault_raise", description="raises ValueError")
def fault_raise(q, k, v, **kw):
    raise ValueError("deliberate failure for the tests")


@variants.register("fault_oom", description="MemoryError from N >= 512 on")
def fault_oom(q, k, v, **kw):
    if q.shape[2] >= 512:
        raise MemoryError("deliberate out-of-memory")
    return _fine(q, k, v)


# The numerics probe of a run calls every variant at N = 128 (harness.measure.numerics.PROBE_SHAPE), and
# gates it at N = 300 (gate_rows.TILE_N): fault_abort and fault_hang answer there and fail on the sweep's
# cells only, so that a run of them restarts its worker for the cells and not also for the probe (fault_segv
# still crashes in the probe and its gate: a probe's dead worker is real).
PROBE_NS = (128, 300)


@variants.register("fault_abort", description="os.abort(): SIGABRT (answers at the probe's N = 128 and 300)")
def fault_abort(q, k, v, **kw):
    if q.shape[2] in PROBE_NS:
        return _fine(q, k, v)
    os.abort()


@variants.register("fault_segv", description="reads address 0: SIGSEGV")
def fault_segv(q, k, v, **kw):
    ctypes.string_at(0)


@variants.register("fault_hang", description="never returns (answers at the probe's N = 128 and 300)")
def fault_hang(q, k, v, **kw):
    if q.shape[2] in PROBE_NS:
        return _fine(q, k, v)
    while True:
        time.sleep(0.05)


@variants.register("fault_wrong", description="returns a wrong answer")
def fault_wrong(q, k, v, **kw):
    return _fine(q, k, v) + 0.1


@variants.register("fault_print", description="prints to stdout and stderr, answers correctly")
def fault_print(q, k, v, **kw):
    print("noise on stdout")
    os.write(2, b"noise on stderr\n")
    global _LOCK  # a named semaphore, as tqdm makes for its progress bars while torch.compile traces
    _LOCK = multiprocessing.get_context("forkserver").RLock()
    print("made semaphore", _LOCK._semlock.name)  # named in worker.log, for tests/harness/test_isolation.py
    return _fine(q, k, v)


@variants.register("fault_unsupported", description="refuses at call time", dtypes=("float32",))
def fault_unsupported(q, k, v, **kw):
    raise variants.UnsupportedError("this backend refuses odd sequence lengths")


@variants.register("fault_poison", description="raises what torch raises after a CUDA device-side assert")
def fault_poison(q, k, v, **kw):
    # On a GPU the real thing is tests/harness/test_cuda.py's out-of-bounds index; here, the same exception
    # type and text, so that the worker's exit-and-replace path runs on CPU too.
    raise torch.AcceleratorError("CUDA error: device-side assert triggered")


@variants.register(
    "fault_device_assert", description="an out-of-bounds index on the GPU: a real device-side assert",
    devices=("cuda",), dtypes=("float16", "bfloat16", "float32"),
)  # fmt: skip
def fault_device_assert(q, k, v, **kw):
    index = torch.tensor([q.shape[2] + 5], device=q.device)
    out = q[:, :, index]  # the indexing kernel asserts index < N on the device
    torch.cuda.synchronize()  # the assert surfaces here, inside the call, as torch.AcceleratorError
    return out


assert torch  # imported for its side effects in the variants above
